"""Wrong answers for lesson 07: make_lm_examples, DecoderOnlyLM, cached_self_attention, next_token_probs,
generate and perplexity."""

from . import PRELUDE as BASE_PRELUDE
from . import Bug

# The lesson's setup cell imports the earlier lessons' pieces from the reference, as the grader's
# sandbox does; within the lesson, generate calls next_token_probs and perplexity calls
# make_lm_examples: the reference's here.
PRELUDE = BASE_PRELUDE + '''
from autograder.reference import (EncoderLayer, LearnedPositionalEmbedding, MultiHeadAttention, TokenEmbedding,
                                  causal_mask, make_lm_examples, merge_heads, next_token_probs,
                                  scaled_dot_product_attention, split_heads)
'''

_LM_INIT = '''
class DecoderOnlyLM(nn.Module):
    def __init__(self, vocab_size, d_model=128, num_heads=4, num_layers=4, d_ff=512, max_len=256,
                 dropout=0.0, norm_first=True, activation="gelu", tie_weights=True):
        super().__init__()
        self.max_len = max_len
        self.tok_embed = TokenEmbedding(vocab_size, d_model)
        self.pos_embed = LearnedPositionalEmbedding(max_len, d_model)
        self.layers = nn.ModuleList(
            EncoderLayer(d_model, num_heads, d_ff, dropout, norm_first, activation) for _ in range(num_layers)
        )
        self.norm = nn.LayerNorm(d_model) if norm_first else None
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)
'''
_TIED = '''        if tie_weights:
            self.lm_head.weight = self.tok_embed.embedding.weight
'''
_FORWARD = '''
    def forward(self, ids, key_padding_mask=None):
        x = self.pos_embed(self.tok_embed(ids))
        mask = causal_mask(ids.size(1), device=ids.device)
        for layer in self.layers:
            x = layer(x, key_padding_mask=key_padding_mask, attn_mask=mask)
        if self.norm is not None:
            x = self.norm(x)
        return self.lm_head(x)
'''


def _lm(forward=_FORWARD, tie=_TIED):
    return _LM_INIT + tie + forward


_CACHED = '''
def cached_self_attention(attn, x_new, past_key=None, past_value=None):
    q = split_heads(attn.q_proj(x_new), attn.num_heads)
    k = split_heads(attn.k_proj(x_new), attn.num_heads)
    v = split_heads(attn.v_proj(x_new), attn.num_heads)
{append}
    T_new, S = q.size(2), k.size(2)
{mask}
    out, _ = scaled_dot_product_attention(q, k, v, mask)
    return attn.out_proj(merge_heads(out)), k, v
'''
_APPEND = '''    if past_key is not None:
        k = torch.cat([past_key, k], dim=2)
        v = torch.cat([past_value, v], dim=2)'''
_MASK = '''    mask = torch.ones(T_new, S, dtype=torch.bool, device=x_new.device).triu(diagonal=S - T_new + 1)'''


def _cached(append=_APPEND, mask=_MASK):
    return _CACHED.format(append=append, mask=mask)


_PROBS = '''
def next_token_probs(logits, temperature=1.0, top_k=None, top_p=None):
{check}
    logits = logits / temperature
    if {has_top_k}:
{top_k}
    probs = F.softmax(logits, dim=-1)
    if top_p is not None and top_p < 1:
        sorted_probs, order = torch.sort(probs, dim=-1, descending=True)
        cumulative = torch.cumsum(sorted_probs, dim=-1)
{top_p}
        remove = torch.zeros_like(remove_sorted).scatter(-1, order, remove_sorted)
        probs = probs.masked_fill(remove, 0.0)
{renorm}
    return probs
'''
_CHECK_TEMPERATURE = '''    if temperature <= 0:
        raise ValueError("temperature must be positive")'''
_CHECK = _CHECK_TEMPERATURE
_TOP_K = '''        idx = torch.topk(logits, top_k, dim=-1).indices
        keep = torch.zeros_like(logits, dtype=torch.bool).scatter(-1, idx, True)
        logits = logits.masked_fill(~keep, float("-inf"))'''
