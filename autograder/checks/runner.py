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
                     (not the grader's, PyTorch's or Python's own), "largest": the shape of the
                     largest tensor (by numel) an operation returned}; both counts grow with a Python
                     loop, "largest" shows a memory bound broken (a whole (L, S) matrix of scores)
"""

import contextlib
import functools
import math
import os
import sys
import sysconfig
import traceback

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

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
    ``calls`` records how it was used: encode and decode calls, whether gradients were on or
    the model was in training mode during a decode call, and the padding masks it was given.
    """

    def __init__(self, logits, pad_id, d_model=4):
        super().__init__()
        self.pad_id = pad_id
        self.register_buffer("logits", logits)  # (B, max_len, V)
        self.generator = nn.Identity()
        self.calls = {"encode": 0, "decode": 0, "grad_enabled": False, "decoded_in_training_mode": False,
                      "src_key_padding_mask": None, "memory_key_padding_mask": None}

    def forward(self, src, tgt, src_key_padding_mask=None, tgt_key_padding_mask=None):
        memory = self.encode(src, src_key_padding_mask)
        return self.generator(self.decode(tgt, memory, tgt_key_padding_mask, src_key_padding_mask))

    def encode(self, src, src_key_padding_mask=None):
        self.calls["encode"] += 1
        self.calls["src_key_padding_mask"] = _recorded(src_key_padding_mask)
        return torch.zeros(src.size(0), src.size(1), 4, device=src.device)  # (B, S, 4)

    def decode(self, tgt, memory, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        self.calls["decode"] += 1
        self.calls["grad_enabled"] |= torch.is_grad_enabled()
        self.calls["decoded_in_training_mode"] |= self.training
        self.calls["memory_key_padding_mask"] = _recorded(memory_key_padding_mask)
        T = tgt.size(1)
        return self.logits[: tgt.size(0), :T].to(tgt.device)  # (B, T, V): generator is the identity


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
    running mean of one feature vector per token, through a head), so ``forward(ids)`` and
    ``forward_cached(ids_new, cache)`` give the same logits, as the lesson's DecoderOnlyLM does.
    ``cache`` holds one (key, value) pair per layer of ``layers``, each (B, 1, S, d): S is its length.
    A position past ``max_len`` raises IndexError (no table entry), so only generate's own check
    raises ValueError. ``calls`` records how the model was used: each call ("forward T" or
    "cached S_past+T_new"), and whether gradients were on or the model was in training mode.
    """

    def __init__(self, vocab_size, max_len, seed=0, num_layers=2, d=6):
        super().__init__()
        generator = torch.Generator().manual_seed(seed)
        self.max_len = max_len
        self.embed = nn.Parameter(torch.randn(vocab_size, d, generator=generator, dtype=torch.float64))
        self.pos = nn.Parameter(torch.randn(max_len, d, generator=generator, dtype=torch.float64))
        self.head = nn.Parameter(torch.randn(d, vocab_size, generator=generator, dtype=torch.float64) * 2)
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

    def _logits(self, features, T_new):
        S = features.size(1)
        counts = torch.arange(1, S + 1, dtype=features.dtype, device=features.device)  # (S,)
        return (features.cumsum(dim=1) / counts[:, None])[:, S - T_new:] @ self.head  # (B, T_new, V)

    def forward(self, ids, key_padding_mask=None):
        self._record(f"forward {ids.size(1)}")
        return self._logits(self._features(ids, 0), ids.size(1))

    def forward_cached(self, ids_new, cache):
        past = 0 if cache[0] is None else cache[0][0].size(2)
        self._record(f"cached {past}+{ids_new.size(1)}")
        features = self._features(ids_new, past)  # (B, T_new, d)
        if cache[0] is not None:
            features = torch.cat([cache[0][0][:, 0], features], dim=1)  # (B, S, d)
        for i in range(len(cache)):
            cache[i] = (features[:, None], features[:, None])  # (B, 1, S, d) each
        return self._logits(features, ids_new.size(1))


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


def _materialize(value, probe, fixtures):
    """Turn a probe argument into the object passed to the student's code."""
    if isinstance(value, torch.Tensor):
        value = value.to(probe.get("device", "cpu"))
        return _noncontiguous(value) if probe.get("noncontiguous") else value
    if isinstance(value, dict) and "__fixture__" in value:
        fixture = FIXTURES[value["__fixture__"]](*value.get("args", ()), **value.get("kwargs", {}))
        if not isinstance(fixture, nn.Module):
            return fixture  # a torch.Generator
        fixture.train(value.get("training", False))
        fixtures.append(fixture)
        return fixture.to(probe.get("device", "cpu"))
    if isinstance(value, (list, tuple)):
        return type(value)(_materialize(v, probe, fixtures) for v in value)
    return value


def _plain(value):
    """A copy of an output that is safe to hand back: a plain CPU tensor or a plain scalar.

    A tensor on the meta device has a shape and a dtype but no values: zeros stand in for them.
    """
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
    module = module.to(device=probe.get("device", "cpu"), dtype=_dtype(probe.get("dtype", "float32")))
    module.train(bool(probe.get("training", False)))
    return module


class _CountOperations(TorchDispatchMode):
    """Counts the tensor operations (aten ops) dispatched while it is on."""

    def __init__(self):
        super().__init__()
        self.count = 0
        self.largest = []  # the shape of the largest tensor an operation returned (views included)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += 1
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.numel() > math.prod(self.largest or [0]):
                self.largest = list(t.shape)
        return out


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
        result["op_count"] = {"operations": operations.count, "lines": lines, "largest": operations.largest}


class _OneDevice(TorchDispatchMode):
    """On the meta device, refuses an operation that mixes meta tensors with CPU ones, as a GPU refuses
    to mix CUDA and CPU tensors (and allows what a GPU allows: one-value CPU tensors, copies, CPU indices).
    Without it a few operations (an embedding lookup with CPU positions) would pass on meta."""

    ALLOWED = ("aten._to_copy.", "aten.copy_.", "aten.index.", "aten.index_put", "aten._index_put_impl_.")

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        devices = {t.device.type for t in tree_leaves((args, kwargs or {}))
                   if isinstance(t, torch.Tensor) and (t.dim() or t.device.type != "cpu")}
        if {"meta", "cpu"} <= devices and not str(func).startswith(self.ALLOWED):
            raise RuntimeError(f"Expected all tensors to be on the same device, but found at least two devices, "
                               f"meta and cpu! (in {func})")
        return func(*args, **(kwargs or {}))


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
            stack.enter_context(_OneDevice())
        yield


def run_probe(obj, probe):
    """Call ``obj`` as the probe says; return {"ok", "outputs", "devices", "grads", "error", ...}."""
    result = {"ok": False, "outputs": [], "devices": [], "input_grads": {}, "param_grads": {}, "fixtures": []}
    fixtures = []
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
    except NotImplementedError as exc:
        result["error"] = _describe(exc)
        result["error"]["type"] = "NotImplementedError"
        result["error"]["stub"] = _is_stub(exc)
    except (Exception, SystemExit) as exc:  # student code can raise anything; report it, never crash
        result["error"] = _describe(exc)
    return result


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
