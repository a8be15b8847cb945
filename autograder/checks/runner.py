"""Run a student's function or module on one probe and return plain data.

This module is what runs next to student code, in the notebook's kernel for the public
checks and in the sandboxed child when grading. It imports nothing that knows the answers
(no reference, no hidden checks): a probe carries the inputs and the weights, and the run
gives back tensors, numbers and error descriptions, nothing else.

A probe is a plain dict:
    id, title        name and a human description ("float64, batch 3, L=4, S=6")
    construct        None for a function; for a module {"args", "kwargs", "state_dict"}
    method           the method to call on a module ("forward", "encode", ...)
    args, kwargs     the call's arguments: tensors, numbers, strings, None, or fixtures
    dtype, device    "float32"/"float64" (for the module's parameters), "cpu"/"cuda"/"meta" (PyTorch's
                     device of shapes without values: a tensor the code creates without
                     device= lands on the CPU, so the device rule is checkable without a GPU; an
                     operation that mixes meta and CPU tensors raises, as one mixing CUDA and CPU does)
    training         run the module in training mode (default: eval mode), e.g. with dropout=1.0,
                     where every dropped value is zero, to see where dropout is applied
    requirement      the requirement of the exercise the probe tries (checks, not the run, read it)
    noncontiguous    make every floating input of 2+ dims non-contiguous
    plain            a twin probe (the same call in float32, on the CPU, or without dropout): the run
                     runs it as well and returns its result as "plain" (checks judge a requirement
                     about the dtype, device or mode against it where the student's formula is wrong)
    grad_outputs     None, or one tensor (or None) per output: the run back-propagates
                     sum(output * grad_output) and returns the gradients
    expect_error     the name of the exception the call should raise, or None
    records          the keys of a fixture's record (e.g. ScriptedModel.calls) this probe checks;
                     None: every key (a probe checks what its requirement is about)
    returned_parameters  the call returns a module (a model it filled): its parameters, in order, are the
                     outputs (lesson 09's load_llama_weights)
    default_dtype    "float64": run the call with that as torch's default dtype (for code that must
                     follow torch.get_default_dtype())
    count_ops        count what the call costs, returned as "op_count": {"operations": the tensor
                     operations it dispatches, "lines": the lines of the code under test it runs
                     (not the grader's, PyTorch's or Python's own)}; both grow with a Python loop.
                     Measured in the student's process, the counts only word a diagnosis
    memory_budget    bytes the call may allocate beyond what the process holds when it starts (its
                     inputs are loaded by then): the kernel enforces it (RLIMIT_DATA, set here for
                     the call on Linux, and by the grader's sandbox before any answer cell runs, which
                     the student's code cannot lift), and an operation whose result alone is larger
                     raises MemoryError at once, with its shape. An allocation past it raises in
                     the call (MemoryError, or torch's RuntimeError "can't allocate memory")
"""

import contextlib
import functools
import os
import sys
import sysconfig
import traceback

import torch
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves, tree_map

from .llama_fixtures import GQAProjections, LlamaShell

PLAIN_TYPES = (int, float, bool, str, type(None))


class NotImplementedYet(Exception):
    """The student's code raised NotImplementedError: the exercise is still a stub."""


def _dtype(name):
    return {"float32": torch.float32, "float64": torch.float64}[name]


def _noncontiguous(t):
    if t.is_floating_point() and t.dim() >= 2 and t.size(-1) > 1 and t.size(-2) > 1:
        return t.transpose(-1, -2).contiguous().transpose(-1, -2)  # same values, strided
    return t


def _recorded(mask):
    """A mask the model was given, as plain data the grader can compare."""
    if mask is None:
        return None
    return mask.detach().to("cpu").tolist() if isinstance(mask, torch.Tensor) else repr(mask)


