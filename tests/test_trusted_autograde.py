"""Trusted grading of a class into nbgrader's gradebook: scores a student cannot fake, nothing lost.

One throw-away course: nbgrader generates lesson 01, three students hand in (a right answer,
the untouched stubs, and a wrong attention function whose cell also disarms the checks so
that nbgrader's own autograde gives the notebook full marks). `python -m autograder autograde` must
then put the deserved scores into the gradebook and the CSV export, keep manual scores,
give the same result when run again, survive being killed midway, refuse a second run at
once, and never change a submitted file.
"""

import csv
import hashlib
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from autograder.curriculum import LESSONS
from autograder.grading.batch import course_lock
from autograder.lessons import IGNORED, REPO, source_notebook
from tests.nbcells import cell_with_id, solution_code

LESSON = LESSONS["01_self_attention"]
NOTEBOOK = f"{LESSON.name}.ipynb"
POINTS = {e.name: e.points for e in LESSON.exercises}

# Unscaled attention, plus code that replaces the check functions so that nothing can fail.
FAKER = '''\
def scaled_dot_product_attention(query, key, value, attn_mask=None):
    scores = query @ key.transpose(-2, -1)
    if attn_mask is not None:
        scores = scores.masked_fill(attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else scores + attn_mask
    weights = torch.softmax(scores, dim=-1)
    return weights @ value, weights

import autograder.checks.hidden
autograder.checks.hidden.check_hidden = lambda *args, **kwargs: None
check = lambda *args, **kwargs: None
torch.allclose = lambda *args, **kwargs: True
'''

STUDENTS = {  # student: (notebook's answers, trusted score per exercise)
    "ada": ("solution", POINTS),
    "bo": ("stubs", {name: 0 for name in POINTS}),
    # Eve's SelfAttention is right; it calls her own unscaled attention function, but is graded with a
    # correct one (one mistake costs one exercise).
    "eve": ("faker", {"scaled_dot_product_attention": 0, "SelfAttention": POINTS["SelfAttention"]}),
}


