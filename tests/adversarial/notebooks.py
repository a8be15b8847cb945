"""Faults in the notebook file: broken JSON, a new name, test cells changed, metadata lost or repeated.

The grader reads only the answer cells (by grade_id, or by the definition they hold when the
metadata is gone) and the lesson's own setup cell; test cells and cells a student added are
never run, so what happens to them changes no score. A file that isn't a notebook gets a
one-line error and exit status 2.
"""

import json

import nbformat

from . import (CORRECT_SA, CORRECT_SDPA, NO_OUT_PROJ, PASSES, SA, SDPA, UNSCALED, WRONG_SA, WRONG_SDPA, added, answer,
               case, check_cell, code, lesson_notebook, write, WRONG_SA_EARNS, WRONG_SDPA_EARNS)

NOT_A_NOTEBOOK = "not a notebook"
ONLY_THE_FIRST = "only the first one is graded"


def _right_and_wrong():
    """The plain notebook whose attention is right (6) and whose module is wrong (0)."""
    return lesson_notebook([answer(CORRECT_SDPA, SDPA)], [answer(WRONG_SA, SA)])


def _without(notebook, keep):
    notebook.cells = [cell for cell in notebook.cells if keep(cell)]
    return notebook


def _is_test(cell):
    return cell.metadata.get("nbgrader", {}).get("grade_id", "").startswith("test_")


@case(runner="cli", exit_code=2, error=NOT_A_NOTEBOOK)
def truncated_json(ctx):
    """A notebook cut off halfway through its JSON: a one-line error, exit status 2."""
    path = write(lesson_notebook(), ctx.notebook)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    return path


@case(runner="cli", exit_code=2, error=NOT_A_NOTEBOOK)
def binary_garbage(ctx):
    """A .ipynb that holds bytes that aren't UTF-8 (a zip, say): a one-line error, exit status 2."""
    ctx.notebook.write_bytes(b"PK\x03\x04\xff\xfe\x00\x81" + bytes(range(256)) * 4)
    return ctx.notebook


@case(runner="cli", exit_code=2, error=NOT_A_NOTEBOOK)
def empty_file(ctx):
    """An empty .ipynb: a one-line error, exit status 2."""
    ctx.notebook.write_bytes(b"")
    return ctx.notebook


@case(deserved={SDPA: 6, SA: 4}, says={SDPA: (PASSES,), SA: (PASSES,)})
def odd_cells_around_the_answers(ctx):
    """Valid JSON with junk among the cells (not dicts, source as a number or with nulls, metadata as a list), one answer cell without metadata: both answers graded, full marks."""
    stripped = answer(CORRECT_SA, SA)
    stripped.metadata = {}  # found by what it defines, which means reading the junk cells' sources too
    notebook = json.loads(nbformat.writes(lesson_notebook(sa_cells=[stripped])))
    junk = ["a string, not a cell", 42, None, {"cell_type": "code"}, {"cell_type": "code", "source": 17, "metadata": []},
            {"cell_type": "code", "source": ["x = 1\n", None, 3], "metadata": {"nbgrader": "not a dict"}},
            {"cell_type": "markdown", "source": {"not": "text"}}, {"cell_type": "code", "metadata": {"nbgrader": None}}]
    cells = notebook["cells"]
    notebook["cells"] = junk[:4] + cells[:3] + junk[4:] + cells[3:]
    ctx.notebook.write_text(json.dumps(notebook, indent=1))
    return ctx.notebook


@case(deserved={SDPA: 6, SA: WRONG_SA_EARNS}, says={SDPA: (PASSES,), SA: (NO_OUT_PROJ,)})
def renamed_notebook(ctx):
    """The lesson saved as my_copy.ipynb, grade_ids intact: the lesson is found by its answer cells, right 6, wrong what it earns alone."""
    return write(_right_and_wrong(), ctx.folder / "my_copy.ipynb")


