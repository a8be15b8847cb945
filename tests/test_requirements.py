"""The rules that make a grade fair and legible (ARCHITECTURE.md):

- the public check predicts the grade: every requirement an exercise's text states has a public
  probe, and the hidden probes try only those requirements; on every catalogued mistake the
  public inputs can show, the public check and the grade give the same score;
- one mistake costs one exercise: an exercise is graded with the reference's versions of the
  exercises of its lesson that it calls, and the public check names a broken callee;
- partial credit: each requirement carries its share of the exercise's points.
"""

import contextlib
import io

import nbformat
import pytest

from autograder.checks import CheckFailed, check
from autograder.checks.hidden import hidden_report, specs
from autograder.checks.hidden.callees import callee_source
from autograder.checks.public import failure_text, public_report
from autograder.curriculum import EXERCISES, LESSONS, callees, lesson_of
from autograder.grading.grade import grade
from tests.bug_catalog import all_bugs, load
from tests.nbcells import cell_with_id, solution_code

ALL_EXERCISES = sorted(EXERCISES)
BUGS = all_bugs()


@pytest.mark.parametrize("name", ALL_EXERCISES)
def test_every_probe_tries_a_stated_requirement_and_every_requirement_has_a_public_probe(name):
    spec = specs()[name]
    stated = [r.key for r in spec.requirements]
    assert stated, f"{name}: its checks state no requirements"
    assert len(set(stated)) == len(stated), f"{name}: a requirement is listed twice"
    public = spec.public_probes()
    hidden = spec.hidden_probes(("cpu", "cuda"))
    for probe in public + hidden:
        assert probe.get("requirement") in stated, f"{name}: probe {probe['id']!r} tries no stated requirement"
    ids = [p["id"] for p in hidden]
    assert len(set(ids)) == len(ids), f"{name}: probe ids repeat: {sorted({i for i in ids if ids.count(i) > 1})}"
    without_public = set(stated) - {p["requirement"] for p in public}
    assert not without_public, f"{name}: no public probe tries {sorted(without_public)}"
    assert all(r.weight > 0 for r in spec.requirements)


def _scores(bug, prelude):
    points = lesson_of(bug.exercise).exercise(bug.exercise).points
    with contextlib.redirect_stdout(io.StringIO()):
        public = public_report(bug.exercise, load(bug, prelude))
        hidden = hidden_report(bug.exercise, load(bug, prelude))
    return public, hidden, public.score(points), hidden.score(points)


@pytest.mark.parametrize("prelude, bug", BUGS, ids=[bug.id for _, bug in BUGS])
def test_the_grade_names_every_catalogued_mistake_and_the_public_check_predicts_it(prelude, bug):
    public, hidden, public_score, hidden_score = _scores(bug, prelude)
    assert not hidden.ok, "the grade misses this mistake"
    if bug.names:  # the hidden checks' message names it as the likely mistake
        text = failure_text(hidden, "hidden")
        assert "Likely mistake:" in text, text
        assert bug.names in text.split("Likely mistake:")[1].split("\n")[0], text
    if public.ok:
        pytest.fail(f"the public checks pass this mistake, the grade gives {hidden_score:g}: "
                    f"{[r.text for r in hidden.failing_requirements]} need a public probe that shows it")
    failing_public = [r.key for r in public.failing_requirements]
    failing_hidden = [r.key for r in hidden.failing_requirements]
    assert public_score == hidden_score, (
        f"check gives {public_score:g}, grade {hidden_score:g}: the public checks fail {failing_public}, "
        f"the hidden ones {failing_hidden}")


def test_callee_source_holds_the_callees_and_never_the_exercise_itself():
    for name in ALL_EXERCISES:
        source = callee_source(name)
        if not callees(name):
            assert source == ""
            continue
        namespace = {}
        exec(compile(source, f"<callees of {name}>", "exec"), namespace)
        assert all(callee in namespace for callee in callees(name)), name
        assert name not in namespace, f"the callee source of {name} defines {name} itself"
        others = {e.name for e in lesson_of(name).exercises} - set(callees(name))
        assert not others & set(namespace), f"{name}: the callee source defines {others & set(namespace)}"


# ----------------------------------------------------------------------------- one mistake, one exercise
SOLUTIONS = {lesson: nbformat.read(f"solutions/{lesson}/{lesson}.ipynb", as_version=4) for lesson in LESSONS
             if lesson <= "02"}  # lessons 01 and 02 are enough to prove the policy end to end


def _answer(source, grade_id):
    cell = nbformat.v4.new_code_cell(source)
    cell.metadata["nbgrader"] = {"grade": False, "grade_id": grade_id, "locked": False, "schema_version": 3,
                                 "solution": True, "task": False}
    return cell


