"""Lesson 06 checks: Transformer, count_parameters, noam_lr and greedy_decode.

The Transformer probes use tiny configurations (vocabularies of 11 and 13 tokens, d_model 8
to 16, one or two layers) with the reference's weights, perturbed; they call forward, encode
and decode (the probe's ``method``). count_parameters runs on the runner's fixtures (a module
that shares a weight and freezes one, nn.Linear, nn.BatchNorm1d, a small nn.Transformer).
greedy_decode runs on the runner's ScriptedModel, whose next-token logits are a fixed table,
so the tokens it must produce are known; the runner also records how the model was used
(its mode before and during decoding, gradients, the masks it was given, the calls).
"""

import torch
from torch import nn

from ...reference import Transformer, causal_mask, count_parameters, greedy_decode, noam_lr
from .probes import ExerciseChecks, function_probe, module_probe, on_device, randn, with_gradients

SMALL = {"d_model": 8, "num_heads": 2, "num_layers": 1, "d_ff": 16, "max_len": 32}


def _variant(base, variant):
    """A subclass of a reference module whose methods take the wrong turn named ``variant``."""
    return type(f"{base.__name__}_{variant}", (base,), {"variant": variant})


def _padding(lengths, T):
    """(B, T) key padding mask, True from each row's length on."""
    return torch.arange(T)[None, :] >= torch.tensor(lengths)[:, None]  # (B, T)


