"""Compare what the student's code returned with what it should have, and say why it differs.

Everything here works on plain data (the runner's results), so it runs the same way in the
notebook (public checks, expected values loaded from stored data) and in the grader's
trusted process (hidden checks, expected values computed by the reference).
"""

import math
from dataclasses import dataclass, field

import torch

from . import properties as property_checks
from . import static


class CheckFailed(AssertionError):
    """An exercise failed its checks; the message says what is likely wrong."""


@dataclass(frozen=True)
class Tolerance:
    """assert_close tolerances per dtype; every check states the ones it uses."""

    float32: tuple = (1e-4, 1e-5)  # (rtol, atol)
    float64: tuple = (1e-7, 1e-9)

    def for_dtype(self, dtype):
        return self.float64 if dtype == torch.float64 else self.float32


@dataclass
class RequirementResult:
    """How one requirement of an exercise fared: met when every probe that tries it passes."""

    key: str
    text: str
    weight: float = 1.0
    total: int = 0
    passed: int = 0
    failures: list = field(default_factory=list)
    hints: list = field(default_factory=list)
    judged_on_own: list = field(default_factory=list)  # how the probes passed against the student's own results read

    @property
    def met(self):
        return self.total > 0 and self.passed == self.total

    @property
    def likely_mistake(self):
        known = [hint for hint in self.hints if hint]
        return max(known, key=known.count) if known else None


# Probes of an exercise whose checks name no requirements all try this one.
WHOLE_EXERCISE = ("behaviour", "behaves as the lesson states")


@dataclass
class Report:
    """The outcome of one exercise's checks, requirement by requirement."""

    exercise: str
    total: int = 0
    passed: int = 0
    failures: list = field(default_factory=list)
    hints: list = field(default_factory=list)  # the likely mistake behind each failure, if known
    not_implemented: bool = False
    requirements: dict = field(default_factory=dict)  # key -> RequirementResult, in the lesson's order
    exact: bool = True  # every compared value was exact (bool, integer): no tolerance was used
    numbers_only: bool = True  # no floating tensor was compared (only Python numbers, if not exact)

    @property
    def failing_requirements(self):
        return [r for r in self.requirements.values() if not r.met]

    @property
    def likely_mistake(self):
        """The likely mistake behind the first requirement that fails, else the most common hint."""
        for requirement in self.failing_requirements:
            if requirement.likely_mistake:
                return requirement.likely_mistake
        known = [hint for hint in self.hints if hint]
        return max(known, key=known.count) if known else None

    @property
    def ok(self):
        return self.total > 0 and self.passed == self.total and not self.not_implemented

    def score(self, points):
        """The exercise's points times the share of requirements met (all of them when ok, none for a stub)."""
        if self.ok:
            return points
        if self.not_implemented or not self.requirements:
            return 0
        weights = sum(r.weight for r in self.requirements.values())
        earned = sum(r.weight for r in self.requirements.values() if r.met)
        # Rounded down to a hundredth, so that partial credit never rounds up to full marks.
        return math.floor(100 * points * earned / weights + 1e-9) / 100


def _shape(t):
    return tuple(t.shape)


def _largest_difference(got, expected):
    diff = (got.double() - expected.double()).abs().nan_to_num(float("inf"))
    flat = int(diff.argmax())
    index = list(torch.unravel_index(torch.tensor(flat), diff.shape)) if diff.dim() else []
    where = f" at index {[int(i) for i in index]}" if index else ""
    return f"largest difference {float(diff.flatten()[flat]):.3g}{where}"


# Python floats (a learning rate, a perplexity) are compared at this (rel_tol, abs_tol): they are float64.
NUMBER_TOLERANCE = (1e-9, 1e-12)


