"""Hostile and faulty lesson-01 submissions, to judge the trusted grader (tests/test_adversarial.py).

Each case is one small builder, registered with ``@case``, whose docstring's first line says
the threat and the outcome it deserves. Most cases write one answer cell (plus, sometimes,
cells a student added); the test puts a case for ``scaled_dot_product_attention`` and one for
``SelfAttention`` into the same notebook, since the grader scores them apart. Cases that need
the whole file (broken JSON, renamed notebooks, edited test cells, a course folder, the CLI)
build the notebook themselves.

A case states what the code deserves (full marks when what runs in the grader is right, 0
when it is wrong, whatever it does to the grader), phrases the messages must contain, and the
places it tries to write to; the test also requires that the submitted file is unchanged.
``summary()`` lists the cases.
"""

import hashlib
import importlib
import inspect
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from autograder.curriculum import LESSONS

LESSON = LESSONS["01_self_attention"]
NOTEBOOK = f"{LESSON.name}.ipynb"
SDPA, SA = "scaled_dot_product_attention", "SelfAttention"
POINTS = {e.name: e.points for e in LESSON.exercises}
STEP_TIMEOUT = 30.0  # no honest step of lesson 01 comes near it
LOOP_TIMEOUT = 3.0  # for notebooks whose code never finishes

# The messages the grader gives, as phrases the cases look for.
PASSES = "passes all"
# What the honest wrong answers earn in the grade: a wrong formula still meets the requirements judged against
# its own results (lesson 01: the unscaled attention its dtype-device and gradient shares, 2 of 6 points; the
# module without its output projection its dtype-device share, 0.5 of 4, since no gradient reaches out_proj).
# A hostile wrong answer deserves what its honest self earns; the cases grading the honest ones prove these.
WRONG_SDPA_EARNS = 2.0
WRONG_SA_EARNS = 0.5


class AtMost(float):
    """Deserved points for an attack that breaks its own process's results: never more than this (a tampered
    comparison can cost its author the shares judged against their own results, never gain one)."""


UNSCALED = "the scores are not scaled"  # the likely mistake named for WRONG_SDPA
NO_OUT_PROJ = "the output projection is missing"  # the likely mistake named for WRONG_SA_BODY
EXITED = "exited"
SWITCHED_OFF = "switched off while grading"  # the runtime block of forbidden built-ins
NOT_PLAIN = "not plain tensor data"

# ----------------------------------------------------------------------------- answers
CORRECT_SDPA = '''\
def scaled_dot_product_attention(query, key, value, attn_mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))  # (..., L, S)
    if attn_mask is not None:
        scores = scores.masked_fill(attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else scores + attn_mask
    weights = scores.softmax(dim=-1)  # (..., L, S)
    return weights @ value, weights  # (..., L, Ev), (..., L, S)
'''
WRONG_SDPA = CORRECT_SDPA.replace(" / math.sqrt(query.size(-1))", "")  # unscaled
assert WRONG_SDPA != CORRECT_SDPA

SA_CLASS = '''\
class SelfAttention(nn.Module):
    def __init__(self, d_model):
        super().__init__()
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def forward(self, x, attn_mask=None):
'''
# Self-contained (no call to the notebook's scaled_dot_product_attention), so that what a case
# does to that exercise can't change this one's score.
CORRECT_SA_BODY = '''\
q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)  # (B, T, C) each
scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (B, T, T)
if attn_mask is not None:
    scores = scores.masked_fill(attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else scores + attn_mask
weights = scores.softmax(dim=-1)  # (B, T, T)
return self.out_proj(weights @ v), weights
'''
WRONG_SA_BODY = CORRECT_SA_BODY.replace("return self.out_proj(weights @ v), weights", "return weights @ v, weights")
assert WRONG_SA_BODY != CORRECT_SA_BODY


def self_attention(body=CORRECT_SA_BODY):
    """The SelfAttention answer cell with ``body`` as the body of forward."""
    return SA_CLASS + textwrap.indent(textwrap.dedent(body), " " * 8)


CORRECT_SA = self_attention()
WRONG_SA = self_attention(WRONG_SA_BODY)
CORRECT = {SDPA: CORRECT_SDPA, SA: CORRECT_SA}


