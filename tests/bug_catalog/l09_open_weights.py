"""Wrong answers for lesson 09: LlamaBlock, LlamaLM, load_llama_weights and cached_gqa_attention."""

from . import PRELUDE as BASE_PRELUDE
from . import Bug, edited

# The lesson's setup cell imports the earlier lessons' pieces from the reference, as the grader's
# sandbox does; within the lesson, LlamaLM builds LlamaBlocks: the reference's here.
PRELUDE = BASE_PRELUDE + '''
from autograder.reference import (GroupedQueryAttention, LlamaBlock, RMSNorm, SwiGLU, apply_rotary, causal_mask,
                                  merge_heads, scaled_dot_product_attention, split_heads)
'''

# Right answers, as a student writes them; the wrong ones are one of them with a few lines changed.
_BLOCK = '''
class LlamaBlock(nn.Module):
    def __init__(self, d_model, num_heads, num_kv_heads, d_ff, eps=1e-6, rope_base=10000.0):
        super().__init__()
        self.attn_norm = RMSNorm(d_model, eps)
        self.attn = GroupedQueryAttention(d_model, num_heads, num_kv_heads, bias=False, rotary=True,
                                          rope_base=rope_base)
        self.ffn_norm = RMSNorm(d_model, eps)
        self.ffn = SwiGLU(d_model, d_ff, bias=False)

    def forward(self, x, positions=None):
        mask = causal_mask(x.size(1), device=x.device)
        h = x + self.attn(self.attn_norm(x), attn_mask=mask, positions=positions)[0]
        return h + self.ffn(self.ffn_norm(h))
'''

_LM = '''
class LlamaLM(nn.Module):
    def __init__(self, vocab_size, d_model, num_heads, num_kv_heads, num_layers, d_ff, eps=1e-6,
                 rope_base=10000.0, tie_weights=True, max_len=2048):
        super().__init__()
        self.max_len = max_len
        self.embed = nn.Embedding(vocab_size, d_model)
        self.layers = nn.ModuleList(
            LlamaBlock(d_model, num_heads, num_kv_heads, d_ff, eps, rope_base) for _ in range(num_layers)
        )
        self.norm = RMSNorm(d_model, eps)
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)
        if tie_weights:
            self.lm_head.weight = self.embed.weight

    def forward(self, ids):
        if ids.size(1) > self.max_len:
            raise ValueError("too many tokens")
        x = self.embed(ids)
        for layer in self.layers:
            x = layer(x)
        return self.lm_head(self.norm(x))
'''

_LOAD = '''
def load_llama_weights(model, state_dict):
    names = {"model.embed_tokens.weight": model.embed.weight, "model.norm.weight": model.norm.weight}
    for i, layer in enumerate(model.layers):
        p = f"model.layers.{i}."
        names[p + "input_layernorm.weight"] = layer.attn_norm.weight
        names[p + "self_attn.q_proj.weight"] = layer.attn.q_proj.weight
        names[p + "self_attn.k_proj.weight"] = layer.attn.k_proj.weight
        names[p + "self_attn.v_proj.weight"] = layer.attn.v_proj.weight
        names[p + "self_attn.o_proj.weight"] = layer.attn.out_proj.weight
        names[p + "post_attention_layernorm.weight"] = layer.ffn_norm.weight
        names[p + "mlp.gate_proj.weight"] = layer.ffn.w_gate.weight
        names[p + "mlp.up_proj.weight"] = layer.ffn.w_up.weight
        names[p + "mlp.down_proj.weight"] = layer.ffn.w_down.weight
    tied = model.lm_head.weight is model.embed.weight
    state = {k: v for k, v in state_dict.items() if not (tied and k == "lm_head.weight")}
    if not tied:
        names["lm_head.weight"] = model.lm_head.weight
    if set(state) != set(names):
        raise ValueError(f"missing {set(names) - set(state)}, unexpected {set(state) - set(names)}")
    for name, param in names.items():
        if state[name].shape != param.shape:
            raise ValueError(f"{name}: shape {tuple(state[name].shape)}, expected {tuple(param.shape)}")

    def permute(w, heads):
        rows, cols = w.shape
        d = rows // heads
        return w.reshape(heads, 2, d // 2, cols).transpose(1, 2).reshape(rows, cols)

    with torch.no_grad():
        for name, param in names.items():
            w = state[name]
            if name.endswith("q_proj.weight"):
                w = permute(w, model.layers[0].attn.num_heads)
            elif name.endswith("k_proj.weight"):
                w = permute(w, model.layers[0].attn.num_kv_heads)
            param.copy_(w)
    return model
'''

