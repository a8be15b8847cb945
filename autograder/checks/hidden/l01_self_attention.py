"""Lesson 01 checks: scaled_dot_product_attention and SelfAttention.

Public probes are small and shown to students (their expected values are stored as data);
hidden probes add float64, batched 4-D inputs, L != S, non-contiguous inputs, masks of every
form, gradients and the input's device. The mistakes below are what students really write;
the grader names the one that reproduces a failing output.
"""

import math

import torch
from ...reference import SelfAttention, scaled_dot_product_attention
from .kinds import projections_reused
from .probes import (ExerciseChecks, Requirement, additive, function_probe, module_probe, on_device, randn,
                     random_bool_mask, requiring, with_gradients)

ATTENTION_OUTPUTS = ("output", "weights")


# ----------------------------------------------------------------------------- mistakes
def _attention(query, key, value, attn_mask=None, scale=None, softmax_dim=-1, invert_mask=False, mask_after=False,
               key_axes=(-2, -1)):
    """Attention with one knob turned the wrong way, to reproduce a known mistake."""
    scale = 1 / math.sqrt(query.size(-1)) if scale is None else scale
    scores = query @ key.transpose(*key_axes) * scale  # (..., L, S)
    if attn_mask is not None and not (mask_after and attn_mask.dtype == torch.bool):
        if attn_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attn_mask if invert_mask else attn_mask, float("-inf"))
        else:
            scores = scores + attn_mask
    weights = torch.softmax(scores, dim=softmax_dim)
    if attn_mask is not None and mask_after and attn_mask.dtype == torch.bool:
        weights = weights.masked_fill(attn_mask, 0.0)
    return weights @ value, weights


def _no_scale(q, k, v, attn_mask=None):
    return _attention(q, k, v, attn_mask, scale=1.0)


def _scale_by_d(q, k, v, attn_mask=None):
    return _attention(q, k, v, attn_mask, scale=1 / q.size(-1))


def _scale_by_value_size(q, k, v, attn_mask=None):
    return _attention(q, k, v, attn_mask, scale=1 / math.sqrt(v.size(-1)))


def _keys_transposed_on_axes_1_2(q, k, v, attn_mask=None):
    return _attention(q, k, v, attn_mask, key_axes=(1, 2))


def _softmax_over_queries(q, k, v, attn_mask=None):
    return _attention(q, k, v, attn_mask, softmax_dim=-2)


def _inverted_mask(q, k, v, attn_mask=None):
    return _attention(q, k, v, attn_mask, invert_mask=True)


