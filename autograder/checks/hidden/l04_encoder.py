"""Lesson 04 checks: PositionwiseFeedForward, EncoderLayer and Encoder.

Each exercise's checks are grouped into the requirements its text states, the core first: the
post-norm layer before pre-norm, the masks, dropout, dtype and device, gradients. A probe varies
only what its requirement is about; everything else is the plain case (post-norm, no mask,
float32, eval mode, the CPU). The hidden probes try the same requirements on other sizes, seeds
and values. The weights come from the reference, perturbed so that no LayerNorm is the identity
and no bias is zero. Padding always leaves every row at least one real token: fully blocked rows
are lesson 05's.

Dropout is probed with dropout=1.0 in both modes: in eval mode dropout is off, so the result is
the plain one; in training mode every dropped value is zero, which shows where dropout sits.
Both are deterministic, so a known wrong placement is named exactly.
"""

import torch
import torch.nn.functional as F

from ...reference import Encoder, EncoderLayer, PositionwiseFeedForward
from .kinds import activation_not_passed, layers_shared
from .probes import (ExerciseChecks, Requirement, additive, module_probe, on_device, randn, random_bool_mask,
                     requiring, with_gradients)

D_MODEL, HEADS, D_FF = 8, 2, 16


def _variant(base, variant):
    """A subclass of a reference module whose forward takes the wrong turn named ``variant``."""
    return type(f"{base.__name__}_{variant}", (base,), {"variant": variant})


def _padding(lengths, T):
    """(B, T) key padding mask, True after each row's length: every row keeps its first tokens."""
    return torch.arange(T)[None, :] >= torch.tensor(lengths)[:, None]  # (B, T)


def _causal(T):
    return torch.ones(T, T, dtype=torch.bool).triu(1)  # (T, T)


DROPOUT_IN_EVAL = ("dropout is applied in eval mode too: call self.dropout (an nn.Dropout, which is off in eval "
                   "mode), or pass training=self.training to F.dropout")


# ----------------------------------------------------------------------------- mistakes
class _FeedForwardMistake(PositionwiseFeedForward):
    variant = None

    def forward(self, x):
        v = self.variant
        if v == "activation_last":
            return self.activation(self.linear2(self.dropout(self.linear1(x))))
        if v == "activation_first":
            return self.linear2(self.dropout(self.linear1(self.activation(x))))
        if v == "no_activation":
            return self.linear2(self.dropout(self.linear1(x)))
        activation = {"always_relu": F.relu, "always_gelu": F.gelu}.get(v, self.activation)
        hidden = activation(self.linear1(x))  # (..., d_ff)
        if v == "no_dropout":
            return self.linear2(hidden)
        if v == "dropout_in_eval":
            return self.linear2(F.dropout(hidden, self.dropout.p))
        if v == "dropout_on_output":
            return self.dropout(self.linear2(hidden))
        if v == "dropout_on_input":
            return self.linear2(self.activation(self.linear1(self.dropout(x))))
        return self.linear2(self.dropout(hidden))


class _FeedForwardThreeAxes(PositionwiseFeedForward):
    """Unpacks x.shape into (B, T, C), as if every input had exactly three axes."""

    def forward(self, x):
        B, T, C = x.shape  # ValueError: too many values to unpack, for a 4-D input
        return self.linear2(self.dropout(self.activation(self.linear1(x))))


FEED_FORWARD_MISTAKES = [
    ("the activation is applied after linear2; it goes between the two: linear2(activation(linear1(x)))",
     _variant(_FeedForwardMistake, "activation_last")),
    ("the activation is applied to the input, before linear1; it goes between the two: linear2(activation(linear1(x)))",
     _variant(_FeedForwardMistake, "activation_first")),
    ("the activation is missing: without it the two linear layers collapse into one; "
     "compute linear2(self.activation(linear1(x)))", _variant(_FeedForwardMistake, "no_activation")),
    ("the activation argument is ignored (ReLU is always used): call self.activation, which the given __init__ "
     "set to ReLU or GELU", _variant(_FeedForwardMistake, "always_relu")),
    ("the activation argument is ignored (GELU is always used): call self.activation, which the given __init__ "
     "set to ReLU or GELU", _variant(_FeedForwardMistake, "always_gelu")),
    ("dropout is missing: apply self.dropout to the hidden layer, linear2(self.dropout(activation(linear1(x))))",
     _variant(_FeedForwardMistake, "no_dropout")),
    ("the input may have any number of leading axes, not just (B, T): don't unpack x.shape into three names; "
     "nn.Linear already works on the last axis of any input", _FeedForwardThreeAxes),
    (DROPOUT_IN_EVAL, _variant(_FeedForwardMistake, "dropout_in_eval")),
    ("dropout is applied to the output, after linear2; PyTorch applies it to the hidden layer: "
     "linear2(self.dropout(activation(linear1(x))))", _variant(_FeedForwardMistake, "dropout_on_output")),
    ("dropout is applied to the input, before linear1; PyTorch applies it to the hidden layer: "
     "linear2(self.dropout(activation(linear1(x))))", _variant(_FeedForwardMistake, "dropout_on_input")),
]


