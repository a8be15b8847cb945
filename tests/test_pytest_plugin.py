"""The hidden checks as pytest (autograder/pytest_plugin.py) grade as `python -m autograder grade` does.

A folder laid out as nbgrader's submitted/ holds lesson 01 from four students: a correct
notebook, a buggy one (unscaled attention), the stubs, and a hostile one (it rebinds the checks
and patches torch, and its folder carries a conftest.py and a test file that would leave a mark
if pytest imported them). `pytest -p autograder.pytest_plugin --notebook submitted/` must give
one test per requirement of every exercise, named student/lesson::exercise::requirement, whose
points (junitxml properties) add up to the trusted grade of each notebook and of each exercise;
`-k`, `-x` and `--lf` must choose and stop as in any pytest run; nothing of a submission may run in
pytest's process.
"""

import math
import subprocess
import sys
import xml.etree.ElementTree as ElementTree

import nbformat
import pytest

from autograder.checks.compare import Report, RequirementResult
from autograder.curriculum import LESSONS
from autograder.grading.grade import grade
from autograder.lessons import REPO
from autograder.pytest_plugin import requirement_points, requirement_table
from tests.test_gradescope import BUGGY, student_notebook

LESSON = LESSONS["01_self_attention"]  # student_notebook's lesson
POINTS = {e.name: e.points for e in LESSON.exercises}

HOSTILE = BUGGY + '''
import autograder.checks as checks
checks.check = check = lambda *args, **kwargs: None
torch.allclose = lambda *args, **kwargs: True
'''
# Files a student may hand in beside the notebook; pytest must never import them.
MARK = "import pathlib; pathlib.Path(__file__).with_name('imported-by-pytest').write_text('')\n"
PLANTED = {"conftest.py": MARK, "test_full_marks.py": MARK + "def test_full_marks():\n    pass\n"}

KINDS = {"correct": "solution", "buggy": BUGGY, "stub": "stubs", "hostile": HOSTILE}


@pytest.fixture(scope="module")
def submitted(tmp_path_factory):
    root = tmp_path_factory.mktemp("course") / "submitted"
    for student, answers in KINDS.items():
        folder = root / student / LESSON.name
        folder.mkdir(parents=True)
        nbformat.write(student_notebook(answers), folder / f"{LESSON.name}.ipynb")
    for name, text in PLANTED.items():
        (root / "hostile" / LESSON.name / name).write_text(text)
    return root


def run_pytest(submitted, *options, cache="cache"):
    """(return code, stdout, {nodeid: (outcome, properties)}) of the plugin's pytest run; ``cache``
    names its cache folder (what --lf reads), beside the submissions."""
    xml = submitted.parent / "results.xml"
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "autograder.pytest_plugin", "-n", "0",
                           "-o", f"cache_dir={submitted.parent / cache}", f"--notebook={submitted}",
                           f"--junitxml={xml}", *options],
                          cwd=REPO, capture_output=True, text=True, timeout=900)
    cases = {}
    for case in ElementTree.parse(xml).iter("testcase"):
        nodeid = f"{case.get('classname').replace('.', '/', 1).replace('.', '::')}::{case.get('name')}"
        outcome = "failed" if case.find("failure") is not None else "passed"
        cases[nodeid] = (outcome, {p.get("name"): p.get("value") for p in case.iter("property")})
    return done.returncode, done.stdout, cases


@pytest.fixture(scope="module")
def graded(submitted):
    return run_pytest(submitted)


@pytest.fixture(scope="module")
def trusted(submitted):
    return {kind: grade(submitted / kind / LESSON.name / f"{LESSON.name}.ipynb", hidden=True) for kind in KINDS}


def test_one_test_per_requirement_named_after_student_lesson_exercise_requirement(graded):
    _, _, cases = graded
    expected = {f"{student}/{LESSON.name}::{exercise}::{key}"
                for student in KINDS for exercise in POINTS for key, _, _ in requirement_table(exercise)}
    assert set(cases) == expected


@pytest.mark.parametrize("kind", KINDS)
def test_the_points_add_up_to_the_trusted_grade(graded, trusted, kind):
    code, stdout, cases = graded
    assert code == 1, "some tests fail (the buggy, stub and hostile notebooks)"
    for exercise in POINTS:
        mine = {nodeid: case for nodeid, case in cases.items() if nodeid.startswith(f"{kind}/{LESSON.name}::{exercise}::")}
        assert sum(float(props["points"]) for _, props in mine.values()) == \
               pytest.approx(trusted[kind].exercises[exercise].score, abs=1e-9), (kind, exercise)
        passed = [outcome == "passed" for outcome, _ in mine.values()]
        assert all(passed) == (trusted[kind].exercises[exercise].score == POINTS[exercise]), (kind, exercise)
    assert f"{kind}/{LESSON.name}: {trusted[kind].score:g}" in stdout


def test_a_failing_test_says_what_the_grader_says(submitted):
    _, stdout, _ = run_pytest(submitted, "-k", "buggy and scaled_dot_product_attention and formula")
    assert "does not meet: computes softmax" in stdout and "not scaled" in stdout


def test_k_and_x_choose_and_stop_as_anywhere_in_pytest(submitted):
    code, _, cases = run_pytest(submitted, "-k", "correct and SelfAttention")
    assert code == 0 and set(cases) == {f"correct/{LESSON.name}::SelfAttention::{key}"
                                        for key, _, _ in requirement_table("SelfAttention")}
    code, _, cases = run_pytest(submitted, "-x", "-k", "stub")
    assert code == 1 and [outcome for outcome, _ in cases.values()] == ["failed"]


def test_lf_runs_only_what_failed_last_time(submitted):
    run_pytest(submitted, "-k", "correct or stub", cache="lf-cache")
    code, _, cases = run_pytest(submitted, "--lf", cache="lf-cache")
    assert code == 1 and cases and all(nodeid.startswith("stub/") for nodeid in cases)
    assert len(cases) == sum(len(requirement_table(name)) for name in POINTS)


def test_nothing_of_a_submission_runs_in_pytests_process(graded, submitted):
    assert not (submitted / "hostile" / LESSON.name / "imported-by-pytest").exists()


def _report(weights, met):
    requirements = {f"r{i}": RequirementResult(f"r{i}", "", weight, total=1, passed=int(ok))
                    for i, (weight, ok) in enumerate(zip(weights, met))}
    return Report("x", total=len(met), passed=sum(met), requirements=requirements)


@pytest.mark.parametrize("points, weights, met", [
    (10, (1, 1, 1), (True, True, False)),  # 6.66: shares of 3.333...
    (3, (2, 1, 1, 1, 1), (True, False, True, True, False)),
    (7, (0.5, 2, 0.5), (False, True, True)),
    (4, (2, 1, 0.5, 0.5), (True, True, True, True)),
    (4, (2, 1), (False, False)),
])
def test_the_points_of_the_requirements_add_up_to_the_exercise_score(points, weights, met):
    report = _report(weights, met)
    table = [(key, "", r.weight) for key, r in report.requirements.items()]
    earned = requirement_points(points, table, {k: r.met for k, r in report.requirements.items()}, report.score(points))
    assert math.isclose(sum(earned.values()), report.score(points), abs_tol=1e-9)
    assert all(value == 0 for key, value in earned.items() if not report.requirements[key].met)
