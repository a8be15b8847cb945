"""An instructor's whole nbgrader round for lesson 01, as docs/instructors.md tells it.

In a throw-away copy of the course: generate the student version, register three
students, hand in a correct submission, an untouched one and one with a typical bug
(whose failing test cell the student deleted), grade with `python -m autograder autograde`
(`make autograde`: no `nbgrader autograde`, no kernel), export the grades to CSV and write
feedback. The grades must be full, zero and exactly the points of the one right exercise,
with nothing left for manual grading; the feedback must say what failed and not show the
hidden tests.
"""

import csv
import html
import shutil
import subprocess
import sys

import nbformat
import pytest
from traitlets.config.loader import PyFileConfigLoader

from autograder.curriculum import LESSONS
from autograder.lessons import IGNORED, REPO, source_notebook
from tests.adversarial import WRONG_SA_EARNS
from tests.nbcells import cell_with_id, solution_code

LESSON = LESSONS["01_self_attention"]
NOTEBOOK = f"{LESSON.name}.ipynb"

# A SelfAttention that forgets the output projection: right shapes, right weights, wrong output.
FORGOT_OUT_PROJ = '''\
class SelfAttention(nn.Module):
    def __init__(self, d_model):
        super().__init__()
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def forward(self, x, attn_mask=None):
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)  # (B, T, C) each
        out, weights = scaled_dot_product_attention(q, k, v, attn_mask)
        return out, weights
'''

# student id: (what they hand in, {test cell: points expected})
STUDENTS = {
    "ada": ("the solution", {f"test_{e.name}": e.points for e in LESSON.exercises}),
    "bo": ("the untouched stubs", {f"test_{e.name}": 0 for e in LESSON.exercises}),
    "cy": ("a right attention function, a SelfAttention without out_proj, its test cell deleted",
           {"test_scaled_dot_product_attention": LESSON.exercise("scaled_dot_product_attention").points,
            "test_SelfAttention": WRONG_SA_EARNS}),
}


def submission(release, source, student):
    nb = nbformat.from_dict(release)
    if student in ("ada", "cy"):
        for exercise in LESSON.exercises:
            cell_with_id(nb, exercise.name).source = solution_code(cell_with_id(source, exercise.name).source)
    if student == "cy":
        cell_with_id(nb, "SelfAttention").source = FORGOT_OUT_PROJ
        nb.cells.remove(cell_with_id(nb, "test_SelfAttention"))  # autograding puts it back
    return nb


@pytest.fixture(scope="module")
def course(tmp_path_factory, jupyter_env):
    """The course after a whole round: generated, submitted, autograded, exported, fed back."""
    if not source_notebook(LESSON.name).is_file():
        pytest.fail(f"solutions/{LESSON.name}/{NOTEBOOK} does not exist")
    root = tmp_path_factory.mktemp("course")
    shutil.copy(REPO / "nbgrader_config.py", root)  # its CourseDirectory.root is its own folder
    shutil.copytree(REPO / "solutions" / LESSON.name, root / "solutions" / LESSON.name, ignore=IGNORED)

    def run(module, *args):
        result = subprocess.run([sys.executable, "-m", module, *args], cwd=root, env=jupyter_env,
                                capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, f"{module} {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}"
        return result

    def nbgrader(*args):
        return run("nbgrader", *args)

    nbgrader("generate_assignment", LESSON.name)
    (root / "students.csv").write_text("id,first_name,last_name\n" +
                                       "".join(f"{s},{s.title()},Student\n" for s in STUDENTS))
    nbgrader("db", "student", "import", "students.csv")

    release = nbformat.read(root / "lessons" / LESSON.name / NOTEBOOK, as_version=4)
    source = nbformat.read(source_notebook(LESSON.name), as_version=4)
    for student in STUDENTS:
        path = root / "submitted" / student / LESSON.name / NOTEBOOK
        path.parent.mkdir(parents=True)
        nbformat.write(submission(release, source, student), path)

    log = run("autograder", "autograde", LESSON.name).stdout
    nbgrader("export", "--to", "grades.csv")
    nbgrader("generate_feedback", LESSON.name)
    return root, log


def test_release_has_stubs_only(course):
    root, _ = course
    text = (root / "lessons" / LESSON.name / NOTEBOOK).read_text()
    assert "raise NotImplementedError" in text
    assert "BEGIN SOLUTION" not in text and "BEGIN HIDDEN TESTS" not in text


def test_students_are_registered(course):
    root, _ = course
    with open(root / "grades.csv", newline="") as f:
        assert sorted(row["student_id"] for row in csv.DictReader(f)) == sorted(STUDENTS)


@pytest.mark.parametrize("student", STUDENTS)
def test_exported_score(course, student):
    root, log = course
    with open(root / "grades.csv", newline="") as f:
        row = next(row for row in csv.DictReader(f) if row["student_id"] == student)
    handed_in, expected = STUDENTS[student]
    assert float(row["max_score"]) == LESSON.max_score
    assert float(row["score"]) == sum(expected.values()), \
        f"{student} handed in {handed_in} and scored {row['score']} of {row['max_score']}, " \
        f"expected {sum(expected.values())}; autograde log:\n{log}"


@pytest.mark.parametrize("student", STUDENTS)
def test_score_of_each_exercise(course, student):
    from nbgrader.api import Gradebook

    root, _ = course
    course_id = PyFileConfigLoader("nbgrader_config.py", path=str(root)).load_config().CourseDirectory.course_id
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}", course_id) as gradebook:
        grades = gradebook.find_submission_notebook(LESSON.name, LESSON.name, student).grades
        scores = {grade.name: grade.score for grade in grades}
        left_to_grade = [grade.name for grade in grades if grade.needs_manual_grade]
    assert scores == STUDENTS[student][1], f"{student} handed in {STUDENTS[student][0]}"
    assert not left_to_grade, f"{student}: autograding left {left_to_grade} for manual grading"


@pytest.mark.parametrize("student", STUDENTS)
def test_feedback_shows_what_failed_but_not_the_hidden_tests(course, student):
    root, _ = course
    autograded = nbformat.read(root / "autograded" / student / LESSON.name / NOTEBOOK, as_version=4)
    tests = {cell.metadata.nbgrader["grade_id"]: cell for cell in autograded.cells
             if cell.metadata.get("nbgrader", {}).get("grade_id", "").startswith("test_")}
    assert set(tests) == set(STUDENTS[student][1]), "every test cell, a deleted one put back"
    assert all("BEGIN HIDDEN TESTS" in cell.source for cell in tests.values()), "the course's test cells"
    verdicts = {grade_id: cell.outputs[0].text for grade_id, cell in tests.items()}

    feedback = (root / "feedback" / student / LESSON.name / f"{LESSON.name}.html").read_text()
    for grade_id, points in STUDENTS[student][1].items():
        top = LESSON.exercise(grade_id.removeprefix("test_")).points
        assert verdicts[grade_id].startswith(f"Trusted grade: {points:g} / {top:g}"), verdicts[grade_id]
        assert html.escape(verdicts[grade_id].splitlines()[1], quote=False) in feedback, "it says what failed"
    assert "BEGIN HIDDEN TESTS" not in feedback and "check_hidden" not in feedback