def _close(got, expected, tolerance):
    if not isinstance(got, torch.Tensor) or not isinstance(expected, torch.Tensor):
        if isinstance(expected, float) and isinstance(got, (int, float)) and not isinstance(got, bool):
            return math.isclose(got, expected, rel_tol=NUMBER_TOLERANCE[0], abs_tol=NUMBER_TOLERANCE[1])
        return type(got) is type(expected) and got == expected
    if got.shape != expected.shape or got.dtype != expected.dtype:
        return False
    if not expected.is_floating_point():
        return torch.equal(got, expected)
    rtol, atol = tolerance.for_dtype(expected.dtype)
    try:
        torch.testing.assert_close(got, expected, rtol=rtol, atol=atol, equal_nan=True)
        return True
    except AssertionError:
        return False


def _matches(got_outputs, expected_outputs, tolerance):
    return len(got_outputs) == len(expected_outputs) and all(
        _close(g, e, tolerance) for g, e in zip(got_outputs, expected_outputs)
    )


def _same_shapes(got_outputs, expected_outputs):
    return all(
        not isinstance(e, torch.Tensor) or (isinstance(g, torch.Tensor) and g.shape == e.shape)
        for g, e in zip(got_outputs, expected_outputs)
    )


def _diagnose(exercise, probe, got, expected, mistakes, tolerance):
    """The hint of the known mistake that explains this output, else of a broken property, else the
    probe's own "fallback_hint" (what failing this probe most likely means)."""
    # A meta probe judges the device: a known mistake explains it when it gives the same values on the same devices.
    meta = probe.get("device") == "meta"
    for hint, mistaken in mistakes:
        if mistaken.get("ok") and _matches(got["outputs"], mistaken["outputs"], tolerance) and (
                not meta or got.get("devices") == mistaken.get("devices")):
            return hint
    recorded = _record_hint(probe, got, expected)
    if recorded:
        return recorded
    if not _same_shapes(got["outputs"], expected["outputs"]):  # the shape message says it, unless a property explains it
        return next(filter(None, (check(probe, got["outputs"])
                                  for check in property_checks.WRONG_SHAPE_PROPERTIES.get(exercise, ()))), None)
    if meta and got.get("devices") != expected.get("devices"):
        return META_HINT
    for g, e in zip(got["outputs"], expected["outputs"]):
        if isinstance(g, torch.Tensor) and isinstance(e, torch.Tensor) and g.dtype != e.dtype \
                and g.is_floating_point() and e.is_floating_point():
            return (f"the result is {str(g.dtype).replace('torch.', '')} where it should be "
                    f"{str(e.dtype).replace('torch.', '')}: don't hard-code a dtype (no .float(), dtype=torch.float32); "
                    "follow the inputs' dtype (dtype=x.dtype, or *_like)")
    if meta:  # the values differ from what the same code gives on the CPU
        return META_HINT
    if _float32_precision(got["outputs"], expected["outputs"]):
        return FLOAT32_PRECISION_HINT
    for check in property_checks.PROPERTIES.get(exercise, ()):
        hint = check(probe, got["outputs"])
        if hint:
            return hint
    return probe.get("fallback_hint")


META_HINT = (
    "this check runs your code on tensors that are on PyTorch's meta device, standing in for a GPU (they carry "
    "real values, and mixing them with CPU tensors raises, as on a GPU), so that a tensor created on the CPU "
    "shows up without a GPU: create every new tensor on the inputs' device (device=x.device, or x.new_*/"
    "torch.*_like), and compute the same values there as anywhere"
)


FLOAT32_PRECISION_HINT = (
    "the float64 result is right only to float32's precision (about 6 digits, not 15): a dtype lost on the way, a "
    "step computes in float32 (a torch.tensor(...) of Python floats or a constant made without dtype=, "
    "torch.arange(0, D, 2) / D, .float(), a softmax with dtype=torch.float32): make every new tensor in the inputs' "
    "dtype (dtype=x.dtype), or use Python numbers (math.sqrt) for constants")


