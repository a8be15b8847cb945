"""Lesson 06 checks: Transformer, count_parameters, noam_lr and greedy_decode.

Each exercise's checks are grouped into the requirements its text states, the core behaviour
first. Public probes are small and shown to students (their expected values are stored as data);
hidden probes try the same requirements on other sizes, seeds and values, never another kind of
input.

The Transformer probes use tiny models (vocabularies of 11 and 13 tokens, d_model 8 or 16, two
layers) with the reference's weights, perturbed, and call forward, encode or decode (the probe's
``method``). Batch, source and target lengths always differ from one another, so that no size
mix-up goes unseen. count_parameters runs on the runner's fixtures (nn.Linear, a module that
shares a weight, one with a frozen parameter, nn.BatchNorm1d, a small nn.Transformer).
greedy_decode runs on the runner's ScriptedModel, whose next-token logits are a fixed table, so
the tokens it must produce are known; on a probe of the calls, the mode or the masks, a decode
made otherwise than the lesson says (the source encoded again, gradients on, training mode, a
mask not passed on or inferred) reads the table with its vocabulary rolled, so the tokens show
the mistake: the returned values decide, never the model's record of its use (written in the
student's process), which only words the diagnosis. The mode the model is left in is read after
the call. ScriptedModel cannot run on the meta device (decoding stops on the values it
produces), so greedy_decode's device is not checked (the lesson says so).
"""

import torch
import torch.nn.functional as F
from torch import nn

from ...reference import Transformer, causal_mask, count_parameters, greedy_decode, noam_lr
from ..properties import FIXTURE_HINTS
from .kinds import activation_not_passed, reusing, sublayer_reused
from .probes import ExerciseChecks, Requirement, function_probe, module_probe, on_device, randn, requiring, with_gradients

# The plain case: two post-norm layers (so that a stack cut short shows), no dropout, no masks.
PLAIN = {"d_model": 8, "num_heads": 2, "num_layers": 2, "d_ff": 16, "max_len": 32, "dropout": 0.0}
WIDER = {"d_model": 16, "d_ff": 32}


def _variant(base, variant):
    """A subclass of a reference module whose methods take the wrong turn named ``variant``."""
    return type(f"{base.__name__}_{variant}", (base,), {"variant": variant})


def _padding(lengths, T):
    """(B, T) key padding mask, True from each row's length on."""
    return torch.arange(T)[None, :] >= torch.tensor(lengths)[:, None]  # (B, T)


