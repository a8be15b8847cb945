"""The hidden checks as pytest: every requirement of every exercise of a submitted notebook is a test.

    python -m pytest -p autograder.pytest_plugin --notebook submitted/bob/07_language_model/07_language_model.ipynb
    python -m pytest -p autograder.pytest_plugin --notebook submitted/ --junitxml=grades.xml

``--notebook`` (repeatable) names a notebook or a folder of them (``submitted/``: every
``<student>/<lesson>/*.ipynb``). Each notebook is graded once, by the trusted grader
(``autograder.grading.grade.grade``, the one behind ``python -m autograder grade``), when its
first test runs: its answer cells run in the sandbox's children, never in pytest's process, and
nothing of the submission's folder is collected or imported by pytest (only the notebooks are
read, as JSON). The test ``<student>/<lesson>::<exercise>::<requirement>`` passes when the
grader found that requirement met; its message is the grader's, and its points go into
``--junitxml`` as the properties ``points`` and ``max_points`` (the points of an exercise's
items add up to its score, so a notebook's items add up to its grade). ``-k``, ``-x`` and
``--lf`` select and stop as anywhere in pytest; the summary prints each notebook's total.
Notebooks are graded one after another; ``-n 2 --dist loadgroup`` (pytest-xdist) grades two at
a time, each notebook's tests in one worker.
"""

import math
from pathlib import Path

import pytest

from .curriculum import LESSONS


def pytest_addoption(parser):
    group = parser.getgroup("autograder", "grading submitted notebooks with the hidden checks")
    group.addoption("--notebook", action="append", default=[], metavar="PATH",
                    help="a submitted notebook, or a folder of them (e.g. submitted/), to grade; repeatable")
    group.addoption("--grade-timeout", type=float, default=60.0, metavar="SECONDS",
                    help="seconds allowed per cell and per exercise (as python -m autograder grade --timeout)")


def _graded_paths(config):
    return [Path(p) for p in config.getoption("notebook", default=[]) or []]


def pytest_ignore_collect(collection_path, config):
    """With --notebook, nothing but the notebooks is collected: no test file and no conftest.py of
    the repository or of a submission's folder is loaded."""
    return True if _graded_paths(config) else None


def find_notebooks(paths):
    """The notebooks named, and those under each folder named, in order; checkpoints left out."""
    found = []
    for path in paths:
        if path.is_dir():
            found += sorted(p for p in path.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)
        else:
            found.append(path)
    return found


def _student(path):
    """The student a notebook belongs to: the folder under submitted/, else the notebook's folder."""
    parts = path.resolve().parts
    if "submitted" in parts[:-2]:
        below = len(parts) - parts[::-1].index("submitted")  # the part after the last "submitted"
        return parts[below]
    return path.resolve().parent.name


def _lesson(path):
    """The lesson a notebook is graded as: its folder's or its own name, else the grader decides."""
    for name in (path.stem, path.parent.name):
        if name in LESSONS:
            return name
    return None


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session, config, items):
    """Add a test per requirement of each notebook's lesson (before -k and --lf choose among them)."""
    for path in find_notebooks(_graded_paths(config)):
        name = f"{_student(path)}/{_lesson(path) or path.stem}"
        submission = Submission.from_parent(session, name=name, nodeid=name, notebook=path,
                                            timeout=config.getoption("grade_timeout"))
        for exercise in submission.collect():
            items.extend(exercise.collect())


def requirement_table(exercise_name):
    """[(key, text, weight)] of an exercise's requirements, as its hidden checks state them."""
    from .checks.hidden import specs

    return specs()[exercise_name].requirement_table() or [("all", "passes every check", 1.0)]


def requirement_points(points, table, met, score):
    """{key: points earned} for one exercise: each met requirement its share, rounded down to a
    hundredth, the last one met what is left of ``score``, so that they add up to the grader's score."""
    weights = sum(weight for _, _, weight in table)
    earned = {key: 0.0 for key, _, _ in table}
    if score <= 0:
        return earned
    met_keys = [key for key, _, _ in table if met.get(key, False)] or [table[-1][0]]
    for key, _, weight in table:
        if key in met_keys[:-1]:
            earned[key] = math.floor(100 * points * weight / weights + 1e-9) / 100
    earned[met_keys[-1]] = round(score - sum(earned.values()), 2)
    return earned