def _float32_precision(got_outputs, expected_outputs):
    """Float64 values that miss float64's tolerance but meet float32's: a dtype lost on the way, not a formula."""
    pairs = [(g, e) for g, e in zip(got_outputs, expected_outputs)
             if isinstance(e, torch.Tensor) and e.dtype == torch.float64]
    as_float32 = Tolerance(float64=Tolerance().float32)
    return bool(pairs) and all(_same_form(g, e) and _close(g, e, as_float32) for g, e in pairs)


# Errors whose message names the mistake, whatever the exercise: (a part of the message, the likely mistake).
ERROR_HINTS = (
    ("view size is not compatible with input tensor's size and stride",
     "`.view` never copies, so it cannot merge axes that a transpose has separated in memory: use .reshape(...), "
     "or .contiguous().view(...)"),
    ("the module's parameters don't match the reference's",  # the runner's, when a probe's weights don't load
     "the module built from the probe's arguments has other parameters than the given __init__ builds (the "
     "message lists them): keep the given __init__ as it is, its default arguments included"),
    (".numpy() is not supported for tensor subclasses",
     "x.numpy() reads the values into NumPy, which only a CPU tensor allows: on a GPU it raises too (this check runs "
     "on PyTorch's meta device, standing in for a GPU); keep the computation in tensor operations (.item() and "
     ".tolist() work on any device), and make any tensor built from the values with device=x.device"),
)


def _error_hint(error):
    return next((hint for part, hint in ERROR_HINTS if part in error.get("message", "")), None)


def _raised_like(error, mistakes):
    """The hint of a known mistake that raises this very error (the same type and message), if one does."""
    for hint, mistaken in mistakes:
        raised = mistaken.get("error") or {}
        if not mistaken.get("ok") and (raised.get("type"), raised.get("message")) == (error["type"], error["message"]):
            return hint
    return None


VALUES_READ_HINT = (
    "your code reads tensor values into Python (.item()/.tolist()/a loop over values), which is fine: this check "
    "runs on PyTorch's meta device, standing in for a GPU, and carries the values as a GPU does; but a tensor made "
    "from them (torch.tensor(...), torch.zeros(...)) lands on the CPU unless given device=x.device, and mixing it "
    "with the inputs raises, here as on a GPU: make it with device=x.device, or keep the computation in tensor "
    "operations"
)


def _meta_hint(probe, got):
    if probe.get("device") != "meta":
        return None
    read = got.get("values_read")
    mixed = "found at least two devices" in str((got.get("error") or {}).get("message", ""))
    return VALUES_READ_HINT if isinstance(read, int) and read > 0 and mixed else META_HINT


def _name(probe, i):
    names = probe.get("output_names") or []
    return names[i] if i < len(names) else f"output {i}"


def _same_form(got, expected):
    """Both tensors of one shape and dtype."""
    return (isinstance(got, torch.Tensor) and isinstance(expected, torch.Tensor) and got.shape == expected.shape
            and got.dtype == expected.dtype)


def _compare_value(label, got, expected, tolerance):
    """Why one returned value differs from the expected one, or None if it doesn't."""
    if expected is None:
        return None if got is None else f"{label} should be None, got a {type(got).__name__}"
    if not isinstance(expected, torch.Tensor):
        if _close(got, expected, tolerance):
            return None
        return f"{label} is {got!r}, expected {expected!r}"
    if not isinstance(got, torch.Tensor):
        return f"{label} should be a tensor, got {type(got).__name__}"
    if got.shape != expected.shape:
        return f"{label} has shape {_shape(got)} but should have shape {_shape(expected)}"
    if got.dtype != expected.dtype:
        if expected.dtype == torch.bool:
            return f"{label} has dtype {got.dtype} but should be torch.bool: a mask is True where attention is blocked"
        return (
            f"{label} has dtype {got.dtype} but should be {expected.dtype}: follow the dtype of the "
            "inputs (don't hard-code float32; create new tensors with dtype=x.dtype or *_like)"
        )
    if expected.is_floating_point() and got.isnan().any() and not expected.isnan().any():
        return f"{label} contains NaN where the expected values are finite"
    if _close(got, expected, tolerance):
        return None
    if not expected.is_floating_point():
        wrong = int((got != expected).sum())
        return f"{label}: {wrong} of {expected.numel()} entries are wrong"
    rtol, atol = tolerance.for_dtype(expected.dtype)
    return f"{label}: wrong values ({_largest_difference(got, expected)}; rtol={rtol:g}, atol={atol:g})"


