"""The trusted grader against hostile and faulty lesson-01 submissions (the corpus in tests/adversarial/).

Every case is graded with the hidden checks, as an instructor grades: in this process
(``grade``), through the CLI (``main``), or as `python -m autograder grade` in a process of its
own when the case attacks the grader's process or needs a course folder of its own. Each test
requires that grading finished, that each exercise got what its code deserves, that the
messages name what happened, that the submitted file is byte-identical afterwards, and that
nothing appeared or changed where the case tried to write.

The notebooks are graded two at a time, in a pool of processes that the first test starts; each
test waits for its own notebook (two cases share one when they concern different exercises).
"""

import json
import multiprocessing
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
import traceback
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from autograder.__main__ import main
from autograder.grading.grade import grade
from autograder.release import REPO
from tests.adversarial import LESSON, AtMost, Context, all_cases, build_sheet, changes, expectations, sheets, snapshot

CASES = all_cases()
SHEETS = sheets(CASES)
SHEET_OF = {case.name: sheet for sheet in SHEETS for case in sheet.cases}
SHEET_BY_ID = {sheet.id: sheet for sheet in SHEETS}
# Notebooks graded at once, each in a process of the pool (threads would share the ast module,
# which Python 3.11 doesn't make safe), each running one child at a time.
WORKERS = 2
# A place that is neither the repository nor the temporary folder, as a class's course folder may be.
OUTSIDE = Path("/var/tmp") if Path("/var/tmp").is_dir() else Path.home()


@dataclass
class Outcome:
    scores: dict = field(default_factory=dict)  # exercise -> points
    messages: dict = field(default_factory=dict)  # exercise -> list of messages
    crashed: str = ""  # how grading itself failed, if it did
    exit_code: int = 0
    stderr: str = ""
    changed: list = field(default_factory=list)  # what changed where nothing should have
    seconds: float = 0.0


def _gradebook(path):
    """A small stand-in for nbgrader's gradebook: a real SQLite file with scores in it."""
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE grade (student TEXT, exercise TEXT, auto_score REAL)")
    db.executemany("INSERT INTO grade VALUES (?, ?, ?)", [("eve", "scaled_dot_product_attention", 0.0), ("ada", "SelfAttention", 4.0)])
    db.commit()
    db.close()


def _context(case, base, made):
    """Where this case's notebook goes; for a course, the course folder is made first (and added to ``made``)."""
    if case.place == "tmp":
        folder = base / case.name
        folder.mkdir(parents=True)
        return Context(folder=folder, repo=REPO)
    course = Path(tempfile.mkdtemp(prefix=f"adversarial-{case.name}-", dir=OUTSIDE))
    made.append(course)
    if case.place == "course":  # a copy of the repository, used as the course folder as `make autograde` does
        ignore = shutil.ignore_patterns("__pycache__")
        shutil.copytree(REPO / "autograder", course / "autograder", ignore=ignore)
        shutil.copytree(REPO / "lesson_tools", course / "lesson_tools", ignore=ignore)  # the student package's too
        shutil.copytree(REPO / "solutions" / LESSON.name, course / "solutions" / LESSON.name, ignore=ignore)
        shutil.copy(REPO / "nbgrader_config.py", course / "nbgrader_config.py")
    _gradebook(course / "gradebook.db")
    folder = course / "submitted" / "eve" / LESSON.name
    folder.mkdir(parents=True)
    return Context(folder=folder, repo=REPO, course=course)


def _watched(sheet, ctx):
    paths = [ctx.folder]
    for case in sheet.cases:
        paths += list(case.watch(ctx)) if case.watch else []
    return paths


def _from_json(outcome, text):
    report = json.loads(text)
    outcome.scores = {name: grade["score"] for name, grade in report.items()}
    outcome.messages = {name: grade["messages"] for name, grade in report.items()}


def _grade_sheet(sheet_id, base):
    """Build and grade one notebook (in a pool's process, or in a `python -m autograder` of its own)."""
    sheet = SHEET_BY_ID[sheet_id]
    outcome, made = Outcome(), []
    try:
        ctx = _context(sheet.first, base, made)
        path = build_sheet(sheet, ctx)
        watched = _watched(sheet, ctx)
        before = snapshot(watched)
        start = time.monotonic()
        try:
            if sheet.first.runner == "process":
                env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
                run = subprocess.run([sys.executable, "-m", "autograder", "grade", str(path), "--json", "--timeout",
                                      str(sheet.timeout)], cwd=ctx.course or REPO, env=env, capture_output=True,
                                     text=True, timeout=600)
                outcome.exit_code, outcome.stderr = run.returncode, run.stderr
                if run.returncode != 0:
                    outcome.crashed = f"`python -m autograder grade` ended with status {run.returncode}: {run.stderr[-2000:]}"
                else:
                    _from_json(outcome, run.stdout)
            else:
                result = grade(path, hidden=True, step_timeout=sheet.timeout)
                outcome.scores = {name: g.score for name, g in result.exercises.items()}
                outcome.messages = {name: g.messages for name, g in result.exercises.items()}
        except Exception:  # what the grader must never do: recorded, and the case fails on it
            outcome.crashed = traceback.format_exc()
        outcome.seconds = time.monotonic() - start
        outcome.changed = changes(before, snapshot(watched))
    finally:
        for folder in made:
            shutil.rmtree(folder, ignore_errors=True)
    return outcome