def code(source):
    """Code for a cell, from an indented triple-quoted string."""
    return textwrap.dedent(source).lstrip("\n")


# ----------------------------------------------------------------------------- cells and notebooks
def answer(source, grade_id):
    """An answer cell, with the nbgrader metadata nbgrader gives it."""
    cell = nbformat.v4.new_code_cell(source)
    cell.metadata["nbgrader"] = {"grade": False, "grade_id": grade_id, "locked": False, "schema_version": 3,
                                 "solution": True, "task": False}
    return cell


def added(source):
    """A cell the student added: no nbgrader metadata."""
    return nbformat.v4.new_code_cell(source)


def check_cell(exercise, source=None):
    """The locked test cell under an answer cell, as in the lesson."""
    source = source if source is not None else f"check({exercise!r}, {exercise})\n"
    cell = nbformat.v4.new_code_cell(source)
    cell.metadata["nbgrader"] = {"grade": True, "grade_id": f"test_{exercise}", "locked": True, "points": POINTS[exercise],
                                 "schema_version": 3, "solution": False, "task": False}
    return cell


def setup_cell():
    cell = nbformat.v4.new_code_cell("import math\nimport torch\nfrom torch import nn\nimport torch.nn.functional as F\n"
                                     "from autograder.checks import check\n")
    cell.metadata["nbgrader"] = {"grade": False, "grade_id": "setup", "locked": True, "schema_version": 3,
                                 "solution": False, "task": False}
    return cell


def lesson_notebook(sdpa_cells=None, sa_cells=None):
    """A lesson-01 notebook as a student hands it in: setup, then each answer cell and its test."""
    sdpa_cells = sdpa_cells if sdpa_cells is not None else [answer(CORRECT_SDPA, SDPA)]
    sa_cells = sa_cells if sa_cells is not None else [answer(CORRECT_SA, SA)]
    notebook = nbformat.v4.new_notebook()
    notebook.cells = ([nbformat.v4.new_markdown_cell("# Self-attention"), setup_cell()]
                      + list(sdpa_cells) + [check_cell(SDPA)] + list(sa_cells) + [check_cell(SA)])
    return notebook


def write(notebook, path):
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook, path)
    return path


# ----------------------------------------------------------------------------- cases
@dataclass(frozen=True)
class Context:
    """Where a case's notebook goes, and the places its code may aim at."""

    folder: Path  # the folder the notebook is written to
    repo: Path  # the grader's repository (autograder.release.REPO)
    course: Path = None  # the class's course folder, for cases that build one
    name: str = NOTEBOOK

    @property
    def notebook(self):
        return self.folder / self.name


@dataclass(frozen=True)
class Case:
    name: str
    threat: str  # the first line of the builder's docstring: the threat and its deserved outcome
    build: object  # (Context) -> answer source or cells (an exercise's case), or the notebook's path
    exercise: str = None  # the answer cell it writes; None when it builds the whole notebook
    deserved: dict = field(default_factory=dict)  # exercise -> the points the code deserves
    says: dict = field(default_factory=dict)  # exercise -> phrases its messages must contain
    timeout: float = STEP_TIMEOUT
    alone: bool = False  # shares its notebook with no other case
    runner: str = "grade"  # "grade": grade(); "cli": main([...]) here; "process": `python -m autograder grade`
    place: str = "tmp"  # "tmp": a test folder; "outside": a course in neither the repo nor the temp folder;
    #                     "course": a copy of the repository used as the course folder, gradebook and all
    watch: object = None  # (Context) -> more paths that must be unchanged (or still absent) afterwards
    leaves: str = ""  # a word in the command line of the processes the code starts: none may outlive grading
    exit_code: int = 0  # for the CLI: the exit status expected
    error: str = ""  # for the CLI: a phrase of the one-line error expected

    @property
    def module(self):
        return self.build.__module__.rsplit(".", 1)[-1]


_CASES = []