def compare(exercise, probe, got, expected, mistakes=(), tolerance=Tolerance(), source=None, judged_on_own=None):
    """(message, likely mistake) pairs saying how ``got`` falls short of ``expected`` (empty: it passed).

    ``mistakes`` are (hint, result) pairs: what known wrong answers return on this probe.
    ``source`` is the answer cell, which decides a probe with a "source_rule" (static.RULES).
    A probe passed by judging it against the student's own results (see _own_judgement) adds to the list
    ``judged_on_own`` how its twin reads ("in float32"; "gradients" for a gradient probe).
    Raises NotImplementedError when the student's code is still a stub.
    """
    where = f"[{probe['title']}]"
    error = got.get("error", {})
    if not got.get("ok") and error.get("type") == "NotImplementedError" and error.get("stub", True):
        raise NotImplementedError(f"{exercise} is not implemented yet: write it in its answer cell")
    if probe.get("source_rule") and source is not None:
        broken = static.RULES[probe["source_rule"]](source)
        advice = (probe.get("op_limit") or {}).get("advice")
        return [(f"{where} {broken}: {advice}", advice)] if broken else []
    if not expected.get("ok"):
        want = expected["error"]["type"]
        # A probe's own "hint" says what its failing most likely means (e.g. the missing check).
        if got.get("ok"):
            return [(f"{where} should raise {want} ({expected['error']['message']}), but it returned normally",
                     probe.get("hint"))]
        if got["error"]["type"] != want:  # an error that names its own cause says more than the probe's hint
            return [(f"{where} raised {got['error']['type']} ({got['error']['message']}); expected {want}",
                     _error_hint(got["error"]) or probe.get("hint"))]
        return []
    if not got.get("ok") and probe.get("memory_budget") and _out_of_memory(got["error"]):
        return [(_over_budget_message(where, probe, got["error"]), probe.get("memory_advice"))]
    if not got.get("ok"):
        error = got["error"]
        trace = f"\n{error['traceback'].rstrip()}" if error.get("traceback") else ""
        # A ValueError where none is due is the student's own check firing too early: the probe's hint.
        hint = (_raised_like(error, mistakes) or _error_hint(error) or _meta_hint(probe, got)
                or (probe.get("hint") if error["type"] == "ValueError" else None) or probe.get("fallback_hint"))
        return [(f"{where} raised {error['type']}: {error['message']}{trace}", hint)]

    if probe.get("op_limit"):
        return _compare_cost(probe, got)
    got_outputs, expected_outputs = got["outputs"], expected["outputs"]
    if len(got_outputs) != len(expected_outputs):
        names = ", ".join(probe.get("output_names") or []) or f"{len(expected_outputs)} values"
        known = next((hint for hint, mistaken in mistakes if mistaken.get("ok")  # e.g. a known mistake returning None
                      and _matches(got_outputs, mistaken["outputs"], tolerance)), None)
        return [(f"{where} returned {len(got_outputs)} value(s); expected {len(expected_outputs)} ({names})", known)]
    failures = []
    twins = got.get("cpu_outputs") if probe.get("device") == "meta" else None
    for i, (g, e) in enumerate(zip(got_outputs, expected_outputs)):
        problem = _compare_value(_name(probe, i), g, e, tolerance)
        if problem and twins is not None and i < len(twins) and _same_form(g, e):
            # The device requirement is about the device, not the formula: values that the same code also
            # gives on the CPU are its own (another requirement judges them); other values are a special case.
            problem = _compare_value(_name(probe, i), g, twins[i], tolerance) and (
                f"{_name(probe, i)} on the meta device differs from what your code returns for the same inputs on "
                "the CPU: compute the same way on every device (no special case for x.is_meta or a device)")
        # On the meta device a tensor of the right shape made elsewhere (on the CPU) is a device mistake
        # first, whatever its values.
        on_meta = expected["devices"][i] == "meta" and isinstance(g, torch.Tensor) and g.shape == getattr(e, "shape", None)
        if (problem is None or on_meta) and isinstance(e, torch.Tensor) and got["devices"][i] != expected["devices"][i]:
            problem = (
                f"{_name(probe, i)} is on {got['devices'][i]} but the inputs are on {expected['devices'][i]}: "
                "create new tensors on the inputs' device (device=x.device), never with .cuda() or .cpu()"
            )
        if problem:
            failures.append(problem)
    own = None  # the problems found judging against the student's own results, where that is how it is judged
    if failures:
        own = _own_judgement(probe, got, expected, tolerance)
        if own is None:
            hint = _diagnose(exercise, probe, got, expected, mistakes, tolerance)
            return [(f"{where} " + "; ".join(failures), hint)]
        if own:
            hint = _diagnose(exercise, probe, got, expected, mistakes, tolerance)
            return [(f"{where} {problem}", hint or advice) for problem, advice in own]
        failures = []  # passed, judged against their own results
        if judged_on_own is not None:
            judged_on_own.append((probe.get("plain") or {}).get("plain_as") or "gradients")

    detached = None  # the likely mistake when a gradient is missing
    for kind in ("input_grads", "param_grads") if own is None else ():  # judged on its own: reach, not values
        for key, e in expected.get(kind, {}).items():
            g = got.get(kind, {}).get(key)
            label = f"the gradient of {'input ' + str(key) if kind == 'input_grads' else key}"
            if e is not None and g is None:
                failures.append(f"{label} is missing: does something detach the computation (.detach(), .data, .item())?")
                detached = detached or (f"no gradient reaches {label.removeprefix('the gradient of ')}: something "
                                        "detaches the computation (.detach(), .data, .item())")
            else:
                problem = _compare_value(label, g, e, tolerance)
                if problem:
                    failures.append(problem)
    results = [(f"{where} {f}", detached) for f in failures]
    got_fixtures, expected_fixtures = got.get("fixtures", []), expected.get("fixtures", [])
    if len(got_fixtures) != len(expected_fixtures):
        results.append((f"{where} the record of the model it was given is missing: the results were not written by "
                        "the grader", None))
    for g, e in zip(got_fixtures, expected_fixtures):
        # The mode the model is left in is its state now, not a record of the call: only restoring it shows it.
        if "training" in e and _wanted(probe, "training") and g.get("training") != e["training"]:
            hint = property_checks.FIXTURE_HINTS["training"]
            results.append((f"{where} {hint}", hint))
    return results


