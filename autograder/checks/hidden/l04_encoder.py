"""Lesson 04 checks: PositionwiseFeedForward, EncoderLayer and Encoder.

The weights come from the reference, perturbed so that no LayerNorm is the identity and no
bias is zero. Public probes are small and shown to students (their expected values are
stored as data); hidden probes add GELU, pre-norm, padding and attention masks, float64,
gradients, non-contiguous inputs, one head and many, deeper stacks and the input's device.
Padding always leaves every row at least one real token: fully blocked rows are lesson 05's.
"""

import torch
import torch.nn.functional as F

from ...reference import Encoder, EncoderLayer, PositionwiseFeedForward
from .probes import ExerciseChecks, additive, module_probe, on_device, randn, with_gradients

D_MODEL, HEADS, D_FF = 8, 2, 16


def _variant(base, variant):
    """A subclass of a reference module whose forward takes the wrong turn named ``variant``."""
    return type(f"{base.__name__}_{variant}", (base,), {"variant": variant})


def _padding(lengths, T):
    """(B, T) key padding mask, True after each row's length: every row keeps its first tokens."""
    return torch.arange(T)[None, :] >= torch.tensor(lengths)[:, None]  # (B, T)


def _causal(T):
    return torch.ones(T, T, dtype=torch.bool).triu(1)  # (T, T)


# ----------------------------------------------------------------------------- mistakes
class _FeedForwardMistake(PositionwiseFeedForward):
    variant = None

    def forward(self, x):
        if self.variant == "activation_last":
            return self.activation(self.linear2(self.linear1(x)))
        if self.variant == "activation_first":
            return self.linear2(self.linear1(self.activation(x)))
        if self.variant == "no_activation":
            return self.linear2(self.linear1(x))
        if self.variant == "always_relu":
            return self.linear2(F.relu(self.linear1(x)))
        if self.variant == "always_gelu":
            return self.linear2(F.gelu(self.linear1(x)))
        raise AssertionError(self.variant)


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
]


class _EncoderLayerMistake(EncoderLayer):
    variant = None

    def forward(self, x, key_padding_mask=None, attn_mask=None):
        v = self.variant
        if v == "padding_mask_dropped":
            key_padding_mask = None
        if v == "attn_mask_dropped":
            attn_mask = None

        def attend(h):
            return self._self_attention(h, key_padding_mask, attn_mask)

        norm1 = self.norm1
        norm2 = self.norm1 if v == "norm1_twice" else self.norm2
        pre_norm = self.norm_first
        if v == "norm_first_ignored":
            pre_norm = False
        if v == "norm_first_inverted":
            pre_norm = not self.norm_first
        if pre_norm:
            if v == "no_residual":
                x = attend(norm1(x))
                return self.ff(norm2(x))
            if v == "residual_of_normalized":
                h = norm1(x)
                x = h + attend(h)
                h = norm2(x)
                return h + self.ff(h)
            x = x + attend(norm1(x))
            return x + self.ff(norm2(x))
        if v == "no_residual":
            x = norm1(attend(x))
            return norm2(self.ff(x))
        if v == "norm_sublayer_only":
            x = x + norm1(attend(x))
            return x + norm2(self.ff(x))
        if v == "ff_gets_layer_input":
            h = norm1(x + attend(x))
            return norm2(h + self.ff(x))
        x = norm1(x + attend(x))
        return norm2(x + self.ff(x))


ENCODER_LAYER_MISTAKES = [
    ("norm_first is ignored: with norm_first=True (pre-norm) each sublayer sees the normalized input, "
     "x + sublayer(norm(x)), and nothing is normalized after the residual",
     _variant(_EncoderLayerMistake, "norm_first_ignored")),
    ("pre-norm and post-norm are swapped: norm_first=False (the paper's post-norm) is norm(x + sublayer(x)); "
     "norm_first=True is x + sublayer(norm(x))", _variant(_EncoderLayerMistake, "norm_first_inverted")),
    ("the residual connection is missing: add each sublayer's input back to its output, x + sublayer(x)",
     _variant(_EncoderLayerMistake, "no_residual")),
    ("in pre-norm the residual adds back the normalized input; it should add the un-normalized x: "
     "x = x + sublayer(norm(x))", _variant(_EncoderLayerMistake, "residual_of_normalized")),
    ("the LayerNorm is applied to the sublayer's output only (x + norm(sublayer(x))); post-norm normalizes the "
     "sum: norm(x + sublayer(x))", _variant(_EncoderLayerMistake, "norm_sublayer_only")),
    ("the feed-forward sublayer gets the layer's input; it should get the output of the attention sublayer "
     "(after its residual and norm)", _variant(_EncoderLayerMistake, "ff_gets_layer_input")),
    ("key_padding_mask is not passed on to self-attention: padding tokens still get attention",
     _variant(_EncoderLayerMistake, "padding_mask_dropped")),
    ("attn_mask is not passed on to self-attention", _variant(_EncoderLayerMistake, "attn_mask_dropped")),
    ("norm1 is used for both sublayers: the feed-forward sublayer has its own LayerNorm, norm2",
     _variant(_EncoderLayerMistake, "norm1_twice")),
]