# ----------------------------------------------------------------------------- Transformer
class _TransformerMistake(Transformer):
    variant = None

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.variant == "untied" and self.generator.weight is self.src_embed.embedding.weight:
            # Copies of the one matrix instead of the matrix itself.
            self.tgt_embed.embedding.weight = nn.Parameter(self.src_embed.embedding.weight.detach().clone())
            self.generator.weight = nn.Parameter(self.src_embed.embedding.weight.detach().clone())

    def _embed(self, embed, tokens):
        return embed.embedding(tokens) if self.variant == "unscaled" else embed(tokens)  # (B, T, C)

    def encode(self, src, src_key_padding_mask=None):
        x = self._embed(self.src_embed, src)
        if self.variant != "no_source_positions":
            x = self.pos_enc(x)
        mask = None if self.variant == "src_mask_dropped" else src_key_padding_mask
        return self.encoder(x, key_padding_mask=mask)  # (B, S, C)

    def decode(self, tgt, memory, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        y = self._embed(self.tgt_embed, tgt)
        if self.variant != "no_target_positions":
            y = self.pos_enc(y)
        mask = None if self.variant == "no_causal_mask" else causal_mask(tgt.size(1), device=tgt.device)
        if self.variant == "keep_mask":
            mask = ~mask
        return self.decoder(y, memory, mask, tgt_key_padding_mask, memory_key_padding_mask)  # (B, T, C)

    def forward(self, src, tgt, src_key_padding_mask=None, tgt_key_padding_mask=None):
        memory = self.encode(src, src_key_padding_mask)  # (B, S, C)
        memory_mask = None if self.variant == "memory_mask_dropped" else src_key_padding_mask
        logits = self.generator(self.decode(tgt, memory, tgt_key_padding_mask, memory_mask))  # (B, T, V)
        return logits.softmax(dim=-1) if self.variant == "softmax" else logits


TRANSFORMER_MISTAKES = [
    ("the embeddings are not scaled by sqrt(d_model): call self.src_embed(src) and self.tgt_embed(tgt) (the "
     "TokenEmbedding modules), not their .embedding tables", _variant(_TransformerMistake, "unscaled")),
    ("the target tokens get no positional encoding: decode must add it too, self.pos_enc(self.tgt_embed(tgt))",
     _variant(_TransformerMistake, "no_target_positions")),
    ("the source tokens get no positional encoding: encode must add it, self.pos_enc(self.src_embed(src))",
     _variant(_TransformerMistake, "no_source_positions")),
    ("decode doesn't apply the causal mask: build causal_mask(T, device=tgt.device) and pass it to the decoder as "
     "tgt_mask", _variant(_TransformerMistake, "no_causal_mask")),
    ("decode's causal mask is the wrong way round: True marks the FUTURE positions, the ones to block (causal_mask)",
     _variant(_TransformerMistake, "keep_mask")),
    ("forward doesn't pass src_key_padding_mask to the decoder as memory_key_padding_mask: the decoder attends to "
     "the source's padding", _variant(_TransformerMistake, "memory_mask_dropped")),
    ("src_key_padding_mask is not passed to the encoder", _variant(_TransformerMistake, "src_mask_dropped")),
    ("forward applies a softmax: it returns logits, generator(decode(...)); the loss (cross-entropy) applies the "
     "softmax itself", _variant(_TransformerMistake, "softmax")),
    ("with share_embeddings=True the two embeddings and the generator must be one matrix: assign the same "
     "Parameter (self.generator.weight = self.src_embed.embedding.weight, ...), not a copy of it",
     _variant(_TransformerMistake, "untied")),
]


def _tokens(B, T, vocab, seed, lengths=None, pad_id=0):
    """(B, T) int64 token ids, none of them pad_id except after each row's length."""
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.randint(1, vocab, (B, T), generator=generator)
    tokens[tokens == pad_id] = (pad_id + 1) % vocab
    if lengths is not None:
        tokens = tokens.masked_fill(_padding(lengths, T), pad_id)
    return tokens


def _transformer_probe(id, title, B, S, T, vocab=(11, 13), config=None, method="forward", src_lengths=None,
                       tgt_lengths=None, future_from=None, seed=0, dtype="float32", **extra):
    config = dict(SMALL, **(config or {}))
    src = _tokens(B, S, vocab[0], seed + 100, src_lengths)
    tgt = _tokens(B, T, vocab[1], seed + 200, tgt_lengths)
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


def _untied_values_probe():
    """share_embeddings=True, loaded from a state_dict whose three names for the shared matrix hold different values.

    One shared matrix is written three times when the weights are loaded, so it ends with the
    last value loaded (generator.weight); a model with three separate matrices keeps all three.
    """
    probe = _transformer_probe("shared-one-matrix", "share_embeddings=True: the embeddings and the generator are "
                               "one matrix", 2, 5, 4, vocab=(11, 11), config={"share_embeddings": True}, seed=5)
    state_dict = dict(probe["construct"]["state_dict"])
    for i, name in enumerate(("tgt_embed.embedding.weight", "generator.weight")):
        state_dict[name] = randn(*state_dict[name].shape, seed=500 + i, scale=0.5)
    return dict(probe, construct=dict(probe["construct"], state_dict=state_dict))


def _unmasked_padding_probe():
    """Tokens equal to pad_id but no mask: masks are used only when passed, never inferred."""
    probe = _transformer_probe("pad-id", "pad_id=3 tokens but no masks: masks are never inferred", 2, 5, 4,
                               config={"pad_id": 3}, seed=19)
    src, tgt = (t.clone() for t in probe["args"])
    src[1, 3:], tgt[:, 2:] = 3, 3
    return dict(probe, args=[src, tgt])


def transformer_public_probes():
    return [
        _transformer_probe("forward", "forward: post-norm, 1 layer, batch 2, 5 source and 4 target tokens", 2, 5, 4,
                           seed=1),
        _transformer_probe("padding", "forward with source and target padding masks", 2, 6, 5, src_lengths=[6, 3],
                           tgt_lengths=[5, 2], seed=2),
        _transformer_probe("encode", "encode: pre-norm, with a source padding mask", 2, 5, 4,
                           config={"norm_first": True}, method="encode", src_lengths=[5, 2], seed=3),
        _transformer_probe("decode", "decode: 4 targets, a memory of 6 positions with padding", 2, 6, 4,
                           method="decode", src_lengths=[4, 6], seed=4),
        _untied_values_probe(),
        _transformer_probe("no-leakage", "two targets that differ only from position 2 on", 2, 4, 5, future_from=2,
                           seed=6),
    ]


def transformer_hidden_probes(devices=("cpu",)):
    mismatched = {"id": "shared-vocab-mismatch", "title": "share_embeddings=True with two vocabulary sizes",
                  "construct": {"args": [11, 13], "kwargs": dict(SMALL, share_embeddings=True), "state_dict": None},
                  "method": "forward", "args": [_tokens(1, 3, 11, 1), _tokens(1, 3, 11, 2)], "kwargs": {},
                  "dtype": "float32", "output_names": ["logits"]}
    deep = {"d_model": 16, "num_layers": 2, "d_ff": 32}
    probes = [
        _transformer_probe("pre-norm", "2 pre-norm layers, d_model=16, GELU, both padding masks", 3, 6, 5,
                           config=dict(deep, norm_first=True, activation="gelu"), src_lengths=[6, 2, 4],
                           tgt_lengths=[5, 5, 3], seed=10),
        _transformer_probe("post-norm-deep", "2 post-norm layers, d_model=16", 2, 4, 6, config=deep,
                           src_lengths=[3, 4], seed=11),
        _transformer_probe("float64", "float64, both padding masks", 2, 5, 4, src_lengths=[5, 3], tgt_lengths=[2, 4],
                           seed=12, dtype="float64"),
        _transformer_probe("decode-pre", "decode: pre-norm, 2 layers, target padding", 2, 4, 5,
                           config=dict(deep, norm_first=True), method="decode", tgt_lengths=[5, 3], seed=13),
        _transformer_probe("decode-one-token", "decode: a single target token", 2, 4, 1, method="decode", seed=14),
        _transformer_probe("decode-no-leakage", "decode: two targets that differ only from position 3 on", 2, 4, 5,
                           method="decode", future_from=3, seed=15),
        _transformer_probe("encode64", "encode: float64, 2 post-norm layers", 2, 5, 3, config=deep, method="encode",
                           src_lengths=[2, 5], seed=16, dtype="float64"),
        _transformer_probe("shared", "share_embeddings=True, pre-norm, with padding", 2, 5, 4, vocab=(13, 13),
                           config={"share_embeddings": True, "norm_first": True}, src_lengths=[5, 4], seed=17),
        _transformer_probe("fully-padded-source", "the second source is all padding (zero attention, never NaN)",
                           2, 4, 3, src_lengths=[4, 0], seed=18),
        _unmasked_padding_probe(),
        _transformer_probe("too-long", "a target longer than max_len", 1, 3, 33, seed=20),
        mismatched,
    ]
    probes.append(with_gradients(_transformer_probe("grad", "post-norm, padding", 2, 5, 4, src_lengths=[5, 3],
                                                    seed=21), Transformer, seed=22))
    probes.append(with_gradients(_transformer_probe("grad-shared", "share_embeddings=True: the one matrix gets the "
                                                    "gradient of all three uses", 2, 4, 4, vocab=(11, 11),
                                                    config={"share_embeddings": True}, seed=23), Transformer, seed=24))
    probes.append(with_gradients(_transformer_probe("grad-decode", "decode, pre-norm, float64, gradients through "
                                                    "memory", 2, 4, 3, config={"norm_first": True}, method="decode",
                                                    src_lengths=[4, 2], seed=25, dtype="float64"),
                                 Transformer, seed=26))
    for device in devices:
        if device != "cpu":
            probes.append(on_device(_transformer_probe("device", "forward with padding", 2, 5, 4, src_lengths=[5, 2],
                                                       tgt_lengths=[4, 3], seed=27), device))
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


# Buffers first: on a module without shared or frozen weights (BatchNorm) state_dict() counts the same.
COUNT_PARAMETERS_MISTAKES = [
    ("buffers are counted (BatchNorm's running statistics, say); they are not parameters", _count_buffers_too),
    ("the parameters are counted from state_dict(), which lists a shared weight under each of its names and also "
     "holds frozen parameters and buffers: count model.parameters() that require grad", _count_state_dict),
    ("frozen parameters are counted: count only those with p.requires_grad", _count_frozen_too),
    ("a weight shared by two modules is counted twice: model.parameters() yields each tensor once, count that",
     _count_per_module),
    ("the parameter tensors are counted, not their entries: add up p.numel()", _count_tensors),
]


def _count_probe(id, title, fixture, *args, **kwargs):
    model = {"__fixture__": fixture, "args": list(args), "kwargs": kwargs}
    return function_probe(id, title, (model,), None, ("count",))


def count_parameters_public_probes():
    return [
        _count_probe("linear", "nn.Linear(4, 3)", "linear", 4, 3),
        _count_probe("shared", "an embedding whose weight the output layer shares, and a frozen parameter",
                     "shared_weights_model", 7, 4),
        _count_probe("batch-norm", "nn.BatchNorm1d(6): parameters and buffers", "batch_norm", 6),
    ]


def count_parameters_hidden_probes(devices=("cpu",)):
    return count_parameters_public_probes() + [
        _count_probe("no-bias", "nn.Linear(5, 2, bias=False)", "linear", 5, 2, bias=False),
        _count_probe("shared-big", "a shared weight and a frozen parameter, vocabulary 11, d_model 6",
                     "shared_weights_model", 11, 6),
        _count_probe("transformer", "a small nn.Transformer", "transformer", d_model=8, nhead=2, num_encoder_layers=1,
                     num_decoder_layers=2, dim_feedforward=16),
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


# The wrong formulas agree with one another in places: after warmup max() gives what step**0.5 gives,
# and between warmup**(1/3) and warmup it gives what warmup**-0.5 gives. Steps below warmup**(1/3)
# tell them apart; there are enough of those probes that each answer's most frequent hint is its own.
NOAM_LR_MISTAKES = [
    ("step**0.5 where the formula has step**-0.5: after warmup the rate must decay as 1/sqrt(step)",
     _noam_root_of_step),
    ("max where the formula has min: the rate is the smaller of the two terms", _noam_max),
    ("the warmup term uses warmup**-0.5; it is step * warmup**-1.5", _noam_root_of_warmup),
    ("the factor d_model**-0.5 is missing", _noam_no_d_model),
    ("d_model**0.5 where the formula has d_model**-0.5", _noam_root_of_d_model),
]


def _noam_probe(id, title, step, d_model, warmup):
    return function_probe(id, title, (step, d_model, warmup), None, ("learning rate",))


def noam_lr_public_probes():
    return [
        _noam_probe("first-step", "step 1, d_model=512, warmup=4000", 1, 512, 4000),
        _noam_probe("warming-up", "step 10, early in warmup", 10, 512, 4000),
        _noam_probe("warmup", "step = warmup = 4000: the peak", 4000, 512, 4000),
        _noam_probe("decay", "step 40000 = 10 * warmup", 40000, 512, 4000),
        _noam_probe("step-zero", "step 0: steps count from 1", 0, 512, 4000),
    ]


def noam_lr_hidden_probes(devices=("cpu",)):
    return noam_lr_public_probes() + [
        _noam_probe("small-first", "step 1, d_model=16, warmup=10", 1, 16, 10),
        _noam_probe("small-second", "step 2, d_model=16, warmup=10", 2, 16, 10),
        _noam_probe("small-warmup", "step 5, d_model=16, warmup=10", 5, 16, 10),
        _noam_probe("small-peak", "step 10 = warmup, d_model=16", 10, 16, 10),
        _noam_probe("small-after", "step 11, just after warmup", 11, 16, 10),
        _noam_probe("small-decay", "step 1000, d_model=16, warmup=10", 1000, 16, 10),
        _noam_probe("before-peak", "step 3999, d_model=512, warmup=4000", 3999, 512, 4000),
        _noam_probe("negative", "a negative step", -3, 512, 4000),
    ]


# ----------------------------------------------------------------------------- greedy_decode
PAD, BOS, EOS = 0, 1, 2
VOCAB = 7


def _script(plans, max_len, seed, vocab=VOCAB, specials=(PAD, BOS, EOS)):
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


def _greedy_probe(id, title, plans, max_len, seed, training=False, pad_id=PAD, bos_id=BOS, eos_id=EOS, S=4,
                  src_lengths=None, vocab=VOCAB):
    logits = _script(plans, max_len, seed, vocab, (pad_id, bos_id, eos_id))
    model = {"__fixture__": "scripted_model", "args": [logits, pad_id], "training": training}
    src = torch.randint(3, vocab, (len(plans), S), generator=torch.Generator().manual_seed(seed + 1))
    kwargs = {}
    if src_lengths is not None:
        kwargs["src_key_padding_mask"] = _padding(src_lengths, S)
    return function_probe(id, title, (model, src, max_len, bos_id, eos_id), kwargs, ("tokens",))


def greedy_decode_public_probes():
    return [
        _greedy_probe("staggered", "3 rows: eos_id after 2 tokens, after 5, and never (max_len=7); a source "
                      "padding mask", [[4, EOS], [3, 5, 6, 4, EOS], [6, 6, 3]], 7, seed=1, src_lengths=[4, 2, 3]),
        _greedy_probe("early-stop", "every row produces eos_id early: decoding stops before max_len=8",
                      [[EOS], [5, 3, EOS]], 8, seed=2),
        _greedy_probe("training-mode", "a model given in training mode", [[3, EOS], [4, 4, EOS]], 6, seed=3,
                      training=True),
    ]


def greedy_decode_hidden_probes(devices=("cpu",)):
    probes = [
        _greedy_probe("no-eos", "no row produces eos_id: max_len=6 tokens", [[3, 4, 5], [6, 5]], 6, seed=10),
        _greedy_probe("eos-first", "every row produces eos_id first", [[EOS], [EOS], [EOS]], 5, seed=11),
        _greedy_probe("max-len-one", "max_len=1: only bos_id", [[3], [EOS]], 1, seed=12),
        _greedy_probe("max-len-two", "max_len=2", [[3], [EOS]], 2, seed=13),
        _greedy_probe("one-row", "a single row that finishes after 3 tokens", [[4, 5, EOS]], 9, seed=14),
        _greedy_probe("other-ids", "pad_id=5, bos_id=3, eos_id=4, vocabulary of 9", [[1, 4], [0, 2, 6, 4], [7]], 7,
                      seed=15, pad_id=5, bos_id=3, eos_id=4, vocab=9),
        _greedy_probe("source-padding", "a source padding mask, passed on", [[3, EOS], [EOS]], 5, seed=16, S=5,
                      src_lengths=[5, 2]),
        _greedy_probe("training-padding", "training mode and a source padding mask", [[6, 3, EOS], [5, EOS]], 6,
                      seed=17, training=True, S=3, src_lengths=[1, 3]),
    ]
    for device in devices:
        if device != "cpu":
            probes.append(on_device(_greedy_probe("device", "eos_id at different steps", [[3, EOS], [4, 5, EOS]], 6,
                                                  seed=18, src_lengths=[4, 2]), device))
    return greedy_decode_public_probes() + probes


def _greedy(model, src, max_len, bos_id, eos_id, src_key_padding_mask=None, variant=None):
    """Greedy decoding with one knob turned the wrong way (only its output matters here)."""
    with torch.no_grad():
        memory = model.encode(src, src_key_padding_mask)  # (B, S, C)
        ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)  # (B, 1)
        finished = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)  # (B,)
        for _ in range(max_len if variant == "one_too_many" else max_len - 1):
            hidden = model.decode(ys, memory, memory_key_padding_mask=src_key_padding_mask)  # (B, t, C)
            next_token = model.generator(hidden[:, 0 if variant == "first_position" else -1]).argmax(dim=-1)  # (B,)
            if variant == "eos_dropped":  # marks the row finished before padding it: eos_id becomes pad_id
                finished |= next_token == eos_id
            if variant != "no_padding":
                next_token = next_token.masked_fill(finished, model.pad_id)
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
    ("the output doesn't start with bos_id: each row starts with bos_id, then the generated tokens",
     _greedy_mistake("no_bos")),
    ("the next token is read from the first position's logits; it comes from the last one, hidden[:, -1]",
     _greedy_mistake("first_position")),
    ("the output is one token too long: counting bos_id, a row has at most max_len tokens",
     _greedy_mistake("one_too_many")),
]


EXERCISES = [
    ExerciseChecks("Transformer", Transformer, transformer_public_probes, transformer_hidden_probes,
                   TRANSFORMER_MISTAKES),
    ExerciseChecks("count_parameters", count_parameters, count_parameters_public_probes, count_parameters_hidden_probes,
                   COUNT_PARAMETERS_MISTAKES),
    ExerciseChecks("noam_lr", noam_lr, noam_lr_public_probes, noam_lr_hidden_probes, NOAM_LR_MISTAKES),
    ExerciseChecks("greedy_decode", greedy_decode, greedy_decode_public_probes, greedy_decode_hidden_probes,
                   GREEDY_DECODE_MISTAKES),
]