# ----------------------------------------------------------------------------- judged against their own code
# A requirement about a property of the student's own code (the dtype it follows, the device, dropout's mode,
# its gradients) is judged against the reference's values where the student's formula is right, and against
# their own results where it is wrong, so that a wrong formula costs the formula's share, not these too: the
# output in float64 must equal their own in float32 (a probe's "plain" twin, probes.with_plain_twin), and
# gradients must reach every input and weight that the reference's reach. Only results that show an answer
# are judged so (_not_an_answer): a stub's zeros, the input handed back, a random or constant tensor, or a
# weight mixed in with a zero factor, are judged against the reference as before.
def _ok_result(result):
    return isinstance(result, dict) and result.get("ok") is True and isinstance(result.get("outputs"), list)


def _same_forms(got, expected):
    """Every output of the form (shape, dtype, device) the reference's has, and every other value equal:
    only values differ."""
    devices_got, devices_expected = got.get("devices"), expected.get("devices")
    if len(got["outputs"]) != len(expected["outputs"]) or devices_got != devices_expected:
        return False
    return all(_same_form(g, e) if isinstance(e, torch.Tensor) else _close(g, e, Tolerance())
               for g, e in zip(got["outputs"], expected["outputs"]))


def _own_judgement(probe, got, expected, tolerance):
    """The (problem, likely mistake) pairs of a probe judged against the student's own results (empty: it
    passes so), or None where it is judged against the reference's: their formula is right on these inputs
    (the reference's comparison is the stricter), the form of an output differs, or their results show no
    answer."""
    requirement = probe.get("requirement") or ""
    if not _same_forms(got, expected):
        return None
    if probe.get("plain") is not None:
        return _against_plain_twin(probe, got, expected, tolerance)
    if probe.get("grad_outputs") is not None and "gradient" in requirement:
        refused = _not_an_answer(probe, got, expected)
        if refused is None:
            return []
        return [refused] if refused[1] else None  # a gradient missing fails it by name
    return None


