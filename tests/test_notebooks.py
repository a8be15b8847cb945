"""The notebooks keep to the curriculum, and lessons/ is exactly what solutions/ generates.

solutions/ (the nbgrader source notebooks) must have, for every exercise of
autograder/curriculum.py, one answer cell and its test cell with the curriculum's
points; lessons/ must equal `make lessons`, carry no solution and no hidden test, and
run top to bottom with every exercise failing as "not implemented" and nothing else
failing. The ungraded introduction (00_start_here, curriculum.INTRODUCTION) is generated
and checked like a lesson with no exercises: nothing in it may fail. (The solutions
themselves are re-executed by nbval in `make test`.)
"""

import ast

import nbformat
import pytest
from nbclient import NotebookClient
from traitlets.config.loader import PyFileConfigLoader

from autograder.curriculum import EXERCISES, INTRODUCTION, LESSONS
from autograder.lessons import (REPO, generate, lesson_notebook, lessons_with_sources, notebooks_with_sources,
                                source_notebook)

LESSON_NAMES = lessons_with_sources()  # the graded lessons
NOTEBOOK_NAMES = notebooks_with_sources()  # everything `make lessons` generates: the introduction, then the lessons
NBGRADER_CONFIG = PyFileConfigLoader("nbgrader_config.py", path=str(REPO)).load_config()
BEGIN_SOLUTION, END_SOLUTION = "### BEGIN SOLUTION", "### END SOLUTION"
BEGIN_HIDDEN, END_HIDDEN = "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"


def read(path):
    return nbformat.read(path, as_version=4)


def nbgrader_meta(cell):
    return cell.metadata.get("nbgrader", {})


def exercises_of(name):
    """The exercises of a generated notebook, by name: none for the ungraded introduction."""
    return [exercise.name for exercise in LESSONS[name].exercises] if name in LESSONS else []


def number_of(name):
    """A notebook's place in the course: 0 for the introduction, N for lesson N."""
    return int(name[:2])


def the_cell(nb, grade_id):
    cells = [cell for cell in nb.cells if nbgrader_meta(cell).get("grade_id") == grade_id]
    assert len(cells) == 1, f"expected one cell with grade_id {grade_id!r}, found {len(cells)}"
    return cells[0]


def owner_of_test(grade_id, exercises):
    """The exercise a test cell belongs to: its grade_id is test_<name> or test_<name>_<more>."""
    for name in exercises:
        if grade_id == f"test_{name}" or grade_id.startswith(f"test_{name}_"):
            return name
    return None