def _inverted_mask_blocked_rows(q, k, v, attn_mask=None):
    """The mask read as 'keep', with the hint's code for fully blocked rows: those rows come out zero."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (..., L, S)
    if attn_mask is not None:
        scores = scores.masked_fill(~attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else scores + attn_mask
    blocked = torch.isneginf(scores).all(dim=-1, keepdim=True)  # (..., L, 1)
    weights = torch.softmax(scores.masked_fill(blocked, 0.0), dim=-1).masked_fill(blocked, 0.0)
    return weights @ v, weights


def _mask_after_softmax(q, k, v, attn_mask=None):
    return _attention(q, k, v, attn_mask, mask_after=True)


def _float_mask_ignored(q, k, v, attn_mask=None):
    return _attention(q, k, v, attn_mask if attn_mask is not None and attn_mask.dtype == torch.bool else None)


def _float_mask_as_bool(q, k, v, attn_mask=None):
    """Every mask turned into a boolean one: a float mask then blocks wherever it is not 0."""
    return _attention(q, k, v, None if attn_mask is None else attn_mask.bool())


SDPA_MISTAKES = [
    ("the scores are not scaled: divide QK^T by math.sqrt(d_k), d_k = query.size(-1)", _no_scale),
    ("the scores are divided by d_k instead of its square root: use math.sqrt(query.size(-1))", _scale_by_d),
    ("the scale uses the size of the values; it should use the size of the queries and keys, query.size(-1)",
     _scale_by_value_size),
    ("the softmax runs over the queries (dim=-2); it should run over the keys, dim=-1", _softmax_over_queries),
    ("the keys are transposed on axes 1 and 2, which are the last two only for 3-D inputs: transpose the last two, "
     "key.transpose(-2, -1), so that 4-D (B, H, S, E) keys work too", _keys_transposed_on_axes_1_2),
    ("the mask works the wrong way round: True means BLOCKED, so fill with -inf where the mask is True (not ~mask)",
     _inverted_mask),
    ("the mask works the wrong way round: True means BLOCKED, so fill with -inf where the mask is True (not ~mask); "
     "the rows it then blocks entirely come out as zeros", _inverted_mask_blocked_rows),
    ("the mask is applied to the weights after the softmax; block the scores with -inf before it, so that the "
     "remaining weights still sum to 1", _mask_after_softmax),
    ("a float attn_mask is ignored: a float mask is added to the scores", _float_mask_ignored),
    ("a float attn_mask is read as a boolean one (.bool(), or masked_fill with it), which blocks every key whose "
     "entry is not 0: only a bool mask blocks (masked_fill where True); a float mask is added to the scores",
     _float_mask_as_bool),
]


class _SelfAttentionMistake(SelfAttention):
    """SelfAttention's weights with a wrong forward."""

    variant = None

    def forward(self, x, attn_mask=None):
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)  # (B, T, C) each
        if self.variant == "no_out_proj":
            return scaled_dot_product_attention(q, k, v, attn_mask)
        if self.variant == "raw_values":
            out, weights = scaled_dot_product_attention(q, k, x, attn_mask)
            return self.out_proj(out), weights
        if self.variant == "swapped_qk":
            out, weights = scaled_dot_product_attention(k, q, v, attn_mask)
            return self.out_proj(out), weights
        if self.variant == "mask_inverted":
            out, weights = _inverted_mask(q, k, v, attn_mask)
            return self.out_proj(out), weights
        if self.variant == "mask_dropped":
            out, weights = scaled_dot_product_attention(q, k, v)
            return self.out_proj(out), weights
        if self.variant == "unscaled":
            out, weights = _no_scale(q, k, v, attn_mask)
            return self.out_proj(out), weights
        if self.variant == "scaled_by_tokens":
            out, weights = _attention(q, k, v, attn_mask, scale=1 / math.sqrt(x.size(1)))
            return self.out_proj(out), weights
        raise AssertionError(self.variant)


def _self_attention_mistake(variant):
    return type(f"SelfAttention_{variant}", (_SelfAttentionMistake,), {"variant": variant})


SELF_ATTENTION_MISTAKES = [
    ("the output projection is missing: return self.out_proj(output), weights", _self_attention_mistake("no_out_proj")),
    ("the values are the raw input: use self.v_proj(x) as the values", _self_attention_mistake("raw_values")),
    ("queries and keys are swapped: the queries are self.q_proj(x), the keys self.k_proj(x)",
     _self_attention_mistake("swapped_qk")),
    ("attn_mask is not passed on to scaled_dot_product_attention", _self_attention_mistake("mask_dropped")),
    ("the mask works the wrong way round: True means BLOCKED, so fill with -inf where the mask is True (not ~mask)",
     _self_attention_mistake("mask_inverted")),
    ("the scores are not scaled by 1/sqrt(d_model)", _self_attention_mistake("unscaled")),
    ("the scores are scaled by the number of tokens, 1/sqrt(T); the scale is 1/sqrt(d_k), the size of the "
     "queries' last axis", _self_attention_mistake("scaled_by_tokens")),
    *projections_reused(SelfAttention),
]


