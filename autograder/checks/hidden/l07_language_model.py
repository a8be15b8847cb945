"""Lesson 07 checks: make_lm_examples, DecoderOnlyLM, cached_self_attention, next_token_probs, generate
and perplexity.

Each exercise's checks are grouped into the requirements its text states, the core behaviour
first; hidden probes try the same requirements on other sizes, seeds and values.

DecoderOnlyLM runs on tiny models (a vocabulary of 11 tokens, d_model 8) with the reference's
weights, perturbed. Whether lm_head's weight IS the token embedding's shows in the values: a probe
gives lm_head.weight other values than the embedding, and loading them into one shared Parameter
sets both (lm_head is loaded last), where a copy keeps two matrices. cached_self_attention runs on
the runner's AttentionProjections (a lesson 02 MultiHeadAttention's four projections and
num_heads), generate and perplexity on the runner's TinyLM, a float64 stand-in whose values show
how it was used: on a probe of the cache, uncached calls, a first cached call and the later ones
read three different heads, and on a probe of the mode, gradients or training mode roll the
vocabulary, so the tokens or the perplexity returned decide; its record of the calls only words
the diagnosis.
TinyLM's sampling values mean nothing on the meta device, so generate's and perplexity's device is
not checked.
"""

import math

import torch
import torch.nn.functional as F
from torch import nn

from ...reference import (DecoderOnlyLM, cached_self_attention, generate, make_lm_examples, next_token_probs,
                          perplexity)
from ...reference.attention import scaled_dot_product_attention
from ...reference.decoder import causal_mask
from ...reference.multihead import merge_heads, split_heads
from ..properties import FIXTURE_HINTS, SORT_UNDONE
from .probes import ExerciseChecks, Requirement, function_probe, module_probe, on_device, randn, requiring


def _tokens(*shape, vocab, seed):
    return torch.randint(vocab, shape, generator=torch.Generator().manual_seed(seed))


