"""Lesson 05 checks: causal_mask, padding_mask, DecoderLayer and Decoder.

Weights come from the reference, perturbed so that no LayerNorm is the identity. Public
probes are small; hidden probes add L != S, both padding masks, pre-norm, GELU, float64,
gradients through the memory, non-contiguous inputs and the input's device. Here, unlike in
lessons 01-04, a query whose keys are all blocked is part of the contract: a memory row that is
all padding must give a finite output (zero attention), never NaN. The "no leakage" probes put
two target rows in one batch that differ only from position k on: the outputs before k must
agree (properties.future_stays_hidden says so without the reference).
"""

import math

import torch

from ...reference import Decoder, DecoderLayer, causal_mask, padding_mask
from .probes import ExerciseChecks, additive, function_probe, module_probe, on_device, randn, with_gradients

D_MODEL, HEADS, D_FF = 8, 2, 16


def _variant(base, variant):
    """A subclass of a reference module whose forward takes the wrong turn named ``variant``."""
    return type(f"{base.__name__}_{variant}", (base,), {"variant": variant})


def _padding(lengths, T):
    """(B, T) key padding mask, True from each row's length on (a length of 0 blocks the whole row)."""
    return torch.arange(T)[None, :] >= torch.tensor(lengths)[:, None]  # (B, T)


# ----------------------------------------------------------------------------- mistakes
def _diagonal_blocked(T, device=None):
    return torch.ones(T, T, dtype=torch.bool, device=device).triu(0)


def _keep_mask(T, device=None):
    return torch.ones(T, T, dtype=torch.bool, device=device).tril()


def _past_blocked(T, device=None):
    return torch.ones(T, T, dtype=torch.bool, device=device).tril(-1)


def _additive_causal(T, device=None):
    return torch.full((T, T), float("-inf"), device=device).triu(1)


# Any other mask that is not boolean (ints, 1.0/0.0) is named by properties.boolean_mask.
CAUSAL_MASK_MISTAKES = [
    ("the diagonal is blocked too: a position may attend to itself; True only above the diagonal, "
     "triu(diagonal=1)", _diagonal_blocked),
    ("the mask marks what may be attended (True on and below the diagonal); in this course True means BLOCKED: "
     "True above the diagonal", _keep_mask),
    ("the mask blocks the past (True below the diagonal); it must block the future: True above the diagonal",
     _past_blocked),
    ("the mask is a float mask (-inf above the diagonal); return a boolean mask, dtype=torch.bool, True = blocked",
     _additive_causal),
]


def _padding_inverted(tokens, pad_id):
    return tokens != pad_id


def _padding_against_zero(tokens, pad_id):
    return tokens == 0


# A mask of ints or floats is named by properties.boolean_mask.
PADDING_MASK_MISTAKES = [
    ("the mask is the wrong way round: True marks the PADDING (tokens == pad_id), the positions to block",
     _padding_inverted),
    ("the tokens are compared with 0, not with pad_id", _padding_against_zero),
]


