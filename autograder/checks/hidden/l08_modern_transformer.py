"""Lesson 08 checks: RMSNorm, SwiGLU, apply_rotary, GroupedQueryAttention and flash_attention.

Public probes are small and shown to students (their expected values are stored as data);
hidden probes try the same requirements on other sizes, seeds, positions and block sizes.
The mistakes below are what students really write; the grader names the one that reproduces
a failing output.
"""

import math

import torch
import torch.nn.functional as F

from ...reference import GroupedQueryAttention, RMSNorm, SwiGLU, apply_rotary, flash_attention
from ...reference.attention import scaled_dot_product_attention
from ...reference.multihead import merge_heads, split_heads
from .probes import (ExerciseChecks, Requirement, function_probe, module_probe, on_device, randn, random_bool_mask,
                     requiring)


# ============================================================================ RMSNorm
class _RMSNormMistake(RMSNorm):
    variant = None

    def forward(self, x):
        if self.variant == "axis-1":
            return x / torch.sqrt(x.pow(2).mean(dim=1, keepdim=True) + self.eps) * self.weight
        if self.variant == "all-axes":
            return x / torch.sqrt(x.pow(2).mean() + self.eps) * self.weight
        if self.variant == "l2-norm":  # the root of the sum of the squares, sqrt(d_model) times the RMS
            return x / (x.norm(dim=-1, keepdim=True) + self.eps) * self.weight
        if self.variant == "eps-outside":
            return x / (torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True)) + self.eps) * self.weight
        if self.variant == "mean-subtracted":
            centred = x - x.mean(dim=-1, keepdim=True)
            return centred / torch.sqrt(centred.pow(2).mean(dim=-1, keepdim=True) + self.eps) * self.weight
        if self.variant == "no-weight":
            return x / torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        if self.variant == "no-sqrt":
            return x / (x.pow(2).mean(dim=-1, keepdim=True) + self.eps) * self.weight
        raise AssertionError(self.variant)


def _mistake(base, variant):
    return type(f"{base.__name__}_{variant}", (base,), {"variant": variant})


WRONG_AXIS = ("the mean square is taken over the wrong axis (or over every axis): average x.pow(2) over the features "
              "only, dim=-1 (keepdim=True), so that each vector is divided by its own RMS")

RMS_NORM_MISTAKES = [
    (WRONG_AXIS, _mistake(_RMSNormMistake, "axis-1")),
    (WRONG_AXIS, _mistake(_RMSNormMistake, "all-axes")),
    ("x is divided by its norm, the root of the sum of the squares (x.norm is sqrt(d_model) times larger): RMSNorm "
     "divides by the root of their mean, x.pow(2).mean(dim=-1, keepdim=True)", _mistake(_RMSNormMistake, "l2-norm")),
    ("eps is added outside the square root: it goes inside, torch.sqrt(mean_square + eps)",
     _mistake(_RMSNormMistake, "eps-outside")),
    ("the mean is subtracted: that is LayerNorm by another name; RMSNorm divides x itself by its root mean square",
     _mistake(_RMSNormMistake, "mean-subtracted")),
    ("the result is not multiplied by self.weight (the gain g)", _mistake(_RMSNormMistake, "no-weight")),
    ("x is divided by the mean square, not by its square root", _mistake(_RMSNormMistake, "no-sqrt")),
]

RMS_NORM_REQUIREMENTS = (
    Requirement("formula", "x / sqrt(mean(x^2 over the last axis) + eps) * weight, for any leading axes: "
                           "nn.RMSNorm(d_model, eps=1e-6) with the same weight", 2),
    Requirement("dtype-device", "follows the dtype (float64) and device (meta) of its input and weight", 0.5),
)


def _rms_probe(id, title, shape, seed, dtype="float32", scale=1.0, **extra):
    x = randn(*shape, seed=seed + 100, dtype=dtype, scale=scale)
    return module_probe(id, title, RMSNorm, (shape[-1],), None, (x,), None, seed=seed, dtype=dtype,
                        output_names=("output",), **extra)


def rms_norm_public_probes():
    return [
        *requiring("formula", [
            _rms_probe("basic", "batch 2, 4 tokens, d_model=8", (2, 4, 8), seed=1),
            _rms_probe("4d", "4-D input (2, 3, 4, 8)", (2, 3, 4, 8), seed=2),
            _rms_probe("small", "inputs of size 0.001, where eps matters", (2, 3, 8), seed=3, scale=1e-3),
        ]),
        *requiring("dtype-device", [
            _rms_probe("float64", "float64 input and weight", (2, 3, 8), seed=4, dtype="float64"),
            _rms_probe("meta", "input and weight on the meta device", (2, 3, 8), seed=5, device="meta"),
        ]),
    ]


def rms_norm_hidden_probes(devices=("cpu",)):
    return rms_norm_public_probes() + [
        *requiring("formula", [
            _rms_probe("wide", "batch 3, 5 tokens, d_model=32", (3, 5, 32), seed=11, scale=3.0),
            _rms_probe("2d", "2-D input (6, 16)", (6, 16), seed=12),
            _rms_probe("small-2", "inputs of size 0.002, d_model=16", (2, 5, 16), seed=13, scale=2e-3),
        ]),
        *requiring("dtype-device", [
            _rms_probe("float64-2", "float64, batch 3, d_model=16", (3, 2, 16), seed=14, dtype="float64"),
            _rms_probe("meta-2", "on the meta device, d_model=16", (3, 2, 16), seed=15, device="meta"),
            *[on_device(_rms_probe("device", "batch 2, d_model=8", (2, 3, 8), seed=16), d) for d in devices
              if d != "cpu"],
        ]),
    ]