def case(exercise=None, deserved=None, says=(), **options):
    """Register a builder as a case. For an exercise's case, ``deserved`` is its points and ``says``
    a tuple of phrases; ``other`` (points, phrases) overrides the plain correct answer's expectation
    for a case that must be alone. For a whole notebook, both are dicts by exercise."""
    other = options.pop("other", None)

    def register(build):
        threat = inspect.getdoc(build).splitlines()[0]
        if exercise is None:
            points, phrases = dict(deserved or {}), {k: tuple(v) for k, v in dict(says or {}).items()}
        else:
            points, phrases = {exercise: deserved}, {exercise: tuple(says)}
            if other is not None:
                partner = SA if exercise == SDPA else SDPA
                points[partner], phrases[partner] = other[0], tuple(other[1])
        _CASES.append(Case(build.__name__, threat, build, exercise, points, phrases, **options))
        return build

    return register


MODULES = ("tampering", "escapes", "disguises", "library_calls", "faults", "notebooks", "privilege", "forged_evidence")


def all_cases():
    for module in MODULES:
        importlib.import_module(f"{__name__}.{module}")
    return list(_CASES)


def summary():
    """(name, threat) for every case, in the order they run."""
    return [(c.name, c.threat) for c in all_cases()]


# ----------------------------------------------------------------------------- notebooks to grade
@dataclass(frozen=True)
class Sheet:
    """One notebook to grade and the cases in it."""

    cases: tuple

    @property
    def id(self):
        return "+".join(c.name for c in self.cases)

    @property
    def timeout(self):
        return min(c.timeout for c in self.cases)

    @property
    def first(self):
        return self.cases[0]


def sheets(cases):
    """Pair the exercises' cases (one per answer cell); every other case gets a notebook of its own."""
    solo = [Sheet((c,)) for c in cases if c.exercise is None or c.alone]
    # Cases that share a time limit (the endless loops' short one) share notebooks.
    sdpa = sorted((c for c in cases if c.exercise == SDPA and not c.alone), key=lambda c: c.timeout)
    sa = sorted((c for c in cases if c.exercise == SA and not c.alone), key=lambda c: c.timeout)
    pairs = [Sheet(tuple(c for c in pair if c is not None)) for pair in _zip_longest(sdpa, sa)]
    return pairs + solo


def _zip_longest(a, b):
    return [(a[i] if i < len(a) else None, b[i] if i < len(b) else None) for i in range(max(len(a), len(b)))]


def _cells(case, ctx):
    built = case.build(ctx)
    return [answer(built, case.exercise)] if isinstance(built, str) else list(built)


def build_sheet(sheet, ctx):
    """Write the sheet's notebook; returns its path."""
    if sheet.first.exercise is None:
        return Path(sheet.first.build(ctx))
    cells = {c.exercise: _cells(c, ctx) for c in sheet.cases}
    return write(lesson_notebook(cells.get(SDPA), cells.get(SA)), ctx.notebook)


def expectations(case, sheet):
    """exercise -> (points, phrases) that this case's test checks: its own exercise, and the plain
    answer that shares its notebook when no other case does."""
    expected = {name: (case.deserved[name], case.says.get(name, ())) for name in case.deserved}
    if case.exercise is not None and len(sheet.cases) == 1:
        for name in POINTS:
            expected.setdefault(name, (POINTS[name], (PASSES,)))
    return expected


# ----------------------------------------------------------------------------- what must not change
def snapshot(paths):
    """{path: digest} for every file under ``paths`` (files or folders), "absent" for a missing path."""
    state = {}
    for path in paths:
        path = Path(path)
        if path.is_dir():
            state[str(path)] = "folder"
            for item in sorted(path.rglob("*")):
                if "__pycache__" in item.parts:
                    continue
                state[str(item)] = "folder" if item.is_dir() else hashlib.sha256(item.read_bytes()).hexdigest()
        elif path.exists():
            state[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            state[str(path)] = "absent"
    return state


def changes(before, after):
    """What differs between two snapshots, in words."""
    found = []
    for path in sorted(set(before) | set(after)):
        old, new = before.get(path, "absent"), after.get(path, "absent")
        if old != new:
            found.append(f"{path}: {'created' if old == 'absent' else 'removed' if new == 'absent' else 'changed'}")
    return found
