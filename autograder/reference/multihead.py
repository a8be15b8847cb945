"""Lesson 02: multi-head attention."""

import torch
import torch.nn.functional as F
from torch import nn

from .attention import scaled_dot_product_attention


def split_heads(x, num_heads):
    """(B, T, C) -> (B, H, T, D): each head gets its own D = C / H features of every token."""
    B, T, C = x.shape
    if C % num_heads:
        raise ValueError(f"d_model={C} is not divisible by num_heads={num_heads}")
    x = x.reshape(B, T, num_heads, C // num_heads)  # (B, T, H, D)
    return x.transpose(1, 2)  # (B, H, T, D)


def merge_heads(x):
    """(B, H, T, D) -> (B, T, H*D), the inverse of split_heads."""
    B, H, T, D = x.shape
    return x.transpose(1, 2).reshape(B, T, H * D)  # (B, T, H*D)


def _as_additive(mask, dtype):
    """A boolean 'blocked' mask as the equivalent float mask: -inf where blocked, else 0."""
    if mask.dtype != torch.bool:
        return mask.to(dtype)
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(mask, float("-inf"))


def combine_masks(attn_mask, key_padding_mask, batch, num_heads, dtype):
    """One mask broadcastable to (B, H, L, S) from an attention mask and a key padding mask.

    ``attn_mask`` is (L, S) or (B*H, L, S), boolean or float; ``key_padding_mask`` is (B, S).
    Two boolean masks stay boolean (blocked if either blocks); otherwise they add as floats.
    """
    masks = []
    if attn_mask is not None:
        if attn_mask.dim() == 3:
            L, S = attn_mask.shape[-2:]
            attn_mask = attn_mask.view(batch, num_heads, L, S)  # (B, H, L, S)
        masks.append(attn_mask)
    if key_padding_mask is not None:
        masks.append(key_padding_mask[:, None, None, :])  # (B, 1, 1, S)
    if not masks:
        return None
    if len(masks) == 1:
        return masks[0]
    a, b = masks
    if a.dtype == torch.bool and b.dtype == torch.bool:
        return a | b
    return _as_additive(a, dtype) + _as_additive(b, dtype)


class MultiHeadAttention(nn.Module):
    """MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O, head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)."""

    def __init__(self, d_model, num_heads, dropout=0.0, bias=True):
        super().__init__()
        if d_model % num_heads:
            raise ValueError(f"d_model={d_model} is not divisible by num_heads={num_heads}")
        self.num_heads = num_heads
        self.dropout = dropout
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_model, d_model, bias=bias)
        self.v_proj = nn.Linear(d_model, d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)

    def forward(self, query, key, value, key_padding_mask=None, attn_mask=None, need_weights=True):
        q = split_heads(self.q_proj(query), self.num_heads)  # (B, H, L, D)
        k = split_heads(self.k_proj(key), self.num_heads)  # (B, H, S, D)
        v = split_heads(self.v_proj(value), self.num_heads)  # (B, H, S, D)
        mask = combine_masks(attn_mask, key_padding_mask, query.size(0), self.num_heads, q.dtype)
        out, weights = scaled_dot_product_attention(q, k, v, mask)  # (B, H, L, D), (B, H, L, S)
        if self.training and self.dropout > 0:
            # As in nn.MultiheadAttention: dropout on the weights, before they mix the values.
            weights = F.dropout(weights, self.dropout)
            out = weights @ v  # (B, H, L, D)
        out = self.out_proj(merge_heads(out))  # (B, L, C)
        return out, (weights if need_weights else None)