_TOP_P = '''        remove_sorted = cumulative - sorted_probs >= top_p
        remove_sorted[:, 0] = False'''
_RENORM = '''        probs = probs / probs.sum(dim=-1, keepdim=True)'''


def _probs(check=_CHECK, top_k=_TOP_K, top_p=_TOP_P, renorm=_RENORM, has_top_k="top_k"):
    return _PROBS.format(check=check, top_k=top_k, top_p=top_p, renorm=renorm, has_top_k=has_top_k)


_GENERATE = '''
def generate(model, prompt, max_new_tokens, temperature=1.0, top_k=None, top_p=None, generator=None,
             use_cache=True):
{check}
    was_training = model.training
    model.eval()
{grad}
        ids = prompt
        cache = None
        for _ in range(max_new_tokens):
            if not use_cache:
                logits = model({window})
            elif cache is None:
                cache = [None] * len(model.layers)
                logits = model.forward_cached(ids, cache)
            else:
{step}
            probs = next_token_probs(logits[:, -1], temperature, top_k, top_p)
{sample}
            ids = torch.cat([ids, next_id], dim=1)
{restore}
    return {result}
'''
_GEN_PARTS = {
    "check": '''    if use_cache and prompt.size(1) + max_new_tokens > model.max_len:
        raise ValueError("the prompt and the new tokens do not fit in max_len")''',
    "grad": "    with torch.no_grad():",
    "window": "ids[:, -model.max_len:]",
    "step": "                logits = model.forward_cached(ids[:, -1:], cache)",
    "sample": "            next_id = torch.multinomial(probs, 1, generator=generator)",
    "restore": "    model.train(was_training)",
    "result": "ids",
}


def _generate(**parts):
    return _GENERATE.format(**dict(_GEN_PARTS, **parts))


_PERPLEXITY = '''
def perplexity(model, ids, block_size, batch_size=64):
    x, y = make_lm_examples(ids, block_size)
    was_training = model.training
    model.eval()
{grad}
        total = 0.0
        means = []
        for start in range(0, x.size(0), batch_size):
            logits = model(x[start:start + batch_size])
            targets = y[start:start + batch_size]
            loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1), reduction="sum")
            total += loss.item()
            means.append(loss.item() / targets.numel())
{restore}
    return {result}
'''
_PPL_PARTS = {"grad": "    with torch.no_grad():", "restore": "    model.train(was_training)",
              "result": "math.exp(total / y.numel())"}


def _perplexity(**parts):
    return _PERPLEXITY.format(**dict(_PPL_PARTS, **parts))