class _EncoderLayerMistake(EncoderLayer):
    variant = None

    def forward(self, x, key_padding_mask=None, attn_mask=None):
        v = self.variant
        if v in ("padding_mask_dropped", "masks_dropped"):
            key_padding_mask = None
        if v in ("attn_mask_dropped", "masks_dropped"):
            attn_mask = None
        if v == "masks_by_position":  # self_attn(h, h, h, attn_mask): the fourth argument is key_padding_mask
            key_padding_mask, attn_mask = attn_mask, None
        drop = (lambda t: F.dropout(t, self.dropout.p)) if v == "dropout_in_eval" else self.dropout

        def attend(h):
            out, _ = self.self_attn(h, h, h, key_padding_mask=key_padding_mask, attn_mask=attn_mask,
                                    need_weights=False)
            return out if v in ("no_attention_dropout", "no_dropout") else drop(out)  # (B, T, C)

        def feed(h):
            out = self.ff(h)
            return out if v in ("no_ff_dropout", "no_dropout") else drop(out)  # (B, T, C)

        keep_attention = v not in ("no_residual", "no_attention_residual")
        keep_ff = v not in ("no_residual", "no_ff_residual")
        norm1, norm2 = self.norm1, self.norm2
        if v == "norm1_twice":
            norm2 = self.norm1
        if v == "norms_swapped":
            norm1, norm2 = self.norm2, self.norm1
        pre_norm = {"norm_first_ignored": False, "norm_first_inverted": not self.norm_first}.get(v, self.norm_first)
        if pre_norm and v == "dropout_on_sum":
            x1 = self.dropout(x + attend(norm1(x)))
            return self.dropout(x1 + feed(norm2(x1)))
        if pre_norm:
            h = norm1(x)
            attended = attend(h)
            residual = h if v == "residual_of_normalized" else x
            x1 = residual + attended if keep_attention else attended
            h = norm2(x1)
            fed = feed(norm2(x) if v == "ff_gets_layer_input" else h)
            residual = h if v == "residual_of_normalized" else x1
            return residual + fed if keep_ff else fed
        if v == "norm_sublayer_only":
            x1 = x + norm1(attend(x))
            return x1 + norm2(feed(x1))
        if v == "dropout_on_sum":
            x1 = norm1(self.dropout(x + attend(x)))
            return norm2(self.dropout(x1 + feed(x1)))
        attended = attend(x)
        x1 = norm1(x + attended if keep_attention else attended)
        fed = feed({"ff_gets_layer_input": x, "ff_gets_attention_output": attended}.get(v, x1))
        if v == "ff_residual_of_attention":
            return norm2(attended + fed)
        return norm2(x1 + fed if keep_ff else fed)


class _EncoderLayerWithoutActivation(EncoderLayer):
    """The given __init__ edited to build the feed-forward network without `activation`: always ReLU."""

    def __init__(self, d_model, num_heads, d_ff, dropout=0.0, norm_first=False, activation="relu"):
        super().__init__(d_model, num_heads, d_ff, dropout, norm_first)


LAYER_ACTIVATION_HINT = activation_not_passed("the feed-forward network, PositionwiseFeedForward(d_model, d_ff, "
                                              "dropout, activation)")

RESIDUAL_HINT = "each sublayer's input is added back to its output: post-norm norm(x + sublayer(x)), pre-norm x + sublayer(norm(x))"