def calls(source, function):
    """The (first argument, second argument) of every call `function(a, b, ...)` in the code."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == function:
            first = node.args[0].value if node.args and isinstance(node.args[0], ast.Constant) else None
            second = node.args[1].id if len(node.args) > 1 and isinstance(node.args[1], ast.Name) else None
            found.append((first, second))
    return found


def hidden_part(source):
    lines = source.splitlines()
    begin = next(i for i, line in enumerate(lines) if BEGIN_HIDDEN in line)
    end = next(i for i, line in enumerate(lines) if END_HIDDEN in line)
    return "\n".join(lines[begin + 1:end])


def expected_stub(solution_source, stub):
    """The answer cell a student gets: each solution region replaced by the stub, indented alike."""
    out, inside = [], False
    for line in solution_source.splitlines():
        if BEGIN_SOLUTION in line:
            indent = line[:len(line) - len(line.lstrip())]
            out.extend(indent + stub_line for stub_line in stub.splitlines())
            inside = True
        elif END_SOLUTION in line:
            inside = False
        elif not inside:
            out.append(line)
    return "\n".join(out)


def reference_imports(nb):
    """Names a notebook's code imports from autograder.reference, and whole-module imports of it."""
    names, modules = [], []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        for node in ast.walk(ast.parse(cell.source)):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("autograder.reference"):
                names.extend(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module == "autograder" and any(
                    alias.name == "reference" for alias in node.names):
                modules.append("autograder.reference")
            elif isinstance(node, ast.Import):
                modules.extend(a.name for a in node.names if a.name.startswith("autograder.reference"))
    return names, modules


def test_there_are_lessons():
    assert LESSON_NAMES, "no lesson has a source notebook in solutions/"


def test_the_introduction_comes_first_and_is_no_lesson():
    assert NOTEBOOK_NAMES[0] == INTRODUCTION, f"solutions/{INTRODUCTION}/{INTRODUCTION}.ipynb is missing"
    assert INTRODUCTION not in LESSONS and number_of(INTRODUCTION) < min(map(number_of, LESSONS))


def files_in(folder):
    """The files under `folder`, relative to it, less what Jupyter and Python leave (gitignored)."""
    return sorted(path.relative_to(folder) for path in folder.rglob("*") if path.is_file()
                  and not {".ipynb_checkpoints", "__pycache__"} & set(path.relative_to(folder).parts))


def folders_in(folder):
    return {path.name for path in folder.iterdir() if path.is_dir() and not path.name.startswith((".", "__"))}


def test_folders_hold_curriculum_lessons_only():
    solutions, known = folders_in(REPO / "solutions"), set(LESSONS) | {INTRODUCTION}
    assert solutions <= known, f"solutions/ has folders that are no lesson of curriculum.py: {solutions - known}"
    lessons = folders_in(REPO / "lessons")
    assert lessons == set(NOTEBOOK_NAMES), "lessons/ must hold exactly the notebooks generated from solutions/: run `make lessons`"


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    out = tmp_path_factory.mktemp("generated")
    generate(out)
    return out


@pytest.mark.parametrize("name", NOTEBOOK_NAMES)
def test_lessons_are_generated_from_solutions(name, generated):
    committed, fresh = REPO / "lessons" / name, generated / name
    files = files_in(fresh)
    assert files_in(committed) == files, \
        f"lessons/{name} does not hold the files that solutions/{name} generates: run `make lessons`"
    for relative in files:
        if relative.suffix == ".ipynb":
            got, want = read(committed / relative), read(fresh / relative)  # cell sources joined
            for i, (got_cell, want_cell) in enumerate(zip(got.cells, want.cells)):
                assert got_cell == want_cell, f"lessons/{name}/{relative}: cell {i} is out of date: run `make lessons`"
            assert got == want, f"lessons/{name}/{relative} is out of date: run `make lessons`"
        else:
            assert (committed / relative).read_bytes() == (fresh / relative).read_bytes(), \
                f"lessons/{name}/{relative} is out of date: run `make lessons`"


def test_generation_is_deterministic(generated, tmp_path):
    generate(tmp_path)
    for path in generated.rglob("*"):
        if path.is_file():
            again = tmp_path / path.relative_to(generated)
            assert again.read_bytes() == path.read_bytes(), f"two generations of {path.relative_to(generated)} differ"


@pytest.mark.parametrize("name", LESSON_NAMES)
def test_solution_notebook_has_the_curriculum_cells(name):
    nb = read(source_notebook(name))
    nbformat.validate(nb)
    lesson = LESSONS[name]
    exercises = [exercise.name for exercise in lesson.exercises]

    ids = [nbgrader_meta(cell)["grade_id"] for cell in nb.cells if "grade_id" in nbgrader_meta(cell)]
    assert len(ids) == len(set(ids)), f"grade_ids repeat: {sorted(i for i in ids if ids.count(i) > 1)}"

    setup = the_cell(nb, "setup")
    first_code = next(cell for cell in nb.cells if cell.cell_type == "code")
    assert setup is first_code, "the setup cell must be the first code cell"
    assert nbgrader_meta(setup).get("locked") and not nbgrader_meta(setup).get("grade"), "the setup cell is locked and not graded"

    for exercise in lesson.exercises:
        answer = the_cell(nb, exercise.name)
        meta = nbgrader_meta(answer)
        assert answer.cell_type == "code" and meta.get("solution") and not meta.get("grade"), \
            f"{exercise.name}: the answer cell must be a code cell with solution: true, grade: false"
        assert BEGIN_SOLUTION in answer.source and END_SOLUTION in answer.source, f"{exercise.name}: no solution region"
        defined = [node.name for node in ast.parse(answer.source).body
                   if isinstance(node, (ast.FunctionDef, ast.ClassDef))]
        assert defined == [exercise.name], f"{exercise.name}: the answer cell must define exactly `{exercise.name}`, defines {defined}"

        test = the_cell(nb, f"test_{exercise.name}")
        meta = nbgrader_meta(test)
        assert test.cell_type == "code" and meta.get("grade") and meta.get("locked") and not meta.get("solution"), \
            f"test_{exercise.name} must be a locked, graded code cell"
        assert meta.get("points") == exercise.points, \
            f"test_{exercise.name} is worth {meta.get('points')} points, curriculum.py says {exercise.points}"
        public = test.source.split(BEGIN_HIDDEN)[0]
        assert (exercise.name, exercise.name) in calls(public, "check"), \
            f"test_{exercise.name} must call check({exercise.name!r}, {exercise.name}) where students see it"
        assert BEGIN_HIDDEN in test.source and END_HIDDEN in test.source, f"test_{exercise.name} has no hidden tests"
        assert (exercise.name, exercise.name) in calls(hidden_part(test.source), "check_hidden"), \
            f"test_{exercise.name} must call check_hidden({exercise.name!r}, {exercise.name}) inside its hidden tests"

    for cell in nb.cells:
        meta = nbgrader_meta(cell)
        if meta.get("solution"):
            # An optional, ungraded exercise (e.g. RoPE in lesson 03) is stubbed like the others, never graded.
            optional = meta["grade_id"].endswith("_optional") and not meta.get("grade")
            assert meta["grade_id"] in exercises or optional, f"answer cell {meta['grade_id']!r} is no exercise of {name}"
        if meta.get("grade"):
            assert owner_of_test(meta["grade_id"], exercises), f"graded cell {meta['grade_id']!r} tests no exercise of {name}"
        if BEGIN_SOLUTION in cell.source:
            assert meta.get("solution"), f"a solution region outside an answer cell: {cell.source[:80]!r}"
        if BEGIN_HIDDEN in cell.source:
            assert meta.get("grade"), f"hidden tests outside a test cell: {cell.source[:80]!r}"
    points = sum(nbgrader_meta(cell).get("points", 0) for cell in nb.cells if nbgrader_meta(cell).get("grade"))
    assert points == lesson.max_score, f"{name} is worth {points} points, curriculum.py says {lesson.max_score}"


def test_the_introduction_is_ungraded_and_lists_every_lesson():
    nb = read(source_notebook(INTRODUCTION))
    nbformat.validate(nb)
    for cell in nb.cells:
        meta = nbgrader_meta(cell)
        assert not (meta.get("solution") or meta.get("grade")), f"{INTRODUCTION} is not graded: cell {meta.get('grade_id')!r}"
        for marker in (BEGIN_SOLUTION, BEGIN_HIDDEN, "check_hidden"):
            assert marker not in cell.source, f"{INTRODUCTION} holds {marker!r}"
    # Its list of lessons is prose: it must name every lesson of curriculum.py, in order.
    prose = "\n".join(cell.source for cell in nb.cells if cell.cell_type == "markdown")
    places = [prose.find(f"**{lesson.title}.**") for lesson in LESSONS.values()]
    missing = [lesson.title for lesson, place in zip(LESSONS.values(), places) if place < 0]
    assert not missing, f"{INTRODUCTION} does not describe the lessons {missing} (as **<title>.**)"
    assert places == sorted(places), f"{INTRODUCTION} describes the lessons out of order"


@pytest.mark.parametrize("name", NOTEBOOK_NAMES)
def test_solution_outputs_come_from_one_run_top_to_bottom(name):
    counts = [cell.execution_count for cell in read(source_notebook(name)).cells
              if cell.cell_type == "code" and cell.source.strip()]
    assert counts == list(range(1, len(counts) + 1)), \
        f"solutions/{name}: run the notebook from a fresh kernel, top to bottom, and save it (execution counts {counts})"


@pytest.mark.parametrize("notebook", [source_notebook, lesson_notebook], ids=["solutions", "lessons"])
@pytest.mark.parametrize("name", NOTEBOOK_NAMES)
def test_no_reference_of_this_lesson_or_later(name, notebook):
    names, modules = reference_imports(read(notebook(name)))
    assert not modules, f"import names from autograder.reference, not the module ({modules}), so that this can be checked"
    number = number_of(name)
    for imported in names:
        assert imported in EXERCISES, f"{name} imports `{imported}` from autograder.reference, which is no exercise"
        assert EXERCISES[imported].number < number, \
            f"{name} imports the reference `{imported}` of lesson {EXERCISES[imported].name}: only earlier lessons' are allowed"


@pytest.mark.parametrize("name", NOTEBOOK_NAMES)
def test_lesson_notebook_gives_nothing_away(name):
    path = lesson_notebook(name)
    text = path.read_text(encoding="utf-8")
    for secret in ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS",
                   "check_hidden", "autograder.checks.hidden"):
        assert secret not in text, f"lessons/{name} contains {secret!r}"

    lesson, source = read(path), read(source_notebook(name))
    stub = NBGRADER_CONFIG.ClearSolutions.code_stub["python"]
    for exercise in exercises_of(name):
        assert the_cell(lesson, exercise).source == expected_stub(the_cell(source, exercise).source, stub), \
            f"lessons/{name}: the answer cell of {exercise} must be the solution cell with its solution replaced by the stub"
    for i, cell in enumerate(lesson.cells):
        if cell.cell_type == "code":
            assert not cell.outputs and cell.execution_count is None, f"lessons/{name}: cell {i} has outputs"


