"""Lesson 09: lesson 08's pieces assembled into the Llama architecture (also Mistral's, Qwen2's and
SmolLM's), a loader for checkpoints in the Hugging Face layout, and a KV cache of H_kv heads."""

import torch
from torch import nn

from .attention import scaled_dot_product_attention
from .decoder import causal_mask
from .modern import GroupedQueryAttention, RMSNorm, SwiGLU, apply_rotary
from .multihead import merge_heads, split_heads

__all__ = ["LlamaBlock", "LlamaLM", "load_llama_weights", "cached_gqa_attention"]


class LlamaBlock(nn.Module):
    """Pre-norm decoder block: h = x + attn(RMSNorm(x)) with a causal mask, then h + SwiGLU(RMSNorm(h))."""

    def __init__(self, d_model, num_heads, num_kv_heads, d_ff, eps=1e-6, rope_base=10000.0):
        super().__init__()
        self.attn_norm = RMSNorm(d_model, eps)
        self.attn = GroupedQueryAttention(d_model, num_heads, num_kv_heads, bias=False, rotary=True,
                                          rope_base=rope_base)
        self.ffn_norm = RMSNorm(d_model, eps)
        self.ffn = SwiGLU(d_model, d_ff, bias=False)

    def forward(self, x, positions=None):
        mask = causal_mask(x.size(1), device=x.device)  # (T, T), True above the diagonal
        h = x + self.attn(self.attn_norm(x), attn_mask=mask, positions=positions)[0]  # (B, T, C)
        return h + self.ffn(self.ffn_norm(h))  # (B, T, C)


def _rope_theta(config):
    """transformers 4 (and the hub's checkpoints) write rope_theta at the top level; transformers 5
    inside rope_parameters, whose rope_type must then be the plain one."""
    parameters = config.get("rope_parameters") or {}
    if parameters.get("rope_type", "default") != "default":
        raise ValueError(f"rope_parameters asks for rope_type={parameters['rope_type']!r}: only plain rotary "
                         "positions are supported")
    return float(parameters.get("rope_theta", config.get("rope_theta", 10000.0)))


def _check_supported(config):
    """A config this architecture would compute differently from the checkpoint's own model: refused."""
    heads = config["num_attention_heads"]
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    if head_dim * heads != config["hidden_size"]:
        raise ValueError(f"head_dim={head_dim} is not hidden_size / num_attention_heads = "
                         f"{config['hidden_size']} / {heads}: not supported")
    if config.get("hidden_act", "silu") != "silu":
        raise ValueError(f"hidden_act={config['hidden_act']!r}: SwiGLU's gate is silu")
    if config.get("rope_scaling"):
        raise ValueError(f"rope_scaling={config['rope_scaling']!r}: only plain rotary positions are supported")


class LlamaLM(nn.Module):
    """Token embedding -> N LlamaBlocks -> RMSNorm -> lm_head (tied to the embedding when tie_weights)."""

    def __init__(self, vocab_size, d_model, num_heads, num_kv_heads, num_layers, d_ff, eps=1e-6,
                 rope_base=10000.0, tie_weights=True, max_len=2048):
        super().__init__()
        self.max_len = max_len
        self.embed = nn.Embedding(vocab_size, d_model)  # no sqrt(d_model) scaling in Llama
        self.layers = nn.ModuleList(
            LlamaBlock(d_model, num_heads, num_kv_heads, d_ff, eps, rope_base) for _ in range(num_layers)
        )
        self.norm = RMSNorm(d_model, eps)
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)
        if tie_weights:
            self.lm_head.weight = self.embed.weight  # one matrix, embedding and unembedding

    def forward(self, ids):
        T = ids.size(1)
        if T > self.max_len:
            raise ValueError(f"{T} tokens are more than max_len={self.max_len}")
        x = self.embed(ids)  # (B, T, C)
        for layer in self.layers:
            x = layer(x)  # (B, T, C); positions 0 .. T - 1
        return self.lm_head(self.norm(x))  # (B, T, V): logits, no softmax

    @classmethod
    def from_config(cls, config):
        """A LlamaLM with the sizes of a Hugging Face config.json (a dict); its weights are random."""
        _check_supported(config)
        heads = config["num_attention_heads"]
        return cls(
            vocab_size=config["vocab_size"], d_model=config["hidden_size"], num_heads=heads,
            num_kv_heads=config.get("num_key_value_heads") or heads, num_layers=config["num_hidden_layers"],
            d_ff=config["intermediate_size"], eps=config.get("rms_norm_eps", 1e-6), rope_base=_rope_theta(config),
            tie_weights=config.get("tie_word_embeddings", True),
            max_len=config.get("max_position_embeddings", 2048),
        )

    def forward_cached(self, ids_new, cache):
        """Logits (B, T_new, V) of new tokens that follow the ones whose keys and values are in ``cache``.

        ``cache`` holds one (key, value) pair per block, each (B, H_kv, S_past, D), or None entries
        before the first call; it is filled in place. The new tokens sit at positions
        S_past .. S_past + T_new - 1, and cached_gqa_attention rotates them there.
        """
        past = 0 if cache[0] is None else cache[0][0].size(2)
        T_new = ids_new.size(1)
        if past + T_new > self.max_len:
            raise ValueError(f"position {past + T_new - 1} is past max_len={self.max_len}")
        positions = torch.arange(past, past + T_new, device=ids_new.device)  # (T_new,)
        x = self.embed(ids_new)  # (B, T_new, C)
        for i, layer in enumerate(self.layers):
            past_key, past_value = cache[i] if cache[i] is not None else (None, None)
            out, key, value = cached_gqa_attention(layer.attn, layer.attn_norm(x), positions, past_key, past_value)
            cache[i] = (key, value)  # (B, H_kv, S_past + T_new, D) each
            x = x + out  # (B, T_new, C)
            x = x + layer.ffn(layer.ffn_norm(x))
        return self.lm_head(self.norm(x))  # (B, T_new, V)