_CACHED = '''
def cached_gqa_attention(attn, x_new, positions, past_key=None, past_value=None):
    q = split_heads(attn.q_proj(x_new), attn.num_heads)
    k = split_heads(attn.k_proj(x_new), attn.num_kv_heads)
    v = split_heads(attn.v_proj(x_new), attn.num_kv_heads)
    q = apply_rotary(q, positions, attn.rope_base)
    k = apply_rotary(k, positions, attn.rope_base)
    if past_key is not None:
        k = torch.cat([past_key, k], dim=2)
        v = torch.cat([past_value, v], dim=2)
    T_new, S = q.size(2), k.size(2)
    mask = torch.ones(T_new, S, dtype=torch.bool, device=x_new.device).triu(diagonal=S - T_new + 1)
    group = attn.num_heads // attn.num_kv_heads
    out, _ = scaled_dot_product_attention(q, k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1), mask)
    return attn.out_proj(merge_heads(out)), k, v
'''

_BLOCK_H = "        h = x + self.attn(self.attn_norm(x), attn_mask=mask, positions=positions)[0]\n"
_BLOCK_OUT = "        return h + self.ffn(self.ffn_norm(h))\n"
_Q_PERMUTE = "                w = permute(w, model.layers[0].attn.num_heads)\n"
_K_PERMUTE = "                w = permute(w, model.layers[0].attn.num_kv_heads)\n"
_ROTATE = ("    q = apply_rotary(q, positions, attn.rope_base)\n"
           "    k = apply_rotary(k, positions, attn.rope_base)\n")