def _digest(root):
    return {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted((root / "submitted").rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def course(tmp_path_factory, jupyter_env):
    root = tmp_path_factory.mktemp("class")
    shutil.copy(REPO / "nbgrader_config.py", root)
    shutil.copytree(REPO / "solutions" / LESSON.name, root / "solutions" / LESSON.name, ignore=IGNORED)

    def run(*args, check=True):
        result = subprocess.run([sys.executable, "-m", *args], cwd=root, env=jupyter_env, capture_output=True,
                                text=True, timeout=900)
        assert not check or result.returncode == 0, f"{args} failed:\n{result.stdout}\n{result.stderr}"
        return result

    run("nbgrader", "generate_assignment", LESSON.name)
    (root / "students.csv").write_text("id,first_name,last_name\n" + "".join(f"{s},{s},S\n" for s in STUDENTS))
    run("nbgrader", "db", "student", "import", "students.csv")
    release = nbformat.read(root / "lessons" / LESSON.name / NOTEBOOK, as_version=4)
    source = nbformat.read(source_notebook(LESSON.name), as_version=4)
    for student, (kind, _) in STUDENTS.items():
        nb = nbformat.from_dict(release)
        if kind in ("solution", "faker"):
            for name in POINTS:
                cell_with_id(nb, name).source = solution_code(cell_with_id(source, name).source)
        if kind == "faker":
            cell_with_id(nb, "scaled_dot_product_attention").source = FAKER
        path = root / "submitted" / student / LESSON.name / NOTEBOOK
        path.parent.mkdir(parents=True)
        nbformat.write(nb, path)
    run("nbgrader", "autograde", LESSON.name)
    return root, run


def exported(root, run):
    run("nbgrader", "export", "--to", "grades.csv")
    with open(root / "grades.csv", newline="") as f:
        return {row["student_id"]: float(row["score"]) for row in csv.DictReader(f)}


@pytest.fixture(scope="module")
def graded(course):
    """The class after nbgrader's autograde and then one trusted run: (nbgrader's grades, the run's output, digest before)."""
    root, run = course
    by_nbgrader = exported(root, run)
    before = _digest(root)
    output = run("autograder", "autograde", LESSON.name).stdout
    return by_nbgrader, output, before


def test_nbgrader_alone_can_be_faked_and_the_trusted_grade_cannot(course, graded):
    root, run = course
    by_nbgrader, output, before = graded
    assert by_nbgrader["eve"] == LESSON.max_score, "nbgrader's in-kernel tests were expected to be fooled"
    assert "3 submission(s) graded" in output and "lost: scaled_dot_product_attention" in output
    assert exported(root, run) == {s: float(sum(scores.values())) for s, (_, scores) in STUDENTS.items()}
    assert _digest(root) == before, "grading must not change a submitted file"


def test_each_exercise_lands_on_its_test_cell_with_the_messages_as_comment(course, graded):
    from nbgrader.api import Gradebook

    root, _ = course
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}", "transformers-from-scratch") as gradebook:
        for student, (_, scores) in STUDENTS.items():
            for name, points in scores.items():
                grade = gradebook.find_grade(f"test_{name}", LESSON.name, LESSON.name, student)
                assert (grade.auto_score, grade.needs_manual_grade) == (points, False), (student, name)
        comment = gradebook.find_comment("scaled_dot_product_attention", LESSON.name, LESSON.name, "eve")
        assert "not scaled" in comment.auto_comment


def test_the_integrity_table_names_who_fooled_nbgrader_and_how(graded):
    _, output, _ = graded
    integrity = output.split("Integrity:")[1]
    rows = [line for line in integrity.splitlines() if line.startswith("eve ")]
    assert any("scaled_dot_product_attention" in row and "nbgrader's own run gave 6, the trusted grader 0" in row
               for row in rows), integrity
    assert any("replaces torch.allclose" in row for row in rows), integrity
    assert any("rebinds the check function check" in row for row in rows), integrity
    assert not any(line.startswith(("ada ", "bo ")) for line in integrity.splitlines()), integrity


def test_feedback_pages_show_the_trusted_score_and_messages_only(course, graded):
    root, run = course
    run("nbgrader", "generate_feedback", "--force", LESSON.name)
    for student, (_, scores) in STUDENTS.items():
        page = (root / "feedback" / student / LESSON.name / f"{LESSON.name}.html").read_text()
        for name, points in scores.items():
            assert f"Trusted grade: {points:g} / {POINTS[name]:g}" in page, (student, name)
        for name in POINTS:
            assert f"✓ {name} passes all" not in page, "nbgrader's own in-kernel verdict is still on the page"
        assert "BEGIN HIDDEN TESTS" not in page and "from autograder.checks.hidden import" not in page
    eve = (root / "feedback" / "eve" / LESSON.name / f"{LESSON.name}.html").read_text()
    assert "not scaled" in eve


def test_regrading_is_idempotent_and_keeps_manual_scores(course, graded):
    from nbgrader.api import Gradebook

    root, run = course
    url = f"sqlite:///{root / 'gradebook.db'}"
    with Gradebook(url, "transformers-from-scratch") as gradebook:
        grade = gradebook.find_grade("test_SelfAttention", LESSON.name, LESSON.name, "ada")
        grade.manual_score = 1.0  # the instructor overrides one score by hand
        gradebook.db.commit()
    first = exported(root, run)
    run("autograder", "autograde", LESSON.name)  # the second trusted run over the same submissions
    assert exported(root, run) == first
    with Gradebook(url, "transformers-from-scratch") as gradebook:
        grade = gradebook.find_grade("test_SelfAttention", LESSON.name, LESSON.name, "ada")
        assert (grade.manual_score, grade.score) == (1.0, 1.0)
        grade.manual_score = None
        gradebook.db.commit()


def test_a_second_run_at_once_is_refused(course):
    root, run = course
    with course_lock(root):
        result = run("autograder", "autograde", LESSON.name, check=False)
    assert result.returncode == 2
    assert "another grading run" in result.stderr and result.stderr.count("\n") == 1


def _descendants(pid):
    """Every process below ``pid``, found through /proc."""
    children = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        children.setdefault(int(fields[1]), []).append(int(proc.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _alive(pid):
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def test_a_run_killed_midway_leaves_the_gradebook_consistent(course, graded, jupyter_env):
    root, run = course
    expected = exported(root, run)  # the trusted grades
    db = sqlite3.connect(root / "gradebook.db")
    db.execute("UPDATE grade SET auto_score = NULL")  # as if never graded
    db.commit()
    before = _digest(root)
    child = subprocess.Popen([sys.executable, "-m", "autograder", "autograde", LESSON.name, "--jobs", "1"],
                             cwd=root, env=jupyter_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and child.poll() is None:
        graded = db.execute("SELECT COUNT(*) FROM grade WHERE auto_score IS NOT NULL").fetchone()[0]
        if graded:
            break
        time.sleep(0.05)
    workers = _descendants(child.pid)
    child.send_signal(signal.SIGKILL)
    child.wait()
    deadline = time.monotonic() + 10  # its pool's workers and their warm servers end with it
    while (left := [pid for pid in workers if _alive(pid)]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left, f"processes of the killed run are still alive: {left}"
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    per_submission = db.execute(
        "SELECT submitted_notebook.id, COUNT(grade.auto_score), COUNT(*) FROM grade "
        "JOIN submitted_notebook ON grade.notebook_id = submitted_notebook.id GROUP BY submitted_notebook.id"
    ).fetchall()
    assert all(done in (0, total) for _, done, total in per_submission), per_submission  # never half a submission
    assert any(done for _, done, _ in per_submission), "the run was killed before it recorded anything"
    db.close()
    assert _digest(root) == before
    run("autograder", "autograde", LESSON.name)  # the lock died with the process; a rerun completes
    assert exported(root, run) == expected
