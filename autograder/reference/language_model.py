"""Lesson 07: a decoder-only language model (the GPT shape), its KV cache, sampling and perplexity.

Built from the earlier lessons' pieces: a decoder-only block is lesson 04's encoder layer run
with lesson 05's causal mask. ``CharTokenizer`` is given to the student (it lives in
lesson_tools/language_data.py, which a class receives) and is re-exported here.
"""

import math

import torch
import torch.nn.functional as F
from torch import nn

from lesson_tools.language_data import CharTokenizer
from .attention import scaled_dot_product_attention
from .decoder import causal_mask
from .encoder import EncoderLayer
from .multihead import merge_heads, split_heads
from .positional import LearnedPositionalEmbedding, TokenEmbedding

__all__ = [
    "CharTokenizer", "make_lm_examples", "DecoderOnlyLM", "cached_self_attention",
    "next_token_probs", "generate", "perplexity",
]


def make_lm_examples(ids, block_size):
    """Non-overlapping windows of a token stream (N,) and their next tokens: x, y (n, block_size), n = (N-1) // bs."""
    N = ids.size(0)
    if N < block_size + 1:
        raise ValueError(f"{N} tokens cannot make one example of block_size={block_size}: need block_size + 1")
    n = (N - 1) // block_size
    x = ids[: n * block_size].reshape(n, block_size)  # (n, block_size)
    y = ids[1 : n * block_size + 1].reshape(n, block_size)  # (n, block_size): each input's next token
    return x, y


class DecoderOnlyLM(nn.Module):
    """Token and learned position embeddings -> N causal encoder layers -> final norm -> lm_head (tied)."""

    def __init__(self, vocab_size, d_model=128, num_heads=4, num_layers=4, d_ff=512, max_len=256,
                 dropout=0.0, norm_first=True, activation="gelu", tie_weights=True):
        super().__init__()
        self.max_len = max_len
        self.tok_embed = TokenEmbedding(vocab_size, d_model)
        self.pos_embed = LearnedPositionalEmbedding(max_len, d_model)
        self.layers = nn.ModuleList(
            EncoderLayer(d_model, num_heads, d_ff, dropout, norm_first, activation) for _ in range(num_layers)
        )
        self.norm = nn.LayerNorm(d_model) if norm_first else None
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)
        for p in self.parameters():  # GPT-2's initialisation: small weights, so the first logits are near 0
            if p.dim() > 1:
                nn.init.normal_(p, mean=0.0, std=0.02)
        if tie_weights:
            # One matrix embeds token v and scores it as the next token (Press & Wolf, 2017).
            self.lm_head.weight = self.tok_embed.embedding.weight

    def forward(self, ids, key_padding_mask=None):
        x = self.pos_embed(self.tok_embed(ids))  # (B, T, C); a T past max_len raises ValueError here
        mask = causal_mask(ids.size(1), device=ids.device)  # (T, T), True above the diagonal
        for layer in self.layers:
            x = layer(x, key_padding_mask=key_padding_mask, attn_mask=mask)  # (B, T, C)
        if self.norm is not None:
            x = self.norm(x)
        return self.lm_head(x)  # (B, T, V): logits, no softmax

    def forward_cached(self, ids_new, cache):
        """Logits (B, T_new, V) of new tokens that follow the ones whose keys and values are in ``cache``.

        ``cache`` holds one (key, value) pair per layer, each (B, H, S_past, D), or None entries
        before the first call; it is filled in place. The new tokens sit at positions
        S_past .. S_past + T_new - 1. Each layer is the encoder layer's own computation, with
        its self-attention replaced by cached_self_attention.
        """
        past = 0 if cache[0] is None else cache[0][0].size(2)
        T_new = ids_new.size(1)
        if past + T_new > self.max_len:
            raise ValueError(f"position {past + T_new - 1} is past max_len={self.max_len}: "
                             "the model has no embedding for it")
        positions = torch.arange(past, past + T_new, device=ids_new.device)  # (T_new,)
        x = self.tok_embed(ids_new) + self.pos_embed.embedding(positions)  # (B, T_new, C)
        for i, layer in enumerate(self.layers):
            past_key, past_value = cache[i] if cache[i] is not None else (None, None)
            h = layer.norm1(x) if layer.norm_first else x
            out, key, value = cached_self_attention(layer.self_attn, h, past_key, past_value)  # (B, T_new, C)
            cache[i] = (key, value)  # (B, H, S_past + T_new, D) each
            if layer.norm_first:
                x = x + layer.dropout(out)
                x = x + layer.dropout(layer.ff(layer.norm2(x)))
            else:
                x = layer.norm1(x + layer.dropout(out))
                x = layer.norm2(x + layer.dropout(layer.ff(x)))
        if self.norm is not None:
            x = self.norm(x)
        return self.lm_head(x)  # (B, T_new, V)


