"""Lesson 08: the modern Transformer: RMSNorm, SwiGLU, rotary positions, grouped-query
attention, and attention computed block by block with an online softmax (FlashAttention's
algorithm, in plain PyTorch)."""

import math

import torch
import torch.nn.functional as F
from torch import nn

from .attention import scaled_dot_product_attention
from .multihead import merge_heads, split_heads


class RMSNorm(nn.Module):
    """RMSNorm(x) = x / sqrt(mean(x^2) + eps) * g: LayerNorm without the mean and without the bias."""

    def __init__(self, d_model, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))

    def forward(self, x):
        rms = torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)  # (..., 1): one scale per vector
        return x / rms * self.weight  # (..., d_model)


class SwiGLU(nn.Module):
    """FFN_SwiGLU(x) = W_down(SiLU(W_gate x) * W_up x): a feed-forward network whose hidden units are gated."""

    def __init__(self, d_model, d_ff, bias=False):
        super().__init__()
        self.w_gate = nn.Linear(d_model, d_ff, bias=bias)
        self.w_up = nn.Linear(d_model, d_ff, bias=bias)
        self.w_down = nn.Linear(d_ff, d_model, bias=bias)

    def forward(self, x):
        hidden = F.silu(self.w_gate(x)) * self.w_up(x)  # (..., d_ff): the gate scales each up-projected unit
        return self.w_down(hidden)  # (..., d_model)


def apply_rotary(x, positions=None, base=10000.0):
    """Rotate each pair of features (2i, 2i+1) of the vector at position p by the angle p / base^(2i/D).

    x (..., T, D) with D even; positions (T,) long, default arange(T) (pass arange(start, start + T)
    when the first of the T vectors is not at position 0, as in a KV cache). Returns (..., T, D), the
    dtype and device of x. Rotations preserve dot products, so (R_p q) . (R_s k) = q . R_(s-p) k
    depends on the positions only through their difference.
    """
    T, D = x.shape[-2:]
    if D % 2:
        raise ValueError(f"rotary embeddings rotate pairs of features: the last axis must be even, got {D}")
    if positions is None:
        positions = torch.arange(T, device=x.device)
    # The angles in float64: in float32, p / base^(2i/D) at p = 8192 is off by up to 3e-4 rad (D = 64).
    two_i = torch.arange(0, D, 2, dtype=torch.float64, device=x.device)  # (D/2,)
    angles = positions.to(x.device, torch.float64)[:, None] * base ** (-two_i / D)  # p / base^(2i/D): (T, D/2)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)  # (T, D/2) each
    x_even, x_odd = x[..., 0::2], x[..., 1::2]  # the two members of each pair: (..., T, D/2) each
    rotated = torch.stack([x_even * cos - x_odd * sin, x_even * sin + x_odd * cos], dim=-1)  # (..., T, D/2, 2)
    return rotated.flatten(-2)  # pairs interleaved back in place: (..., T, D)


class GroupedQueryAttention(nn.Module):
    """Self-attention whose num_heads query heads share num_kv_heads key/value heads, in groups.

    num_kv_heads == num_heads is multi-head attention, num_kv_heads == 1 multi-query attention.
    Query head h reads key/value head h // (num_heads // num_kv_heads): neighbouring query heads
    form a group. With ``rotary``, queries and keys are rotated by apply_rotary, per head, with
    ``rope_base`` as its base.
    """

    def __init__(self, d_model, num_heads, num_kv_heads, bias=False, rotary=True, rope_base=10000.0):
        super().__init__()
        if d_model % num_heads:
            raise ValueError(f"d_model={d_model} is not divisible by num_heads={num_heads}")
        if num_kv_heads < 1 or num_heads % num_kv_heads:
            raise ValueError(f"num_heads={num_heads} is not divisible by num_kv_heads={num_kv_heads}")
        head_dim = d_model // num_heads
        if rotary and head_dim % 2:
            raise ValueError(f"rotary embeddings need an even head size, got d_model / num_heads = {head_dim}")
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.rotary = rotary
        self.rope_base = rope_base  # Llama 2 uses 10 000, Llama 3 500 000: the longest wavelength grows with it
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_model, num_kv_heads * head_dim, bias=bias)
        self.v_proj = nn.Linear(d_model, num_kv_heads * head_dim, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)

    def forward(self, x, attn_mask=None, positions=None):
        """x (B, T, C); attn_mask as lesson 01's (True or -inf = blocked), broadcastable to (B, H, T, T).

        Returns the output (B, T, C) and the weights of every query head (B, H, T, T).
        """
        q = split_heads(self.q_proj(x), self.num_heads)  # (B, H, T, D)
        k = split_heads(self.k_proj(x), self.num_kv_heads)  # (B, H_kv, T, D)
        v = split_heads(self.v_proj(x), self.num_kv_heads)  # (B, H_kv, T, D)
        if self.rotary:  # positions enter the scores through queries and keys; values stay as they are
            q = apply_rotary(q, positions, self.rope_base)  # (B, H, T, D)
            k = apply_rotary(k, positions, self.rope_base)  # (B, H_kv, T, D)
        # Each kv head serves a group of neighbouring query heads: [k0, k0, k1, k1] for 4 query heads
        # over 2 kv heads. A KV cache keeps only the H_kv heads; the copies here are for the arithmetic.
        group = self.num_heads // self.num_kv_heads
        k = k.repeat_interleave(group, dim=1)  # (B, H, T, D)
        v = v.repeat_interleave(group, dim=1)  # (B, H, T, D)
        out, weights = scaled_dot_product_attention(q, k, v, attn_mask)  # (B, H, T, D), (B, H, T, T)
        return self.out_proj(merge_heads(out)), weights  # (B, T, C), (B, H, T, T)


