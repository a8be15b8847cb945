"""Trusted grading of a class into nbgrader's gradebook: scores a student cannot fake, nothing lost.

One throw-away course, graded as docs/instructors.md now says (no `nbgrader autograde`):
nbgrader generates lesson 01, four students hand in (a right answer; the untouched stubs; a
wrong attention function whose cell also disarms the checks; the stubs plus a cell that opens
the course's gradebook.db with sqlite and gives itself full marks and extra credit), and
`python -m autograder autograde --jobs 2` grades them two at a time. It must then put the
deserved scores into the gradebook, autograded/, the feedback pages and the CSV export (scores
that the trusted grader does not give reset, and named), give the same result when run again,
regrade one student alone, survive being killed midway, refuse a second run at once, refuse
to write a gradebook without isolation unless told, and never change a submitted file.
"""

import contextlib
import csv
import hashlib
import io
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from autograder.__main__ import main as autograder_main
from autograder.curriculum import LESSONS
from autograder.grading import batch, sandbox
from autograder.grading.batch import course_lock
from autograder.lessons import IGNORED, REPO, source_notebook
from tests.adversarial import WRONG_SDPA_EARNS
from tests.nbcells import cell_with_id, solution_code

LESSON = LESSONS["01_self_attention"]
NOTEBOOK = f"{LESSON.name}.ipynb"
POINTS = {e.name: e.points for e in LESSON.exercises}
COURSE_ID = "transformers-from-scratch"

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

# What the student did from nbgrader autograde's kernel: full marks and extra credit for
# every row of the gradebook it can open (COURSE is the course folder's absolute path), and a
# mark that it ran with the course in view.
GRADEBOOK_WRITER = '''\
import pathlib, sqlite3
try:
    pathlib.Path(COURSE, "gradebook-writer-ran-here").write_text("")
    db = sqlite3.connect(str(pathlib.Path(COURSE, "gradebook.db")), timeout=30)
    db.execute("UPDATE grade SET manual_score = 40, extra_credit = 5")
    db.commit()
except Exception as exc:
    print("no gradebook here:", exc)

def scaled_dot_product_attention(query, key, value, attn_mask=None):
    raise NotImplementedError
'''

STUDENTS = {  # student: (notebook's answers, trusted score per exercise)
    "ada": ("solution", POINTS),
    "bo": ("stubs", {name: 0 for name in POINTS}),
    # Eve's unscaled attention earns what an honest unscaled one does (its dtype-device and gradient shares).
    # Eve's SelfAttention is right; it calls her own unscaled attention function, but is graded with a
    # correct one (one mistake costs one exercise).
    "eve": ("faker", {"scaled_dot_product_attention": WRONG_SDPA_EARNS, "SelfAttention": POINTS["SelfAttention"]}),
    "mal": ("gradebook writer", {name: 0 for name in POINTS}),
}
TRUSTED = {student: float(sum(scores.values())) for student, (_, scores) in STUDENTS.items()}


def _digest(root):
    return {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted((root / "submitted").rglob("*")) if p.is_file()}


def _notebook(release, source, kind, root):
    nb = nbformat.from_dict(release)
    if kind in ("solution", "faker"):
        for name in POINTS:
            cell_with_id(nb, name).source = solution_code(cell_with_id(source, name).source)
    if kind == "faker":
        cell_with_id(nb, "scaled_dot_product_attention").source = FAKER
    if kind == "gradebook writer":
        cell_with_id(nb, "scaled_dot_product_attention").source = GRADEBOOK_WRITER.replace("COURSE", repr(str(root)))
    return nb


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
        path = root / "submitted" / student / LESSON.name / NOTEBOOK
        path.parent.mkdir(parents=True)
        nbformat.write(_notebook(release, source, kind, root), path)
    return root, run


def exported(root, run):
    run("nbgrader", "export", "--to", "grades.csv")
    with open(root / "grades.csv", newline="") as f:
        return {row["student_id"]: float(row["score"]) for row in csv.DictReader(f)}