# ----------------------------------------------------------------------------- probes
def _sdpa_probe(id, title, q_shape, k_shape, v_shape, seed, dtype="float32", mask=None, scale=1.0, **extra):
    q = randn(*q_shape, seed=seed, dtype=dtype, scale=scale)
    k = randn(*k_shape, seed=seed + 1, dtype=dtype, scale=scale)
    v = randn(*v_shape, seed=seed + 2, dtype=dtype)
    kwargs = {} if mask is None else {"attn_mask": mask}
    return function_probe(id, title, (q, k, v), kwargs, ATTENTION_OUTPUTS, **extra)


SDPA_REQUIREMENTS = (
    Requirement("formula", "computes softmax(Q K^T / sqrt(E)) V and returns the weights, softmax over the keys", 2),
    Requirement("shapes", "works for any leading axes (..., L, E), none included, and on strided inputs"),
    Requirement("masks", "a bool mask blocks where True, a float mask is added to the scores"),
    Requirement("dtype-device", "follows the inputs' dtype (float64) and device (checked on the meta device)"),
    Requirement("gradients", "is differentiable: gradients reach the query, the key and the value"),
)


def sdpa_public_probes():
    mask = random_bool_mask(3, 5, seed=13)
    base = _sdpa_probe("basic", "one sequence, 3 tokens, d_k=4", (1, 3, 4), (1, 3, 4), (1, 3, 4), seed=10)
    batched = _sdpa_probe("batched", "batch 2, L=3 queries, S=5 keys, d_k=4, d_v=6", (2, 3, 4), (2, 5, 4), (2, 5, 6), seed=20)
    perm = torch.tensor([4, 2, 0, 3, 1])
    permuted = dict(batched, id="permuted-keys", title="the keys of 'batched' and their values in another order")
    permuted["args"] = [batched["args"][0], batched["args"][1][:, perm], batched["args"][2][:, perm]]
    permuted["relation"] = {
        "base": "batched", "perm": perm, "axes": [[], [2]],
        "message": "reordering the keys (with their values) must reorder the weights the same way and leave "
                   "the output unchanged: is each key matched with its own value?",
    }
    return [
        *requiring("formula", [base, batched, permuted]),
        *requiring("shapes", [
            # S differs from E and L in every probe, so that no size stands in for another unseen.
            _sdpa_probe("heads-4d", "4-D inputs (B=2, H=2, L=3, S=5)", (2, 2, 3, 4), (2, 2, 5, 4), (2, 2, 5, 4), seed=50),
            _sdpa_probe("strided", "non-contiguous (transposed) inputs, L=4, S=6", (2, 4, 4), (2, 6, 4), (2, 6, 4),
                        seed=55, noncontiguous=True),
        ]),
        *requiring("masks", [
            _sdpa_probe("bool-mask", "a boolean mask (L, S), True = blocked", (2, 3, 4), (2, 5, 4), (2, 5, 4), seed=30,
                        mask=mask),
            _sdpa_probe("float-mask", "a float mask (L, S) added to the scores", (2, 3, 4), (2, 5, 4), (2, 5, 4), seed=40,
                        mask=randn(3, 5, seed=41)),
            _sdpa_probe("head-mask", "a boolean mask (B, H, L, S) on 4-D inputs", (1, 2, 3, 4), (1, 2, 4, 4),
                        (1, 2, 4, 4), seed=45, mask=random_bool_mask(1, 2, 3, 4, seed=46)),
        ]),
        *requiring("dtype-device", [
            _sdpa_probe("float64-small", "float64 inputs", (2, 3, 4), (2, 4, 4), (2, 4, 4), seed=60, dtype="float64"),
            # sqrt(8) and large scores: a scale or a softmax computed in float32 shows here.
            _sdpa_probe("float64-precise", "float64 inputs, d_k=8, scores large enough that float32 rounding shows",
                        (2, 3, 8), (2, 5, 8), (2, 5, 8), seed=62, dtype="float64", scale=3.0),
            _sdpa_probe("meta", "inputs on the meta device", (2, 3, 4), (2, 5, 4), (2, 5, 6), seed=65, device="meta"),
        ]),
        *requiring("gradients", [
            with_gradients(_sdpa_probe("grad", "batch 2, L=3, S=5", (2, 3, 4), (2, 5, 4), (2, 5, 4), seed=70),
                           scaled_dot_product_attention, seed=72),
        ]),
    ]