BUGS = [
    # ------------------------------------------------------------------ make_lm_examples
    Bug("make_lm_examples", "targets not shifted", '''
def make_lm_examples(ids, block_size):
    if ids.size(0) < block_size + 1:
        raise ValueError("not enough tokens")
    n = (ids.size(0) - 1) // block_size
    x = ids[:n * block_size].view(n, block_size)
    y = ids[:n * block_size].view(n, block_size)
    return x, y
''', names="not shifted"),
    Bug("make_lm_examples", "overlapping windows, a stride of 1", '''
def make_lm_examples(ids, block_size):
    if ids.size(0) < block_size + 1:
        raise ValueError("not enough tokens")
    xs, ys = [], []
    for i in range(ids.size(0) - block_size):
        xs.append(ids[i:i + block_size])
        ys.append(ids[i + 1:i + block_size + 1])
    return torch.stack(xs), torch.stack(ys)
''', names="windows overlap"),
    Bug("make_lm_examples", "N // block_size windows", '''
def make_lm_examples(ids, block_size):
    if ids.size(0) < block_size + 1:
        raise ValueError("not enough tokens")
    n = ids.size(0) // block_size
    x = ids[:n * block_size].view(n, block_size)
    y = ids[1:n * block_size + 1].view(n, block_size)
    return x, y
''', names="off by one"),
    Bug("make_lm_examples", "the length check is off by one", '''
def make_lm_examples(ids, block_size):
    if ids.size(0) < block_size:
        raise ValueError("not enough tokens")
    n = (ids.size(0) - 1) // block_size
    x = ids[:n * block_size].view(n, block_size)
    y = ids[1:n * block_size + 1].view(n, block_size)
    return x, y
''', names="raise ValueError when ids.size(0) < block_size + 1"),
    # ------------------------------------------------------------------ DecoderOnlyLM
    Bug("DecoderOnlyLM", "no causal mask", _lm(_FORWARD.replace(
        "        mask = causal_mask(ids.size(1), device=ids.device)\n", "").replace(
        "attn_mask=mask", "attn_mask=None")), names="without the causal mask"),
    Bug("DecoderOnlyLM", "the mask keeps the past instead of blocking the future", _lm(_FORWARD.replace(
        "causal_mask(ids.size(1), device=ids.device)",
        "torch.ones(ids.size(1), ids.size(1), dtype=torch.bool, device=ids.device).tril()")),
        names="wrong way round"),
    Bug("DecoderOnlyLM", "no final norm", _lm(_FORWARD.replace(
        "        if self.norm is not None:\n            x = self.norm(x)\n", "")), names="final LayerNorm"),
    Bug("DecoderOnlyLM", "tied by copying the weight", _lm(tie='''        if tie_weights:
            self.lm_head.weight = nn.Parameter(self.tok_embed.embedding.weight.clone())
'''), names="not a copy"),
    Bug("DecoderOnlyLM", "always tied", _lm(tie='''        self.lm_head.weight = self.tok_embed.embedding.weight
'''), names="tie_weights=False"),
    Bug("DecoderOnlyLM", "key_padding_mask not passed on", _lm(_FORWARD.replace(
        "key_padding_mask=key_padding_mask, ", "")), names="key_padding_mask is not passed"),
    Bug("DecoderOnlyLM", "the causal mask made on the CPU", _lm(_FORWARD.replace(
        "causal_mask(ids.size(1), device=ids.device)", "causal_mask(ids.size(1))")), names="meta device"),
    Bug("DecoderOnlyLM", "positions looked up by hand, no length check", _lm(_FORWARD.replace(
        "x = self.pos_embed(self.tok_embed(ids))",
        "x = self.tok_embed(ids) + self.pos_embed.embedding(torch.arange(ids.size(1), device=ids.device))")),
        names="no position embeddings"),
    # ------------------------------------------------------------------ cached_self_attention
    Bug("cached_self_attention", "appended along the heads axis", _cached(append=_APPEND.replace("dim=2", "dim=1")),
        names="wrong axis"),
    Bug("cached_self_attention", "the new keys are not appended", _cached(append='''    if past_key is not None:
        k, v = past_key, past_value'''), names="not appended"),
    Bug("cached_self_attention", "no mask", _cached(mask="    mask = None"), names="not masked causally"),
    Bug("cached_self_attention", "no past crashes", _cached(append='''    k = torch.cat([past_key, k], dim=2)
    v = torch.cat([past_value, v], dim=2)'''), names="past_key=None"),
    Bug("cached_self_attention", "a (T_new, T_new) causal mask", _cached(
        mask="    mask = causal_mask(T_new, device=x_new.device)"), names="the mask is (T_new, T_new)"),
    # ------------------------------------------------------------------ next_token_probs
    Bug("next_token_probs", "temperature after the softmax", _probs().replace(
        "    logits = logits / temperature\n", "").replace(
        "    probs = F.softmax(logits, dim=-1)\n", "    probs = F.softmax(logits, dim=-1) / temperature\n"),
        names="after the softmax"),
    Bug("next_token_probs", "no ValueError for temperature 0", _probs(check=""), names="raise ValueError"),
    Bug("next_token_probs", "top-k by a threshold, ties kept", _probs(top_k='''        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))'''), names="equal to the k-th largest"),
    Bug("next_token_probs", "top-p drops the crossing token", _probs(top_p='''        remove_sorted = cumulative > top_p
        remove_sorted[:, 0] = False'''), names="crosses the threshold"),
    Bug("next_token_probs", "top-p may keep nothing", _probs(top_p='''        remove_sorted = cumulative > top_p'''),
        names="keep no token"),
    Bug("next_token_probs", "not renormalised", _probs(renorm=""), names="not renormalised"),
    # ------------------------------------------------------------------ generate
    Bug("generate", "mode not restored", _generate(restore=""), names="different mode"),
    Bug("generate", "gradients on", _generate(grad="    if True:"), names="gradients enabled"),
    Bug("generate", "no length check with the cache", _generate(check=""), names="before any token"),
    Bug("generate", "returns only the new tokens", _generate(result="ids[:, prompt.size(1):]"),
        names="only the new tokens"),
    Bug("generate", "a new cache every step", _generate(step='''                cache = [None] * len(model.layers)
                logits = model.forward_cached(ids[:, -1:], cache)'''), names="new, empty cache"),
    Bug("generate", "greedy instead of sampling", _generate(
        sample="            next_id = probs.argmax(dim=-1, keepdim=True)"), names="most probable one"),
    Bug("generate", "no sliding window without the cache", _generate(window="ids"), names="more than max_len"),
    # ------------------------------------------------------------------ perplexity
    Bug("perplexity", "exp of the sum", _perplexity(result="math.exp(total)"), names="summed"),
    Bug("perplexity", "mean of the batches' means", _perplexity(result="math.exp(sum(means) / len(means))"),
        names="batches' means"),
    Bug("perplexity", "mode not restored", _perplexity(restore=""), names="different mode"),
    Bug("perplexity", "gradients on", _perplexity(grad="    if True:"), names="gradients enabled"),
]

