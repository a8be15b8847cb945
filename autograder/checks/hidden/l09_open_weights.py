"""Lesson 09 checks: LlamaBlock, LlamaLM, load_llama_weights and cached_gqa_attention.

LlamaBlock and LlamaLM run on tiny models with the reference's weights, perturbed (so that no
RMSNorm gain stays 1). Whether lm_head's weight IS the embedding's shows in the values, as in
lesson 07: a probe gives lm_head.weight other values than the embedding, and loading them into one
shared Parameter sets both. load_llama_weights fills the runner's LlamaShell (a LlamaLM's
parameters by the lesson's names, seeded random, no forward) from a state dict in the Hugging Face
layout made here, and its outputs are the shell's parameters afterwards: a tensor copied to the
wrong place, or q/k rows in the wrong order, shows in them exactly. cached_gqa_attention reads the
runner's GQAProjections (a lesson 08 GroupedQueryAttention's projections, heads and rope_base).
"""

import torch
from torch import nn

from ...reference.attention import scaled_dot_product_attention
from ...reference.decoder import causal_mask
from ...reference.llama import LlamaBlock, LlamaLM, cached_gqa_attention, load_llama_weights
from ...reference.modern import RMSNorm, apply_rotary
from ...reference.multihead import merge_heads, split_heads
from .probes import ExerciseChecks, Requirement, function_probe, module_probe, on_device, randn, requiring


def _mistake(base, variant):
    return type(f"{base.__name__}_{variant}", (base,), {"variant": variant})


# ============================================================================ LlamaBlock
class _BlockMistake(LlamaBlock):
    variant = None

    def __init__(self, d_model, num_heads, num_kv_heads, d_ff, eps=1e-6, rope_base=10000.0):
        super().__init__(d_model, num_heads, num_kv_heads, d_ff,
                         1e-6 if self.variant == "eps-ignored" else eps,
                         10000.0 if self.variant == "base-ignored" else rope_base)

    def forward(self, x, positions=None):
        v = self.variant
        mask = None if v == "no-mask" else causal_mask(x.size(1), device=x.device)
        at = None if v == "positions-ignored" else positions
        attended = self.attn(self.attn_norm(x), attn_mask=mask, positions=at)[0]
        if v == "post-norm":
            h = self.attn_norm(x + self.attn(x, attn_mask=mask, positions=at)[0])
            return self.ffn_norm(h + self.ffn(h))
        if v == "norm-on-output":
            h = x + self.attn_norm(self.attn(x, attn_mask=mask, positions=at)[0])
            return h + self.ffn_norm(self.ffn(h))
        h = attended if v == "no-attn-residual" else x + attended
        if v == "parallel":
            return h + self.ffn(self.ffn_norm(x))
        if v == "one-norm":
            return h + self.ffn(self.attn_norm(h))
        if v == "no-ffn-residual":
            return self.ffn(self.ffn_norm(h))
        return h + self.ffn(self.ffn_norm(h))


BLOCK_MISTAKES = [
    ("the causal mask is missing: attn(attn_norm(x), attn_mask=causal_mask(T, device=x.device), ...)",
     _mistake(_BlockMistake, "no-mask")),
    ("positions are not passed on to the attention: self.attn(..., positions=positions)",
     _mistake(_BlockMistake, "positions-ignored")),
    ("the norms come after the residual additions (post-norm, 2017): Llama normalises the input of each "
     "sub-layer, h = x + attn(attn_norm(x)), then h + ffn(ffn_norm(h))", _mistake(_BlockMistake, "post-norm")),
    ("the attention's residual is missing: h = x + attn(attn_norm(x), ...)[0]",
     _mistake(_BlockMistake, "no-attn-residual")),
    ("the feed-forward network's residual is missing: return h + ffn(ffn_norm(h))",
     _mistake(_BlockMistake, "no-ffn-residual")),
    ("the feed-forward network reads x, not h: the two sub-layers run one after the other, "
     "h + ffn(ffn_norm(h)) with h = x + attn(...)", _mistake(_BlockMistake, "parallel")),
    ("the feed-forward network's input goes through attn_norm: each sub-layer has its own norm, ffn(ffn_norm(h))",
     _mistake(_BlockMistake, "one-norm")),
    ("eps is not passed to the RMSNorms: RMSNorm(d_model, eps) for attn_norm and ffn_norm",
     _mistake(_BlockMistake, "eps-ignored")),
    ("rope_base is not passed to the attention: GroupedQueryAttention(..., rope_base=rope_base)",
     _mistake(_BlockMistake, "base-ignored")),
    ("each norm is applied to its sub-layer's output: Llama normalises the sub-layer's input, "
     "h = x + attn(attn_norm(x), ...)[0], then h + ffn(ffn_norm(h))", _mistake(_BlockMistake, "norm-on-output")),
]

