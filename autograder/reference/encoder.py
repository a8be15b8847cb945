"""Lesson 04: the encoder: feed-forward sublayer, encoder layer, encoder stack."""

import torch.nn.functional as F
from torch import nn

from .multihead import MultiHeadAttention


class PositionwiseFeedForward(nn.Module):
    """FFN(x) = max(0, x W1 + b1) W2 + b2, applied to every position separately."""

    def __init__(self, d_model, d_ff, dropout=0.0, activation="relu"):
        super().__init__()
        if activation not in ("relu", "gelu"):
            raise ValueError(f'activation must be "relu" or "gelu", got {activation!r}')
        self.activation = F.relu if activation == "relu" else F.gelu
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        hidden = self.activation(self.linear1(x))  # (B, T, d_ff)
        return self.linear2(self.dropout(hidden))  # (B, T, d_model)


class EncoderLayer(nn.Module):
    """Self-attention, then the feed-forward network, each wrapped in a residual and a LayerNorm."""

    def __init__(self, d_model, num_heads, d_ff, dropout=0.0, norm_first=False, activation="relu"):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout=dropout)
        self.ff = PositionwiseFeedForward(d_model, d_ff, dropout, activation)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, key_padding_mask=None, attn_mask=None):
        if self.norm_first:  # pre-norm: x + Sublayer(LayerNorm(x))
            x = x + self._self_attention(self.norm1(x), key_padding_mask, attn_mask)
            x = x + self.dropout(self.ff(self.norm2(x)))
        else:  # post-norm, as in the paper: LayerNorm(x + Sublayer(x))
            x = self.norm1(x + self._self_attention(x, key_padding_mask, attn_mask))
            x = self.norm2(x + self.dropout(self.ff(x)))
        return x  # (B, T, C)

    def _self_attention(self, x, key_padding_mask, attn_mask):
        out, _ = self.self_attn(x, x, x, key_padding_mask=key_padding_mask, attn_mask=attn_mask, need_weights=False)
        return self.dropout(out)


class Encoder(nn.Module):
    """N encoder layers; a pre-norm stack ends with one more LayerNorm, a post-norm stack does not."""

    def __init__(self, num_layers, d_model, num_heads, d_ff, dropout=0.0, norm_first=False, activation="relu"):
        super().__init__()
        self.layers = nn.ModuleList(
            EncoderLayer(d_model, num_heads, d_ff, dropout, norm_first, activation) for _ in range(num_layers)
        )
        self.norm = nn.LayerNorm(d_model) if norm_first else None

    def forward(self, x, key_padding_mask=None):
        for layer in self.layers:
            x = layer(x, key_padding_mask=key_padding_mask)  # (B, T, C)
        return x if self.norm is None else self.norm(x)