class ScriptedModel(nn.Module):
    """A stand-in model for greedy decoding whose next-token logits are a fixed table.

    logits[b, t] scores the token after position t of row b; the model ignores what the
    decoder has produced so far except for its length, so the expected output is known.

    Its values show how it was used, for what ``reveals`` names (a probe names what its requirement
    is about, so that one mistake costs one requirement): "calls" (the source encoded once, before
    the first decode; decode call k given k tokens), "mode" (no gradients, eval mode while decoding)
    and "masks" (encode given ``src_key_padding_mask`` as the probe gave it, decode given it as
    memory_key_padding_mask; None where the probe gave none). A decode made otherwise reads the table
    with its vocabulary rolled (by 1 or 2, one per way, summed), so that the tokens a wrong use
    returns differ from the reference's: the tokens decide, not a record. ``calls`` records how the
    model was used, for the diagnosis's words only.
    """

    def __init__(self, logits, pad_id, d_model=4, src_key_padding_mask=None, reveals=()):
        super().__init__()
        self.pad_id = pad_id
        self.register_buffer("logits", logits)  # (B, max_len, V)
        self.generator = nn.Identity()
        self.reveals = tuple(reveals)
        self._expected_mask = _recorded(src_key_padding_mask)
        self._encodes, self._decodes, self._encoded_mask = 0, 0, None
        self.calls = {"encode": 0, "decode": 0, "grad_enabled": False, "decoded_in_training_mode": False,
                      "src_key_padding_mask": None, "memory_key_padding_mask": None}

    def forward(self, src, tgt, src_key_padding_mask=None, tgt_key_padding_mask=None):
        memory = self.encode(src, src_key_padding_mask)
        return self.generator(self.decode(tgt, memory, tgt_key_padding_mask, src_key_padding_mask))

    def encode(self, src, src_key_padding_mask=None):
        self._encodes += 1
        self._encoded_mask = _recorded(src_key_padding_mask)
        self.calls["encode"] += 1
        self.calls["src_key_padding_mask"] = self._encoded_mask
        return torch.zeros(src.size(0), src.size(1), 4, device=src.device)  # (B, S, 4)

    def _roll(self, tgt, memory_key_padding_mask):
        """How far to roll the vocabulary: 0 for a decode made as the lesson says."""
        ways = {
            "calls": (self._encodes != 1, tgt.size(1) != self._decodes),
            "mode": (torch.is_grad_enabled(), self.training),
            "masks": (self._encoded_mask != self._expected_mask,
                      _recorded(memory_key_padding_mask) != self._expected_mask),
        }
        return sum(shift for group in self.reveals for shift, wrong in zip((1, 2), ways[group]) if wrong)

    def decode(self, tgt, memory, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        self._decodes += 1
        self.calls["decode"] += 1
        self.calls["grad_enabled"] |= torch.is_grad_enabled()
        self.calls["decoded_in_training_mode"] |= self.training
        self.calls["memory_key_padding_mask"] = _recorded(memory_key_padding_mask)
        T = tgt.size(1)
        table = self.logits[: tgt.size(0), :T].roll(self._roll(tgt, memory_key_padding_mask), dims=-1)
        return table.to(tgt.device)  # (B, T, V): generator is the identity


class SharedWeightsModel(nn.Module):
    """A module that shares one weight between two layers (unless not ``shared``), and has a frozen
    parameter (trainable unless ``frozen``)."""

    def __init__(self, vocab, d_model, shared=True, frozen=True):
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.proj = nn.Linear(d_model, vocab)
        if shared:
            self.proj.weight = self.embed.weight
        self.scale = nn.Parameter(torch.ones(d_model), requires_grad=not frozen)


class TinyLM(nn.Module):
    """A stand-in language model for generate and perplexity: float64, deterministic, with a cache.

    The logits after position t are a fixed function of the tokens 0..t and their positions (a
    running mean of one feature vector per token, through a head), as the lesson's DecoderOnlyLM
    gives them. ``cache`` holds one (key, value) pair per layer of ``layers``, each (B, 1, S, d): S
    is its length. A position past ``max_len`` raises IndexError (no table entry), so only
    generate's own check raises ValueError.

    Its values show how it was used, for what ``reveals`` names (a probe names what its requirement
    is about, so that one mistake costs one requirement): with "calls", ``forward(ids)``, a
    ``forward_cached`` on an empty cache and one on a filled cache each read their own head, so the
    tokens generated show which calls made them; with "mode", logits computed with gradients on, or
    in training mode, have their vocabulary rolled (by 1, by 2), so a perplexity or the tokens
    computed so differ from the reference's. The values decide; ``calls`` records each call
    ("forward T" or "cached S_past+T_new"), gradients and mode, for the diagnosis's words only.
    """

    def __init__(self, vocab_size, max_len, seed=0, num_layers=2, d=6, reveals=()):
        super().__init__()
        generator = torch.Generator().manual_seed(seed)
        self.max_len = max_len
        self.reveals = tuple(reveals)
        self.embed = nn.Parameter(torch.randn(vocab_size, d, generator=generator, dtype=torch.float64))
        self.pos = nn.Parameter(torch.randn(max_len, d, generator=generator, dtype=torch.float64))
        self.head = nn.Parameter(torch.randn(d, vocab_size, generator=generator, dtype=torch.float64) * 2)
        # The heads of the two kinds of cached call: buffers, drawn after the parameters (which keep their values).
        for name in ("cached_first_head", "cached_next_head"):
            self.register_buffer(name, torch.randn(d, vocab_size, generator=generator, dtype=torch.float64) * 2)
        self.layers = nn.ModuleList(nn.Identity() for _ in range(num_layers))
        self.calls = {"lm_calls": [], "lm_grad_enabled": False, "lm_ran_in_training_mode": False}

    def _record(self, call):
        self.calls["lm_calls"].append(call)
        self.calls["lm_grad_enabled"] |= torch.is_grad_enabled()
        self.calls["lm_ran_in_training_mode"] |= self.training

    def _features(self, ids, start):
        if start + ids.size(1) > self.max_len:
            raise IndexError(f"position {start + ids.size(1) - 1} is out of range: the model has max_len={self.max_len}")
        return torch.tanh(self.embed[ids] + self.pos[start : start + ids.size(1)])  # (B, T, d)

    def _logits(self, features, T_new, head):
        S = features.size(1)
        counts = torch.arange(1, S + 1, dtype=features.dtype, device=features.device)  # (S,)
        if "calls" not in self.reveals:
            head = self.head
        logits = (features.cumsum(dim=1) / counts[:, None])[:, S - T_new:] @ head  # (B, T_new, V)
        if "mode" in self.reveals:
            logits = logits.roll(int(torch.is_grad_enabled()) + 2 * int(self.training), dims=-1)
        return logits

    def forward(self, ids, key_padding_mask=None):
        self._record(f"forward {ids.size(1)}")
        return self._logits(self._features(ids, 0), ids.size(1), self.head)

    def forward_cached(self, ids_new, cache):
        past = 0 if cache[0] is None else cache[0][0].size(2)
        self._record(f"cached {past}+{ids_new.size(1)}")
        features = self._features(ids_new, past)  # (B, T_new, d)
        if cache[0] is not None:
            features = torch.cat([cache[0][0][:, 0], features], dim=1)  # (B, S, d)
        for i in range(len(cache)):
            cache[i] = (features[:, None], features[:, None])  # (B, 1, S, d) each
        return self._logits(features, ids_new.size(1), self.cached_next_head if past else self.cached_first_head)


class AttentionProjections(nn.Module):
    """What cached_self_attention uses of a lesson 02 MultiHeadAttention: its four projections and
    num_heads, with the weights given ({"q_proj.weight": ..., ...}, a state_dict)."""

    def __init__(self, d_model, num_heads, state_dict):
        super().__init__()
        self.num_heads = num_heads
        self.dropout = 0.0
        dtype = state_dict["q_proj.weight"].dtype
        self.q_proj, self.k_proj, self.v_proj, self.out_proj = (nn.Linear(d_model, d_model, dtype=dtype)
                                                                for _ in range(4))
        self.load_state_dict(state_dict)


def _seeded_generator(seed):
    return torch.Generator().manual_seed(seed)


FIXTURES = {
    "tiny_lm": TinyLM,
    "attention_projections": AttentionProjections,
    "gqa_projections": GQAProjections,
    "llama_shell": LlamaShell,
    "generator": _seeded_generator,  # a torch.Generator, for sampling
    "scripted_model": ScriptedModel,
    "shared_weights_model": SharedWeightsModel,
    "linear": nn.Linear,
    "batch_norm": nn.BatchNorm1d,  # parameters and buffers (running statistics)
    # Bound now, so that switching nn.Transformer off for an exercise leaves this fixture working.
    "transformer": functools.partial(nn.Transformer, batch_first=True),
}


def _on_device(value, device):
    """A tensor or module on the probe's device: on "meta", a MetaWithValues (shapes on the meta device,
    values carried along)."""
    if device == "meta":
        return meta_with_values(value)
    return value.to(device)


def _materialize(value, probe, fixtures):
    """Turn a probe argument into the object passed to the student's code."""
    if isinstance(value, torch.Tensor):
        value = _on_device(value, probe.get("device", "cpu"))
        return _noncontiguous(value) if probe.get("noncontiguous") else value
    if isinstance(value, dict) and "__fixture__" in value:
        fixture = FIXTURES[value["__fixture__"]](*value.get("args", ()), **value.get("kwargs", {}))
        if not isinstance(fixture, nn.Module):
            return fixture  # a torch.Generator
        fixture.train(value.get("training", False))
        fixtures.append(fixture)
        return _on_device(fixture, probe.get("device", "cpu"))
    if isinstance(value, (list, tuple)):
        return type(value)(_materialize(v, probe, fixtures) for v in value)
    return value


def _plain(value):
    """A copy of an output that is safe to hand back: a plain CPU tensor or a plain scalar.

    A MetaWithValues gives the values it carries (its device is recorded apart); a real meta tensor (made
    where the probe's modes were off) has a shape and a dtype but no values: zeros stand in for them.
    """
    if isinstance(value, MetaWithValues):
        return value.value.detach().to("cpu", copy=True).contiguous()
    if isinstance(value, torch.Tensor):
        tensor = value.detach()
        if type(tensor) is not torch.Tensor:
            tensor = tensor.as_subclass(torch.Tensor)
        if isinstance(tensor, torch.Tensor) and tensor.is_meta:
            return torch.zeros(tensor.shape, dtype=tensor.dtype)
        return tensor.to("cpu", copy=True).contiguous()
    if isinstance(value, PLAIN_TYPES):
        return value
    raise TypeError(f"returned an object of type {type(value).__name__}; expected a tensor or a number")


_LIBRARY_PATHS = (os.sep + "autograder" + os.sep, "site-packages", os.sep + "torch" + os.sep)


def _describe(exc):
    frames = traceback.extract_tb(exc.__traceback__)
    # Keep the student's frames (their notebook cells), not the grader's or the library's.
    student = [f for f in frames if not any(part in f.filename for part in _LIBRARY_PATHS)]
    lines = traceback.format_list(student[-3:]) if student else []
    return {"type": type(exc).__name__, "message": str(exc)[:500], "traceback": "".join(lines)[-1500:]}


def _is_stub(exc):
    """Whether a NotImplementedError is the stub's own `raise`, not PyTorch saying that an operation
    "is not implemented for 'Float'" (or any library's NotImplementedError)."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return True
    last = frames[-1]
    if any(part in last.filename for part in _LIBRARY_PATHS):
        return False
    return not str(exc) or not last.line or last.line.lstrip().startswith("raise")


def _build(obj, probe):
    construct = probe.get("construct")
    if construct is None:
        return obj
    module = obj(*construct.get("args", ()), **construct.get("kwargs", {}))
    state_dict = construct.get("state_dict")
    if state_dict is not None:
        result = module.load_state_dict(state_dict, strict=False)
        if result.missing_keys or result.unexpected_keys:
            raise KeyError(
                "the module's parameters don't match the reference's: "
                f"missing {sorted(result.missing_keys)}, unexpected {sorted(result.unexpected_keys)}. "
                "Keep the given __init__ as it is."
            )
    module = _on_device(module.to(dtype=_dtype(probe.get("dtype", "float32"))), probe.get("device", "cpu"))
    module.train(bool(probe.get("training", False)))
    return module


class _CountOperations(TorchDispatchMode):
    """Counts the tensor operations (aten ops) dispatched while it is on."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += 1
        return func(*args, **(kwargs or {}))


_STDLIB = sysconfig.get_paths()["stdlib"]


def _code_under_test(filename):
    """Not the grader's, PyTorch's or Python's own code (nor code that imports generate)."""
    return (not any(part in filename for part in _LIBRARY_PATHS) and not filename.startswith(_STDLIB)
            and not filename.startswith(("<frozen ", "<string>")))


@functools.cache
def _warm_up_counting():
    """The first dispatch mode imports a few modules: done once, outside any count."""
    with _CountOperations():
        torch.zeros(1) + 1


@functools.cache
def warm_up():
    """Load, once, what the probes' first operations would load lazily (the dispatch modes' modules, the
    meta device's, torch._dynamo: some 70 MiB): a process about to be held to a memory budget
    (``memory_budget``) calls this first, so that only the student's code spends the budget."""
    import gc

    import torch._dynamo  # noqa: F401  (what the meta device's first operations import)

    _warm_up_counting()
    for device in ("cpu", "meta"):
        x = torch.ones(2, 3, 4, device=device)
        (x @ x.transpose(-2, -1)).softmax(dim=-1).masked_fill(torch.ones(3, 3, dtype=torch.bool, device=device), 0)
    with _MetaFactories(), _WithinBudget(1 << 40):
        meta_with_values(torch.zeros(2)) + torch.zeros(2, device="meta")
    gc.collect()


@contextlib.contextmanager
def _counting(result):
    """Count the tensor operations dispatched and the lines of the code under test run, into result."""
    lines = 0

    def count_lines(frame, event, arg):
        nonlocal lines
        lines += event == "line"
        return count_lines

    def trace(frame, event, arg):
        return count_lines if _code_under_test(frame.f_code.co_filename) else None

    _warm_up_counting()
    previous, operations = sys.gettrace(), _CountOperations()
    sys.settrace(trace)
    try:
        with operations:
            yield
    finally:
        sys.settrace(previous)
        result["op_count"] = {"operations": operations.count, "lines": lines}


# How often the code under a meta probe read a tensor's values into Python (.item(), .tolist(), bool(x)): the
# run returns it as "values_read", to word the diagnosis of a meta probe that fails (never to decide one).
VALUES_READ = [0]


class MetaWithValues(torch.Tensor):
    """A tensor that says it is on the meta device (``x.device``, ``x.is_meta``) and carries real CPU values.

    Every operation on it computes on the values it carries and gives such tensors back, so a probe on the
    meta device checks values as any probe does: code that special-cases the meta device (returning
    ``torch.empty_like(x)`` when ``x.is_meta``) returns wrong values, not stand-in zeros. As a GPU refuses to
    mix CUDA and CPU tensors, an operation that mixes it with a CPU tensor (not a one-value one, and not a
    copy or CPU indices, which a GPU allows) raises; one given a real meta tensor (made where the probe's
    modes are off) raises too, having no values to compute on.
    """

    ALLOWED = ("aten._to_copy.", "aten.copy_.", "aten.index.", "aten.index_put", "aten._index_put_impl_.",
               "aten.lift_fresh", "aten.detach.", "aten.alias.")

    @staticmethod
    def __new__(cls, value):
        wrapped = torch.Tensor._make_wrapper_subclass(cls, value.shape, strides=value.stride(),
                                                      storage_offset=value.storage_offset(), dtype=value.dtype,
                                                      device="meta", requires_grad=value.requires_grad)
        wrapped.value = value
        return wrapped

    def __repr__(self):
        return f"MetaWithValues({self.value!r})"

    def tolist(self):  # as a CUDA tensor's: the values, read back
        VALUES_READ[0] += 1
        return self.value.tolist()

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        VALUES_READ[0] += func is torch.ops.aten._local_scalar_dense.default  # .item(), float(x), if x: ...
        target = kwargs.get("device")
        if target is not None and torch.device(target).type != "meta":  # .cpu(), .to("cpu"): off the meta device
            return func(*tree_map(_carried, args), **kwargs)
        tensors = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor) and not isinstance(t, cls)]
        if any(t.is_meta for t in tensors):
            raise RuntimeError(f"{func} was given a meta tensor with no values (made with the probe's device "
                               "machinery switched off) next to the probe's meta tensors")
        if any(t.dim() and t.device.type == "cpu" for t in tensors) and not str(func).startswith(cls.ALLOWED):
            raise RuntimeError(f"Expected all tensors to be on the same device, but found at least two devices, "
                               f"meta and cpu! (in {func})")
        args, kwargs = tree_map(_carried, (args, kwargs))
        return tree_map(_wrapped, func(*args, **kwargs))