ENCODER_LAYER_MISTAKES = [
    ("norm_first is ignored: with norm_first=True (pre-norm) each sublayer sees the normalized input, "
     "x + sublayer(norm(x)), and nothing is normalized after the residual",
     _variant(_EncoderLayerMistake, "norm_first_ignored")),
    ("pre-norm and post-norm are swapped: norm_first=False (the paper's post-norm) is norm(x + sublayer(x)); "
     "norm_first=True is x + sublayer(norm(x))", _variant(_EncoderLayerMistake, "norm_first_inverted")),
    ("dropout is applied after the residual sum; it goes on each sublayer's output, before the sum: "
     "x + self.dropout(sublayer(...))", _variant(_EncoderLayerMistake, "dropout_on_sum")),
    ("the residual connections are missing: " + RESIDUAL_HINT, _variant(_EncoderLayerMistake, "no_residual")),
    ("the residual connection of the attention sublayer is missing: " + RESIDUAL_HINT,
     _variant(_EncoderLayerMistake, "no_attention_residual")),
    ("the residual connection of the feed-forward sublayer is missing: " + RESIDUAL_HINT,
     _variant(_EncoderLayerMistake, "no_ff_residual")),
    ("in pre-norm the residual adds back the normalized input; it should add the un-normalized x: "
     "x = x + sublayer(norm(x))", _variant(_EncoderLayerMistake, "residual_of_normalized")),
    ("the LayerNorm is applied to the sublayer's output only (x + norm(sublayer(x))); post-norm normalizes the "
     "sum: norm(x + sublayer(x))", _variant(_EncoderLayerMistake, "norm_sublayer_only")),
    ("the feed-forward sublayer's residual adds back the attention's output; a residual adds back the sublayer's "
     "own input, the x it was given: x = norm2(x + ff(x))", _variant(_EncoderLayerMistake, "ff_residual_of_attention")),
    ("the feed-forward sublayer gets the attention's output alone; it gets x after the attention sublayer's residual "
     "and norm: x = norm1(x + attention(x)), then norm2(x + ff(x))", _variant(_EncoderLayerMistake,
                                                                         "ff_gets_attention_output")),
    ("the feed-forward sublayer gets the layer's input; it should get the output of the attention sublayer "
     "(after its residual, and its norm in post-norm)", _variant(_EncoderLayerMistake, "ff_gets_layer_input")),
    ("norm1 is used for both sublayers: the feed-forward sublayer has its own LayerNorm, norm2",
     _variant(_EncoderLayerMistake, "norm1_twice")),
    ("norm1 and norm2 are swapped: norm1 goes with self-attention, norm2 with the feed-forward sublayer",
     _variant(_EncoderLayerMistake, "norms_swapped")),
    ("neither mask is passed on to self-attention: pass key_padding_mask=... and attn_mask=...",
     _variant(_EncoderLayerMistake, "masks_dropped")),
    ("key_padding_mask is not passed on to self-attention: padding tokens still get attention",
     _variant(_EncoderLayerMistake, "padding_mask_dropped")),
    ("attn_mask is not passed on to self-attention", _variant(_EncoderLayerMistake, "attn_mask_dropped")),
    ("the masks are passed by position: self_attn's fourth argument is key_padding_mask, so "
     "self_attn(h, h, h, attn_mask) uses attn_mask as the padding mask; pass both by keyword",
     _variant(_EncoderLayerMistake, "masks_by_position")),
    ("dropout is missing on the attention sublayer's output: x + self.dropout(attention) (post-norm: "
     "norm1(x + self.dropout(attention)))", _variant(_EncoderLayerMistake, "no_attention_dropout")),
    ("dropout is missing on the feed-forward sublayer's output: x + self.dropout(self.ff(...))",
     _variant(_EncoderLayerMistake, "no_ff_dropout")),
    ("dropout is missing: apply self.dropout to each sublayer's output, before it is added to x",
     _variant(_EncoderLayerMistake, "no_dropout")),
    (DROPOUT_IN_EVAL, _variant(_EncoderLayerMistake, "dropout_in_eval")),
    (LAYER_ACTIVATION_HINT, _EncoderLayerWithoutActivation),
]


class _EncoderMistake(Encoder):
    variant = None

    def forward(self, x, key_padding_mask=None):
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
        out = x
        if v == "norm_before_layers" and self.norm is not None:
            out = self.norm(out)
        if v == "input_dropout":
            out = layers[0].dropout(out)
        for i, layer in enumerate(layers):
            mask = key_padding_mask
            if v == "mask_dropped" or (v == "mask_first_layer_only" and i > 0):
                mask = None
            out = layer(x if v == "not_chained" else out, key_padding_mask=mask) + (out if v == "residual_around_layers"
                                                                                 else 0)  # (B, T, C)
            if v == "norm_every_layer" and self.norm is not None:
                out = self.norm(out)
        if v == "final_norm_always":
            return self.norm(out)  # TypeError when self.norm is None
        if self.norm is None or v in ("no_final_norm", "norm_every_layer", "norm_before_layers"):
            return out
        return self.norm(out)


class _EncoderWithoutActivation(Encoder):
    """The given __init__ edited to build the layers without `activation`: always ReLU."""

    def __init__(self, num_layers, d_model, num_heads, d_ff, dropout=0.0, norm_first=False, activation="relu"):
        super().__init__(num_layers, d_model, num_heads, d_ff, dropout, norm_first)