BUGS = [
    # ------------------------------------------------------------------ LlamaBlock
    Bug("LlamaBlock", "no causal mask", edited(_BLOCK, (
        "attn_mask=mask, positions", "attn_mask=None, positions")), names="the causal mask is missing"),
    Bug("LlamaBlock", "positions not passed on", edited(_BLOCK, (
        "attn_mask=mask, positions=positions)", "attn_mask=mask)")), names="positions are not passed on"),
    Bug("LlamaBlock", "post-norm, as in 2017", edited(_BLOCK, (_BLOCK_H + _BLOCK_OUT, (
        "        h = self.attn_norm(x + self.attn(x, attn_mask=mask, positions=positions)[0])\n"
        "        return self.ffn_norm(h + self.ffn(h))\n"))), names="the norms come after the residual additions"),
    Bug("LlamaBlock", "no residual around the attention", edited(_BLOCK, (
        "        h = x + self.attn(", "        h = self.attn(")), names="the attention's residual is missing"),
    Bug("LlamaBlock", "no residual around the feed-forward network", edited(_BLOCK, (
        _BLOCK_OUT, "        return self.ffn(self.ffn_norm(h))\n")), names="the feed-forward network's residual"),
    Bug("LlamaBlock", "parallel sub-layers (GPT-J)", edited(_BLOCK, (
        _BLOCK_OUT, "        return h + self.ffn(self.ffn_norm(x))\n")), names="the feed-forward network reads x"),
    Bug("LlamaBlock", "one norm for both sub-layers", edited(_BLOCK, (
        _BLOCK_OUT, "        return h + self.ffn(self.attn_norm(h))\n")), names="goes through attn_norm"),
    Bug("LlamaBlock", "eps not passed to the norms", edited(_BLOCK, (
        "        self.attn_norm = RMSNorm(d_model, eps)\n", "        self.attn_norm = RMSNorm(d_model)\n"), (
        "        self.ffn_norm = RMSNorm(d_model, eps)\n", "        self.ffn_norm = RMSNorm(d_model)\n")),
        names="eps is not passed to the RMSNorms"),
    Bug("LlamaBlock", "rope_base not passed to the attention", edited(_BLOCK, (
        "rotary=True,\n                                          rope_base=rope_base)", "rotary=True)")),
        names="rope_base is not passed to the attention"),
    Bug("LlamaBlock", "the mask made on the CPU", edited(_BLOCK, (
        "causal_mask(x.size(1), device=x.device)", "causal_mask(x.size(1))")), names="meta device"),

    # ------------------------------------------------------------------ LlamaLM
    Bug("LlamaLM", "embedding scaled by sqrt(d_model)", edited(_LM, (
        "        x = self.embed(ids)\n", "        x = self.embed(ids) * math.sqrt(self.embed.embedding_dim)\n")),
        names="multiplied by sqrt(d_model)"),
    Bug("LlamaLM", "no final norm", edited(_LM, (
        "return self.lm_head(self.norm(x))", "return self.lm_head(x)")), names="the final RMSNorm is missing"),
    Bug("LlamaLM", "head copied, not tied", edited(_LM, (
        "self.lm_head.weight = self.embed.weight", "self.lm_head.weight = nn.Parameter(self.embed.weight.clone())")),
        names="lm_head is not tied"),
    Bug("LlamaLM", "tie_weights ignored", edited(_LM, (
        "        if tie_weights:\n            self.lm_head.weight = self.embed.weight\n", "")), names="lm_head is not tied"),
    Bug("LlamaLM", "eps not passed to the final norm", edited(_LM, (
        "        self.norm = RMSNorm(d_model, eps)\n", "        self.norm = RMSNorm(d_model)\n")),
        names="eps is not passed to the final RMSNorm"),
    Bug("LlamaLM", "rope_base not passed to the blocks", edited(_LM, (
        "d_ff, eps, rope_base)", "d_ff, eps)")), names="rope_base is not passed to the blocks"),
    Bug("LlamaLM", "softmax at the end", edited(_LM, (
        "return self.lm_head(self.norm(x))", "return self.lm_head(self.norm(x)).softmax(dim=-1)")),
        names="went through a softmax"),
    Bug("LlamaLM", "no max_len check", edited(_LM, (
        '        if ids.size(1) > self.max_len:\n            raise ValueError("too many tokens")\n', "")),
        names="more than max_len tokens"),

    # ------------------------------------------------------------------ load_llama_weights
    Bug("load_llama_weights", "q and k rows not permuted", edited(_LOAD, (_Q_PERMUTE, "                pass\n"), (
        _K_PERMUTE, "                pass\n")), names="are not permuted: Hugging Face rotates the halves"),
    Bug("load_llama_weights", "the inverse permutation", edited(_LOAD, (
        "        return w.reshape(heads, 2, d // 2, cols).transpose(1, 2).reshape(rows, cols)\n",
        "        return w.reshape(heads, d // 2, 2, cols).transpose(1, 2).reshape(rows, cols)\n")),
        names="permuted the wrong way"),
    Bug("load_llama_weights", "only q_proj permuted", edited(_LOAD, (_K_PERMUTE, "                pass\n")),
        names="k_proj's rows are not permuted per key/value head"),
    Bug("load_llama_weights", "k_proj permuted in num_heads groups", edited(_LOAD, (
        _K_PERMUTE, "                w = permute(w, model.layers[0].attn.num_heads)\n")),
        names="k_proj's rows are not permuted per key/value head"),
    Bug("load_llama_weights", "permuted over the whole matrix", edited(_LOAD, (
        _Q_PERMUTE, "                w = permute(w, 1)\n"), (_K_PERMUTE, "                w = permute(w, 1)\n")),
        names="over the whole matrix, not per head"),
    Bug("load_llama_weights", "copied by position", '''
def load_llama_weights(model, state_dict):
    with torch.no_grad():
        for param, tensor in zip(model.parameters(), state_dict.values()):
            param.copy_(tensor)
    return model
''', names="copied by position, not by name"),
    Bug("load_llama_weights", "no checks: KeyError, extra tensors ignored, copy_ fails on a shape", edited(_LOAD, (
        '''    if set(state) != set(names):
        raise ValueError(f"missing {set(names) - set(state)}, unexpected {set(state) - set(names)}")
    for name, param in names.items():
        if state[name].shape != param.shape:
            raise ValueError(f"{name}: shape {tuple(state[name].shape)}, expected {tuple(param.shape)}")
''', "")), names="must raise a ValueError naming it"),
    Bug("load_llama_weights", "lm_head.weight required even when tied", edited(_LOAD, (
        '    state = {k: v for k, v in state_dict.items() if not (tied and k == "lm_head.weight")}\n'
        '    if not tied:\n        names["lm_head.weight"] = model.lm_head.weight\n',
        '    state = dict(state_dict)\n    names["lm_head.weight"] = model.lm_head.weight\n')),
        names="may have no lm_head.weight"),
    Bug("load_llama_weights", "returns nothing", edited(_LOAD, ("    return model\n", "")), names="return the model"),

    # ------------------------------------------------------------------ cached_gqa_attention
    Bug("cached_gqa_attention", "the cache holds num_heads heads", edited(_CACHED, (
        "    if past_key is not None:\n", "    group = attn.num_heads // attn.num_kv_heads\n"
        "    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)\n"
        "    if past_key is not None:\n        past_key = past_key.repeat_interleave(group, dim=1)\n"
        "        past_value = past_value.repeat_interleave(group, dim=1)\n"), (
        "k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1), mask", "k, v, mask")),
        names="the cache holds num_heads key/value heads"),
    Bug("cached_gqa_attention", "rotary positions restart at 0", edited(_CACHED, (_ROTATE, (
        "    q = apply_rotary(q, None, attn.rope_base)\n    k = apply_rotary(k, None, attn.rope_base)\n"))),
        names="the rotary positions restart at 0"),
    Bug("cached_gqa_attention", "no rotation", edited(_CACHED, (_ROTATE, "")),
        names="the queries and keys are not rotated"),
    Bug("cached_gqa_attention", "the values rotated too", edited(_CACHED, (
        _ROTATE, _ROTATE + "    v = apply_rotary(v, positions, attn.rope_base)\n")), names="the values are rotated too"),
    Bug("cached_gqa_attention", "rope_base ignored", edited(_CACHED, (_ROTATE, (
        "    q = apply_rotary(q, positions)\n    k = apply_rotary(k, positions)\n"))),
        names="attn.rope_base is not passed"),
    Bug("cached_gqa_attention", "mask aligned at the top left", edited(_CACHED, (
        ".triu(diagonal=S - T_new + 1)", ".triu(diagonal=1)")), names="aligned at the top left"),
    Bug("cached_gqa_attention", "kv heads repeated in the wrong order", edited(_CACHED, (
        "k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)",
        "k.repeat(1, group, 1, 1), v.repeat(1, group, 1, 1)")), names="repeated in the wrong order"),
    Bug("cached_gqa_attention", "keys rotated after the cache, the past ones twice", edited(_CACHED, (
        "    k = apply_rotary(k, positions, attn.rope_base)\n", ""), (
        "    T_new, S = q.size(2), k.size(2)\n", "    T_new, S = q.size(2), k.size(2)\n"
        "    k = apply_rotary(k, torch.arange(S, device=k.device), attn.rope_base)\n")),
        names="the cached keys are rotated a second time"),
    Bug("cached_gqa_attention", "the mask made on the CPU", edited(_CACHED, (
        "dtype=torch.bool, device=x_new.device)", "dtype=torch.bool)")), names="meta device"),
]

