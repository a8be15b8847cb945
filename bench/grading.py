"""Seconds per notebook: plain `nbgrader autograde` against the trusted `autograder autograde`.

    python bench/grading.py [--students 50] [--lessons 01_self_attention ...]

A synthetic class in a temporary course: each student hands in, per lesson, one of a correct
notebook, the untouched stubs, a catalogued wrong answer, or a hostile notebook that disarms
the in-notebook checks. Both graders run on the same submissions, one after the other, with
all cores; the table gives wall seconds per notebook for each and their ratio.
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from autograder.curriculum import LESSONS  # noqa: E402
from autograder.lessons import lessons_with_sources, source_notebook  # noqa: E402
from bench.notebooks import scripts_env  # noqa: E402
from tests.bug_catalog import all_bugs  # noqa: E402

KINDS = ("correct", "stub", "buggy", "hostile")
DISARM = ("\nimport autograder.checks.hidden\nautograder.checks.hidden.check_hidden = lambda *a, **k: None\n"
          "check = lambda *a, **k: None\n")


def _grade_id(cell):
    return cell.metadata.get("nbgrader", {}).get("grade_id")


def _solution(source):
    return "\n".join(l for l in source.splitlines() if "### BEGIN SOLUTION" not in l and "### END SOLUTION" not in l)


def submission(release, source, lesson, kind, index):
    nb = nbformat.from_dict(release)
    answers = {_grade_id(c): _solution(c.source) for c in source.cells if c.metadata.get("nbgrader", {}).get("solution")}
    if kind == "stub":
        return nb
    for cell in nb.cells:
        if _grade_id(cell) in answers:
            cell.source = answers[_grade_id(cell)]
    exercises = [e.name for e in LESSONS[lesson].exercises]
    if kind == "buggy":
        bugs = [b for _, b in all_bugs() if b.exercise in exercises]
        bug = bugs[index % len(bugs)]
        next(c for c in nb.cells if _grade_id(c) == bug.exercise).source = bug.source.strip("\n")
    if kind == "hostile":
        next(c for c in nb.cells if _grade_id(c) == exercises[0]).source += DISARM
    return nb


def run(args, cwd):
    env = scripts_env()
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=24 * 3600)
    if done.returncode:
        sys.exit(f"{' '.join(args)} failed:\n{done.stderr[-3000:]}")
    return time.perf_counter() - start


def make_class(root, lessons, students):
    """A course folder at ``root`` with ``students`` registered, each lesson generated in nbgrader,
    and one submission per student and lesson, the kinds taken in turn."""
    shutil.copy(REPO / "nbgrader_config.py", root)
    (root / "students.csv").write_text("id\n" + "".join(f"{s}\n" for s in students))
    run(["nbgrader", "db", "student", "import", "students.csv"], root)
    for lesson in lessons:
        shutil.copytree(REPO / "solutions" / lesson, root / "solutions" / lesson)
        run(["nbgrader", "generate_assignment", lesson], root)
        release = nbformat.read(root / "lessons" / lesson / f"{lesson}.ipynb", as_version=4)
        source = nbformat.read(source_notebook(lesson), as_version=4)
        for i, student in enumerate(students):
            path = root / "submitted" / student / lesson / f"{lesson}.ipynb"
            path.parent.mkdir(parents=True, exist_ok=True)
            nbformat.write(submission(release, source, lesson, KINDS[i % len(KINDS)], i), path)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--students", type=int, default=50)
    parser.add_argument("--lessons", nargs="*", default=lessons_with_sources())
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="grading-bench-"))
    try:
        students = [f"s{i:03d}" for i in range(args.students)]
        make_class(root, args.lessons, students)
        rows = []
        for lesson in args.lessons:
            plain = run(["nbgrader", "autograde", lesson, "--Execute.timeout=180"], root)
            trusted = run(["autograder", "autograde", lesson], root)
            rows.append((lesson, plain / len(students), trusted / len(students)))
        print(f"{len(args.lessons)} lesson(s) x {len(students)} students ({', '.join(KINDS)} in turn), "
              f"{os.cpu_count()} cores; wall seconds per notebook")
        print(f"{'lesson':<26} {'nbgrader autograde':>19} {'trusted autograde':>18} {'ratio':>6}")
        for lesson, plain, trusted in rows:
            print(f"{lesson:<26} {plain:>19.2f} {trusted:>18.2f} {trusted / plain:>6.2f}")
        plain_all = statistics.mean(r[1] for r in rows)
        trusted_all = statistics.mean(r[2] for r in rows)
        print(f"{'mean':<26} {plain_all:>19.2f} {trusted_all:>18.2f} {trusted_all / plain_all:>6.2f}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
