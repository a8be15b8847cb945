"""Wrong answers for lesson 02: split_heads, merge_heads and MultiHeadAttention."""

from . import PRELUDE as BASE_PRELUDE
from . import Bug

# The lesson's MultiHeadAttention builds on lesson 01's attention and this lesson's split and merge.
PRELUDE = BASE_PRELUDE + """
from autograder.reference import scaled_dot_product_attention, split_heads, merge_heads
"""

_INIT = '''
class MultiHeadAttention(nn.Module):
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
'''


def _mha(forward):
    """The whole answer cell: the given __init__ and the student's forward."""
    return _INIT + forward


BUGS = [
    # ------------------------------------------------------------------ split_heads
    Bug("split_heads", "views straight to (B, H, T, D)", '''
def split_heads(x, num_heads):
    B, T, C = x.shape
    return x.view(B, num_heads, T, C // num_heads)
''', names="mixes the features of different tokens"),
    Bug("split_heads", "forgets the transpose", '''
def split_heads(x, num_heads):
    B, T, C = x.shape
    D = C // num_heads
    x = x.reshape(B, T, num_heads, D)
    return x
''', names="(B, T, H, D)"),
    Bug("split_heads", "swaps the number of heads and the head size", '''
def split_heads(x, num_heads):
    B, T, C = x.shape
    head_size = num_heads
    return x.reshape(B, T, C // head_size, head_size).transpose(1, 2)
''', names="D heads of size H"),
    Bug("split_heads", "splits the features strided", '''
def split_heads(x, num_heads):
    B, T, C = x.shape
    x = x.reshape(B, T, C // num_heads, num_heads)
    return x.permute(0, 3, 1, 2)
''', names="every H-th feature"),
    Bug("split_heads", "moves the tokens last", '''
def split_heads(x, num_heads):
    B, T, C = x.shape
    return x.view(B, T, num_heads, -1).permute(0, 2, 3, 1)
''', names="(B, H, D, T)"),
    Bug("split_heads", "stacks the chunks on the token axis", '''
def split_heads(x, num_heads):
    heads = torch.chunk(x, num_heads, dim=-1)
    return torch.stack(heads, dim=2)
''', names="(B, T, H, D)"),
    Bug("split_heads", "never checks that num_heads divides C", '''
def split_heads(x, num_heads):
    B, T, C = x.shape
    return x.reshape(B, T, num_heads, -1).transpose(1, 2)
''', names="must raise a ValueError"),
    Bug("split_heads", "asserts instead of raising ValueError", '''
def split_heads(x, num_heads):
    B, T, C = x.shape
    assert C % num_heads == 0, "num_heads must divide d_model"
    return x.view(B, T, num_heads, C // num_heads).transpose(1, 2)
''', names="must raise a ValueError"),
    # ------------------------------------------------------------------ merge_heads
    Bug("merge_heads", "reshapes without transposing back", '''
def merge_heads(x):
    B, H, T, D = x.shape
    return x.reshape(B, T, H * D)
''', names="without moving the head axis back"),
    Bug("merge_heads", "merges heads into the tokens", '''
def merge_heads(x):
    B, H, T, D = x.shape
    return x.contiguous().view(B, H * T, D)
''', names="(B, H*T, D)"),
    Bug("merge_heads", "orders the features (D, H)", '''
def merge_heads(x):
    B, H, T, D = x.shape
    return x.permute(0, 2, 3, 1).reshape(B, T, H * D)
''', names="ordered (D, H)"),
    Bug("merge_heads", "transposes batch and heads", '''
def merge_heads(x):
    B, H, T, D = x.shape
    return x.transpose(0, 1).contiguous().view(B, T, H * D)
''', names="batch and head axes are swapped"),
    Bug("merge_heads", "unpacks the shape as (B, T, H, D)", '''
def merge_heads(x):
    B, T, H, D = x.shape
    return x.transpose(1, 2).reshape(B, T, H * D)
''', names="wrong order"),
    Bug("merge_heads", "views a transposed tensor", '''
def merge_heads(x):
    B, H, T, D = x.shape
    return x.transpose(1, 2).view(B, T, H * D)
''', names="never copies"),
    # ------------------------------------------------------------------ MultiHeadAttention
    Bug("MultiHeadAttention", "averages the weights over the heads", _mha('''
    def forward(self, query, key, value, key_padding_mask=None, attn_mask=None, need_weights=True):
        B, L, C = query.shape
        q = split_heads(self.q_proj(query), self.num_heads)
        k = split_heads(self.k_proj(key), self.num_heads)
        v = split_heads(self.v_proj(value), self.num_heads)
        mask = attn_mask
        if mask is not None and mask.dim() == 3:
            mask = mask.view(B, self.num_heads, L, -1)
        if key_padding_mask is not None:
            padding = key_padding_mask[:, None, None, :]
            mask = padding if mask is None else mask | padding
        out, weights = scaled_dot_product_attention(q, k, v, mask)
        out = self.out_proj(merge_heads(out))
        return out, (weights.mean(dim=1) if need_weights else None)
'''), names="averaged over the heads"),
    Bug("MultiHeadAttention", "scales by sqrt(d_model)", _mha('''
    def forward(self, query, key, value, key_padding_mask=None, attn_mask=None, need_weights=True):
        B, L, C = query.shape
        q = split_heads(self.q_proj(query), self.num_heads)
        k = split_heads(self.k_proj(key), self.num_heads)
        v = split_heads(self.v_proj(value), self.num_heads)
        scores = q @ k.transpose(-2, -1) / math.sqrt(C)
        if attn_mask is not None:
            mask = attn_mask.view(B, self.num_heads, L, -1) if attn_mask.dim() == 3 else attn_mask
            scores = scores.masked_fill(mask, float("-inf")) if mask.dtype == torch.bool else scores + mask
        if key_padding_mask is not None:
            scores = scores.masked_fill(key_padding_mask[:, None, None, :], float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        out = self.out_proj(merge_heads(weights @ v))
        return out, (weights if need_weights else None)
'''), names="divided by sqrt(d_model)"),
    Bug("MultiHeadAttention", "ignores key_padding_mask", _mha('''
    def forward(self, query, key, value, key_padding_mask=None, attn_mask=None, need_weights=True):
        B, L, C = query.shape
        q = split_heads(self.q_proj(query), self.num_heads)
        k = split_heads(self.k_proj(key), self.num_heads)
        v = split_heads(self.v_proj(value), self.num_heads)
        if attn_mask is not None and attn_mask.dim() == 3:
            attn_mask = attn_mask.view(B, self.num_heads, L, -1)
        out, weights = scaled_dot_product_attention(q, k, v, attn_mask)
        out = self.out_proj(merge_heads(out))
        return out, (weights if need_weights else None)
'''), names="key_padding_mask is ignored"),
    Bug("MultiHeadAttention", "reads key_padding_mask as 'keep'", _mha('''
    def forward(self, query, key, value, key_padding_mask=None, attn_mask=None, need_weights=True):
        B, L, C = query.shape
        q = split_heads(self.q_proj(query), self.num_heads)
        k = split_heads(self.k_proj(key), self.num_heads)
        v = split_heads(self.v_proj(value), self.num_heads)
        mask = attn_mask
        if mask is not None and mask.dim() == 3:
            mask = mask.view(B, self.num_heads, L, -1)
        if key_padding_mask is not None:
            keep = key_padding_mask[:, None, None, :]
            padding = ~keep
            mask = padding if mask is None else (mask | padding if mask.dtype == torch.bool else mask.masked_fill(padding, float("-inf")))
        out, weights = scaled_dot_product_attention(q, k, v, mask)
        out = self.out_proj(merge_heads(out))
        return out, (weights if need_weights else None)
'''), names="wrong way round"),
    Bug("MultiHeadAttention", "reshapes a 3-D mask head-major", _mha('''
    def forward(self, query, key, value, key_padding_mask=None, attn_mask=None, need_weights=True):
        B, L, C = query.shape
        S = key.size(1)
        q = split_heads(self.q_proj(query), self.num_heads)
        k = split_heads(self.k_proj(key), self.num_heads)
        v = split_heads(self.v_proj(value), self.num_heads)
        mask = attn_mask
        if mask is not None and mask.dim() == 3:
            mask = mask.view(self.num_heads, B, L, S).transpose(0, 1)
        if key_padding_mask is not None:
            padding = key_padding_mask.view(B, 1, 1, S)
            if mask is None:
                mask = padding
            elif mask.dtype == torch.bool:
                mask = mask | padding
            else:
                mask = mask.masked_fill(padding, float("-inf"))
        out, weights = scaled_dot_product_attention(q, k, v, mask)
        out = self.out_proj(merge_heads(out))
        return out, (weights if need_weights else None)
'''), names="batch-major"),
    Bug("MultiHeadAttention", "projects keys and values from the query", _mha('''
    def forward(self, query, key, value, key_padding_mask=None, attn_mask=None, need_weights=True):
        B, L, C = query.shape
        q = split_heads(self.q_proj(query), self.num_heads)
        k = split_heads(self.k_proj(query), self.num_heads)
        v = split_heads(self.v_proj(query), self.num_heads)
        mask = attn_mask
        if mask is not None and mask.dim() == 3:
            mask = mask.view(B, self.num_heads, L, -1)
        if key_padding_mask is not None:
            padding = key_padding_mask[:, None, None, :]
            mask = padding if mask is None else (mask | padding if mask.dtype == torch.bool else mask.masked_fill(padding, float("-inf")))
        out, weights = scaled_dot_product_attention(q, k, v, mask)
        return self.out_proj(merge_heads(out)), (weights if need_weights else None)
'''), names="projected from the query"),
    Bug("MultiHeadAttention", "forgets the output projection", _mha('''
    def forward(self, query, key, value, key_padding_mask=None, attn_mask=None, need_weights=True):
        B, L, C = query.shape
        q = split_heads(self.q_proj(query), self.num_heads)
        k = split_heads(self.k_proj(key), self.num_heads)
        v = split_heads(self.v_proj(value), self.num_heads)
        mask = attn_mask
        if mask is not None and mask.dim() == 3:
            mask = mask.view(B, self.num_heads, L, -1)
        if key_padding_mask is not None:
            padding = key_padding_mask[:, None, None, :]
            mask = padding if mask is None else (mask | padding if mask.dtype == torch.bool else mask.masked_fill(padding, float("-inf")))
        out, weights = scaled_dot_product_attention(q, k, v, mask)
        return merge_heads(out), (weights if need_weights else None)
'''), names="output projection is missing"),
    Bug("MultiHeadAttention", "merges the heads with a plain view", _mha('''
    def forward(self, query, key, value, key_padding_mask=None, attn_mask=None, need_weights=True):
        B, L, C = query.shape
        q = split_heads(self.q_proj(query), self.num_heads)
        k = split_heads(self.k_proj(key), self.num_heads)
        v = split_heads(self.v_proj(value), self.num_heads)
        mask = attn_mask
        if mask is not None and mask.dim() == 3:
            mask = mask.view(B, self.num_heads, L, -1)
        if key_padding_mask is not None:
            padding = key_padding_mask[:, None, None, :]
            mask = padding if mask is None else (mask | padding if mask.dtype == torch.bool else mask.masked_fill(padding, float("-inf")))
        out, weights = scaled_dot_product_attention(q, k, v, mask)
        out = out.contiguous().view(B, L, C)
        return self.out_proj(out), (weights if need_weights else None)
'''), names="merged with a plain reshape"),
    Bug("MultiHeadAttention", "uses only attn_mask when both masks are given", _mha('''
    def forward(self, query, key, value, key_padding_mask=None, attn_mask=None, need_weights=True):
        B, L, C = query.shape
        q = split_heads(self.q_proj(query), self.num_heads)
        k = split_heads(self.k_proj(key), self.num_heads)
        v = split_heads(self.v_proj(value), self.num_heads)
        if attn_mask is not None:
            mask = attn_mask.view(B, self.num_heads, L, -1) if attn_mask.dim() == 3 else attn_mask
        elif key_padding_mask is not None:
            mask = key_padding_mask[:, None, None, :]
        else:
            mask = None
        out, weights = scaled_dot_product_attention(q, k, v, mask)
        return self.out_proj(merge_heads(out)), (weights if need_weights else None)
'''), names="only attn_mask is used"),
    Bug("MultiHeadAttention", "always returns the weights", _mha('''
    def forward(self, query, key, value, key_padding_mask=None, attn_mask=None, need_weights=True):
        B, L, C = query.shape
        q = split_heads(self.q_proj(query), self.num_heads)
        k = split_heads(self.k_proj(key), self.num_heads)
        v = split_heads(self.v_proj(value), self.num_heads)
        mask = attn_mask
        if mask is not None and mask.dim() == 3:
            mask = mask.view(B, self.num_heads, L, -1)
        if key_padding_mask is not None:
            padding = key_padding_mask[:, None, None, :]
            mask = padding if mask is None else (mask | padding if mask.dtype == torch.bool else mask.masked_fill(padding, float("-inf")))
        out, weights = scaled_dot_product_attention(q, k, v, mask)
        return self.out_proj(merge_heads(out)), weights
'''), names="need_weights=False"),
    Bug("MultiHeadAttention", "forgets the scale", _mha('''
    def forward(self, query, key, value, key_padding_mask=None, attn_mask=None, need_weights=True):
        B, L, C = query.shape
        q = split_heads(self.q_proj(query), self.num_heads)
        k = split_heads(self.k_proj(key), self.num_heads)
        v = split_heads(self.v_proj(value), self.num_heads)
        scores = q @ k.transpose(-2, -1)
        if attn_mask is not None:
            mask = attn_mask.view(B, self.num_heads, L, -1) if attn_mask.dim() == 3 else attn_mask
            scores = scores.masked_fill(mask, float("-inf")) if mask.dtype == torch.bool else scores + mask
        if key_padding_mask is not None:
            scores = scores.masked_fill(key_padding_mask[:, None, None, :], float("-inf"))
        weights = F.softmax(scores, dim=-1)
        out = self.out_proj(merge_heads(weights @ v))
        return out, (weights if need_weights else None)
'''), names="not scaled"),
    Bug("MultiHeadAttention", "puts the padding mask on the query axis", _mha('''
    def forward(self, query, key, value, key_padding_mask=None, attn_mask=None, need_weights=True):
        B, L, C = query.shape
        q = split_heads(self.q_proj(query), self.num_heads)
        k = split_heads(self.k_proj(key), self.num_heads)
        v = split_heads(self.v_proj(value), self.num_heads)
        mask = attn_mask
        if mask is not None and mask.dim() == 3:
            mask = mask.view(B, self.num_heads, L, -1)
        if key_padding_mask is not None:
            padding = key_padding_mask.unsqueeze(1).unsqueeze(-1)
            mask = padding if mask is None else (mask | padding if mask.dtype == torch.bool else mask.masked_fill(padding, float("-inf")))
        out, weights = scaled_dot_product_attention(q, k, v, mask)
        return self.out_proj(merge_heads(out)), (weights if need_weights else None)
'''), names="blocks queries instead of keys"),
    Bug("MultiHeadAttention", "passes a 3-D mask on unchanged", _mha('''
    def forward(self, query, key, value, key_padding_mask=None, attn_mask=None, need_weights=True):
        q = split_heads(self.q_proj(query), self.num_heads)
        k = split_heads(self.k_proj(key), self.num_heads)
        v = split_heads(self.v_proj(value), self.num_heads)
        mask = attn_mask
        if key_padding_mask is not None:
            padding = key_padding_mask[:, None, None, :]
            mask = padding if mask is None else (mask | padding if mask.dtype == torch.bool else mask.masked_fill(padding, float("-inf")))
        out, weights = scaled_dot_product_attention(q, k, v, mask)
        return self.out_proj(merge_heads(out)), (weights if need_weights else None)
'''), names="view it as (B, H, L, S)"),
    Bug("MultiHeadAttention", "scales the queries, then calls the scaled attention", _mha('''
    def forward(self, query, key, value, key_padding_mask=None, attn_mask=None, need_weights=True):
        B, L, C = query.shape
        D = C // self.num_heads
        q = split_heads(self.q_proj(query), self.num_heads) / math.sqrt(D)
        k = split_heads(self.k_proj(key), self.num_heads)
        v = split_heads(self.v_proj(value), self.num_heads)
        mask = attn_mask
        if mask is not None and mask.dim() == 3:
            mask = mask.view(B, self.num_heads, L, -1)
        if key_padding_mask is not None:
            padding = key_padding_mask[:, None, None, :]
            mask = padding if mask is None else (mask | padding if mask.dtype == torch.bool else mask.masked_fill(padding, float("-inf")))
        out, weights = scaled_dot_product_attention(q, k, v, mask)
        return self.out_proj(merge_heads(out)), (weights if need_weights else None)
'''), names="scaled twice"),
    Bug("MultiHeadAttention", "leaves dropout on in eval()", _mha('''
    def forward(self, query, key, value, key_padding_mask=None, attn_mask=None, need_weights=True):
        B, L, C = query.shape
        q = split_heads(self.q_proj(query), self.num_heads)
        k = split_heads(self.k_proj(key), self.num_heads)
        v = split_heads(self.v_proj(value), self.num_heads)
        mask = attn_mask
        if mask is not None and mask.dim() == 3:
            mask = mask.view(B, self.num_heads, L, -1)
        if key_padding_mask is not None:
            padding = key_padding_mask[:, None, None, :]
            mask = padding if mask is None else (mask | padding if mask.dtype == torch.bool else mask.masked_fill(padding, float("-inf")))
        out, weights = scaled_dot_product_attention(q, k, v, mask)
        if self.dropout > 0:
            weights = F.dropout(weights, self.dropout)
            out = weights @ v
        return self.out_proj(merge_heads(out)), (weights if need_weights else None)
'''), names="dropout is on in eval() mode"),
    Bug("MultiHeadAttention", "never applies dropout", _mha('''
    def forward(self, query, key, value, key_padding_mask=None, attn_mask=None, need_weights=True):
        B, L, C = query.shape
        q = split_heads(self.q_proj(query), self.num_heads)
        k = split_heads(self.k_proj(key), self.num_heads)
        v = split_heads(self.v_proj(value), self.num_heads)
        mask = attn_mask
        if mask is not None and mask.dim() == 3:
            mask = mask.view(B, self.num_heads, L, -1)
        if key_padding_mask is not None:
            padding = key_padding_mask[:, None, None, :]
            mask = padding if mask is None else (mask | padding if mask.dtype == torch.bool else mask.masked_fill(padding, float("-inf")))
        out, weights = scaled_dot_product_attention(q, k, v, mask)
        return self.out_proj(merge_heads(out)), (weights if need_weights else None)
'''), names="dropout is never applied"),
    Bug("MultiHeadAttention", "drops the output instead of the weights", _mha('''
    def forward(self, query, key, value, key_padding_mask=None, attn_mask=None, need_weights=True):
        B, L, C = query.shape
        q = split_heads(self.q_proj(query), self.num_heads)
        k = split_heads(self.k_proj(key), self.num_heads)
        v = split_heads(self.v_proj(value), self.num_heads)
        mask = attn_mask
        if mask is not None and mask.dim() == 3:
            mask = mask.view(B, self.num_heads, L, -1)
        if key_padding_mask is not None:
            padding = key_padding_mask[:, None, None, :]
            mask = padding if mask is None else (mask | padding if mask.dtype == torch.bool else mask.masked_fill(padding, float("-inf")))
        out, weights = scaled_dot_product_attention(q, k, v, mask)
        out = F.dropout(self.out_proj(merge_heads(out)), self.dropout, training=self.training)
        return out, (weights if need_weights else None)
'''), names="dropout is applied to the output, after out_proj"),
    Bug("MultiHeadAttention", "drops the weights after computing the output", _mha('''
    def forward(self, query, key, value, key_padding_mask=None, attn_mask=None, need_weights=True):
        B, L, C = query.shape
        q = split_heads(self.q_proj(query), self.num_heads)
        k = split_heads(self.k_proj(key), self.num_heads)
        v = split_heads(self.v_proj(value), self.num_heads)
        mask = attn_mask
        if mask is not None and mask.dim() == 3:
            mask = mask.view(B, self.num_heads, L, -1)
        if key_padding_mask is not None:
            padding = key_padding_mask[:, None, None, :]
            mask = padding if mask is None else (mask | padding if mask.dtype == torch.bool else mask.masked_fill(padding, float("-inf")))
        out, weights = scaled_dot_product_attention(q, k, v, mask)
        weights = F.dropout(weights, self.dropout, training=self.training)
        return self.out_proj(merge_heads(out)), (weights if need_weights else None)
'''), names="recompute"),
    Bug("MultiHeadAttention", "builds the padding mask on the CPU", _mha('''
    def forward(self, query, key, value, key_padding_mask=None, attn_mask=None, need_weights=True):
        B, L, C = query.shape
        S = key.size(1)
        q = split_heads(self.q_proj(query), self.num_heads)
        k = split_heads(self.k_proj(key), self.num_heads)
        v = split_heads(self.v_proj(value), self.num_heads)
        mask = None
        if attn_mask is not None:
            mask = attn_mask.view(B, self.num_heads, L, S) if attn_mask.dim() == 3 else attn_mask
            if mask.dtype == torch.bool:
                mask = torch.zeros(mask.shape, dtype=q.dtype, device=q.device).masked_fill(mask, float("-inf"))
        if key_padding_mask is not None:
            padding = torch.zeros(B, 1, 1, S).masked_fill(key_padding_mask[:, None, None, :], float("-inf"))
            mask = padding if mask is None else mask + padding
        out, weights = scaled_dot_product_attention(q, k, v, mask)
        if self.training and self.dropout > 0:
            weights = F.dropout(weights, self.dropout)
            out = weights @ v
        return self.out_proj(merge_heads(out)), (weights if need_weights else None)
'''), names="meta device"),
    Bug("MultiHeadAttention", "projects with the weights and biases by hand", _mha('''
    def forward(self, query, key, value, key_padding_mask=None, attn_mask=None, need_weights=True):
        B, L, C = query.shape
        q = split_heads(query @ self.q_proj.weight.T + self.q_proj.bias, self.num_heads)
        k = split_heads(key @ self.k_proj.weight.T + self.k_proj.bias, self.num_heads)
        v = split_heads(value @ self.v_proj.weight.T + self.v_proj.bias, self.num_heads)
        mask = attn_mask
        if mask is not None and mask.dim() == 3:
            mask = mask.view(B, self.num_heads, L, -1)
        if key_padding_mask is not None:
            padding = key_padding_mask[:, None, None, :]
            mask = padding if mask is None else (mask | padding if mask.dtype == torch.bool else mask.masked_fill(padding, float("-inf")))
        out, weights = scaled_dot_product_attention(q, k, v, mask)
        out = merge_heads(out) @ self.out_proj.weight.T + self.out_proj.bias
        return out, (weights if need_weights else None)
'''), names="bias=False"),
]