# ----------------------------------------------------------------------------- Transformer
class _TransformerMistake(Transformer):
    """The reference Transformer with one wrong turn, named by ``variant``."""

    variant = None

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.variant == "untied" and self.generator.weight is self.src_embed.embedding.weight:
            # Copies of the one matrix instead of the matrix itself.
            self.tgt_embed.embedding.weight = nn.Parameter(self.src_embed.embedding.weight.detach().clone())
            self.generator.weight = nn.Parameter(self.src_embed.embedding.weight.detach().clone())

    def _inferred(self, tokens, mask, which):
        return tokens == self.pad_id if mask is None and self.variant in which else mask  # (B, S)

    def _positions(self, x):
        if self.variant == "pe_without_dropout":
            return x + self.pos_enc.pe[: x.size(1)]  # (B, T, C)
        return self.pos_enc(x)

    def _stack(self, stack, x, *args, **kwargs):
        if self.variant != "no_final_norm":
            return stack(x, *args, **kwargs)
        for layer in stack.layers:
            x = layer(x, *args, **kwargs)  # (B, T, C)
        return x

    def encode(self, src, src_key_padding_mask=None):
        x = self.src_embed.embedding(src) if self.variant == "unscaled" else self.src_embed(src)  # (B, S, C)
        if self.variant != "no_source_positions":
            x = self._positions(x)
        mask = None if self.variant == "src_mask_dropped" else src_key_padding_mask
        if self.variant == "target_mask_to_encoder":
            mask = getattr(self, "_target_mask", mask)
        mask = self._inferred(src, mask, ("infer_src", "infer_src_encoder"))
        return self._stack(self.encoder, x, key_padding_mask=mask)  # (B, S, C)

    def decode(self, tgt, memory, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        y = self.tgt_embed.embedding(tgt) if self.variant == "unscaled" else self.tgt_embed(tgt)  # (B, T, C)
        if self.variant != "no_target_positions":
            y = self._positions(y)
        length = tgt.size(0) if self.variant == "causal_over_batch" else tgt.size(1)
        mask = None if self.variant == "no_causal_mask" else causal_mask(length, device=tgt.device)  # (T, T)
        if self.variant == "keep_mask":
            mask = ~mask
        tgt_mask = None if self.variant == "tgt_mask_dropped" else self._inferred(tgt, tgt_key_padding_mask,
                                                                                  ("infer_tgt",))
        hidden = self._stack(self.decoder, y, memory, mask, tgt_mask, memory_key_padding_mask)  # (B, T, C)
        return self.generator(hidden) if self.variant == "generator_in_decode" else hidden

    def forward(self, src, tgt, src_key_padding_mask=None, tgt_key_padding_mask=None):
        self._target_mask = tgt_key_padding_mask  # what a forward that encodes with the target's mask passes
        memory = self.encode(src, src_key_padding_mask)  # (B, S, C)
        memory_mask = None if self.variant == "memory_mask_dropped" else src_key_padding_mask
        if self.variant == "target_mask_as_memory":
            memory_mask = tgt_key_padding_mask
        memory_mask = self._inferred(src, memory_mask, ("infer_src", "infer_memory"))
        hidden = self.decode(tgt, memory, tgt_key_padding_mask, memory_mask)  # (B, T, C)
        if self.variant == "generator_in_decode":
            return hidden  # decode already applied the generator
        logits = self.generator(hidden)  # (B, T, V)
        return logits.softmax(dim=-1) if self.variant == "softmax" else logits


class _TransformerWithoutActivation(Transformer):
    """The given __init__ edited so that `activation` misses the stacks named in ``missing``: their layers use ReLU."""

    missing = ()

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for stack in self.missing:
            for layer in getattr(self, stack).layers:
                layer.ff.activation = F.relu  # what a layer built without activation uses


def _without_activation(*missing):
    return type(f"Transformer_without_activation_in_{'_'.join(missing)}", (_TransformerWithoutActivation,),
                {"missing": missing})


ACTIVATION_HINTS = {
    ("encoder", "decoder"): activation_not_passed("the encoder and the decoder, Encoder(..., norm_first, activation) "
                                                  "and Decoder(..., norm_first, activation)"),
    ("encoder",): activation_not_passed("the encoder, Encoder(..., norm_first, activation)"),
    ("decoder",): activation_not_passed("the decoder, Decoder(..., norm_first, activation)"),
}
SHARED_VOCABULARY_HINT = ("share_embeddings=True needs one vocabulary: one matrix cannot be both embeddings and the "
                          "generator when src_vocab_size != tgt_vocab_size, so the given __init__ raises a ValueError "
                          "then; keep that check")

# The two raise the same error (a (B, T) mask over S keys), so one hint names both.
TARGET_MASK_FOR_SOURCE = ("forward gives the target's padding mask where the source's belongs (to encode, or to "
                          "decode as memory_key_padding_mask): the memory is the encoded source, so "
                          "src_key_padding_mask goes to encode and, as memory_key_padding_mask, to decode")

INFERRED = ("masks are never inferred: a padding mask is used only when it is passed, so with none a token equal "
            "to pad_id is attended to like any other. ")
TRANSFORMER_MISTAKES = [
    ("the embeddings are not scaled by sqrt(d_model): call self.src_embed(src) and self.tgt_embed(tgt) (the "
     "TokenEmbedding modules), not their .embedding tables", _variant(_TransformerMistake, "unscaled")),
    ("the target tokens get no positional encoding: decode must add it too, self.pos_enc(self.tgt_embed(tgt))",
     _variant(_TransformerMistake, "no_target_positions")),
    ("the source tokens get no positional encoding: encode must add it, self.pos_enc(self.src_embed(src))",
     _variant(_TransformerMistake, "no_source_positions")),
    ("forward applies a softmax: it returns logits, generator(decode(...)); the loss (cross-entropy) applies the "
     "softmax itself", _variant(_TransformerMistake, "softmax")),
    ("decode applies the generator: it returns the decoder's hidden states (B, T, d_model), and forward applies "
     "self.generator to them", _variant(_TransformerMistake, "generator_in_decode")),
    ("decode doesn't apply the causal mask: build causal_mask(T, device=tgt.device) and pass it to the decoder as "
     "tgt_mask", _variant(_TransformerMistake, "no_causal_mask")),
    ("decode's causal mask is the wrong way round: True marks the FUTURE positions, the ones to block (causal_mask)",
     _variant(_TransformerMistake, "keep_mask")),
    ("forward doesn't pass src_key_padding_mask to the decoder as memory_key_padding_mask: the decoder attends to "
     "the source's padding", _variant(_TransformerMistake, "memory_mask_dropped")),
    ("src_key_padding_mask is not passed to the encoder: self.encoder(x, key_padding_mask=src_key_padding_mask)",
     _variant(_TransformerMistake, "src_mask_dropped")),
    ("tgt_key_padding_mask is not passed to the decoder: self.decoder(y, memory, tgt_mask, tgt_key_padding_mask, "
     "memory_key_padding_mask)", _variant(_TransformerMistake, "tgt_mask_dropped")),
    (INFERRED + "Here a source mask is built from pad_id for the encoder and the decoder's memory",
     _variant(_TransformerMistake, "infer_src")),
    (INFERRED + "Here a source mask is built from pad_id for the encoder", _variant(_TransformerMistake,
                                                                                    "infer_src_encoder")),
    (INFERRED + "Here a memory mask is built from pad_id for the decoder", _variant(_TransformerMistake,
                                                                                   "infer_memory")),
    (INFERRED + "Here a target mask is built from pad_id", _variant(_TransformerMistake, "infer_tgt")),
    ("with share_embeddings=True the two embeddings and the generator must be one matrix: assign the same "
     "Parameter (self.generator.weight = self.src_embed.embedding.weight, ...), not a copy of it",
     _variant(_TransformerMistake, "untied")),
    ("the pre-norm model misses its final LayerNorms: call self.encoder(...) and self.decoder(...) as whole stacks "
     "(with norm_first=True each ends with self.norm), not a loop over their layers",
     _variant(_TransformerMistake, "no_final_norm")),
    ("the positional encoding is added without its dropout: call self.pos_enc(x), which adds pe[:T] and then "
     "applies dropout (in training mode), rather than adding self.pos_enc.pe yourself",
     _variant(_TransformerMistake, "pe_without_dropout")),
    *[(hint, _without_activation(*missing)) for missing, hint in ACTIVATION_HINTS.items()],
    ("the causal mask is built over the batch size: it is (T, T) with T = tgt.size(1), the target's length",
     _variant(_TransformerMistake, "causal_over_batch")),
    (TARGET_MASK_FOR_SOURCE, _variant(_TransformerMistake, "target_mask_as_memory")),
    (TARGET_MASK_FOR_SOURCE, _variant(_TransformerMistake, "target_mask_to_encoder")),
    (sublayer_reused("encode", "tgt_embed", "src_embed"), reusing(Transformer, "src_embed", "tgt_embed")),
    (sublayer_reused("decode", "src_embed", "tgt_embed"), reusing(Transformer, "tgt_embed", "src_embed")),
]


def _tokens(B, T, vocab, seed, lengths=None, pad_id=0):
    """(B, T) int64 token ids, none of them pad_id except after each row's length."""
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, vocab, (B, T), generator=generator)
    tokens[tokens == pad_id] = (pad_id + 1) % vocab
    if lengths is not None:
        tokens = tokens.masked_fill(_padding(lengths, T), pad_id)
    return tokens


