"""One mistake costs one requirement: where a student's formula is wrong, the requirements about a property
of their own code (dtype, device, dropout's mode, gradients) are judged against their own results, and
non-answers get nothing from it (docs/architecture.md, "One mistake costs one requirement")."""

import contextlib
import io

import pytest

from autograder.checks import CheckFailed, check
from autograder.checks.hidden import hidden_report
from autograder.checks.public import failure_text, passing_text, public_report
from autograder.curriculum import lesson_of
from tests.bug_catalog import PRELUDE, Bug, load


def _answer(name, forward, signature="self, x, *args, **kwargs"):
    """The student's cell: the given __init__ (the reference's), and ``forward`` as its body."""
    source = f"class {name}(_Given):\n    def forward({signature}):\n" + "".join(
        f"        {line}\n" for line in forward.strip().splitlines())
    return Bug(name, "a test answer", source), PRELUDE + f"from autograder.reference import {name} as _Given\n"


def _reports(name, forward, signature="self, x, *args, **kwargs"):
    bug, prelude = _answer(name, forward, signature)
    with contextlib.redirect_stdout(io.StringIO()):
        return public_report(name, load(bug, prelude)), hidden_report(name, load(bug, prelude))


def _points(name):
    return lesson_of(name).exercise(name).points


def _judged_on_own(report):
    return {key: r.judged_on_own for key, r in report.requirements.items() if r.judged_on_own}


NON_ANSWERS = {
    "zeros": "return torch.zeros_like(x)",
    "the input": "return x",
    "a random tensor": "return torch.randn_like(x)",
    "a seeded random tensor": "return torch.randn(x.shape, generator=torch.Generator().manual_seed(0)).to(x.dtype)",
    "weights times zero": "return x + 0 * sum(p.sum() for p in self.parameters())",
    "weights summed in": "return x + 1e-3 * sum(p.sum() for p in self.parameters())",
    "a constant": "return torch.full_like(x, 0.5)",
}
SAME_SHAPE_EXERCISES = ["PositionwiseFeedForward", "EncoderLayer", "Encoder", "RMSNorm", "SwiGLU"]


@pytest.mark.parametrize("name", SAME_SHAPE_EXERCISES)
@pytest.mark.parametrize("junk", sorted(NON_ANSWERS))
def test_non_answers_get_nothing_from_judging_against_their_own_results(name, junk):
    public, hidden = _reports(name, NON_ANSWERS[junk])
    assert not hidden.ok
    assert not _judged_on_own(hidden), f"{junk} was judged against itself: {_judged_on_own(hidden)}"
    assert not _judged_on_own(public), f"{junk} was judged against itself: {_judged_on_own(public)}"
    assert public.score(_points(name)) == hidden.score(_points(name))
    assert not hidden.requirements["gradients"].met if "gradients" in hidden.requirements else True


def test_a_stub_is_still_not_implemented():
    public, hidden = _reports("EncoderLayer", "raise NotImplementedError")
    assert hidden.not_implemented and hidden.score(5) == 0 and public.not_implemented


# Post-norm with the two norms in each other's places: a wrong formula, right in every other way.
SWAPPED_NORMS = """
if self.norm_first:
    h = self.norm2(x)
    x = x + self.dropout(self.self_attn(h, h, h, key_padding_mask=key_padding_mask, attn_mask=attn_mask,
                                        need_weights=False)[0])
    return x + self.dropout(self.ff(self.norm1(x)))
attended, _ = self.self_attn(x, x, x, key_padding_mask=key_padding_mask, attn_mask=attn_mask, need_weights=False)
x = self.norm2(x + self.dropout(attended))
return self.norm1(x + self.dropout(self.ff(x)))
"""
LAYER_SIGNATURE = "self, x, key_padding_mask=None, attn_mask=None"


def test_a_wrong_formula_keeps_the_dtype_device_and_gradient_shares():
    public, hidden = _reports("EncoderLayer", SWAPPED_NORMS, LAYER_SIGNATURE)
    failing = {r.key for r in hidden.failing_requirements}
    assert {"post-norm", "pre-norm"} <= failing
    assert hidden.requirements["dtype-device"].met and hidden.requirements["gradients"].met
    judged = _judged_on_own(hidden)
    assert "in float32" in judged["dtype-device"] and "gradients" in judged["gradients"]
    assert public.score(_points("EncoderLayer")) == hidden.score(_points("EncoderLayer")) > 0
    text = failure_text(hidden, "hidden")
    assert "judged against your own results in float32" in text, text