def _run_cli(sheet, base, capsys):
    """`python -m autograder grade PATH --json` through main(), in this process."""
    outcome = Outcome()
    ctx = _context(sheet.first, base, [])
    path = build_sheet(sheet, ctx)
    before = snapshot(_watched(sheet, ctx))
    capsys.readouterr()
    try:
        outcome.exit_code = main(["grade", str(path), "--json", "--timeout", str(sheet.timeout)])
    except BaseException:  # SystemExit too: main returns its status, it doesn't exit
        outcome.crashed = traceback.format_exc()
    out, outcome.stderr = capsys.readouterr()
    if outcome.exit_code == 0 and not outcome.crashed:
        _from_json(outcome, out)
    outcome.changed = changes(before, snapshot(_watched(sheet, ctx)))
    return outcome


def _selected_cases(request):
    return {item.callspec.params["case"].name for item in request.session.items
            if getattr(item, "module", None) is request.module and "case" in getattr(getattr(item, "callspec", None), "params", {})}


@pytest.fixture(scope="module")
def graded(request, tmp_path_factory):
    """{sheet id: future Outcome} for every notebook that the selected tests need, graded in a pool."""
    wanted = _selected_cases(request)
    base = tmp_path_factory.mktemp("adversarial")
    pool = ProcessPoolExecutor(WORKERS, mp_context=multiprocessing.get_context("spawn"))
    futures = {sheet.id: pool.submit(_grade_sheet, sheet.id, base) for sheet in SHEETS
               if sheet.first.runner != "cli" and any(case.name in wanted for case in sheet.cases)}
    try:
        yield futures
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _judge(case, sheet, outcome):
    """What went wrong for this case, in words (empty: the grader withstood it)."""
    if outcome.crashed:
        return [f"grading failed: {outcome.crashed}"]
    problems = []
    if case.runner == "cli" and case.exit_code:
        if outcome.exit_code != case.exit_code:
            problems.append(f"exit status {outcome.exit_code}, expected {case.exit_code}")
        if case.error not in outcome.stderr or outcome.stderr.count("\n") != 1:
            problems.append(f"expected a one-line error saying {case.error!r}, got {outcome.stderr!r}")
    for name, (points, phrases) in expectations(case, sheet).items():
        messages = outcome.messages.get(name, [])
        score = outcome.scores.get(name)
        if not (score is not None and score <= points) if isinstance(points, AtMost) else score != points:
            problems.append(f"{name} scored {score}, deserves {'at most ' if isinstance(points, AtMost) else ''}"
                            f"{points}; messages: {messages}")
        text = "\n".join(messages).lower()
        missing = [phrase for phrase in phrases if phrase.lower() not in text]
        if missing:
            problems.append(f"{name}: the messages don't say {missing}: {messages}")
    problems += [f"changed where it must not: {change}" for change in outcome.changed]
    if case.leaves:
        problems += [f"a process it started outlived grading: pid {pid}, `{line}`" for pid, line in lingering(case.leaves)]
    return problems


def lingering(marker, grace=5.0):
    """(pid, command line) of the processes whose command line has the word ``marker``, once
    ``grace`` seconds have let the killed ones go (an ended namespace's processes are killed at once)."""
    deadline = time.monotonic() + grace
    while True:
        found = []
        for proc in Path("/proc").iterdir():
            try:
                words = (proc / "cmdline").read_bytes().split(b"\0")
            except OSError:  # not a process, or gone meanwhile
                continue
            if marker.encode() in words:
                found.append((int(proc.name), b" ".join(words).decode(errors="replace").strip()))
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_the_grader_withstands(case, graded, tmp_path, capsys):
    sheet = SHEET_OF[case.name]
    outcome = _run_cli(sheet, tmp_path, capsys) if case.runner == "cli" else graded[sheet.id].result()
    problems = _judge(case, sheet, outcome)
    assert not problems, f"{case.name}: {case.threat}\n  " + "\n  ".join(problems)


def test_every_case_says_its_threat_and_the_corpus_covers_both_exercises():
    names = [case.name for case in CASES]
    assert len(names) == len(set(names)), "two cases share a name"
    for case in CASES:
        assert ":" in case.threat, f"{case.name}: the threat should end with ': <deserved outcome>'"
        assert case.deserved or case.exit_code, f"{case.name} states no outcome"
    covered = {name for case in CASES for name in case.deserved}
    assert covered >= {e.name for e in LESSON.exercises}  # and, for forged evidence, other lessons' exercises