def _transformer_probe(id, title, B, S, T, vocab=(11, 13), config=None, method="forward", src_lengths=None,
                       tgt_lengths=None, future_from=None, seed=0, dtype="float32", **extra):
    """A probe of one Transformer method; B, S and T differ, so that no size mix-up goes unseen."""
    assert len({B, S, T}) == 3 or T == 1, (B, S, T)
    config = dict(PLAIN, **(config or {}))
    pad_id = config.get("pad_id", 0)
    src = _tokens(B, S, vocab[0], seed + 100, src_lengths, pad_id)
    tgt = _tokens(B, T, vocab[1], seed + 200, tgt_lengths, pad_id)
    if future_from is not None:  # row 1: the same source, the same target up to future_from, then other tokens
        src[1] = src[0]
        tgt[1, :future_from] = tgt[0, :future_from]
        extra = dict(extra, same_prefix={"rows": [0, 1], "length": future_from})
    kwargs = {}
    if method == "decode":
        memory = randn(B, S, config["d_model"], seed=seed + 300, dtype=dtype)
        if future_from is not None:
            memory[1] = memory[0]
        args = (tgt, memory)
        if tgt_lengths is not None:
            kwargs["tgt_key_padding_mask"] = _padding(tgt_lengths, T)
        if src_lengths is not None:
            kwargs["memory_key_padding_mask"] = _padding(src_lengths, S)
    else:
        args = (src,) if method == "encode" else (src, tgt)
        if src_lengths is not None:
            kwargs["src_key_padding_mask"] = _padding(src_lengths, S)
        if tgt_lengths is not None and method == "forward":
            kwargs["tgt_key_padding_mask"] = _padding(tgt_lengths, T)
    outputs = ("memory",) if method == "encode" else ("hidden states",) if method == "decode" else ("logits",)
    return module_probe(id, title, Transformer, vocab, config, args, kwargs, seed=seed, dtype=dtype, method=method,
                        output_names=outputs, **extra)


def _one_matrix_probe(id, title, B, S, T, vocab, seed, config=None):
    """share_embeddings=True, loaded from a state_dict whose three names for the shared matrix hold different values.

    One shared matrix is written three times when the weights are loaded, so it ends with the
    last value loaded (generator.weight); a model with three separate matrices keeps all three.
    """
    probe = _transformer_probe(id, title, B, S, T, vocab=(vocab, vocab), config=dict(config or {},
                               share_embeddings=True), seed=seed)
    state_dict = dict(probe["construct"]["state_dict"])
    for i, name in enumerate(("tgt_embed.embedding.weight", "generator.weight")):
        state_dict[name] = randn(*state_dict[name].shape, seed=seed + 500 + i, scale=0.5)
    return dict(probe, construct=dict(probe["construct"], state_dict=state_dict))


def _unequal_vocabularies_probe(id, title, vocab, seed, config=None):
    """share_embeddings=True over vocabularies of two sizes: the given __init__ raises ValueError, so the probe
    holds no weights (the reference can't be built)."""
    config = dict(PLAIN, **(config or {}), share_embeddings=True)
    src, tgt = _tokens(2, 5, vocab[0], seed + 100), _tokens(2, 4, vocab[1], seed + 200)
    return {"id": id, "title": title, "construct": {"args": list(vocab), "kwargs": config, "state_dict": None},
            "method": "forward", "args": [src, tgt], "kwargs": {}, "dtype": "float32", "output_names": ["logits"],
            "hint": SHARED_VOCABULARY_HINT}