def sdpa_hidden_probes(devices=("cpu",)):
    causal = torch.ones(6, 6, dtype=torch.bool).triu(1)
    probes = [
        *requiring("formula", [
            _sdpa_probe("single-query", "a single query, L=1", (2, 1, 4), (2, 6, 4), (2, 6, 3), seed=120),
            _sdpa_probe("wide", "d_k=64, where the scale matters most", (1, 5, 64), (1, 5, 64), (1, 5, 64), seed=130),
        ]),
        *requiring("shapes", [
            _sdpa_probe("heads", "4-D inputs (B=2, H=3, L=5, S=4)", (2, 3, 5, 16), (2, 3, 4, 16), (2, 3, 4, 16), seed=110),
            _sdpa_probe("no-batch", "2-D inputs without a batch axis", (4, 8), (6, 8), (6, 8), seed=135),

            _sdpa_probe("noncontiguous", "non-contiguous inputs", (2, 5, 6), (2, 5, 6), (2, 5, 6), seed=140,
                        noncontiguous=True),
        ]),
        *requiring("masks", [
            _sdpa_probe("causal", "a causal mask (T, T)", (2, 6, 4), (2, 6, 4), (2, 6, 4), seed=150, mask=causal),
            _sdpa_probe("batch-mask", "a per-example mask (B, 1, S), broadcast over queries", (2, 3, 4), (2, 5, 4),
                        (2, 5, 4), seed=160, mask=random_bool_mask(2, 1, 5, seed=161)),
            _sdpa_probe("head-mask-2", "a mask (B, H, L, S) on 4-D inputs, B=2", (2, 2, 3, 4), (2, 2, 5, 4), (2, 2, 5, 4),
                        seed=170, mask=random_bool_mask(2, 2, 3, 5, seed=171)),
            _sdpa_probe("float-inf-mask", "a float mask with -inf entries", (2, 3, 4), (2, 5, 4), (2, 5, 4), seed=180,
                        mask=additive(random_bool_mask(3, 5, seed=181))),
        ]),
        *requiring("dtype-device", [
            _sdpa_probe("float64", "float64, batch 3, L=4, S=7", (3, 4, 8), (3, 7, 8), (3, 7, 8), seed=100,
                        dtype="float64"),
            _sdpa_probe("meta-wide", "inputs on the meta device, L=4, S=7, d_k=8", (2, 4, 8), (2, 7, 8), (2, 7, 8),
                        seed=195, device="meta"),
            *[on_device(_sdpa_probe("device", "batch 2, L=3, S=5", (2, 3, 4), (2, 5, 4), (2, 5, 4), seed=220,
                                    mask=random_bool_mask(3, 5, seed=221)), device) for device in devices if device != "cpu"],
        ]),
        *requiring("gradients", [
            with_gradients(_sdpa_probe("grad-batched", "batch 2, L=3, S=5", (2, 3, 4), (2, 5, 4), (2, 5, 4), seed=200),
                           scaled_dot_product_attention, seed=202),
            with_gradients(_sdpa_probe("grad-wide", "batch 1, L=S=6, d_k=8", (1, 6, 8), (1, 6, 8), (1, 6, 8), seed=210),
                           scaled_dot_product_attention, seed=212),
        ]),
    ]
    return sdpa_public_probes() + probes


def _self_attention_probe(id, title, B, T, C, seed, dtype="float32", mask=None, scale=1.0, **extra):
    x = randn(B, T, C, seed=seed + 100, dtype=dtype, scale=scale)
    kwargs = {} if mask is None else {"attn_mask": mask}
    return module_probe(id, title, SelfAttention, (C,), None, (x,), kwargs, seed=seed, dtype=dtype,
                        output_names=ATTENTION_OUTPUTS, **extra)


