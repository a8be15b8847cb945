"""Seconds per solution notebook: nbval re-executing it, and the trusted grader grading it.

    python -m bench.notebooks                 both, every notebook in solutions/
    python -m bench.notebooks --only nbval    (or grade)
    python -m bench.notebooks --runs 5        five grading runs per lesson instead of three

nbval: `pytest --nbval --nbval-current-env --nbval-sanitize-with nbval_sanitize.cfg
--nbval-cell-timeout 300 solutions/<notebook>/` (what `make test` runs, one notebook at a
time here, in one process each), once per notebook, including the ungraded introduction.
grade: `python -m autograder grade solutions/<lesson>/<lesson>.ipynb`, ``--runs`` times per
graded lesson, the median wall time. Both are whole processes timed from outside, start-up
(Python, torch, the kernel or the sandbox) included: what a person waits for.
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the checkout's autograder, installed or not

from autograder.curriculum import LESSONS  # noqa: E402
from bench.report import Row, load_text, summary, table  # noqa: E402

NBVAL = ["--nbval", "--nbval-current-env", "--nbval-sanitize-with", "nbval_sanitize.cfg", "--nbval-cell-timeout", "300"]


def solution_notebooks(root=REPO):
    """Every solutions/<name>/<name>.ipynb, in order (the ungraded 00_start_here too, where there is one)."""
    return sorted(path.parent.name for path in (root / "solutions").glob("*/*.ipynb")
                  if path.stem == path.parent.name)


def scripts_env():
    """The environment with this Python's scripts first on PATH (nbgrader runs alembic by name; nbval
    starts a kernel)."""
    return dict(os.environ, PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))


def _timed(command, timeout):
    start = time.perf_counter()
    try:
        done = subprocess.run(command, cwd=REPO, env=scripts_env(), capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return time.perf_counter() - start, None
    return time.perf_counter() - start, done


def nbval(name, timeout=1800):
    """(wall seconds, outcome) of nbval re-executing solutions/<name>/; outcome like '21 passed'."""
    seconds, done = _timed([sys.executable, "-m", "pytest", *NBVAL, "-q", "-p", "no:cacheprovider",
                            "-o", "addopts=", f"solutions/{name}/"], timeout)
    if done is None:
        return seconds, f"timed out after {timeout} s"
    counts = re.findall(r"(\d+) (passed|failed|errors?|skipped)", done.stdout.splitlines()[-1] if done.stdout else "")
    outcome = ", ".join(f"{n} {what}" for n, what in counts) or f"pytest exit code {done.returncode}"
    return seconds, outcome


def grade(name, runs, timeout=900):
    """(median wall seconds, every run's seconds, 'score / max' or the error) of grading a solution notebook."""
    notebook = f"solutions/{name}/{name}.ipynb"
    times, outcome = [], ""
    for _ in range(runs):
        seconds, done = _timed([sys.executable, "-m", "autograder", "grade", notebook, "--json"], timeout)
        times.append(seconds)
        if done is None:
            outcome = f"timed out after {timeout} s"
        elif done.returncode:
            outcome = f"exit code {done.returncode}: {done.stderr.strip().splitlines()[-1:]}"
        else:
            result = json.loads(done.stdout)
            score = sum(e["score"] for e in result.values())
            outcome = f"{score:g} / {sum(e['max'] for e in result.values()):g} points"
    return statistics.median(times), times, outcome


def run_nbval():
    names = solution_notebooks()
    print(f"nbval: each solution notebook re-executed and compared with its saved outputs, one at a time; "
          f"{load_text()}")
    results = []
    for name in names:
        seconds, outcome = nbval(name)
        results.append((name, seconds, outcome))
        print(f"  {name}: {seconds:.1f} s ({outcome})", flush=True)
    total = sum(seconds for _, seconds, _ in results)
    lines = [(n, f"{s:.1f}", o) for n, s, o in results] + [("total", f"{total:.1f}", "")]
    print(table(["notebook", "wall s", "nbval"], lines, align=["<", ">", "<"]))
    print(f"After: {load_text()}")
    return [Row("nbval", name, f"{seconds:.1f} s", outcome) for name, seconds, outcome in results] + \
        [Row("nbval", f"all {len(results)} notebooks, one after another", f"{total:.1f} s", "sum")]


def run_grade(runs):
    names = [name for name in solution_notebooks() if name in LESSONS]
    print(f"autograder grade (trusted, hidden checks) on each solution notebook, median of {runs} run(s); "
          f"{load_text()}")
    results = []
    for name in names:
        median, times, outcome = grade(name, runs)
        results.append((name, median, times, outcome))
        print(f"  {name}: {median:.1f} s ({outcome})", flush=True)
    print(table(["lesson", "median s", "runs s", "result"],
                [(n, f"{m:.1f}", " ".join(f"{t:.1f}" for t in ts), o) for n, m, ts, o in results],
                align=["<", ">", "<", "<"]))
    print(f"After: {load_text()}")
    return [Row("grade", name, f"{median:.1f} s", f"median of {len(times)}; {outcome}")
            for name, median, times, outcome in results]


def add_arguments(parser):
    group = parser.add_argument_group("notebooks")
    group.add_argument("--runs", type=int, default=3, help="grading runs per lesson, median taken (default 3; "
                       "--quick: 1)")


def quicken(args):
    if getattr(args, "quick", False) and args.runs == 3:
        args.runs = 1


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bench.notebooks", description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    parser.add_argument("--only", choices=["nbval", "grade"], help="one of the two")
    parser.add_argument("--quick", action="store_true", help="one grading run per lesson")
    args = parser.parse_args(argv)
    quicken(args)
    found = []
    if args.only in (None, "nbval"):
        found += run_nbval()
        print()
    if args.only in (None, "grade"):
        found += run_grade(args.runs)
        print()
    print(summary(found))


if __name__ == "__main__":
    main()
