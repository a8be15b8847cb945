"""A JupyterHub class's round through nbgrader's exchange, as docs/instructors.md tells it.

In a throw-away course and exchange: the instructor registers lesson 07 with a due date in the
past and a late penalty of the whole score (`penalty_method = "zero"`), gives ada an extension,
and releases the lesson's bundle (`make release`'s folder: the notebook, the public checks and
Shakespeare's text). Two students, each in a home folder of their own, fetch it, solve it and
submit, bo with a stray file and Jupyter's checkpoints beside the notebook. The docs' collect
command must bring back the notebook and what `nbgrader submit` wrote beside it only; `python -m autograder autograde`
grades what was collected (ada on time thanks to the extension, bo late: his score is zeroed in
the export, his trusted raw score kept); the feedback goes back through the exchange and ada
fetches hers.
"""

import csv
import os
import re
import shutil
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import nbformat
import pytest

from autograder.curriculum import LESSONS
from autograder.lessons import IGNORED, REPO, source_notebook
from tests.nbcells import cell_with_id, solution_code

LESSON = LESSONS["07_language_model"]
NOTEBOOK = f"{LESSON.name}.ipynb"
COURSE_ID = "transformers-from-scratch"
STUDENTS = ("ada", "bo")


def documented_collect_command():
    """The collect command of docs/instructors.md (section 4), its continuation lines joined."""
    guide = (REPO / "docs" / "instructors.md").read_text()
    section = guide.split("## 4. Collect", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(nbgrader collect .*?)\n```", section, flags=re.S).group(1)
    return block.replace("\\\n", " ")


@pytest.fixture(scope="module")
def round_(tmp_path_factory, jupyter_env):
    base = tmp_path_factory.mktemp("hub")
    course, exchange = base / "course", base / "exchange"
    course.mkdir()
    exchange.mkdir()
    shutil.copy(REPO / "nbgrader_config.py", course)
    with open(course / "nbgrader_config.py", "a") as config:  # the docs' late-penalty setting
        config.write('\nc.LateSubmissionPlugin.penalty_method = "zero"\n')
    shutil.copytree(REPO / "solutions" / LESSON.name, course / "solutions" / LESSON.name, ignore=IGNORED)
    env = {**jupyter_env, "EXCHANGE": str(exchange)}

    def run(*args, cwd=course, home=None):
        done = subprocess.run(list(args), cwd=cwd, env={**env, **({"HOME": str(home)} if home else {})},
                              capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, f"{args} failed:\n{done.stdout}\n{done.stderr}"
        return done

    python = sys.executable
    run(python, "-m", "nbgrader", "generate_assignment", "--force", LESSON.name)
    run(python, "-m", "nbgrader", "db", "assignment", "add", LESSON.name, "--duedate=2020-01-06 17:00:00 UTC")
    for student in STUDENTS:
        run(python, "-m", "nbgrader", "db", "student", "add", student)
    extension = (f"from datetime import timedelta\nfrom nbgrader.api import Gradebook\n"
                 f"with Gradebook('sqlite:///gradebook.db', '{COURSE_ID}') as gb:\n"
                 f"    gb.update_or_create_submission('{LESSON.name}', 'ada', extension=timedelta(days=365 * 100))\n")
    run(python, "-c", extension)
    run(python, "-m", "autograder", "release", "release", LESSON.name[:2])
    run(python, "-m", "nbgrader", "release_assignment", LESSON.name, "--CourseDirectory.release_directory=release",
        f"--Exchange.root={exchange}")

    source = nbformat.read(source_notebook(LESSON.name), as_version=4)
    for student in STUDENTS:
        home = base / "home" / student
        home.mkdir(parents=True)
        run(python, "-m", "nbgrader", "fetch_assignment", LESSON.name, f"--course={COURSE_ID}",
            f"--Exchange.root={exchange}", cwd=home, home=home)
        path = home / LESSON.name / NOTEBOOK
        nb = nbformat.read(path, as_version=4)
        for exercise in LESSON.exercises:
            cell_with_id(nb, exercise.name).source = solution_code(cell_with_id(source, exercise.name).source)
        nbformat.write(nb, path)
        if student == "bo":
            (home / LESSON.name / "scratch.py").write_text("print('my notes')\n")
            (home / LESSON.name / ".ipynb_checkpoints").mkdir()
            shutil.copy(path, home / LESSON.name / ".ipynb_checkpoints" / f"{LESSON.name}-checkpoint.ipynb")
        run(python, "-m", "nbgrader", "submit", LESSON.name, f"--course={COURSE_ID}", f"--Exchange.root={exchange}",
            f"--student={student}", cwd=home, home=home)

    run("bash", "-c", documented_collect_command().replace("<lesson>", LESSON.name))
    graded = run(python, "-m", "autograder", "autograde", LESSON.name).stdout
    run(python, "-m", "nbgrader", "generate_feedback", LESSON.name)
    run(python, "-m", "nbgrader", "release_feedback", LESSON.name, f"--Exchange.root={exchange}")
    run(python, "-m", "nbgrader", "export")
    return course, base, graded, run


def test_collect_keeps_only_the_notebook_and_what_submit_wrote(round_):
    course, _, _, _ = round_
    for student in STUDENTS:
        folder = course / "submitted" / student / LESSON.name
        files = {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()}
        assert files == {NOTEBOOK, "timestamp.txt", "submission_secret.txt"}, (student, sorted(files))
    size = sum(p.stat().st_size for p in (course / "submitted").rglob("*") if p.is_file())
    assert size < 2 * 2**20, f"submitted/ holds {size} bytes: more than two notebooks"


def test_what_was_collected_is_graded_and_the_late_one_is_zeroed(round_):
    course, _, graded, _ = round_
    assert "2 submission(s) graded" in graded
    with open(course / "grades.csv", newline="") as f:
        rows = {row["student_id"]: row for row in csv.DictReader(f)}
    total = f"{LESSON.max_score:g}"
    assert (rows["ada"]["raw_score"], rows["ada"]["late_submission_penalty"], rows["ada"]["score"]) == \
           (total, "0", total)
    assert (rows["bo"]["raw_score"], rows["bo"]["late_submission_penalty"], rows["bo"]["score"]) == \
           (total, total, "0")
    assert rows["bo"]["duedate"].startswith("2020-01-06 17:00:00")


def test_the_feedback_goes_back_through_the_exchange(round_):
    course, base, _, run = round_
    home = base / "home" / "ada"
    run(sys.executable, "-m", "nbgrader", "fetch_feedback", LESSON.name, f"--course={COURSE_ID}",
        f"--Exchange.root={base / 'exchange'}", "--student=ada", cwd=home, home=home)
    pages = list((home / LESSON.name / "feedback").rglob("*.html"))
    # One account submitted for both, so it fetches both pages, --student or not (the docs say so).
    assert len(pages) == len(STUDENTS), pages
    assert any(f"(Score: {float(LESSON.max_score)} / {float(LESSON.max_score)})" in page.read_text() for page in pages)
    late = (course / "feedback" / "bo" / LESSON.name / f"{LESSON.name}.html").read_text()
    assert "Late submission penalty" in late