def _pad_tokens_probe(id, title, B, S, T, seed, side, pad_id=0, config=None):
    """Tokens equal to pad_id on one ``side`` ("source" or "target"), and no mask passed: none may be inferred."""
    probe = _transformer_probe(id, title, B, S, T, config=dict(config or {}, pad_id=pad_id), seed=seed)
    src, tgt = (t.clone() for t in probe["args"])
    if side == "source":
        src[1, S // 2:] = pad_id
    else:
        tgt[1, T // 2:] = pad_id
    return dict(probe, args=[src, tgt])


TRANSFORMER_REQUIREMENTS = (
    Requirement("forward", "forward returns logits (B, T, tgt_vocab_size), generator(decode(tgt, encode(src))): "
                           "embeddings scaled by sqrt(d_model), positions on both sides, no softmax", 2),
    Requirement("encode", "encode returns the memory (B, S, d_model): the source embedded, positions added, "
                          "through the encoder"),
    Requirement("decode", "decode returns the decoder's hidden states (B, T, d_model), before the generator"),
    Requirement("causal", "decode builds the causal mask itself: no position sees a later target token"),
    Requirement("padding", "padding masks are passed on: the source's to the encoder and, as the memory's, to the "
                           "decoder; the target's to the decoder"),
    Requirement("masks-not-inferred", "masks are never inferred: with no mask passed, tokens equal to pad_id are "
                                      "attended to like any other"),
    Requirement("shared", "with share_embeddings=True the two embeddings and the generator are one matrix"),
    Requirement("one-vocabulary", "share_embeddings=True over vocabularies of different sizes raises ValueError, as "
                                  "the given __init__ does", 0.5),
    Requirement("activation", 'passes `activation` on to the encoder and the decoder, as the given __init__ does: '
                              'activation="gelu" reaches every layer', 0.5),
    Requirement("norm-first", "works as a pre-norm model (norm_first=True), final LayerNorms included", 0.5),
    Requirement("dropout", "dropout is off in eval mode whatever its rate; in training mode it is applied where "
                           "PyTorch applies it, after the positional encoding and inside the layers"),
    Requirement("dtype-device", "follows the weights' dtype (float64) and the inputs' device, the causal mask made "
                                "on tgt's device (checked on the meta device)", 0.5),
    Requirement("gradients", "is differentiable: gradients reach every weight", 0.5),
)


def transformer_public_probes():
    return [
        *requiring("forward", [
            _transformer_probe("forward", "forward: batch 2, 5 source and 4 target tokens", 2, 5, 4, seed=1),
        ]),
        *requiring("encode", [
            _transformer_probe("encode", "encode: batch 2, 5 source tokens", 2, 5, 3, method="encode", seed=2),
        ]),
        *requiring("decode", [
            _transformer_probe("decode", "decode: 4 target tokens, a memory of 6 positions", 2, 6, 4,
                               method="decode", seed=3),
        ]),
        *requiring("causal", [
            _transformer_probe("no-leakage", "forward: two targets that differ only from position 2 on", 2, 4, 5,
                               future_from=2, seed=4),
            _transformer_probe("decode-no-leakage", "decode: two targets that differ only from position 3 on", 2,
                               6, 5, method="decode", future_from=3, seed=5),
        ]),
        *requiring("padding", [
            _transformer_probe("padding", "forward with source and target padding masks", 2, 6, 5,
                               src_lengths=[6, 3], tgt_lengths=[5, 2], seed=6),
            _transformer_probe("encode-padding", "encode with a source padding mask", 2, 5, 3, method="encode",
                               src_lengths=[5, 2], seed=7),
            _transformer_probe("decode-padding", "decode with target and memory padding masks", 2, 6, 4,
                               method="decode", src_lengths=[4, 6], tgt_lengths=[4, 3], seed=8),
        ]),
        *requiring("masks-not-inferred", [
            _pad_tokens_probe("pad-in-source", "pad_id tokens in the second source, no mask passed", 2, 6, 4,
                              seed=9, side="source"),
            _pad_tokens_probe("pad-in-target", "pad_id tokens in the second target, no mask passed", 2, 4, 6,
                              seed=10, side="target"),
        ]),
        *requiring("shared", [
            _one_matrix_probe("shared", "share_embeddings=True: the embeddings and the generator are one matrix",
                              2, 5, 4, vocab=11, seed=11),
        ]),
        *requiring("one-vocabulary", [
            _unequal_vocabularies_probe("shared-unequal", "share_embeddings=True over vocabularies of 11 and 13 "
                                        "tokens raises ValueError", (11, 13), seed=19),
        ]),
        *requiring("activation", [
            _transformer_probe("gelu", 'forward, activation="gelu"', 2, 5, 4, config={"activation": "gelu"}, seed=20),
        ]),
        *requiring("norm-first", [
            _transformer_probe("pre-norm", "forward, pre-norm (norm_first=True)", 2, 5, 4,
                               config={"norm_first": True}, seed=12),
        ]),
        *requiring("dropout", [
            _transformer_probe("eval-dropout", "forward in eval mode with dropout=0.5: no dropout", 2, 5, 4,
                               config={"dropout": 0.5}, seed=13),
            _transformer_probe("train-dropout", "forward in training mode with dropout=1.0: every dropped value "
                               "is zero", 2, 5, 4, config={"dropout": 1.0}, seed=14, training=True),
        ]),
        *requiring("dtype-device", [
            _transformer_probe("float64", "forward, float64 weights", 2, 5, 4, seed=15, dtype="float64"),
            _transformer_probe("meta", "forward on the meta device", 2, 5, 4, seed=16, device="meta"),
        ]),
        *requiring("gradients", [
            # One layer: the stored data holds every known mistake's gradients on this probe.
            with_gradients(_transformer_probe("grad", "forward, one layer, batch 2, 5 source and 4 target tokens", 2,
                                              5, 4, config={"num_layers": 1}, seed=17), Transformer, seed=18),
        ]),
    ]


def transformer_hidden_probes(devices=("cpu",)):
    probes = [
        *requiring("forward", [
            _transformer_probe("forward-wide", "forward: d_model=16, batch 3, 7 source and 5 target tokens", 3, 7, 5,
                               config=WIDER, seed=30),
            _transformer_probe("one-token", "forward: a single target token", 2, 3, 1, seed=31),
        ]),
        *requiring("encode", [
            _transformer_probe("encode-wide", "encode: d_model=16, batch 3, 6 source tokens", 3, 6, 2,
                               config=WIDER, method="encode", seed=32),
        ]),
        *requiring("decode", [
            _transformer_probe("decode-wide", "decode: d_model=16, 6 target tokens, a memory of 4", 3, 4, 6,
                               config=WIDER, method="decode", seed=33),
            _transformer_probe("decode-one-token", "decode: a single target token", 2, 4, 1, method="decode",
                               seed=34),
        ]),
        *requiring("causal", [
            _transformer_probe("no-leakage-wide", "forward, d_model=16: targets that differ from position 4 on",
                               2, 3, 7, config=WIDER, future_from=4, seed=35),
            _transformer_probe("decode-no-leakage-wide", "decode, d_model=16: targets that differ from position 1 on",
                               2, 5, 4, config=WIDER, method="decode", future_from=1, seed=36),
        ]),
        *requiring("padding", [
            _transformer_probe("padding-wide", "forward, d_model=16, three rows of padding", 3, 6, 5,
                               config=WIDER, src_lengths=[6, 2, 4], tgt_lengths=[5, 5, 3], seed=37),
            _transformer_probe("fully-padded-source", "the second source is all padding (zero attention, never NaN)",
                               2, 4, 3, src_lengths=[4, 0], tgt_lengths=[3, 1], seed=38),
            _transformer_probe("encode-padding-wide", "encode, d_model=16, source padding", 3, 6, 2, config=WIDER,
                               method="encode", src_lengths=[2, 6, 5], seed=39),
            _transformer_probe("decode-padding-wide", "decode, d_model=16, target and memory padding", 3, 5, 6,
                               config=WIDER, method="decode", src_lengths=[5, 1, 3], tgt_lengths=[2, 6, 4], seed=40),
        ]),
        *requiring("masks-not-inferred", [
            _pad_tokens_probe("pad-id-3-source", "pad_id=3 tokens in the second source, no mask passed", 3, 7, 5,
                              seed=41, side="source", pad_id=3),
            _pad_tokens_probe("pad-id-3-target", "pad_id=3 tokens in the second target, no mask passed", 3, 5, 7,
                              seed=42, side="target", pad_id=3),
        ]),
        *requiring("shared", [
            _one_matrix_probe("shared-wide", "share_embeddings=True, d_model=16, vocabulary 13", 3, 6, 4, vocab=13,
                              seed=43, config=WIDER),
        ]),
        *requiring("one-vocabulary", [
            _unequal_vocabularies_probe("shared-unequal-wide", "share_embeddings=True, d_model=16, vocabularies of 13 "
                                        "and 7 tokens", (13, 7), seed=52, config=WIDER),
        ]),
        *requiring("activation", [
            _transformer_probe("gelu-wide", 'forward, activation="gelu", d_model=16, batch 3', 3, 6, 5,
                               config=dict(WIDER, activation="gelu"), seed=53),
        ]),
        *requiring("norm-first", [
            _transformer_probe("pre-norm-wide", "pre-norm, d_model=16, batch 3", 3, 6, 5,
                               config=dict(WIDER, norm_first=True), seed=44),
        ]),
        *requiring("dropout", [
            _transformer_probe("eval-dropout-wide", "eval mode, dropout=0.3, d_model=16", 3, 6, 4,
                               config=dict(WIDER, dropout=0.3), seed=45),
            _transformer_probe("train-dropout-wide", "training mode, dropout=1.0, d_model=16", 3, 6, 4,
                               config=dict(WIDER, dropout=1.0), seed=46, training=True),
        ]),
        *requiring("dtype-device", [
            _transformer_probe("float64-wide", "float64, d_model=16, batch 3", 3, 6, 4, config=WIDER, seed=47,
                               dtype="float64"),
            _transformer_probe("meta-wide", "the meta device, d_model=16, batch 3", 3, 6, 4, config=WIDER, seed=48,
                               device="meta"),
            *[on_device(_transformer_probe("device", "forward", 2, 5, 4, seed=49), device)
              for device in devices if device != "cpu"],
        ]),
        *requiring("gradients", [
            with_gradients(_transformer_probe("grad-wide", "forward, d_model=16, batch 3", 3, 6, 4, config=WIDER,
                                              seed=50), Transformer, seed=51),
        ]),
    ]
    return transformer_public_probes() + probes


# ----------------------------------------------------------------------------- count_parameters
def _count_state_dict(model):
    return sum(v.numel() for v in model.state_dict().values())


def _count_frozen_too(model):
    return sum(p.numel() for p in model.parameters())


def _count_per_module(model):
    return sum(p.numel() for m in model.modules() for p in m.parameters(recurse=False) if p.requires_grad)


def _count_tensors(model):
    return sum(1 for p in model.parameters() if p.requires_grad)


def _count_buffers_too(model):
    return sum(p.numel() for p in model.parameters() if p.requires_grad) + sum(b.numel() for b in model.buffers())


# Each probe's model has one thing to get wrong, so that the first mistake that reproduces a
# wrong count is the one made: state_dict() counts a shared weight twice as a count per module
# does, frozen parameters as counting them all does, buffers as adding them does.
COUNT_PARAMETERS_MISTAKES = [
    ("a weight shared by two modules is counted twice (once per module, or once per name as state_dict() lists "
     "it): model.parameters() yields each tensor once, count those", _count_per_module),
    ("frozen parameters are counted: count only those with p.requires_grad (and not state_dict(), which holds "
     "them too)", _count_frozen_too),
    ("buffers are counted (BatchNorm's running statistics, say); they are not parameters (and state_dict() holds "
     "them too)", _count_buffers_too),
    ("the parameters are counted from state_dict(), which lists a shared weight under each of its names and also "
     "holds frozen parameters and buffers: count model.parameters() that require grad", _count_state_dict),
    ("the parameter tensors are counted, not their entries: add up p.numel()", _count_tensors),
]


def _count_probe(id, title, fixture, *args, **kwargs):
    model = {"__fixture__": fixture, "args": list(args), "kwargs": kwargs}
    return function_probe(id, title, (model,), None, ("count",))


COUNT_PARAMETERS_REQUIREMENTS = (
    Requirement("count", "returns the number of entries of the trainable parameters, an int", 2),
    Requirement("shared", "a parameter shared by several modules counts once"),
    Requirement("frozen", "frozen parameters (requires_grad=False) are not counted"),
    Requirement("buffers", "buffers (running statistics, the positional-encoding table) are not counted"),
)


def count_parameters_public_probes():
    return [
        *requiring("count", [_count_probe("linear", "nn.Linear(4, 3)", "linear", 4, 3)]),
        *requiring("shared", [_count_probe("shared", "an embedding whose weight the output layer shares",
                                           "shared_weights_model", 7, 4, frozen=False)]),
        *requiring("frozen", [_count_probe("frozen", "a model with a frozen parameter", "shared_weights_model", 7, 4,
                                           shared=False)]),
        *requiring("buffers", [_count_probe("batch-norm", "nn.BatchNorm1d(6): parameters and buffers",
                                            "batch_norm", 6)]),
    ]


def count_parameters_hidden_probes(devices=("cpu",)):
    return count_parameters_public_probes() + [
        *requiring("count", [
            _count_probe("no-bias", "nn.Linear(5, 2, bias=False)", "linear", 5, 2, bias=False),
            _count_probe("transformer", "a small nn.Transformer", "transformer", d_model=8, nhead=2,
                         num_encoder_layers=1, num_decoder_layers=2, dim_feedforward=16),
        ]),
        *requiring("shared", [_count_probe("shared-big", "a shared weight, vocabulary 11, d_model 6",
                                           "shared_weights_model", 11, 6, frozen=False)]),
        *requiring("frozen", [_count_probe("frozen-big", "a frozen parameter, vocabulary 11, d_model 6",
                                           "shared_weights_model", 11, 6, shared=False)]),
        *requiring("buffers", [_count_probe("batch-norm-3", "nn.BatchNorm1d(3)", "batch_norm", 3)]),
    ]


# ----------------------------------------------------------------------------- noam_lr
def _noam(step, d_model, warmup, step_power=-0.5, warmup_power=-1.5, d_model_power=-0.5, pick=min):
    if step < 1:
        raise ValueError(f"step counts from 1, got {step}")
    return d_model**d_model_power * pick(step**step_power, step * warmup**warmup_power)


def _noam_root_of_step(step, d_model, warmup):
    return _noam(step, d_model, warmup, step_power=0.5)


def _noam_root_of_warmup(step, d_model, warmup):
    return _noam(step, d_model, warmup, warmup_power=-0.5)


def _noam_max(step, d_model, warmup):
    return _noam(step, d_model, warmup, pick=max)


def _noam_no_d_model(step, d_model, warmup):
    return _noam(step, d_model, warmup, d_model_power=0)


def _noam_root_of_d_model(step, d_model, warmup):
    return _noam(step, d_model, warmup, d_model_power=0.5)


def _noam_tensor(step, d_model, warmup):
    return torch.tensor(_noam(step, d_model, warmup), dtype=torch.float64)


# The wrong formulas agree with one another in places: after warmup max() gives what step**0.5 gives,
# and between warmup**(1/3) and warmup it gives what warmup**-0.5 gives. Steps below warmup**(1/3)
# tell them apart; there are enough of those probes that each answer's most frequent hint is its own.
NOAM_LR_MISTAKES = [
    ("step**0.5 where the formula has step**-0.5: after warmup the rate must decay as 1/sqrt(step)",
     _noam_root_of_step),
    # warmup**1.5 for warmup**-1.5 gives what max() gives wherever it is wrong (during warmup): one hint names both.
    ("max where the formula has min (or warmup**1.5 where it has warmup**-1.5, which makes min pick the same term): "
     "the rate is the smaller of the two terms, step * warmup**-1.5 during warmup", _noam_max),
    ("the warmup term uses warmup**-0.5; it is step * warmup**-1.5", _noam_root_of_warmup),
    ("the factor d_model**-0.5 is missing", _noam_no_d_model),
    ("d_model**0.5 where the formula has d_model**-0.5", _noam_root_of_d_model),
    ("the rate is returned as a tensor: return a Python float (the formula with ** and min(), or float(...))",
     _noam_tensor),
]

STEP_HINT = "steps count from 1: noam_lr should raise a ValueError for step < 1 (0 ** -0.5 is infinite)"


def _noam_probe(id, title, step, d_model, warmup, **extra):
    return function_probe(id, title, (step, d_model, warmup), None, ("learning rate",), **extra)


NOAM_LR_REQUIREMENTS = (
    Requirement("formula", "returns d_model^-0.5 * min(step^-0.5, step * warmup^-1.5) as a Python float", 2),
    Requirement("step-error", "step < 1 raises a ValueError"),
)


def noam_lr_public_probes():
    return [
        *requiring("formula", [
            _noam_probe("first-step", "step 1, d_model=512, warmup=4000", 1, 512, 4000),
            _noam_probe("warming-up", "step 10, early in warmup", 10, 512, 4000),
            _noam_probe("warmup", "step = warmup = 4000: the peak", 4000, 512, 4000),
            _noam_probe("decay", "step 40000 = 10 * warmup", 40000, 512, 4000),
        ]),
        *requiring("step-error", [_noam_probe("step-zero", "step 0: steps count from 1", 0, 512, 4000, hint=STEP_HINT)]),
    ]


def noam_lr_hidden_probes(devices=("cpu",)):
    return noam_lr_public_probes() + [
        *requiring("formula", [
            _noam_probe("small-first", "step 1, d_model=16, warmup=10", 1, 16, 10),
            _noam_probe("small-second", "step 2, d_model=16, warmup=10", 2, 16, 10),
            _noam_probe("small-warmup", "step 5, d_model=16, warmup=10", 5, 16, 10),
            _noam_probe("small-peak", "step 10 = warmup, d_model=16", 10, 16, 10),
            _noam_probe("small-after", "step 11, just after warmup", 11, 16, 10),
            _noam_probe("small-decay", "step 1000, d_model=16, warmup=10", 1000, 16, 10),
            _noam_probe("before-peak", "step 3999, d_model=512, warmup=4000", 3999, 512, 4000),
        ]),
        *requiring("step-error", [_noam_probe("negative", "a negative step", -3, 512, 4000, hint=STEP_HINT)]),
    ]


# ----------------------------------------------------------------------------- greedy_decode
# The special tokens are never 0, 1, 2 in the public probes, so that none of them can be hard-coded.
PAD, BOS, EOS = 5, 3, 4
VOCAB = 9
OTHER_IDS = {"pad_id": 6, "bos_id": 0, "eos_id": 1}

# What each requirement's probes make the model's values show (runner.ScriptedModel's reveals), and the
# records of its use that word the diagnosis when they fail ("training", the mode it is left in, is checked).
DECODING_RECORDS = ("encode", "decode")
STOPPING_RECORDS = ("decode",)
MODE_RECORDS = ("training", "grad_enabled", "decoded_in_training_mode")
MASK_RECORDS = ("src_key_padding_mask", "memory_key_padding_mask")
REVEALS = {DECODING_RECORDS: ["calls"], STOPPING_RECORDS: ["calls"], MODE_RECORDS: ["mode"], MASK_RECORDS: ["masks"],
           (): []}


def _script(plans, max_len, seed, vocab, specials):
    """Logits (B, max_len, V) whose argmax after position t of row b is plans[b][t].

    Where a plan ends, random ordinary tokens (never a special one) follow, so that a row that
    goes on after its eos_id produces tokens that are not padding.
    """
    generator = torch.Generator().manual_seed(seed)
    ordinary = torch.tensor([t for t in range(vocab) if t not in specials])
    logits = torch.randn(len(plans), max_len, vocab, generator=generator)  # (B, max_len, V)
    for b, plan in enumerate(plans):
        filler = ordinary[torch.randint(len(ordinary), (max_len,), generator=generator)].tolist()
        for t, token in enumerate(list(plan) + filler[len(plan):]):
            logits[b, t, token] = logits[b, t].max() + 1.0 + torch.rand((), generator=generator).item()
    return logits


def _greedy_probe(id, title, plans, max_len, seed, records, training=False, pad_id=PAD, bos_id=BOS, eos_id=EOS,
                  S=4, src_lengths=None, vocab=VOCAB, pad_tokens=False):
    """greedy_decode on a ScriptedModel whose rows produce ``plans`` (eos_id where a plan holds it).

    The source holds no pad_id token unless ``pad_tokens`` (then the last tokens of row 0 are pad_id).
    """
    specials = (pad_id, bos_id, eos_id)
    logits = _script(plans, max_len, seed, vocab, specials)
    source_mask = None if src_lengths is None else _padding(src_lengths, S)
    model = {"__fixture__": "scripted_model", "args": [logits, pad_id], "training": training,
             "kwargs": {"src_key_padding_mask": source_mask, "reveals": REVEALS[tuple(records)]}}
    ordinary = torch.tensor([t for t in range(vocab) if t not in specials])
    generator = torch.Generator().manual_seed(seed + 1)
    src = ordinary[torch.randint(len(ordinary), (len(plans), S), generator=generator)]  # (B, S)
    if pad_tokens:
        src[0, S // 2:] = pad_id
    kwargs = {}
    if source_mask is not None:
        kwargs["src_key_padding_mask"] = source_mask
    return function_probe(id, title, (model, src, max_len, bos_id, eos_id), kwargs, ("tokens",),
                          records=list(records))


GREEDY_DECODE_REQUIREMENTS = (
    Requirement("decoding", "encodes the source once; each row starts with bos_id, then takes the argmax of the "
                            "generator's scores at the last position, up to max_len tokens in all", 2),
    Requirement("eos-padding", "a row that has produced eos_id keeps it and gets only model.pad_id after it"),
    Requirement("early-stop", "decoding stops as soon as every row has produced eos_id"),
    Requirement("mode", "runs without gradients in eval mode, and leaves the model in the mode it found it"),
    Requirement("masks", "passes src_key_padding_mask to encode and, as memory_key_padding_mask, to decode; "
                         "infers none"),
)


def greedy_decode_public_probes():
    return [
        *requiring("decoding", [
            _greedy_probe("no-eos", "2 rows, no eos_id within max_len=6", [[6, 0, 7], [1, 8]], 6, seed=1,
                          records=DECODING_RECORDS),
            _greedy_probe("max-len-one", "max_len=1: bos_id alone", [[6], [7]], 1, seed=2, records=DECODING_RECORDS),
        ]),
        *requiring("eos-padding", [
            _greedy_probe("staggered", "3 rows: eos_id after 2 tokens, after 5, and never (max_len=7)",
                          [[6, EOS], [0, 7, 8, 6, EOS], [8, 8, 0]], 7, seed=3, records=()),
        ]),
        *requiring("early-stop", [
            _greedy_probe("early-stop", "every row produces eos_id, the last after 3 tokens: stops before max_len=8",
                          [[EOS], [0, 6, EOS], [7, EOS]], 8, seed=4, records=STOPPING_RECORDS),
        ]),
        *requiring("mode", [
            _greedy_probe("training-mode", "a model given in training mode", [[6, 7], [8, 0, 1]], 5, seed=5,
                          training=True, records=MODE_RECORDS),
            _greedy_probe("eval-mode", "a model given in eval mode", [[0, 8], [7]], 4, seed=6, records=MODE_RECORDS),
        ]),
        *requiring("masks", [
            _greedy_probe("source-padding", "a source padding mask, passed on", [[6, 7], [0]], 4, seed=7, S=5,
                          src_lengths=[5, 2], records=MASK_RECORDS),
            _greedy_probe("pad-tokens-no-mask", "pad_id tokens in the source but no mask: none is inferred",
                          [[8], [1, 6]], 4, seed=8, pad_tokens=True, records=MASK_RECORDS),
        ]),
    ]


def greedy_decode_hidden_probes(devices=("cpu",)):
    # No device probe: ScriptedModel cannot run on the meta device, and a CUDA probe would try a
    # requirement that no public probe tries.
    other, other_eos = OTHER_IDS, OTHER_IDS["eos_id"]
    return greedy_decode_public_probes() + [
        *requiring("decoding", [
            _greedy_probe("no-eos-3", "3 rows, other special ids, max_len=7", [[2, 3, 4], [5, 7], [8]], 7, seed=10,
                          records=DECODING_RECORDS, **other),
            _greedy_probe("max-len-two", "max_len=2", [[6], [0]], 2, seed=11, records=DECODING_RECORDS),
            _greedy_probe("one-row", "a single row, max_len=5", [[7, 6, 8, 0]], 5, seed=12, records=DECODING_RECORDS),
        ]),
        *requiring("eos-padding", [
            _greedy_probe("staggered-other-ids", "other special ids: eos_id after 1 token, after 3, never",
                          [[other_eos], [2, 3, other_eos], [4, 5]], 6, seed=13, records=(), **other),
            _greedy_probe("staggered-two", "2 rows: eos_id after 4 tokens, and never (max_len=9)",
                          [[6, 7, 0, EOS], [8]], 9, seed=14, records=()),
        ]),
        *requiring("early-stop", [
            _greedy_probe("eos-first", "every row produces eos_id first", [[EOS], [EOS], [EOS]], 5, seed=15,
                          records=STOPPING_RECORDS),
            _greedy_probe("one-row-stops", "a single row that finishes after 3 tokens (max_len=9)", [[6, 0, EOS]], 9,
                          seed=16, records=STOPPING_RECORDS),
            _greedy_probe("stops-other-ids", "other special ids, the last row finishes after 4 tokens",
                          [[2, other_eos], [3, 4, 5, other_eos]], 8, seed=17, records=STOPPING_RECORDS, **other),
        ]),
        *requiring("mode", [
            _greedy_probe("training-mode-3", "3 rows, a model given in training mode", [[6], [7, 8], [0]], 6, seed=18,
                          training=True, records=MODE_RECORDS),
            _greedy_probe("eval-mode-1", "a single row, a model given in eval mode", [[8, 8]], 5, seed=19,
                          records=MODE_RECORDS),
        ]),
        *requiring("masks", [
            _greedy_probe("source-padding-3", "3 rows of source padding", [[6], [7, 0], [8]], 5, seed=20, S=6,
                          src_lengths=[6, 1, 3], records=MASK_RECORDS),
            _greedy_probe("pad-tokens-other-ids", "other special ids, pad_id tokens in the source, no mask",
                          [[2, 3], [4]], 4, seed=21, pad_tokens=True, records=MASK_RECORDS, **other),
        ]),
    ]


def _greedy(model, src, max_len, bos_id, eos_id, src_key_padding_mask=None, variant=None):
    """Greedy decoding with one knob turned the wrong way (only its output matters here): in eval mode, as
    the reference decodes, so that on a probe of the mode only a mistake of the mode shows."""
    was_training = model.training
    if variant != "training_mode":
        model.eval()
    try:
        return _greedy_in_eval_mode(model, src, max_len, bos_id, eos_id, src_key_padding_mask, variant)
    finally:
        model.train(was_training)


def _greedy_in_eval_mode(model, src, max_len, bos_id, eos_id, src_key_padding_mask, variant):
    with torch.set_grad_enabled(variant == "gradients"):
        memory = model.encode(src, src_key_padding_mask)  # (B, S, C)
        ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)  # (B, 1)
        finished = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)  # (B,)
        pad_id = 0 if variant == "pad_zero" else model.pad_id
        for _ in range(max_len if variant == "one_too_many" else max_len - 1):
            hidden = model.decode(ys, memory, memory_key_padding_mask=src_key_padding_mask)  # (B, t, C)
            next_token = model.generator(hidden[:, 0 if variant == "first_position" else -1]).argmax(dim=-1)  # (B,)
            if variant == "eos_dropped":  # marks the row finished before padding it: eos_id becomes pad_id
                finished |= next_token == eos_id
            if variant != "no_padding":
                next_token = next_token.masked_fill(finished, pad_id)
            ys = torch.cat([ys, next_token[:, None]], dim=1)  # (B, t + 1)
            finished |= next_token == eos_id
            if variant == "stop_at_first" and finished.any():
                break
            if variant != "no_early_stop" and finished.all():
                break
    return ys[:, 1:] if variant == "no_bos" else ys


def _greedy_mistake(variant):
    def wrong(model, src, max_len, bos_id, eos_id, src_key_padding_mask=None):
        return _greedy(model, src, max_len, bos_id, eos_id, src_key_padding_mask, variant)

    wrong.__name__ = f"greedy_decode_{variant}"
    return wrong


GREEDY_DECODE_MISTAKES = [
    ("decoding doesn't stop once every row has produced eos_id: break out of the loop when they all have",
     _greedy_mistake("no_early_stop")),
    ("decoding stops when the first row produces eos_id; go on until every row has", _greedy_mistake("stop_at_first")),
    ("a row that has produced eos_id goes on producing tokens: after eos_id it gets only model.pad_id",
     _greedy_mistake("no_padding")),
    ("eos_id itself should stay in the output, followed by model.pad_id", _greedy_mistake("eos_dropped")),
    ("finished rows are filled with 0: fill them with model.pad_id, whatever its value",
     _greedy_mistake("pad_zero")),
    ("the output doesn't start with bos_id: each row starts with bos_id, then the generated tokens",
     _greedy_mistake("no_bos")),
    ("the next token is read from the first position's logits; it comes from the last one, hidden[:, -1]",
     _greedy_mistake("first_position")),
    ("the output is one token too long: counting bos_id, a row has at most max_len tokens",
     _greedy_mistake("one_too_many")),
    # Named by the tokens a decode so made returns (the stand-in rolls its table), not by its record.
    (FIXTURE_HINTS["grad_enabled"], _greedy_mistake("gradients")),
    (FIXTURE_HINTS["decoded_in_training_mode"], _greedy_mistake("training_mode")),
]


EXERCISES = [
    ExerciseChecks("Transformer", Transformer, transformer_public_probes, transformer_hidden_probes,
                   TRANSFORMER_MISTAKES, requirements=TRANSFORMER_REQUIREMENTS),
    ExerciseChecks("count_parameters", count_parameters, count_parameters_public_probes, count_parameters_hidden_probes,
                   COUNT_PARAMETERS_MISTAKES, requirements=COUNT_PARAMETERS_REQUIREMENTS),
    ExerciseChecks("noam_lr", noam_lr, noam_lr_public_probes, noam_lr_hidden_probes, NOAM_LR_MISTAKES,
                   requirements=NOAM_LR_REQUIREMENTS),
    ExerciseChecks("greedy_decode", greedy_decode, greedy_decode_public_probes, greedy_decode_hidden_probes,
                   GREEDY_DECODE_MISTAKES, requirements=GREEDY_DECODE_REQUIREMENTS),
]