def flash_attention(query, key, value, causal=False, block_size=128):
    """softmax(Q K^T / sqrt(D)) V over blocks of ``block_size`` keys, with an online softmax.

    query (..., L, D), key (..., S, D), value (..., S, Dv) -> output (..., L, Dv); no weights. Each
    row keeps a running maximum m of its scores, a running sum l of exp(score - m) and a running,
    unnormalised output o; a new block raises m, rescales l and o by exp(m_old - m_new) and adds its
    own terms. No (L, S) tensor is ever built: the largest intermediate is (..., L, block_size).

    With ``causal``, query i sees keys 0 .. i + S - L (aligned at the bottom right, as
    torch.nn.attention.bias.causal_lower_right; the usual causal mask when L == S). When L > S the
    first L - S queries see no key at all: like every fully blocked row in this course, they get a
    zero output, never NaN.
    """
    if block_size < 1:
        raise ValueError(f"block_size must be at least 1, got {block_size}")
    L, D = query.shape[-2:]
    S = key.size(-2)
    q = query / math.sqrt(D)  # scale the (..., L, D) queries once, as lesson 01 does: (..., L, D)
    row_max = query.new_full((*query.shape[:-1], 1), float("-inf"))  # m: (..., L, 1)
    row_sum = query.new_zeros((*query.shape[:-1], 1))  # l: (..., L, 1)
    acc = query.new_zeros((*query.shape[:-1], value.size(-1)))  # o, not yet divided by l: (..., L, Dv)
    if causal:
        # The last key each query may see, for the bottom-right alignment.
        last_key = torch.arange(L, device=query.device)[:, None] + (S - L)  # (L, 1)
    for start in range(0, S, block_size):  # the last block may be shorter than block_size
        stop = min(start + block_size, S)
        scores = q @ key[..., start:stop, :].transpose(-2, -1)  # (..., L, b)
        if causal:
            future = torch.arange(start, stop, device=query.device) > last_key  # (L, b), True = blocked
            scores = scores.masked_fill(future, float("-inf"))
        new_max = torch.maximum(row_max, scores.amax(dim=-1, keepdim=True))  # (..., L, 1)
        # A row that has seen no allowed key yet has max -inf; shifting by 0 instead keeps
        # exp(-inf - (-inf)) = NaN out: its terms are exp(-inf) = 0 and it stays empty.
        shift = new_max.masked_fill(torch.isneginf(new_max), 0.0)  # (..., L, 1)
        probs = torch.exp(scores - shift)  # unnormalised weights of this block: (..., L, b)
        rescale = torch.exp(row_max - shift)  # e^(m - m'): from sums against the old max to the new one: (..., L, 1)
        row_sum = row_sum * rescale + probs.sum(dim=-1, keepdim=True)  # (..., L, 1)
        acc = acc * rescale + probs @ value[..., start:stop, :]  # (..., L, Dv)
        row_max = new_max
    # A row that saw no key has l = 0 and o = 0: divide it by 1 so that it stays 0 (and its gradient finite).
    return acc / row_sum.masked_fill(row_sum == 0, 1.0)  # (..., L, Dv)