STACK_ACTIVATION_HINT = activation_not_passed("every layer, EncoderLayer(d_model, num_heads, d_ff, dropout, "
                                              "norm_first, activation)")

ENCODER_MISTAKES = [
    ("the final LayerNorm of a pre-norm stack is missing: return self.norm(x) when self.norm is not None",
     _variant(_EncoderMistake, "no_final_norm")),
    ("the final LayerNorm is applied after every layer; apply it once, after the last layer",
     _variant(_EncoderMistake, "norm_every_layer")),
    ("the final LayerNorm is applied before the layers; apply it once, after the last layer",
     _variant(_EncoderMistake, "norm_before_layers")),
    ("self.norm is called in a post-norm stack too, where it is None: apply it only if self.norm is not None",
     _variant(_EncoderMistake, "final_norm_always")),
    ("key_padding_mask is not passed on to the layers", _variant(_EncoderMistake, "mask_dropped")),
    ("key_padding_mask is passed on to the first layer only: every layer's self-attention needs it",
     _variant(_EncoderMistake, "mask_first_layer_only")),
    ("the first layer is used for every step: loop over self.layers, each layer has its own weights",
     _variant(_EncoderMistake, "first_layer_reused")),
    (layers_shared("EncoderLayer"), _variant(_EncoderMistake, "one_shared_layer")),
    ("the last layer is skipped: run every layer, for layer in self.layers (range(len(self.layers) - 1) stops one "
     "short)", _variant(_EncoderMistake, "last_layer_skipped")),
    ("the stack adds each layer's input back to its output (x = x + layer(x)): each layer has its residual "
     "connections inside, so x = layer(x)", _variant(_EncoderMistake, "residual_around_layers")),
    ("the layers run in reverse order: self.layers[0] comes first", _variant(_EncoderMistake, "layers_reversed")),
    ("every layer gets the encoder's input: feed each layer's output to the next layer",
     _variant(_EncoderMistake, "not_chained")),
    ("the encoder applies dropout to its input: the stack adds no dropout of its own (each layer has its own, and "
     "the dropout on the embeddings belongs to the model, lesson 06)", _variant(_EncoderMistake, "input_dropout")),
    (STACK_ACTIVATION_HINT, _EncoderWithoutActivation),
]


# ----------------------------------------------------------------------------- PositionwiseFeedForward
def _feed_forward_probe(id, title, shape, d_model=D_MODEL, d_ff=D_FF, activation="relu", dropout=None, seed=0,
                        dtype="float32", **extra):
    x = randn(*shape, d_model, seed=seed + 100, dtype=dtype)
    init = {"activation": activation} if dropout is None else {"activation": activation, "dropout": dropout}
    return module_probe(id, title, PositionwiseFeedForward, (d_model, d_ff), init, (x,), seed=seed, dtype=dtype,
                        output_names=("output",), **extra)


UNKNOWN_ACTIVATION_HINT = ('the given __init__ raises ValueError for an activation other than "relu" or "gelu": '
                           "keep it as it is")


def _unknown_activation_probe(id, activation, seed):
    return {"id": id, "title": f"activation={activation!r}, which the course does not offer, raises ValueError",
            "construct": {"args": [D_MODEL, D_FF], "kwargs": {"activation": activation}, "state_dict": None},
            "method": "forward", "args": [randn(1, 2, D_MODEL, seed=seed)], "kwargs": {}, "dtype": "float32",
            "output_names": ["output"], "hint": UNKNOWN_ACTIVATION_HINT}


FEED_FORWARD_REQUIREMENTS = (
    Requirement("formula", "computes linear2(activation(linear1(x))) at every position on its own", 2),
    Requirement("shapes", "works on the last axis, whatever the leading axes, and on strided inputs", 0.5),
    Requirement("activation", 'activation="gelu" uses GELU; an activation other than "relu" or "gelu" raises '
                              "ValueError"),
    Requirement("dropout", "applies self.dropout to the hidden layer, linear2(dropout(activation(linear1(x)))): "
                           "off in eval mode, where PyTorch drops in training mode"),
    Requirement("dtype-device", "follows the dtype (float64) and device (meta) of its input and weights", 0.5),
    Requirement("gradients", "is differentiable: gradients reach the input and every weight", 0.5),
)