def _nan_attention(attention, query, key, key_padding_mask=None, attn_mask=None):
    """Multi-head attention as students first write it: a plain softmax, NaN on fully blocked rows."""
    B, L, C = query.shape
    H = attention.num_heads
    q = attention.q_proj(query).view(B, L, H, C // H).transpose(1, 2)  # (B, H, L, D)
    k = attention.k_proj(key).view(B, -1, H, C // H).transpose(1, 2)  # (B, H, S, D)
    v = attention.v_proj(key).view(B, -1, H, C // H).transpose(1, 2)  # (B, H, S, D)
    scores = q @ k.transpose(-2, -1) / math.sqrt(C // H)  # (B, H, L, S)
    if attn_mask is not None:
        scores = scores.masked_fill(attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else scores + attn_mask
    if key_padding_mask is not None:
        scores = scores.masked_fill(key_padding_mask[:, None, None, :], float("-inf"))
    out = torch.softmax(scores, dim=-1) @ v  # (B, H, L, D)
    return attention.out_proj(out.transpose(1, 2).reshape(B, L, C))  # (B, L, C)


class _DecoderLayerMistake(DecoderLayer):
    variant = None

    def forward(self, x, memory, tgt_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        v = self.variant
        if v == "tgt_mask_dropped":
            tgt_mask = None
        if v == "tgt_padding_dropped":
            tgt_key_padding_mask = None
        if v == "memory_padding_dropped":
            memory_key_padding_mask = None
        if v == "padding_masks_swapped":
            tgt_key_padding_mask, memory_key_padding_mask = memory_key_padding_mask, tgt_key_padding_mask

        def attend(h):
            return self._self_attention(h, tgt_mask, tgt_key_padding_mask)

        def cross(h):
            if v == "memory_as_query":
                return self.cross_attn(memory, h, h, key_padding_mask=memory_key_padding_mask, need_weights=False)[0]
            if v == "plain_softmax":
                return _nan_attention(self.cross_attn, h, memory, memory_key_padding_mask)
            return self._cross_attention(h, memory, memory_key_padding_mask)

        norm1, norm2, norm3 = self.norm1, self.norm2, self.norm3
        if v == "norms_shuffled":
            norm1, norm2, norm3 = self.norm1, self.norm3, self.norm2
        pre_norm = self.norm_first if v != "norm_first_ignored" else False
        if v == "norm_first_inverted":
            pre_norm = not self.norm_first
        if pre_norm:
            x = x + attend(norm1(x))
            if v != "no_cross_attention":
                x = x + cross(norm2(x))
            return x + self.ff(norm3(x))
        x = norm1(x + attend(x))
        if v != "no_cross_attention":
            x = norm2(x + cross(x))
        return norm3(x + self.ff(x))


DECODER_LAYER_MISTAKES = [
    ("tgt_mask is not passed to self-attention: without the causal mask every position sees the future",
     _variant(_DecoderLayerMistake, "tgt_mask_dropped")),
    ("cross-attention takes its queries from memory; the queries come from the decoder (x), the keys and values "
     "from memory: cross_attn(x, memory, memory)", _variant(_DecoderLayerMistake, "memory_as_query")),
    ("the padding masks are swapped: tgt_key_padding_mask belongs to self-attention, memory_key_padding_mask to "
     "cross-attention", _variant(_DecoderLayerMistake, "padding_masks_swapped")),
    ("memory_key_padding_mask is not passed to cross-attention: the decoder attends to the source's padding",
     _variant(_DecoderLayerMistake, "memory_padding_dropped")),
    ("tgt_key_padding_mask is not passed to self-attention", _variant(_DecoderLayerMistake, "tgt_padding_dropped")),
    ("norm_first is ignored: with norm_first=True each sublayer sees the normalized input, x + sublayer(norm(x))",
     _variant(_DecoderLayerMistake, "norm_first_ignored")),
    ("pre-norm and post-norm are swapped: norm_first=False (the paper's post-norm) is norm(x + sublayer(x))",
     _variant(_DecoderLayerMistake, "norm_first_inverted")),
    ("the LayerNorms are used in the wrong order: norm1 goes with self-attention, norm2 with cross-attention, "
     "norm3 with the feed-forward sublayer", _variant(_DecoderLayerMistake, "norms_shuffled")),
    ("the cross-attention sublayer is missing: after self-attention the decoder attends to memory",
     _variant(_DecoderLayerMistake, "no_cross_attention")),
    ("a query whose keys are all padding gets NaN: a softmax over keys that are all -inf is 0/0. Give such rows "
     "zero weights (and a zero attention output)", _variant(_DecoderLayerMistake, "plain_softmax")),
]


class _DecoderMistake(Decoder):
    variant = None

    def forward(self, x, memory, tgt_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        v = self.variant
        layers = [self.layers[0]] * len(self.layers) if v == "first_layer_reused" else self.layers
        if v == "tgt_mask_dropped":
            tgt_mask = None
        if v == "memory_padding_dropped":
            memory_key_padding_mask = None
        out = x
        for layer in layers:
            out = layer(x if v == "not_chained" else out, memory, tgt_mask, tgt_key_padding_mask,
                        memory_key_padding_mask)  # (B, T, C)
            if v == "norm_every_layer" and self.norm is not None:
                out = self.norm(out)
        if self.norm is None or v in ("no_final_norm", "norm_every_layer"):
            return out
        return self.norm(out)


DECODER_MISTAKES = [
    ("the final LayerNorm of a pre-norm stack is missing: return self.norm(x) when self.norm is not None",
     _variant(_DecoderMistake, "no_final_norm")),
    ("the final LayerNorm is applied after every layer; apply it once, after the last layer",
     _variant(_DecoderMistake, "norm_every_layer")),
    ("tgt_mask is not passed on to the layers: without the causal mask every position sees the future",
     _variant(_DecoderMistake, "tgt_mask_dropped")),
    ("memory_key_padding_mask is not passed on to the layers", _variant(_DecoderMistake, "memory_padding_dropped")),
    ("the first layer is used for every step: loop over self.layers, each layer has its own weights",
     _variant(_DecoderMistake, "first_layer_reused")),
    ("every layer gets the decoder's input: feed each layer's output to the next layer",
     _variant(_DecoderMistake, "not_chained")),
]


# ----------------------------------------------------------------------------- probes
def _causal_probe(id, title, T, **kwargs):
    return function_probe(id, title, (T,), kwargs, ("mask",))


def causal_mask_public_probes():
    return [_causal_probe("four", "T=4", 4), _causal_probe("device-cpu", "T=6, device='cpu' given", 6, device="cpu")]


def causal_mask_hidden_probes(devices=("cpu",)):
    probes = [
        _causal_probe("one", "T=1: a single position sees itself", 1),
        _causal_probe("seven", "T=7", 7),
    ]
    for device in devices:
        if device != "cpu":
            probes.append(on_device(_causal_probe("device", "T=5, device given", 5, device=device), device))
    return causal_mask_public_probes() + probes


def _padding_probe(id, title, tokens, pad_id):
    return function_probe(id, title, (tokens, pad_id), None, ("mask",))


def padding_mask_public_probes():
    tokens = torch.tensor([[5, 7, 2, 0, 0], [3, 4, 0, 0, 0]])
    return [
        _padding_probe("pad-zero", "batch 2, padded with pad_id=0", tokens, 0),
        _padding_probe("pad-three", "pad_id=3, with 0 an ordinary token", torch.tensor([[0, 4, 3, 3], [1, 0, 2, 3]]), 3),
    ]


def padding_mask_hidden_probes(devices=("cpu",)):
    generator = torch.Generator().manual_seed(5)
    tokens = torch.randint(0, 6, (3, 7), generator=generator)
    probes = [
        _padding_probe("random", "random tokens, pad_id=2", tokens, 2),
        _padding_probe("no-padding", "no padding at all", torch.tensor([[1, 2, 3]]), 0),
        _padding_probe("int32", "int32 tokens", torch.tensor([[6, 0, 0], [6, 6, 0]], dtype=torch.int32), 0),
    ]
    for device in devices:
        if device != "cpu":
            probes.append(on_device(_padding_probe("device", "pad_id=0", torch.tensor([[4, 0], [0, 0]]), 0), device))
    return padding_mask_public_probes() + probes


def _decoder_inputs(B, L, S, d_model, seed, dtype, future_from=None):
    """x (B, L, C) and memory (B, S, C); with future_from=k, row 1 repeats row 0 except at positions >= k."""
    x = randn(B, L, d_model, seed=seed + 100, dtype=dtype)
    memory = randn(B, S, d_model, seed=seed + 200, dtype=dtype)
    if future_from is not None:
        x[1, :future_from] = x[0, :future_from]
        memory[1] = memory[0]
    return x, memory


def _decoder_kwargs(L, S, causal, tgt_lengths, memory_lengths):
    kwargs = {}
    if causal is True:
        kwargs["tgt_mask"] = causal_mask(L)
    elif causal is not None:
        kwargs["tgt_mask"] = causal
    if tgt_lengths is not None:
        kwargs["tgt_key_padding_mask"] = _padding(tgt_lengths, L)
    if memory_lengths is not None:
        kwargs["memory_key_padding_mask"] = _padding(memory_lengths, S)
    return kwargs


def _stack_probe(module_class, init_args, id, title, B, L, S, d_model, norm_first, activation, causal, tgt_lengths,
                 memory_lengths, future_from, seed, dtype, extra):
    x, memory = _decoder_inputs(B, L, S, d_model, seed, dtype, future_from)
    kwargs = _decoder_kwargs(L, S, causal, tgt_lengths, memory_lengths)
    if future_from is not None:
        extra = dict(extra, same_prefix={"rows": [0, 1], "length": future_from})
    return module_probe(id, title, module_class, init_args, {"norm_first": norm_first, "activation": activation},
                        (x, memory), kwargs, seed=seed, dtype=dtype, output_names=("output",), **extra)


def _decoder_layer_probe(id, title, B, L, S, d_model=D_MODEL, heads=HEADS, d_ff=D_FF, norm_first=False,
                         activation="relu", causal=True, tgt_lengths=None, memory_lengths=None, future_from=None,
                         seed=0, dtype="float32", **extra):
    return _stack_probe(DecoderLayer, (d_model, heads, d_ff), id, title, B, L, S, d_model, norm_first, activation,
                        causal, tgt_lengths, memory_lengths, future_from, seed, dtype, extra)


def _fully_padded_memory_probe(id, norm_first, seed):
    return _decoder_layer_probe(id, "the second row's memory is all padding: its cross-attention attends to nothing "
                                "(zero output, never NaN)", 2, 3, 4, norm_first=norm_first, memory_lengths=[4, 0],
                                seed=seed)


def decoder_layer_public_probes():
    return [
        _decoder_layer_probe("post-norm", "post-norm, causal tgt_mask, batch 2, 4 targets, 4 memory positions", 2, 4, 4,
                             seed=1),
        _decoder_layer_probe("memory-padding", "3 targets, 5 memory positions, a memory padding mask", 2, 3, 5,
                             memory_lengths=[5, 2], seed=2),
        _decoder_layer_probe("pre-norm", "pre-norm with both padding masks", 2, 4, 4, norm_first=True,
                             tgt_lengths=[4, 3], memory_lengths=[2, 4], seed=3),
        _decoder_layer_probe("no-leakage", "two targets that differ only from position 2 on", 2, 5, 3, future_from=2,
                             seed=4),
        _fully_padded_memory_probe("fully-padded-memory", False, 5),
    ]


def decoder_layer_hidden_probes(devices=("cpu",)):
    probes = [
        _decoder_layer_probe("tgt-padding", "a target padding mask", 2, 5, 5, tgt_lengths=[5, 2], seed=10),
        _decoder_layer_probe("both-paddings", "both padding masks, 5 targets, 5 memory positions", 3, 5, 5,
                             tgt_lengths=[5, 3, 4], memory_lengths=[2, 5, 3], seed=11),
        _decoder_layer_probe("long-memory", "4 targets, 9 memory positions, pre-norm", 2, 4, 9, norm_first=True,
                             memory_lengths=[9, 6], seed=12),
        _decoder_layer_probe("gelu", "post-norm, GELU", 2, 4, 3, activation="gelu", seed=13),
        _decoder_layer_probe("gelu-pre", "pre-norm, GELU", 2, 4, 3, norm_first=True, activation="gelu", seed=14),
        _decoder_layer_probe("no-tgt-mask", "no tgt_mask: masks are never inferred", 2, 4, 4, causal=None, seed=15),
        _decoder_layer_probe("float-mask", "a float tgt_mask (-inf above the diagonal)", 2, 4, 4,
                             causal=additive(causal_mask(4)), seed=16),
        _decoder_layer_probe("float64", "float64, d_model=16, 4 heads, both padding masks", 2, 5, 6, 16, 4, 32,
                             tgt_lengths=[5, 4], memory_lengths=[6, 3], seed=17, dtype="float64"),
        _decoder_layer_probe("one-head", "a single head", 2, 3, 4, heads=1, memory_lengths=[4, 1], seed=18),
        _decoder_layer_probe("many-heads", "8 heads of size 2, pre-norm", 2, 3, 4, 16, 8, 32, norm_first=True, seed=19),
        _decoder_layer_probe("one-target", "a single target position", 2, 1, 4, seed=20),
        _decoder_layer_probe("no-leakage-pre", "pre-norm, two targets that differ only from position 3 on", 2, 6, 4,
                             norm_first=True, future_from=3, seed=21),
        _decoder_layer_probe("noncontiguous", "non-contiguous inputs", 2, 5, 5, memory_lengths=[5, 3], seed=22,
                             noncontiguous=True),
        _fully_padded_memory_probe("fully-padded-memory-pre", True, 24),
    ]
    probes.append(with_gradients(_decoder_layer_probe("grad", "post-norm, gradients through x and memory", 2, 4, 5,
                                                      memory_lengths=[5, 3], seed=25), DecoderLayer, seed=26))
    probes.append(with_gradients(_decoder_layer_probe("grad-pre", "pre-norm, float64", 2, 4, 3, norm_first=True,
                                                      tgt_lengths=[4, 2], seed=27, dtype="float64"),
                                 DecoderLayer, seed=28))
    probes.append(with_gradients(_fully_padded_memory_probe("grad-fully-padded", False, 29), DecoderLayer, seed=30))
    for device in devices:
        if device != "cpu":
            probes.append(on_device(_decoder_layer_probe("device", "pre-norm with both padding masks", 2, 4, 3,
                                                         norm_first=True, tgt_lengths=[4, 2], memory_lengths=[3, 1],
                                                         seed=31), device))
    return decoder_layer_public_probes() + probes


def _decoder_probe(id, title, B, L, S, num_layers=2, d_model=D_MODEL, heads=HEADS, d_ff=D_FF, norm_first=False,
                   activation="relu", causal=True, tgt_lengths=None, memory_lengths=None, future_from=None, seed=0,
                   dtype="float32", **extra):
    return _stack_probe(Decoder, (num_layers, d_model, heads, d_ff), id, title, B, L, S, d_model, norm_first,
                        activation, causal, tgt_lengths, memory_lengths, future_from, seed, dtype, extra)


def decoder_public_probes():
    return [
        _decoder_probe("post-norm", "2 post-norm layers (no final norm), causal tgt_mask, 4 targets, 5 memory positions",
                       2, 4, 5, seed=1),
        _decoder_probe("pre-norm", "2 pre-norm layers and the final norm, a memory padding mask", 2, 4, 5,
                       norm_first=True, memory_lengths=[3, 5], seed=2),
        _decoder_probe("no-leakage", "two targets that differ only from position 2 on", 2, 4, 3, future_from=2, seed=3),
    ]


def decoder_hidden_probes(devices=("cpu",)):
    probes = [
        _decoder_probe("one-layer", "a single post-norm layer", 2, 3, 4, num_layers=1, seed=10),
        _decoder_probe("one-layer-pre", "a single pre-norm layer and the final norm", 2, 3, 4, num_layers=1,
                       norm_first=True, seed=11),
        _decoder_probe("three-layers", "3 post-norm layers, both padding masks", 3, 5, 4, num_layers=3,
                       tgt_lengths=[5, 2, 4], memory_lengths=[4, 4, 1], seed=12),
        _decoder_probe("three-layers-pre", "3 pre-norm layers, both padding masks, GELU", 2, 5, 6, num_layers=3,
                       norm_first=True, activation="gelu", tgt_lengths=[3, 5], memory_lengths=[6, 2], seed=13),
        _decoder_probe("no-leakage-pre", "pre-norm, two targets that differ only from position 1 on", 2, 4, 4,
                       norm_first=True, future_from=1, seed=14),
        _decoder_probe("fully-padded-memory", "the second row's memory is all padding (zero attention, never NaN)",
                       2, 3, 4, norm_first=True, memory_lengths=[4, 0], seed=15),
        _decoder_probe("float64", "float64, d_model=16, 4 heads", 2, 4, 5, 2, 16, 4, 32, memory_lengths=[5, 2], seed=16,
                       dtype="float64"),
        _decoder_probe("noncontiguous", "non-contiguous inputs", 2, 5, 5, norm_first=True, tgt_lengths=[5, 4], seed=17,
                       noncontiguous=True),
    ]
    probes.append(with_gradients(_decoder_probe("grad", "2 pre-norm layers, gradients through x and memory", 2, 4, 3,
                                                norm_first=True, memory_lengths=[3, 2], seed=18), Decoder, seed=19))
    probes.append(with_gradients(_decoder_probe("grad-post", "2 post-norm layers, float64", 2, 3, 4, seed=20,
                                                dtype="float64"), Decoder, seed=21))
    for device in devices:
        if device != "cpu":
            probes.append(on_device(_decoder_probe("device", "2 pre-norm layers with padding", 2, 4, 3, norm_first=True,
                                                   memory_lengths=[3, 1], seed=22), device))
    return decoder_public_probes() + probes


EXERCISES = [
    ExerciseChecks("causal_mask", causal_mask, causal_mask_public_probes, causal_mask_hidden_probes,
                   CAUSAL_MASK_MISTAKES),
    ExerciseChecks("padding_mask", padding_mask, padding_mask_public_probes, padding_mask_hidden_probes,
                   PADDING_MASK_MISTAKES),
    ExerciseChecks("DecoderLayer", DecoderLayer, decoder_layer_public_probes, decoder_layer_hidden_probes,
                   DECODER_LAYER_MISTAKES),
    ExerciseChecks("Decoder", Decoder, decoder_public_probes, decoder_hidden_probes, DECODER_MISTAKES),
]