def _carried(value):
    """What an argument is on the CPU: the values a MetaWithValues carries, the CPU for the meta device."""
    if isinstance(value, MetaWithValues):
        return value.value
    if isinstance(value, torch.device) and value.type == "meta":
        return torch.device("cpu")
    return value


def _wrapped(value):
    return MetaWithValues(value) if isinstance(value, torch.Tensor) and not isinstance(value, MetaWithValues) else value


class _MetaFactories(TorchDispatchMode):
    """While a probe on the meta device runs: a tensor created on the meta device (torch.zeros(..., device=
    x.device), x.to(other.device) of a CPU tensor) is a MetaWithValues, holding the values the CPU gives."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        device = kwargs.get("device")
        on_meta = device is not None and torch.device(device).type == "meta"
        if not on_meta or any(isinstance(t, MetaWithValues) for t in tree_leaves((args, kwargs))):
            return func(*args, **kwargs)
        return tree_map(_wrapped, func(*args, **dict(kwargs, device=torch.device("cpu"))))


class _MetaFromData(TorchFunctionMode):
    """While a probe on the meta device runs: a tensor made from Python data on the meta device
    (torch.tensor(rows, device=x.device), x.new_tensor(values), torch.as_tensor(...)) holds those values, as
    on a GPU. PyTorch builds such a tensor below the dispatch modes, where no values could be carried."""

    FROM_DATA = (torch.tensor, torch.as_tensor, torch.asarray, torch.Tensor.new_tensor)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func not in self.FROM_DATA:
            return func(*args, **kwargs)
        device = kwargs.get("device")
        if device is None and func is torch.Tensor.new_tensor and args and isinstance(args[0], torch.Tensor):
            device = args[0].device
        if device is None or torch.device(device).type != "meta":
            return func(*args, **kwargs)
        if func is torch.Tensor.new_tensor:  # the data's dtype is the tensor's unless given
            kwargs = {"dtype": args[0].dtype, **kwargs}
            func, args = torch.tensor, args[1:]
        with torch._C.DisableTorchFunction():
            made = func(*tree_map(_carried, args), **dict(kwargs, device=torch.device("cpu")))
        return MetaWithValues(made)


def meta_with_values(value, memo=None):
    """``value`` (a tensor, or a module's parameters and buffers, shared ones once) as MetaWithValues."""
    if isinstance(value, torch.Tensor):
        return value if isinstance(value, MetaWithValues) else MetaWithValues(value.detach().clone())
    memo = {} if memo is None else memo
    for module in value.modules():
        for name, param in list(module._parameters.items()):
            if param is not None and not isinstance(param, MetaWithValues):
                if id(param) not in memo:
                    memo[id(param)] = nn.Parameter(MetaWithValues(param.detach().clone()), param.requires_grad)
                module._parameters[name] = memo[id(param)]
        for name, buffer in list(module._buffers.items()):
            if buffer is not None:
                module._buffers[name] = meta_with_values(buffer)
    return value


class OverBudget(MemoryError):
    """An operation's result alone is larger than the memory budget of the call."""


class _WithinBudget(TorchDispatchMode):
    """Raises OverBudget for an operation whose result is larger than the budget: the kernel's limit would
    refuse it too (or, where the kernel does not count memory so, as on macOS, nothing would), and this
    says which tensor broke it. Views share their base's memory and cost nothing."""

    def __init__(self, budget):
        super().__init__()
        self.budget = budget

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if not isinstance(t, torch.Tensor) or t.numel() * t.element_size() <= self.budget:
                continue
            given = {a.untyped_storage().data_ptr() for a in tree_leaves((args, kwargs)) if isinstance(a, torch.Tensor)}
            if t.untyped_storage().data_ptr() not in given:  # not a view of what the operation was given
                raise OverBudget(f"{func} created a tensor of shape {tuple(t.shape)} "
                                 f"({t.untyped_storage().nbytes():,} bytes), more than the whole budget")
        return out


def _data_size():
    """The bytes of data this process holds (VmData: what RLIMIT_DATA limits), or None where Linux's
    /proc is not there."""
    try:
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmData:"))
    except (OSError, StopIteration, ValueError):
        return None


@contextlib.contextmanager
def _within_budget(budget):
    """The kernel limits this process's data to what it holds now plus ``budget`` bytes, during the call."""
    try:
        import resource
    except ImportError:  # Windows: only _WithinBudget's check
        resource = None
    warm_up()
    held = _data_size()
    if resource is None or held is None:
        with _WithinBudget(budget):
            yield
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
    limit = min(value for value in (held + budget, soft, hard) if value != resource.RLIM_INFINITY)
    resource.setrlimit(resource.RLIMIT_DATA, (limit, hard))
    try:
        with _WithinBudget(budget):
            yield
    finally:
        resource.setrlimit(resource.RLIMIT_DATA, (soft, hard))


@contextlib.contextmanager
def _watched(probe, result):
    """The call as the probe asks: under another default dtype, with its cost counted, on one device."""
    previous = torch.get_default_dtype()
    with contextlib.ExitStack() as stack:
        if probe.get("default_dtype"):
            torch.set_default_dtype(_dtype(probe["default_dtype"]))
            stack.callback(torch.set_default_dtype, previous)
        if probe.get("count_ops"):
            stack.enter_context(_counting(result))
        if probe.get("device") == "meta":
            stack.enter_context(_MetaFactories())
            stack.enter_context(_MetaFromData())
        if probe.get("memory_budget"):
            stack.enter_context(_within_budget(probe["memory_budget"]))
        yield


def run_probe(obj, probe, twins=True):
    """Call ``obj`` as the probe says; return {"ok", "outputs", "devices", "grads", "error", ...}.

    With ``twins``, a probe's "plain" twin runs too, its result under "plain" (the known mistakes, which
    only word a diagnosis, run without)."""
    result = {"ok": False, "outputs": [], "devices": [], "input_grads": {}, "param_grads": {}, "fixtures": []}
    fixtures = []
    if probe.get("device") == "meta":
        VALUES_READ[0] = 0
    try:
        target = _build(obj, probe)
        args = _materialize(list(probe.get("args", ())), probe, fixtures)
        kwargs = {k: _materialize(v, probe, fixtures) for k, v in probe.get("kwargs", {}).items()}
        grad_outputs = probe.get("grad_outputs")
        leaves = {}
        if grad_outputs is not None:
            for i, a in enumerate(args):
                if isinstance(a, torch.Tensor) and a.is_floating_point():
                    args[i] = a.detach().requires_grad_(True)
                    leaves[i] = args[i]
        method = probe.get("method")
        call = getattr(target, method) if method and probe.get("construct") is not None else target
        with torch.set_grad_enabled(grad_outputs is not None or torch.is_grad_enabled()), _watched(probe, result):
            returned = call(*args, **kwargs)
        if probe.get("returned_parameters") and isinstance(returned, nn.Module):
            returned = [p for _, p in returned.named_parameters()]  # a tied weight once
        outputs = list(returned) if isinstance(returned, (tuple, list)) else [returned]
        if grad_outputs is not None:
            loss = 0
            for out, g in zip(outputs, grad_outputs):
                if g is not None and isinstance(out, torch.Tensor) and out.requires_grad:
                    loss = loss + (out * g.to(out.device, out.dtype)).sum()
            if isinstance(loss, torch.Tensor):
                loss.backward()
            result["input_grads"] = {i: None if t.grad is None else _plain(t.grad) for i, t in leaves.items()}
            if isinstance(target, nn.Module):
                result["param_grads"] = {
                    n: None if p.grad is None else _plain(p.grad) for n, p in target.named_parameters()
                }
        result["devices"] = [str(o.device) if isinstance(o, torch.Tensor) else None for o in outputs]
        result["outputs"] = [_plain(o) for o in outputs]
        result["fixtures"] = [
            {"training": f.training, **getattr(f, "calls", {})} for f in fixtures
        ]
        result["ok"] = True
        if probe.get("device") == "meta":
            result["cpu_outputs"] = _cpu_twin(obj, probe)
        if twins and probe.get("plain"):
            result["plain"] = run_probe(obj, probe["plain"])
    except NotImplementedError as exc:
        result["error"] = _describe(exc)
        result["error"]["type"] = "NotImplementedError"
        result["error"]["stub"] = _is_stub(exc)
    except (Exception, SystemExit) as exc:  # student code can raise anything; report it, never crash
        result["error"] = _describe(exc)
        if probe.get("device") == "meta":
            result["values_read"] = VALUES_READ[0]
    return result


def _on_the_cpu(value):
    return "cpu" if value == "meta" else torch.device("cpu") if value == torch.device("meta") else value


def _cpu_twin(obj, probe):
    """What the same code returns for the same probe on the CPU (an argument naming the meta device names the
    CPU there), or None if it fails there: on the meta device it must return the same values."""
    twin = dict(probe, id=f"{probe['id']}/cpu-twin", device="cpu", args=[_on_the_cpu(a) for a in probe.get("args", ())],
                kwargs={k: _on_the_cpu(v) for k, v in probe.get("kwargs", {}).items()})
    got = run_probe(obj, twin)
    return got["outputs"] if got["ok"] else None


def run_probes(obj, probes):
    return [run_probe(obj, probe) for probe in probes]


@contextlib.contextmanager
def swapped(namespace, replacements):
    """Put ``replacements`` into ``namespace`` (a dict of globals) for a while, then restore what was there."""
    missing = object()
    saved = {name: namespace.get(name, missing) for name in replacements}
    namespace.update(replacements)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is missing:
                namespace.pop(name, None)
            else:
                namespace[name] = value