BLOCK_REQUIREMENTS = (
    Requirement("formula", "h = x + attn(attn_norm(x), causal mask)[0], then h + ffn(ffn_norm(h)), with "
                           "multi-head, grouped-query and multi-query attention", 2),
    Requirement("positions", "passes positions on to the attention (rotary at those positions)"),
    Requirement("config", "passes eps to both RMSNorms and rope_base to the attention", 1),
    Requirement("dtype-device", "follows the dtype (float64) and device (meta) of its input and weights", 0.5),
)


def _block_probe(id, title, B, T, C, H, H_kv, d_ff, seed, dtype="float32", eps=None, rope_base=None,
                 positions=None, scale=1.0, **extra):
    init = {}
    if eps is not None:
        init["eps"] = eps
    if rope_base is not None:
        init["rope_base"] = rope_base
    kwargs = {} if positions is None else {"positions": positions}
    x = randn(B, T, C, seed=seed + 100, dtype=dtype, scale=scale)
    return module_probe(id, title, LlamaBlock, (C, H, H_kv, d_ff), init, (x,), kwargs, seed=seed, dtype=dtype,
                        output_names=("output",), perturb=0.3, **extra)


def block_public_probes():
    return [
        *requiring("formula", [
            _block_probe("mha", "H = H_kv = 2, batch 2, 5 tokens, d_model=8, d_ff=12", 2, 5, 8, 2, 2, 12, seed=1),
            _block_probe("gqa", "H=4, H_kv=2, d_model=16, d_ff=24", 2, 4, 16, 4, 2, 24, seed=2),
            _block_probe("mqa", "H=4, H_kv=1, d_model=16, d_ff=24", 1, 6, 16, 4, 1, 24, seed=3),
        ]),
        *requiring("positions", [
            _block_probe("positions", "positions 3, 4, 9, 10 (with a gap)", 2, 4, 8, 2, 1, 12, seed=4,
                         positions=torch.tensor([3, 4, 9, 10])),
        ]),
        *requiring("config", [
            _block_probe("eps", "eps=0.5 (large, so that it shows)", 2, 4, 8, 2, 2, 12, seed=5, eps=0.5),
            _block_probe("rope-base", "rope_base=100", 2, 6, 8, 2, 2, 12, seed=6, rope_base=100.0),
        ]),
        *requiring("dtype-device", [
            _block_probe("float64", "float64", 2, 4, 8, 2, 1, 12, seed=7, dtype="float64"),
            _block_probe("meta", "on the meta device", 2, 4, 16, 4, 2, 24, seed=8, device="meta"),
        ]),
    ]


def block_hidden_probes(devices=("cpu",)):
    return block_public_probes() + [
        *requiring("formula", [
            _block_probe("mha-2", "H = H_kv = 4, 7 tokens, d_model=16, d_ff=40", 3, 7, 16, 4, 4, 40, seed=11),
            _block_probe("gqa-2", "H=6, H_kv=3, d_model=24", 2, 5, 24, 6, 3, 32, seed=12),
        ]),
        *requiring("positions", [
            _block_probe("positions-2", "positions 20 .. 24", 1, 5, 16, 4, 2, 24, seed=13,
                         positions=torch.arange(20, 25)),
        ]),
        *requiring("config", [
            _block_probe("eps-2", "eps=0.1 and inputs of size 0.3", 2, 5, 16, 4, 2, 24, seed=14, eps=0.1, scale=0.3),
            _block_probe("rope-base-2", "rope_base=500000 (Llama 3's), 8 tokens", 1, 8, 16, 4, 1, 24, seed=15,
                         rope_base=500000.0),
        ]),
        *requiring("dtype-device", [
            _block_probe("float64-2", "float64, H=4, H_kv=2", 2, 5, 16, 4, 2, 24, seed=16, dtype="float64"),
            _block_probe("meta-2", "on the meta device, H=6, H_kv=2", 1, 3, 24, 6, 2, 32, seed=17, device="meta"),
            *[on_device(_block_probe("device", "H=4, H_kv=2", 2, 4, 16, 4, 2, 24, seed=18), d) for d in devices
              if d != "cpu"],
        ]),
    ]


# ============================================================================ LlamaLM
class _LMMistake(LlamaLM):
    variant = None

    def __init__(self, vocab_size, d_model, num_heads, num_kv_heads, num_layers, d_ff, eps=1e-6,
                 rope_base=10000.0, tie_weights=True, max_len=2048):
        v = self.variant
        super().__init__(vocab_size, d_model, num_heads, num_kv_heads, num_layers, d_ff,
                         eps, 10000.0 if v == "base-ignored" else rope_base,
                         False if v == "untied" else tie_weights, max_len)
        if v == "eps-ignored":
            self.norm = RMSNorm(d_model)
        if v == "shared-layers":
            self.layers = nn.ModuleList([self.layers[0]] * num_layers)

    def forward(self, ids):
        v = self.variant
        if ids.size(1) > self.max_len and v != "no-max-len":
            raise ValueError("too long")
        x = self.embed(ids)
        if v == "scaled":
            x = x * x.size(-1) ** 0.5
        for layer in self.layers:
            x = layer(x)
        logits = self.lm_head(x if v == "no-final-norm" else self.norm(x))
        return logits.softmax(dim=-1) if v == "softmax" else logits


