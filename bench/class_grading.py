"""A class graded at once: seconds per notebook with warm servers, with fresh interpreters, and
the floor of one `import torch`.

    python -m bench.class_grading                      100 students x every lesson, warm; 8 of them cold
    python -m bench.class_grading --students 20 --cold-students 4

A synthetic course (bench/grading.py's): each student hands in every graded lesson, as a correct
notebook, the untouched stubs, a catalogued wrong answer or a hostile notebook, in turn. Then
`python -m autograder autograde` grades the whole class with every core, as an instructor runs
it, timed from outside (start-up, the gradebook and the feedback rewrite included). The same
command with AUTOGRADER_WARM=0, which starts a fresh interpreter per job as the grader did before
its warm servers, grades the first ``--cold-students`` students again, for the ratio. The floor
is the median of five `python -c "import torch"`: what one fresh interpreter per notebook would
cost before checking anything. Every notebook's score is checked against its kind (a correct
notebook full marks, the stubs none), so a fast run that grades wrongly can't pass unnoticed.
"""

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from autograder.curriculum import LESSONS  # noqa: E402
from autograder.lessons import lessons_with_sources  # noqa: E402
from bench.grading import KINDS, make_class  # noqa: E402
from bench.notebooks import scripts_env  # noqa: E402
from bench.report import Row, load_text, quicken_defaults, summary, table  # noqa: E402

GOAL_SECONDS = 600  # 100 students x every lesson on two cores
BEFORE = 4.5  # seconds per notebook of the cold grader, as the issue measured it


def import_torch_seconds(runs=5):
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import torch"], check=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def autograde(root, students=None, warm=True):
    """(wall seconds, {(lesson, student): score}) of `python -m autograder autograde` on the course."""
    command = [sys.executable, "-m", "autograder", "autograde"]
    for student in students or ():
        command += ["--student", student]
    env = dict(scripts_env(), AUTOGRADER_WARM="1" if warm else "0")
    start = time.perf_counter()
    done = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode:
        raise RuntimeError(f"autograde failed ({done.returncode}): {done.stderr[-2000:]}")
    scores = {}
    for line in done.stdout.splitlines():
        found = re.match(r"(\S+)\s+(s\d+)\s+([\d.]+) / ", line)
        if found:
            scores[(found[1], found[2])] = float(found[3])
    return seconds, scores


def wrong_scores(scores, students):
    """Notebooks whose score doesn't fit their kind: a correct one below full marks, a stub above 0."""
    kind_of = {student: KINDS[i % len(KINDS)] for i, student in enumerate(students)}
    wrong = []
    for (lesson, student), score in scores.items():
        kind = kind_of[student]
        if (kind == "correct" and score != LESSONS[lesson].max_score) or (kind == "stub" and score != 0):
            wrong.append(f"{student} {lesson} ({kind}): {score:g}")
    return wrong


def run(students=100, cold_students=8, lessons=None):
    lessons = lessons or [name for name in lessons_with_sources() if name in LESSONS]
    names = [f"s{i:03d}" for i in range(students)]
    cold_names = names[:cold_students]
    print(f"A class of {students} students x {len(lessons)} lessons ({', '.join(KINDS)} in turn), graded by "
          f"`python -m autograder autograde` on {os.cpu_count()} cores; {load_text()}", flush=True)
    root = Path(tempfile.mkdtemp(prefix="class-bench-"))
    try:
        start = time.perf_counter()
        make_class(root, lessons, names)
        print(f"  the course built in {time.perf_counter() - start:.0f} s", flush=True)
        floor = import_torch_seconds()
        warm_seconds, warm_scores = autograde(root)
        count = len(warm_scores)
        print(f"  warm: {count} notebooks in {warm_seconds:.1f} s", flush=True)
        cold_seconds, cold_scores = autograde(root, cold_names, warm=False) if cold_names else (0.0, {})
        if cold_names:
            print(f"  cold: {len(cold_scores)} notebooks in {cold_seconds:.1f} s", flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    problems = []
    if count != students * len(lessons):
        problems.append(f"{count} notebooks graded of {students * len(lessons)}")
    problems += wrong_scores(warm_scores, names)
    differ = [key for key, score in cold_scores.items() if warm_scores.get(key) != score]
    if differ:
        problems.append(f"warm and cold scores differ on {len(differ)} notebooks, e.g. {differ[:3]}")
    warm_each = warm_seconds / max(count, 1)
    cold_each = cold_seconds / max(len(cold_scores), 1)
    lines = [("warm servers (the grader now)", f"{count}", f"{warm_seconds:.1f}", f"{warm_each:.2f}"),
             ("fresh interpreters (AUTOGRADER_WARM=0)", f"{len(cold_scores)}", f"{cold_seconds:.1f}",
              f"{cold_each:.2f}" if cold_scores else "-"),
             ("the issue's figure for the cold grader", "", "", f"{BEFORE:.2f}"),
             ("one `import torch` (median of 5)", "", "", f"{floor:.2f}")]
    print(table(["grader", "notebooks", "wall s", "s per notebook"], lines, align=["<", ">", ">", ">"]))
    verdict = "PASS" if warm_seconds <= GOAL_SECONDS * count / (100 * len(lessons)) and not problems else "FAIL"
    print(f"Goal: 100 students x {len(lessons)} lessons within {GOAL_SECONDS} s on two cores, i.e. "
          f"{GOAL_SECONDS / (100 * len(lessons)):.2f} s per notebook: {verdict}"
          + (f"; problems: {'; '.join(problems)}" if problems else ""))
    print(f"After: {load_text()}")
    rows = [Row("class", f"{count} notebooks ({students} students x {len(lessons)} lessons), warm",
                f"{warm_seconds:.0f} s", f"{warm_each:.2f} s per notebook; goal {GOAL_SECONDS} s for 800: {verdict}")]
    if cold_scores:
        rows.append(Row("class", f"{len(cold_scores)} of them, fresh interpreters", f"{cold_each:.2f} s per notebook",
                        f"warm is {cold_each / warm_each:.1f}x faster; the issue measured {BEFORE} s"))
    rows.append(Row("class", "one `import torch`", f"{floor:.2f} s", "median of 5: the floor of a fresh interpreter"))
    return rows


def add_arguments(parser):
    group = parser.add_argument_group("class")
    group.add_argument("--students", type=int, default=100, help="the class's size (default 100; --quick: 20)")
    group.add_argument("--cold-students", type=int, default=8,
                       help="students graded again with fresh interpreters, for the ratio (default 8; --quick: 4)")


def quicken(args):
    quicken_defaults(args, {"students": (100, 20), "cold_students": (8, 4)})


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bench.class_grading", description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    parser.add_argument("--quick", action="store_true", help="20 students, 4 of them cold")
    parser.add_argument("--lessons", nargs="*", help="only these lessons (default: every graded lesson)")
    args = parser.parse_args(argv)
    quicken(args)
    print(summary(run(args.students, args.cold_students, args.lessons)))


if __name__ == "__main__":
    main()
