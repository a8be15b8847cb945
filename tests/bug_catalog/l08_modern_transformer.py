"""Wrong answers for lesson 08: RMSNorm, SwiGLU, apply_rotary, GroupedQueryAttention and flash_attention."""

from . import PRELUDE as BASE_PRELUDE
from . import Bug, edited

# The lesson's setup cell imports the earlier lessons' pieces from the reference, as the grader's
# sandbox does; within the lesson, GroupedQueryAttention calls apply_rotary: the reference's here.
# Each module bug's __init__ is the one the notebook gives.
PRELUDE = BASE_PRELUDE + '''
from autograder.reference import merge_heads, scaled_dot_product_attention, split_heads, apply_rotary
'''

_RMS_INIT = '''
class RMSNorm(nn.Module):
    """RMSNorm(x) = x / sqrt(mean(x^2) + eps) * g: LayerNorm without the mean and without the bias."""

    def __init__(self, d_model, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))  # g: one gain per feature
'''

_SWIGLU_INIT = '''
class SwiGLU(nn.Module):
    """FFN_SwiGLU(x) = W_down(SiLU(W_gate x) * W_up x): a feed-forward network whose hidden units are gated."""

    def __init__(self, d_model, d_ff, bias=False):
        super().__init__()
        self.w_gate = nn.Linear(d_model, d_ff, bias=bias)
        self.w_up = nn.Linear(d_model, d_ff, bias=bias)
        self.w_down = nn.Linear(d_ff, d_model, bias=bias)
'''

_GQA_INIT = '''
class GroupedQueryAttention(nn.Module):
    """Self-attention whose num_heads query heads share num_kv_heads key/value heads, in groups of neighbours."""

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
        self.rope_base = rope_base
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_model, num_kv_heads * head_dim, bias=bias)
        self.v_proj = nn.Linear(d_model, num_kv_heads * head_dim, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)
'''

_FLASH_HEAD = '''
def flash_attention(query, key, value, causal=False, block_size=128):
    if block_size < 1:
        raise ValueError(f"block_size must be at least 1, got {block_size}")
    L, D = query.shape[-2:]
    S = key.size(-2)
    q = query / math.sqrt(D)  # scaled once: (..., L, D)
    row_max = query.new_full((*query.shape[:-1], 1), float("-inf"))  # m: (..., L, 1)
    row_sum = query.new_zeros((*query.shape[:-1], 1))  # l: (..., L, 1)
    acc = query.new_zeros((*query.shape[:-1], value.size(-1)))  # o: (..., L, Dv)
'''


def _flash(loop):
    return _FLASH_HEAD + loop


_GOOD_LOOP_START = '''
    if causal:
        last_key = torch.arange(L, device=query.device)[:, None] + (S - L)
    for start in range(0, S, block_size):
        stop = min(start + block_size, S)
        scores = q @ key[..., start:stop, :].transpose(-2, -1)
        if causal:
            scores = scores.masked_fill(torch.arange(start, stop, device=query.device) > last_key, float("-inf"))
        new_max = torch.maximum(row_max, scores.amax(dim=-1, keepdim=True))
        shift = new_max.masked_fill(torch.isneginf(new_max), 0.0)
        probs = torch.exp(scores - shift)
        rescale = torch.exp(row_max - shift)
'''

_GOOD_END = '''
        row_max = new_max
    return acc / row_sum.masked_fill(row_sum == 0, 1.0)
'''

_FLASH = _flash(_GOOD_LOOP_START + '''
        row_sum = row_sum * rescale + probs.sum(dim=-1, keepdim=True)
        acc = acc * rescale + probs @ value[..., start:stop, :]
''' + _GOOD_END)

# Right answers, as a student writes them; most wrong ones are one of them with a few lines changed.
_ROTARY = '''
def apply_rotary(x, positions=None, base=10000.0):
    T, D = x.shape[-2:]
    if D % 2:
        raise ValueError(f"D must be even, got {D}")
    if positions is None:
        positions = torch.arange(T, device=x.device)
    freqs = base ** (-torch.arange(0, D, 2, device=x.device, dtype=torch.float64) / D)
    angles = positions.to(torch.float64)[:, None] * freqs
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).flatten(-2)
'''