# Wrong answers written before any diagnosis was designed for them (issue 20).
BUGS += [
    Bug("LlamaBlock", "each norm applied to its sub-layer's output", edited(_BLOCK, (_BLOCK_H + _BLOCK_OUT, (
        "        h = x + self.attn_norm(self.attn(x, attn_mask=mask, positions=positions)[0])\n"
        "        return h + self.ffn_norm(self.ffn(h))\n"))), names="the sub-layer's input"),
    Bug("LlamaLM", "one block shared by every layer", edited(_LM, (
        "        self.layers = nn.ModuleList(\n"
        "            LlamaBlock(d_model, num_heads, num_kv_heads, d_ff, eps, rope_base) for _ in range(num_layers)\n"
        "        )\n",
        "        block = LlamaBlock(d_model, num_heads, num_kv_heads, d_ff, eps, rope_base)\n"
        "        self.layers = nn.ModuleList([block] * num_layers)\n")), names="one module"),
    Bug("cached_gqa_attention", "the cache appended on the heads axis", edited(_CACHED, (
        "        k = torch.cat([past_key, k], dim=2)\n        v = torch.cat([past_value, v], dim=2)\n",
        "        k = torch.cat([past_key, k], dim=1)\n        v = torch.cat([past_value, v], dim=1)\n")),
        names="sequence axis"),
]
