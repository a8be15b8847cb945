"""Wrong answers for lesson 01: scaled_dot_product_attention and SelfAttention."""

from . import PRELUDE as BASE_PRELUDE
from . import Bug

# SelfAttention calls the lesson's scaled_dot_product_attention, defined above it in the notebook: here, a right one.
PRELUDE = BASE_PRELUDE + """
from autograder.reference import scaled_dot_product_attention
"""

BUGS = [
    Bug("scaled_dot_product_attention", "forgets the scale", '''
def scaled_dot_product_attention(query, key, value, attn_mask=None):
    scores = query @ key.transpose(-2, -1)
    if attn_mask is not None:
        scores = scores.masked_fill(attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else scores + attn_mask
    weights = torch.softmax(scores, dim=-1)
    return weights @ value, weights
''', names="not scaled"),
    Bug("scaled_dot_product_attention", "placeholder weights that ignore the scores", '''
def scaled_dot_product_attention(query, key, value, attn_mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    weights = torch.full_like(scores, 1 / key.size(-2))  # TODO: the softmax
    return weights @ value, weights
''', names="ignore the scores"),
    Bug("scaled_dot_product_attention", "divides by d_k, not its root", '''
def scaled_dot_product_attention(query, key, value, attn_mask=None):
    scores = query @ key.transpose(-2, -1) / query.size(-1)
    if attn_mask is not None:
        scores = scores.masked_fill(attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else scores + attn_mask
    weights = scores.softmax(-1)
    return weights @ value, weights
''', names="square root"),
    Bug("scaled_dot_product_attention", "softmax over the queries", '''
def scaled_dot_product_attention(query, key, value, attn_mask=None):
    scores = torch.matmul(query, key.transpose(-2, -1)) / math.sqrt(query.shape[-1])
    if attn_mask is not None:
        scores = scores.masked_fill(attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else scores + attn_mask
    weights = F.softmax(scores, dim=1)
    return weights @ value, weights
''', names="dim=-2"),
    Bug("scaled_dot_product_attention", "mask read as 'keep'", '''
def scaled_dot_product_attention(query, key, value, attn_mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attn_mask, float("-inf"))
        else:
            scores = scores + attn_mask
    weights = torch.softmax(scores, dim=-1)
    return weights @ value, weights
''', names="wrong way round"),
    Bug("scaled_dot_product_attention", "masks the weights after the softmax", '''
def scaled_dot_product_attention(query, key, value, attn_mask=None):
    weights = torch.softmax(query @ key.transpose(-2, -1) / math.sqrt(query.size(-1)), dim=-1)
    if attn_mask is not None:
        weights = weights.masked_fill(attn_mask, 0.0) if attn_mask.dtype == torch.bool else weights
    return weights @ value, weights
''', names="after the softmax"),
    Bug("scaled_dot_product_attention", "transposes the wrong axes of a 4-D key", '''
def scaled_dot_product_attention(query, key, value, attn_mask=None):
    scores = query @ key.transpose(1, 2) / math.sqrt(query.size(-1))
    if attn_mask is not None:
        scores = scores.masked_fill(attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else scores + attn_mask
    weights = torch.softmax(scores, dim=-1)
    return weights @ value, weights
''', names="transposed on axes 1 and 2"),
    Bug("scaled_dot_product_attention", "scales by the value size", '''
def scaled_dot_product_attention(query, key, value, attn_mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(value.size(-1))
    if attn_mask is not None:
        scores = scores.masked_fill(attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else scores + attn_mask
    weights = torch.softmax(scores, dim=-1)
    return weights @ value, weights
''', names="size of the values"),
    Bug("scaled_dot_product_attention", "hard-codes float32", '''
def scaled_dot_product_attention(query, key, value, attn_mask=None):
    scale = torch.tensor(query.size(-1), dtype=torch.float32).sqrt()
    scores = (query @ key.transpose(-2, -1) / scale).float()
    if attn_mask is not None:
        scores = scores.masked_fill(attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else scores + attn_mask
    weights = torch.softmax(scores, dim=-1)
    return weights @ value.float(), weights
''', names="don't hard-code a dtype"),
    Bug("scaled_dot_product_attention", "ignores a float mask", '''
def scaled_dot_product_attention(query, key, value, attn_mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        scores = scores.masked_fill(attn_mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return weights @ value, weights
''', names="float attn_mask is ignored"),
    Bug("SelfAttention", "forgets the output projection", '''
class SelfAttention(nn.Module):
    def __init__(self, d_model):
        super().__init__()
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def forward(self, x, attn_mask=None):
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)), dim=-1)
        if attn_mask is not None:
            scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
            weights = torch.softmax(scores.masked_fill(attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else scores + attn_mask, dim=-1)
        return weights @ v, weights
''', names="output projection"),
    Bug("SelfAttention", "uses x as the values", '''
class SelfAttention(nn.Module):
    def __init__(self, d_model):
        super().__init__()
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def forward(self, x, attn_mask=None):
        scores = self.q_proj(x) @ self.k_proj(x).transpose(-2, -1) / math.sqrt(x.size(-1))
        if attn_mask is not None:
            scores = scores.masked_fill(attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else scores + attn_mask
        weights = scores.softmax(dim=-1)
        return self.out_proj(weights @ x), weights
''', names="raw input"),
    Bug("SelfAttention", "drops the mask", '''
class SelfAttention(nn.Module):
    def __init__(self, d_model):
        super().__init__()
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def forward(self, x, attn_mask=None):
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(x.size(-1)), dim=-1)
        return self.out_proj(weights @ v), weights
''', names="not passed on"),
    Bug("SelfAttention", "swaps queries and keys", '''
class SelfAttention(nn.Module):
    def __init__(self, d_model):
        super().__init__()
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def forward(self, x, attn_mask=None):
        q, k, v = self.k_proj(x), self.q_proj(x), self.v_proj(x)
        scores = q @ k.transpose(-2, -1) / math.sqrt(x.size(-1))
        if attn_mask is not None:
            scores = scores.masked_fill(attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else scores + attn_mask
        weights = torch.softmax(scores, dim=-1)
        return self.out_proj(weights @ v), weights
''', names="swapped"),
    Bug("SelfAttention", "scales by the number of tokens", '''
class SelfAttention(nn.Module):
    def __init__(self, d_model):
        super().__init__()
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def forward(self, x, attn_mask=None):
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        scores = q @ k.transpose(1, 2) / math.sqrt(x.size(1))
        if attn_mask is not None:
            scores = scores.masked_fill(attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else scores + attn_mask
        weights = torch.softmax(scores, dim=-1)
        return self.out_proj(weights @ v), weights
''', names="number of tokens"),
    Bug("SelfAttention", "projects the values with k_proj", '''
class SelfAttention(nn.Module):
    def __init__(self, d_model):
        super().__init__()
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def forward(self, x, attn_mask=None):
        q, k, v = self.q_proj(x), self.k_proj(x), self.k_proj(x)
        out, weights = scaled_dot_product_attention(q, k, v, attn_mask)
        return self.out_proj(out), weights
''', names="a sublayer is reused: the value projection uses self.k_proj"),
    Bug("scaled_dot_product_attention", "the scale made as a float32 tensor", '''
def scaled_dot_product_attention(query, key, value, attn_mask=None):
    d_k = torch.tensor(query.size(-1))
    scores = query @ key.transpose(-2, -1) / torch.sqrt(d_k)
    if attn_mask is not None:
        scores = scores.masked_fill(attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else scores + attn_mask
    weights = torch.softmax(scores, dim=-1)
    return weights @ value, weights
''', names="right only to float32's precision"),
    Bug("scaled_dot_product_attention", "the softmax in float32", '''
def scaled_dot_product_attention(query, key, value, attn_mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if attn_mask is not None:
        scores = scores.masked_fill(attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else scores + attn_mask
    weights = torch.softmax(scores.float(), dim=-1).to(scores.dtype)  # a stable softmax
    return weights @ value, weights
''', names="right only to float32's precision"),
]