def feed_forward_public_probes():
    base = _feed_forward_probe("relu", "ReLU, batch 2, 3 positions, d_model=8, d_ff=16", (2, 3), seed=1)
    perm = torch.tensor([2, 0, 1])
    permuted = dict(base, id="permuted-positions", title="the positions of 'relu' in another order",
                    args=[base["args"][0][:, perm]])
    permuted["relation"] = {
        "base": "relu", "perm": perm, "axes": [[1]],
        "message": "the network is position-wise: reordering the positions must reorder the outputs the same way "
                   "and change nothing else (don't mix positions)",
    }
    return [
        *requiring("formula", [base, permuted]),
        *requiring("shapes", [
            _feed_forward_probe("4d", "a 4-D input (2, 2, 3, d_model)", (2, 2, 3), seed=3),
            _feed_forward_probe("strided", "a non-contiguous (transposed) input", (2, 4), seed=4, noncontiguous=True),
        ]),
        *requiring("activation", [
            _feed_forward_probe("gelu", 'activation="gelu"', (2, 3), activation="gelu", seed=2),
            _unknown_activation_probe("unknown-activation", "tanh", seed=5),
        ]),
        *requiring("dropout", [
            _feed_forward_probe("dropout-eval", "dropout=1.0 in eval mode: dropout is off", (2, 3), dropout=1.0,
                                seed=6),
            _feed_forward_probe("dropout-train", "dropout=1.0 in training mode: every dropped value is zero", (2, 3),
                                dropout=1.0, seed=7, training=True),
        ]),
        *requiring("dtype-device", [
            _feed_forward_probe("float64", "float64 input and weights", (2, 3), seed=8, dtype="float64"),
            _feed_forward_probe("meta", "input and weights on the meta device", (2, 3), seed=9, device="meta"),
        ]),
        *requiring("gradients", [
            with_gradients(_feed_forward_probe("grad", "batch 2, 3 positions", (2, 3), seed=10),
                           PositionwiseFeedForward, seed=11),
        ]),
    ]


def feed_forward_hidden_probes(devices=("cpu",)):
    probes = [
        *requiring("formula", [
            _feed_forward_probe("wide", "batch 3, 5 positions, d_model=16, d_ff=64", (3, 5), 16, 64, seed=20),
            _feed_forward_probe("one-position", "a single position", (2, 1), seed=21),
            _feed_forward_probe("narrow", "d_ff smaller than d_model", (2, 3), 8, 4, seed=22),
        ]),
        *requiring("shapes", [
            _feed_forward_probe("4d-2", "a 4-D input (3, 2, 4, d_model)", (3, 2, 4), seed=23),
            _feed_forward_probe("strided-2", "a non-contiguous input, 6 positions", (3, 6), seed=24,
                                noncontiguous=True),
        ]),
        *requiring("activation", [
            _feed_forward_probe("gelu-2", 'activation="gelu", batch 3, 4 positions, d_model=16', (3, 4), 16, 32,
                                activation="gelu", seed=25),
            _unknown_activation_probe("unknown-activation-2", "swish", seed=26),
        ]),
        *requiring("dropout", [
            _feed_forward_probe("dropout-eval-2", "dropout=1.0 in eval mode, batch 3, 4 positions", (3, 4),
                                dropout=1.0, seed=27),
            _feed_forward_probe("dropout-train-2", "dropout=1.0 in training mode, batch 3, 4 positions", (3, 4),
                                dropout=1.0, seed=28, training=True),
        ]),
        *requiring("dtype-device", [
            _feed_forward_probe("float64-2", "float64, batch 3, 5 positions, d_model=16, d_ff=32", (3, 5), 16, 32,
                                seed=29, dtype="float64"),
            _feed_forward_probe("meta-2", "on the meta device, batch 3, 5 positions", (3, 5), seed=30, device="meta"),
            *[on_device(_feed_forward_probe("device", "batch 2, 3 positions", (2, 3), seed=31), device)
              for device in devices if device != "cpu"],
        ]),
        *requiring("gradients", [
            with_gradients(_feed_forward_probe("grad-2", "batch 3, 4 positions, d_model=16", (3, 4), 16, 32, seed=32),
                           PositionwiseFeedForward, seed=33),
        ]),
    ]
    return feed_forward_public_probes() + probes


# ----------------------------------------------------------------------------- EncoderLayer
def _encoder_layer_probe(id, title, B, T, d_model=D_MODEL, heads=HEADS, d_ff=D_FF, norm_first=False, lengths=None,
                         attn_mask=None, dropout=None, activation=None, seed=0, dtype="float32", **extra):
    x = randn(B, T, d_model, seed=seed + 100, dtype=dtype)
    kwargs = {}
    if lengths is not None:
        kwargs["key_padding_mask"] = _padding(lengths, T)
    if attn_mask is not None:
        kwargs["attn_mask"] = attn_mask
    init = {"norm_first": norm_first}
    if dropout is not None:
        init["dropout"] = dropout
    if activation is not None:
        init["activation"] = activation
    return module_probe(id, title, EncoderLayer, (d_model, heads, d_ff), init, (x,), kwargs, seed=seed, dtype=dtype,
                        output_names=("output",), **extra)