@case(runner="cli", deserved={SDPA: 6, SA: 4}, says={SDPA: (PASSES,), SA: (PASSES,)})
def renamed_notebook_through_the_cli(ctx):
    """`python -m autograder grade my_copy.ipynb --json` on a renamed, right notebook: exit 0, full marks."""
    return write(lesson_notebook(), ctx.folder / "my_copy.ipynb")


@case(deserved={SDPA: 6, SA: WRONG_SA_EARNS}, says={SDPA: (PASSES,), SA: (NO_OUT_PROJ,)})
def test_cells_deleted(ctx):
    """Every test cell deleted: they never counted, right 6, wrong what it earns alone."""
    return write(_without(_right_and_wrong(), lambda cell: not _is_test(cell)), ctx.notebook)


@case(deserved={SDPA: WRONG_SDPA_EARNS, SA: 4}, says={SDPA: (UNSCALED,), SA: (PASSES,)})
def test_cells_edited(ctx):
    """Test cells emptied, or rewritten to disarm check() and exit: they are never run, wrong what it earns alone, right 4."""
    notebook = lesson_notebook([answer(WRONG_SDPA, SDPA)], [answer(CORRECT_SA, SA)])
    edits = iter(["pass\n", code('''
        import os
        check = lambda *args, **kwargs: print("all checks passed")
        os._exit(0)
    ''')])
    for cell in notebook.cells:
        if _is_test(cell):
            cell.source = next(edits)
    return write(notebook, ctx.notebook)


@case(deserved={SDPA: 6, SA: 4}, says={SDPA: (PASSES,), SA: (PASSES,)})
def test_cells_duplicated(ctx):
    """Each test cell pasted three times, grade_ids and all: scores unchanged, full marks."""
    notebook = lesson_notebook()
    cells = []
    for cell in notebook.cells:
        cells += [cell, check_cell(cell.metadata["nbgrader"]["grade_id"][5:]), check_cell(
            cell.metadata["nbgrader"]["grade_id"][5:])] if _is_test(cell) else [cell]
    notebook.cells = cells
    return write(notebook, ctx.notebook)


@case(deserved={SDPA: 6, SA: WRONG_SA_EARNS}, says={SDPA: (PASSES,), SA: (NO_OUT_PROJ,)})
def metadata_stripped(ctx):
    """Every cell's metadata stripped (nbstripout, another editor): answer cells found by what they define, right 6, wrong what it earns alone."""
    notebook = _right_and_wrong()
    for cell in notebook.cells:
        cell.metadata = {}
    return write(notebook, ctx.notebook)


@case(deserved={SDPA: 6, SA: WRONG_SA_EARNS}, says={SDPA: (PASSES, ONLY_THE_FIRST), SA: (NO_OUT_PROJ, ONLY_THE_FIRST)})
def duplicate_grade_ids(ctx):
    """Two answer cells for each exercise under the same grade_id: the first counts (a right then a wrong attention 6; a wrong then a right module what the wrong module earns alone), and the message says so."""
    notebook = lesson_notebook([answer(CORRECT_SDPA, SDPA), answer(WRONG_SDPA, SDPA)],
                               [answer(WRONG_SA, SA), answer(CORRECT_SA, SA)])
    return write(notebook, ctx.notebook)


@case(deserved={SDPA: WRONG_SDPA_EARNS, SA: 4}, says={SDPA: (UNSCALED,), SA: (PASSES,)})
def hostile_added_cells(ctx):
    """Cells the student added: one that disarms the checks, one that redefines attention correctly after the wrong answer, one that exits, one that never ends: none runs, wrong what it earns alone, right 4."""
    notebook = lesson_notebook(
        [added(code('''
            import torch
            torch.allclose = lambda *args, **kwargs: True
            check = lambda *args, **kwargs: None
        ''')), answer(WRONG_SDPA, SDPA), added(CORRECT_SDPA)],
        [answer(CORRECT_SA, SA), added("import os\nos._exit(0)\n"), added("while True:\n    pass\n")])
    return write(notebook, ctx.notebook)