_GQA = _GQA_INIT + '''
    def forward(self, x, attn_mask=None, positions=None):
        q = split_heads(self.q_proj(x), self.num_heads)
        k = split_heads(self.k_proj(x), self.num_kv_heads)
        v = split_heads(self.v_proj(x), self.num_kv_heads)
        if self.rotary:
            q, k = apply_rotary(q, positions, self.rope_base), apply_rotary(k, positions, self.rope_base)
        group = self.num_heads // self.num_kv_heads
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        out, weights = scaled_dot_product_attention(q, k, v, attn_mask)
        return self.out_proj(merge_heads(out)), weights
'''


BUGS = [
    # ------------------------------------------------------------------ RMSNorm
    Bug("RMSNorm", "mean square over axis 1", _RMS_INIT + '''
    def forward(self, x):
        rms = torch.sqrt(x.pow(2).mean(dim=1, keepdim=True) + self.eps)
        return x / rms * self.weight
''', names="wrong axis"),
    Bug("RMSNorm", "eps outside the square root", _RMS_INIT + '''
    def forward(self, x):
        return self.weight * x / (x.pow(2).mean(-1, keepdim=True).sqrt() + self.eps)
''', names="outside the square root"),
    Bug("RMSNorm", "subtracts the mean (LayerNorm)", _RMS_INIT + '''
    def forward(self, x):
        x = x - x.mean(dim=-1, keepdim=True)
        rms = torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return x / rms * self.weight
''', names="LayerNorm by another name"),
    Bug("RMSNorm", "forgets the gain", _RMS_INIT + '''
    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)
''', names="self.weight"),
    Bug("RMSNorm", "hard-codes float32", _RMS_INIT + '''
    def forward(self, x):
        x = x.float()
        return x / torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps) * self.weight.float()
''', names="float64"),
    Bug("RMSNorm", "eps as a new CPU tensor", _RMS_INIT + '''
    def forward(self, x):
        eps = torch.full((1,), self.eps)
        return x / torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * self.weight
''', names="meta device"),
    # ------------------------------------------------------------------ SwiGLU
    Bug("SwiGLU", "SiLU on the up branch", _SWIGLU_INIT + '''
    def forward(self, x):
        return self.w_down(self.w_gate(x) * F.silu(self.w_up(x)))
''', names="wrong branch"),
    Bug("SwiGLU", "GELU feed-forward network, no gate", _SWIGLU_INIT + '''
    def forward(self, x):
        return self.w_down(F.gelu(self.w_gate(x)))
''', names="plain GELU network"),
    Bug("SwiGLU", "GELU gate", _SWIGLU_INIT + '''
    def forward(self, x):
        hidden = F.gelu(self.w_gate(x)) * self.w_up(x)
        return self.w_down(hidden)
''', names="gate uses GELU"),
    Bug("SwiGLU", "sigmoid gate (GLU)", _SWIGLU_INIT + '''
    def forward(self, x):
        return self.w_down(torch.sigmoid(self.w_gate(x)) * self.w_up(x))
''', names="sigmoid"),
    Bug("SwiGLU", "SiLU on both branches", _SWIGLU_INIT + '''
    def forward(self, x):
        return self.w_down(F.silu(self.w_gate(x)) * F.silu(self.w_up(x)))
''', names="both branches"),
    # ------------------------------------------------------------------ apply_rotary
    Bug("apply_rotary", "rotates halves (i, i + D/2)", edited(_ROTARY, (
        "    even, odd = x[..., 0::2], x[..., 1::2]\n"
        "    return torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).flatten(-2)\n",
        "    x1, x2 = x[..., : D // 2], x[..., D // 2:]\n"
        "    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)\n")),
        names="two halves"),
    Bug("apply_rotary", "exponent i/D", edited(_ROTARY, (
        "    freqs = base ** (-torch.arange(0, D, 2, device=x.device, dtype=torch.float64) / D)\n",
        "    freqs = 1.0 / base ** (torch.arange(D // 2, device=x.device, dtype=torch.float64) / D)\n")),
        names="exponent is i/D"),
    Bug("apply_rotary", "rotates the wrong way", edited(_ROTARY, ("[even * cos - odd * sin, even * sin + odd * cos]",
                                                           "[even * cos + odd * sin, odd * cos - even * sin]")),
        names="wrong way"),
    Bug("apply_rotary", "ignores positions", edited(_ROTARY, (
        "    if positions is None:\n        positions = torch.arange(T, device=x.device)\n",
        "    pos = torch.arange(T, device=x.device, dtype=torch.float64)\n"),
        ("    angles = positions.to(torch.float64)[:, None] * freqs\n", "    angles = pos[:, None] * freqs\n")),
        names="positions are ignored"),
    Bug("apply_rotary", "default positions from 1", edited(_ROTARY, ("torch.arange(T, device=x.device)",
                                                              "torch.arange(1, T + 1, device=x.device)")),
        names="positions start at 1"),
    Bug("apply_rotary", "no ValueError for an odd D", edited(_ROTARY, (
        "    if D % 2:\n        raise ValueError(f\"D must be even, got {D}\")\n", "")),
        names="must raise a ValueError"),
    Bug("apply_rotary", "unpacks (B, T, D)", edited(_ROTARY, ("    T, D = x.shape[-2:]\n", "    B, T, D = x.shape\n")),
        names="any number of leading axes"),
    Bug("apply_rotary", "positions made on the CPU", edited(_ROTARY, ("torch.arange(T, device=x.device)", "torch.arange(T)"),
                                                               ("torch.arange(0, D, 2, device=x.device, ", "torch.arange(0, D, 2, ")),
        names="meta device"),
    # ------------------------------------------------------------------ GroupedQueryAttention
    Bug("GroupedQueryAttention", "repeat instead of repeat_interleave", edited(_GQA, (
        "        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)\n",
        "        k = k.repeat(1, group, 1, 1)\n        v = v.repeat(1, group, 1, 1)\n")),
        names="wrong order"),
    Bug("GroupedQueryAttention", "rotates the values", edited(_GQA, (
        "            q, k = apply_rotary(q, positions, self.rope_base), apply_rotary(k, positions, self.rope_base)\n",
        "            q, k = apply_rotary(q, positions, self.rope_base), apply_rotary(k, positions, self.rope_base)\n"
        "            v = apply_rotary(v, positions, self.rope_base)\n")),
        names="values are rotated"),
    Bug("GroupedQueryAttention", "positions not passed on", edited(_GQA, ("q, k = apply_rotary(q, positions, self.rope_base), apply_rotary(k, positions, self.rope_base)",
                                                                     "q, k = apply_rotary(q, None, self.rope_base), apply_rotary(k, None, self.rope_base)")),
        names="positions are not passed on"),
    Bug("GroupedQueryAttention", "never rotates", _GQA_INIT + '''
    def forward(self, x, attn_mask=None, positions=None):
        q = split_heads(self.q_proj(x), self.num_heads)
        k = split_heads(self.k_proj(x), self.num_kv_heads).repeat_interleave(self.num_heads // self.num_kv_heads, 1)
        v = split_heads(self.v_proj(x), self.num_kv_heads).repeat_interleave(self.num_heads // self.num_kv_heads, 1)
        out, weights = scaled_dot_product_attention(q, k, v, attn_mask)
        return self.out_proj(merge_heads(out)), weights
''', names="not rotated"),
    Bug("GroupedQueryAttention", "forgets the mask", edited(_GQA, ("scaled_dot_product_attention(q, k, v, attn_mask)",
                                                              "scaled_dot_product_attention(q, k, v)")),
        names="attn_mask is not passed on"),
    Bug("GroupedQueryAttention", "rotates before splitting the heads", _GQA_INIT + '''
    def forward(self, x, attn_mask=None, positions=None):
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)  # (B, T, C), (B, T, H_kv * D) x 2
        if self.rotary:
            q, k = apply_rotary(q, positions, self.rope_base), apply_rotary(k, positions, self.rope_base)
        q = split_heads(q, self.num_heads)
        k = split_heads(k, self.num_kv_heads)
        v = split_heads(v, self.num_kv_heads)
        group = self.num_heads // self.num_kv_heads
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        out, weights = scaled_dot_product_attention(q, k, v, attn_mask)
        return self.out_proj(merge_heads(out)), weights
''', names="before split_heads"),
    # ------------------------------------------------------------------ flash_attention
    Bug("flash_attention", "accumulator not rescaled", _flash(_GOOD_LOOP_START + '''
        row_sum = row_sum * rescale + probs.sum(dim=-1, keepdim=True)
        acc = acc + probs @ value[..., start:stop, :]
''' + _GOOD_END), names="accumulator is not rescaled"),
    Bug("flash_attention", "running sum not rescaled", _flash(_GOOD_LOOP_START + '''
        row_sum = row_sum + probs.sum(dim=-1, keepdim=True)
        acc = acc * rescale + probs @ value[..., start:stop, :]
''' + _GOOD_END), names="running sum is not rescaled"),
    Bug("flash_attention", "drops the last partial block", _flash('''
    if causal:
        last_key = torch.arange(L, device=query.device)[:, None] + (S - L)
    for b in range(S // block_size):
        start, stop = b * block_size, (b + 1) * block_size
        scores = q @ key[..., start:stop, :].transpose(-2, -1)
        if causal:
            scores = scores.masked_fill(torch.arange(start, stop, device=query.device) > last_key, float("-inf"))
        new_max = torch.maximum(row_max, scores.amax(dim=-1, keepdim=True))
        shift = new_max.masked_fill(torch.isneginf(new_max), 0.0)
        probs = torch.exp(scores - shift)
        rescale = torch.exp(row_max - shift)
        row_sum = row_sum * rescale + probs.sum(dim=-1, keepdim=True)
        acc = acc * rescale + probs @ value[..., start:stop, :]
''' + _GOOD_END), names="last partial block is dropped"),
    Bug("flash_attention", "causal mask aligned top left", _flash(
        _GOOD_LOOP_START.replace("[:, None] + (S - L)", "[:, None]") + '''
        row_sum = row_sum * rescale + probs.sum(dim=-1, keepdim=True)
        acc = acc * rescale + probs @ value[..., start:stop, :]
''' + _GOOD_END), names="top left"),
    Bug("flash_attention", "builds the whole score matrix", _flash('''
    scores_all = q @ key.transpose(-2, -1)  # (..., L, S)
    if causal:
        blocked = torch.ones(L, S, dtype=torch.bool, device=query.device).triu(S - L + 1)
        scores_all = scores_all.masked_fill(blocked, float("-inf"))
    for start in range(0, S, block_size):
        scores = scores_all[..., start:start + block_size]
        new_max = torch.maximum(row_max, scores.amax(dim=-1, keepdim=True))
        shift = new_max.masked_fill(torch.isneginf(new_max), 0.0)
        probs = torch.exp(scores - shift)
        rescale = torch.exp(row_max - shift)
        row_sum = row_sum * rescale + probs.sum(dim=-1, keepdim=True)
        acc = acc * rescale + probs @ value[..., start:start + block_size, :]
''' + _GOOD_END), names="a whole row of S scores"),
    Bug("flash_attention", "one query row at a time, block_size unused", _flash('''
    outputs = []
    for i in range(L):
        scores = q[..., i:i + 1, :] @ key.transpose(-2, -1)  # (..., 1, S)
        if causal:
            scores = scores.masked_fill(torch.arange(S, device=query.device) > i + S - L, float("-inf"))
        weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
        outputs.append(weights @ value)  # (..., 1, Dv)
    return torch.cat(outputs, dim=-2)
'''), names="a whole row of S scores"),
    Bug("flash_attention", "keys and values padded to whole blocks", _flash('''
    pad = (-S) % block_size
    key_padded = F.pad(key, (0, 0, 0, pad))  # (..., S + pad, D): every block full
    value_padded = F.pad(value, (0, 0, 0, pad))
    for start in range(0, S + pad, block_size):
        positions = torch.arange(start, start + block_size, device=query.device)
        scores = q @ key_padded[..., start:start + block_size, :].transpose(-2, -1)
        blocked = positions >= S
        if causal:
            blocked = blocked | (positions > torch.arange(L, device=query.device)[:, None] + (S - L))
        scores = scores.masked_fill(blocked, float("-inf"))
        new_max = torch.maximum(row_max, scores.amax(dim=-1, keepdim=True))
        shift = new_max.masked_fill(torch.isneginf(new_max), 0.0)
        probs = torch.exp(scores - shift)
        rescale = torch.exp(row_max - shift)
        row_sum = row_sum * rescale + probs.sum(dim=-1, keepdim=True)
        acc = acc * rescale + probs @ value_padded[..., start:start + block_size, :]
''' + _GOOD_END), names="never copying them whole"),
    Bug("flash_attention", "NaN for rows that see no key", _flash('''
    if causal:
        last_key = torch.arange(L, device=query.device)[:, None] + (S - L)
    for start in range(0, S, block_size):
        stop = min(start + block_size, S)
        scores = q @ key[..., start:stop, :].transpose(-2, -1)
        if causal:
            scores = scores.masked_fill(torch.arange(start, stop, device=query.device) > last_key, float("-inf"))
        new_max = torch.maximum(row_max, scores.amax(dim=-1, keepdim=True))
        probs = torch.exp(scores - new_max)
        rescale = torch.exp(row_max - new_max)
        row_sum = row_sum * rescale + probs.sum(dim=-1, keepdim=True)
        acc = acc * rescale + probs @ value[..., start:stop, :]
        row_max = new_max
    return acc / row_sum
'''), names="is NaN"),
    Bug("flash_attention", "causal positions made on the CPU", _flash(
        _GOOD_LOOP_START.replace(", device=query.device", "") + '''
        row_sum = row_sum * rescale + probs.sum(dim=-1, keepdim=True)
        acc = acc * rescale + probs @ value[..., start:stop, :]
''' + _GOOD_END), names="meta device"),
    Bug("GroupedQueryAttention", "rope_base ignored", edited(_GQA, (
        "apply_rotary(q, positions, self.rope_base), apply_rotary(k, positions, self.rope_base)",
        "apply_rotary(q, positions), apply_rotary(k, positions)")), names="self.rope_base is not passed"),
]