ENCODER_LAYER_REQUIREMENTS = (
    Requirement("post-norm", "post-norm (the default): x = norm1(x + attention(x)), then x = norm2(x + ff(x))", 2),
    Requirement("pre-norm", "pre-norm (norm_first=True): x = x + attention(norm1(x)), then x = x + ff(norm2(x)), "
                            "and no norm after them", 1.5),
    Requirement("masks", "passes key_padding_mask and attn_mask (bool or float) on to self-attention, alone or "
                         "together"),
    Requirement("dropout", "applies self.dropout to each sublayer's output before the residual sum: off in eval "
                           "mode, where PyTorch drops in training mode"),
    Requirement("activation", 'builds its feed-forward network with `activation`, as the given __init__ does: '
                              'activation="gelu" gives GELU', 0.5),
    Requirement("dtype-device", "follows the dtype (float64) and device (meta) of its input and weights", 0.5),
    Requirement("gradients", "is differentiable: gradients reach the input and every weight", 0.5),
)


def encoder_layer_public_probes():
    base = _encoder_layer_probe("post-norm", "post-norm (the paper's), batch 2, 4 tokens, d_model=8, 2 heads", 2, 4,
                                seed=1)
    perm = torch.tensor([3, 1, 0, 2])
    permuted = dict(base, id="permuted-tokens", title="the tokens of 'post-norm' in another order",
                    args=[base["args"][0][:, perm]])
    permuted["relation"] = {
        "base": "post-norm", "perm": perm, "axes": [[1]],
        "message": "without masks or positions an encoder layer is permutation-equivariant: reordering the tokens "
                   "must reorder the outputs the same way",
    }
    return [
        *requiring("post-norm", [base, permuted]),
        *requiring("pre-norm", [_encoder_layer_probe("pre-norm", "pre-norm (norm_first=True), batch 2, 4 tokens", 2, 4,
                                                     norm_first=True, seed=2)]),
        *requiring("masks", [
            _encoder_layer_probe("both-masks", "a boolean attn_mask (T, T) and a key padding mask (B, T) together", 2, 5,
                                 lengths=[5, 3], attn_mask=_causal(5), seed=7),
            _encoder_layer_probe("both-masks-float", "a float attn_mask and a key padding mask together", 2, 5,
                                 lengths=[4, 5], attn_mask=randn(5, 5, seed=14), seed=15),
            _encoder_layer_probe("padding", "a key padding mask (B, T): the second sequence has 2 real tokens of 4",
                                 2, 4, lengths=[4, 2], seed=3),
            _encoder_layer_probe("attn-mask", "a boolean attn_mask (T, T), True above the diagonal", 2, 5,
                                 attn_mask=_causal(5), seed=4),
            _encoder_layer_probe("float-mask", "a float attn_mask (T, T), added to the scores", 2, 5,
                                 attn_mask=randn(5, 5, seed=5), seed=6),
        ]),
        *requiring("dropout", [
            _encoder_layer_probe("dropout-eval", "dropout=1.0 in eval mode: dropout is off", 2, 4, dropout=1.0, seed=8),
            _encoder_layer_probe("dropout-train", "dropout=1.0 in training mode: every dropped value is zero", 2, 4,
                                 dropout=1.0, seed=9, training=True),
        ]),
        *requiring("activation", [
            _encoder_layer_probe("gelu", 'activation="gelu", batch 2, 4 tokens', 2, 4, activation="gelu", seed=16),
        ]),
        *requiring("dtype-device", [
            _encoder_layer_probe("float64", "float64 input and weights", 2, 4, seed=10, dtype="float64"),
            _encoder_layer_probe("meta", "input and weights on the meta device", 2, 4, seed=11, device="meta"),
        ]),
        *requiring("gradients", [
            with_gradients(_encoder_layer_probe("grad", "batch 2, 4 tokens", 2, 4, seed=12), EncoderLayer, seed=13),
        ]),
    ]