def _against_plain_twin(probe, got, expected, tolerance):
    plain, expected_plain = got.get("plain"), expected.get("plain")
    if not _ok_result(plain) or not _ok_result(expected_plain) or not _same_forms(plain, expected_plain):
        return None
    if _matches(plain["outputs"], expected_plain["outputs"], tolerance):
        return None  # their formula is right here: the requirement is judged against the reference
    if not _depends_on_something(expected_plain) or _not_an_answer(probe["plain"], plain, expected_plain,
                                                                   every_weight=False) is not None:
        return None
    how = probe["plain"].get("plain_as", "in the plain case")
    # Their own results in float32 stand for those in float64: compared at float32's tolerance.
    loose = Tolerance(tolerance.float32, tolerance.float32)
    problems = []
    for i, (g, own, e) in enumerate(zip(got["outputs"], plain["outputs"], expected["outputs"])):
        if isinstance(e, torch.Tensor) and isinstance(own, torch.Tensor) and own.shape == e.shape:
            own = own.to(e.dtype)
        problem = _compare_value(_name(probe, i), g, own, loose)
        if problem and _same_form(g, own) and not (g.is_floating_point() and g.isnan().any()):
            difference = _largest_difference(g, own) if g.is_floating_point() else "other entries"
            problem = (f"{_name(probe, i)} differs from what your code returns for the same inputs {how} "
                       f"({difference}): judged against your own results, since your values differ from the "
                       "reference's there")
        if problem:
            problems.append((problem, None))
    return problems


def _depends_on_something(expected):
    """Whether the reference's output has a gradient with respect to an input or a weight: where it has none (a
    table made from sizes alone), nothing shows that an output is an answer rather than any tensor of its form."""
    grads = [*(expected.get("input_grads") or {}).values(), *(expected.get("param_grads") or {}).values()]
    return any(isinstance(g, torch.Tensor) and bool(g.any()) for g in grads)


def _constant(t):
    return t.numel() > 1 and bool((t == t.flatten()[0]).all())


def _float_inputs(probe):
    """The probe's floating tensors given as arguments (in lists too)."""
    found, stack = [], [*probe.get("args", ()), *probe.get("kwargs", {}).values()]
    while stack:
        value = stack.pop()
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            found.append(value)
        elif isinstance(value, (list, tuple)):
            stack.extend(value)
    return found