# The same answer with its dropout moved before the heads are merged: on each head's output.
_DROPS_OUTPUT = next(bug for bug in BUGS if bug.title == "drops the output instead of the weights")
BUGS.append(Bug("MultiHeadAttention", "drops each head's output before merging the heads", _DROPS_OUTPUT.source.replace(
    "        out = F.dropout(self.out_proj(merge_heads(out)), self.dropout, training=self.training)\n",
    "        out = F.dropout(out, self.dropout, training=self.training)  # (B, H, L, D): each head's output\n"
    "        out = self.out_proj(merge_heads(out))\n"), names="dropout is applied to each head's output"))
assert BUGS[-1].source != _DROPS_OUTPUT.source

# The rest of a right forward once q, k and v are split: the masks as one float mask (B, H, L, S), attention,
# dropout on the weights in training mode.
_MASKED_ATTENTION = '''
        mask = None
        if attn_mask is not None:
            mask = attn_mask.view(B, H, L, -1) if attn_mask.dim() == 3 else attn_mask
            if mask.dtype == torch.bool:
                mask = torch.zeros(mask.shape, dtype=q.dtype, device=q.device).masked_fill(mask, float("-inf"))
        if key_padding_mask is not None:
            padding = torch.zeros(key_padding_mask.shape, dtype=q.dtype, device=q.device)
            padding = padding.masked_fill(key_padding_mask, float("-inf"))[:, None, None, :]
            mask = padding if mask is None else mask + padding
        out, weights = scaled_dot_product_attention(q, k, v, mask)
        if self.training and self.dropout > 0:
            weights = F.dropout(weights, self.dropout)
            out = weights @ v
'''

