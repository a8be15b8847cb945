"""Lesson 06: the full encoder-decoder Transformer, and the tools to train and use it."""

import torch
from torch import nn

from .decoder import Decoder, causal_mask
from .encoder import Encoder
from .positional import PositionalEncoding, TokenEmbedding


class Transformer(nn.Module):
    """Embeddings + positions -> encoder -> decoder -> a linear generator over the target vocabulary."""

    def __init__(
        self,
        src_vocab_size,
        tgt_vocab_size,
        d_model=512,
        num_heads=8,
        num_layers=6,
        d_ff=2048,
        dropout=0.1,
        max_len=5000,
        norm_first=False,
        pad_id=0,
        share_embeddings=False,
        activation="relu",
    ):
        super().__init__()
        self.pad_id = pad_id
        self.src_embed = TokenEmbedding(src_vocab_size, d_model)
        self.tgt_embed = TokenEmbedding(tgt_vocab_size, d_model)
        self.pos_enc = PositionalEncoding(d_model, max_len, dropout)
        self.encoder = Encoder(num_layers, d_model, num_heads, d_ff, dropout, norm_first, activation)
        self.decoder = Decoder(num_layers, d_model, num_heads, d_ff, dropout, norm_first, activation)
        self.generator = nn.Linear(d_model, tgt_vocab_size)
        for p in self.parameters():  # Glorot initialisation, as nn.Transformer does
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)
        if share_embeddings:
            # Section 3.4: one matrix for both embeddings and the pre-softmax projection.
            if src_vocab_size != tgt_vocab_size:
                raise ValueError("share_embeddings needs one vocabulary: src_vocab_size == tgt_vocab_size")
            self.tgt_embed.embedding.weight = self.src_embed.embedding.weight
            self.generator.weight = self.src_embed.embedding.weight

    def encode(self, src, src_key_padding_mask=None):
        x = self.pos_enc(self.src_embed(src))  # (B, S, C)
        return self.encoder(x, key_padding_mask=src_key_padding_mask)  # (B, S, C)

    def decode(self, tgt, memory, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        y = self.pos_enc(self.tgt_embed(tgt))  # (B, T, C)
        mask = causal_mask(tgt.size(1), device=tgt.device)  # (T, T)
        return self.decoder(y, memory, mask, tgt_key_padding_mask, memory_key_padding_mask)  # (B, T, C)

    def forward(self, src, tgt, src_key_padding_mask=None, tgt_key_padding_mask=None):
        memory = self.encode(src, src_key_padding_mask)  # (B, S, C)
        hidden = self.decode(tgt, memory, tgt_key_padding_mask, src_key_padding_mask)  # (B, T, C)
        return self.generator(hidden)  # (B, T, tgt_vocab_size)


def count_parameters(model):
    """Trainable parameters; model.parameters() yields a shared tensor once, so it counts once."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def noam_lr(step, d_model, warmup):
    """lrate = d_model^-0.5 * min(step^-0.5, step * warmup^-1.5) (section 5.3)."""
    if step < 1:
        raise ValueError(f"step counts from 1, got {step}")
    return d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def greedy_decode(model, src, max_len, bos_id, eos_id, src_key_padding_mask=None):
    """Decode by always taking the most likely next token; rows that finished get padding."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            memory = model.encode(src, src_key_padding_mask)  # (B, S, C)
            ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)  # (B, 1)
            finished = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)  # (B,)
            for _ in range(max_len - 1):
                hidden = model.decode(ys, memory, memory_key_padding_mask=src_key_padding_mask)  # (B, t, C)
                next_token = model.generator(hidden[:, -1]).argmax(dim=-1)  # (B,)
                next_token = next_token.masked_fill(finished, model.pad_id)
                ys = torch.cat([ys, next_token[:, None]], dim=1)  # (B, t + 1)
                finished |= next_token == eos_id
                if finished.all():
                    break
    finally:
        model.train(was_training)
    return ys
