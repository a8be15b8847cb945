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
                                                     ("l08_modern_transformer", "GroupedQueryAttention", "_GQA"),
                                                     ("l08_modern_transformer", "flash_attention", "_FLASH"),
                                                     ("l09_open_weights", "LlamaBlock", "_BLOCK"),
                                                     ("l09_open_weights", "LlamaLM", "_LM"),
                                                     ("l09_open_weights", "load_llama_weights", "_LOAD"),
                                                     ("l09_open_weights", "cached_gqa_attention", "_CACHED")])
def test_the_right_answers_that_catalogued_bugs_are_edited_from_pass(lesson, exercise, base):
    import importlib

    from tests.bug_catalog import Bug

    module = importlib.import_module(f"tests.bug_catalog.{lesson}")
    check_hidden(exercise, load(Bug(exercise, "none: the base of the edits", getattr(module, base)), module.PRELUDE))


_WHOLE_TENSOR = '''
def sinusoidal_positional_encoding(max_len, d_model):
    angles = torch.arange(max_len)[:, None] / 10000 ** (torch.arange(0, d_model, 2) / d_model)
    pe = torch.zeros(max_len, d_model)
    for column, f in enumerate((torch.sin, torch.cos)):
        pe[:, column::2] = f(angles)
    return pe
'''


@pytest.mark.parametrize("looping, what", [
    ("    for pos in range(max_len):\n        pass\n", "a for loop"),
    ("    while max_len > 10**9:\n        max_len -= 1\n", "a while loop"),
    ("    rows = [pos for pos in range(max_len)]\n", "a comprehension"),
    ("    rows = list(map(float, range(max_len)))\n", "map(...)"),
    ("    if max_len > 1:\n        sinusoidal_positional_encoding(max_len - 1, d_model)\n", "recursion"),
])
def test_the_no_loops_rule_is_read_in_the_source_not_measured(looping, what):
    """A loop anywhere in the answer cell breaks the rule, whatever the student's process reports; a pass
    over a tuple written out does not."""
    from autograder.checks.static import no_loops

    assert no_loops(_WHOLE_TENSOR) is None
    broken = _WHOLE_TENSOR.replace("    return pe\n", looping + "    return pe\n")
    assert what in (no_loops(broken) or "")
    probes = specs()["sinusoidal_positional_encoding"].hidden_probes()
    loop_free = [p for p in probes if p.get("source_rule") == "no-loops"]
    assert loop_free, "no probe reads the source"
    # A forged count (no operations at all) changes nothing: the source decides.
    forged = {"ok": True, "outputs": [], "op_count": {"operations": 0, "lines": 0}}
    from autograder.checks.compare import compare

    assert compare("sinusoidal_positional_encoding", loop_free[0], forged, {"ok": True}, source=broken)
    assert not compare("sinusoidal_positional_encoding", loop_free[0], forged, {"ok": True}, source=_WHOLE_TENSOR)


def test_a_meta_probe_checks_values_a_meta_special_case_cannot_fake():
    """On the meta device the code computes real values: returning torch.empty_like(x) when x.is_meta fails,
    a tensor made on the CPU raises as on a GPU, and a formula mistake made the same way on every device costs
    only its own requirement (the meta probe compares with the code's own CPU result)."""
    import math

    from autograder.checks.compare import compare
    from autograder.checks.runner import run_probe

    def rotary(x, positions=None, base=10000.0, skip=False, cpu_positions=False, scale=1.0):
        if skip and x.is_meta:
            return torch.empty_like(x)
        T, D = x.shape[-2:]
        positions = torch.arange(T) if cpu_positions else torch.arange(T, device=x.device)
        freqs = base ** (-torch.arange(0, D, 2, device=x.device, dtype=torch.float64) / D)
        angles = positions.to(torch.float64)[:, None] * freqs * scale
        cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
        even, odd = x[..., 0::2], x[..., 1::2]
        return torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).flatten(-2)

    probe = next(p for p in specs()["apply_rotary"].public_probes() if p.get("device") == "meta")
    expected = run_probe(reference.apply_rotary, probe)
    assert expected["ok"] and expected["devices"] == ["meta"] and expected["outputs"][0].abs().sum() > 0

    def failures(**variant):
        return compare("apply_rotary", probe, run_probe(lambda x, *a, **k: rotary(x, *a, **k, **variant), probe),
                       expected)

    assert not failures()
    assert "differs from what your code returns" in failures(skip=True)[0][0]
    assert "same device" in failures(cpu_positions=True)[0][0]
    assert not failures(scale=math.pi)  # wrong on every device alike: the formula's probes judge it


@pytest.mark.parametrize("title", ["a head with a bias", "norm_first defaults to False"])
def test_language_model_whose_init_differs_is_told_so_in_every_requirement(title):
    """A DecoderOnlyLM whose __init__ builds other parameters fails every probe when its weights are
    loaded: each failing requirement names that, none the missing max_len check (the error the
    too-long probe wants is not the one it got)."""
    from autograder.checks.public import failure_text
    from autograder.checks.hidden import hidden_report
    from tests.bug_catalog import l07_language_model as catalog

    bug = next(b for b in catalog.BUGS if b.title == title)
    text = failure_text(hidden_report(bug.exercise, load(bug, catalog.PRELUDE)), "hidden")
    likely = [line for line in text.split("\n") if "Likely mistake:" in line]
    assert likely and all("__init__" in line for line in likely), text
    assert "no position embeddings" not in text, text