BUGS.append(Bug("MultiHeadAttention", "projects the values with k_proj", _mha('''
    def forward(self, query, key, value, key_padding_mask=None, attn_mask=None, need_weights=True):
        B, L, _ = query.shape
        H = self.num_heads
        q = split_heads(self.q_proj(query), H)
        k = split_heads(self.k_proj(key), H)
        v = split_heads(self.k_proj(value), H)
''' + _MASKED_ATTENTION + '''        out = self.out_proj(merge_heads(out))
        return out, (weights if need_weights else None)
'''), names="a sublayer is reused: the value projection uses self.k_proj"))

# Written as a student would, before any diagnosis was designed for them (issue 20): the
# share of these that the checks name measures how well they name kinds of mistakes, not instances.
BUGS += [
    Bug("split_heads", "splits into chunks of num_heads features", '''
def split_heads(x, num_heads):
    if x.size(-1) % num_heads:
        raise ValueError("C must be divisible by num_heads")
    return torch.stack(x.split(num_heads, dim=-1), dim=1)
''', names='the wrong way round'),
    Bug("merge_heads", "flattens from the token axis", '''
def merge_heads(x):
    return x.permute(0, 2, 1, 3).flatten(1)
''', names='the token axis is flattened too'),
    Bug("MultiHeadAttention", "reshapes keys and values with the query's length", _mha('''
    def forward(self, query, key, value, key_padding_mask=None, attn_mask=None, need_weights=True):
        B, L, C = query.shape
        H, D = self.num_heads, C // self.num_heads
        q = self.q_proj(query).view(B, L, H, D).transpose(1, 2)
        k = self.k_proj(key).view(B, L, H, D).transpose(1, 2)
        v = self.v_proj(value).view(B, L, H, D).transpose(1, 2)
''' + _MASKED_ATTENTION + '''        out = self.out_proj(out.transpose(1, 2).reshape(B, L, C))
        return out, (weights if need_weights else None)
'''), names="reshaped with the queries' length"),
]

# Written after the kinds above were measured, as a hold-out (issue 20): named by the kinds at
# first try or not, then given the instance or kind that names them.
BUGS += [
    Bug("MultiHeadAttention", "projects the keys with q_proj", _mha('''
    def forward(self, query, key, value, key_padding_mask=None, attn_mask=None, need_weights=True):
        B, L, _ = query.shape
        H = self.num_heads
        q = split_heads(self.q_proj(query), H)
        k = split_heads(self.q_proj(key), H)
        v = split_heads(self.v_proj(value), H)
''' + _MASKED_ATTENTION + '''        out = self.out_proj(merge_heads(out))
        return out, (weights if need_weights else None)
'''), names='the key projection uses self.q_proj'),
]
