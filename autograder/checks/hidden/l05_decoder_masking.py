"""Lesson 05 checks: causal_mask, padding_mask, DecoderLayer and Decoder.

Each exercise's checks are grouped into the requirements its text states, the core first. A
probe varies only what its requirement is about; everything else is the plain case (post-norm,
no mask, float32, eval mode, the CPU); the hidden probes try the same requirements on other
sizes, seeds and values. Weights come from the reference, perturbed so that no LayerNorm is the
identity. Here, unlike in lessons 01-04, a query whose keys are all blocked is part of the
contract: a memory row that is all padding must give a finite output (zero attention), never
NaN. The "no leakage" probes put two target rows in one batch that differ only from position k
on: the outputs before k must agree (properties.future_stays_hidden says so without the
reference). Target and memory lengths differ in every masked probe, so that a mask given to the
wrong attention raises, and the known mistake that raises the same error is named.

Dropout is probed with dropout=1.0 in both modes: in eval mode dropout is off; in training mode
every dropped value is zero, which shows where dropout sits. Both are deterministic.
"""

import math

import torch
import torch.nn.functional as F

from ...reference import Decoder, DecoderLayer, causal_mask, padding_mask
from .kinds import activation_not_passed, layers_shared, sublayer_reused
from .probes import (ExerciseChecks, Requirement, additive, function_probe, module_probe, on_device, randn,
                     requiring, with_gradients)

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


def _ignores_device():
    def causal_mask(T, device=None):
        return torch.ones(T, T, dtype=torch.bool).triu(1)  # on the CPU, whatever device says

    return causal_mask


def _no_device_argument():
    def causal_mask(T):
        return torch.ones(T, T, dtype=torch.bool).triu(1)

    causal_mask.__qualname__ = "causal_mask"  # so that a call with device= raises the student's very TypeError
    return causal_mask


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
    ("the mask is made on the CPU whatever `device` says: create it with device=device "
     "(torch.ones(T, T, dtype=torch.bool, device=device))", _ignores_device()),
    ("causal_mask has no `device` argument: keep the signature causal_mask(T, device=None) and create the mask "
     "on that device", _no_device_argument()),
]


def _padding_inverted(tokens, pad_id):
    return tokens != pad_id


def _padding_against_zero(tokens, pad_id):
    return tokens == 0


def _padding_on_cpu(tokens, pad_id):
    return (tokens == pad_id).cpu()