# Wrong answers written before any diagnosis was designed for them (issue 20): the first count of how
# many the messages name was taken on these as they stand, then the kinds of mistake they show were named.
BUGS += [
    Bug("RMSNorm", "divides by the L2 norm", _RMS_INIT + '''
    def forward(self, x):
        return x / (x.norm(dim=-1, keepdim=True) + self.eps) * self.weight
''', names="sum of the squares"),
    Bug("RMSNorm", "computes in float32 and casts back (as Llama's code)", _RMS_INIT + '''
    def forward(self, x):
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return h.type_as(x) * self.weight
''', names="float32"),
    Bug("RMSNorm", "mean square over every axis", _RMS_INIT + '''
    def forward(self, x):
        return x / torch.sqrt(x.pow(2).mean() + self.eps) * self.weight
''', names="wrong axis"),
    Bug("SwiGLU", "SiLU of the product", _SWIGLU_INIT + '''
    def forward(self, x):
        return self.w_down(F.silu(self.w_gate(x) * self.w_up(x)))
''', names="of the product"),
    Bug("SwiGLU", "w_gate for both branches", _SWIGLU_INIT + '''
    def forward(self, x):
        gate = self.w_gate(x)
        return self.w_down(F.silu(gate) * self.w_gate(x))
''', names="one layer is used for both branches"),
    Bug("apply_rotary", "angles in float32 for a float64 x", edited(_ROTARY, (
        "    freqs = base ** (-torch.arange(0, D, 2, device=x.device, dtype=torch.float64) / D)\n"
        "    angles = positions.to(torch.float64)[:, None] * freqs\n",
        "    freqs = base ** (-torch.arange(0, D, 2, device=x.device).float() / D)\n"
        "    angles = positions.float()[:, None] * freqs\n")), names="float32"),
    Bug("apply_rotary", "rotated members concatenated, not interleaved", edited(_ROTARY, (
        "torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).flatten(-2)",
        "torch.cat([even * cos - odd * sin, even * sin + odd * cos], dim=-1)")), names="interleave"),
    Bug("apply_rotary", "frequencies grow with i", edited(_ROTARY, (
        "base ** (-torch.arange(0, D, 2, device=x.device, dtype=torch.float64) / D)",
        "base ** (torch.arange(0, D, 2, device=x.device, dtype=torch.float64) / D)")), names="minus sign"),
    Bug("apply_rotary", "overwrites the even features before using them", edited(_ROTARY, (
        "    even, odd = x[..., 0::2], x[..., 1::2]\n"
        "    return torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).flatten(-2)\n",
        "    out = x.clone()\n"
        "    out[..., 0::2] = out[..., 0::2] * cos - out[..., 1::2] * sin\n"
        "    out[..., 1::2] = out[..., 0::2] * sin + out[..., 1::2] * cos\n"
        "    return out\n")), names="overwritten"),
    Bug("apply_rotary", "assert instead of a ValueError", edited(_ROTARY, (
        "    if D % 2:\n        raise ValueError(f\"D must be even, got {D}\")\n", "    assert D % 2 == 0, \"D must be even\"\n")),
        names="must raise a ValueError"),
    Bug("GroupedQueryAttention", "kv heads repeated along the sequence axis", edited(_GQA, (
        "k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)",
        "k.repeat_interleave(group, dim=2), v.repeat_interleave(group, dim=2)")), names="dim=1"),
    Bug("GroupedQueryAttention", "values projected with k_proj", edited(_GQA, (
        "        v = split_heads(self.v_proj(x), self.num_kv_heads)\n",
        "        v = split_heads(self.k_proj(x), self.num_kv_heads)\n")), names="v_proj"),
    Bug("GroupedQueryAttention", "bool mask read as True = attend", edited(_GQA, (
        "        out, weights = scaled_dot_product_attention(q, k, v, attn_mask)\n",
        "        if attn_mask is not None and attn_mask.dtype == torch.bool:\n"
        "            attn_mask = ~attn_mask  # True = may attend, as in F.scaled_dot_product_attention\n"
        "        out, weights = scaled_dot_product_attention(q, k, v, attn_mask)\n")), names="inverted"),
    Bug("GroupedQueryAttention", "kv heads copied with expand in the wrong order", edited(_GQA, (
        "        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)\n",
        "        B, _, T, D = k.shape\n"
        "        k = k[:, None].expand(B, group, self.num_kv_heads, T, D).reshape(B, self.num_heads, T, D)\n"
        "        v = v[:, None].expand(B, group, self.num_kv_heads, T, D).reshape(B, self.num_heads, T, D)\n")),
        names="wrong order"),
    Bug("flash_attention", "one (L, S) causal mask made up front", edited(_FLASH, (
        "    if causal:\n        last_key = torch.arange(L, device=query.device)[:, None] + (S - L)\n",
        "    blocked = torch.arange(S, device=query.device) > torch.arange(L, device=query.device)[:, None] + (S - L)\n"),
        ("torch.arange(start, stop, device=query.device) > last_key", "blocked[:, start:stop]")), names="a mask"),
    Bug("flash_attention", "scores of the unscaled queries", edited(_FLASH, ("scores = q @ key", "scores = query @ key")),
        names="1/sqrt(D)"),
    Bug("flash_attention", "scaled twice", edited(_FLASH, (
        "scores = q @ key[..., start:stop, :].transpose(-2, -1)\n",
        "scores = q @ key[..., start:stop, :].transpose(-2, -1) / math.sqrt(D)\n")), names="1/sqrt(D)"),
    Bug("flash_attention", "causal mask blocks the diagonal", edited(_FLASH, (
        "device=query.device) > last_key", "device=query.device) >= last_key")), names="blocks each query's own position"),
]