@pytest.mark.parametrize("second, requirement, words", [
    ("x = x.float()", "dtype-device", "dtype"),
    ("x = x.detach()", "gradients", "the gradient of input 0 is missing"),
])
def test_a_second_mistake_beside_a_wrong_formula_still_costs_its_requirement(second, requirement, words):
    public, hidden = _reports("EncoderLayer", second + "\n" + SWAPPED_NORMS, LAYER_SIGNATURE)
    assert not hidden.requirements[requirement].met
    assert words in " ".join(hidden.requirements[requirement].failures)
    assert public.score(_points("EncoderLayer")) == hidden.score(_points("EncoderLayer"))


def test_eval_mode_dropout_is_judged_against_the_students_own_dropout_free_run():
    """The activation after linear2 (a wrong formula): dropout=1.0 in eval mode must give what the same code
    gives with dropout=0; F.dropout without training= does not."""
    wrong = "return self.activation(self.linear2(self.dropout(self.linear1(x))))"
    _, hidden = _reports("PositionwiseFeedForward", wrong)
    assert "with dropout=0" in hidden.requirements["dropout"].judged_on_own
    dropping = "return self.activation(self.linear2(F.dropout(self.linear1(x), self.dropout.p)))"
    _, hidden = _reports("PositionwiseFeedForward", dropping)
    assert "with dropout=0" not in hidden.requirements["dropout"].judged_on_own
    assert not hidden.requirements["dropout"].met


def test_the_requirement_table_shows_each_requirements_share():
    _, hidden = _reports("EncoderLayer", SWAPPED_NORMS, LAYER_SIGNATURE)
    text = failure_text(hidden, "hidden")
    total = f"{sum(requirement.weight for requirement in hidden.requirements.values()):g}"
    assert f"(2 of {total} shares)" in text and f"(0.5 of {total} shares" in text, text
    assert "(the same mistake)" not in text


def test_a_python_number_is_said_to_be_compared_as_one(capsys):
    from autograder import reference

    check("noam_lr", reference.noam_lr)
    line = capsys.readouterr().out
    assert "Python floats compared at rel_tol=1e-09" in line and "float32" not in line, line
    with pytest.raises(CheckFailed):
        check("noam_lr", lambda step, d_model, warmup: 1.0)


def _function_reports(name, source):
    bug = Bug(name, "a test answer", source)
    with contextlib.redirect_stdout(io.StringIO()):
        return public_report(name, load(bug)), hidden_report(name, load(bug))


def test_code_that_reads_values_and_builds_a_tensor_on_the_inputs_device_passes_the_device_check():
    """A GPU runs it, so the meta device (which carries values) does too: torch.tensor(..., device=...) made
    from values read with .tolist() holds those values there."""
    source = '''
def padding_mask(tokens, pad_id):
    rows = [[token == pad_id for token in row] for row in tokens.tolist()]
    return torch.tensor(rows, device=tokens.device)
'''
    public, hidden = _function_reports("padding_mask", source)
    assert hidden.ok and public.ok, failure_text(hidden, "hidden")


@pytest.mark.parametrize("source, words", [
    ('''
def padding_mask(tokens, pad_id):
    rows = [[token == pad_id for token in row] for row in tokens.tolist()]
    return torch.tensor(rows) & (tokens == pad_id)
''', "reads tensor values into Python (.item()/.tolist()/a loop over values)"),
    ('''
def padding_mask(tokens, pad_id):
    return torch.tensor(tokens.numpy() == pad_id, device=tokens.device)
''', "x.numpy() reads the values into NumPy"),
])
def test_a_device_check_failing_after_values_were_read_says_so(source, words):
    public, hidden = _function_reports("padding_mask", source)
    assert hidden.requirements["values"].met and not hidden.requirements["device"].met
    assert words in (hidden.requirements["device"].likely_mistake or ""), failure_text(hidden, "hidden")
    assert public.score(_points("padding_mask")) == hidden.score(_points("padding_mask"))


def test_an_output_that_ignores_most_weights_gets_nothing_from_judging_against_itself():
    """One weight of four mixed in is no answer; a formula leaving out one sublayer's weights is a wrong one."""
    public, hidden = _reports("PositionwiseFeedForward", "return x + self.linear2.bias")
    assert not _judged_on_own(hidden) and not _judged_on_own(public)
    _, hidden = _reports("EncoderLayer", "return self.norm2(x + self.ff(self.norm1(x)))", LAYER_SIGNATURE)
    assert "in float32" in hidden.requirements["dtype-device"].judged_on_own
    assert not hidden.requirements["gradients"].met  # no gradient reaches self-attention's weights