# A mask of ints or floats is named by properties.boolean_mask.
PADDING_MASK_MISTAKES = [
    ("the mask is the wrong way round: True marks the PADDING (tokens == pad_id), the positions to block",
     _padding_inverted),
    ("the tokens are compared with 0, not with pad_id", _padding_against_zero),
    ("the mask is made or moved on the CPU (.cpu(), .tolist(), torch.tensor(...)): compare on the tokens' device, "
     "tokens == pad_id, and leave the mask there", _padding_on_cpu),
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
        if v == "infers_causal_mask" and tgt_mask is None:
            tgt_mask = causal_mask(x.size(1), device=x.device)
        drop = (lambda t: F.dropout(t, self.dropout.p)) if v == "dropout_in_eval" else self.dropout
        layer_input = x

        def attend(h):
            attention = self.cross_attn if v == "self_uses_cross_attn" else self.self_attn
            out, _ = attention(h, h, h, key_padding_mask=tgt_key_padding_mask, attn_mask=tgt_mask, need_weights=False)
            return out if v in ("no_self_dropout", "no_dropout") else drop(out)  # (B, T, C)

        def cross(h):
            keys = self.norm2(memory) if v == "memory_normalized" else memory
            if v == "cross_reads_x":
                keys = h
            if v == "cross_gets_layer_input":
                h = layer_input
            if v == "memory_as_query":
                out, _ = self.cross_attn(keys, h, h, key_padding_mask=memory_key_padding_mask, need_weights=False)
            elif v == "plain_softmax":
                out = _nan_attention(self.cross_attn, h, keys, memory_key_padding_mask)
            else:
                attention = self.self_attn if v == "cross_uses_self_attn" else self.cross_attn
                out, _ = attention(h, keys, keys, key_padding_mask=memory_key_padding_mask,
                                   attn_mask=tgt_mask if v == "tgt_mask_in_cross" else None, need_weights=False)
            return out if v in ("no_cross_dropout", "no_dropout") else drop(out)  # (B, T, C)

        def feed(h):
            out = self.ff(h)
            return out if v in ("no_ff_dropout", "no_dropout") else drop(out)  # (B, T, C)

        norms = {"norms_2_3_swapped": (self.norm1, self.norm3, self.norm2),
                 "norms_1_2_swapped": (self.norm2, self.norm1, self.norm3),
                 "norm1_everywhere": (self.norm1, self.norm1, self.norm1)}.get(v, (self.norm1, self.norm2, self.norm3))
        sublayers = [attend, cross, feed]
        if v == "no_cross_attention":
            sublayers = [attend, feed]
            norms = (norms[0], norms[2])
        if v == "cross_attention_first":
            sublayers = [cross, attend, feed]
        residual = {"no_residual": (False, False, False), "no_self_residual": (False, True, True),
                    "no_cross_residual": (True, False, True), "no_ff_residual": (True, True, False)}.get(v, (True,) * 3)
        pre_norm = {"norm_first_ignored": False, "norm_first_inverted": not self.norm_first}.get(v, self.norm_first)
        for sublayer, norm, keep in zip(sublayers, norms, residual):
            if v == "dropout_on_sum":
                x = self.dropout(x + sublayer(norm(x))) if pre_norm else norm(self.dropout(x + sublayer(x)))
            elif pre_norm:
                h = norm(x)
                out = sublayer(h)
                base = h if v == "residual_of_normalized" else x
                x = base + out if keep else out
            else:
                out = sublayer(x)
                x = norm(x + out if keep else out)
        return x  # (B, T, C)


class _DecoderLayerWithoutActivation(DecoderLayer):
    """The given __init__ edited to build the feed-forward network without `activation`: always ReLU."""

    def __init__(self, d_model, num_heads, d_ff, dropout=0.0, norm_first=False, activation="relu"):
        super().__init__(d_model, num_heads, d_ff, dropout, norm_first)


LAYER_ACTIVATION_HINT = activation_not_passed("the feed-forward network, PositionwiseFeedForward(d_model, d_ff, "
                                              "dropout, activation)")

RESIDUAL_HINT = ("each sublayer's input is added back to its output: post-norm norm(x + sublayer(x)), pre-norm "
                 "x + sublayer(norm(x))")

DECODER_LAYER_MISTAKES = [
    ("the layer builds a causal mask of its own: masks are never inferred; pass tgt_mask on as given, None included",
     _variant(_DecoderLayerMistake, "infers_causal_mask")),
    ("tgt_mask is not passed to self-attention: without the causal mask every position sees the future",
     _variant(_DecoderLayerMistake, "tgt_mask_dropped")),
    ("cross-attention attends to the decoder's own states; its keys and values are the encoder's output: "
     "cross_attn(x, memory, memory)", _variant(_DecoderLayerMistake, "cross_reads_x")),
    ("cross-attention takes its queries from memory; the queries come from the decoder (x), the keys and values "
     "from memory: cross_attn(x, memory, memory)", _variant(_DecoderLayerMistake, "memory_as_query")),
    ("the padding masks are swapped: tgt_key_padding_mask belongs to self-attention, memory_key_padding_mask to "
     "cross-attention", _variant(_DecoderLayerMistake, "padding_masks_swapped")),
    ("tgt_mask is passed to cross-attention too: it belongs to self-attention only (the whole source may be read)",
     _variant(_DecoderLayerMistake, "tgt_mask_in_cross")),
    ("memory_key_padding_mask is not passed to cross-attention: the decoder attends to the source's padding",
     _variant(_DecoderLayerMistake, "memory_padding_dropped")),
    ("tgt_key_padding_mask is not passed to self-attention", _variant(_DecoderLayerMistake, "tgt_padding_dropped")),
    ("norm_first is ignored: with norm_first=True each sublayer sees the normalized input, x + sublayer(norm(x))",
     _variant(_DecoderLayerMistake, "norm_first_ignored")),
    ("pre-norm and post-norm are swapped: norm_first=False (the paper's post-norm) is norm(x + sublayer(x))",
     _variant(_DecoderLayerMistake, "norm_first_inverted")),
    ("in pre-norm cross-attention the memory is normalized too; norm2 normalizes the decoder's state x only: "
     "cross_attn(norm2(x), memory, memory)", _variant(_DecoderLayerMistake, "memory_normalized")),
    ("the LayerNorms are used in the wrong order: norm2 goes with cross-attention, norm3 with the feed-forward "
     "sublayer (norm1 with self-attention)", _variant(_DecoderLayerMistake, "norms_2_3_swapped")),
    ("the LayerNorms are used in the wrong order: norm1 goes with self-attention, norm2 with cross-attention "
     "(norm3 with the feed-forward sublayer)", _variant(_DecoderLayerMistake, "norms_1_2_swapped")),
    ("norm1 is used for every sublayer: each has its own LayerNorm, norm1, norm2 and norm3 in order",
     _variant(_DecoderLayerMistake, "norm1_everywhere")),
    ("the cross-attention sublayer is missing: after self-attention the decoder attends to memory",
     _variant(_DecoderLayerMistake, "no_cross_attention")),
    ("cross-attention comes before self-attention; the order is self-attention, cross-attention, feed-forward",
     _variant(_DecoderLayerMistake, "cross_attention_first")),
    ("cross-attention's queries are the layer's input; they are the output of the self-attention sublayer",
     _variant(_DecoderLayerMistake, "cross_gets_layer_input")),
    ("dropout is applied after the residual sum; it goes on each sublayer's output, before the sum: "
     "x + self.dropout(sublayer(...))", _variant(_DecoderLayerMistake, "dropout_on_sum")),
    ("the residual connections are missing: " + RESIDUAL_HINT, _variant(_DecoderLayerMistake, "no_residual")),
    ("the residual connection of the self-attention sublayer is missing: " + RESIDUAL_HINT,
     _variant(_DecoderLayerMistake, "no_self_residual")),
    ("the residual connection of the cross-attention sublayer is missing: " + RESIDUAL_HINT,
     _variant(_DecoderLayerMistake, "no_cross_residual")),
    ("the residual connection of the feed-forward sublayer is missing: " + RESIDUAL_HINT,
     _variant(_DecoderLayerMistake, "no_ff_residual")),
    ("in pre-norm the residual adds back the normalized input; it should add the un-normalized x: "
     "x = x + sublayer(norm(x))", _variant(_DecoderLayerMistake, "residual_of_normalized")),
    ("a query whose keys are all padding gets NaN: a softmax over keys that are all -inf is 0/0. Give such rows "
     "zero weights (and a zero attention output)", _variant(_DecoderLayerMistake, "plain_softmax")),
    ("dropout is missing on the self-attention sublayer's output: x + self.dropout(attention)",
     _variant(_DecoderLayerMistake, "no_self_dropout")),
    ("dropout is missing on the cross-attention sublayer's output: x + self.dropout(cross-attention)",
     _variant(_DecoderLayerMistake, "no_cross_dropout")),
    ("dropout is missing on the feed-forward sublayer's output: x + self.dropout(self.ff(...))",
     _variant(_DecoderLayerMistake, "no_ff_dropout")),
    ("dropout is missing: apply self.dropout to each sublayer's output, before it is added to x",
     _variant(_DecoderLayerMistake, "no_dropout")),
    ("dropout is applied in eval mode too: call self.dropout (an nn.Dropout, which is off in eval mode), or pass "
     "training=self.training to F.dropout", _variant(_DecoderLayerMistake, "dropout_in_eval")),
    (sublayer_reused("cross-attention", "self_attn", "cross_attn"), _variant(_DecoderLayerMistake,
                                                                             "cross_uses_self_attn")),
    (sublayer_reused("self-attention", "cross_attn", "self_attn"), _variant(_DecoderLayerMistake,
                                                                            "self_uses_cross_attn")),
    (LAYER_ACTIVATION_HINT, _DecoderLayerWithoutActivation),
]


class _DecoderMistake(Decoder):
    variant = None

    def forward(self, x, memory, tgt_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        v = self.variant
        layers = list(self.layers)
        if v == "first_layer_reused":
            layers = [layers[0]] * len(layers)
        if v == "one_shared_layer":  # [layer] * num_layers: loading the weights leaves the last layer's in it
            layers = [layers[-1]] * len(layers)
        if v == "layers_reversed":
            layers = layers[::-1]
        if v == "last_layer_skipped":
            layers = layers[:-1]
        if v == "tgt_mask_dropped":
            tgt_mask = None
        if v == "tgt_padding_dropped":
            tgt_key_padding_mask = None
        if v == "memory_padding_dropped":
            memory_key_padding_mask = None
        if v == "padding_masks_swapped":
            tgt_key_padding_mask, memory_key_padding_mask = memory_key_padding_mask, tgt_key_padding_mask
        if v == "target_padding_as_memory":
            memory_key_padding_mask = tgt_key_padding_mask
        out = x
        if v == "norm_before_layers" and self.norm is not None:
            out = self.norm(out)
        if v == "input_dropout":
            out = layers[0].dropout(out)
        for i, layer in enumerate(layers):
            masks = (tgt_mask, tgt_key_padding_mask, memory_key_padding_mask)
            if v == "masks_first_layer_only" and i > 0:
                masks = (None, None, None)
            source = x if v == "x_as_memory" else memory
            out = layer(x if v == "not_chained" else out, source, *masks) + (out if v == "residual_around_layers"
                                                                             else 0)  # (B, T, C)
            if v == "memory_updated":
                memory = out
            if v == "norm_every_layer" and self.norm is not None:
                out = self.norm(out)
        if v == "final_norm_always":
            return self.norm(out)  # TypeError when self.norm is None
        if self.norm is None or v in ("no_final_norm", "norm_every_layer", "norm_before_layers"):
            return out
        return self.norm(out)


class _DecoderWithoutActivation(Decoder):
    """The given __init__ edited to build the layers without `activation`: always ReLU."""

    def __init__(self, num_layers, d_model, num_heads, d_ff, dropout=0.0, norm_first=False, activation="relu"):
        super().__init__(num_layers, d_model, num_heads, d_ff, dropout, norm_first)


STACK_ACTIVATION_HINT = activation_not_passed("every layer, DecoderLayer(d_model, num_heads, d_ff, dropout, "
                                              "norm_first, activation)")

# Both raise the same error wherever only the target is padded: one hint names both.
MASKS_OUT_OF_PLACE = ("the padding masks are not each in its place: passed in each other's places, or the target's "
                      "(tgt_key_padding_mask) given as memory_key_padding_mask too; a layer takes (x, memory, tgt_mask, "
                      "tgt_key_padding_mask, memory_key_padding_mask): pass each by keyword")

DECODER_MISTAKES = [
    ("the final LayerNorm of a pre-norm stack is missing: return self.norm(x) when self.norm is not None",
     _variant(_DecoderMistake, "no_final_norm")),
    ("the final LayerNorm is applied after every layer; apply it once, after the last layer",
     _variant(_DecoderMistake, "norm_every_layer")),
    ("the final LayerNorm is applied before the layers; apply it once, after the last layer",
     _variant(_DecoderMistake, "norm_before_layers")),
    ("self.norm is called in a post-norm stack too, where it is None: apply it only if self.norm is not None",
     _variant(_DecoderMistake, "final_norm_always")),
    ("tgt_mask is not passed on to the layers: without the causal mask every position sees the future",
     _variant(_DecoderMistake, "tgt_mask_dropped")),
    ("memory_key_padding_mask is not passed on to the layers", _variant(_DecoderMistake, "memory_padding_dropped")),
    ("tgt_key_padding_mask is not passed on to the layers", _variant(_DecoderMistake, "tgt_padding_dropped")),
    (MASKS_OUT_OF_PLACE, _variant(_DecoderMistake, "padding_masks_swapped")),
    (MASKS_OUT_OF_PLACE, _variant(_DecoderMistake, "target_padding_as_memory")),
    ("the masks are passed on to the first layer only: every layer needs tgt_mask and both padding masks",
     _variant(_DecoderMistake, "masks_first_layer_only")),
    ("the first layer is used for every step: loop over self.layers, each layer has its own weights",
     _variant(_DecoderMistake, "first_layer_reused")),
    (layers_shared("DecoderLayer"), _variant(_DecoderMistake, "one_shared_layer")),
    ("the last layer is skipped: run every layer, for layer in self.layers (range(len(self.layers) - 1) stops one "
     "short)", _variant(_DecoderMistake, "last_layer_skipped")),
    ("the stack adds each layer's input back to its output (x = x + layer(x, memory, ...)): each layer has its "
     "residual connections inside, so x = layer(x, memory, ...)", _variant(_DecoderMistake, "residual_around_layers")),
    ("the layers run in reverse order: self.layers[0] comes first", _variant(_DecoderMistake, "layers_reversed")),
    ("every layer gets the decoder's input: feed each layer's output to the next layer",
     _variant(_DecoderMistake, "not_chained")),
    ("the layers get the decoder's input x as their memory; every layer gets the encoder's output, memory",
     _variant(_DecoderMistake, "x_as_memory")),
    ("the memory changes along the stack; every layer gets the same memory, the encoder's output",
     _variant(_DecoderMistake, "memory_updated")),
    ("the decoder applies dropout to its input: the stack adds no dropout of its own (each layer has its own, and "
     "the dropout on the embeddings belongs to the model, lesson 06)", _variant(_DecoderMistake, "input_dropout")),
    (STACK_ACTIVATION_HINT, _DecoderWithoutActivation),
]


# ----------------------------------------------------------------------------- causal_mask
def _causal_probe(id, title, T, device=None, **extra):
    """causal_mask(T) or causal_mask(T, device=...); a meta probe runs on the meta device."""
    kwargs = {} if device is None else {"device": device}
    if device == "meta":
        extra = dict(extra, device="meta")
    return function_probe(id, title, (T,), kwargs, ("mask",), **extra)


CAUSAL_MASK_REQUIREMENTS = (
    Requirement("values", "returns a (T, T) torch.bool mask, True exactly where j > i (the diagonal is False)", 2),
    Requirement("device", "creates the mask on `device` (checked on the meta device)"),
)


def causal_mask_public_probes():
    return [
        *requiring("values", [_causal_probe("four", "T=4", 4), _causal_probe("one", "T=1: a single position sees "
                                                                          "itself", 1)]),
        *requiring("device", [_causal_probe("meta", "T=4, device='meta': the mask must be on the meta device", 4,
                                            device="meta"),
                              _causal_probe("device-cpu", "T=6, device='cpu' given", 6, device="cpu")]),
    ]


def causal_mask_hidden_probes(devices=("cpu",)):
    probes = [
        *requiring("values", [_causal_probe("seven", "T=7", 7), _causal_probe("two", "T=2", 2)]),
        *requiring("device", [
            _causal_probe("meta-2", "T=6, device='meta'", 6, device="meta"),
            _causal_probe("device-cpu-2", "T=3, device='cpu' given", 3, device="cpu"),
            *[on_device(_causal_probe("device", "T=5, device given", 5, device=device), device)
              for device in devices if device != "cpu"],
        ]),
    ]
    return causal_mask_public_probes() + probes


# ----------------------------------------------------------------------------- padding_mask
def _padding_probe(id, title, tokens, pad_id, **extra):
    return function_probe(id, title, (tokens, pad_id), None, ("mask",), **extra)


PADDING_MASK_REQUIREMENTS = (
    Requirement("values", "returns a (B, S) torch.bool mask, True where tokens == pad_id, for any pad_id and any "
                          "integer dtype", 2),
    Requirement("device", "the mask is on the tokens' device (checked on the meta device)"),
)


def padding_mask_public_probes():
    tokens = torch.tensor([[5, 7, 2, 0, 0], [3, 4, 0, 0, 0]])
    return [
        *requiring("values", [
            _padding_probe("pad-zero", "batch 2, padded with pad_id=0", tokens, 0),
            _padding_probe("pad-three", "pad_id=3, with 0 an ordinary token", torch.tensor([[0, 4, 3, 3], [1, 0, 2, 3]]),
                           3),
            _padding_probe("int32", "int32 tokens, pad_id=0", torch.tensor([[6, 0, 0], [6, 6, 0]], dtype=torch.int32), 0),
        ]),
        *requiring("device", [_padding_probe("meta", "tokens on the meta device", tokens, 0, device="meta")]),
    ]


def padding_mask_hidden_probes(devices=("cpu",)):
    generator = torch.Generator().manual_seed(5)
    tokens = torch.randint(0, 6, (3, 7), generator=generator)
    probes = [
        *requiring("values", [
            _padding_probe("random", "random tokens, pad_id=2", tokens, 2),
            _padding_probe("no-padding", "no padding at all", torch.tensor([[1, 2, 3]]), 0),
            _padding_probe("int32-2", "int32 tokens, pad_id=4", torch.tensor([[4, 1, 4], [2, 4, 4]], dtype=torch.int32),
                           4),
        ]),
        *requiring("device", [
            _padding_probe("meta-2", "random tokens on the meta device, pad_id=2", tokens, 2, device="meta"),
            *[on_device(_padding_probe("device", "pad_id=0", torch.tensor([[4, 0], [0, 0]]), 0), device)
              for device in devices if device != "cpu"],
        ]),
    ]
    return padding_mask_public_probes() + probes


# ----------------------------------------------------------------------------- DecoderLayer and Decoder
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


def _stack_probe(module_class, init_args, id, title, B, L, S, d_model, norm_first, dropout, causal, tgt_lengths,
                 memory_lengths, future_from, seed, dtype, extra):
    x, memory = _decoder_inputs(B, L, S, d_model, seed, dtype, future_from)
    kwargs = _decoder_kwargs(L, S, causal, tgt_lengths, memory_lengths)
    if future_from is not None:
        extra = dict(extra, same_prefix={"rows": [0, 1], "length": future_from})
    init = {"norm_first": norm_first}
    if dropout is not None:
        init["dropout"] = dropout
    extra = dict(extra)
    activation = extra.pop("activation", None)
    if activation is not None:
        init["activation"] = activation
    return module_probe(id, title, module_class, init_args, init, (x, memory), kwargs, seed=seed, dtype=dtype,
                        output_names=("output",), **extra)


def _decoder_layer_probe(id, title, B, L, S, d_model=D_MODEL, heads=HEADS, d_ff=D_FF, norm_first=False, dropout=None,
                         causal=None, tgt_lengths=None, memory_lengths=None, future_from=None, seed=0,
                         dtype="float32", **extra):
    return _stack_probe(DecoderLayer, (d_model, heads, d_ff), id, title, B, L, S, d_model, norm_first, dropout,
                        causal, tgt_lengths, memory_lengths, future_from, seed, dtype, extra)


DECODER_LAYER_REQUIREMENTS = (
    Requirement("post-norm", "post-norm (the default): x = norm1(x + self-attention(x)), x = norm2(x + "
                             "cross-attention(x, memory)), x = norm3(x + ff(x))", 2),
    Requirement("pre-norm", "pre-norm (norm_first=True): x = x + sublayer(norm(x)) for each sublayer; "
                            "cross-attention normalizes x, not the memory", 1.5),
    Requirement("masks", "tgt_mask (bool or float) and tgt_key_padding_mask go to self-attention, "
                         "memory_key_padding_mask to cross-attention, as given (None included); a memory that is "
                         "all padding gives a finite output", 1.5),
    Requirement("dropout", "applies self.dropout to each sublayer's output before the residual sum: off in eval "
                           "mode, where PyTorch drops in training mode"),
    Requirement("activation", 'builds its feed-forward network with `activation`, as the given __init__ does: '
                              'activation="gelu" gives GELU', 0.5),
    Requirement("dtype-device", "follows the dtype (float64) and device (meta) of its inputs and weights", 0.5),
    Requirement("gradients", "is differentiable: gradients reach x, memory and every weight", 0.5),
)


def decoder_layer_public_probes():
    return [
        *requiring("post-norm", [
            _decoder_layer_probe("post-norm", "post-norm (the paper's), no masks, batch 2, 4 targets, 5 memory "
                                 "positions", 2, 4, 5, seed=1),
            _decoder_layer_probe("post-norm-short-memory", "post-norm, no masks, 3 targets, 2 memory positions", 2, 3,
                                 2, seed=2),
        ]),
        *requiring("pre-norm", [
            _decoder_layer_probe("pre-norm", "pre-norm (norm_first=True), no masks", 2, 4, 5, norm_first=True, seed=3),
        ]),
        *requiring("masks", [
            _decoder_layer_probe("all-masks", "a causal tgt_mask and both padding masks together, 4 targets, 5 memory "
                                 "positions", 2, 4, 5, causal=True, tgt_lengths=[4, 3], memory_lengths=[2, 5], seed=4),
            _decoder_layer_probe("causal", "a causal tgt_mask (T, T), bool", 2, 4, 3, causal=True, seed=5),
            _decoder_layer_probe("float-causal", "a float tgt_mask: -inf above the diagonal", 2, 4, 3,
                                 causal=additive(causal_mask(4)), seed=6),
            _decoder_layer_probe("tgt-padding", "a causal tgt_mask and a tgt_key_padding_mask (B, T)", 2, 4, 5,
                                 causal=True, tgt_lengths=[4, 2], seed=7),
            _decoder_layer_probe("memory-padding", "a memory_key_padding_mask (B, S): the second source has 2 real "
                                 "tokens of 5", 2, 3, 5, memory_lengths=[5, 2], seed=8),
            _decoder_layer_probe("no-leakage", "a causal tgt_mask; two targets that differ only from position 2 on",
                                 2, 5, 3, causal=True, future_from=2, seed=9),
            _decoder_layer_probe("fully-padded-memory", "the second row's memory is all padding: its cross-attention "
                                 "attends to nothing (zero output, never NaN)", 2, 3, 4, memory_lengths=[4, 0], seed=10),
        ]),
        *requiring("dropout", [
            _decoder_layer_probe("dropout-eval", "dropout=1.0 in eval mode: dropout is off", 2, 4, 5, dropout=1.0,
                                 seed=11),
            _decoder_layer_probe("dropout-train", "dropout=1.0 in training mode: every dropped value is zero", 2, 4, 5,
                                 dropout=1.0, seed=12, training=True),
        ]),
        *requiring("activation", [
            _decoder_layer_probe("gelu", 'activation="gelu", 4 targets, 5 memory positions', 2, 4, 5,
                                 activation="gelu", seed=17),
        ]),
        *requiring("dtype-device", [
            _decoder_layer_probe("float64", "float64 inputs and weights", 2, 4, 5, seed=13, dtype="float64"),
            _decoder_layer_probe("meta", "inputs and weights on the meta device", 2, 4, 5, seed=14, device="meta"),
        ]),
        *requiring("gradients", [
            with_gradients(_decoder_layer_probe("grad", "gradients through x and memory", 2, 4, 5, seed=15),
                           DecoderLayer, seed=16),
        ]),
    ]


def decoder_layer_hidden_probes(devices=("cpu",)):
    probes = [
        *requiring("post-norm", [
            _decoder_layer_probe("wide", "post-norm, d_model=16, 4 heads, 5 targets, 7 memory positions", 3, 5, 7, 16,
                                 4, 32, seed=20),
            _decoder_layer_probe("one-head", "post-norm, a single head", 2, 3, 4, heads=1, seed=21),
            _decoder_layer_probe("one-target", "post-norm, a single target position", 2, 1, 4, seed=22),
        ]),
        *requiring("pre-norm", [
            _decoder_layer_probe("pre-norm-wide", "pre-norm, d_model=16, 4 heads", 3, 5, 7, 16, 4, 32,
                                 norm_first=True, seed=23),
            _decoder_layer_probe("pre-norm-many-heads", "pre-norm, 8 heads of size 2", 2, 3, 4, 16, 8, 32,
                                 norm_first=True, seed=24),
        ]),
        *requiring("masks", [
            _decoder_layer_probe("all-masks-2", "a causal tgt_mask and both padding masks, batch 3", 3, 5, 6,
                                 causal=True, tgt_lengths=[5, 3, 4], memory_lengths=[2, 6, 3], seed=25),
            _decoder_layer_probe("causal-2", "a causal tgt_mask, 6 targets, 4 memory positions", 2, 6, 4, causal=True,
                                 seed=26),
            _decoder_layer_probe("float-causal-2", "a float tgt_mask, 5 targets", 2, 5, 3,
                                 causal=additive(causal_mask(5)), seed=27),
            _decoder_layer_probe("tgt-padding-2", "a causal tgt_mask and a tgt_key_padding_mask, batch 3", 3, 5, 4,
                                 causal=True, tgt_lengths=[5, 2, 3], seed=28),
            _decoder_layer_probe("memory-padding-2", "a memory_key_padding_mask, 9 memory positions", 2, 4, 9,
                                 memory_lengths=[9, 6], seed=29),
            _decoder_layer_probe("no-leakage-2", "a causal tgt_mask; two targets that differ only from position 3 on",
                                 2, 6, 4, causal=True, future_from=3, seed=30),
            _decoder_layer_probe("fully-padded-memory-2", "the first row's memory is all padding", 2, 4, 3,
                                 memory_lengths=[0, 3], seed=31),
        ]),
        *requiring("dropout", [
            _decoder_layer_probe("dropout-eval-2", "dropout=1.0 in eval mode, batch 3", 3, 5, 4, dropout=1.0, seed=32),
            _decoder_layer_probe("dropout-train-2", "dropout=1.0 in training mode, batch 3", 3, 5, 4, dropout=1.0,
                                 seed=33, training=True),
        ]),
        *requiring("activation", [
            _decoder_layer_probe("gelu-wide", 'activation="gelu", d_model=16, 4 heads, 5 targets, 6 memory positions',
                                 3, 5, 6, 16, 4, 32, activation="gelu", seed=39),
        ]),
        *requiring("dtype-device", [
            _decoder_layer_probe("float64-2", "float64, d_model=16, 4 heads", 2, 5, 6, 16, 4, 32, seed=34,
                                 dtype="float64"),
            _decoder_layer_probe("meta-2", "on the meta device, batch 3", 3, 5, 4, seed=35, device="meta"),
            *[on_device(_decoder_layer_probe("device", "batch 2, 4 targets, 3 memory positions", 2, 4, 3, seed=36),
                        device) for device in devices if device != "cpu"],
        ]),
        *requiring("gradients", [
            with_gradients(_decoder_layer_probe("grad-2", "gradients, batch 3, 5 targets, 4 memory positions", 3, 5, 4,
                                                seed=37), DecoderLayer, seed=38),
        ]),
    ]
    return decoder_layer_public_probes() + probes


def _decoder_probe(id, title, B, L, S, num_layers=2, d_model=D_MODEL, heads=HEADS, d_ff=D_FF, norm_first=False,
                   dropout=None, causal=None, tgt_lengths=None, memory_lengths=None, future_from=None, seed=0,
                   dtype="float32", **extra):
    return _stack_probe(Decoder, (num_layers, d_model, heads, d_ff), id, title, B, L, S, d_model, norm_first, dropout,
                        causal, tgt_lengths, memory_lengths, future_from, seed, dtype, extra)


DECODER_REQUIREMENTS = (
    Requirement("post-norm", "runs the layers in order, each on the previous one's output and all on the same "
                             "memory; a post-norm stack has no final norm", 1.5),
    Requirement("pre-norm", "a pre-norm stack (norm_first=True) applies self.norm once, after the last layer"),
    Requirement("masks", "gives tgt_mask, tgt_key_padding_mask and memory_key_padding_mask to every layer, each in "
                         "its place"),
    Requirement("dropout", "adds no dropout of its own (its layers have theirs): off in eval mode, where PyTorch "
                           "drops in training mode", 0.5),
    Requirement("activation", 'builds every layer with `activation`, as the given __init__ does: activation="gelu" '
                              "reaches each layer's feed-forward network", 0.5),
    Requirement("dtype-device", "follows the dtype (float64) and device (meta) of its inputs and weights", 0.5),
    Requirement("gradients", "is differentiable: gradients reach x, memory and every weight", 0.5),
)


def decoder_public_probes():
    return [
        *requiring("post-norm", [
            _decoder_probe("post-norm", "2 post-norm layers, no masks, batch 2, 4 targets, 5 memory positions", 2, 4, 5,
                           seed=1),
        ]),
        *requiring("pre-norm", [
            _decoder_probe("pre-norm", "2 pre-norm layers (norm_first=True), no masks", 2, 4, 5, norm_first=True,
                           seed=2),
        ]),
        *requiring("masks", [
            _decoder_probe("all-masks", "a causal tgt_mask and both padding masks, 4 targets, 5 memory positions", 2,
                           4, 5, causal=True, tgt_lengths=[4, 2], memory_lengths=[3, 5], seed=3),
            _decoder_probe("causal", "a causal tgt_mask", 2, 4, 3, causal=True, seed=4),
            _decoder_probe("tgt-padding", "a causal tgt_mask and a tgt_key_padding_mask", 2, 4, 5, causal=True,
                           tgt_lengths=[4, 3], seed=5),
            _decoder_probe("memory-padding", "a memory_key_padding_mask: the second source has 2 real tokens of 5",
                           2, 3, 5, memory_lengths=[5, 2], seed=6),
            _decoder_probe("no-leakage", "a causal tgt_mask; two targets that differ only from position 2 on", 2, 4, 3,
                           causal=True, future_from=2, seed=7),
        ]),
        *requiring("dropout", [
            _decoder_probe("dropout-eval", "dropout=1.0 in eval mode: dropout is off", 2, 4, 5, dropout=1.0, seed=8),
            _decoder_probe("dropout-train", "dropout=1.0 in training mode: every dropped value is zero", 2, 4, 5,
                           dropout=1.0, seed=9, training=True),
        ]),
        *requiring("activation", [
            _decoder_probe("gelu", 'activation="gelu": 2 layers, 4 targets, 5 memory positions', 2, 4, 5,
                           activation="gelu", seed=14),
        ]),
        *requiring("dtype-device", [
            _decoder_probe("float64", "float64 inputs and weights", 2, 4, 5, seed=10, dtype="float64"),
            _decoder_probe("meta", "inputs and weights on the meta device", 2, 4, 5, seed=11, device="meta"),
        ]),
        *requiring("gradients", [
            with_gradients(_decoder_probe("grad", "2 layers, gradients through x and memory", 2, 4, 5, seed=12),
                           Decoder, seed=13),
        ]),
    ]


def decoder_hidden_probes(devices=("cpu",)):
    probes = [
        *requiring("post-norm", [
            _decoder_probe("one-layer", "a single post-norm layer", 2, 3, 4, num_layers=1, seed=20),
            _decoder_probe("three-layers", "3 post-norm layers, batch 3", 3, 5, 4, num_layers=3, seed=21),
            _decoder_probe("wide", "d_model=16, 4 heads", 2, 4, 6, 2, 16, 4, 32, seed=22),
        ]),
        *requiring("pre-norm", [
            _decoder_probe("one-layer-pre", "a single pre-norm layer", 2, 3, 4, num_layers=1, norm_first=True, seed=23),
            _decoder_probe("three-layers-pre", "3 pre-norm layers, batch 3", 3, 5, 6, num_layers=3, norm_first=True,
                           seed=24),
        ]),
        *requiring("masks", [
            _decoder_probe("all-masks-2", "3 layers, a causal tgt_mask and both padding masks", 3, 5, 4, num_layers=3,
                           causal=True, tgt_lengths=[5, 2, 4], memory_lengths=[4, 4, 1], seed=25),
            _decoder_probe("causal-2", "a causal tgt_mask, 6 targets", 2, 6, 4, causal=True, seed=26),
            _decoder_probe("tgt-padding-2", "a causal tgt_mask and a tgt_key_padding_mask, batch 3", 3, 5, 6,
                           causal=True, tgt_lengths=[5, 1, 3], seed=27),
            _decoder_probe("memory-padding-2", "a memory_key_padding_mask, 7 memory positions", 2, 4, 7,
                           memory_lengths=[3, 7], seed=28),
            _decoder_probe("no-leakage-2", "a causal tgt_mask; two targets that differ only from position 1 on", 2,
                           4, 5, causal=True, future_from=1, seed=29),
        ]),
        *requiring("dropout", [
            _decoder_probe("dropout-eval-2", "dropout=1.0 in eval mode, 3 layers", 3, 4, 5, num_layers=3, dropout=1.0,
                           seed=30),
            _decoder_probe("dropout-train-2", "dropout=1.0 in training mode, 3 layers", 3, 4, 5, num_layers=3,
                           dropout=1.0, seed=31, training=True),
        ]),
        *requiring("activation", [
            _decoder_probe("gelu-3-layers", 'activation="gelu", 3 layers, batch 3', 3, 5, 4, num_layers=3,
                           activation="gelu", seed=37),
        ]),
        *requiring("dtype-device", [
            _decoder_probe("float64-2", "float64, d_model=16, 4 heads", 2, 4, 5, 2, 16, 4, 32, seed=32,
                           dtype="float64"),
            _decoder_probe("meta-2", "on the meta device, 3 layers", 3, 4, 5, num_layers=3, seed=33, device="meta"),
            *[on_device(_decoder_probe("device", "2 layers, batch 2", 2, 4, 3, seed=34), device)
              for device in devices if device != "cpu"],
        ]),
        *requiring("gradients", [
            with_gradients(_decoder_probe("grad-2", "3 layers, gradients through x and memory", 3, 4, 5, num_layers=3,
                                          seed=35), Decoder, seed=36),
        ]),
    ]
    return decoder_public_probes() + probes


EXERCISES = [
    ExerciseChecks("causal_mask", causal_mask, causal_mask_public_probes, causal_mask_hidden_probes,
                   CAUSAL_MASK_MISTAKES, requirements=CAUSAL_MASK_REQUIREMENTS),
    ExerciseChecks("padding_mask", padding_mask, padding_mask_public_probes, padding_mask_hidden_probes,
                   PADDING_MASK_MISTAKES, requirements=PADDING_MASK_REQUIREMENTS),
    ExerciseChecks("DecoderLayer", DecoderLayer, decoder_layer_public_probes, decoder_layer_hidden_probes,
                   DECODER_LAYER_MISTAKES, requirements=DECODER_LAYER_REQUIREMENTS),
    ExerciseChecks("Decoder", Decoder, decoder_public_probes, decoder_hidden_probes, DECODER_MISTAKES,
                   requirements=DECODER_REQUIREMENTS),
]