# ============================================================================ SwiGLU
class _SwiGLUMistake(SwiGLU):
    variant = None

    def forward(self, x):
        gate, up = self.w_gate(x), self.w_up(x)
        hidden = {
            "silu-on-up": lambda: gate * F.silu(up),
            "silu-on-both": lambda: F.silu(gate) * F.silu(up),
            "gelu-gate": lambda: F.gelu(gate) * up,
            "sigmoid-gate": lambda: torch.sigmoid(gate) * up,
            "gelu-no-gate": lambda: F.gelu(gate),
            "silu-no-gate": lambda: F.silu(gate),
            "no-silu": lambda: gate * up,
            "silu-of-product": lambda: F.silu(gate * up),
            "gate-twice": lambda: F.silu(gate) * gate,
            "up-twice": lambda: F.silu(up) * up,
        }[self.variant]()
        return self.w_down(hidden)


ONE_LAYER_TWICE = ("one layer is used for both branches: the gate is self.w_gate(x) and the value it scales is "
                   "self.w_up(x), two layers with weights of their own")

SWIGLU_MISTAKES = [
    ("the SiLU is on the wrong branch: it goes on the gate, F.silu(self.w_gate(x)) * self.w_up(x)",
     _mistake(_SwiGLUMistake, "silu-on-up")),
    ("the SiLU is on both branches: only the gate gets it, the up branch stays linear",
     _mistake(_SwiGLUMistake, "silu-on-both")),
    ("the gate uses GELU: SwiGLU's gate is SiLU, F.silu", _mistake(_SwiGLUMistake, "gelu-gate")),
    ("the gate uses a sigmoid (that is GLU): SwiGLU's gate is SiLU, z * sigmoid(z)",
     _mistake(_SwiGLUMistake, "sigmoid-gate")),
    ("a plain GELU network instead of a gate: w_up(x) is never used; multiply F.silu(self.w_gate(x)) by it",
     _mistake(_SwiGLUMistake, "gelu-no-gate")),
    ("there is no gate: w_up(x) is never used; multiply F.silu(self.w_gate(x)) by it",
     _mistake(_SwiGLUMistake, "silu-no-gate")),
    ("the SiLU is missing: the gate is F.silu(self.w_gate(x))", _mistake(_SwiGLUMistake, "no-silu")),
    ("the SiLU is taken of the product of the two branches: only the gate goes through it, "
     "F.silu(self.w_gate(x)) * self.w_up(x)", _mistake(_SwiGLUMistake, "silu-of-product")),
    *[(ONE_LAYER_TWICE, _mistake(_SwiGLUMistake, variant)) for variant in ("gate-twice", "up-twice")],
]

SWIGLU_REQUIREMENTS = (
    Requirement("formula", "w_down(silu(w_gate(x)) * w_up(x)) for any leading axes", 2),
    Requirement("dtype-device", "follows the dtype (float64) and device (meta) of its input and weights", 0.5),
)


def _swiglu_probe(id, title, shape, d_ff, seed, dtype="float32", **extra):
    x = randn(*shape, seed=seed + 100, dtype=dtype)
    return module_probe(id, title, SwiGLU, (shape[-1], d_ff), None, (x,), None, seed=seed, dtype=dtype,
                        output_names=("output",), perturb=0.3, **extra)


def swiglu_public_probes():
    return [
        *requiring("formula", [
            _swiglu_probe("basic", "batch 2, 4 tokens, d_model=8, d_ff=12", (2, 4, 8), 12, seed=21),
            _swiglu_probe("4d", "4-D input (2, 2, 3, 6), d_ff=16", (2, 2, 3, 6), 16, seed=22),
        ]),
        *requiring("dtype-device", [
            _swiglu_probe("float64", "float64 input and weights", (2, 3, 8), 12, seed=23, dtype="float64"),
            _swiglu_probe("meta", "input and weights on the meta device", (2, 3, 8), 12, seed=24, device="meta"),
        ]),
    ]


def swiglu_hidden_probes(devices=("cpu",)):
    return swiglu_public_probes() + [
        *requiring("formula", [
            _swiglu_probe("wide", "batch 3, 5 tokens, d_model=16, d_ff=40", (3, 5, 16), 40, seed=31),
            _swiglu_probe("2d", "2-D input (5, 8), d_ff=8", (5, 8), 8, seed=32),
        ]),
        *requiring("dtype-device", [
            _swiglu_probe("float64-2", "float64, d_model=16, d_ff=24", (2, 4, 16), 24, seed=33, dtype="float64"),
            _swiglu_probe("meta-2", "on the meta device, d_model=16", (2, 4, 16), 24, seed=34, device="meta"),
            *[on_device(_swiglu_probe("device", "batch 2, d_model=8", (2, 3, 8), 12, seed=35), d) for d in devices
              if d != "cpu"],
        ]),
    ]