@pytest.mark.parametrize("name", NOTEBOOK_NAMES)
def test_lesson_runs_and_only_the_exercises_fail(name, jupyter_env):
    path = lesson_notebook(name)
    nb = read(path)
    NotebookClient(nb, timeout=NBGRADER_CONFIG.Execute.timeout, allow_errors=True,  # per cell, as autograding
                   resources={"metadata": {"path": str(path.parent)}}).execute()

    exercises = exercises_of(name)
    failed = {}  # grade_id or cell index: exception name
    for i, cell in enumerate(nb.cells):
        for output in cell.get("outputs", []):
            if output.output_type == "error":
                failed[nbgrader_meta(cell).get("grade_id", f"cell {i}")] = output.ename
    for exercise in exercises:
        assert failed.get(f"test_{exercise}") == "NotImplementedError", \
            f"test_{exercise} must fail with NotImplementedError on the stub, got {failed.get(f'test_{exercise}')}"
    unexpected = {where: error for where, error in failed.items()
                  if not (owner_of_test(str(where), exercises) and error == "NotImplementedError")}
    assert not unexpected, f"lessons/{name}: cells that must run cleanly on the stubs failed: {unexpected}"


# The pictures the lessons promise: the kind of plot (a matplotlib call in the cell that draws
# it) and a word of its title, per lesson.
PROMISED_PICTURES = {
    "01_self_attention": [("imshow", "attention")],
    "02_multi_head_attention": [("imshow", "head")],
    "03_positional_encoding": [("imshow", "position")],
    "04_encoder": [("plot", "accuracy")],
    "05_decoder_masking": [("imshow", "mask")],
    "06_full_model": [("plot", "loss"), ("plot", "learning rate")],
    "07_language_model": [("plot", "loss"), ("imshow", "attention"), ("plot", "cache")],
    "08_modern_transformer": [("plot", "loss"), ("loglog", "memory"), ("plot", "distance")],
    "09_open_weights": [("plot", "permutation"), ("bar", "cache")],
}