def encoder_layer_hidden_probes(devices=("cpu",)):
    probes = [
        *requiring("post-norm", [
            _encoder_layer_probe("wide", "batch 3, 6 tokens, d_model=16, 4 heads", 3, 6, 16, 4, 32, seed=20),
            _encoder_layer_probe("one-head", "a single head", 2, 4, heads=1, seed=21),
            _encoder_layer_probe("one-token", "a single token", 2, 1, seed=22),
        ]),
        *requiring("pre-norm", [
            _encoder_layer_probe("pre-norm-wide", "pre-norm, batch 3, 6 tokens, d_model=16, 4 heads", 3, 6, 16, 4, 32,
                                 norm_first=True, seed=23),
            _encoder_layer_probe("pre-norm-many-heads", "pre-norm, 8 heads of size 2", 2, 4, 16, 8, 32,
                                 norm_first=True, seed=24),
        ]),
        *requiring("masks", [
            _encoder_layer_probe("both-masks-2", "a boolean attn_mask and a key padding mask, batch 3", 3, 6,
                                 lengths=[6, 2, 4], attn_mask=_causal(6), seed=28),
            _encoder_layer_probe("both-masks-float-2", "a float attn_mask with -inf entries and a key padding mask",
                                 3, 5, lengths=[2, 5, 4], attn_mask=additive(_causal(5)), seed=36),
            _encoder_layer_probe("padding-2", "a key padding mask, batch 3, lengths 5, 1 and 3", 3, 5,
                                 lengths=[5, 1, 3], seed=25),
            _encoder_layer_probe("attn-mask-2", "a random boolean attn_mask (T, T)", 3, 6,
                                 attn_mask=random_bool_mask(6, 6, seed=26), seed=26),
            _encoder_layer_probe("float-mask-2", "a float attn_mask with -inf above the diagonal", 2, 5,
                                 attn_mask=additive(_causal(5)), seed=27),
        ]),
        *requiring("dropout", [
            _encoder_layer_probe("dropout-eval-2", "dropout=1.0 in eval mode, batch 3, 5 tokens", 3, 5, dropout=1.0,
                                 seed=29),
            _encoder_layer_probe("dropout-train-2", "dropout=1.0 in training mode, batch 3, 5 tokens", 3, 5,
                                 dropout=1.0, seed=30, training=True),
        ]),
        *requiring("activation", [
            _encoder_layer_probe("gelu-wide", 'activation="gelu", batch 3, 5 tokens, d_model=16, 4 heads', 3, 5, 16, 4,
                                 32, activation="gelu", seed=37),
        ]),
        *requiring("dtype-device", [
            _encoder_layer_probe("float64-2", "float64, batch 3, 6 tokens, d_model=16, 4 heads", 3, 6, 16, 4, 32,
                                 seed=31, dtype="float64"),
            _encoder_layer_probe("meta-2", "on the meta device, batch 3, 5 tokens", 3, 5, seed=32, device="meta"),
            *[on_device(_encoder_layer_probe("device", "batch 2, 4 tokens", 2, 4, seed=33), device)
              for device in devices if device != "cpu"],
        ]),
        *requiring("gradients", [
            with_gradients(_encoder_layer_probe("grad-2", "batch 3, 5 tokens, d_model=16, 4 heads", 3, 5, 16, 4, 32,
                                                seed=34), EncoderLayer, seed=35),
        ]),
    ]
    return encoder_layer_public_probes() + probes


# ----------------------------------------------------------------------------- Encoder
def _encoder_probe(id, title, B, T, num_layers=2, d_model=D_MODEL, heads=HEADS, d_ff=D_FF, norm_first=False,
                   lengths=None, dropout=None, activation=None, seed=0, dtype="float32", **extra):
    x = randn(B, T, d_model, seed=seed + 100, dtype=dtype)
    kwargs = {} if lengths is None else {"key_padding_mask": _padding(lengths, T)}
    init = {"norm_first": norm_first}
    if dropout is not None:
        init["dropout"] = dropout
    if activation is not None:
        init["activation"] = activation
    return module_probe(id, title, Encoder, (num_layers, d_model, heads, d_ff), init, (x,), kwargs, seed=seed,
                        dtype=dtype, output_names=("output",), **extra)


ENCODER_REQUIREMENTS = (
    Requirement("post-norm", "runs the layers in order, each on the previous one's output; a post-norm stack has "
                             "no final norm", 1.5),
    Requirement("pre-norm", "a pre-norm stack (norm_first=True) applies self.norm once, after the last layer"),
    Requirement("padding", "gives key_padding_mask to every layer"),
    Requirement("dropout", "adds no dropout of its own (its layers have theirs): off in eval mode, where PyTorch "
                           "drops in training mode", 0.5),
    Requirement("activation", 'builds every layer with `activation`, as the given __init__ does: activation="gelu" '
                              "reaches each layer's feed-forward network", 0.5),
    Requirement("dtype-device", "follows the dtype (float64) and device (meta) of its input and weights", 0.5),
    Requirement("gradients", "is differentiable: gradients reach the input and every weight", 0.5),
)