# Wrong answers written after the checks, before any diagnosis was designed for them (issue 20): they
# measure how well the checks name KINDS of mistakes they were not written for. The first number measured
# on them is in docs/instructors.md.
UNSEEN = [
    Bug("make_lm_examples", "overlapping windows, one too few", """
def make_lm_examples(ids, block_size):
    if ids.size(0) < block_size + 1:
        raise ValueError("not enough tokens")
    x = torch.stack([ids[i:i + block_size] for i in range(ids.size(0) - block_size - 1)])
    y = torch.stack([ids[i + 1:i + block_size + 1] for i in range(ids.size(0) - block_size - 1)])
    return x, y
""", names="windows overlap"),
    Bug("make_lm_examples", "the targets are the ids plus one", """
def make_lm_examples(ids, block_size):
    if ids.size(0) < block_size + 1:
        raise ValueError("not enough tokens")
    n = (ids.size(0) - 1) // block_size
    x = ids[:n * block_size].reshape(n, block_size)
    return x, x + 1
""", names="one position"),
    Bug("make_lm_examples", "windows of block_size + 1, one after the other", """
def make_lm_examples(ids, block_size):
    if ids.size(0) < block_size + 1:
        raise ValueError("not enough tokens")
    n = ids.size(0) // (block_size + 1)
    chunks = ids[:n * (block_size + 1)].view(n, block_size + 1)
    return chunks[:, :-1], chunks[:, 1:]
""", names="block_size apart"),
    Bug("make_lm_examples", "rows and columns the wrong way round", """
def make_lm_examples(ids, block_size):
    if ids.size(0) < block_size + 1:
        raise ValueError("not enough tokens")
    n = (ids.size(0) - 1) // block_size
    return ids[:n * block_size].view(block_size, n), ids[1:n * block_size + 1].view(block_size, n)
""", names="(n, block_size)"),
    Bug("make_lm_examples", "filled into float tensors", """
def make_lm_examples(ids, block_size):
    if ids.size(0) < block_size + 1:
        raise ValueError("not enough tokens")
    n = (ids.size(0) - 1) // block_size
    x, y = torch.zeros(n, block_size), torch.zeros(n, block_size)
    for i in range(n):
        x[i] = ids[i * block_size:(i + 1) * block_size]
        y[i] = ids[i * block_size + 1:(i + 1) * block_size + 1]
    return x, y
""", names="dtype"),
    Bug("DecoderOnlyLM", "the layers are one module", _lm().replace(
        "nn.ModuleList(\n            EncoderLayer(d_model, num_heads, d_ff, dropout, norm_first, activation) for _ in range(num_layers)\n        )",
        "nn.ModuleList([EncoderLayer(d_model, num_heads, d_ff, dropout, norm_first, activation)] * num_layers)"),
        names="one module"),
    Bug("DecoderOnlyLM", "returns log-probabilities", _lm(_FORWARD.replace(
        "return self.lm_head(x)", "return F.log_softmax(self.lm_head(x), dim=-1)")), names="no softmax"),
    Bug("DecoderOnlyLM", "the mask blocks the diagonal too", _lm(_FORWARD.replace(
        "causal_mask(ids.size(1), device=ids.device)",
        "torch.ones(ids.size(1), ids.size(1), dtype=torch.bool, device=ids.device).triu()")), names="diagonal"),
    Bug("cached_self_attention", "appended along the last axis", _cached(append=_APPEND.replace("dim=2", "dim=-1")),
        names="wrong axis"),
    Bug("cached_self_attention", "the mask is off by one and hides the token itself", _cached(
        mask=_MASK.replace("diagonal=S - T_new + 1", "diagonal=S - T_new")), names="itself"),
    Bug("cached_self_attention", "a float mask", _cached(
        mask="    mask = torch.ones(T_new, S, device=x_new.device).triu(diagonal=S - T_new + 1)"), names="bool"),
    Bug("cached_self_attention", "returns only the new keys and values", _cached().replace(
        "    return attn.out_proj(merge_heads(out)), k, v",
        "    return attn.out_proj(merge_heads(out)), k[:, :, -T_new:], v[:, :, -T_new:]"), names="all positions"),
    Bug("next_token_probs", "the sort is not undone", _probs().replace(
        "        remove = torch.zeros_like(remove_sorted).scatter(-1, order, remove_sorted)\n"
        "        probs = probs.masked_fill(remove, 0.0)\n",
        "        probs = sorted_probs.masked_fill(remove_sorted, 0.0)\n"), names="not put back"),
    Bug("next_token_probs", "softmax over the batch axis", _probs().replace(
        "F.softmax(logits, dim=-1)", "F.softmax(logits, dim=0)"), names="dim=-1"),
    Bug("next_token_probs", "computed in float32", _probs().replace(
        "    logits = logits / temperature\n", "    logits = logits.float() / temperature\n"), names="float64"),
    Bug("next_token_probs", "renormalised by the sum of the whole batch", _probs(
        renorm="        probs = probs / probs.sum()"), names="each row"),
    Bug("generate", "the generator is not passed on", _generate(
        sample="            next_id = torch.multinomial(probs, 1)"), names="generator given decides"),
    Bug("generate", "the newest token fed without its sequence axis", _generate(
        step="                logits = model.forward_cached(ids[:, -1], cache)"), names="ids[:, -1:]"),
    Bug("perplexity", "divided by the number of windows", _perplexity(result="math.exp(total / x.size(0))"),
        names="another count"),
    Bug("perplexity", "cross-entropy of unflattened logits", _perplexity().replace(
        "F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1), reduction=\"sum\")",
        "F.cross_entropy(logits, targets, reduction=\"sum\")"), names="flatten"),
]

# Named in issue 20 as mistakes students made whose message was missing or wrong.
REPORTED = [
    Bug("next_token_probs", "top-p undone with gather", _probs().replace(
        "torch.zeros_like(remove_sorted).scatter(-1, order, remove_sorted)", "remove_sorted.gather(-1, order)"),
        names="not put back"),
    Bug("DecoderOnlyLM", "a head with a bias", _lm().replace(
        "nn.Linear(d_model, vocab_size, bias=False)", "nn.Linear(d_model, vocab_size)"), names="__init__"),
    Bug("DecoderOnlyLM", "norm_first defaults to False", _lm().replace("norm_first=True", "norm_first=False"),
        names="__init__"),
]

BUGS += UNSEEN + REPORTED