def pictures(nb):
    """(cell source, decoded RGBA image) for every PNG output of a notebook."""
    import base64
    import io

    import matplotlib.image

    found = []
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            png = output.get("data", {}).get("image/png")
            if png:
                found.append((cell.source, matplotlib.image.imread(io.BytesIO(base64.b64decode(png)), format="png")))
    return found


@pytest.mark.parametrize("name", LESSON_NAMES)
def test_every_lesson_draws_its_pictures_with_titles_and_labels(name):
    drawn = pictures(read(source_notebook(name)))
    assert len(drawn) >= 2, f"{name}: LESSONS.md asks for at least one picture; this lesson has {len(drawn)}"
    for source, image in drawn:
        height, width = image.shape[:2]
        assert height >= 100 and width >= 200, f"{name}: a {width}x{height} picture is too small to read"
        assert image[..., :3].std() > 0.05, f"{name}: a picture is (nearly) one colour:\n{source[:300]}"
        assert "title(" in source or "set_title(" in source or "suptitle(" in source, \
            f"{name}: a picture without a title:\n{source[:300]}"
        assert "xlabel(" in source or "set_xlabel(" in source or "ticklabels(" in source, \
            f"{name}: a picture without labelled axes:\n{source[:300]}"
    for kind, word in PROMISED_PICTURES[name]:
        assert any(f"{kind}(" in source and word in source.lower() for source, _ in drawn), \
            f"{name}: no {kind} picture about {word!r}"


@pytest.mark.parametrize("name", NOTEBOOK_NAMES)
def test_lessons_carry_no_state_of_the_solution_run(name):
    """No widget state (the solution run's progress bars), no outputs, no execution counts."""
    nb = read(lesson_notebook(name))
    assert "widgets" not in nb.metadata, f"{name}: widget state of the solution run was handed out"
    assert not any(cell.get("outputs") or cell.get("execution_count") for cell in nb.cells if cell.cell_type == "code")