def _gradebook(root):
    from nbgrader.api import Gradebook

    return Gradebook(f"sqlite:///{root / 'gradebook.db'}", COURSE_ID)


@pytest.fixture(scope="module")
def graded(course):
    """The class after one trusted run, two notebooks at a time. Before it, bo's rows hold a manual
    score and extra credit, as an earlier `nbgrader autograde` kernel or a formgrader edit leaves
    them. Returns (the run's output, digest of submitted/ before)."""
    root, run = course
    with _gradebook(root) as gradebook:
        gradebook.add_submission(LESSON.name, "bo")
        grade = gradebook.find_grade("test_SelfAttention", LESSON.name, LESSON.name, "bo")
        grade.manual_score, grade.extra_credit = 4.0, 2.5
        gradebook.db.commit()
    before = _digest(root)
    output = run("autograder", "autograde", LESSON.name, "--jobs", "2").stdout
    return output, before


def test_the_trusted_scores_reach_the_gradebook_and_the_export(course, graded):
    root, run = course
    output, before = graded
    assert "4 submission(s) graded" in output and "lost: scaled_dot_product_attention" in output
    assert exported(root, run) == TRUSTED
    assert _digest(root) == before, "grading must not change a submitted file"


def test_each_exercise_lands_on_its_test_cell_with_the_messages_as_comment(course, graded):
    root, _ = course
    with _gradebook(root) as gradebook:
        for student, (_, scores) in STUDENTS.items():
            for name, points in scores.items():
                grade = gradebook.find_grade(f"test_{name}", LESSON.name, LESSON.name, student)
                assert (grade.auto_score, grade.manual_score, grade.extra_credit, grade.needs_manual_grade) == \
                       (points, None, None, False), (student, name)
        comment = gradebook.find_comment("scaled_dot_product_attention", LESSON.name, LESSON.name, "eve")
        assert "not scaled" in comment.auto_comment


def test_grade_says_which_isolation_the_code_ran_in(course):
    root, run = course
    output = run("autograder", "grade", f"submitted/ada/{LESSON.name}/{NOTEBOOK}").stdout
    assert output.splitlines()[-1] == f"  isolation: {sandbox.isolation().description}"


def test_a_cell_that_writes_the_gradebook_changes_nothing(course, graded):
    """mal's cell opens gradebook.db and sets manual_score 40 and extra_credit 5 on every row: in the
    round the docs describe now, it runs only in the sandbox, and whatever reaches the gradebook
    is reset when every job has ended."""
    root, run = course
    output, _ = graded
    rows = sqlite3.connect(root / "gradebook.db").execute(
        "SELECT COUNT(*) FROM grade WHERE manual_score IS NOT NULL OR extra_credit IS NOT NULL").fetchone()[0]
    assert rows == 0
    assert exported(root, run)["mal"] == 0.0
    if sandbox.isolation().level != "none":  # with isolation the course is out of its sight
        assert not (root / "gradebook-writer-ran-here").exists(), "the student's cell ran with the course in view"
        assert not any(line.startswith("mal ") for line in output.split("Integrity:")[1].splitlines()), output


def test_scores_the_grader_does_not_give_are_reset_and_named(graded):
    output, _ = graded
    assert output.startswith(f"Isolation of the students' code: {sandbox.isolation().description}")
    integrity = output.split("Integrity:")[1]
    rows = [line for line in integrity.splitlines() if line.startswith("bo ")]
    assert rows == [next(line for line in rows if "SelfAttention" in line)], integrity
    assert "manual_score 4 and extra_credit 2.5 on test_SelfAttention" in rows[0] and "reset" in rows[0]


def test_the_integrity_table_names_who_patched_the_tools_and_how(graded):
    output, _ = graded
    integrity = output.split("Integrity:")[1]
    rows = [line for line in integrity.splitlines() if line.startswith("eve ")]
    assert any("replaces torch.allclose" in row for row in rows), integrity
    assert any("rebinds the check function check" in row for row in rows), integrity
    assert not any(line.startswith("ada ") for line in integrity.splitlines()), integrity