SELF_ATTENTION_REQUIREMENTS = (
    Requirement("projections", "out_proj(attention(q_proj(x), k_proj(x), v_proj(x))), with the attention's weights", 2),
    Requirement("mask", "passes attn_mask on to the attention unchanged"),
    Requirement("dtype-device", "follows the dtype (float64) and device (meta) of its input and weights", 0.5),
    Requirement("gradients", "is differentiable: gradients reach the input and every weight", 0.5),
)


def self_attention_public_probes():
    base = _self_attention_probe("basic", "batch 2, 4 tokens, d_model=8", 2, 4, 8, seed=1)
    perm = torch.tensor([2, 0, 3, 1])
    permuted = dict(base, id="permuted-tokens", title="the tokens of 'basic' in another order")
    permuted["args"] = [base["args"][0][:, perm]]
    permuted["relation"] = {
        "base": "basic", "perm": perm, "axes": [[1], [1, 2]],
        "message": "without positions, self-attention is permutation-equivariant: reordering the tokens must "
                   "reorder the outputs (and both axes of the weights) the same way",
    }
    return [
        *requiring("projections", [base, permuted]),
        *requiring("mask", [_self_attention_probe("causal", "a causal mask, True above the diagonal", 2, 4, 8, seed=2,
                                                  mask=torch.ones(4, 4, dtype=torch.bool).triu(1))]),
        *requiring("dtype-device", [
            _self_attention_probe("float64-small", "float64 input and weights", 2, 3, 8, seed=3, dtype="float64"),
            _self_attention_probe("float64-precise", "float64, d_model=8, scores large enough that float32 rounding "
                                  "shows", 2, 4, 8, seed=7, dtype="float64", scale=8.0),
            _self_attention_probe("meta", "input and weights on the meta device", 2, 3, 8, seed=4, device="meta"),
        ]),
        *requiring("gradients", [with_gradients(_self_attention_probe("grad", "batch 2, 3 tokens", 2, 3, 8, seed=5),
                                                SelfAttention, seed=6)]),
    ]


def self_attention_hidden_probes(devices=("cpu",)):
    probes = [
        *requiring("projections", [
            _self_attention_probe("one-token", "a single token", 2, 1, 8, seed=11),
            _self_attention_probe("noncontiguous", "a non-contiguous input", 2, 6, 8, seed=16, noncontiguous=True),
        ]),
        *requiring("mask", [
            _self_attention_probe("float-mask", "a float mask", 2, 5, 8, seed=12, mask=randn(5, 5, seed=13)),
            _self_attention_probe("batch-mask", "a per-example mask (B, 1, T)", 2, 5, 8, seed=14,
                                  mask=random_bool_mask(2, 1, 5, seed=15)),
        ]),
        *requiring("dtype-device", [
            _self_attention_probe("float64", "float64, batch 3, 5 tokens, d_model=16", 3, 5, 16, seed=10,
                                  dtype="float64"),
            *[on_device(_self_attention_probe("device", "batch 2, 4 tokens", 2, 4, 8, seed=19), device)
              for device in devices if device != "cpu"],
        ]),
        *requiring("gradients", [
            with_gradients(_self_attention_probe("grad-longer", "batch 2, 5 tokens", 2, 5, 8, seed=17), SelfAttention,
                           seed=18),
        ]),
    ]
    return self_attention_public_probes() + probes


EXERCISES = [
    ExerciseChecks("scaled_dot_product_attention", scaled_dot_product_attention, sdpa_public_probes,
                   sdpa_hidden_probes, SDPA_MISTAKES, requirements=SDPA_REQUIREMENTS),
    ExerciseChecks("SelfAttention", SelfAttention, self_attention_public_probes, self_attention_hidden_probes,
                   SELF_ATTENTION_MISTAKES, requirements=SELF_ATTENTION_REQUIREMENTS),
]
