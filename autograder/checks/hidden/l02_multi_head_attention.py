"""Lesson 02 checks: split_heads, merge_heads and MultiHeadAttention.

Each exercise's probes are grouped into the requirements its text states. Public probes are
small and shown to students (their expected values are stored as data); hidden probes try the
same requirements with the same kinds of input at other sizes and seeds: one head and as many
heads as features, a single token or query, other batch sizes, other masks of the same form.
No probe blocks every key of a query row (lesson 05 teaches that case). The mistakes below are
what students really write; the grader names the one that reproduces a failing output.
"""

import math

import torch
import torch.nn.functional as F
from ...reference import MultiHeadAttention, merge_heads, scaled_dot_product_attention, split_heads
from ...reference.multihead import _as_additive, combine_masks
from .kinds import projections_reused
from .probes import (ExerciseChecks, Requirement, additive, function_probe, module_probe, on_device, randn,
                     random_bool_mask, requiring, with_gradients)

ATTENTION_OUTPUTS = ("output", "weights")


# ----------------------------------------------------------------------------- mistakes
def _split_view_without_transpose(x, num_heads):
    B, T, C = x.shape
    return x.reshape(B, num_heads, T, C // num_heads)  # (B, H, T, D), but rows mixed across tokens


def _split_without_transpose(x, num_heads):
    B, T, C = x.shape
    return x.reshape(B, T, num_heads, C // num_heads)  # (B, T, H, D)


def _split_swapped(x, num_heads):
    B, T, C = x.shape
    return x.reshape(B, T, C // num_heads, num_heads).transpose(1, 2)  # (B, D, T, H): D heads of size H


def _split_strided(x, num_heads):
    B, T, C = x.shape
    return x.reshape(B, T, C // num_heads, num_heads).permute(0, 3, 1, 2)  # (B, H, T, D), head h = features h::H


def _split_tokens_last(x, num_heads):
    B, T, C = x.shape
    return x.reshape(B, T, num_heads, C // num_heads).permute(0, 2, 3, 1)  # (B, H, D, T)


SPLIT_HEADS_MISTAKES = [
    ("x is viewed straight as (B, H, T, D), which mixes the features of different tokens into one row: "
     "reshape to (B, T, H, D) first, then transpose(1, 2)", _split_view_without_transpose),
    ("the result is (B, T, H, D): transpose(1, 2) to put the heads before the tokens, (B, H, T, D)",
     _split_without_transpose),
    ("the features are split into D heads of size H, the wrong way round: there are num_heads heads of size "
     "D = C // num_heads, so reshape to (B, T, num_heads, C // num_heads)", _split_swapped),
    ("each head takes every H-th feature; head h should own the contiguous block of features h*D to (h+1)*D - 1: "
     "reshape to (B, T, H, D), not (B, T, D, H)", _split_strided),
    ("the result is (B, H, D, T): swap the token and head axes with transpose(1, 2), don't move the tokens last",
     _split_tokens_last),
]


def _merge_without_transpose(x):
    B, H, T, D = x.shape
    return x.reshape(B, T, H * D)  # right shape, but rows mixed across tokens


def _merge_into_tokens(x):
    B, H, T, D = x.shape
    return x.reshape(B, H * T, D)  # (B, H*T, D)


def _merge_features_strided(x):
    B, H, T, D = x.shape
    return x.permute(0, 2, 3, 1).reshape(B, T, H * D)  # features ordered (D, H)


def _merge_batch_and_heads(x):
    B, H, T, D = x.shape
    return x.transpose(0, 1).reshape(B, T, H * D)  # mixes examples of the batch


def _merge_shape_misread(x):
    B, T, H, D = x.shape  # the axes of x are really (B, H, T, D)
    return x.transpose(1, 2).reshape(B, T, H * D)  # (B, H, T*D)


def _merge_flattened_from_tokens(x):
    return x.transpose(1, 2).flatten(1)  # (B, T*H*D): one axis too many flattened


MERGE_HEADS_MISTAKES = [
    ("the heads are reshaped straight to (B, T, H*D) without moving the head axis back: transpose(1, 2) to "
     "(B, T, H, D) first, then reshape (or .contiguous().view)", _merge_without_transpose),
    ("the result is (B, H*T, D): the heads join the feature axis, (B, T, H*D), not the token axis",
     _merge_into_tokens),
    ("the features come out ordered (D, H): head h's features must stay together at h*D to (h+1)*D - 1, so "
     "transpose(1, 2) to (B, T, H, D), not permute(0, 2, 3, 1)", _merge_features_strided),
    ("the batch and head axes are swapped (transpose(0, 1)): x is (B, H, T, D), so transpose(1, 2)",
     _merge_batch_and_heads),
    ("the shape of x is unpacked in the wrong order: x is (B, H, T, D), heads before tokens",
     _merge_shape_misread),
    ("the token axis is flattened too (flatten(1) gives (B, T*H*D)): only the heads and their features merge, "
     "so flatten from axis 2, flatten(2), or reshape to (B, T, H*D)", _merge_flattened_from_tokens),
]


class _MultiHeadAttentionMistake(MultiHeadAttention):
    """MultiHeadAttention's weights with one wrong step in forward (all else as the reference does it)."""

    variant = None

    def forward(self, query, key, value, key_padding_mask=None, attn_mask=None, need_weights=True):
        variant, H = self.variant, self.num_heads
        key_source = query if variant == "kv_from_query" else key
        value_source = {"kv_from_query": query, "values_from_key": key}.get(variant, value)
        split = _split_view_without_transpose if variant == "split_without_transpose" else split_heads
        q = split(self.q_proj(query), H)  # (B, H, L, D)
        if variant == "kv_with_query_length":  # the keys and values viewed as (B, L, H, D): wrong unless S == L
            B, L, C = query.shape
            k = self.k_proj(key_source).view(B, L, H, C // H).transpose(1, 2)  # (B, H, L, D)
            v = self.v_proj(value_source).view(B, L, H, C // H).transpose(1, 2)  # (B, H, L, D)
        else:
            k = split(self.k_proj(key_source), H)  # (B, H, S, D)
            v = split(self.v_proj(value_source), H)  # (B, H, S, D)
        if variant == "unscaled":
            q = q * math.sqrt(q.size(-1))  # cancels the 1/sqrt(D) of scaled_dot_product_attention
        elif variant == "scaled_by_d_model":
            q = q * math.sqrt(q.size(-1)) / math.sqrt(query.size(-1))
        elif variant == "scaled_twice":
            q = q / math.sqrt(q.size(-1))  # and scaled_dot_product_attention divides by sqrt(D) again
        if key_padding_mask is not None:
            if variant == "padding_ignored":
                key_padding_mask = None
            elif variant == "padding_inverted":
                key_padding_mask = ~key_padding_mask
            elif variant == "padding_blocks_queries":
                rows = key_padding_mask[:, None, :, None]  # (B, 1, S, 1) on the query axis: needs L == S
                other = combine_masks(attn_mask, None, query.size(0), H, q.dtype)
                attn_mask = rows if other is None else _as_additive(other, q.dtype) + _as_additive(rows, q.dtype)
                key_padding_mask = None
        if attn_mask is not None and attn_mask.dim() == 3 and variant == "mask_head_major":
            L, S = attn_mask.shape[-2:]
            attn_mask = attn_mask.view(H, query.size(0), L, S).transpose(0, 1).reshape(-1, L, S)  # (B*H, L, S)
        if variant == "one_mask_only" and attn_mask is not None:
            key_padding_mask = None
        mask = combine_masks(attn_mask, key_padding_mask, query.size(0), H, q.dtype)
        dropping = self.training and self.dropout > 0
        if variant == "dropout_on_scores" and dropping:
            scores = F.dropout(q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)), self.dropout)  # (B, H, L, S)
            if mask is not None:
                scores = scores.masked_fill(mask, float("-inf")) if mask.dtype == torch.bool else scores + mask
            weights = torch.softmax(scores, dim=-1)
            out = weights @ v
        else:
            out, weights = scaled_dot_product_attention(q, k, v, mask)  # (B, H, L, D), (B, H, L, S)
        if dropping and variant not in ("dropout_ignored", "dropout_on_output", "dropout_on_heads_output",
                                        "dropout_on_scores"):
            weights = F.dropout(weights, self.dropout)  # on the weights, as the reference does it
            if variant != "dropout_not_recomputed":
                out = weights @ v  # (B, H, L, D)
        if variant == "dropout_on_heads_output" and dropping:
            out = F.dropout(out, self.dropout)
        out = _merge_without_transpose(out) if variant == "merge_without_transpose" else merge_heads(out)  # (B, L, C)
        if variant != "no_out_proj":
            out = self.out_proj(out)
        if variant == "dropout_on_output" and dropping:
            out = F.dropout(out, self.dropout)
        if variant == "weights_averaged":
            weights = weights.mean(dim=1)  # (B, L, S)
        return out, (weights if need_weights or variant == "weights_always" else None)


def _mha_mistake(variant):
    return type(f"MultiHeadAttention_{variant}", (_MultiHeadAttentionMistake,), {"variant": variant})


PADDING_ONE_FLAG_PER_KEY = "it holds one flag per key"
THREE_D_MASK = ("a 3-D attn_mask (B*H, L, S) is batch-major, as in PyTorch: entry b*H + h is example b, head h, "
                "so view it as (B, H, L, S)")
EVAL_DROPOUT = ("dropout is on in eval() mode: F.dropout drops whatever the module's mode unless you pass "
                "training=self.training (or call it only when self.training)")
TRAIN_DROPOUT = ("in training mode, dropout acts on the attention weights after the softmax, before they mix the "
                 "values, as in nn.MultiheadAttention: weights = F.dropout(weights, self.dropout, "
                 "training=self.training), then out = weights @ v, and return the dropped weights")

MULTI_HEAD_ATTENTION_MISTAKES = [
    ("the weights are averaged over the heads: return them per head, (B, H, L, S) (nn.MultiheadAttention "
     "averages them unless average_attn_weights=False; this course never does)", _mha_mistake("weights_averaged")),
    ("the scores are not scaled: each head divides its QK^T by math.sqrt(d_head), d_head = d_model // num_heads",
     _mha_mistake("unscaled")),
    ("the scores are divided by sqrt(d_model); each head's scores are scaled by its own size, sqrt(d_head) with "
     "d_head = d_model // num_heads", _mha_mistake("scaled_by_d_model")),
    ("the scores are scaled twice: scaled_dot_product_attention already divides them by sqrt(d_head), so don't "
     "scale q (or the scores) yourself", _mha_mistake("scaled_twice")),
    # Before "ignored": with both masks given, a forward that always ignores the padding looks the same,
    # and the probes with padding alone then name that mistake more often.
    ("when both attn_mask and key_padding_mask are given, only attn_mask is used: a key is blocked if either "
     "mask blocks it, so combine the two (add them as float masks)", _mha_mistake("one_mask_only")),
    ("key_padding_mask is ignored: block each example's padded keys (True) with a (B, 1, 1, S) mask",
     _mha_mistake("padding_ignored")),
    ("key_padding_mask works the wrong way round: True marks PADDING, the keys to block",
     _mha_mistake("padding_inverted")),
    (f"key_padding_mask blocks queries instead of keys: {PADDING_ONE_FLAG_PER_KEY}, so view it as (B, 1, 1, S), "
     "not (B, 1, S, 1)", _mha_mistake("padding_blocks_queries")),
    (f"{THREE_D_MASK}, not (H, B, L, S)", _mha_mistake("mask_head_major")),
    ("the output projection is missing: return self.out_proj(merged heads), weights", _mha_mistake("no_out_proj")),
    ("the keys and values are projected from the query: use self.k_proj(key) and self.v_proj(value) (in "
     "cross-attention they come from another sequence)", _mha_mistake("kv_from_query")),
    ("the values are projected from `key`: use self.v_proj(value)", _mha_mistake("values_from_key")),
    ("the keys and values are reshaped with the queries' length L: they have S positions of their own (key.size(1)), "
     "which differs from L in cross-attention; reshape with -1 or key.size(1)", _mha_mistake("kv_with_query_length")),
    ("the heads are split with a plain view to (B, H, T, D), which mixes tokens into the wrong rows: reshape to "
     "(B, T, H, D), then transpose(1, 2)", _mha_mistake("split_without_transpose")),
    ("the heads are merged with a plain reshape of (B, H, L, D), which mixes tokens into the wrong rows: "
     "transpose(1, 2) back to (B, L, H, D) first, then reshape to (B, L, C)", _mha_mistake("merge_without_transpose")),
    ("need_weights=False must return None in place of the weights", _mha_mistake("weights_always")),
    ("dropout is never applied: in training mode (self.training) with dropout > 0, drop the attention weights with "
     "F.dropout(weights, self.dropout, training=self.training), then out = weights @ v",
     _mha_mistake("dropout_ignored")),
    ("the weights are dropped, but the output is computed from the weights before the dropout: recompute "
     "out = weights @ v from the dropped weights", _mha_mistake("dropout_not_recomputed")),
    ("dropout is applied to the output, after out_proj; as in nn.MultiheadAttention, it acts on the attention "
     "weights, before they mix the values (and the weights returned are the dropped ones)",
     _mha_mistake("dropout_on_output")),
    ("dropout is applied to each head's output (weights @ v) before the heads are merged; as in "
     "nn.MultiheadAttention, it acts on the attention weights, before they mix the values (and the weights returned "
     "are the dropped ones)", _mha_mistake("dropout_on_heads_output")),
    ("dropout is applied to the scores before the softmax; as in nn.MultiheadAttention, it acts on the weights "
     "after the softmax", _mha_mistake("dropout_on_scores")),
    *projections_reused(MultiHeadAttention),
]


# ----------------------------------------------------------------------------- split_heads
def _arange(*shape):
    """0, 1, 2, ... in the given shape: a layout a student can follow by hand."""
    return torch.arange(math.prod(shape), dtype=torch.float32).reshape(shape)


def _split_probe(id, title, B, T, C, H, seed, dtype="float32", **extra):
    return function_probe(id, title, (randn(B, T, C, seed=seed, dtype=dtype), H), None, ("heads",), **extra)


def _sliced_split_probe(id, title, B, T, C, H, seed):
    """x = every other feature of a (B, T, 2C) tensor: a slice, non-contiguous, whose last axis has stride 2."""
    return function_probe(id, title, (randn(B, T, 2 * C, seed=seed)[..., ::2], H), None, ("heads",))


NOT_DIVISIBLE = ("split_heads must raise a ValueError when C is not divisible by num_heads: check C % num_heads "
                 "before reshaping, and say so in the message")

SPLIT_HEADS_REQUIREMENTS = (
    Requirement("heads", "cuts (B, T, C) into (B, H, T, D): head h holds features h*D to (h+1)*D - 1 of every "
                         "token, one token per row", 3),
    Requirement("not-divisible", "raises a ValueError when C is not divisible by num_heads"),
    Requirement("strided", "works on a non-contiguous x (a transposed or sliced tensor)", 0.5),
    Requirement("dtype-device", "follows the dtype (float64) and device (checked on the meta device) of x", 0.5),
)


def split_heads_public_probes():
    return [
        *requiring("heads", [
            function_probe("arange", "x = 0, 1, ..., 23 as (1, 3, 8), 2 heads", (_arange(1, 3, 8), 2), None,
                           ("heads",)),
            _split_probe("batched", "batch 2, 5 tokens, d_model=6, 3 heads", 2, 5, 6, 3, seed=300),
        ]),
        *requiring("not-divisible", [
            _split_probe("not-divisible", "d_model=10, 3 heads: 10 is not divisible by 3", 1, 2, 10, 3, seed=305,
                         hint=NOT_DIVISIBLE),
        ]),
        *requiring("strided", [
            _split_probe("transposed", "a non-contiguous (transposed) x", 2, 4, 6, 2, seed=306, noncontiguous=True),
            _sliced_split_probe("sliced", "a sliced x, every other feature of (2, 3, 16)", 2, 3, 8, 4, seed=307),
        ]),
        *requiring("dtype-device", [
            _split_probe("float64", "float64, batch 2, 3 tokens, 2 heads", 2, 3, 4, 2, seed=308, dtype="float64"),
            _split_probe("meta", "x on the meta device, 4 heads", 2, 3, 8, 4, seed=309, device="meta"),
        ]),
    ]


def split_heads_hidden_probes(devices=("cpu",)):
    probes = [
        *requiring("heads", [
            _split_probe("one-head", "one head (D = d_model)", 2, 4, 6, 1, seed=310),
            _split_probe("one-feature-heads", "as many heads as features (D = 1)", 2, 4, 6, 6, seed=320),
            _split_probe("square", "as many heads as tokens (T = H = 4)", 3, 4, 8, 4, seed=330),
            _split_probe("one-token", "a single token", 2, 1, 8, 2, seed=350),
            _split_probe("wide", "batch 4, 16 tokens, d_model=64, 8 heads", 4, 16, 64, 8, seed=360),
        ]),
        *requiring("not-divisible", [
            _split_probe("not-divisible-8-3", "d_model=8, 3 heads", 2, 3, 8, 3, seed=365, hint=NOT_DIVISIBLE),
            _split_probe("not-divisible-6-4", "d_model=6, 4 heads (more than half the features)", 1, 4, 6, 4,
                         seed=366, hint=NOT_DIVISIBLE),
        ]),
        *requiring("strided", [
            _split_probe("noncontiguous", "a non-contiguous x, batch 2, 5 tokens", 2, 5, 6, 2, seed=370,
                         noncontiguous=True),
            _sliced_split_probe("sliced-wide", "a sliced x, d_model=12, 3 heads", 3, 5, 12, 3, seed=375),
        ]),
        *requiring("dtype-device", [
            _split_probe("float64-wide", "float64, batch 3, 7 tokens, d_model=12, 4 heads", 3, 7, 12, 4, seed=340,
                         dtype="float64"),
            _split_probe("meta-wide", "x on the meta device, 5 tokens, 3 heads", 3, 5, 12, 3, seed=345,
                         device="meta"),
            *[on_device(_split_probe("device", "batch 2, 3 tokens, 2 heads", 2, 3, 8, 2, seed=390), device)
              for device in devices if device != "cpu"],
        ]),
    ]
    return split_heads_public_probes() + probes


# ----------------------------------------------------------------------------- merge_heads
def _merge_probe(id, title, B, H, T, D, seed, dtype="float32", **extra):
    return function_probe(id, title, (randn(B, H, T, D, seed=seed, dtype=dtype),), None, ("merged",), **extra)


def _round_trip_probe(id, title, B, T, C, H, seed):
    """merge_heads of what split_heads returns: a strided (B, H, T, D) view, which must merge back to x."""
    return function_probe(id, title, (split_heads(randn(B, T, C, seed=seed), H),), None, ("merged",))


MERGE_HEADS_REQUIREMENTS = (
    Requirement("merge", "puts the heads back side by side, (B, H, T, D) -> (B, T, H*D): head h fills features "
                         "h*D to (h+1)*D - 1 of every token", 3),
    Requirement("strided", "works on non-contiguous heads, such as those split_heads returns: "
                           "merge_heads(split_heads(x, h)) is x"),
    Requirement("dtype-device", "follows the dtype (float64) and device (checked on the meta device) of x", 0.5),
)


def merge_heads_public_probes():
    return [
        *requiring("merge", [
            function_probe("arange", "x = 0, 1, ..., 23 as (1, 2, 3, 4): 2 heads, 3 tokens", (_arange(1, 2, 3, 4),),
                           None, ("merged",)),
            _merge_probe("batched", "batch 2, 3 heads, 5 tokens, D=2", 2, 3, 5, 2, seed=400),
        ]),
        *requiring("strided", [
            _round_trip_probe("round-trip", "the heads split_heads returns for (2, 4, 6), 3 heads: gives x back",
                              2, 4, 6, 3, seed=405),
            _merge_probe("transposed", "non-contiguous (transposed) heads", 2, 2, 3, 4, seed=406, noncontiguous=True),
        ]),
        *requiring("dtype-device", [
            _merge_probe("float64", "float64, batch 2, 2 heads, 3 tokens", 2, 2, 3, 2, seed=407, dtype="float64"),
            _merge_probe("meta", "heads on the meta device", 2, 2, 3, 4, seed=408, device="meta"),
        ]),
    ]


def merge_heads_hidden_probes(devices=("cpu",)):
    probes = [
        *requiring("merge", [
            _merge_probe("one-head", "one head", 2, 1, 4, 6, seed=410),
            _merge_probe("one-feature-heads", "heads of one feature (D = 1)", 2, 6, 4, 1, seed=420),
            _merge_probe("square", "as many heads as tokens (H = T = 4)", 3, 4, 4, 2, seed=430),
            _merge_probe("one-token", "a single token", 2, 2, 1, 4, seed=450),
            _merge_probe("wide", "batch 4, 8 heads, 16 tokens, D=8", 4, 8, 16, 8, seed=460),
        ]),
        *requiring("strided", [
            _round_trip_probe("round-trip-wide", "the heads split_heads returns for (3, 5, 8), 4 heads", 3, 5, 8, 4,
                              seed=465),
            _merge_probe("noncontiguous", "non-contiguous heads, 3 heads, 5 tokens", 2, 3, 5, 2, seed=470,
                         noncontiguous=True),
        ]),
        *requiring("dtype-device", [
            _merge_probe("float64-wide", "float64, batch 3, 4 heads, 7 tokens", 3, 4, 7, 3, seed=440, dtype="float64"),
            _merge_probe("meta-wide", "heads on the meta device, 3 heads, 5 tokens", 3, 3, 5, 4, seed=445,
                         device="meta"),
            *[on_device(_merge_probe("device", "batch 2, 2 heads, 3 tokens", 2, 2, 3, 4, seed=490), device)
              for device in devices if device != "cpu"],
        ]),
    ]
    return merge_heads_public_probes() + probes


# ----------------------------------------------------------------------------- MultiHeadAttention
def padding(lengths, S):
    """A key padding mask (B, S): True after each example's length (every example keeps key 0)."""
    return torch.arange(S)[None, :] >= torch.tensor(lengths)[:, None]  # (B, S)


_PROBE_KEYS = ("noncontiguous", "relation", "training", "device", "fallback_hint")


def _mha_probe(id, title, B, L, S, C, H, seed, dtype="float32", self_attention=False, same_key_value=False,
               bias=True, dropout=None, scale=1.0, **kwargs):
    """A MultiHeadAttention probe: query (B, L, C), key and value (B, S, C); kwargs go to forward.

    Keyword arguments of the probe itself (training, device, relation, ...) are taken out of kwargs.
    """
    extra = {name: kwargs.pop(name) for name in _PROBE_KEYS if name in kwargs}
    query = randn(B, L, C, seed=seed + 100, dtype=dtype, scale=scale)
    if self_attention:
        key = value = query
    else:
        key = randn(B, S, C, seed=seed + 101, dtype=dtype, scale=scale)
        value = key if same_key_value else randn(B, S, C, seed=seed + 102, dtype=dtype)
    init_kwargs = {} if bias else {"bias": False}
    if dropout is not None:
        init_kwargs["dropout"] = dropout
    return module_probe(id, title, MultiHeadAttention, (C, H), init_kwargs, (query, key, value), kwargs, seed=seed,
                        dtype=dtype, output_names=ATTENTION_OUTPUTS, **extra)


NO_BIAS = ("with bias=False the projections have no bias (self.q_proj.bias is None): call the layers, "
           "self.q_proj(query), rather than using their weight and bias by hand")

MULTI_HEAD_ATTENTION_REQUIREMENTS = (
    Requirement("attention", "out_proj of the merged heads, each head attending with its own slice of q_proj(query), "
                             "k_proj(key), v_proj(value), scaled by 1/sqrt(D); the weights per head, (B, H, L, S), "
                             "as nn.MultiheadAttention gives them", 4),
    Requirement("padding", "key_padding_mask (B, S), True at padding, blocks those keys for every head and query"),
    Requirement("attn-mask", "a 2-D attn_mask (L, S) blocks where True (bool) or is added to the scores (float)"),
    Requirement("mask-3d", "a 3-D attn_mask (B*H, L, S) is batch-major: entry b*H + h is example b, head h"),
    Requirement("both-masks", "with both masks given, a key is blocked if either mask blocks it"),
    Requirement("need-weights", "need_weights=False returns None in place of the weights", 0.5),
    Requirement("no-bias", "works with bias=False (projections without a bias)", 0.5),
    Requirement("dropout-eval", "in eval() mode dropout is off, whatever its rate", 0.5),
    Requirement("dropout-train", "in training mode dropout acts on the attention weights, before they mix the "
                                 "values (with dropout=1.0 the weights are all zero)", 0.5),
    Requirement("dtype-device", "follows the dtype (float64) and device (meta) of its inputs and weights, masks "
                                "included", 0.5),
    Requirement("gradients", "is differentiable: gradients reach the query, key, value and every weight", 0.5),
)


def multi_head_attention_public_probes():
    base = _mha_probe("self", "self-attention, batch 2, 4 tokens, d_model=8, 2 heads", 2, 4, 4, 8, 2, seed=500,
                      self_attention=True)
    perm = torch.tensor([2, 0, 3, 1])
    permuted = dict(base, id="permuted-tokens", title="the same tokens in another order")
    permuted["args"] = [base["args"][0][:, perm]] * 3
    permuted["relation"] = {
        "base": "self", "perm": perm, "axes": [[1], [2, 3]],
        "message": "without positions, self-attention is permutation-equivariant: reordering the tokens must "
                   "reorder the outputs (and the query and key axes of the weights) the same way",
    }
    B, H, L, S, C = 2, 3, 3, 4, 6
    return [
        *requiring("attention", [
            base,
            _mha_probe("cross", "cross-attention: L=3 queries, S=5 keys and values from another sequence", 2, 3, 5, 8,
                       2, seed=510),
            permuted,
        ]),
        *requiring("padding", [
            _mha_probe("padding", "a key_padding_mask (B, S), True at padding", 2, 3, 5, 8, 2, seed=520,
                       key_padding_mask=padding([4, 2], 5)),
            _mha_probe("padding-self", "self-attention with a key_padding_mask, 4 tokens", 2, 4, 4, 8, 2, seed=525,
                       self_attention=True, key_padding_mask=padding([4, 3], 4)),
        ]),
        *requiring("attn-mask", [
            _mha_probe("causal", "self-attention with a causal bool attn_mask (L, S), True above the diagonal",
                       2, 4, 4, 8, 2, seed=530, self_attention=True,
                       attn_mask=torch.ones(4, 4, dtype=torch.bool).triu(1)),
            _mha_probe("float-mask", "a float attn_mask (L, S), added to the scores", 2, 3, 5, 8, 2, seed=535,
                       attn_mask=randn(3, 5, seed=536)),
        ]),
        *requiring("mask-3d", [
            _mha_probe("mask-3d", "a bool 3-D attn_mask (B*H, L, S), B=2, H=3: one per example and head", B, L, S, C,
                       H, seed=540, attn_mask=random_bool_mask(B * H, L, S, seed=541, p=0.5),
                       fallback_hint=THREE_D_MASK),
            _mha_probe("float-mask-3d", "a float 3-D attn_mask (B*H, L, S), B=2, H=3", B, L, S, C, H, seed=545,
                       attn_mask=randn(B * H, L, S, seed=546, scale=2.0), fallback_hint=THREE_D_MASK),
        ]),
        *requiring("both-masks", [
            _mha_probe("both", "a bool attn_mask (L, S) and a key_padding_mask", B, L, S, C, H, seed=550,
                       attn_mask=random_bool_mask(L, S, seed=551), key_padding_mask=padding([2, 4], S)),
            _mha_probe("both-float", "a float attn_mask (L, S) and a key_padding_mask", B, L, S, C, H, seed=555,
                       attn_mask=randn(L, S, seed=556), key_padding_mask=padding([4, 2], S)),
            _mha_probe("both-3d", "a bool 3-D attn_mask (B*H, L, S) and a key_padding_mask", B, L, S, C, H, seed=560,
                       attn_mask=random_bool_mask(B * H, L, S, seed=561), key_padding_mask=padding([3, 2], S),
                       fallback_hint=THREE_D_MASK),
        ]),
        *requiring("need-weights", [
            _mha_probe("no-weights", "need_weights=False", 2, 3, 5, 8, 2, seed=565, need_weights=False),
        ]),
        *requiring("no-bias", [
            _mha_probe("no-bias", "bias=False", 2, 3, 5, 8, 2, seed=570, bias=False, fallback_hint=NO_BIAS),
        ]),
        *requiring("dropout-eval", [
            _mha_probe("dropout-eval", "dropout=0.5 in eval() mode: no dropout", 2, 4, 5, 8, 2, seed=575, dropout=0.5,
                       fallback_hint=EVAL_DROPOUT),
        ]),
        *requiring("dropout-train", [
            _mha_probe("dropout-train", "dropout=1.0 in training mode: every attention weight dropped", 2, 3, 5, 8, 2,
                       seed=580, dropout=1.0, training=True, fallback_hint=TRAIN_DROPOUT),
        ]),
        *requiring("dtype-device", [
            _mha_probe("float64", "float64 inputs and weights", 2, 3, 5, 8, 2, seed=585, dtype="float64"),
            # Heads of size 6 (sqrt(6) is not exact in float32) and large scores: float32 rounding shows here.
            _mha_probe("float64-precise", "float64, d_model=12, 2 heads, scores large enough that float32 rounding "
                       "shows", 2, 3, 5, 12, 2, seed=587, dtype="float64", scale=8.0),
            _mha_probe("meta", "inputs and weights on the meta device", 2, 3, 5, 8, 2, seed=590, device="meta"),
            _mha_probe("meta-masks", "on the meta device, with a bool attn_mask and a key_padding_mask", 2, 3, 5, 8, 2,
                       seed=595, device="meta", attn_mask=random_bool_mask(3, 5, seed=596),
                       key_padding_mask=padding([5, 3], 5)),
        ]),
        *requiring("gradients", [
            with_gradients(_mha_probe("grad", "cross-attention, L=3, S=4", 2, 3, 4, 8, 2, seed=598),
                           MultiHeadAttention, seed=599),
        ]),
    ]


def multi_head_attention_hidden_probes(devices=("cpu",)):
    B, H, L, S, C = 2, 3, 4, 6, 12
    cross = _mha_probe("cross-4-heads", "cross-attention, batch 3, L=4, S=6, d_model=16, 4 heads", 3, 4, 6, 16, 4,
                       seed=600)
    perm = torch.tensor([5, 3, 0, 4, 1, 2])
    permuted = dict(cross, id="permuted-keys", title="the same keys and values in another order")
    permuted["args"] = [cross["args"][0], cross["args"][1][:, perm], cross["args"][2][:, perm]]
    permuted["relation"] = {
        "base": "cross-4-heads", "perm": perm, "axes": [[], [3]],
        "message": "reordering the keys (with their values) must reorder the weights' key axis the same way and "
                   "leave the output unchanged: is each key matched with its own value?",
    }
    probes = [
        *requiring("attention", [
            cross,
            permuted,
            _mha_probe("one-head", "one head (d_head = d_model)", 2, 3, 5, 8, 1, seed=610),
            _mha_probe("one-feature-heads", "as many heads as features (d_head = 1)", 2, 3, 5, 4, 4, seed=620),
            _mha_probe("wide-heads", "d_model=64, 4 heads, where the scale matters most", 2, 5, 5, 64, 4, seed=630),
            _mha_probe("memory", "keys and values from one memory sequence, L=2, S=7", 2, 2, 7, 8, 2, seed=650,
                       same_key_value=True),
            _mha_probe("one-query", "a single query, L=1", 2, 1, 5, 8, 2, seed=660),
        ]),
        *requiring("padding", [
            _mha_probe("padding-3", "key_padding_mask, batch 3, L=4, S=6", 3, 4, 6, 8, 2, seed=700,
                       key_padding_mask=padding([5, 1, 3], 6)),
            _mha_probe("padding-one-head", "key_padding_mask with one head, L=2, S=4", 2, 2, 4, 6, 1, seed=705,
                       key_padding_mask=padding([3, 2], 4)),
            _mha_probe("padding-self-5", "self-attention with a key_padding_mask, 5 tokens", 2, 5, 5, 8, 2, seed=710,
                       self_attention=True, key_padding_mask=padding([3, 4], 5)),
        ]),
        *requiring("attn-mask", [
            _mha_probe("bool-mask", "a bool attn_mask (L, S)", B, L, S, C, H, seed=720,
                       attn_mask=random_bool_mask(L, S, seed=721)),
            _mha_probe("float-mask-2", "a float attn_mask (L, S), 3 heads", B, L, S, C, H, seed=730,
                       attn_mask=randn(L, S, seed=731)),
            _mha_probe("float-inf-mask", "a float attn_mask (L, S) with -inf entries", B, L, S, C, H, seed=740,
                       attn_mask=additive(random_bool_mask(L, S, seed=741))),
        ]),
        *requiring("mask-3d", [
            _mha_probe("mask-3d-2", "a bool 3-D attn_mask (B*H, L, S), B=2, H=3, L=4, S=6", B, L, S, C, H, seed=750,
                       attn_mask=random_bool_mask(B * H, L, S, seed=751, p=0.5), fallback_hint=THREE_D_MASK),
            _mha_probe("float-mask-3d-2", "a float 3-D attn_mask (B*H, L, S), B=3, H=2", 3, 3, 5, 8, 2, seed=760,
                       attn_mask=randn(6, 3, 5, seed=761, scale=2.0), fallback_hint=THREE_D_MASK),
        ]),
        *requiring("both-masks", [
            _mha_probe("both-2", "a bool attn_mask (L, S) and a key_padding_mask", B, L, S, C, H, seed=770,
                       attn_mask=random_bool_mask(L, S, seed=771), key_padding_mask=padding([4, 5], S)),
            _mha_probe("both-float-2", "a float attn_mask (L, S) and a key_padding_mask", B, L, S, C, H, seed=780,
                       attn_mask=randn(L, S, seed=781), key_padding_mask=padding([5, 3], S)),
            _mha_probe("both-3d-2", "a bool 3-D attn_mask and a key_padding_mask", B, L, S, C, H, seed=790,
                       attn_mask=random_bool_mask(B * H, L, S, seed=791), key_padding_mask=padding([2, 5], S),
                       fallback_hint=THREE_D_MASK),
            _mha_probe("causal-padding", "self-attention with a causal mask and padding, 4 heads", 2, 5, 5, 16, 4,
                       seed=800, self_attention=True, attn_mask=torch.ones(5, 5, dtype=torch.bool).triu(1),
                       key_padding_mask=padding([5, 3], 5)),
        ]),
        *requiring("need-weights", [
            _mha_probe("no-weights-2", "need_weights=False, batch 3, 4 heads", 3, 4, 6, 16, 4, seed=690,
                       need_weights=False),
        ]),
        *requiring("no-bias", [
            _mha_probe("no-bias-2", "bias=False, 4 heads", 3, 4, 6, 16, 4, seed=680, bias=False, fallback_hint=NO_BIAS),
        ]),
        *requiring("dropout-eval", [
            _mha_probe("dropout-eval-2", "dropout=0.9 in eval() mode, 4 heads", 3, 4, 6, 16, 4, seed=685, dropout=0.9,
                       fallback_hint=EVAL_DROPOUT),
        ]),
        *requiring("dropout-train", [
            _mha_probe("dropout-train-2", "dropout=1.0 in training mode, 4 heads", 3, 4, 6, 16, 4, seed=695,
                       dropout=1.0, training=True, fallback_hint=TRAIN_DROPOUT),
        ]),
        *requiring("dtype-device", [
            _mha_probe("float64-2", "float64 cross-attention, batch 3, L=4, S=6", 3, 4, 6, 8, 2, seed=640,
                       dtype="float64"),
            _mha_probe("meta-2", "on the meta device, batch 3, 4 heads", 3, 4, 6, 16, 4, seed=645, device="meta"),
            _mha_probe("meta-masks-2", "on the meta device with both masks, 3 heads", B, L, S, C, H, seed=655,
                       device="meta", attn_mask=random_bool_mask(L, S, seed=656), key_padding_mask=padding([3, 6], S)),
            *[on_device(_mha_probe("device", "with a bool attn_mask and a key_padding_mask", B, L, S, C, H, seed=830,
                                   attn_mask=random_bool_mask(L, S, seed=831), key_padding_mask=padding([3, 6], S)),
                        device) for device in devices if device != "cpu"],
        ]),
        *requiring("gradients", [
            with_gradients(_mha_probe("grad-2", "cross-attention, batch 3, L=4, S=6, 4 heads", 3, 4, 6, 16, 4,
                                      seed=810), MultiHeadAttention, seed=811),
        ]),
    ]
    return multi_head_attention_public_probes() + probes


EXERCISES = [
    ExerciseChecks("split_heads", split_heads, split_heads_public_probes, split_heads_hidden_probes,
                   SPLIT_HEADS_MISTAKES, requirements=SPLIT_HEADS_REQUIREMENTS),
    ExerciseChecks("merge_heads", merge_heads, merge_heads_public_probes, merge_heads_hidden_probes,
                   MERGE_HEADS_MISTAKES, requirements=MERGE_HEADS_REQUIREMENTS),
    ExerciseChecks("MultiHeadAttention", MultiHeadAttention, multi_head_attention_public_probes,
                   multi_head_attention_hidden_probes, MULTI_HEAD_ATTENTION_MISTAKES,
                   requirements=MULTI_HEAD_ATTENTION_REQUIREMENTS),
]
