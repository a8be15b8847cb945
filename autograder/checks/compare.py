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


def _close(got, expected, tolerance):
    if not isinstance(got, torch.Tensor) or not isinstance(expected, torch.Tensor):
        if isinstance(expected, float) and isinstance(got, (int, float)) and not isinstance(got, bool):
            return math.isclose(got, expected, rel_tol=1e-9, abs_tol=1e-12)
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
    if not _same_shapes(got["outputs"], expected["outputs"]):
        return None  # the shape message says it better than any property could
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
    "the float64 result is right only to float32's precision (it would pass as float32): a step computes in float32 "
    "(a torch.tensor(...) or a constant made without dtype=, .float(), a softmax with dtype=torch.float32): make "
    "every tensor in the inputs' dtype (dtype=x.dtype), or use Python numbers (math.sqrt) for constants")


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


def _meta_hint(probe):
    return META_HINT if probe.get("device") == "meta" else None


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


def compare(exercise, probe, got, expected, mistakes=(), tolerance=Tolerance(), source=None):
    """(message, likely mistake) pairs saying how ``got`` falls short of ``expected`` (empty: it passed).

    ``mistakes`` are (hint, result) pairs: what known wrong answers return on this probe.
    ``source`` is the answer cell, which decides a probe with a "source_rule" (static.RULES).
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
        if got["error"]["type"] != want:
            return [(f"{where} raised {got['error']['type']} ({got['error']['message']}); expected {want}",
                     probe.get("hint"))]
        return []
    if not got.get("ok") and probe.get("memory_budget") and _out_of_memory(got["error"]):
        return [(_over_budget_message(where, probe, got["error"]), probe.get("memory_advice"))]
    if not got.get("ok"):
        error = got["error"]
        trace = f"\n{error['traceback'].rstrip()}" if error.get("traceback") else ""
        # A ValueError where none is due is the student's own check firing too early: the probe's hint.
        hint = (_raised_like(error, mistakes) or _error_hint(error) or _meta_hint(probe)
                or (probe.get("hint") if error["type"] == "ValueError" else None) or probe.get("fallback_hint"))
        return [(f"{where} raised {error['type']}: {error['message']}{trace}", hint)]

    if probe.get("op_limit"):
        return _compare_cost(probe, got)
    got_outputs, expected_outputs = got["outputs"], expected["outputs"]
    if len(got_outputs) != len(expected_outputs):
        names = ", ".join(probe.get("output_names") or []) or f"{len(expected_outputs)} values"
        return [(f"{where} returned {len(got_outputs)} value(s); expected {len(expected_outputs)} ({names})", None)]
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
    if failures:
        hint = _diagnose(exercise, probe, got, expected, mistakes, tolerance)
        return [(f"{where} " + "; ".join(failures), hint)]

    detached = None  # the likely mistake when a gradient is missing
    for kind in ("input_grads", "param_grads"):
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
            failures = compare(exercise, probe, got, expected, mistakes, tolerance, source)
        except NotImplementedError:
            report.not_implemented = True
            failures = [(f"{exercise} is not implemented yet", None)]
        if not failures and probe.get("relation"):
            failures = compare_relation(exercise, probe, got, by_id.get(probe["relation"]["base"], {}))
        if expected.get("ok") and any(isinstance(o, torch.Tensor) and o.is_floating_point() or isinstance(o, float)
                                      for o in expected.get("outputs", [])):
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
    report.requirements = {k: r for k, r in report.requirements.items() if r.total}
    return report