# ----------------------------------------------------------------------------- make_lm_examples
def _examples(ids, block_size, variant=None):
    N = ids.size(0)
    if N < (block_size if variant == "short_check" else block_size + 1):
        raise ValueError("too short")
    if variant == "overlapping":
        return ids[:-1].unfold(0, block_size, 1), ids[1:].unfold(0, block_size, 1)  # (N - bs, bs) each
    n = {"n_floor": N // block_size, "drops_one": (N - block_size) // block_size}.get(variant, (N - 1) // block_size)
    x = ids[: n * block_size].reshape(n, block_size)
    if variant == "unshifted":
        return x, x.clone()
    return x, ids[1 : n * block_size + 1].reshape(n, block_size)


def _examples_mistake(variant):
    def wrong(ids, block_size):
        return _examples(ids, block_size, variant)

    wrong.__name__ = f"make_lm_examples_{variant}"
    return wrong


MAKE_LM_EXAMPLES_MISTAKES = [
    ("the targets are not shifted: y[i] is x[i] one token on, ids[i*bs+1:(i+1)*bs+1], the token after each input",
     _examples_mistake("unshifted")),
    ("the windows overlap (a stride of 1): they are non-overlapping, x[i] = ids[i*bs:(i+1)*bs], "
     "n = (N - 1) // block_size of them", _examples_mistake("overlapping")),
    ("the number of windows is off by one: n = (N - 1) // block_size, since the last window's targets need one "
     "token more than its inputs", _examples_mistake("n_floor")),
    ("the number of windows is off by one (one too few): n = (N - 1) // block_size", _examples_mistake("drops_one")),
]


def _examples_probe(id, title, N, block_size, seed, **extra):
    ids = torch.randperm(max(N, 1) * 3, generator=torch.Generator().manual_seed(seed))[:N]  # distinct ids
    return function_probe(id, title, (ids, block_size), {}, ("x", "y"), **extra)


TOO_SHORT_HINT = ("fewer than block_size + 1 tokens make no example (the targets need one token more than the "
                  "inputs): raise ValueError when ids.size(0) < block_size + 1")

MAKE_LM_EXAMPLES_REQUIREMENTS = (
    Requirement("windows", "x[i] = ids[i*bs:(i+1)*bs], y[i] = ids[i*bs+1:(i+1)*bs+1]: n = (N - 1) // block_size "
                           "non-overlapping windows, each (n, block_size)", 2),
    Requirement("too-short", "N < block_size + 1 raises ValueError"),
)


def make_lm_examples_public_probes():
    return [
        *requiring("windows", [
            _examples_probe("leftover", "N=14, block_size=4: 3 windows, one token left over", 14, 4, seed=1),
            _examples_probe("exact", "N=13, block_size=4: exactly 3 windows and their targets", 13, 4, seed=2),
            _examples_probe("multiple", "N=12, block_size=4: 2 windows (the third has no last target)", 12, 4,
                            seed=3),
        ]),
        *requiring("too-short", [
            _examples_probe("too-short", "N = block_size = 5: no example", 5, 5, seed=4, hint=TOO_SHORT_HINT),
        ]),
    ]


def make_lm_examples_hidden_probes(devices=("cpu",)):
    return make_lm_examples_public_probes() + [
        *requiring("windows", [
            _examples_probe("one-window", "N = block_size + 1 = 7: one window", 7, 6, seed=10),
            _examples_probe("long", "N=50, block_size=7", 50, 7, seed=11),
            _examples_probe("multiple-8", "N=24, block_size=8", 24, 8, seed=12),
            _examples_probe("block-1", "block_size=1", 6, 1, seed=13),
        ]),
        *requiring("too-short", [
            _examples_probe("too-short-3", "N=3, block_size=8", 3, 8, seed=14, hint=TOO_SHORT_HINT),
        ]),
    ]


# ----------------------------------------------------------------------------- DecoderOnlyLM
VOCAB = 11
PLAIN = {"d_model": 8, "num_heads": 2, "num_layers": 2, "d_ff": 16, "max_len": 12}
WIDER = {"d_model": 16, "num_heads": 4, "num_layers": 2, "d_ff": 32, "max_len": 16}


class _LMMistake(DecoderOnlyLM):
    """The reference DecoderOnlyLM with one wrong turn, named by ``variant``."""

    variant = None

    def __init__(self, vocab_size, *args, **kwargs):
        super().__init__(vocab_size, *args, **kwargs)
        tied = self.lm_head.weight is self.tok_embed.embedding.weight
        if self.variant == "tied_by_copy" and tied:
            self.lm_head.weight = nn.Parameter(self.tok_embed.embedding.weight.detach().clone())
        if self.variant == "always_tied" and not tied:
            self.lm_head.weight = self.tok_embed.embedding.weight
        if self.variant == "shared_layers":  # [layer] * n: one module in every place, loaded last with the top layer's
            self.layers = nn.ModuleList([self.layers[0]] * len(self.layers))

    def forward(self, ids, key_padding_mask=None):
        if self.variant == "unscaled":
            x = self.pos_embed(self.tok_embed.embedding(ids))
        elif self.variant == "no_positions":
            x = self.tok_embed(ids)
        else:
            x = self.pos_embed(self.tok_embed(ids))  # (B, T, C)
        mask = causal_mask(ids.size(1), device=ids.device)
        T = ids.size(1)
        off_by_one = {"diagonal_blocked": 0, "sees_next": 2}
        if self.variant in off_by_one:
            mask = torch.ones(T, T, dtype=torch.bool, device=ids.device).triu(diagonal=off_by_one[self.variant])
        mask = {"no_mask": None, "inverted_mask": ~mask}.get(self.variant, mask)
        padding = None if self.variant == "padding_dropped" else key_padding_mask
        for layer in self.layers:
            x = layer(x, key_padding_mask=padding, attn_mask=mask)
        if self.norm is not None and self.variant != "no_final_norm":
            x = self.norm(x)
        logits = self.lm_head(x)
        return logits.softmax(dim=-1) if self.variant == "softmax" else logits


def _lm_mistake(variant):
    return type(f"DecoderOnlyLM_{variant}", (_LMMistake,), {"variant": variant})


LM_MASK_OFF_BY_ONE = ("the causal mask is off by one: position i sees its own token and the earlier ones, not the "
                      "diagonal blocked nor the next token seen; causal_mask(T, device=ids.device) blocks exactly the "
                      "later positions, True above the diagonal")

DECODER_ONLY_LM_MISTAKES = [
    ("the layers run without the causal mask: pass attn_mask=causal_mask(T, device=ids.device) to every layer, so "
     "that no position sees a later token", _lm_mistake("no_mask")),
    (LM_MASK_OFF_BY_ONE, _lm_mistake("diagonal_blocked")),  # first: with one token, the same as the inverted mask
    ("the causal mask is the wrong way round: True marks the FUTURE positions, the ones to block (causal_mask(T))",
     _lm_mistake("inverted_mask")),
    (LM_MASK_OFF_BY_ONE, _lm_mistake("sees_next")),
    ("the final LayerNorm is missing: with norm_first, apply self.norm to the last layer's output before lm_head",
     _lm_mistake("no_final_norm")),
    ("forward returns probabilities: it returns the logits, self.lm_head(x), with no softmax (the loss applies it)",
     _lm_mistake("softmax")),
    ("key_padding_mask is not passed on to the layers: layer(x, key_padding_mask=key_padding_mask, attn_mask=mask)",
     _lm_mistake("padding_dropped")),
    ("the position embeddings are missing: x = self.pos_embed(self.tok_embed(ids))", _lm_mistake("no_positions")),
    ("the token embeddings are not scaled by sqrt(d_model): call self.tok_embed(ids) (lesson 03's TokenEmbedding), "
     "not its .embedding table", _lm_mistake("unscaled")),
    ("lm_head.weight must BE the token embedding's weight, one Parameter (self.lm_head.weight = "
     "self.tok_embed.embedding.weight), not a copy of it", _lm_mistake("tied_by_copy")),
    ("with tie_weights=False lm_head keeps its own weight: tie the two only when tie_weights is True",
     _lm_mistake("always_tied")),
    ("the layers are one module repeated: nn.ModuleList([layer] * num_layers) puts the same EncoderLayer in every "
     "place, so they share their weights; build a new one for each, EncoderLayer(...) for _ in range(num_layers)",
     _lm_mistake("shared_layers")),
]


def _lm_probe(id, title, B, T, seed, config=None, lengths=None, **extra):
    config = dict(PLAIN, **(config or {}))
    ids = _tokens(B, T, vocab=VOCAB, seed=seed + 100)
    kwargs = {}
    if lengths is not None:
        kwargs["key_padding_mask"] = torch.arange(T)[None, :] >= torch.tensor(lengths)[:, None]  # (B, T)
    return module_probe(id, title, DecoderOnlyLM, (VOCAB,), config, (ids,), kwargs, seed=seed,
                        dtype=extra.pop("dtype", "float32"), output_names=("logits",), **extra)


def _other_head(probe, seed):
    """The probe, with lm_head.weight given other values than the token embedding."""
    state_dict = dict(probe["construct"]["state_dict"])
    state_dict["lm_head.weight"] = randn(*state_dict["lm_head.weight"].shape, seed=seed, scale=0.5)
    return dict(probe, construct=dict(probe["construct"], state_dict=state_dict))


MAX_LEN_HINT = ("a sequence longer than max_len has no position embeddings: raise ValueError when T > max_len "
                "(lesson 03's LearnedPositionalEmbedding, called as self.pos_embed(x), raises it)")

DECODER_ONLY_LM_REQUIREMENTS = (
    Requirement("forward", "returns logits (B, T, vocab_size), no softmax: token and position embeddings, the layers "
                           "with the causal mask, the final norm (norm_first), lm_head", 2),
    Requirement("post-norm", "with norm_first=False there is no final norm (self.norm is None)", 0.5),
    Requirement("tied", "with tie_weights=True lm_head.weight is the token embedding's weight, one Parameter (not a "
                        "copy); with tie_weights=False two"),
    Requirement("padding", "passes key_padding_mask on to every layer"),
    Requirement("max-len", "T > max_len raises ValueError"),
    Requirement("dropout", "dropout is off in eval mode whatever its rate, and in training mode applied where the "
                           "layers apply it (nowhere else)"),
    Requirement("dtype-device", "follows the weights' dtype (float64) and the input's device (meta), the causal mask "
                                "made there", 0.5),
)


def decoder_only_lm_public_probes():
    return [
        *requiring("forward", [
            _lm_probe("basic", "batch 2, 5 tokens, pre-norm (norm_first=True)", 2, 5, seed=1),
            _lm_probe("one-token", "a single token", 3, 1, seed=2),
        ]),
        *requiring("post-norm", [_lm_probe("post-norm", "norm_first=False", 2, 4, seed=3,
                                           config={"norm_first": False})]),
        *requiring("tied", [
            _other_head(_lm_probe("tied", "tie_weights=True, lm_head.weight loaded with other values than the "
                                          "embedding (one Parameter: both take them)", 2, 4, seed=4), seed=40),
            _lm_probe("untied", "tie_weights=False: two matrices", 2, 4, seed=5, config={"tie_weights": False}),
        ]),
        *requiring("padding", [_lm_probe("padding", "a key padding mask (B, T), rows of 5 and 3 tokens", 2, 5, seed=6,
                                         lengths=[5, 3])]),
        *requiring("max-len", [_lm_probe("too-long", "T = max_len + 1", 2, PLAIN["max_len"] + 1, seed=7,
                                         hint=MAX_LEN_HINT)]),
        *requiring("dropout", [
            _lm_probe("eval-dropout", "eval mode with dropout=0.5: no dropout", 2, 5, seed=8, config={"dropout": 0.5}),
            _lm_probe("train-dropout", "training mode with dropout=1.0: every dropped value is zero", 2, 5, seed=9,
                      config={"dropout": 1.0}, training=True),
        ]),
        *requiring("dtype-device", [
            _lm_probe("float64", "float64 weights", 2, 4, seed=10, dtype="float64"),
            _lm_probe("meta", "weights and input on the meta device", 2, 4, seed=11, device="meta"),
        ]),
    ]


def decoder_only_lm_hidden_probes(devices=("cpu",)):
    return decoder_only_lm_public_probes() + [
        *requiring("forward", [
            _lm_probe("wide", "d_model=16, 4 heads, 7 tokens", 2, 7, seed=20, config=WIDER),
            _lm_probe("full", "T = max_len", 1, PLAIN["max_len"], seed=21),
            _lm_probe("three-layers", "3 layers, gelu", 3, 6, seed=22, config={"num_layers": 3}),
        ]),
        *requiring("post-norm", [_lm_probe("post-norm-wide", "norm_first=False, d_model=16", 2, 6, seed=23,
                                           config=dict(WIDER, norm_first=False))]),
        *requiring("tied", [
            _other_head(_lm_probe("tied-wide", "tie_weights=True, d_model=16, lm_head.weight loaded with other "
                                               "values", 2, 5, seed=24, config=WIDER), seed=41),
            _lm_probe("untied-wide", "tie_weights=False, d_model=16", 2, 6, seed=25,
                      config=dict(WIDER, tie_weights=False)),
        ]),
        *requiring("padding", [_lm_probe("padding-3", "3 rows of padding", 3, 6, seed=26, lengths=[6, 2, 4])]),
        *requiring("max-len", [_lm_probe("too-long-wide", "T = max_len + 3, d_model=16", 1, WIDER["max_len"] + 3,
                                         seed=27, config=WIDER, hint=MAX_LEN_HINT)]),
        *requiring("dropout", [
            _lm_probe("eval-dropout-wide", "eval mode, dropout=0.3, d_model=16", 2, 6, seed=28,
                      config=dict(WIDER, dropout=0.3)),
            _lm_probe("train-dropout-wide", "training mode, dropout=1.0, d_model=16", 3, 4, seed=29,
                      config=dict(WIDER, dropout=1.0), training=True),
        ]),
        *requiring("dtype-device", [
            _lm_probe("float64-wide", "float64, d_model=16", 2, 6, seed=30, config=WIDER, dtype="float64"),
            _lm_probe("meta-wide", "on the meta device, d_model=16", 3, 5, seed=31, config=WIDER, device="meta"),
            *[on_device(_lm_probe("device", "batch 2, 5 tokens", 2, 5, seed=32), device)
              for device in devices if device != "cpu"],
        ]),
    ]


# ----------------------------------------------------------------------------- cached_self_attention
def _cached(attn, x_new, past_key=None, past_value=None, variant=None):
    """Cached self-attention with one knob turned the wrong way."""
    q = split_heads(attn.q_proj(x_new), attn.num_heads)  # (B, H, T_new, D)
    k = split_heads(attn.k_proj(x_new), attn.num_heads)
    v = split_heads(attn.v_proj(x_new), attn.num_heads)
    if past_key is not None:
        if variant == "not_appended":
            k, v = past_key, past_value
        elif variant == "new_first":
            k, v = torch.cat([k, past_key], dim=2), torch.cat([v, past_value], dim=2)
        else:
            dim = {"heads_axis": 1, "batch_axis": 0, "last_axis": 3}.get(variant, 2)
            k, v = torch.cat([past_key, k], dim=dim), torch.cat([past_value, v], dim=dim)
    T_new, S = q.size(2), k.size(2)
    if variant == "no_mask":
        mask = None
    elif variant == "top_left":
        mask = torch.ones(T_new, S, dtype=torch.bool, device=x_new.device).triu(diagonal=1)
    elif variant == "square_mask":
        mask = causal_mask(T_new, device=x_new.device)
    else:
        diagonal = S - T_new + {"hides_itself": 0, "sees_next": 2}.get(variant, 1)
        mask = torch.ones(T_new, S, dtype=torch.bool, device=x_new.device).triu(diagonal=diagonal)  # (T_new, S)
        if variant == "float_mask":
            mask = mask.to(q.dtype)
    out, _ = scaled_dot_product_attention(q, k, v, mask)
    out = merge_heads(out)
    if variant == "new_only_returned":
        k, v = k[:, :, S - T_new:], v[:, :, S - T_new:]
    return (out if variant == "no_out_proj" else attn.out_proj(out)), k, v


def _cached_mistake(variant):
    def wrong(attn, x_new, past_key=None, past_value=None):
        return _cached(attn, x_new, past_key, past_value, variant)

    wrong.__name__ = f"cached_self_attention_{variant}"
    return wrong


WRONG_AXIS_HINT = ("the new keys and values are appended on the wrong axis: (B, H, S, D) grows along the positions, "
                   "torch.cat([past_key, key], dim=2)")
OFF_BY_ONE_MASK_HINT = ("the mask is off by one: new token i (position S_past + i) sees positions 0 .. S_past + i, "
                        "itself included and nothing after it: torch.ones(T_new, S, dtype=torch.bool)"
                        ".triu(diagonal=S - T_new + 1)")

CACHED_SELF_ATTENTION_MISTAKES = [
    (WRONG_AXIS_HINT, _cached_mistake("heads_axis")),
    (WRONG_AXIS_HINT, _cached_mistake("last_axis")),
    (WRONG_AXIS_HINT, _cached_mistake("batch_axis")),
    (OFF_BY_ONE_MASK_HINT, _cached_mistake("hides_itself")),
    (OFF_BY_ONE_MASK_HINT, _cached_mistake("sees_next")),
    ("the mask is not bool (torch.ones makes float32): a float mask is ADDED to the scores and blocks nothing; "
     "make it with dtype=torch.bool, True = blocked", _cached_mistake("float_mask")),
    ("the keys and values returned are the new positions' only: return those of all positions so far, the past "
     "ones and the new ones, (B, H, S_past + T_new, D): they are the new cache", _cached_mistake("new_only_returned")),
    ("the new positions' keys and values are not appended to the past ones: the new tokens attend to themselves "
     "too, so key = torch.cat([past_key, key], dim=2) (and the same for the values)", _cached_mistake("not_appended")),
    ("the new keys and values come before the past ones: the past ones first, torch.cat([past_key, key], dim=2)",
     _cached_mistake("new_first")),
    ("the new tokens are not masked causally: new token i (position S_past + i) sees positions 0 .. S_past + i, "
     "the last T_new rows of the (S, S) causal mask", _cached_mistake("no_mask")),
    ("the mask is aligned at the top left: new token i is at position S_past + i and sees positions "
     "0 .. S_past + i (block above diagonal S - T_new + 1, the last T_new rows of the (S, S) causal mask)",
     _cached_mistake("top_left")),
    ("the mask is (T_new, T_new) but the scores are (T_new, S_past + T_new): new token i sees positions "
     "0 .. S_past + i, the last T_new rows of the (S, S) causal mask", _cached_mistake("square_mask")),
    ("the output projection is missing: return attn.out_proj(merge_heads(out)), key, value",
     _cached_mistake("no_out_proj")),
]

PAST_NONE_HINT = ("past_key=None (the first call, nothing cached yet) must work: concatenate only when there is a "
                  "past, and mask the new tokens causally among themselves")


def _cached_probe(id, title, B, T_new, S_past, C, H, seed, dtype="float32", **extra):
    state_dict = {f"{name}.{kind}": randn(*((C, C) if kind == "weight" else (C,)), seed=seed + i, dtype=dtype,
                                          scale=C ** -0.5 if kind == "weight" else 0.1)
                  for i, (name, kind) in enumerate((n, k) for n in ("q_proj", "k_proj", "v_proj", "out_proj")
                                                   for k in ("weight", "bias"))}
    attn = {"__fixture__": "attention_projections", "args": [C, H, state_dict]}
    x_new = randn(B, T_new, C, seed=seed + 20, dtype=dtype)
    if S_past:
        past = (randn(B, H, S_past, C // H, seed=seed + 21, dtype=dtype), randn(B, H, S_past, C // H, seed=seed + 22,
                                                                                 dtype=dtype))
    else:
        past = (None, None)
        extra.setdefault("fallback_hint", PAST_NONE_HINT)
    return function_probe(id, title, (attn, x_new, *past), {}, ("out", "key", "value"), **extra)


CACHED_SELF_ATTENTION_REQUIREMENTS = (
    Requirement("append", "one new token: returns its output (B, 1, C) after out_proj, and the keys and values of all "
                          "positions so far (B, H, S_past + 1, D), the past ones first (appended along dim 2)", 2),
    Requirement("first-call", "with past_key=None (the prompt, nothing cached) the new tokens attend causally among "
                              "themselves, as full causal self-attention"),
    Requirement("chunk", "several new tokens after a past: new token i (position S_past + i) sees positions "
                         "0 .. S_past + i"),
    Requirement("dtype-device", "follows the inputs' dtype (float64) and device (meta), the mask made there", 0.5),
)


def cached_self_attention_public_probes():
    return [
        *requiring("append", [
            _cached_probe("one-token", "batch 2, 1 new token after 3 cached, d_model=8, 2 heads", 2, 1, 3, 8, 2, seed=1),
        ]),
        *requiring("first-call", [
            _cached_probe("prompt", "no past: 4 new tokens (the prompt)", 2, 4, 0, 8, 2, seed=2),
        ]),
        *requiring("chunk", [
            _cached_probe("chunk", "3 new tokens after 2 cached", 2, 3, 2, 8, 2, seed=3),
        ]),
        *requiring("dtype-device", [
            _cached_probe("float64", "float64, 2 new tokens after 3 cached", 2, 2, 3, 8, 2, seed=4, dtype="float64"),
            _cached_probe("meta", "on the meta device, 2 new tokens after 3 cached", 2, 2, 3, 8, 2, seed=5,
                          device="meta"),
        ]),
    ]


def cached_self_attention_hidden_probes(devices=("cpu",)):
    return cached_self_attention_public_probes() + [
        *requiring("append", [
            _cached_probe("one-token-wide", "1 new token after 6 cached, d_model=16, 4 heads", 3, 1, 6, 16, 4, seed=10),
            _cached_probe("one-token-1", "1 new token after 1 cached", 1, 1, 1, 8, 2, seed=11),
        ]),
        *requiring("first-call", [
            _cached_probe("prompt-wide", "no past: 6 new tokens, d_model=16, 4 heads", 1, 6, 0, 16, 4, seed=12),
        ]),
        *requiring("chunk", [
            _cached_probe("chunk-wide", "4 new tokens after 5 cached, d_model=16", 2, 4, 5, 16, 4, seed=13),
            _cached_probe("chunk-2", "2 new tokens after 1 cached", 3, 2, 1, 8, 2, seed=14),
        ]),
        *requiring("dtype-device", [
            _cached_probe("float64-wide", "float64, d_model=16, 3 new after 4 cached", 2, 3, 4, 16, 4, seed=15,
                          dtype="float64"),
            _cached_probe("meta-wide", "on the meta device, d_model=16", 1, 3, 5, 16, 4, seed=16, device="meta"),
            *[on_device(_cached_probe("device", "2 new tokens after 3 cached", 2, 2, 3, 8, 2, seed=17), device)
              for device in devices if device != "cpu"],
        ]),
    ]


# ----------------------------------------------------------------------------- next_token_probs
def _probs(logits, temperature=1.0, top_k=None, top_p=None, variant=None):
    """next_token_probs with one knob turned the wrong way."""
    if temperature <= 0:
        raise ValueError("temperature")
    if variant != "temperature_after":
        logits = logits / temperature
    original = torch.softmax(logits, dim=-1)
    if top_k:
        if variant in ("k_plus_one", "k_minus_one", "threshold"):
            kth = torch.topk(logits, top_k + (variant == "k_plus_one"), dim=-1).values[:, -1:]  # (B, 1)
            logits = logits.masked_fill(logits <= kth if variant == "k_minus_one" else logits < kth, float("-inf"))
        else:
            top = torch.topk(logits, top_k, dim=-1).indices
            keep = torch.zeros_like(logits, dtype=torch.bool).scatter(-1, top, True)
            logits = logits.masked_fill(~keep, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    if variant == "temperature_after":
        probs = probs / temperature
    if top_p is not None and top_p < 1:
        source = original if variant == "top_p_first" else probs
        if variant == "unsorted":
            drop = source.cumsum(dim=-1) - source >= top_p
            drop[:, 0] = False
        else:
            sorted_probs, order = source.sort(dim=-1, descending=True, stable=True)
            cumulative = sorted_probs.cumsum(dim=-1)
            if variant in ("drops_crossing", "keeps_none"):
                drop_sorted = cumulative > top_p
                if variant == "drops_crossing":
                    drop_sorted[:, 0] = False
            else:
                drop_sorted = cumulative - sorted_probs >= top_p
                drop_sorted[:, 0] = False
            if variant == "gathered":  # the inverse of what undoes the sort
                drop = drop_sorted.gather(-1, order)
            else:
                drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        probs = probs.masked_fill(drop, 0.0)
        if variant != "not_renormalised":
            probs = probs / probs.sum(dim=-1, keepdim=True)
    return probs


def _probs_mistake(variant):
    def wrong(logits, temperature=1.0, top_k=None, top_p=None):
        return _probs(logits, temperature, top_k, top_p, variant)

    wrong.__name__ = f"next_token_probs_{variant}"
    return wrong


NEXT_TOKEN_PROBS_MISTAKES = [
    ("the temperature is applied after the softmax: divide the logits by temperature before it, "
     "softmax(logits / temperature)", _probs_mistake("temperature_after")),
    ("top_k keeps every logit equal to the k-th largest: ties go as torch.topk picks them, exactly k tokens kept "
     "(scatter torch.topk's indices into a mask)", _probs_mistake("threshold")),
    ("top_k keeps k + 1 tokens: keep exactly the k largest logits, torch.topk(logits, top_k)",
     _probs_mistake("k_plus_one")),
    ("top_k keeps k - 1 tokens (the k-th largest is dropped too): keep exactly the k largest, torch.topk(logits, "
     "top_k)", _probs_mistake("k_minus_one")),
    ("top_p drops the token that crosses the threshold: keep a token while the tokens ranked above it total less "
     "than top_p (cumsum - probs < top_p), so the kept ones reach top_p", _probs_mistake("drops_crossing")),
    ("top_p can keep no token at all (then the probabilities are NaN): always keep the most probable token, and "
     "the one that crosses top_p", _probs_mistake("keeps_none")),
    ("top_p adds up the probabilities in vocabulary order: sort them, most probable first, before the cumulative "
     "sum", _probs_mistake("unsorted")),
    ("the kept probabilities are not renormalised: divide by their sum, so that each row sums to 1",
     _probs_mistake("not_renormalised")),
    ("top_p is computed before top_k: in this order, temperature, then top_k, then top_p on the probabilities "
     "of the tokens top_k kept", _probs_mistake("top_p_first")),
    (SORT_UNDONE, _probs_mistake("gathered")),
]


def _logits_probe(id, title, B, V, seed, dtype="float32", logits=None, **kwargs):
    extra = {key: kwargs.pop(key) for key in ("device", "hint") if key in kwargs}
    logits = randn(B, V, seed=seed, dtype=dtype, scale=2.0) if logits is None else logits
    return function_probe(id, title, (logits,), kwargs, ("probs",), **extra)


def _tied_logits(seed):
    """Logits whose 2nd to 4th largest are equal in each row: top_k=2 must keep exactly two tokens."""
    logits = randn(2, 7, seed=seed, scale=0.5) - 2.0
    logits[0, [4, 1, 6]] = 0.5
    logits[0, 2] = 1.5
    logits[1, [0, 3, 5]] = 0.25
    logits[1, 6] = 1.0
    return logits


TEMPERATURE_HINT = "temperature <= 0 has no meaning (it divides the logits): raise ValueError"

NEXT_TOKEN_PROBS_REQUIREMENTS = (
    Requirement("softmax", "returns the probabilities (B, V), the softmax of the logits; rows sum to 1", 2),
    Requirement("temperature", "divides the logits by temperature before the softmax"),
    Requirement("temperature-error", "temperature <= 0 raises ValueError", 0.5),
    Requirement("top-k", "top_k keeps the k largest logits (ties as torch.topk), the rest get probability 0; "
                         "renormalised"),
    Requirement("top-p", "top_p keeps the smallest set of most probable tokens whose total reaches top_p (the token "
                         "that crosses it included, always at least the most probable one); renormalised; top_p=1 "
                         "keeps every token"),
    Requirement("order", "temperature, then top_k, then top_p (on what top_k kept), in this order", 0.5),
    Requirement("dtype-device", "follows the logits' dtype (float64) and device (meta)", 0.5),
)


def next_token_probs_public_probes():
    return [
        *requiring("softmax", [_logits_probe("basic", "batch 2, 7 tokens", 2, 7, seed=1)]),
        *requiring("temperature", [
            _logits_probe("cold", "temperature=0.5", 2, 7, seed=2, temperature=0.5),
            _logits_probe("hot", "temperature=2.5", 2, 7, seed=3, temperature=2.5),
        ]),
        *requiring("temperature-error", [
            _logits_probe("zero-temperature", "temperature=0", 2, 7, seed=4, temperature=0.0, hint=TEMPERATURE_HINT),
        ]),
        *requiring("top-k", [
            _logits_probe("top-k", "top_k=3", 2, 7, seed=5, top_k=3),
            _logits_probe("top-k-ties", "top_k=2 where the 2nd largest logit is tied with others", 2, 7, seed=6,
                          logits=_tied_logits(6), top_k=2),
        ]),
        *requiring("top-p", [
            _logits_probe("top-p", "top_p=0.7", 3, 7, seed=7, top_p=0.7),
            _logits_probe("top-p-tiny", "top_p=0.01: only the most probable token", 2, 7, seed=8, top_p=0.01),
            _logits_probe("top-p-one", "top_p=1: every token", 2, 7, seed=16, top_p=1.0),
        ]),
        *requiring("order", [
            _logits_probe("all", "temperature=0.8, top_k=5, top_p=0.5", 3, 9, seed=9, temperature=0.8, top_k=5,
                          top_p=0.5),
        ]),
        *requiring("dtype-device", [
            _logits_probe("float64", "float64 logits", 2, 7, seed=10, dtype="float64"),
            _logits_probe("meta", "logits on the meta device, top_k=3, top_p=0.7", 2, 7, seed=11, device="meta",
                          top_k=3, top_p=0.7),
        ]),
    ]


def next_token_probs_hidden_probes(devices=("cpu",)):
    return next_token_probs_public_probes() + [
        *requiring("softmax", [_logits_probe("wide", "batch 3, 20 tokens", 3, 20, seed=20)]),
        *requiring("temperature", [
            _logits_probe("very-cold", "temperature=0.2", 3, 10, seed=21, temperature=0.2),
            _logits_probe("warm", "temperature=1.7", 1, 12, seed=22, temperature=1.7),
        ]),
        *requiring("temperature-error", [
            _logits_probe("negative-temperature", "temperature=-1", 2, 5, seed=23, temperature=-1.0,
                          hint=TEMPERATURE_HINT),
        ]),
        *requiring("top-k", [
            _logits_probe("top-k-1", "top_k=1", 3, 9, seed=24, top_k=1),
            _logits_probe("top-k-5", "top_k=5 of 12", 2, 12, seed=25, top_k=5),
            _logits_probe("top-k-ties-3", "top_k=3 with ties", 2, 7, seed=26, logits=_tied_logits(26).flip(-1),
                          top_k=3),
        ]),
        *requiring("top-p", [
            _logits_probe("top-p-half", "top_p=0.5", 3, 12, seed=27, top_p=0.5),
            _logits_probe("top-p-high", "top_p=0.95", 2, 9, seed=28, top_p=0.95),
            _logits_probe("top-p-tiny-2", "top_p=0.001", 3, 9, seed=29, top_p=0.001),
            _logits_probe("top-p-one-2", "top_p=1, 12 tokens", 3, 12, seed=39, top_p=1.0),
        ]),
        *requiring("order", [
            _logits_probe("all-2", "temperature=1.5, top_k=6, top_p=0.5", 2, 10, seed=30, temperature=1.5, top_k=6,
                          top_p=0.5),
            _logits_probe("all-3", "temperature=0.6, top_k=4, top_p=0.6", 3, 8, seed=31, temperature=0.6, top_k=4,
                          top_p=0.6),
        ]),
        *requiring("dtype-device", [
            _logits_probe("float64-wide", "float64, 12 tokens", 3, 12, seed=32, dtype="float64"),
            _logits_probe("meta-wide", "on the meta device, 12 tokens, top_k=4, top_p=0.5", 3, 12, seed=33,
                          device="meta", top_k=4, top_p=0.5),
            *[on_device(_logits_probe("device", "top_k=3, top_p=0.7", 2, 7, seed=34, top_k=3, top_p=0.7), device)
              for device in devices if device != "cpu"],
        ]),
    ]


# ----------------------------------------------------------------------------- generate
LM_VOCAB = 9
MODE_RECORDS = ("training", "lm_grad_enabled", "lm_ran_in_training_mode")
CALL_RECORDS = ("lm_calls",)


# What a probe's records are about, the stand-in's values show (runner.TinyLM's reveals); the records only
# word the diagnosis ("training", the mode it is left in, is checked).
REVEALS = {MODE_RECORDS: ["mode"], CALL_RECORDS: ["calls"], (): []}


def _model(max_len, seed, training=False, records=()):
    return {"__fixture__": "tiny_lm", "args": [LM_VOCAB, max_len, seed], "training": training,
            "kwargs": {"reveals": REVEALS[tuple(records)]}}


SAMPLING_HINT = ("the tokens differ from those the lesson's recipe draws: each new token is torch.multinomial(probs, 1, "
                 "generator=generator), probs = next_token_probs(logits[:, -1], ...), one call per step, so that the "
                 "generator given decides every draw (is it passed on? is another random function called?)")


def _generate_probe(id, title, B, T_prompt, new, max_len, seed, records=(), training=False, **kwargs):
    prompt = _tokens(B, T_prompt, vocab=LM_VOCAB, seed=seed + 100)
    hint = kwargs.pop("hint", None)
    kwargs["generator"] = {"__fixture__": "generator", "args": [seed + 200]}
    extra = {"hint": hint} if hint else {"fallback_hint": SAMPLING_HINT}
    return function_probe(id, title, (_model(max_len, seed, training, records), prompt, new), kwargs, ("ids",),
                          records=list(records), **extra)


def _generate(model, prompt, max_new_tokens, temperature=1.0, top_k=None, top_p=None, generator=None,
              use_cache=True, variant=None):
    """generate with one knob turned the wrong way (only its output matters here)."""
    if use_cache and variant != "no_length_check" and prompt.size(1) + max_new_tokens > model.max_len:
        raise ValueError("too long")
    if variant != "training_mode":
        model.eval()
    with torch.set_grad_enabled(variant == "gradients"):
        ids, cache = prompt, None
        for _ in range(max_new_tokens):
            if not use_cache or variant == "cache_ignored":
                logits = model(ids if variant == "no_window" else ids[:, -model.max_len:])
            elif cache is None or variant == "fresh_cache":
                fresh = cache is None
                cache = [None] * len(model.layers)
                logits = model.forward_cached(ids if fresh else ids[:, -1:], cache)
            else:
                newest = ids[:, -1] if variant == "newest_without_axis" else ids[:, -1:]
                logits = model.forward_cached(ids if variant == "whole_ids" else newest, cache)
            last = logits[:, 0] if variant == "first_position" else logits[:, -1]
            if variant == "options_dropped":
                probs = next_token_probs(last)
            else:
                probs = next_token_probs(last, temperature, top_k, top_p)
            if variant == "argmax":
                next_id = probs.argmax(dim=-1, keepdim=True)
            else:
                next_id = torch.multinomial(probs, 1, generator=generator)
            ids = torch.cat([ids, next_id], dim=1)
    return ids[:, prompt.size(1):] if variant == "new_only" else ids


def _generate_mistake(variant):
    def wrong(model, prompt, max_new_tokens, temperature=1.0, top_k=None, top_p=None, generator=None,
              use_cache=True):
        return _generate(model, prompt, max_new_tokens, temperature, top_k, top_p, generator, use_cache, variant)

    wrong.__name__ = f"generate_{variant}"
    return wrong


GENERATE_MISTAKES = [
    ("the output holds only the new tokens: return the prompt followed by them, (B, T_prompt + max_new_tokens)",
     _generate_mistake("new_only")),
    ("the next token is read from the first position's logits; it comes from the last one, logits[:, -1]",
     _generate_mistake("first_position")),
    ("the next token is the most probable one: sample it, torch.multinomial(probs, 1, generator=generator)",
     _generate_mistake("argmax")),
    ("a new, empty cache is made at every step: make it once, [None] * len(model.layers), and pass the same list "
     "every step (forward_cached fills it in place)", _generate_mistake("fresh_cache")),
    ("every step feeds the whole sequence through forward_cached: the cache already holds the earlier tokens, so "
     "feed only the newest one, ids[:, -1:]", _generate_mistake("whole_ids")),
    ("without use_cache the model sees more than max_len tokens: run it on the last max_len only, "
     "model(ids[:, -model.max_len:])", _generate_mistake("no_window")),
    ("temperature, top_k and top_p are not passed on: next_token_probs(logits[:, -1], temperature, top_k, top_p)",
     _generate_mistake("options_dropped")),
    ("the newest token is fed as ids[:, -1], (B,), without its sequence axis: forward_cached takes (B, T_new) ids, "
     "so feed ids[:, -1:], (B, 1)", _generate_mistake("newest_without_axis")),
    # Named by the tokens returned (the stand-in's values show its calls and mode), not by its record.
    ("use_cache is ignored: with use_cache, run the prompt once through model.forward_cached(prompt, cache), "
     "cache = [None] * len(model.layers), then only the newest token, ids[:, -1:], with the same cache",
     _generate_mistake("cache_ignored")),
    (FIXTURE_HINTS["lm_grad_enabled"], _generate_mistake("gradients")),
    (FIXTURE_HINTS["lm_ran_in_training_mode"], _generate_mistake("training_mode")),
]

TOO_LONG_HINT = ("with use_cache, T_prompt + max_new_tokens > model.max_len must raise ValueError before any token "
                 "is generated (the cache cannot slide: positions stop at max_len)")

GENERATE_REQUIREMENTS = (
    Requirement("sampling", "returns (B, T_prompt + max_new_tokens), the prompt first; each new token is "
                            "torch.multinomial(next_token_probs(the last position's logits), 1, generator=generator)",
                2),
    Requirement("options", "passes temperature, top_k and top_p on to next_token_probs"),
    Requirement("cache", "with use_cache, runs the prompt once through model.forward_cached, then only the newest "
                         "token, with the same cache"),
    Requirement("no-cache", "without use_cache, each step runs model(ids[:, -max_len:]): the same tokens, and a "
                            "window that slides past max_len"),
    Requirement("too-long", "with use_cache, T_prompt + max_new_tokens > max_len raises ValueError before any token "
                            "is generated"),
    Requirement("mode", "runs without gradients in eval mode, and leaves the model in the mode it found it"),
)


def generate_public_probes():
    return [
        *requiring("sampling", [
            _generate_probe("basic", "batch 2, a prompt of 3 tokens, 4 new ones", 2, 3, 4, 10, seed=1),
            _generate_probe("one-new", "one new token", 3, 2, 1, 10, seed=2),
        ]),
        *requiring("options", [
            _generate_probe("options", "temperature=0.7, top_k=4, top_p=0.9", 2, 3, 5, 10, seed=3, temperature=0.7,
                            top_k=4, top_p=0.9),
        ]),
        *requiring("cache", [
            _generate_probe("cache", "use_cache=True, the prompt and the new tokens fill max_len=8 exactly", 2, 3, 5,
                            8, seed=4, records=CALL_RECORDS),
        ]),
        *requiring("no-cache", [
            _generate_probe("no-cache", "use_cache=False", 2, 3, 4, 10, seed=5, records=CALL_RECORDS,
                            use_cache=False),
            _generate_probe("window", "use_cache=False, 5 + 6 tokens with max_len=8: the window slides", 2, 5, 6, 8,
                            seed=6, records=CALL_RECORDS, use_cache=False),
        ]),
        *requiring("too-long", [
            _generate_probe("too-long", "use_cache=True, 4 + 5 tokens with max_len=8", 2, 4, 5, 8, seed=7,
                            hint=TOO_LONG_HINT),
        ]),
        *requiring("mode", [
            _generate_probe("training-mode", "a model given in training mode", 2, 3, 3, 10, seed=8, training=True,
                            records=MODE_RECORDS),
            _generate_probe("eval-mode", "a model given in eval mode", 2, 3, 3, 10, seed=9, records=MODE_RECORDS),
        ]),
    ]


def generate_hidden_probes(devices=("cpu",)):
    return generate_public_probes() + [
        *requiring("sampling", [
            _generate_probe("long", "batch 3, a prompt of 1 token, 8 new ones", 3, 1, 8, 12, seed=10),
            _generate_probe("one-row", "a single row, a prompt of 5 tokens", 1, 5, 4, 12, seed=11),
        ]),
        *requiring("options", [
            _generate_probe("options-2", "temperature=1.6, top_k=3", 3, 2, 5, 10, seed=12, temperature=1.6, top_k=3),
            _generate_probe("options-3", "temperature=0.5, top_p=0.6", 2, 2, 5, 10, seed=13, temperature=0.5,
                            top_p=0.6),
        ]),
        *requiring("cache", [
            _generate_probe("cache-2", "use_cache=True, 1 + 6 tokens, max_len=12", 3, 1, 6, 12, seed=14,
                            records=CALL_RECORDS),
        ]),
        *requiring("no-cache", [
            _generate_probe("no-cache-2", "use_cache=False, a single row", 1, 4, 5, 12, seed=15, records=CALL_RECORDS,
                            use_cache=False),
            _generate_probe("window-2", "use_cache=False, 3 + 9 tokens with max_len=6", 2, 3, 9, 6, seed=16,
                            records=CALL_RECORDS, use_cache=False),
        ]),
        *requiring("too-long", [
            _generate_probe("too-long-2", "use_cache=True, 2 + 9 tokens with max_len=10", 1, 2, 9, 10, seed=17,
                            hint=TOO_LONG_HINT),
        ]),
        *requiring("mode", [
            _generate_probe("training-mode-2", "3 rows, a model given in training mode", 3, 2, 4, 10, seed=18,
                            training=True, records=MODE_RECORDS),
            _generate_probe("eval-mode-2", "a model given in eval mode, one row", 1, 2, 4, 10, seed=19,
                            records=MODE_RECORDS),
        ]),
    ]


# ----------------------------------------------------------------------------- perplexity
def _perplexity(model, ids, block_size, batch_size=64, variant=None):
    x, y = make_lm_examples(ids, block_size)
    if variant not in ("training_mode", "training_mode_gradients"):
        model.eval()
    with torch.set_grad_enabled(variant in ("gradients", "training_mode_gradients")):
        losses = []
        for start in range(0, x.size(0), batch_size):
            logits = model(x[start : start + batch_size])
            if variant == "unflattened":  # (b, T, V) logits: cross_entropy takes axis 1, T, as the classes
                losses.append(F.cross_entropy(logits, y[start : start + batch_size], reduction="sum"))
            else:
                losses.append(F.cross_entropy(logits.flatten(0, 1), y[start : start + batch_size].flatten(),
                                              reduction="mean" if variant == "batch_means" else "sum"))
    total = torch.stack(losses)
    if variant == "batch_means":
        return math.exp(total.mean().item())
    if variant == "exp_of_sum":
        return math.exp(total.sum().item())
    if variant == "no_exp":
        return total.sum().item() / y.numel()
    if variant == "tensor":
        return torch.exp(total.sum() / y.numel())
    if variant in ("per_window", "per_id"):
        return math.exp(total.sum().item() / (x.size(0) if variant == "per_window" else ids.numel()))
    return math.exp(total.sum().item() / y.numel())  # right but for the mode


def _perplexity_mistake(variant):
    def wrong(model, ids, block_size, batch_size=64):
        return _perplexity(model, ids, block_size, batch_size, variant)

    wrong.__name__ = f"perplexity_{variant}"
    return wrong


PER_TOKEN_HINT = ("the summed cross-entropy is divided by another count than the targets': the mean is over every "
                  "predicted token, total / y.numel() (n windows of block_size targets each)")

PERPLEXITY_MISTAKES = [
    ("exp is taken of the summed cross-entropy: the perplexity is exp of the mean over every predicted token, "
     "math.exp(total / y.numel())", _perplexity_mistake("exp_of_sum")),
    ("the mean cross-entropy is returned without exp: the perplexity is math.exp(mean)", _perplexity_mistake("no_exp")),
    ("the batches' means are averaged: a last, smaller batch counts as much as a full one; sum the losses "
     "(reduction='sum') and divide by the number of tokens", _perplexity_mistake("batch_means")),
    ("returns a tensor: the perplexity is a Python float (math.exp(...), or .item())", _perplexity_mistake("tensor")),
    (PER_TOKEN_HINT, _perplexity_mistake("per_window")),
    (PER_TOKEN_HINT, _perplexity_mistake("per_id")),
    ("F.cross_entropy takes (N, V) logits and (N,) targets (or the classes on axis 1): flatten the windows' "
     "positions into one axis first, logits.flatten(0, 1) and targets.flatten()", _perplexity_mistake("unflattened")),
    # Named by the value returned (the stand-in's logits show the mode), not by its record.
    (FIXTURE_HINTS["lm_grad_enabled"], _perplexity_mistake("gradients")),
    (FIXTURE_HINTS["lm_ran_in_training_mode"], _perplexity_mistake("training_mode")),
    ("runs the model in training mode with gradients on: call model.eval() and do the work inside torch.no_grad(), "
     "then restore the mode the model was in", _perplexity_mistake("training_mode_gradients")),
]


def _perplexity_probe(id, title, N, block_size, max_len, seed, records=(), training=False, **kwargs):
    ids = _tokens(N, vocab=LM_VOCAB, seed=seed + 100)
    return function_probe(id, title, (_model(max_len, seed, training, records), ids, block_size), kwargs, ("perplexity",),
                          records=list(records))


PERPLEXITY_REQUIREMENTS = (
    Requirement("value", "returns exp of the mean next-token cross-entropy over make_lm_examples(ids, block_size), "
                         "a Python float", 2),
    Requirement("batches", "any batch_size gives the same value: the mean over every predicted token"),
    Requirement("mode", "runs without gradients in eval mode, and leaves the model in the mode it found it"),
)


def perplexity_public_probes():
    return [
        *requiring("value", [_perplexity_probe("basic", "41 tokens, block_size=8 (5 windows)", 41, 8, 8, seed=1)]),
        *requiring("batches", [_perplexity_probe("batches", "5 windows in batches of 2 (the last has 1)", 41, 8, 8,
                                                 seed=2, batch_size=2)]),
        *requiring("mode", [
            _perplexity_probe("training-mode", "a model given in training mode", 25, 6, 6, seed=3, training=True,
                              records=MODE_RECORDS),
            _perplexity_probe("eval-mode", "a model given in eval mode", 25, 6, 6, seed=4, records=MODE_RECORDS),
        ]),
    ]


def perplexity_hidden_probes(devices=("cpu",)):
    return perplexity_public_probes() + [
        *requiring("value", [
            _perplexity_probe("long", "100 tokens, block_size=10", 100, 10, 10, seed=10),
            _perplexity_probe("one-window", "one window", 9, 8, 8, seed=11),
        ]),
        *requiring("batches", [
            _perplexity_probe("batches-3", "7 windows in batches of 3", 50, 7, 8, seed=12, batch_size=3),
        ]),
        *requiring("mode", [
            _perplexity_probe("training-mode-2", "a model given in training mode, 60 tokens", 60, 5, 5, seed=13,
                              training=True, records=MODE_RECORDS),
            _perplexity_probe("eval-mode-2", "a model given in eval mode, 60 tokens", 60, 5, 5, seed=14,
                              records=MODE_RECORDS),
        ]),
    ]


EXERCISES = [
    ExerciseChecks("make_lm_examples", make_lm_examples, make_lm_examples_public_probes, make_lm_examples_hidden_probes,
                   MAKE_LM_EXAMPLES_MISTAKES, requirements=MAKE_LM_EXAMPLES_REQUIREMENTS),
    ExerciseChecks("DecoderOnlyLM", DecoderOnlyLM, decoder_only_lm_public_probes, decoder_only_lm_hidden_probes,
                   DECODER_ONLY_LM_MISTAKES, requirements=DECODER_ONLY_LM_REQUIREMENTS),
    ExerciseChecks("cached_self_attention", cached_self_attention, cached_self_attention_public_probes,
                   cached_self_attention_hidden_probes, CACHED_SELF_ATTENTION_MISTAKES,
                   requirements=CACHED_SELF_ATTENTION_REQUIREMENTS),
    ExerciseChecks("next_token_probs", next_token_probs, next_token_probs_public_probes,
                   next_token_probs_hidden_probes, NEXT_TOKEN_PROBS_MISTAKES, requirements=NEXT_TOKEN_PROBS_REQUIREMENTS),
    ExerciseChecks("generate", generate, generate_public_probes, generate_hidden_probes, GENERATE_MISTAKES,
                   requirements=GENERATE_REQUIREMENTS),
    ExerciseChecks("perplexity", perplexity, perplexity_public_probes, perplexity_hidden_probes, PERPLEXITY_MISTAKES,
                   requirements=PERPLEXITY_REQUIREMENTS),
]