def encoder_public_probes():
    return [
        *requiring("post-norm", [_encoder_probe("post-norm", "2 post-norm layers, batch 2, 4 tokens, d_model=8", 2, 4,
                                                seed=1)]),
        *requiring("pre-norm", [_encoder_probe("pre-norm", "2 pre-norm layers (norm_first=True)", 2, 4,
                                               norm_first=True, seed=2)]),
        *requiring("padding", [_encoder_probe("padding", "a key padding mask: the second sequence has 3 real tokens "
                                              "of 5", 2, 5, lengths=[5, 3], seed=3)]),
        *requiring("dropout", [
            _encoder_probe("dropout-eval", "dropout=1.0 in eval mode: dropout is off", 2, 4, dropout=1.0, seed=4),
            _encoder_probe("dropout-train", "dropout=1.0 in training mode: every dropped value is zero", 2, 4,
                           dropout=1.0, seed=5, training=True),
        ]),
        *requiring("activation", [
            _encoder_probe("gelu", 'activation="gelu": 2 layers, batch 2, 4 tokens', 2, 4, activation="gelu", seed=10),
        ]),
        *requiring("dtype-device", [
            _encoder_probe("float64", "float64 input and weights", 2, 4, seed=6, dtype="float64"),
            _encoder_probe("meta", "input and weights on the meta device", 2, 4, seed=7, device="meta"),
        ]),
        *requiring("gradients", [with_gradients(_encoder_probe("grad", "2 layers, batch 2, 4 tokens", 2, 4, seed=8),
                                                Encoder, seed=9)]),
    ]


def encoder_hidden_probes(devices=("cpu",)):
    probes = [
        *requiring("post-norm", [
            _encoder_probe("one-layer", "a single post-norm layer", 2, 4, num_layers=1, seed=20),
            _encoder_probe("three-layers", "3 post-norm layers, batch 3, 5 tokens", 3, 5, num_layers=3, seed=21),
            _encoder_probe("wide", "d_model=16, 4 heads", 2, 6, 2, 16, 4, 32, seed=22),
        ]),
        *requiring("pre-norm", [
            _encoder_probe("one-layer-pre", "a single pre-norm layer", 2, 4, num_layers=1, norm_first=True, seed=23),
            _encoder_probe("three-layers-pre", "3 pre-norm layers, batch 3, 5 tokens", 3, 5, num_layers=3,
                           norm_first=True, seed=24),
        ]),
        *requiring("padding", [
            _encoder_probe("padding-3", "3 layers with a key padding mask, lengths 5, 2 and 4", 3, 5, num_layers=3,
                           lengths=[5, 2, 4], seed=25),
            _encoder_probe("padding-2", "2 layers with a key padding mask, lengths 1 and 6", 2, 6,
                           lengths=[1, 6], seed=26),
        ]),
        *requiring("dropout", [
            _encoder_probe("dropout-eval-2", "dropout=1.0 in eval mode, 3 layers", 3, 5, num_layers=3, dropout=1.0,
                           seed=27),
            _encoder_probe("dropout-train-2", "dropout=1.0 in training mode, 3 layers", 3, 5, num_layers=3,
                           dropout=1.0, seed=28, training=True),
        ]),
        *requiring("activation", [
            _encoder_probe("gelu-3-layers", 'activation="gelu", 3 layers, batch 3, 5 tokens', 3, 5, num_layers=3,
                           activation="gelu", seed=34),
        ]),
        *requiring("dtype-device", [
            _encoder_probe("float64-2", "float64, d_model=16, 4 heads", 2, 6, 2, 16, 4, 32, seed=29, dtype="float64"),
            _encoder_probe("meta-2", "on the meta device, 3 layers", 3, 5, num_layers=3, seed=30, device="meta"),
            *[on_device(_encoder_probe("device", "2 layers, batch 2, 4 tokens", 2, 4, seed=31), device)
              for device in devices if device != "cpu"],
        ]),
        *requiring("gradients", [
            with_gradients(_encoder_probe("grad-2", "3 layers, batch 3, 5 tokens", 3, 5, num_layers=3, seed=32),
                           Encoder, seed=33),
        ]),
    ]
    return encoder_public_probes() + probes


EXERCISES = [
    ExerciseChecks("PositionwiseFeedForward", PositionwiseFeedForward, feed_forward_public_probes,
                   feed_forward_hidden_probes, FEED_FORWARD_MISTAKES, requirements=FEED_FORWARD_REQUIREMENTS),
    ExerciseChecks("EncoderLayer", EncoderLayer, encoder_layer_public_probes, encoder_layer_hidden_probes,
                   ENCODER_LAYER_MISTAKES, requirements=ENCODER_LAYER_REQUIREMENTS),
    ExerciseChecks("Encoder", Encoder, encoder_public_probes, encoder_hidden_probes, ENCODER_MISTAKES,
                   requirements=ENCODER_REQUIREMENTS),
]
