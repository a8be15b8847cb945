"""Lesson 03: positional encodings and token embeddings."""

import math

import torch
from torch import nn


def _frequencies(d_model):
    """omega_i = 1 / 10000^(2i / d_model) for i = 0 .. d_model/2 - 1, in float64."""
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # (d_model/2,)
    return torch.exp(-math.log(10000.0) * two_i / d_model)


def sinusoidal_positional_encoding(max_len, d_model):
    """PE[pos, 2i] = sin(pos / 10000^(2i/d_model)), PE[pos, 2i+1] = cos(pos / 10000^(2i/d_model))."""
    if d_model % 2:
        raise ValueError(f"d_model must be even for sinusoidal encodings, got {d_model}")
    position = torch.arange(max_len, dtype=torch.float64)[:, None]  # (max_len, 1)
    angles = position * _frequencies(d_model)  # (max_len, d_model/2)
    pe = torch.empty(max_len, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angles)
    pe[:, 1::2] = torch.cos(angles)
    # Computed in float64 so that float32 results are correctly rounded even at pos = 5000.
    return pe.to(torch.get_default_dtype())  # (max_len, d_model)


class PositionalEncoding(nn.Module):
    """Adds the fixed sinusoidal encoding of each position to a batch of embeddings."""

    def __init__(self, d_model, max_len=5000, dropout=0.0):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("pe", sinusoidal_positional_encoding(max_len, d_model))

    def forward(self, x):
        T = x.size(1)
        if T > self.pe.size(0):
            raise ValueError(f"sequence length {T} is longer than max_len={self.pe.size(0)}")
        return self.dropout(x + self.pe[:T])  # (B, T, C)


class LearnedPositionalEmbedding(nn.Module):
    """A trained vector per position (as in BERT and GPT-2), added to the token embeddings."""

    def __init__(self, max_len, d_model):
        super().__init__()
        self.embedding = nn.Embedding(max_len, d_model)

    def forward(self, x):
        T = x.size(1)
        if T > self.embedding.num_embeddings:
            raise ValueError(f"sequence length {T} is longer than max_len={self.embedding.num_embeddings}")
        positions = torch.arange(T, device=x.device)  # (T,)
        return x + self.embedding(positions)  # (B, T, C)


class TokenEmbedding(nn.Module):
    """Token ids to vectors, scaled by sqrt(d_model) as in the paper (section 3.4)."""

    def __init__(self, vocab_size, d_model):
        super().__init__()
        self.d_model = d_model
        self.embedding = nn.Embedding(vocab_size, d_model)

    def forward(self, tokens):
        return self.embedding(tokens) * math.sqrt(self.d_model)  # (B, T, C)


def relative_position_matrix(k, d_model):
    """The matrix M with PE[pos + k] = PE[pos] @ M for every pos.

    Each (sin, cos) pair of frequency omega turns by the angle k * omega:
    [sin(a + b), cos(a + b)] = [sin a, cos a] @ [[cos b, -sin b], [sin b, cos b]].
    """
    if d_model % 2:
        raise ValueError(f"d_model must be even for sinusoidal encodings, got {d_model}")
    angles = k * _frequencies(d_model)  # (d_model/2,)
    cos, sin = torch.cos(angles), torch.sin(angles)
    blocks = torch.stack([torch.stack([cos, -sin], -1), torch.stack([sin, cos], -1)], -2)  # (d_model/2, 2, 2)
    return torch.block_diag(*blocks).to(torch.get_default_dtype())  # (d_model, d_model)