LM_MISTAKES = [
    ("the embedding is multiplied by sqrt(d_model): that was the 2017 Transformer's; Llama's is the plain "
     "lookup, x = self.embed(ids)", _mistake(_LMMistake, "scaled")),
    ("the final RMSNorm is missing: logits = lm_head(norm(x)) after the last block", _mistake(_LMMistake, "no-final-norm")),
    ("lm_head is not tied to the embedding: with tie_weights, self.lm_head.weight = self.embed.weight (the same "
     "Parameter, not a copy)", _mistake(_LMMistake, "untied")),
    ("eps is not passed to the final RMSNorm: self.norm = RMSNorm(d_model, eps)", _mistake(_LMMistake, "eps-ignored")),
    ("rope_base is not passed to the blocks: LlamaBlock(d_model, num_heads, num_kv_heads, d_ff, eps, rope_base)",
     _mistake(_LMMistake, "base-ignored")),
    ("the output went through a softmax: forward returns logits", _mistake(_LMMistake, "softmax")),
    ("the layers are one module repeated ([block] * num_layers: every layer shares one block's weights): build a "
     "LlamaBlock of its own for each layer, nn.ModuleList(LlamaBlock(...) for _ in range(num_layers))",
     _mistake(_LMMistake, "shared-layers")),
]

LM_REQUIREMENTS = (
    Requirement("forward", "embed (no scaling) -> the blocks -> norm -> lm_head: logits (B, T, vocab_size), "
                           "with MHA, GQA and an untied head", 2),
    Requirement("tied", "with tie_weights, lm_head.weight is embed.weight (one Parameter)"),
    Requirement("config", "passes eps and rope_base to every block and to the final norm"),
    Requirement("max-len", "raises a ValueError when T > max_len", 0.5),
    Requirement("dtype-device", "follows the dtype (float64) and device (meta) of its weights", 0.5),
)

MAX_LEN_HINT = "forward must raise a ValueError when ids has more than max_len tokens: check ids.size(1) first"


def _lm_probe(id, title, V, C, H, H_kv, L, d_ff, B, T, seed, dtype="float32", tie=True, distinct_head=False,
              **init_and_extra):
    init = {key: init_and_extra.pop(key) for key in ("eps", "rope_base", "max_len") if key in init_and_extra}
    init["tie_weights"] = tie
    ids = torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(seed + 100))
    probe = module_probe(id, title, LlamaLM, (V, C, H, H_kv, L, d_ff), init, (ids,), None, seed=seed, dtype=dtype,
                         output_names=("logits",), perturb=0.3, **init_and_extra)
    if distinct_head:  # a tied model loads these into its one matrix; an untied one keeps two
        state = probe["construct"]["state_dict"]
        state["lm_head.weight"] = randn(*state["lm_head.weight"].shape, seed=seed + 200)
    return probe


def lm_public_probes():
    return [
        *requiring("forward", [
            _lm_probe("mha", "vocab 13, d_model=8, H = H_kv = 2, 2 layers, untied", 13, 8, 2, 2, 2, 12, 2, 5, seed=21,
                      tie=False),
            _lm_probe("gqa", "vocab 17, d_model=16, H=4, H_kv=2, 1 layer, untied", 17, 16, 4, 2, 1, 24, 2, 4, seed=22,
                      tie=False),
        ]),
        *requiring("tied", [
            _lm_probe("tied", "tie_weights=True, lm_head.weight loaded with values of its own", 13, 8, 2, 1, 2, 12,
                      2, 5, seed=23, distinct_head=True),
        ]),
        *requiring("config", [
            _lm_probe("config", "eps=0.5, rope_base=100, untied", 13, 8, 2, 2, 2, 12, 2, 6, seed=24, tie=False,
                      eps=0.5, rope_base=100.0),
        ]),
        *requiring("max-len", [
            _lm_probe("max-len", "max_len=4, 5 tokens", 13, 8, 2, 2, 1, 12, 1, 5, seed=25, max_len=4,
                      hint=MAX_LEN_HINT),
        ]),
        *requiring("dtype-device", [
            _lm_probe("float64", "float64, untied", 13, 8, 2, 1, 2, 12, 2, 4, seed=26, dtype="float64", tie=False),
            _lm_probe("meta", "on the meta device", 13, 8, 2, 1, 1, 12, 2, 4, seed=27, device="meta"),
        ]),
    ]