def test_autograded_holds_the_submission_with_the_trusted_messages_and_nothing_run(course, graded):
    root, _ = course
    for student, (_, scores) in STUDENTS.items():
        nb = nbformat.read(root / "autograded" / student / LESSON.name / NOTEBOOK, as_version=4)
        for name, points in scores.items():
            cell = cell_with_id(nb, f"test_{name}")
            assert "BEGIN HIDDEN TESTS" in cell.source, "the course's test cell is put back, hidden tests and all"
            (output,) = cell.outputs
            assert output.text.startswith(f"Trusted grade: {points:g} / {POINTS[name]:g}\n"), (student, output.text)
        others = [cell for cell in nb.cells if cell.cell_type == "code"
                  and not cell.metadata.get("nbgrader", {}).get("grade_id", "").startswith("test_")]
        assert not any(cell.outputs or cell.execution_count for cell in others), "nothing of the notebook runs"


def test_the_autograded_notebook_keeps_no_cell_metadata_of_the_students_making(course):
    """A student's notebook whose test cell is edited, whose other test cell is deleted, and whose own
    cells claim to be graded (a made-up grade_id, a second copy of a test cell): the course's
    cells come back, and no cell of the student's counts."""
    root, _ = course
    nb = nbformat.read(root / "submitted" / "ada" / LESSON.name / NOTEBOOK, as_version=4)
    cell_with_id(nb, "test_scaled_dot_product_attention").source = "pass  # full marks"
    nb.cells.remove(cell_with_id(nb, "test_SelfAttention"))
    forged = nbformat.v4.new_code_cell("print('bonus')", metadata={"nbgrader": {
        "grade": True, "grade_id": "bonus", "points": 100, "locked": True, "solution": False, "schema_version": 3}})
    copy = nbformat.v4.new_code_cell("pass", metadata={"nbgrader": dict(
        cell_with_id(nb, "test_scaled_dot_product_attention").metadata.nbgrader)})
    nb.cells += [forged, copy]
    cells = batch.course_cells(f"sqlite:///{root / 'gradebook.db'}", LESSON.name)
    fixed = batch.course_version(nb, cells)
    graded_ids = [c.metadata["nbgrader"]["grade_id"] for c in fixed.cells if c.metadata.get("nbgrader", {}).get("grade")]
    assert graded_ids == [f"test_{name}" for name in POINTS]
    for name in POINTS:
        assert cell_with_id(fixed, f"test_{name}").source == cells[f"test_{name}"][1]
    assert "bonus" not in str([c.metadata for c in fixed.cells])


def test_feedback_pages_show_the_trusted_score_and_messages_only(course, graded):
    root, run = course
    run("nbgrader", "generate_feedback", "--force", LESSON.name)
    for student, (_, scores) in STUDENTS.items():
        page = (root / "feedback" / student / LESSON.name / f"{LESSON.name}.html").read_text()
        assert f"(Score: {TRUSTED[student]} / {float(LESSON.max_score)})" in page, student
        for name, points in scores.items():
            assert f"Trusted grade: {points:g} / {POINTS[name]:g}" in page, (student, name)
            assert f"✓ {name} passes all" not in page, "an in-kernel verdict is on the page"
        assert "BEGIN HIDDEN TESTS" not in page and "from autograder.checks.hidden import" not in page
    eve = (root / "feedback" / "eve" / LESSON.name / f"{LESSON.name}.html").read_text()
    assert "not scaled" in eve


def test_regrading_is_idempotent_and_resets_a_manual_score(course, graded):
    root, run = course
    with _gradebook(root) as gradebook:
        grade = gradebook.find_grade("test_SelfAttention", LESSON.name, LESSON.name, "ada")
        grade.manual_score = 1.0  # set by hand: make autograde owns the test cells' scores
        gradebook.db.commit()
    output = run("autograder", "autograde", LESSON.name).stdout
    assert exported(root, run) == TRUSTED
    assert any(line.startswith("ada ") and "manual_score 1 on test_SelfAttention" in line
               for line in output.splitlines()), output