class _EncoderMistake(Encoder):
    variant = None

    def forward(self, x, key_padding_mask=None):
        v = self.variant
        layers = [self.layers[0]] * len(self.layers) if v == "first_layer_reused" else self.layers
        mask = None if v == "mask_dropped" else key_padding_mask
        out = x
        for layer in layers:
            out = layer(x if v == "not_chained" else out, key_padding_mask=mask)  # (B, T, C)
            if v == "norm_every_layer" and self.norm is not None:
                out = self.norm(out)
        if self.norm is None or v in ("no_final_norm", "norm_every_layer"):
            return out
        return self.norm(out)


ENCODER_MISTAKES = [
    ("the final LayerNorm of a pre-norm stack is missing: return self.norm(x) when self.norm is not None",
     _variant(_EncoderMistake, "no_final_norm")),
    ("the final LayerNorm is applied after every layer; apply it once, after the last layer",
     _variant(_EncoderMistake, "norm_every_layer")),
    ("key_padding_mask is not passed on to the layers", _variant(_EncoderMistake, "mask_dropped")),
    ("the first layer is used for every step: loop over self.layers, each layer has its own weights",
     _variant(_EncoderMistake, "first_layer_reused")),
    ("every layer gets the encoder's input: feed each layer's output to the next layer",
     _variant(_EncoderMistake, "not_chained")),
]


# ----------------------------------------------------------------------------- probes
def _feed_forward_probe(id, title, B, T, d_model=D_MODEL, d_ff=D_FF, activation="relu", seed=0, dtype="float32",
                        **extra):
    x = randn(B, T, d_model, seed=seed + 100, dtype=dtype)
    return module_probe(id, title, PositionwiseFeedForward, (d_model, d_ff), {"activation": activation}, (x,),
                        seed=seed, dtype=dtype, output_names=("output",), **extra)


def feed_forward_public_probes():
    base = _feed_forward_probe("relu", "ReLU, batch 2, 3 positions, d_model=8, d_ff=16", 2, 3, seed=1)
    perm = torch.tensor([2, 0, 1])
    permuted = dict(base, id="permuted-positions", title="the same positions in another order",
                    args=[base["args"][0][:, perm]])
    permuted["relation"] = {
        "base": "relu", "perm": perm, "axes": [[1]],
        "message": "the network is position-wise: reordering the positions must reorder the outputs the same way "
                   "and change nothing else (don't mix positions)",
    }
    return [
        base,
        _feed_forward_probe("gelu", "activation='gelu'", 2, 3, activation="gelu", seed=2),
        permuted,
    ]


def feed_forward_hidden_probes(devices=("cpu",)):
    unknown = {"id": "unknown-activation", "title": "activation='tanh', which the course does not offer",
               "construct": {"args": [D_MODEL, D_FF], "kwargs": {"activation": "tanh"}, "state_dict": None},
               "method": "forward", "args": [randn(1, 2, D_MODEL, seed=3)], "kwargs": {}, "dtype": "float32",
               "output_names": ["output"]}
    probes = [
        _feed_forward_probe("float64", "float64, batch 3, 5 positions, d_model=16, d_ff=32", 3, 5, 16, 32, seed=10,
                            dtype="float64"),
        _feed_forward_probe("gelu64", "GELU in float64", 2, 4, 16, 32, activation="gelu", seed=11, dtype="float64"),
        _feed_forward_probe("one-position", "a single position", 2, 1, seed=12),
        _feed_forward_probe("narrow", "d_ff smaller than d_model", 2, 3, 8, 4, seed=13),
        _feed_forward_probe("noncontiguous", "a non-contiguous input", 2, 6, seed=14, activation="gelu",
                            noncontiguous=True),
        unknown,
    ]
    for activation, seed in (("relu", 15), ("gelu", 17)):
        probes.append(with_gradients(_feed_forward_probe(f"grad-{activation}", f"{activation}", 2, 3,
                                                         activation=activation, seed=seed),
                                     PositionwiseFeedForward, seed=seed + 1))
    for device in devices:
        if device != "cpu":
            probes.append(on_device(_feed_forward_probe("device", "batch 2, 3 positions", 2, 3, seed=19), device))
    return feed_forward_public_probes() + probes