def cached_self_attention(attn, x_new, past_key=None, past_value=None):
    """Causal self-attention of new positions over the cached ones and themselves; returns (out, keys, values).

    attn: a lesson-02 MultiHeadAttention (its projections are used, not its forward); x_new (B, T_new, C);
    past_key, past_value (B, H, S_past, D) or None.
    Returns out (B, T_new, C) and the keys and values of all positions so far (B, H, S_past + T_new, D).
    """
    q = split_heads(attn.q_proj(x_new), attn.num_heads)  # (B, H, T_new, D)
    k = split_heads(attn.k_proj(x_new), attn.num_heads)  # (B, H, T_new, D)
    v = split_heads(attn.v_proj(x_new), attn.num_heads)  # (B, H, T_new, D)
    if past_key is not None:
        k = torch.cat([past_key, k], dim=2)  # (B, H, S, D), S = S_past + T_new: the sequence axis grows
        v = torch.cat([past_value, v], dim=2)  # (B, H, S, D)
    T_new, S = q.size(2), k.size(2)
    # New token i is at position S - T_new + i and sees keys 0 .. S - T_new + i: the last T_new rows
    # of the (S, S) causal mask (for a single new token, a row that blocks nothing).
    mask = torch.ones(T_new, S, dtype=torch.bool, device=x_new.device).triu(diagonal=S - T_new + 1)  # (T_new, S)
    out, _ = scaled_dot_product_attention(q, k, v, mask)  # (B, H, T_new, D)
    return attn.out_proj(merge_heads(out)), k, v  # (B, T_new, C), (B, H, S, D), (B, H, S, D)


def next_token_probs(logits, temperature=1.0, top_k=None, top_p=None):
    """Logits (B, V) -> sampling probabilities (B, V): temperature, then top-k, then top-p, renormalised.

    top_k=None or 0 and top_p=None or >= 1 filter nothing (as in Hugging Face's generate); a top_p <= 0 keeps
    the most probable token alone (the set always holds it); a negative top_k raises ValueError.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature} (for the most likely token, use top_k=1)")
    if top_k is not None and top_k < 0:
        raise ValueError(f"top_k must be >= 0 (0 or None: no top-k filter), got {top_k}")
    logits = logits / temperature  # (B, V): < 1 sharpens the distribution, > 1 flattens it
    if top_k:
        top = torch.topk(logits, min(top_k, logits.size(-1)), dim=-1).indices  # (B, k)
        keep = torch.zeros_like(logits, dtype=torch.bool).scatter(-1, top, True)  # (B, V)
        logits = logits.masked_fill(~keep, float("-inf"))
    probs = torch.softmax(logits, dim=-1)  # (B, V)
    if top_p is not None and top_p < 1:
        sorted_probs, order = probs.sort(dim=-1, descending=True, stable=True)  # (B, V) each
        before = sorted_probs.cumsum(dim=-1) - sorted_probs  # (B, V): the mass of the tokens ranked above
        # Keep a token while the ones above it fall short of top_p: the token that crosses top_p
        # stays, and so does the most likely one, whatever top_p is.
        drop_sorted = before >= top_p  # (B, V)
        drop_sorted[:, 0] = False
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)  # (B, V), back in vocabulary order
        probs = probs.masked_fill(drop, 0.0)
        probs = probs / probs.sum(dim=-1, keepdim=True)  # renormalise what is kept
    return probs


def generate(model, prompt, max_new_tokens, temperature=1.0, top_k=None, top_p=None, generator=None,
             use_cache=True):
    """Sample max_new_tokens tokens after prompt (B, T_prompt); returns (B, T_prompt + max_new_tokens) ids."""
    if use_cache and prompt.size(1) + max_new_tokens > model.max_len:
        raise ValueError(f"{prompt.size(1)} + {max_new_tokens} tokens do not fit in max_len={model.max_len} "
                         "with a cache: learned positions stop there (use_cache=False slides a window instead)")
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            ids = prompt
            cache = [None] * len(model.layers) if use_cache else None
            for step in range(max_new_tokens):
                if use_cache:
                    # The whole prompt at the first step, then only the newest token: the cache has the rest.
                    logits = model.forward_cached(ids if step == 0 else ids[:, -1:], cache)  # (B, T_new, V)
                else:
                    logits = model(ids[:, -model.max_len:])  # (B, t, V): the whole window, every step
                probs = next_token_probs(logits[:, -1], temperature, top_k, top_p)  # (B, V)
                next_id = torch.multinomial(probs, 1, generator=generator)  # (B, 1)
                ids = torch.cat([ids, next_id], dim=1)  # (B, t + 1)
    finally:
        model.train(was_training)
    return ids


def perplexity(model, ids, block_size, batch_size=64):
    """exp(mean next-token cross-entropy) over the non-overlapping windows of ids (N,), in eval mode."""
    x, y = make_lm_examples(ids, block_size)  # (n, block_size) each
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            total = 0.0  # nats, summed over every predicted token (a Python float: float64)
            for start in range(0, x.size(0), batch_size):
                logits = model(x[start : start + batch_size].to(device))  # (b, block_size, V)
                targets = y[start : start + batch_size].to(device)  # (b, block_size)
                total += F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="sum").item()
    finally:
        model.train(was_training)
    return math.exp(total / y.numel())  # the mean, not the sum, goes into exp