# ============================================================================ apply_rotary
def _rotary(x, positions=None, base=10000.0, pairs="neighbours", exponent="2i/D", sign=1.0, offset=0,
            ignore_positions=False, layout="interleaved", overwrite=False):
    """Rotary embeddings with one knob turned the wrong way, to reproduce a known mistake."""
    T, D = x.shape[-2:]
    if positions is None or ignore_positions:
        positions = torch.arange(offset, T + offset, device=x.device)
    half = torch.arange(D // 2, dtype=torch.float64, device=x.device)  # i
    inv_freq = base ** ({"2i/D": -2 * half, "i/D": -half, "+2i/D": 2 * half}[exponent] / D)
    angles = positions.to(x.device, torch.float64)[:, None] * inv_freq  # (T, D/2)
    cos, sin = angles.cos().to(x.dtype), (sign * angles.sin()).to(x.dtype)
    if pairs == "halves":
        first, second = x[..., : D // 2], x[..., D // 2:]
        return torch.cat([first * cos - second * sin, first * sin + second * cos], dim=-1)
    even, odd = x[..., 0::2], x[..., 1::2]
    if overwrite:  # the first members written over before the second ones are computed from them
        out = x.clone()
        out[..., 0::2] = even * cos - odd * sin
        out[..., 1::2] = out[..., 0::2] * sin + odd * cos
        return out
    if layout == "halves":  # each pair rotated, the results laid out as two halves
        return torch.cat([even * cos - odd * sin, even * sin + odd * cos], dim=-1)
    return torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).flatten(-2)


def _rotary_halves(x, positions=None, base=10000.0):
    return _rotary(x, positions, base, pairs="halves")


def _rotary_exponent_i(x, positions=None, base=10000.0):
    return _rotary(x, positions, base, exponent="i/D")


def _rotary_sign(x, positions=None, base=10000.0):
    return _rotary(x, positions, base, sign=-1.0)


def _rotary_positions_ignored(x, positions=None, base=10000.0):
    return _rotary(x, positions, base, ignore_positions=True)


def _rotary_from_one(x, positions=None, base=10000.0):
    return _rotary(x, positions, base, offset=1)


def _rotary_base_ignored(x, positions=None, base=10000.0):
    return _rotary(x, positions, 10000.0)


def _rotary_laid_out_as_halves(x, positions=None, base=10000.0):
    return _rotary(x, positions, base, layout="halves")


def _rotary_exponent_positive(x, positions=None, base=10000.0):
    return _rotary(x, positions, base, exponent="+2i/D")


def _rotary_overwritten(x, positions=None, base=10000.0):
    return _rotary(x, positions, base, overwrite=True)


ROTARY_MISTAKES = [
    ("the pairs are the two halves (i, i + D/2); this lesson pairs neighbours (2i, 2i+1): x[..., 0::2] and "
     "x[..., 1::2]", _rotary_halves),
    ("the frequency exponent is i/D; it is 2i/D: base ** (-torch.arange(0, D, 2) / D)", _rotary_exponent_i),
    ("the rotation turns the wrong way: x'[2i] = x[2i] cos - x[2i+1] sin, x'[2i+1] = x[2i] sin + x[2i+1] cos",
     _rotary_sign),
    ("positions are ignored: the angle of the vector in row t is positions[t] * frequency, not t * frequency",
     _rotary_positions_ignored),
    ("positions start at 1: the default positions are 0, 1, ..., T - 1 (torch.arange(T))", _rotary_from_one),
    ("the base argument is ignored: the frequencies are base ** (-2i / D) with the base passed in",
     _rotary_base_ignored),
    ("each pair is rotated, but the results are laid out as two halves (torch.cat): x'[2i] and x'[2i+1] go back "
     "side by side, so interleave them: torch.stack([first, second], dim=-1).flatten(-2)", _rotary_laid_out_as_halves),
    ("the frequencies grow with i: omega_i = base^(-2i/D), with a minus sign in the exponent (or 1 / base^(2i/D))",
     _rotary_exponent_positive),
    ("the first member of each pair is overwritten before the second one is computed from it: compute both from the "
     "original x[..., 0::2] and x[..., 1::2], then put them together", _rotary_overwritten),
]

ODD_D = ("apply_rotary must raise a ValueError when the last axis D is odd: check D % 2 before pairing the features, "
         "and say so in the message")

LEADING_AXES = ("x may have any number of leading axes, (..., T, D): take the last two, T, D = x.shape[-2:], "
                "and index the pairs with x[..., 0::2] and x[..., 1::2]")

ROTARY_REQUIREMENTS = (
    Requirement("formula", "rotates each pair (2i, 2i+1) of the vector in row t by t / base^(2i/D): "
                           "x'[2i] = x[2i] cos - x[2i+1] sin, x'[2i+1] = x[2i] sin + x[2i+1] cos", 3),
    Requirement("positions", "rotates by the positions passed in (e.g. arange(5, 5 + T)), not by the row number"),
    Requirement("shapes", "works for any leading axes (..., T, D), none included", 0.5),
    Requirement("odd-d", "raises a ValueError when D is odd", 0.5),
    Requirement("dtype-device", "follows the dtype (float64) and device (meta) of x", 0.5),
)


def _rotary_probe(id, title, shape, seed, dtype="float32", positions=None, base=None, **extra):
    kwargs = {}
    if positions is not None:
        kwargs["positions"] = positions
    if base is not None:
        kwargs["base"] = base
    return function_probe(id, title, (randn(*shape, seed=seed, dtype=dtype),), kwargs, ("output",), **extra)


def rotary_public_probes():
    return [
        *requiring("formula", [
            _rotary_probe("basic", "(2, 6, 8): 6 positions, D=8", (2, 6, 8), seed=41),
            _rotary_probe("base", "base=100, (1, 5, 8)", (1, 5, 8), seed=42, base=100.0),
        ]),
        *requiring("positions", [
            _rotary_probe("offset", "positions=arange(5, 11), (2, 6, 8)", (2, 6, 8), seed=43,
                          positions=torch.arange(5, 11)),
        ]),
        *requiring("shapes", [
            _rotary_probe("4d", "4-D (B=2, H=2, T=5, D=6)", (2, 2, 5, 6), seed=44, hint=LEADING_AXES,
                          fallback_hint=LEADING_AXES),
            _rotary_probe("2d", "2-D (T=4, D=8), no leading axis", (4, 8), seed=45, hint=LEADING_AXES,
                          fallback_hint=LEADING_AXES),
        ]),
        *requiring("odd-d", [_rotary_probe("odd", "D=7, odd", (2, 4, 7), seed=46, hint=ODD_D)]),
        *requiring("dtype-device", [
            _rotary_probe("float64", "float64 x", (2, 5, 8), seed=47, dtype="float64"),
            _rotary_probe("meta", "x on the meta device", (2, 5, 8), seed=48, device="meta"),
        ]),
    ]


def rotary_hidden_probes(devices=("cpu",)):
    return rotary_public_probes() + [
        *requiring("formula", [
            _rotary_probe("wide", "(3, 9, 16)", (3, 9, 16), seed=51),
            _rotary_probe("base-2", "base=500, (2, 7, 12)", (2, 7, 12), seed=52, base=500.0),
        ]),
        *requiring("positions", [
            _rotary_probe("offset-2", "positions=arange(12, 19), (1, 7, 8)", (1, 7, 8), seed=53,
                          positions=torch.arange(12, 19)),
            _rotary_probe("scattered", "positions 3, 0, 9, 1, (2, 4, 6)", (2, 4, 6), seed=54,
                          positions=torch.tensor([3, 0, 9, 1])),
        ]),
        *requiring("shapes", [
            _rotary_probe("5d", "5-D (2, 1, 2, 6, 4)", (2, 1, 2, 6, 4), seed=55, hint=LEADING_AXES,
                          fallback_hint=LEADING_AXES),
            _rotary_probe("2d-2", "2-D (7, 12)", (7, 12), seed=56, hint=LEADING_AXES, fallback_hint=LEADING_AXES),
        ]),
        *requiring("odd-d", [_rotary_probe("odd-2", "D=5, odd", (1, 3, 5), seed=57, hint=ODD_D)]),
        *requiring("dtype-device", [
            _rotary_probe("float64-2", "float64, (3, 7, 16)", (3, 7, 16), seed=58, dtype="float64"),
            _rotary_probe("meta-2", "on the meta device, (3, 7, 16)", (3, 7, 16), seed=59, device="meta"),
            *[on_device(_rotary_probe("device", "(2, 5, 8)", (2, 5, 8), seed=60), d) for d in devices if d != "cpu"],
        ]),
    ]


# ============================================================================ GroupedQueryAttention
class _GQAMistake(GroupedQueryAttention):
    variant = None

    def forward(self, x, attn_mask=None, positions=None):
        v = self.variant
        q = split_heads(self.q_proj(x), self.num_heads)  # (B, H, T, D)
        k = split_heads(self.k_proj(x), self.num_kv_heads)  # (B, H_kv, T, D)
        values = split_heads((self.k_proj if v == "values-from-k" else self.v_proj)(x), self.num_kv_heads)
        base = 10000.0 if v == "base-ignored" else self.rope_base
        if v == "rotary-before-split":
            q = split_heads(apply_rotary(self.q_proj(x), positions, base), self.num_heads)
            k = split_heads(apply_rotary(self.k_proj(x), positions, base), self.num_kv_heads)
        elif self.rotary and v != "no-rotary":
            at = None if v == "positions-ignored" else positions
            q = apply_rotary(q, at, base)
            k = apply_rotary(k, at, base) if v != "queries-only" else k
            if v == "values-rotated":
                values = apply_rotary(values, at, base)
        group = self.num_heads // self.num_kv_heads
        if v == "repeat":
            k, values = k.repeat(1, group, 1, 1), values.repeat(1, group, 1, 1)
        else:  # the copies along the heads, or (a mistake) along the positions
            axis = 2 if v == "repeat-positions" else 1
            k, values = k.repeat_interleave(group, dim=axis), values.repeat_interleave(group, dim=axis)
        if v == "mask-inverted" and attn_mask is not None and attn_mask.dtype == torch.bool:
            attn_mask = ~attn_mask
        out, weights = scaled_dot_product_attention(q, k, values, None if v == "mask-dropped" else attn_mask)
        if v == "no-out-proj":
            return merge_heads(out), weights
        return self.out_proj(merge_heads(out)), weights


GQA_MISTAKES = [
    ("the key/value heads are repeated in the wrong order: query head h uses kv head h // (num_heads // "
     "num_kv_heads), so copy each kv head for its neighbours with k.repeat_interleave(group, dim=1), not "
     "k.repeat(1, group, 1, 1)", _mistake(_GQAMistake, "repeat")),
    ("the values are rotated too: apply_rotary goes on the queries and the keys only",
     _mistake(_GQAMistake, "values-rotated")),
    ("positions are not passed on: apply_rotary(q, positions) and apply_rotary(k, positions)",
     _mistake(_GQAMistake, "positions-ignored")),
    ("the queries and keys are not rotated: with self.rotary, apply_rotary(q, positions) and apply_rotary(k, "
     "positions) after the split", _mistake(_GQAMistake, "no-rotary")),
    ("only the queries are rotated: rotate the keys too, apply_rotary(k, positions)",
     _mistake(_GQAMistake, "queries-only")),
    ("the queries and keys are rotated before split_heads, over all d_model features at once: rotate each head's "
     "(B, H, T, D) after the split, apply_rotary(q, positions)", _mistake(_GQAMistake, "rotary-before-split")),
    ("attn_mask is not passed on to scaled_dot_product_attention", _mistake(_GQAMistake, "mask-dropped")),
    ("the output projection is missing: return self.out_proj(merge_heads(out)), weights",
     _mistake(_GQAMistake, "no-out-proj")),
    ("self.rope_base is not passed to apply_rotary: apply_rotary(q, positions, self.rope_base), and the same for "
     "the keys", _mistake(_GQAMistake, "base-ignored")),
    ("the key/value heads are copied along the wrong axis: the heads are axis 1 of (B, H_kv, T, D), so "
     "k.repeat_interleave(group, dim=1)", _mistake(_GQAMistake, "repeat-positions")),
    ("the values are projected with k_proj: queries, keys and values each have their own projection, "
     "split_heads(self.v_proj(x), self.num_kv_heads) for the values", _mistake(_GQAMistake, "values-from-k")),
    ("the boolean mask is inverted, read as True = may attend: in this course True means blocked (as in "
     "nn.MultiheadAttention, the opposite of F.scaled_dot_product_attention), so pass attn_mask on as it is",
     _mistake(_GQAMistake, "mask-inverted")),
]

GQA_REQUIREMENTS = (
    Requirement("mha", "with num_kv_heads == num_heads and rotary=False: lesson 02's MultiHeadAttention(bias=False) "
                       "for self-attention, returning out (B, T, C) and the weights (B, H, T, T)", 2),
    Requirement("groups", "query head h uses key/value head h // (num_heads // num_kv_heads)", 2),
    Requirement("rotary", "with rotary, rotates the queries and keys (never the values) per head, at positions", 2),
    Requirement("rope-base", "with rotary, rotates with self.rope_base as apply_rotary's base", 0.5),
    Requirement("mask", "passes attn_mask (bool True = blocked, or float, added) on to the attention"),
    Requirement("errors", "raises a ValueError when num_heads % num_kv_heads or d_model % num_heads is not 0", 0.5),
    Requirement("dtype-device", "follows the dtype (float64) and device (meta) of its input and weights", 0.5),
)


def _gqa_probe(id, title, B, T, C, H, H_kv, seed, rotary=False, dtype="float32", mask=None, positions=None,
               rope_base=None, **extra):
    x = randn(B, T, C, seed=seed + 100, dtype=dtype)
    kwargs = {}
    if mask is not None:
        kwargs["attn_mask"] = mask
    if positions is not None:
        kwargs["positions"] = positions
    init = {"rotary": rotary} if rope_base is None else {"rotary": rotary, "rope_base": rope_base}
    return module_probe(id, title, GroupedQueryAttention, (C, H, H_kv), init, (x,), kwargs,
                        seed=seed, dtype=dtype, output_names=("output", "weights"), perturb=0.3, **extra)


def _gqa_error_probe(id, title, C, H, H_kv, seed, hint):
    return {"id": id, "title": title, "construct": {"args": [C, H, H_kv], "kwargs": {}, "state_dict": None},
            "method": "forward", "args": [randn(1, 3, C, seed=seed)], "kwargs": {}, "dtype": "float32",
            "output_names": ["output", "weights"], "hint": hint}


NOT_DIVISIBLE = ("keep the given __init__: it raises a ValueError when num_heads is not divisible by num_kv_heads "
                 "or d_model by num_heads")


def gqa_public_probes():
    return [
        *requiring("mha", [_gqa_probe("mha", "H_kv = H = 2, rotary=False, batch 2, 4 tokens, d_model=8",
                                      2, 4, 8, 2, 2, seed=61)]),
        *requiring("groups", [
            _gqa_probe("gqa", "H=4 query heads, H_kv=2, rotary=False, d_model=16", 2, 4, 16, 4, 2, seed=62),
            _gqa_probe("mqa", "H=4, H_kv=1 (multi-query), rotary=False, d_model=16", 2, 4, 16, 4, 1, seed=63),
        ]),
        *requiring("rotary", [
            _gqa_probe("rotary", "rotary=True, H_kv = H = 2, 5 tokens", 2, 5, 8, 2, 2, seed=64, rotary=True),
            _gqa_probe("rotary-positions", "rotary=True, positions 2, 3, 7, 8, 12 (with gaps)", 2, 5, 8, 2, 2, seed=65,
                       rotary=True, positions=torch.tensor([2, 3, 7, 8, 12])),
        ]),
        *requiring("rope-base", [
            _gqa_probe("rope-base", "rotary=True, rope_base=100, H=4, H_kv=2, 5 tokens", 2, 5, 16, 4, 2, seed=88,
                       rotary=True, rope_base=100.0),
        ]),
        *requiring("mask", [
            _gqa_probe("causal", "a causal bool mask (T, T), True above the diagonal", 2, 4, 8, 2, 2, seed=66,
                       mask=torch.ones(4, 4, dtype=torch.bool).triu(1)),
            _gqa_probe("float-mask", "a float mask (T, T), added to the scores", 2, 4, 8, 2, 2, seed=84,
                       mask=randn(4, 4, seed=85)),
        ]),
        *requiring("errors", [
            _gqa_error_probe("kv-not-divisible", "num_heads=4, num_kv_heads=3", 8, 4, 3, seed=67, hint=NOT_DIVISIBLE),
            _gqa_error_probe("d-not-divisible", "d_model=10, num_heads=4", 10, 4, 2, seed=68, hint=NOT_DIVISIBLE),
        ]),
        *requiring("dtype-device", [
            _gqa_probe("float64", "float64, H_kv = H = 2, rotary=False", 2, 3, 8, 2, 2, seed=69, dtype="float64"),
            _gqa_probe("meta", "on the meta device, H=4, H_kv=2, rotary=True", 2, 3, 16, 4, 2, seed=70, rotary=True,
                       device="meta"),
        ]),
    ]


def gqa_hidden_probes(devices=("cpu",)):
    return gqa_public_probes() + [
        *requiring("mha", [_gqa_probe("mha-2", "H_kv = H = 4, rotary=False, batch 3, 6 tokens, d_model=16",
                                      3, 6, 16, 4, 4, seed=71)]),
        *requiring("groups", [
            _gqa_probe("gqa-2", "H=6, H_kv=2, rotary=False, d_model=24", 2, 5, 24, 6, 2, seed=72),
            _gqa_probe("gqa-3", "H=8, H_kv=4, rotary=False, d_model=16", 1, 4, 16, 8, 4, seed=73),
        ]),
        *requiring("rotary", [
            _gqa_probe("rotary-2", "rotary=True, H_kv = H = 4, 6 tokens, d_model=16", 2, 6, 16, 4, 4, seed=74,
                       rotary=True),
            _gqa_probe("rotary-positions-2", "rotary=True, positions 10, 11, 15, 30 (with gaps)", 1, 4, 16, 2, 2,
                       seed=75, rotary=True, positions=torch.tensor([10, 11, 15, 30])),
        ]),
        *requiring("rope-base", [
            _gqa_probe("rope-base-2", "rotary=True, rope_base=500000 (Llama 3's), positions 40 .. 45, H=4, H_kv=1",
                       2, 6, 16, 4, 1, seed=89, rotary=True, rope_base=500000.0, positions=torch.arange(40, 46)),
        ]),
        *requiring("mask", [
            _gqa_probe("causal-2", "a causal bool mask, 6 tokens", 2, 6, 16, 4, 4, seed=76,
                       mask=torch.ones(6, 6, dtype=torch.bool).triu(1)),
            _gqa_probe("bool-mask", "a random bool mask (T, T)", 2, 5, 8, 2, 2, seed=77,
                       mask=random_bool_mask(5, 5, seed=78)),
            _gqa_probe("float-mask-2", "a float mask (T, T), 6 tokens", 2, 6, 16, 4, 4, seed=86,
                       mask=randn(6, 6, seed=87)),
        ]),
        *requiring("errors", [
            _gqa_error_probe("kv-not-divisible-2", "num_heads=6, num_kv_heads=4", 12, 6, 4, seed=79,
                             hint=NOT_DIVISIBLE),
            _gqa_error_probe("d-not-divisible-2", "d_model=9, num_heads=2", 9, 2, 1, seed=80, hint=NOT_DIVISIBLE),
        ]),
        *requiring("dtype-device", [
            _gqa_probe("float64-2", "float64, H_kv = H = 4, d_model=16", 2, 5, 16, 4, 4, seed=81, dtype="float64"),
            _gqa_probe("meta-2", "on the meta device, H=6, H_kv=3, rotary=True", 2, 5, 24, 6, 3, seed=82, rotary=True,
                       device="meta"),
            *[on_device(_gqa_probe("device", "H=4, H_kv=2, rotary=True", 2, 4, 16, 4, 2, seed=83, rotary=True), d)
              for d in devices if d != "cpu"],
        ]),
    ]


# ============================================================================ flash_attention
def _flash(query, key, value, causal=False, block_size=128, rescale_acc=True, rescale_sum=True, drop_last=False,
           top_left=False, no_shift=False, scale_times=1, diagonal_blocked=False):
    """The online softmax with one knob turned the wrong way, to reproduce a known mistake."""
    L, D = query.shape[-2:]
    S = key.size(-2)
    q = query / math.sqrt(D) ** scale_times
    row_max = query.new_full((*query.shape[:-1], 1), float("-inf"))
    row_sum = query.new_zeros((*query.shape[:-1], 1))
    acc = query.new_zeros((*query.shape[:-1], value.size(-1)))
    last_key = torch.arange(L, device=query.device)[:, None] + (0 if top_left else S - L)  # (L, 1)
    stops = range(0, S - block_size + 1 if drop_last else S, block_size)
    for start in stops:
        stop = min(start + block_size, S)
        scores = q @ key[..., start:stop, :].transpose(-2, -1)
        if causal:
            keys = torch.arange(start, stop, device=query.device)
            scores = scores.masked_fill(keys >= last_key if diagonal_blocked else keys > last_key, float("-inf"))
        new_max = torch.maximum(row_max, scores.amax(dim=-1, keepdim=True))
        shift = new_max if no_shift else new_max.masked_fill(torch.isneginf(new_max), 0.0)
        probs = torch.exp(scores - shift)
        rescale = torch.exp(row_max - shift)
        row_sum = (row_sum * rescale if rescale_sum else row_sum) + probs.sum(dim=-1, keepdim=True)
        acc = (acc * rescale if rescale_acc else acc) + probs @ value[..., start:stop, :]
        row_max = new_max
    if no_shift:
        return acc / row_sum
    return acc / row_sum.masked_fill(row_sum == 0, 1.0)


def _flash_no_acc_rescale(q, k, v, causal=False, block_size=128):
    return _flash(q, k, v, causal, block_size, rescale_acc=False)


def _flash_no_sum_rescale(q, k, v, causal=False, block_size=128):
    return _flash(q, k, v, causal, block_size, rescale_sum=False)


def _flash_no_rescale(q, k, v, causal=False, block_size=128):
    return _flash(q, k, v, causal, block_size, rescale_acc=False, rescale_sum=False)


def _flash_drop_last(q, k, v, causal=False, block_size=128):
    return _flash(q, k, v, causal, block_size, drop_last=True)


def _flash_top_left(q, k, v, causal=False, block_size=128):
    return _flash(q, k, v, causal, block_size, top_left=True)


def _flash_no_shift(q, k, v, causal=False, block_size=128):
    return _flash(q, k, v, causal, block_size, no_shift=True)


def _flash_unscaled(q, k, v, causal=False, block_size=128):
    return _flash(q, k, v, causal, block_size, scale_times=0)


def _flash_scaled_twice(q, k, v, causal=False, block_size=128):
    return _flash(q, k, v, causal, block_size, scale_times=2)


def _flash_diagonal_blocked(q, k, v, causal=False, block_size=128):
    return _flash(q, k, v, causal, block_size, diagonal_blocked=True)


SCALE = ("the scores are not scaled by 1/sqrt(D) exactly once: the given q is query / math.sqrt(D) already, so a "
         "block's scores are q @ key[..., start:stop, :].transpose(-2, -1), with no other scaling")


FLASH_MISTAKES = [
    ("the accumulator is not rescaled: when a block raises the running maximum, multiply acc by "
     "torch.exp(row_max - shift) before adding the block's probs @ v", _flash_no_acc_rescale),
    ("the running sum is not rescaled: when a block raises the running maximum, multiply row_sum by "
     "torch.exp(row_max - shift) before adding the block's sum", _flash_no_sum_rescale),
    ("neither the running sum nor the accumulator is rescaled when the running maximum grows: multiply both by "
     "torch.exp(row_max - shift)", _flash_no_rescale),
    ("the last partial block is dropped: range(0, S, block_size) visits it, and key[..., start:start + block_size] "
     "gives its shorter slice", _flash_drop_last),
    ("the causal mask is aligned at the top left; query i sees keys 0 .. i + S - L (bottom right): compare the key "
     "positions with torch.arange(L)[:, None] + (S - L)", _flash_top_left),
    ("a row that has seen no key has the maximum -inf, and -inf - (-inf) is NaN: shift such a row by 0 "
     "(new_max.masked_fill(torch.isneginf(new_max), 0.0)), and divide a row_sum of 0 by 1", _flash_no_shift),
    (SCALE, _flash_unscaled),
    (SCALE, _flash_scaled_twice),
    ("the causal mask also blocks each query's own position: query i sees keys 0 .. i + S - L, the last one "
     "included, so block a key only where its position is greater (>, not >=)", _flash_diagonal_blocked),
]

FULL_MATRIX = ("a tensor of a whole row of S scores (or of all L x S), a mask or positions of all S keys, or a copy of "
               "all the keys is created (the rule is about any tensor of S entries per query, a mask of bools "
               "too): compute each block's scores and its mask from its own keys, q @ key[..., start:stop, "
               ":].transpose(-2, -1), (..., L, block_size), and read key and value only through such slices "
               "(views), never copying them whole")

FLASH_REQUIREMENTS = (
    Requirement("formula", "equals softmax(Q K^T / sqrt(D)) V for any block_size >= 1 (1, one that does not divide "
                           "S, S, more than S) and any leading axes", 3),
    Requirement("causal", "with causal, query i sees keys 0 .. i + S - L (bottom right); a query that sees no key "
                          "outputs zeros"),
    Requirement("memory", "runs within a memory budget smaller than one row of S scores: never a tensor with a whole "
                          "row of S entries (scores, a mask; let alone L x S), nor a copy of all the keys or values; "
                          "at most (..., L, block_size) scores at once"),
    Requirement("dtype-device", "follows the dtype (float64) and device (meta) of its inputs", 0.5),
)


def _flash_probe(id, title, lead, L, S, D, seed, dtype="float32", Dv=None, causal=False, block_size=None, **extra):
    q = randn(*lead, L, D, seed=seed, dtype=dtype, scale=2.0)
    k = randn(*lead, S, D, seed=seed + 1, dtype=dtype, scale=2.0)
    v = randn(*lead, S, Dv or D, seed=seed + 2, dtype=dtype)
    kwargs = {}
    if causal:
        kwargs["causal"] = True
    if block_size is not None:
        kwargs["block_size"] = block_size
    return function_probe(id, title, (q, k, v), kwargs, ("output",), **extra)


def _memory_probe(id, title, lead, L, S, block_size, seed):
    """A long sequence (D = 1, S far above L x block_size) run within a budget that the kernel enforces:
    half of what one row of S scores takes, while block-wise code needs a few (..., L, block_size) blocks."""
    row = math.prod(lead) * S * 4  # bytes of a float32 (..., 1, S) row of scores, or of a copy of the keys
    budget = row // 2
    assert math.prod(lead) * L * block_size * 4 * 16 <= budget  # room for many blocks of scores at once
    probe = _flash_probe(id, title, lead, L, S, 1, seed, block_size=block_size)
    probe["memory_budget"] = budget
    probe["memory_rule"] = (f"half of one row of S={S:,} scores, (..., 1, S) = {(*lead, 1, S)}, or of a copy "
                            f"of the keys ({row:,} bytes each)")
    probe["memory_advice"] = FULL_MATRIX
    return probe


def flash_public_probes():
    return [
        *requiring("formula", [
            _flash_probe("block-1", "block_size=1, L=3, S=5", (2,), 3, 5, 4, seed=90, block_size=1),
            _flash_probe("block-3", "block_size=3 does not divide S=10, L=4", (2,), 4, 10, 4, seed=91, block_size=3),
            _flash_probe("block-S", "block_size = S = 6, 4-D (2, 2, 4, 6)", (2, 2), 4, 6, 4, seed=92, block_size=6),
            _flash_probe("default", "the default block_size (128 > S = 7), Dv=3", (2,), 5, 7, 4, seed=93, Dv=3),
        ]),
        *requiring("causal", [
            _flash_probe("causal", "causal, L = S = 6, block_size=4", (2,), 6, 6, 4, seed=94, causal=True,
                         block_size=4),
            _flash_probe("causal-l-lt-s", "causal, L=3 < S=8 (bottom right), block_size=3", (2,), 3, 8, 4, seed=95,
                         causal=True, block_size=3),
            _flash_probe("causal-l-gt-s", "causal, L=6 > S=4: rows 0 and 1 see no key, block_size=2", (2,), 6, 4, 4,
                         seed=96, causal=True, block_size=2),
        ]),
        *requiring("memory", [_memory_probe("memory", "L=4, S=262,144 (D=1), block_size=1024, within 512 KiB",
                                            (1,), 4, 262144, 1024, seed=97)]),
        *requiring("dtype-device", [
            _flash_probe("float64", "float64, L=4, S=6, block_size=4", (2,), 4, 6, 4, seed=98, dtype="float64",
                         block_size=4),
            _flash_probe("meta", "on the meta device, causal, L=3, S=5, block_size=2", (2,), 3, 5, 4, seed=99,
                         causal=True, block_size=2, device="meta"),
        ]),
    ]


def flash_hidden_probes(devices=("cpu",)):
    return flash_public_probes() + [
        *requiring("formula", [
            _flash_probe("block-1-2", "block_size=1, L=5, S=7, d=8", (3,), 5, 7, 8, seed=100, block_size=1),
            _flash_probe("block-5", "block_size=5 does not divide S=13", (2, 2), 6, 13, 8, seed=101, block_size=5),
            _flash_probe("block-S-2", "block_size = S = 9, Dv=5", (2,), 4, 9, 8, seed=102, Dv=5, block_size=9),
            _flash_probe("3d-default", "the default block_size, L=S=10", (2,), 10, 10, 8, seed=103),
        ]),
        *requiring("causal", [
            _flash_probe("causal-2", "causal, L = S = 9, block_size=2", (2, 2), 9, 9, 4, seed=104, causal=True,
                         block_size=2),
            _flash_probe("causal-l-lt-s-2", "causal, L=4 < S=11, block_size=3", (2,), 4, 11, 8, seed=105,
                         causal=True, block_size=3),
            _flash_probe("causal-l-gt-s-2", "causal, L=7 > S=3, block_size=1", (1,), 7, 3, 4, seed=106, causal=True,
                         block_size=1),
        ]),
        *requiring("memory", [_memory_probe("memory-2", "2 x L=3, S=131,072 (D=1), block_size=512, within 512 KiB",
                                            (2,), 3, 131072, 512, seed=107)]),
        *requiring("dtype-device", [
            _flash_probe("float64-2", "float64, L=5, S=9, block_size=4", (2,), 5, 9, 8, seed=108, dtype="float64",
                         block_size=4),
            _flash_probe("meta-2", "on the meta device, causal, L=4, S=9, block_size=4", (2, 2), 4, 9, 8, seed=109,
                         causal=True, block_size=4, device="meta"),
            *[on_device(_flash_probe("device", "causal, L=4, S=6", (2,), 4, 6, 4, seed=110, causal=True,
                                     block_size=4), d) for d in devices if d != "cpu"],
        ]),
    ]


EXERCISES = [
    ExerciseChecks("RMSNorm", RMSNorm, rms_norm_public_probes, rms_norm_hidden_probes, RMS_NORM_MISTAKES,
                   requirements=RMS_NORM_REQUIREMENTS),
    ExerciseChecks("SwiGLU", SwiGLU, swiglu_public_probes, swiglu_hidden_probes, SWIGLU_MISTAKES,
                   requirements=SWIGLU_REQUIREMENTS),
    ExerciseChecks("apply_rotary", apply_rotary, rotary_public_probes, rotary_hidden_probes, ROTARY_MISTAKES,
                   requirements=ROTARY_REQUIREMENTS),
    ExerciseChecks("GroupedQueryAttention", GroupedQueryAttention, gqa_public_probes, gqa_hidden_probes,
                   GQA_MISTAKES, requirements=GQA_REQUIREMENTS),
    ExerciseChecks("flash_attention", flash_attention, flash_public_probes, flash_hidden_probes, FLASH_MISTAKES,
                   requirements=FLASH_REQUIREMENTS),
]