class Submission(pytest.Collector):
    """One notebook: its lesson's exercises, graded once, when the first of its tests runs."""

    def __init__(self, *, notebook, timeout, **kwargs):
        super().__init__(**kwargs)
        self.notebook, self.timeout = Path(notebook), timeout
        self._grade = None

    def lesson(self):
        from .grading.notebook import SubmissionError, identify_lesson, read_notebook

        try:
            return identify_lesson(self.notebook, read_notebook(self.notebook), _lesson(self.notebook))
        except SubmissionError:
            return LESSONS[_lesson(self.notebook)] if _lesson(self.notebook) else None

    def collect(self):
        lesson = self.lesson()
        if lesson is None:  # neither the name nor the cells say which lesson: one test says so
            return [Exercise.from_parent(self, name="(unknown lesson)", exercise=None)]
        return [Exercise.from_parent(self, name=e.name, exercise=e) for e in lesson.exercises]

    def grade(self):
        """The trusted grade (a NotebookGrade), or the SubmissionError why there is none; computed once."""
        from .grading.grade import SubmissionError, grade

        if self._grade is None:
            try:
                self._grade = grade(self.notebook, hidden=True, lesson_name=_lesson(self.notebook),
                                    step_timeout=self.timeout)
            except SubmissionError as exc:
                self._grade = exc
        return self._grade


class Exercise(pytest.Collector):
    def __init__(self, *, exercise, **kwargs):
        super().__init__(**kwargs)
        self.exercise = exercise

    def collect(self):
        if self.exercise is None:
            return [Requirement.from_parent(self, name="lesson", key=None, text="the notebook is of a known lesson",
                                            weight=1.0)]
        return [Requirement.from_parent(self, name=key, key=key, text=text, weight=weight)
                for key, text, weight in requirement_table(self.exercise.name)]


class NotMet(Exception):
    """A requirement the trusted grader found not met; its message is the grader's."""


class Requirement(pytest.Item):
    def __init__(self, *, key, text, weight, **kwargs):
        super().__init__(**kwargs)
        self.key, self.text, self.weight = key, text, weight
        # With pytest-xdist's --dist loadgroup, a notebook's tests stay in one worker: graded once.
        self.add_marker(pytest.mark.xdist_group(self.parent.parent.name))

    def runtest(self):
        submission, exercise = self.parent.parent, self.parent.exercise
        result = submission.grade()
        if isinstance(result, Exception):
            self.user_properties += [("points", 0.0), ("max_points", exercise.points if exercise else 0.0)]
            raise NotMet(f"{submission.notebook} could not be graded: {result}")
        self.user_properties.append(("isolation", result.isolation))
        if exercise is None:
            raise NotMet(f"{submission.notebook} was graded as {result.lesson}: name its folder or file after it")
        graded = result.exercises[exercise.name]
        table = requirement_table(exercise.name)
        earned = requirement_points(graded.max, table, graded.requirements, graded.score)[self.key]
        weights = sum(weight for _, _, weight in table)
        self.user_properties += [("points", earned), ("max_points", round(graded.max * self.weight / weights, 2))]
        if not (graded.requirements.get(self.key, False) and graded.score > 0):
            raise NotMet(f"{exercise.name} does not meet: {self.text}\n" + "\n".join(graded.messages))

    def repr_failure(self, excinfo):
        if isinstance(excinfo.value, NotMet):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self):
        return self.parent.parent.notebook, None, self.nodeid


def pytest_terminal_summary(terminalreporter, config):
    """Each graded notebook's total, summed over its tests' points, beside the grader's own."""
    if not _graded_paths(config):
        return
    totals = {}
    for reports in terminalreporter.stats.values():
        for report in reports:
            properties = dict(getattr(report, "user_properties", ()) or ())
            if getattr(report, "when", None) == "call" and "points" in properties:
                submission = report.nodeid.split("::")[0]
                totals[submission] = totals.get(submission, 0.0) + properties["points"]
    if totals:
        terminalreporter.section("trusted grades (sum of the tests' points)")
        for submission, total in sorted(totals.items()):
            terminalreporter.write_line(f"{submission}: {round(total, 2):g}")