# Written as a student would, before any diagnosis was designed for them (issue 20): the
# share of these that the checks name measures how well they name kinds of mistakes, not instances.
BUGS += [
    Bug("scaled_dot_product_attention", "treats every mask as boolean", '''
def scaled_dot_product_attention(query, key, value, attn_mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if attn_mask is not None:
        scores = scores.masked_fill(attn_mask.bool(), float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return weights @ value, weights
''', names='read as a boolean one'),
    Bug("scaled_dot_product_attention", "softmax over dim=2", '''
def scaled_dot_product_attention(query, key, value, attn_mask=None):
    scores = torch.matmul(query, key.transpose(-2, -1)) / math.sqrt(query.size(-1))
    if attn_mask is not None:
        scores = scores.masked_fill(attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else scores + attn_mask
    weights = torch.softmax(scores, dim=2)
    return torch.matmul(weights, value), weights
''', names='runs over the queries'),
    Bug("scaled_dot_product_attention", "scales by the number of keys", '''
def scaled_dot_product_attention(query, key, value, attn_mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(key.size(-2))
    if attn_mask is not None:
        scores = scores.masked_fill(attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else scores + attn_mask
    weights = torch.softmax(scores, dim=-1)
    return weights @ value, weights
''', names='the number of keys (S)'),
    Bug("SelfAttention", "returns the scores as the weights", '''
class SelfAttention(nn.Module):
    def __init__(self, d_model):
        super().__init__()
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def forward(self, x, attn_mask=None):
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        if attn_mask is not None:
            scores = scores.masked_fill(attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else scores + attn_mask
        out = torch.softmax(scores, dim=-1) @ v
        return self.out_proj(out), scores
''', names="not the softmax's probabilities"),
    Bug("SelfAttention", "scales the queries before the scaled attention", '''
class SelfAttention(nn.Module):
    def __init__(self, d_model):
        super().__init__()
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def forward(self, x, attn_mask=None):
        q = self.q_proj(x) / math.sqrt(x.size(-1))
        out, weights = scaled_dot_product_attention(q, self.k_proj(x), self.v_proj(x), attn_mask)
        return self.out_proj(out), weights
''', names='or by sqrt(d_k) twice'),
]

_SA_INIT = '''
class SelfAttention(nn.Module):
    def __init__(self, d_model):
        super().__init__()
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)
'''

# Written after the kinds above were measured, as a hold-out (issue 20): named by the kinds at
# first try or not, then given the instance or kind that names them.
BUGS += [
    Bug("scaled_dot_product_attention", "scales by the number of queries", '''
def scaled_dot_product_attention(query, key, value, attn_mask=None):
    L = query.size(-2)
    scores = query @ key.transpose(-2, -1) / math.sqrt(L)
    if attn_mask is not None:
        scores = scores.masked_fill(attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else scores + attn_mask
    return scores.softmax(dim=-1) @ value, scores.softmax(dim=-1)
''', names='the number of queries (L)'),
    Bug("SelfAttention", "its own attention with the mask read as 'keep'", _SA_INIT + '''
    def forward(self, x, attn_mask=None):
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        if attn_mask is not None:
            scores = scores.masked_fill(~attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else scores + attn_mask
        weights = scores.softmax(-1)
        return self.out_proj(weights @ v), weights
''', names='wrong way round'),
]
