"""Builders for probes: seeded inputs and reference weights, as plain dicts (see ..runner)."""

from dataclasses import dataclass, field

import torch

from ..compare import Tolerance
from ..runner import run_probe

DTYPES = {"float32": torch.float32, "float64": torch.float64}


def randn(*shape, seed, dtype="float32", scale=1.0):
    """A seeded normal tensor; the same seed gives the same values whatever ran before."""
    generator = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=generator, dtype=torch.float64) * scale).to(DTYPES[dtype])


def random_bool_mask(*shape, seed, p=0.3, keep_one=True):
    """True (blocked) with probability p; with keep_one, every row keeps its first key open."""
    generator = torch.Generator().manual_seed(seed)
    mask = torch.rand(*shape, generator=generator) < p
    if keep_one:
        mask[..., 0] = False
    return mask


def additive(mask, dtype="float32"):
    """The float form of a boolean mask: -inf where blocked, 0 elsewhere."""
    return torch.zeros(mask.shape, dtype=DTYPES[dtype]).masked_fill(mask, float("-inf"))


def function_probe(id, title, args=(), kwargs=None, output_names=(), **extra):
    return {"id": id, "title": title, "construct": None, "args": list(args), "kwargs": dict(kwargs or {}),
            "output_names": list(output_names), **extra}


def module_probe(id, title, module_class, init_args=(), init_kwargs=None, args=(), kwargs=None, seed=0,
                 dtype="float32", method="forward", output_names=(), perturb=0.1, **extra):
    """A probe that builds ``module_class`` and loads weights made by the reference.

    The weights are perturbed so that no parameter keeps a value (LayerNorm's ones and zeros,
    say) under which a wrong answer could look right.
    """
    init_kwargs = dict(init_kwargs or {})
    torch.manual_seed(seed)
    reference = module_class(*init_args, **init_kwargs)
    generator = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for p in reference.parameters():
            p.add_(torch.randn(p.shape, generator=generator) * perturb)
    state_dict = {k: v.detach().clone() for k, v in reference.state_dict().items()}
    return {"id": id, "title": title, "construct": {"args": list(init_args), "kwargs": init_kwargs,
            "state_dict": state_dict}, "method": method, "args": list(args), "kwargs": dict(kwargs or {}),
            "dtype": dtype, "output_names": list(output_names), **extra}


def with_gradients(probe, reference, seed):
    """The same probe, also back-propagating a seeded upstream gradient through every output."""
    outputs = run_probe(reference, probe)["outputs"]
    dtype = probe.get("dtype") or next(
        (str(a.dtype).replace("torch.", "") for a in probe["args"] if isinstance(a, torch.Tensor) and a.is_floating_point()),
        "float32",
    )
    grad_outputs = [
        randn(*o.shape, seed=seed + i, dtype=dtype) if isinstance(o, torch.Tensor) and o.is_floating_point() else None
        for i, o in enumerate(outputs)
    ]
    return dict(probe, id=probe["id"] + "/grad", title=probe["title"] + ", gradients", grad_outputs=grad_outputs)


def on_device(probe, device):
    return dict(probe, id=f"{probe['id']}/{device}", title=f"{probe['title']}, on {device}", device=device)


# ----------------------------------------------------------------------------- plain twins
# A requirement about a property of the student's own code (the dtype it follows, the device, dropout's
# mode) is judged against the student's own results where their core formula is wrong: a probe of such a
# requirement carries its "plain" twin, the same call with only what the requirement is about undone
# (float32 for float64, the CPU for another device, dropout=0 for eval-mode dropout), which the runner
# runs too, with gradients so that the grader sees what the output depends on (compare.py judges it).
# Which aspect a requirement is about is read in its key: "dtype-device" is about both.
# Keys of a probe that its twin does without: a twin checks values, never a cost, a rule or a relation.
_NOT_TWINNED = ("relation", "count_ops", "op_limit", "memory_budget", "source_rule", "plain", "grad_outputs",
                "expect_error", "hint", "fallback_hint")


def _float32(value):
    """``value`` with every float64 tensor in it (in lists, tuples and dicts too) made float32."""
    if isinstance(value, torch.Tensor):
        return value.float() if value.dtype == torch.float64 else value
    if isinstance(value, (list, tuple)):
        return type(value)(_float32(v) for v in value)
    if isinstance(value, dict):
        return {k: _float32(v) for k, v in value.items()}
    return value