def lm_hidden_probes(devices=("cpu",)):
    return lm_public_probes() + [
        *requiring("forward", [
            _lm_probe("mqa", "vocab 21, d_model=16, H=4, H_kv=1, 3 layers, untied", 21, 16, 4, 1, 3, 24, 2, 7,
                      seed=31, tie=False),
        ]),
        *requiring("tied", [
            _lm_probe("tied-2", "tie_weights=True, vocab 19, d_model=16", 19, 16, 4, 2, 1, 24, 3, 4, seed=32,
                      distinct_head=True),
        ]),
        *requiring("config", [
            _lm_probe("config-2", "eps=0.2, rope_base=50, untied", 17, 16, 4, 2, 2, 24, 1, 8, seed=33, tie=False,
                      eps=0.2, rope_base=50.0),
        ]),
        *requiring("max-len", [
            _lm_probe("max-len-2", "max_len=6, 9 tokens", 13, 8, 2, 2, 1, 12, 2, 9, seed=34, max_len=6,
                      hint=MAX_LEN_HINT),
        ]),
        *requiring("dtype-device", [
            _lm_probe("float64-2", "float64, vocab 17, untied", 17, 16, 4, 2, 1, 24, 2, 5, seed=35, dtype="float64",
                      tie=False),
            _lm_probe("meta-2", "on the meta device, untied", 17, 16, 4, 2, 2, 24, 1, 5, seed=36, device="meta",
                      tie=False),
            *[on_device(_lm_probe("device", "untied", 13, 8, 2, 1, 2, 12, 2, 4, seed=37, tie=False), d)
              for d in devices if d != "cpu"],
        ]),
    ]


# ============================================================================ load_llama_weights
def _hf_state_dict(V, C, H, H_kv, L, d_ff, seed, dtype="float64", head="untied"):
    """A seeded state dict in the Hugging Face Llama layout; head: "untied", "absent" or "embedding"."""
    D = C // H
    shapes = {"model.embed_tokens.weight": (V, C)}
    for i in range(L):
        prefix = f"model.layers.{i}"
        shapes.update({
            f"{prefix}.self_attn.q_proj.weight": (C, C), f"{prefix}.self_attn.k_proj.weight": (H_kv * D, C),
            f"{prefix}.self_attn.v_proj.weight": (H_kv * D, C), f"{prefix}.self_attn.o_proj.weight": (C, C),
            f"{prefix}.mlp.gate_proj.weight": (d_ff, C), f"{prefix}.mlp.up_proj.weight": (d_ff, C),
            f"{prefix}.mlp.down_proj.weight": (C, d_ff), f"{prefix}.input_layernorm.weight": (C,),
            f"{prefix}.post_attention_layernorm.weight": (C,),
        })
    shapes["model.norm.weight"] = (C,)
    if head == "untied":
        shapes["lm_head.weight"] = (V, C)
    state = {name: randn(*shape, seed=seed + i, dtype=dtype) for i, (name, shape) in enumerate(shapes.items())}
    if head == "embedding":
        state["lm_head.weight"] = state["model.embed_tokens.weight"].clone()
    return state


def _load_probe(id, title, V, C, H, H_kv, L, d_ff, seed, dtype="float64", head="untied", order="hf", edit=None,
                **extra):
    state = _hf_state_dict(V, C, H, H_kv, L, d_ff, seed, dtype, head)
    if order == "reversed":  # another file's order: only names say where a tensor goes
        state = dict(reversed(list(state.items())))
    if edit:
        state = edit(state)
    shell = {"__fixture__": "llama_shell", "args": [V, C, H, H_kv, L, d_ff],
             "kwargs": {"tie_weights": head != "untied", "seed": seed + 500, "dtype": dtype}}
    names = ["embed.weight"] + [f"layers.{i}.{n}.weight" for i in range(L) for n in (
        "attn_norm", "attn.q_proj", "attn.k_proj", "attn.v_proj", "attn.out_proj", "ffn_norm", "ffn.w_gate", "ffn.w_up",
        "ffn.w_down")] + ["norm.weight"] + (["lm_head.weight"] if head == "untied" else [])
    return function_probe(id, title, (shell, state), {}, names, returned_parameters=True, **extra)


def _without(name):
    return lambda state: {k: v for k, v in state.items() if k != name}


def _plus(name, shape):
    return lambda state: {**state, name: torch.zeros(shape, dtype=next(iter(state.values())).dtype)}


def _load(model, state_dict, variant):
    """load_llama_weights with one knob turned the wrong way."""
    if variant == "by-position":
        with torch.no_grad():
            for parameter, tensor in zip(model.parameters(), state_dict.values()):
                parameter.copy_(tensor)
        return model
    state = dict(state_dict)
    for i, layer in enumerate(model.layers):
        for proj, heads in (("q_proj", layer.attn.num_heads), ("k_proj", layer.attn.num_kv_heads)):
            name = f"model.layers.{i}.self_attn.{proj}.weight"
            # The wrong order, then the inverse of the right one: the reference's loader undoes the second.
            state[name] = _neighbours_to_halves(_wrong_rows(state[name], heads, layer.attn.num_heads, proj, variant),
                                                heads)
    return load_llama_weights(model, state)