def _not_an_answer(probe, got, expected, every_weight=True):
    """(why, likely mistake) when the student's results show no answer to judge against itself, else None:
    an output is constant or an input handed back where the reference's is neither, or an input that the
    reference's output depends on (a gradient with a value other than zero) gets no gradient, a zero one, or
    one that is the same everywhere where the reference's is not (a weight summed in); so does every weight,
    or, without ``every_weight``, at least half of them (a formula that leaves out one sublayer's weights is
    a wrong answer, not a non-answer: it loses the formula's share)."""
    inputs = _float_inputs(probe)
    for i, (g, e) in enumerate(zip(got["outputs"], expected["outputs"])):
        if not isinstance(e, torch.Tensor) or not e.is_floating_point():
            continue
        if not g.isfinite().all() and e.isfinite().all():
            return f"{_name(probe, i)} is not finite", None
        if _constant(g) and not _constant(e):
            return f"{_name(probe, i)} is the same everywhere", None
        for x in inputs:
            if x.shape == g.shape and x.dtype == g.dtype and torch.equal(g, x) and not torch.equal(e, x):
                return f"{_name(probe, i)} is an input, handed back", None
    unreached = []  # (why, likely mistake) of each weight the output does not depend on as the reference's does
    weights = 0
    for kind in ("input_grads", "param_grads"):
        got_grads = got.get(kind)
        got_grads = got_grads if isinstance(got_grads, dict) else {}
        for key, e in (expected.get(kind) or {}).items():
            if not isinstance(e, torch.Tensor) or not e.any():
                continue
            why = _unreached(kind, key, got_grads.get(key), e)
            if why and (kind == "input_grads" or every_weight):
                return why
            weights += kind == "param_grads"
            unreached += [why] if why else []
    return unreached[0] if 2 * len(unreached) > weights else None


def _unreached(kind, key, g, e):
    """Why the gradient ``g`` of an input or weight shows the output does not depend on it as the reference's
    (whose gradient is ``e``) does, or None."""
    what = f"input {key}" if kind == "input_grads" else key
    detached = (f"no gradient reaches {what}: something detaches the computation (.detach(), .data, .item()), or "
                "the output does not use it")
    if not isinstance(g, torch.Tensor) or g.shape != e.shape or not g.isfinite().all() or not g.any():
        return f"the gradient of {what} is {'missing' if g is None else 'zero or not finite'}", detached
    if _constant(g) and not _constant(e):
        return f"the gradient of {what} is the same everywhere: the output does not use {what} as it should", None
    return None


def _wanted(probe, key):
    records = probe.get("records")  # the records this probe's requirement is about (None: every one)
    return records is None or key in records


def _record_hint(probe, got, expected):
    """The likely mistake that the model's record of how it was used names, for a probe whose values
    already failed. The stand-in's record is written in the student's process: it may word the
    diagnosis, never decide a check (the stand-in's values do that)."""
    for g, e in zip(got.get("fixtures") or [], expected.get("fixtures") or []):
        if not isinstance(g, dict):
            continue
        for key, value in e.items():
            if key != "training" and _wanted(probe, key) and g.get(key) != value:
                return property_checks.FIXTURE_HINTS.get(key)
    return None


def _compare_cost(probe, got):
    """A probe with an "op_limit" checks what the call costs, not its values (other probes do that).
    Counted in the student's process, so only where the caller has no source to read the rule in.

    op_limit: {"at_most": the most tensor operations, and lines of the code under test, a call may
    take; "size": the size it was called at ("max_len=400"); "advice": what to do instead, also
    the likely mistake}. The runner counts both when the probe has "count_ops".
    """
    limit, counted = probe["op_limit"], got.get("op_count") or {}
    operations, lines = counted.get("operations"), counted.get("lines")
    if operations is None or lines is None:
        return [(f"[{probe['title']}] the operations were not counted: the results were not written by the grader",
                 None)]
    if max(operations, lines) <= limit["at_most"]:
        return []
    return [(f"[{probe['title']}] makes {operations} tensor operations and runs {lines} lines of your code for "
             f"{limit['size']} (a whole-tensor answer needs at most {limit['at_most']} of each): {limit['advice']}",
             limit["advice"])]


