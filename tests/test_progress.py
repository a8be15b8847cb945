"""`python -m autograder check lessons/`: the whole course's progress in one table."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from autograder.checks.public import load_public_data
from autograder.curriculum import LESSONS
from autograder.grading.grade import ExerciseGrade, NotebookGrade
from autograder.grading.progress import LessonProgress, find_lesson_notebooks, progress_table, why
from tests.bug_catalog import all_bugs
from tests.nbcells import cell_with_id

REPO = Path(__file__).resolve().parent.parent


def _bug(exercise, title):
    return next(bug for _, bug in all_bugs() if bug.exercise == exercise and bug.title == title)


def _replace_answer(path, grade_id, source):
    notebook = nbformat.read(path, as_version=4)
    cell_with_id(notebook, grade_id).source = source.strip()
    nbformat.write(notebook, path)


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    """A student's folder: lesson 01 solved, 02 missing, causal_mask wrong in 05, the rest stubs."""
    root = tmp_path_factory.mktemp("student") / "lessons"
    for name in LESSONS:
        if name == "02_multi_head_attention":
            continue
        source = REPO / ("solutions" if name == "01_self_attention" else "lessons") / name / f"{name}.ipynb"
        (root / name).mkdir(parents=True)
        shutil.copy(source, root / name)
    _replace_answer(root / "05_decoder_masking" / "05_decoder_masking.ipynb", "causal_mask",
                    _bug("causal_mask", "blocks the past").source)
    return root


def _check(*args):
    return subprocess.run([sys.executable, "-m", "autograder", "check", *map(str, args)],
                          capture_output=True, text=True, timeout=600, cwd=REPO)


def test_the_table_shows_every_exercise_with_its_verdict_and_why(course):
    run = _check(course)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()

    def line_of(exercise):
        found = [line for line in lines if f" {exercise} " in f"{line} "]
        assert len(found) == 1, (exercise, run.stdout)
        return found[0]

    for exercise in ("scaled_dot_product_attention", "SelfAttention"):
        assert "✓" in line_of(exercise) and "6 / 6" in line_of("scaled_dot_product_attention")
    assert "✗" in line_of("causal_mask") and "Likely mistake:" in line_of("causal_mask")
    assert "blocks the past" in line_of("causal_mask")
    assert "✗" in line_of("padding_mask") and "not implemented" in line_of("padding_mask")
    missing = [line for line in lines if line.startswith("02_multi_head_attention")]
    assert len(missing) == 1 and "no notebook found" in missing[0] and "0 / 10" in missing[0]
    for name in LESSONS:  # every lesson has a line, in the course's order
        assert sum(line.startswith(name) for line in lines) == 1, name
    assert [line.split()[0] for line in lines if line.split() and line.split()[0] in LESSONS] == list(LESSONS)
    course_line = next(line for line in lines if line.startswith("course"))
    # causal_mask blocks the past: its values requirement fails (any other it may still meet keeps its share).
    causal_score = float(line_of("causal_mask").split("/")[0].split()[-1])
    assert 0 <= causal_score < 2, line_of("causal_mask")
    exercises = sum(len(lesson.exercises) for lesson in LESSONS.values())
    points = sum(lesson.max_score for lesson in LESSONS.values())
    assert f"2 of {exercises} exercises pass" in course_line and f"{10 + causal_score:g} / {points}" in course_line


def test_json_gives_each_lessons_exercises(course, tmp_path):
    for name in ("01_self_attention", "05_decoder_masking"):  # two lessons keep this test short
        shutil.copytree(course / name, tmp_path / name)
    run = _check(tmp_path, "--json")
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    assert list(result) == list(LESSONS)
    assert result["02_multi_head_attention"] == {"error": "no notebook found"}
    self_attention = result["01_self_attention"]["SelfAttention"]
    assert (self_attention["score"], self_attention["max"]) == (4, 4)
    assert self_attention["messages"] == [f"passes all {len(load_public_data('01_self_attention')['SelfAttention']['probes'])} public checks"]
    assert 0 <= result["05_decoder_masking"]["causal_mask"]["score"] < 2
    assert set(result["05_decoder_masking"]) == {e.name for e in LESSONS["05_decoder_masking"].exercises}


def test_a_folder_without_lessons_is_a_one_line_error(tmp_path):
    run = _check(tmp_path)
    assert run.returncode == 2
    assert "no lesson notebooks found" in run.stderr and "Traceback" not in run.stderr
    run = _check(tmp_path, "--lesson", "01_self_attention")
    assert run.returncode == 2 and "--lesson" in run.stderr


def test_notebooks_are_found_in_lesson_folders_or_side_by_side(tmp_path):
    (tmp_path / "01_self_attention").mkdir()
    (tmp_path / "01_self_attention" / "01_self_attention.ipynb").write_text("{}")
    (tmp_path / "04_encoder.ipynb").write_text("{}")
    (tmp_path / "05_decoder_masking.ipynb").mkdir()  # not a file
    found = find_lesson_notebooks(tmp_path)
    assert list(found) == list(LESSONS)
    assert found["01_self_attention"] == tmp_path / "01_self_attention" / "01_self_attention.ipynb"
    assert found["04_encoder"] == tmp_path / "04_encoder.ipynb"
    assert found["05_decoder_masking"] is None and found["06_full_model"] is None


def test_why_prefers_the_likely_mistake_and_keeps_lines_short():
    assert why(["causal_mask fails 2 of 2 public checks.\nLikely mistake: it blocks the past.\n✗ [T=4]"]) == \
        "Likely mistake: it blocks the past."
    assert why(["running the answer cell raised NameError: x", "other"]) == "running the answer cell raised NameError: x"
    assert why([]) == ""
    long = why(["x" * 500])
    assert len(long) <= 96 and long.endswith("…")


def test_an_unreadable_notebook_costs_its_lesson_only():
    lesson = LESSONS["03_positional_encoding"]
    grades = {e.name: ExerciseGrade(e.points, e.points) for e in LESSONS["04_encoder"].exercises}
    table = progress_table([
        LessonProgress(lesson.name, Path("x.ipynb"), error="x.ipynb is not a notebook (bad JSON)"),
        LessonProgress("04_encoder", Path("y.ipynb"), NotebookGrade("04_encoder", "y.ipynb", grades)),
    ])
    assert "not a notebook" in table
    lines = table.splitlines()
    assert lines[lines.index(next(line for line in lines if line.startswith("04_encoder"))) - 1] == "", \
        "each lesson after the first starts after a blank line"
    assert "3 of 8 exercises pass" in table
    assert f"10 / {lesson.max_score + LESSONS['04_encoder'].max_score:g}" in table
