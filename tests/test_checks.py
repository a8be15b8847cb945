"""The check library against the reference, the stubs and the catalog of wrong answers."""

import math
import pytest
import torch

from autograder.checks import CheckFailed, check
from autograder.checks.hidden import check_hidden, specs
from autograder.checks.hidden.build_data import public_data
from autograder.checks.public import load_public_data
from autograder.curriculum import EXERCISES, LESSONS
from autograder import reference
from tests.bug_catalog import all_bugs, load

ALL_EXERCISES = sorted(EXERCISES)
BUGS = all_bugs()


def stub_of(name):
    """What a student's untouched answer cell defines: the given __init__, a forward that raises."""
    target = getattr(reference, name)
    if isinstance(target, type):
        return type(name, (target,), {"forward": lambda self, *a, **k: (_ for _ in ()).throw(NotImplementedError())})

    def stub(*args, **kwargs):
        raise NotImplementedError()

    stub.__name__ = name
    return stub


def test_every_exercise_of_the_contract_has_checks():
    assert sorted(specs()) == ALL_EXERCISES


@pytest.mark.parametrize("name", ALL_EXERCISES)
def test_reference_passes_public_and_hidden_checks(name, capsys):
    check(name, getattr(reference, name))
    check_hidden(name, getattr(reference, name))
    assert capsys.readouterr().out.count("✓") == 2


@pytest.mark.parametrize("name", ALL_EXERCISES)
def test_stub_is_reported_as_not_implemented(name):
    with pytest.raises(NotImplementedError, match="not implemented yet"):
        check(name, stub_of(name))
    with pytest.raises(NotImplementedError, match="not implemented yet"):
        check_hidden(name, stub_of(name))


@pytest.mark.parametrize("name", ALL_EXERCISES)
def test_every_exercise_has_at_least_three_catalogued_bugs(name):
    assert sum(bug.exercise == name for _, bug in BUGS) >= 3


# That the hidden checks catch and name every catalogued bug is tested with the public ones, in
# tests/test_requirements.py (one run of each bug through both).


@pytest.mark.parametrize("lesson", sorted(LESSONS))
def test_stored_public_data_equals_what_the_reference_gives(lesson):
    built = public_data(lesson)
    stored = load_public_data(lesson) if built else {}
    assert sorted(stored) == sorted(built), "run `python -m autograder.checks.hidden.build_data` to rebuild autograder/checks/data"
    for name in built:
        for key in ("probes", "expected", "mistakes", "tolerance", "requirements"):
            _assert_same(stored[name][key], built[name][key], f"{lesson}/{name}/{key}")


def _assert_same(a, b, where):
    """Equal, floating tensors within what another processor's kernels change (the stored data are built
    on one machine; float32 matrix products round differently with other vector units), the rest exactly."""
    if isinstance(b, torch.Tensor):
        assert isinstance(a, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape, where
        if b.is_floating_point():
            tight = {torch.float64: (1e-10, 1e-12)}.get(b.dtype, (1e-4, 1e-5))
            torch.testing.assert_close(a, b, rtol=tight[0], atol=tight[1], equal_nan=True, msg=lambda m: f"{where}: {m}")
        else:
            assert torch.equal(a, b), where
    elif isinstance(b, dict):
        assert sorted(a) == sorted(b), where
        for k in b:
            _assert_same(a[k], b[k], f"{where}/{k}")
    elif isinstance(b, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _assert_same(x, y, f"{where}/{i}")
    elif isinstance(b, float):
        assert isinstance(a, float) and math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9), where
    else:
        assert a == b, where


def test_the_runtime_block_refuses_the_kernels_behind_a_built_in_and_nothing_else():
    """switched_off refuses a forbidden built-in under every name it is reached by (torch.ops.aten,
    the private kernels, a variant with other words between) and leaves the basic operations alone."""
    import torch.nn.functional as F

    from autograder.checks.forbidden import ForbiddenCall, switched_off

    torch.manual_seed(0)
    q = torch.randn(1, 2, 3, 4)  # (B, H, T, D)
    refused = {
        "aten's packet": lambda: torch.ops.aten.scaled_dot_product_attention(q, q, q),
        "aten's overload": lambda: torch.ops.aten.scaled_dot_product_attention.default(q, q, q),
        "the math kernel": lambda: torch._scaled_dot_product_attention_math(q, q, q),
        "the CPU flash kernel": lambda: getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu")(q, q, q),
    }
    allowed = {
        "softmax": lambda: F.softmax(q @ q.transpose(-2, -1), dim=-1),
        "linear and layer_norm": lambda: F.layer_norm(F.linear(q, torch.eye(4)), (4,)),
        "masked_fill": lambda: q.masked_fill(q > 0, float("-inf")),
    }
    with switched_off(["scaled_dot_product_attention"]):
        for how, call in refused.items():
            with pytest.raises(ForbiddenCall, match="switched off while grading"):
                call()
                pytest.fail(f"{how} ran")
        for how, call in allowed.items():
            call()  # raises if refused
    torch.ops.aten.scaled_dot_product_attention(q, q, q)  # and all is back afterwards


def test_forbidden_library_call_fails_the_exercise():
    source = '''
def scaled_dot_product_attention(query, key, value, attn_mask=None):
    out = F.scaled_dot_product_attention(query, key, value, attn_mask=None if attn_mask is None else ~attn_mask)
    return out, None
'''
    from tests.bug_catalog import Bug

    cheat = load(Bug("scaled_dot_product_attention", "calls the library", source))
    with pytest.raises(CheckFailed, match="already does what this exercise asks"):
        check("scaled_dot_product_attention", cheat)


@pytest.mark.parametrize("lesson, exercise, base", [("l06_full_model", "greedy_decode", "_GREEDY"),
                                                     ("l08_modern_transformer", "apply_rotary", "_ROTARY"),
                                                     ("l08_modern_transformer", "GroupedQueryAttention", "_GQA")])
def test_the_right_answers_that_catalogued_bugs_are_edited_from_pass(lesson, exercise, base):
    import importlib

    from tests.bug_catalog import Bug

    module = importlib.import_module(f"tests.bug_catalog.{lesson}")
    check_hidden(exercise, load(Bug(exercise, "none: the base of the edits", getattr(module, base)), module.PRELUDE))