def _notebook(tmp_path, lesson, replaced):
    """The lesson's model answers, with ``replaced`` ({exercise: source}) swapped in."""
    solution = nbformat.read(f"solutions/{lesson}/{lesson}.ipynb", as_version=4)
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [_answer(replaced.get(e.name) or solution_code(cell_with_id(solution, e.name).source), e.name)
                      for e in LESSONS[lesson].exercises]
    path = tmp_path / f"{lesson}.ipynb"
    nbformat.write(notebook, path)
    return path


WRONG_DIM_SDPA = '''
def scaled_dot_product_attention(query, key, value, attn_mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if attn_mask is not None:
        scores = scores.masked_fill(attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else scores + attn_mask
    weights = torch.softmax(scores, dim=1)
    return weights @ value, weights
'''
TRANSPOSE_FORGOTTEN_SPLIT = '''
def split_heads(x, num_heads):
    B, T, C = x.shape
    return x.reshape(B, T, num_heads, C // num_heads)
'''

POST_NORM_BLOCK = '''
class LlamaBlock(nn.Module):
    def __init__(self, d_model, num_heads, num_kv_heads, d_ff, eps=1e-6, rope_base=10000.0):
        super().__init__()
        self.attn_norm = RMSNorm(d_model, eps)
        self.attn = GroupedQueryAttention(d_model, num_heads, num_kv_heads, bias=False, rope_base=rope_base)
        self.ffn_norm = RMSNorm(d_model, eps)
        self.ffn = SwiGLU(d_model, d_ff, bias=False)

    def forward(self, x, positions=None):
        h = self.attn_norm(x + self.attn(x, attn_mask=causal_mask(x.size(1), device=x.device), positions=positions)[0])
        return self.ffn_norm(h + self.ffn(h))
'''


@pytest.mark.parametrize("lesson, broken, source, caller", [
    ("01_self_attention", "scaled_dot_product_attention", WRONG_DIM_SDPA, "SelfAttention"),
    ("02_multi_head_attention", "split_heads", TRANSPOSE_FORGOTTEN_SPLIT, "MultiHeadAttention"),
    ("09_open_weights", "LlamaBlock", POST_NORM_BLOCK, "LlamaLM"),
])
def test_one_wrong_function_costs_only_its_own_points(tmp_path, lesson, broken, source, caller):
    path = _notebook(tmp_path, lesson, {broken: source})
    graded = grade(path)
    points = {e.name: e.points for e in LESSONS[lesson].exercises}
    assert graded.exercises[broken].score < points[broken]
    for name in points:
        if name != broken:
            assert graded.exercises[name].score == points[name], (name, graded.exercises[name].messages)
    # The public check has no reference of this lesson: the caller fails with the student's own
    # callee, and says which one to fix first.
    checked = grade(path, hidden=False)
    assert checked.exercises[caller].score < points[caller]
    assert any(f"uses your {broken}, which fails its check" in m for m in checked.exercises[caller].messages)
    # and says only that: a diagnosis of the caller's own code would be a guess.
    assert not any("Likely mistake" in m for m in checked.exercises[caller].messages), checked.exercises[caller].messages


def test_the_notebook_check_names_the_broken_callee():
    namespace = {}
    exec("import math\nimport torch\nfrom torch import nn\n" + WRONG_DIM_SDPA, namespace)
    solution = SOLUTIONS["01_self_attention"]
    exec(solution_code(cell_with_id(solution, "SelfAttention").source), namespace)
    with pytest.raises(CheckFailed, match="SelfAttention uses your scaled_dot_product_attention, which fails its check"):
        with contextlib.redirect_stdout(io.StringIO()):
            check("SelfAttention", namespace["SelfAttention"])
    # And the hidden checks, like the trusted grader, use a correct callee: SelfAttention passes.
    assert hidden_report("SelfAttention", namespace["SelfAttention"]).ok


def test_a_failing_callee_is_the_only_diagnosis_the_check_gives():
    """A right Decoder on a DecoderLayer whose cross-attention takes its queries from memory: the Decoder's outputs
    look like those of a Decoder that gives its layers the wrong memory, but the check says only to fix the layer."""
    from tests.bug_catalog import l05_decoder_masking as lesson05

    layer = next(bug for _, bug in BUGS if bug.id == "DecoderLayer: memory as the cross-attention's query")
    namespace = {}
    exec(lesson05.PRELUDE + layer.source + lesson05._DECODER_INIT + lesson05._DECODER_FORWARD, namespace)
    with pytest.raises(CheckFailed) as failed:
        with contextlib.redirect_stdout(io.StringIO()):
            check("Decoder", namespace["Decoder"])
    message = str(failed.value)
    assert message.startswith("Decoder uses your DecoderLayer, which fails its check"), message
    assert "Likely mistake" not in message, message