def _has_float64(value):
    if isinstance(value, torch.Tensor):
        return value.dtype == torch.float64
    if isinstance(value, (list, tuple)):
        return any(_has_float64(v) for v in value)
    if isinstance(value, dict):
        return any(_has_float64(v) for v in value.values())
    return False


def _plain_overrides(probe):
    """What undoes the probe's secondary aspect, and how its twin reads ("in float32"); None when nothing
    does (the probe is a plain one, or its requirement is about its behaviour)."""
    key = probe.get("requirement") or ""
    if probe.get("source_rule") or probe.get("op_limit") or probe.get("expect_error"):
        return None
    construct = probe.get("construct") or {}
    dtype_aspect = "dtype" in key and (probe.get("dtype") == "float64" or probe.get("default_dtype") == "float64"
                                       or _has_float64([probe.get("args"), probe.get("kwargs"), construct]))
    if dtype_aspect:
        overrides = {"dtype": "float32", "args": _float32(probe.get("args", [])), "kwargs": _float32(probe.get("kwargs", {}))}
        if construct:
            overrides["construct"] = _float32(construct)
        if probe.get("default_dtype"):
            overrides["default_dtype"] = None
        return overrides, "in float32"
    device = probe.get("device")
    if "device" in key and device not in (None, "cpu", "meta"):  # the meta device has its CPU twin already
        return {"device": "cpu"}, "on the CPU"
    kwargs = construct.get("kwargs") or {}
    if "dropout" in key and not probe.get("training") and kwargs.get("dropout"):
        return {"construct": dict(construct, kwargs=dict(kwargs, dropout=0.0))}, "with dropout=0"
    return None


def with_plain_twin(probe, reference, seed=7):
    """The probe, carrying its plain twin (see above) when its requirement is about its dtype, device or
    mode; the twin back-propagates a seeded gradient, so that the grader sees which inputs and weights the
    output depends on."""
    found = _plain_overrides(probe)
    if found is None:
        return probe
    overrides, how = found
    twin = {k: v for k, v in probe.items() if k not in _NOT_TWINNED}
    twin.update(overrides, id=f"{probe['id']}/plain", title=f"{probe['title']}, {how}", plain_as=how)
    if run_probe(reference, twin)["ok"]:
        twin = with_gradients(twin, reference, seed)
        twin.update(id=f"{probe['id']}/plain", title=f"{probe['title']}, {how}")
    return dict(probe, plain=twin)


@dataclass(frozen=True)
class Requirement:
    """One rule the lesson's text states for an exercise, worth ``weight`` shares of its points.

    Every probe names the requirement it tries (its "requirement" key); a requirement is met
    when all of its probes pass. The public checks try every requirement, the hidden checks
    try the same ones on other inputs.
    """

    key: str
    text: str  # the rule, in the lesson's words: "masks block keys: bool True = blocked, float added"
    weight: float = 1.0


def requiring(key, probes):
    """The probes, each marked as trying requirement ``key``."""
    return [dict(probe, requirement=key) for probe in probes]


@dataclass
class ExerciseChecks:
    """Everything the grader knows about one exercise.

    public_probes: shown to students (their expected values are stored as data);
    hidden_probes: the grader's extra, stranger inputs (the grader runs both);
    mistakes: (hint, wrong implementation) pairs that name what a failing answer likely did;
    requirements: the rules the lesson states, in the order a student should fix them.
    """

    name: str
    reference: object
    public_probes: callable
    hidden_probes: callable
    mistakes: list = field(default_factory=list)
    tolerance: Tolerance = Tolerance()
    requirements: tuple = ()

    def __post_init__(self):
        # Every probe of a requirement about a secondary aspect carries its plain twin, whatever lesson built it.
        public, hidden = self.public_probes, self.hidden_probes
        self.public_probes = lambda: self._twinned(public())
        self.hidden_probes = lambda *args, **kwargs: self._twinned(hidden(*args, **kwargs))

    def _twinned(self, probes):
        return [with_plain_twin(probe, self.reference) for probe in probes]

    def requirement_table(self):
        """The requirements as plain data [(key, text, weight)], stored with the public checks."""
        return [(r.key, r.text, r.weight) for r in self.requirements]
