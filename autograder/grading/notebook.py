"""Read a submitted notebook and find what the grader needs in it: the lesson and the answer cells."""

import ast
import json
from pathlib import Path

from ..curriculum import LESSONS

COURSE_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_PRELUDE = "import math\nimport torch\nfrom torch import nn\nimport torch.nn.functional as F\n"


class SubmissionError(Exception):
    """The input can't be graded at all (missing, not a notebook, unknown lesson): a one-line reason."""


def read_notebook(path):
    path = Path(path)
    if not path.exists():
        raise SubmissionError(f"{path}: no such file")
    if path.is_dir():
        raise SubmissionError(f"{path}: is a folder, not a notebook")
    try:
        notebook = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SubmissionError(f"{path}: not a notebook (not valid JSON: {exc.__class__.__name__})") from None
    if not isinstance(notebook, dict) or not isinstance(notebook.get("cells"), list):
        raise SubmissionError(f"{path}: not a notebook (no list of cells)")
    return notebook


def _source(cell):
    """A cell's code; "" when its source is neither a string nor a list of strings (a malformed cell)."""
    source = cell.get("source", "")
    if isinstance(source, list):
        return "".join(source) if all(isinstance(line, str) for line in source) else ""
    return source if isinstance(source, str) else ""


def _grade_id(cell):
    metadata = cell.get("metadata")
    nbgrader = metadata.get("nbgrader") if isinstance(metadata, dict) else None
    return nbgrader.get("grade_id") if isinstance(nbgrader, dict) else None


def code_cells(notebook):
    return [c for c in notebook["cells"] if isinstance(c, dict) and c.get("cell_type") == "code"]


def _defined_names(source):
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    return {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))}


def identify_lesson(path, notebook, lesson_name=None):
    """The lesson a notebook belongs to: as named, else by file name, else by its answer cells."""
    if lesson_name is not None:
        if lesson_name not in LESSONS:
            raise SubmissionError(f"unknown lesson {lesson_name!r}; the lessons are {', '.join(LESSONS)}")
        return LESSONS[lesson_name]
    stem = Path(path).stem
    if stem in LESSONS:
        return LESSONS[stem]
    ids = {_grade_id(c) for c in code_cells(notebook)}
    for lesson in LESSONS.values():
        if any(exercise.name in ids for exercise in lesson.exercises):
            return lesson
    raise SubmissionError(f"{path}: unknown lesson (name it with --lesson; the lessons are {', '.join(LESSONS)})")


def answer_cells(notebook, lesson):
    """{exercise name: source} for the lesson's answer cells.

    Found by nbgrader grade_id; where a cell's metadata was stripped, by the top-level
    definition of the exercise's name. With duplicates, the first cell counts.
    """
    cells = {}
    for cell in code_cells(notebook):
        grade_id = _grade_id(cell)
        if grade_id in {e.name for e in lesson.exercises} and grade_id not in cells:
            cells[grade_id] = _source(cell)
    for exercise in lesson.exercises:
        if exercise.name not in cells:
            for cell in code_cells(notebook):
                if _grade_id(cell) is None and exercise.name in _defined_names(_source(cell)):
                    cells[exercise.name] = _source(cell)
                    break
    return {e.name: cells[e.name] for e in lesson.exercises if e.name in cells}


def duplicate_answer_cells(notebook, lesson):
    """{exercise name: number of cells} for the exercises whose grade_id more than one cell has."""
    names = [_grade_id(cell) for cell in code_cells(notebook)]
    return {e.name: names.count(e.name) for e in lesson.exercises if names.count(e.name) > 1}


def setup_cell(notebook):
    for cell in code_cells(notebook):
        if _grade_id(cell) == "setup":
            return _source(cell)
    return None


def lesson_prelude(lesson, submission=None):
    """The code that runs before the answer cells: the lesson's own setup cell.

    Taken from the course's own copy (the student's could have been edited): the source notebook
    in solutions/, else the generated one in lessons/ (whose setup cell is the same, locked; a
    Gradescope autograder carries that one, never a solution), else from the submission, else
    the plain imports.
    """
    for folder in ("solutions", "lessons"):
        source = COURSE_ROOT / folder / lesson.name / f"{lesson.name}.ipynb"
        prelude = setup_cell(read_notebook(source)) if source.exists() else None
        if prelude is not None:
            return prelude
    if submission is not None and setup_cell(submission) is not None:
        return setup_cell(submission)
    return DEFAULT_PRELUDE


def course_folder(path):
    """The course a submitted notebook lies in: the nearest folder above it with nbgrader's
    configuration or gradebook, else the parent of its ``submitted`` folder, else its own folder."""
    path = Path(path).resolve()
    for folder in path.parents:
        if (folder / "nbgrader_config.py").exists() or (folder / "gradebook.db").exists():
            return folder
    for folder in path.parents:
        if folder.name == "submitted":
            return folder.parent
    return path.parent