def _encoder_layer_probe(id, title, B, T, d_model=D_MODEL, heads=HEADS, d_ff=D_FF, norm_first=False,
                         activation="relu", lengths=None, attn_mask=None, seed=0, dtype="float32", **extra):
    x = randn(B, T, d_model, seed=seed + 100, dtype=dtype)
    kwargs = {}
    if lengths is not None:
        kwargs["key_padding_mask"] = _padding(lengths, T)
    if attn_mask is not None:
        kwargs["attn_mask"] = attn_mask
    init = {"norm_first": norm_first, "activation": activation}
    return module_probe(id, title, EncoderLayer, (d_model, heads, d_ff), init, (x,), kwargs, seed=seed, dtype=dtype,
                        output_names=("output",), **extra)


def encoder_layer_public_probes():
    base = _encoder_layer_probe("post-norm", "post-norm (the paper's), batch 2, 4 tokens, d_model=8, 2 heads", 2, 4,
                                seed=1)
    perm = torch.tensor([3, 1, 0, 2])
    permuted = dict(base, id="permuted-tokens", title="the same tokens in another order",
                    args=[base["args"][0][:, perm]])
    permuted["relation"] = {
        "base": "post-norm", "perm": perm, "axes": [[1]],
        "message": "without masks or positions an encoder layer is permutation-equivariant: reordering the tokens "
                   "must reorder the outputs the same way",
    }
    return [
        base,
        _encoder_layer_probe("pre-norm", "pre-norm (norm_first=True)", 2, 4, norm_first=True, seed=2),
        _encoder_layer_probe("padding", "a key padding mask: the second sequence has 2 real tokens of 4", 2, 4,
                             lengths=[4, 2], seed=3),
        permuted,
    ]


def encoder_layer_hidden_probes(devices=("cpu",)):
    probes = [
        _encoder_layer_probe("pre-norm-padding", "pre-norm with a key padding mask", 3, 5, norm_first=True,
                             lengths=[5, 1, 3], seed=10),
        _encoder_layer_probe("gelu", "post-norm, GELU", 2, 4, activation="gelu", seed=11),
        _encoder_layer_probe("gelu-pre", "pre-norm, GELU", 2, 4, norm_first=True, activation="gelu", seed=12),
        _encoder_layer_probe("attn-mask", "a boolean attn_mask (T, T)", 2, 5, attn_mask=_causal(5), seed=13),
        _encoder_layer_probe("float-mask", "a float attn_mask added to the scores", 2, 5, attn_mask=randn(5, 5, seed=14),
                             seed=15),
        _encoder_layer_probe("float-inf-mask", "a float attn_mask with -inf above the diagonal", 2, 5,
                             attn_mask=additive(_causal(5)), seed=28),
        _encoder_layer_probe("both-masks", "pre-norm with an attn_mask and a key padding mask", 2, 5, norm_first=True,
                             lengths=[3, 5], attn_mask=_causal(5), seed=16),
        _encoder_layer_probe("float64", "float64, batch 3, 6 tokens, d_model=16, 4 heads", 3, 6, 16, 4, 32,
                             lengths=[6, 4, 2], seed=17, dtype="float64"),
        _encoder_layer_probe("float64-pre", "float64, pre-norm", 2, 5, 16, 4, 32, norm_first=True, seed=18,
                             dtype="float64"),
        _encoder_layer_probe("one-head", "a single head", 2, 4, heads=1, lengths=[2, 4], seed=19),
        _encoder_layer_probe("many-heads", "8 heads of size 2", 2, 4, 16, 8, 32, norm_first=True, seed=20),
        _encoder_layer_probe("one-token", "a single token", 2, 1, seed=21),
        _encoder_layer_probe("noncontiguous", "a non-contiguous input", 2, 6, lengths=[6, 3], seed=22,
                             noncontiguous=True),
    ]
    probes.append(with_gradients(_encoder_layer_probe("grad", "post-norm with padding", 2, 4, lengths=[4, 3], seed=23),
                                 EncoderLayer, seed=24))
    probes.append(with_gradients(_encoder_layer_probe("grad-pre", "pre-norm, GELU, float64", 2, 4, norm_first=True,
                                                      activation="gelu", seed=25, dtype="float64"),
                                 EncoderLayer, seed=26))
    for device in devices:
        if device != "cpu":
            probes.append(on_device(_encoder_layer_probe("device", "pre-norm with padding", 2, 4, norm_first=True,
                                                         lengths=[4, 2], seed=27), device))
    return encoder_layer_public_probes() + probes


