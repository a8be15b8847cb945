"""Lesson 01: scaled dot-product attention and a single-head self-attention module."""

import math

import torch
from torch import nn


def scaled_dot_product_attention(query, key, value, attn_mask=None):
    """Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V.

    query (..., L, E), key (..., S, E), value (..., S, Ev). A boolean ``attn_mask`` is True
    where attention is *blocked*; a float mask is *added* to the scores (-inf blocks). Both
    broadcast to (..., L, S). Returns the output (..., L, Ev) and the weights (..., L, S).
    A query row whose keys are all blocked attends to nothing: zero weights, zero output.
    """
    d_k = query.size(-1)
    # Q K^T / sqrt(d_k), with the scale applied to Q: the same product, one (..., L, E) division
    # instead of an (..., L, S) one, as PyTorch's own attention does it.
    scores = (query / math.sqrt(d_k)) @ key.transpose(-2, -1)  # (..., L, S)
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            scores = scores.masked_fill(attn_mask, float("-inf"))
        else:
            scores = scores + attn_mask
    # A softmax over no keys at all is 0/0 = NaN; give such rows zero weight instead,
    # and keep -inf out of the softmax so that gradients stay finite too. Only a mask blocks
    # a whole row, and rarely: it is found on the mask (often just (L, S)), not on the
    # (..., L, S) scores, and the two fills, a full copy each, run only when a row needs them.
    blocked = None
    if attn_mask is not None:
        blocks = attn_mask if attn_mask.dtype == torch.bool else torch.isneginf(attn_mask)
        blocked = blocks.all(dim=-1, keepdim=True)  # (..., L, 1), broadcastable to the scores
    # (A mask on the meta device, which has shapes but no values, takes the filling path.)
    if blocked is None or (not blocked.is_meta and not blocked.any()):
        weights = torch.softmax(scores, dim=-1)  # (..., L, S)
    else:
        weights = torch.softmax(scores.masked_fill(blocked, 0.0), dim=-1)  # (..., L, S)
        weights = weights.masked_fill(blocked, 0.0)
    return weights @ value, weights  # (..., L, Ev), (..., L, S)


class SelfAttention(nn.Module):
    """One attention head whose queries, keys and values all come from the same sequence."""

    def __init__(self, d_model):
        super().__init__()
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def forward(self, x, attn_mask=None):
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)  # (B, T, C) each
        out, weights = scaled_dot_product_attention(q, k, v, attn_mask)  # (B, T, C), (B, T, T)
        return self.out_proj(out), weights
