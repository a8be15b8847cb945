"""Lesson 05: masks, the decoder layer and the decoder stack."""

import torch
from torch import nn

from .encoder import PositionwiseFeedForward
from .multihead import MultiHeadAttention


def causal_mask(T, device=None):
    """(T, T) boolean, True above the diagonal: position i may not look at any j > i."""
    return torch.ones(T, T, dtype=torch.bool, device=device).triu(diagonal=1)


def padding_mask(tokens, pad_id):
    """(B, S) boolean, True where the token is padding."""
    return tokens == pad_id


class DecoderLayer(nn.Module):
    """Masked self-attention, cross-attention to the encoder's memory, then the feed-forward network."""

    def __init__(self, d_model, num_heads, d_ff, dropout=0.0, norm_first=False, activation="relu"):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, num_heads, dropout=dropout)
        self.ff = PositionwiseFeedForward(d_model, d_ff, dropout, activation)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.norm3 = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, tgt_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        if self.norm_first:
            x = x + self._self_attention(self.norm1(x), tgt_mask, tgt_key_padding_mask)
            x = x + self._cross_attention(self.norm2(x), memory, memory_key_padding_mask)
            x = x + self.dropout(self.ff(self.norm3(x)))
        else:
            x = self.norm1(x + self._self_attention(x, tgt_mask, tgt_key_padding_mask))
            x = self.norm2(x + self._cross_attention(x, memory, memory_key_padding_mask))
            x = self.norm3(x + self.dropout(self.ff(x)))
        return x  # (B, T, C)

    def _self_attention(self, x, attn_mask, key_padding_mask):
        out, _ = self.self_attn(x, x, x, key_padding_mask=key_padding_mask, attn_mask=attn_mask, need_weights=False)
        return self.dropout(out)

    def _cross_attention(self, x, memory, key_padding_mask):
        # Queries from the decoder; keys and values from the encoder's output.
        out, _ = self.cross_attn(x, memory, memory, key_padding_mask=key_padding_mask, need_weights=False)
        return self.dropout(out)


class Decoder(nn.Module):
    """N decoder layers; a pre-norm stack ends with one more LayerNorm, a post-norm stack does not."""

    def __init__(self, num_layers, d_model, num_heads, d_ff, dropout=0.0, norm_first=False, activation="relu"):
        super().__init__()
        self.layers = nn.ModuleList(
            DecoderLayer(d_model, num_heads, d_ff, dropout, norm_first, activation) for _ in range(num_layers)
        )
        self.norm = nn.LayerNorm(d_model) if norm_first else None

    def forward(self, x, memory, tgt_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        for layer in self.layers:
            x = layer(x, memory, tgt_mask, tgt_key_padding_mask, memory_key_padding_mask)  # (B, T, C)
        return x if self.norm is None else self.norm(x)