def _halves_to_neighbours(weight, heads):
    rows, columns = weight.shape
    return weight.reshape(heads, 2, rows // heads // 2, columns).transpose(1, 2).reshape(rows, columns)


def _neighbours_to_halves(weight, heads):
    rows, columns = weight.shape
    return weight.reshape(heads, rows // heads // 2, 2, columns).transpose(1, 2).reshape(rows, columns)


def _wrong_rows(weight, heads, query_heads, proj, variant):
    """q_proj's or k_proj's rows as a mistaken loader orders them."""
    if variant == "none" or (variant == "q-only" and proj == "k_proj"):
        return weight
    if variant == "inverse":
        return _neighbours_to_halves(weight, heads)
    if variant == "whole-matrix":
        return _halves_to_neighbours(weight, 1)
    if variant == "k-with-query-heads":
        return _halves_to_neighbours(weight, query_heads)
    return _halves_to_neighbours(weight, heads)


def _load_mistake(variant):
    def wrong(model, state_dict):
        if variant == "returns-nothing":  # fills the model right, and forgets to hand it back
            load_llama_weights(model, state_dict)
            return None
        return _load(model, state_dict, variant)

    wrong.__name__ = f"load_llama_weights_{variant}"
    return wrong


PERMUTATION = ("within each head, row 2i of q_proj and k_proj takes Hugging Face's row i and row 2i+1 takes row "
               "i + D/2: w.reshape(heads, 2, D // 2, C).transpose(1, 2).reshape(heads * D, C)")

# Not permuting k_proj and permuting it in num_heads groups give the same rows when a head of
# the groups has 2 rows (H = 2 H_kv with head size 4): one hint for both.
K_ROWS = ("k_proj's rows are not permuted per key/value head: the keys are rotated too, so k_proj needs the same "
          "permutation as q_proj, in attn.num_kv_heads heads of D rows (not num_heads)")

LOAD_MISTAKES = [
    ("the rows of q_proj and k_proj are not permuted: Hugging Face rotates the halves (i, i + D/2), this course the "
     "neighbours (2i, 2i+1); " + PERMUTATION, _load_mistake("none")),
    ("the rows of q_proj and k_proj are permuted the wrong way (the inverse permutation): " + PERMUTATION,
     _load_mistake("inverse")),
    (K_ROWS, _load_mistake("q-only")),
    (K_ROWS, _load_mistake("k-with-query-heads")),
    ("the rows are permuted over the whole matrix, not per head: each head of D rows has its own halves, "
     "reshape(heads, 2, D // 2, C)", _load_mistake("whole-matrix")),
    ("the tensors are copied by position, not by name: a checkpoint's order is not the model's; map each name "
     "(model.layers.{i}.self_attn.q_proj.weight -> layers[i].attn.q_proj.weight, ...) and copy by it",
     _load_mistake("by-position")),
    ("load_llama_weights returns nothing: return the model it filled, so that "
     "model = load_llama_weights(LlamaLM.from_config(config), state_dict) works", _load_mistake("returns-nothing")),
]

REFUSE_HINT = ("a missing or unexpected tensor, or one of the wrong shape, must raise a ValueError naming it, "
               "before anything is copied: compare the checkpoint's names and shapes with the model's first")

TIED_HINT = ("with a tied model (model.lm_head.weight is model.embed.weight) a checkpoint may have no lm_head.weight, "
             "or one equal to the embedding: expect lm_head.weight only when the model is untied")

LOAD_REQUIREMENTS = (
    Requirement("names", "copies every tensor to its parameter by name, whatever the checkpoint's order, "
                         "and returns the model", 1),
    Requirement("permutation", "permutes the rows of q_proj and k_proj per head: row 2i of a head takes Hugging "
                               "Face's row i, row 2i+1 takes row i + D/2 (MHA, GQA, MQA)", 2),
    Requirement("tied", "with a tied model, lm_head.weight may be absent or equal to the embedding", 0.5),
    Requirement("refuses", "raises a ValueError for a missing or unexpected tensor, or one of the wrong shape", 1),
    Requirement("dtype", "works in float32 as in float64", 0.5),
)


# Heads of 8 rows at least: with D = 4 the permutation is its own inverse, and a num_heads grouping of
# k_proj's rows can fall on whole heads. Grouped-query models in every requirement, so that a k_proj
# mistake costs the same in the check as in the grade.
def load_public_probes():
    return [
        *requiring("names", [
            _load_probe("reversed", "vocab 11, d_model=32, H=4, H_kv=2, 1 layer, untied, tensors in reverse order",
                        11, 32, 4, 2, 1, 12, seed=41, order="reversed"),
        ]),
        *requiring("permutation", [
            _load_probe("mha", "H = H_kv = 2, head size 8, 2 layers, untied", 11, 16, 2, 2, 2, 12, seed=42),
            _load_probe("gqa", "H=4, H_kv=2, head size 8, 1 layer, untied", 11, 32, 4, 2, 1, 24, seed=43),
        ]),
        *requiring("tied", [
            _load_probe("tied-absent", "tied, no lm_head.weight in the checkpoint, H=4, H_kv=2", 11, 32, 4, 2, 1, 12,
                        seed=44, head="absent", fallback_hint=TIED_HINT),
            _load_probe("tied-equal", "tied, lm_head.weight equal to the embedding, H=2, H_kv=1", 11, 16, 2, 1, 1, 12,
                        seed=45, head="embedding", fallback_hint=TIED_HINT),
        ]),
        *requiring("refuses", [
            _load_probe("missing", "model.layers.0.mlp.up_proj.weight missing", 11, 16, 2, 2, 1, 12, seed=46,
                        edit=_without("model.layers.0.mlp.up_proj.weight"), hint=REFUSE_HINT),
            _load_probe("unexpected", "an unexpected model.layers.1.mlp.up_proj.weight (the model has 1 layer)",
                        11, 16, 2, 2, 1, 12, seed=47, edit=_plus("model.layers.1.mlp.up_proj.weight", (12, 16)),
                        hint=REFUSE_HINT),
            _load_probe("shape", "model.layers.0.self_attn.k_proj.weight of shape (16, 16) for H_kv=1 (8, 16)",
                        11, 16, 2, 1, 1, 12, seed=48, edit=_plus("model.layers.0.self_attn.k_proj.weight", (16, 16)),
                        hint=REFUSE_HINT),
        ]),
        *requiring("dtype", [
            _load_probe("float32", "float32 model and checkpoint, H=4, H_kv=2, head size 8", 11, 32, 4, 2, 1, 24,
                        seed=49, dtype="float32"),
        ]),
    ]


def load_hidden_probes(devices=("cpu",)):
    return load_public_probes() + [
        *requiring("names", [
            _load_probe("reversed-2", "H=4, H_kv=2, head size 6, 2 layers, tensors in reverse order", 13, 24, 4, 2, 2,
                        20, seed=51, order="reversed"),
        ]),
        *requiring("permutation", [
            _load_probe("mqa", "H=4, H_kv=1 (multi-query), head size 6, 2 layers", 13, 24, 4, 1, 2, 20, seed=52),
            _load_probe("gqa-2", "H=6, H_kv=3, head size 8, 1 layer", 13, 48, 6, 3, 1, 20, seed=53),
        ]),
        *requiring("tied", [
            _load_probe("tied-absent-2", "tied, no lm_head.weight, H=4, H_kv=2, 2 layers", 13, 24, 4, 2, 2, 20,
                        seed=54, head="absent", fallback_hint=TIED_HINT),
        ]),
        *requiring("refuses", [
            _load_probe("missing-2", "model.norm.weight missing", 13, 24, 4, 2, 1, 20, seed=55,
                        edit=_without("model.norm.weight"), hint=REFUSE_HINT),
            _load_probe("missing-head", "untied model, no lm_head.weight", 13, 24, 4, 2, 1, 20, seed=56,
                        edit=_without("lm_head.weight"), hint=REFUSE_HINT),
            _load_probe("shape-2", "model.layers.0.mlp.down_proj.weight transposed, (20, 24)", 13, 24, 4, 2, 1, 20,
                        seed=57, edit=_plus("model.layers.0.mlp.down_proj.weight", (20, 24)), hint=REFUSE_HINT),
        ]),
        *requiring("dtype", [
            _load_probe("float32-2", "float32, H=4, H_kv=2, head size 6, 2 layers", 13, 24, 4, 2, 2, 20, seed=58,
                        dtype="float32"),
        ]),
    ]


# ============================================================================ cached_gqa_attention
def _cached(attn, x_new, positions, past_key=None, past_value=None, variant=None):
    """cached_gqa_attention with one knob turned the wrong way."""
    group = attn.num_heads // attn.num_kv_heads
    base = 10000.0 if variant == "base-ignored" else attn.rope_base
    at = None if variant == "positions-from-0" else positions
    q = split_heads(attn.q_proj(x_new), attn.num_heads)
    k = split_heads(attn.k_proj(x_new), attn.num_kv_heads)
    v = split_heads(attn.v_proj(x_new), attn.num_kv_heads)
    if variant == "rotate-after-cache":
        q = apply_rotary(q, at, base)
    elif variant != "no-rotary":
        q, k = apply_rotary(q, at, base), apply_rotary(k, at, base)
    if variant == "values-rotated":
        v = apply_rotary(v, at, base)
    if variant == "cache-all-heads":
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        if past_key is not None:
            past_key, past_value = past_key.repeat_interleave(group, dim=1), past_value.repeat_interleave(group, dim=1)
    if past_key is not None:
        axis = 1 if variant == "heads-axis" else 2  # the sequence axis of (B, H_kv, S, D), or (a mistake) the heads'
        k, v = torch.cat([past_key, k], dim=axis), torch.cat([past_value, v], dim=axis)
    T_new, S = q.size(2), k.size(2)
    if variant == "rotate-after-cache":  # every key rotated at its position, the cached ones a second time
        k = apply_rotary(k, torch.arange(S, device=k.device), base)
    diagonal = 1 if variant == "top-left" else S - T_new + 1
    mask = torch.ones(T_new, S, dtype=torch.bool, device=x_new.device).triu(diagonal=diagonal)
    repeat = (lambda t: t) if variant == "cache-all-heads" else (
        (lambda t: t.repeat(1, group, 1, 1)) if variant == "repeat" else (lambda t: t.repeat_interleave(group, dim=1)))
    out, _ = scaled_dot_product_attention(q, repeat(k), repeat(v), mask)
    return attn.out_proj(merge_heads(out)), k, v


def _cached_mistake(variant):
    def wrong(attn, x_new, positions, past_key=None, past_value=None):
        return _cached(attn, x_new, positions, past_key, past_value, variant)

    wrong.__name__ = f"cached_gqa_attention_{variant}"
    return wrong


CACHED_MISTAKES = [
    ("the cache holds num_heads key/value heads: keep the num_kv_heads heads in it (B, H_kv, S, D), and repeat them "
     "for the query heads only for the arithmetic", _cached_mistake("cache-all-heads")),
    ("the rotary positions restart at 0: the new tokens are at positions (S_past, S_past + 1, ...), so rotate them "
     "with apply_rotary(q, positions, attn.rope_base) and apply_rotary(k, positions, attn.rope_base)",
     _cached_mistake("positions-from-0")),
    ("the queries and keys are not rotated: apply_rotary(q, positions, attn.rope_base), and the same for the keys "
     "before they are cached", _cached_mistake("no-rotary")),
    ("the values are rotated too: apply_rotary goes on the queries and the keys only", _cached_mistake("values-rotated")),
    ("the cached keys are rotated a second time: rotate only the new keys, at positions, before appending them; "
     "past_key holds keys already rotated", _cached_mistake("rotate-after-cache")),
    ("attn.rope_base is not passed to apply_rotary: apply_rotary(q, positions, attn.rope_base)",
     _cached_mistake("base-ignored")),
    ("the mask is aligned at the top left: new token i is at position S_past + i and sees positions 0 .. S_past + i, "
     "the last T_new rows of the (S, S) causal mask", _cached_mistake("top-left")),
    ("the key/value heads are repeated in the wrong order: query head h uses kv head h // (num_heads // "
     "num_kv_heads), so k.repeat_interleave(group, dim=1), not k.repeat(1, group, 1, 1)", _cached_mistake("repeat")),
    ("the new keys and values are appended on the heads axis: append them on the sequence axis, axis 2 of "
     "(B, H_kv, S, D), torch.cat([past_key, k], dim=2)", _cached_mistake("heads-axis")),
]

CACHED_PAST_NONE_HINT = ("past_key=None (the prompt, nothing cached yet) must work: concatenate only when there is a "
                         "past, and mask the new tokens causally among themselves")

CACHED_REQUIREMENTS = (
    Requirement("first-call", "with past_key=None (the prompt) equals causal grouped-query attention over the "
                              "new tokens, rotated at positions", 1),
    Requirement("append", "one new token at position S_past: its output, and the rotated keys and the values of all "
                          "positions (B, H_kv, S_past + 1, D), the past ones first", 1),
    Requirement("chunk", "several new tokens after a past, at their absolute positions: token i sees positions "
                         "0 .. S_past + i", 1),
    Requirement("kv-heads", "the cache holds num_kv_heads heads, never num_heads; query head h reads kv head "
                            "h // (num_heads // num_kv_heads)", 1),
    Requirement("rope-base", "rotates with attn.rope_base", 0.5),
    Requirement("dtype-device", "follows the inputs' dtype (float64) and device (meta)", 0.5),
)


def _gqa_probe(id, title, B, T_new, S_past, C, H, H_kv, seed, dtype="float32", rope_base=10000.0, **extra):
    D = C // H
    sizes = {"q_proj": C, "k_proj": H_kv * D, "v_proj": H_kv * D, "out_proj": C}
    state_dict = {f"{name}.weight": randn(rows, C, seed=seed + i, dtype=dtype, scale=C ** -0.5)
                  for i, (name, rows) in enumerate(sizes.items())}
    attn = {"__fixture__": "gqa_projections", "args": [C, H, H_kv, rope_base, state_dict]}
    x_new = randn(B, T_new, C, seed=seed + 20, dtype=dtype)
    positions = torch.arange(S_past, S_past + T_new)
    if S_past:
        past = (randn(B, H_kv, S_past, D, seed=seed + 21, dtype=dtype), randn(B, H_kv, S_past, D, seed=seed + 22,
                                                                               dtype=dtype))
    else:
        past = (None, None)
        extra.setdefault("fallback_hint", CACHED_PAST_NONE_HINT)
    return function_probe(id, title, (attn, x_new, positions, *past), {}, ("out", "key", "value"), **extra)


# Grouped-query attention (H=4, H_kv=2) in every requirement, so that a mistake with the heads costs the
# same in the check as in the grade.
def cached_public_probes():
    return [
        *requiring("first-call", [
            _gqa_probe("prompt", "no past: 5 new tokens at positions 0 .. 4, H=4, H_kv=2, d_model=16", 2, 5, 0, 16, 4,
                       2, seed=61),
        ]),
        *requiring("append", [
            _gqa_probe("one-token", "1 new token at position 4 after 4 cached, H=4, H_kv=2", 2, 1, 4, 16, 4, 2,
                       seed=62),
        ]),
        *requiring("chunk", [
            _gqa_probe("chunk", "3 new tokens at positions 3 .. 5 after 3 cached, H=4, H_kv=2", 2, 3, 3, 16, 4, 2,
                       seed=63),
        ]),
        *requiring("kv-heads", [
            _gqa_probe("gqa", "H=4, H_kv=2, 2 new tokens after 3 cached, d_model=16", 2, 2, 3, 16, 4, 2, seed=64),
            _gqa_probe("mqa", "H=4, H_kv=1, 1 new token after 5 cached, d_model=16", 1, 1, 5, 16, 4, 1, seed=65),
            _gqa_probe("mha", "H = H_kv = 2, 2 new tokens after 2 cached, d_model=8", 2, 2, 2, 8, 2, 2, seed=69),
        ]),
        *requiring("rope-base", [
            _gqa_probe("rope-base", "rope_base=100, 2 new tokens after 4 cached, H=4, H_kv=2", 2, 2, 4, 16, 4, 2,
                       seed=66, rope_base=100.0),
        ]),
        *requiring("dtype-device", [
            _gqa_probe("float64", "float64, H=4, H_kv=2, 2 new after 3", 2, 2, 3, 16, 4, 2, seed=67, dtype="float64"),
            _gqa_probe("meta", "on the meta device, 2 new after 3", 2, 2, 3, 16, 4, 2, seed=68, device="meta"),
        ]),
    ]


def cached_hidden_probes(devices=("cpu",)):
    return cached_public_probes() + [
        *requiring("first-call", [
            _gqa_probe("prompt-2", "no past: 6 new tokens, H=6, H_kv=3, d_model=24", 1, 6, 0, 24, 6, 3, seed=71),
        ]),
        *requiring("append", [
            _gqa_probe("one-token-2", "1 new token after 9 cached, H=4, H_kv=2, d_model=32", 3, 1, 9, 32, 4, 2,
                       seed=72),
        ]),
        *requiring("chunk", [
            _gqa_probe("chunk-2", "4 new tokens after 6 cached, H=4, H_kv=2", 2, 4, 6, 16, 4, 2, seed=73),
        ]),
        *requiring("kv-heads", [
            _gqa_probe("gqa-2", "H=6, H_kv=2, 3 new tokens after 2 cached, d_model=24", 2, 3, 2, 24, 6, 2, seed=74),
            _gqa_probe("mqa-2", "H=8, H_kv=1, 1 new token after 7 cached, d_model=32", 1, 1, 7, 32, 8, 1, seed=75),
        ]),
        *requiring("rope-base", [
            _gqa_probe("rope-base-2", "rope_base=500000, 2 new tokens after 30 cached", 1, 2, 30, 16, 4, 2, seed=76,
                       rope_base=500000.0),
        ]),
        *requiring("dtype-device", [
            _gqa_probe("float64-2", "float64, H=6, H_kv=3, 3 new after 4", 2, 3, 4, 24, 6, 3, seed=77, dtype="float64"),
            _gqa_probe("meta-2", "on the meta device, H=4, H_kv=1", 1, 3, 5, 16, 4, 1, seed=78, device="meta"),
            *[on_device(_gqa_probe("device", "H=4, H_kv=2, 2 new after 3", 2, 2, 3, 16, 4, 2, seed=79), d)
              for d in devices if d != "cpu"],
        ]),
    ]


EXERCISES = [
    ExerciseChecks("LlamaBlock", LlamaBlock, block_public_probes, block_hidden_probes, BLOCK_MISTAKES,
                   requirements=BLOCK_REQUIREMENTS),
    ExerciseChecks("LlamaLM", LlamaLM, lm_public_probes, lm_hidden_probes, LM_MISTAKES, requirements=LM_REQUIREMENTS),
    ExerciseChecks("load_llama_weights", load_llama_weights, load_public_probes, load_hidden_probes, LOAD_MISTAKES,
                   requirements=LOAD_REQUIREMENTS),
    ExerciseChecks("cached_gqa_attention", cached_gqa_attention, cached_public_probes, cached_hidden_probes,
                   CACHED_MISTAKES, requirements=CACHED_REQUIREMENTS),
]