def _encoder_probe(id, title, B, T, num_layers=2, d_model=D_MODEL, heads=HEADS, d_ff=D_FF, norm_first=False,
                   activation="relu", lengths=None, seed=0, dtype="float32", **extra):
    x = randn(B, T, d_model, seed=seed + 100, dtype=dtype)
    kwargs = {} if lengths is None else {"key_padding_mask": _padding(lengths, T)}
    init = {"norm_first": norm_first, "activation": activation}
    return module_probe(id, title, Encoder, (num_layers, d_model, heads, d_ff), init, (x,), kwargs, seed=seed,
                        dtype=dtype, output_names=("output",), **extra)


def encoder_public_probes():
    return [
        _encoder_probe("post-norm", "2 post-norm layers (no final norm), batch 2, 4 tokens, d_model=8", 2, 4, seed=1),
        _encoder_probe("pre-norm", "2 pre-norm layers and the final norm", 2, 4, norm_first=True, seed=2),
        _encoder_probe("padding", "a key padding mask: the second sequence has 3 real tokens of 5", 2, 5,
                       lengths=[5, 3], seed=3),
    ]


def encoder_hidden_probes(devices=("cpu",)):
    probes = [
        _encoder_probe("one-layer", "a single post-norm layer", 2, 4, num_layers=1, seed=10),
        _encoder_probe("one-layer-pre", "a single pre-norm layer and the final norm", 2, 4, num_layers=1,
                       norm_first=True, seed=11),
        _encoder_probe("three-layers", "3 post-norm layers with padding", 3, 5, num_layers=3, lengths=[5, 2, 4],
                       seed=12),
        _encoder_probe("three-layers-pre", "3 pre-norm layers with padding", 3, 5, num_layers=3, norm_first=True,
                       lengths=[1, 5, 3], seed=13),
        _encoder_probe("gelu", "GELU, pre-norm", 2, 4, norm_first=True, activation="gelu", seed=14),
        _encoder_probe("float64", "float64, d_model=16, 4 heads", 2, 6, 2, 16, 4, 32, lengths=[6, 4], seed=15,
                       dtype="float64"),
        _encoder_probe("noncontiguous", "a non-contiguous input", 2, 5, norm_first=True, lengths=[5, 4], seed=16,
                       noncontiguous=True),
    ]
    probes.append(with_gradients(_encoder_probe("grad", "2 pre-norm layers with padding", 2, 4, norm_first=True,
                                                lengths=[4, 2], seed=17), Encoder, seed=18))
    probes.append(with_gradients(_encoder_probe("grad-post", "2 post-norm layers, float64", 2, 4, seed=19,
                                                dtype="float64"), Encoder, seed=20))
    for device in devices:
        if device != "cpu":
            probes.append(on_device(_encoder_probe("device", "2 pre-norm layers with padding", 2, 4, norm_first=True,
                                                   lengths=[4, 3], seed=21), device))
    return encoder_public_probes() + probes


EXERCISES = [
    ExerciseChecks("PositionwiseFeedForward", PositionwiseFeedForward, feed_forward_public_probes,
                   feed_forward_hidden_probes, FEED_FORWARD_MISTAKES),
    ExerciseChecks("EncoderLayer", EncoderLayer, encoder_layer_public_probes, encoder_layer_hidden_probes,
                   ENCODER_LAYER_MISTAKES),
    ExerciseChecks("Encoder", Encoder, encoder_public_probes, encoder_hidden_probes, ENCODER_MISTAKES),
]