def test_one_student_is_regraded_end_to_end(course, graded):
    """bo resubmits a solved notebook: his grade, gradebook row and feedback page change, no one else's."""
    root, run = course
    run("nbgrader", "generate_feedback", "--force", LESSON.name)
    pages = {s: root / "feedback" / s / LESSON.name / f"{LESSON.name}.html" for s in STUDENTS}
    before = {s: page.stat().st_mtime_ns for s, page in pages.items()}
    path = root / "submitted" / "bo" / LESSON.name / NOTEBOOK
    original = path.read_bytes()
    release = nbformat.read(root / "lessons" / LESSON.name / NOTEBOOK, as_version=4)
    nbformat.write(_notebook(release, nbformat.read(source_notebook(LESSON.name), as_version=4), "solution", root), path)
    try:
        output = run("autograder", "autograde", LESSON.name, "--student", "bo").stdout
        run("nbgrader", "generate_feedback", "--force", LESSON.name, "--student", "bo")
        assert "1 submission(s) graded" in output
        assert exported(root, run) == {**TRUSTED, "bo": float(LESSON.max_score)}
        assert f"(Score: {float(LESSON.max_score)} / {float(LESSON.max_score)})" in pages["bo"].read_text()
        assert {s: page.stat().st_mtime_ns for s, page in pages.items() if s != "bo"} == \
               {s: t for s, t in before.items() if s != "bo"}
    finally:
        path.write_bytes(original)  # the later tests take the gradebook as they find it


def test_the_export_rounds_scores_to_the_hundredth(course, graded):
    root, run = course
    db = sqlite3.connect(root / "gradebook.db")
    ids = db.execute("SELECT grade.id FROM grade JOIN submitted_notebook ON grade.notebook_id = submitted_notebook.id "
                     "JOIN submitted_assignment ON submitted_notebook.assignment_id = submitted_assignment.id "
                     "WHERE submitted_assignment.student_id = 'ada' ORDER BY grade.id").fetchall()
    kept = db.execute("SELECT id, auto_score FROM grade WHERE id IN (?, ?)", (ids[0][0], ids[1][0])).fetchall()
    for (grade_id,), score in zip(ids, (0.42, 2.3)):  # 0.42 + 2.3 is 2.7199999999999998 in floats
        db.execute("UPDATE grade SET auto_score = ? WHERE id = ?", (score, grade_id))
    db.commit()
    try:
        run("nbgrader", "export", "--to", "grades.csv")
        with open(root / "grades.csv", newline="") as f:
            ada = next(row for row in csv.DictReader(f) if row["student_id"] == "ada")
        assert (ada["raw_score"], ada["score"], ada["max_score"]) == ("2.72", "2.72", f"{LESSON.max_score:g}")
    finally:
        db.executemany("UPDATE grade SET auto_score = ? WHERE id = ?", [(score, i) for i, score in kept])
        db.commit()


def test_a_second_run_at_once_is_refused(course):
    root, run = course
    with course_lock(root):
        result = run("autograder", "autograde", LESSON.name, check=False)
    assert result.returncode == 2
    assert "another grading run" in result.stderr and result.stderr.count("\n") == 1


def test_without_isolation_no_gradebook_is_written_unless_the_flag_says_so(course, monkeypatch):
    root, _ = course
    monkeypatch.setattr(sandbox, "isolation", lambda: sandbox.Isolation("none", "none: as the grader's user"))
    before = (root / "gradebook.db").read_bytes()
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):
        code = autograder_main(["autograde", LESSON.name, "--course", str(root)])
    assert code == 2 and batch.NO_ISOLATION_FLAG in stderr.getvalue() and "no isolation" in stderr.getvalue()
    assert (root / "gradebook.db").read_bytes() == before


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
    assert exported(root, run) == TRUSTED