def _out_of_memory(error):
    """Whether an error is an allocation refused: Python's MemoryError (numpy's too), torch's allocator's."""
    message = str(error.get("message", ""))
    return error.get("type") in ("MemoryError", "OverBudget", "OutOfMemoryError") or (
        error.get("type") == "RuntimeError" and ("can't allocate memory" in message or "not enough memory" in message))


def _over_budget_message(where, probe, error):
    """A call that ran out of its memory budget (runner's "memory_budget"), in words."""
    budget = probe["memory_budget"]
    return (f"{where} ran out of memory: this check gives your function {budget:,} bytes ({budget / 1024:g} KiB) "
            f"beyond its inputs, {probe.get('memory_rule', 'less than it asked for')}, and an allocation failed "
            f"({error['type']}: {str(error.get('message', ''))[:200]})")


class _Lazy:
    """An iterable that asks for its items only when first iterated."""

    def __init__(self, make, i):
        self.make, self.i = make, i

    def __iter__(self):
        return iter(self.make(self.i))


def compare_relation(exercise, probe, got, base_got):
    """Check an output relation between two probes (e.g. permutation equivariance)."""
    relation = probe.get("relation")
    if not relation or not got.get("ok") or not base_got.get("ok"):
        return []
    perm = relation["perm"]
    for axes, g, b in zip(relation["axes"], got["outputs"], base_got["outputs"]):
        if not isinstance(g, torch.Tensor) or not isinstance(b, torch.Tensor):
            continue
        permuted = b
        for axis in axes:
            permuted = permuted.index_select(axis, perm)
        if permuted.shape != g.shape or not torch.allclose(g.double(), permuted.double(), rtol=1e-4, atol=1e-5):
            return [(f"[{probe['title']}] {relation['message']}", None)]
    return []


def check_probes(exercise, probes, got_results, expected_results, mistakes_for=None, tolerance=Tolerance(),
                 requirements=(), source=None):
    """Compare every probe and gather one Report for the exercise, grouped by requirement.

    ``mistakes_for(i)`` gives the (hint, result) pairs of known mistakes on probe i; it is
    called only for probes that fail, since computing them can cost as much as the check.
    ``requirements`` are (key, text, weight) triples; a probe tries the one its "requirement" names.
    ``source``, the answer cell's, decides the probes with a "source_rule".
    """
    report = Report(exercise)
    for key, text, weight in requirements or [(*WHOLE_EXERCISE, 1.0)]:
        report.requirements[key] = RequirementResult(key, text, weight)
    by_id = {probe["id"]: got for probe, got in zip(probes, got_results)}
    for i, (probe, got, expected) in enumerate(zip(probes, got_results, expected_results)):
        mistakes = _Lazy(mistakes_for, i) if mistakes_for else ()
        try:
            own = []
            failures = compare(exercise, probe, got, expected, mistakes, tolerance, source, own)
        except NotImplementedError:
            report.not_implemented = True
            failures = [(f"{exercise} is not implemented yet", None)]
        if not failures and probe.get("relation"):
            failures = compare_relation(exercise, probe, got, by_id.get(probe["relation"]["base"], {}))
        outputs = expected.get("outputs", []) if expected.get("ok") else []
        if any(isinstance(o, torch.Tensor) and o.is_floating_point() for o in outputs):
            report.exact = report.numbers_only = False
        elif any(isinstance(o, float) for o in outputs):
            report.exact = False
        requirement = report.requirements.get(probe.get("requirement", WHOLE_EXERCISE[0]))
        if requirement is None:  # a probe naming no listed requirement: its own line, so it still counts
            key = probe.get("requirement", WHOLE_EXERCISE[0])
            requirement = report.requirements[key] = RequirementResult(key, key)
        for tally in (report, requirement):
            tally.total += 1
            if failures:
                tally.failures.extend(message for message, _ in failures)
                tally.hints.extend(hint for _, hint in failures)
            else:
                tally.passed += 1
        if not failures:
            requirement.judged_on_own.extend(own)
    report.requirements = {k: r for k, r in report.requirements.items() if r.total}
    return report