def load_llama_weights(model, state_dict):
    """Copy a Hugging Face Llama state dict into a LlamaLM in place, and return the model.

    Names are matched, never positions. A missing or unexpected tensor, or one of the wrong shape,
    raises ValueError before anything is copied. With a tied head, lm_head.weight may be absent or
    equal to the embedding. Hugging Face rotates the pairs (i, i + D/2) of a head, lesson 08 the pairs
    (2i, 2i+1): the rows of q_proj and k_proj are reordered per head, row 2i from row i and row 2i+1
    from row i + D/2, so that the loaded model computes the same function.
    """
    # Where each of the checkpoint's tensors goes, and how many heads its rows form (0: not reordered).
    targets = {"model.embed_tokens.weight": (model.embed.weight, 0), "model.norm.weight": (model.norm.weight, 0)}
    for i, layer in enumerate(model.layers):
        prefix = f"model.layers.{i}"
        targets.update({
            f"{prefix}.input_layernorm.weight": (layer.attn_norm.weight, 0),
            f"{prefix}.self_attn.q_proj.weight": (layer.attn.q_proj.weight, layer.attn.num_heads),
            f"{prefix}.self_attn.k_proj.weight": (layer.attn.k_proj.weight, layer.attn.num_kv_heads),
            f"{prefix}.self_attn.v_proj.weight": (layer.attn.v_proj.weight, 0),
            f"{prefix}.self_attn.o_proj.weight": (layer.attn.out_proj.weight, 0),
            f"{prefix}.post_attention_layernorm.weight": (layer.ffn_norm.weight, 0),
            f"{prefix}.mlp.gate_proj.weight": (layer.ffn.w_gate.weight, 0),
            f"{prefix}.mlp.up_proj.weight": (layer.ffn.w_up.weight, 0),
            f"{prefix}.mlp.down_proj.weight": (layer.ffn.w_down.weight, 0),
        })
    state_dict = dict(state_dict)
    if model.lm_head.weight is not model.embed.weight:
        targets["lm_head.weight"] = (model.lm_head.weight, 0)
    elif "lm_head.weight" in state_dict:  # a tied model takes a head only if it is the embedding
        head = state_dict.pop("lm_head.weight")
        if not torch.equal(head, state_dict.get("model.embed_tokens.weight", head)):
            raise ValueError("lm_head.weight differs from model.embed_tokens.weight, but the model ties them: "
                             "build it with tie_weights=False (tie_word_embeddings is false in its config)")
    missing, unexpected = sorted(targets.keys() - state_dict.keys()), sorted(state_dict.keys() - targets.keys())
    if missing or unexpected:
        raise ValueError(f"the state dict does not fit the model: missing {missing}, unexpected {unexpected}")
    for name, (parameter, _) in targets.items():
        if state_dict[name].shape != parameter.shape:
            raise ValueError(f"{name} has shape {tuple(state_dict[name].shape)}, the model's is "
                             f"{tuple(parameter.shape)}")
    with torch.no_grad():
        for name, (parameter, heads) in targets.items():
            weight = state_dict[name]
            if heads:
                rows, columns = weight.shape
                halves = weight.reshape(heads, 2, rows // heads // 2, columns)  # (H, 2, D/2, C): the two halves
                weight = halves.transpose(1, 2).reshape(rows, columns)  # (H, D/2, 2, C): i and i + D/2 side by side
            parameter.copy_(weight)
    return model


def cached_gqa_attention(attn, x_new, positions, past_key=None, past_value=None):
    """Causal grouped-query attention of new tokens at absolute ``positions`` over the cache and themselves.

    attn: a lesson 08 GroupedQueryAttention (its projections, heads and rope_base; not its forward);
    x_new (B, T_new, C); positions (T_new,) long; past_key, past_value (B, H_kv, S_past, D) or None.
    Returns out (B, T_new, C) and the keys (rotated) and values of all positions (B, H_kv, S, D).
    """
    q = split_heads(attn.q_proj(x_new), attn.num_heads)  # (B, H, T_new, D)
    k = split_heads(attn.k_proj(x_new), attn.num_kv_heads)  # (B, H_kv, T_new, D)
    v = split_heads(attn.v_proj(x_new), attn.num_kv_heads)  # (B, H_kv, T_new, D)
    q = apply_rotary(q, positions, attn.rope_base)  # (B, H, T_new, D)
    k = apply_rotary(k, positions, attn.rope_base)  # rotated once, cached rotated: (B, H_kv, T_new, D)
    if past_key is not None:
        k = torch.cat([past_key, k], dim=2)  # (B, H_kv, S, D), S = S_past + T_new
        v = torch.cat([past_value, v], dim=2)  # (B, H_kv, S, D)
    T_new, S = q.size(2), k.size(2)
    # New token i sees keys 0 .. S - T_new + i: the last T_new rows of the (S, S) causal mask.
    mask = torch.ones(T_new, S, dtype=torch.bool, device=x_new.device).triu(diagonal=S - T_new + 1)  # (T_new, S)
    group = attn.num_heads // attn.num_kv_heads
    out, _ = scaled_dot_product_attention(q, k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1),
                                          mask)  # (B, H, T_new, D): copies for the arithmetic, not the cache
    return attn.out_proj(merge_heads(out)), k, v  # (B, T_new, C), (B, H_kv, S, D), (B, H_kv, S, D)
