"""A student's progress across the whole course, in one table.

    python -m autograder check lessons/

finds each lesson's notebook under the folder (lessons/<lesson>/<lesson>.ipynb, or
<lesson>.ipynb directly in it), checks the saved notebooks with the public checks, the
same way `python -m autograder check NOTEBOOK` checks one, and prints one line per
exercise: passes or not, points, and why not.
"""

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from ..curriculum import LESSONS
from .grade import ExerciseGrade, NotebookGrade, grade
from .notebook import SubmissionError

PACKAGE = Path(__file__).resolve().parent.parent
WHY_WIDTH = 96


@dataclass
class LessonProgress:
    lesson: str
    path: Path | None
    grade: NotebookGrade | None = None
    error: str | None = None  # no notebook, or one that can't be checked at all

    @property
    def score(self):
        return self.grade.score if self.grade else 0

    @property
    def max(self):
        return LESSONS[self.lesson].max_score


def find_lesson_notebooks(folder):
    """{lesson name: notebook path or None} for every lesson of the course, in order."""
    folder = Path(folder)
    found = {}
    for name in LESSONS:
        candidates = [folder / name / f"{name}.ipynb", folder / f"{name}.ipynb"]
        found[name] = next((path for path in candidates if path.is_file()), None)
    return found


def _own_package(path):
    """The folder of a release bundle holding ``path``'s lesson (its own autograder beside it), else None.

    A bundle carries the public data of its lesson only (release.py), so a lesson found
    in another bundle is checked by that bundle's autograder.
    """
    folder = Path(path).resolve().parent
    package = folder / "autograder"
    if (package / "__init__.py").is_file() and package != PACKAGE:
        return folder
    return None


def _check_in_bundle(name, path, folder, hidden, step_timeout):
    command = [sys.executable, "-m", "autograder", "grade" if hidden else "check", str(Path(path).resolve()),
               "--json", "--lesson", name, "--timeout", str(step_timeout)]
    run = subprocess.run(command, cwd=folder, capture_output=True, text=True)
    if run.returncode != 0:
        lines = run.stderr.strip().splitlines() or [f"exit code {run.returncode}"]
        return LessonProgress(name, path, error=lines[-1])
    exercises = {exercise: ExerciseGrade(**fields) for exercise, fields in json.loads(run.stdout).items()}
    return LessonProgress(name, path, NotebookGrade(name, str(path), exercises))


def _check_one(name, path, hidden, step_timeout):
    if path is None:
        return LessonProgress(name, None, error="no notebook found")
    bundle = _own_package(path)
    if bundle is not None:
        return _check_in_bundle(name, path, bundle, hidden, step_timeout)
    try:
        return LessonProgress(name, path, grade(path, hidden=hidden, lesson_name=name, step_timeout=step_timeout))
    except SubmissionError as exc:
        return LessonProgress(name, path, error=str(exc))


def course_progress(folder, hidden=False, jobs=None, step_timeout=60.0, progress=True):
    """Check every lesson's notebook under ``folder``; returns one LessonProgress per lesson."""
    from tqdm.auto import tqdm

    notebooks = find_lesson_notebooks(folder)
    if not any(notebooks.values()):
        raise SubmissionError(f"{folder}: no lesson notebooks found (expected e.g. "
                              f"{Path(folder) / next(iter(LESSONS)) / (next(iter(LESSONS)) + '.ipynb')})")
    jobs = jobs or min(len(notebooks), os.cpu_count() or 1)
    # Each check runs its notebook in a child process of its own, so threads are enough here.
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(_check_one, name, path, hidden, step_timeout) for name, path in notebooks.items()]
        for _ in tqdm(as_completed(futures), total=len(futures), desc="checking", unit="lesson", disable=not progress):
            pass
    return [future.result() for future in futures]  # in the course's order


def why(messages):
    """The one line that says most about a failing exercise: the likely mistake, else the first line."""
    lines = [line.strip() for message in messages for line in message.splitlines() if line.strip()]
    if not lines:
        return ""
    line = next((line for line in lines if line.startswith("Likely mistake:")), lines[0])
    return line if len(line) <= WHY_WIDTH else line[:WHY_WIDTH - 1] + "…"


def progress_table(results, kind="public"):
    """The results as text: a line per exercise (or per lesson that could not be checked), then the course's total."""
    rows = []
    for result in results:
        if result.grade is None:
            rows.append((result.lesson, "", f"0 / {result.max:g}", "✗", result.error))
            continue
        for number, (name, exercise) in enumerate(result.grade.exercises.items()):
            passed = exercise.score == exercise.max
            rows.append((result.lesson if number == 0 else "", name, f"{exercise.score:g} / {exercise.max:g}",
                         "✓" if passed else "✗", "" if passed else why(exercise.messages)))
    passed = sum(exercise.score == exercise.max for r in results if r.grade for exercise in r.grade.exercises.values())
    total = sum(len(LESSONS[r.lesson].exercises) for r in results)
    score, maximum = sum(r.score for r in results), sum(r.max for r in results)
    header = ("lesson", "exercise", "points", "", "why not")
    widths = [max(len(row[i]) for row in rows + [header]) for i in range(3)]
    lines = [f"{header[0]:<{widths[0]}}  {header[1]:<{widths[1]}}  {header[2]:>{widths[2]}}     {header[4]}"]
    for lesson, name, points, mark, reason in rows:
        if lesson and len(lines) > 1:  # a blank line before each lesson but the first
            lines.append("")
        lines.append(f"{lesson:<{widths[0]}}  {name:<{widths[1]}}  {points:>{widths[2]}}  {mark}  {reason}".rstrip())
    rule = "-" * max(len(line) for line in lines)
    lines.insert(1, rule)
    lines.append(rule)
    lines.append(f"{'course':<{widths[0]}}  {f'{passed} of {total} exercises pass':<{widths[1]}}  "
                 f"{f'{score:g} / {maximum:g}':>{widths[2]}}")
    if kind == "hidden":
        lines.append("(hidden checks. For every failed check of one lesson: python -m autograder grade NOTEBOOK)")
    else:
        lines.append("(public checks on the saved notebooks: save in JupyterLab first. "
                     "For every failed check of one lesson: python -m autograder check NOTEBOOK)")
    return "\n".join(lines)
