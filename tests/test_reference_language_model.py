"""Lesson 07's reference (autograder/reference/language_model.py) against PyTorch and against itself.

DecoderOnlyLM is compared with the same embeddings and head around nn.TransformerEncoder
(pre-norm or post-norm, a causal mask), weights copied across: logits and gradients.
The KV cache has no PyTorch counterpart: the cached attention is compared row for row with
full causal self-attention (the course's and nn.MultiheadAttention's), forward_cached over
chunks with forward, and generation with a cache with generation without one. Sampling
(next_token_probs) is compared with the definitions written out on small cases, perplexity
with the cross-entropy computed by hand.
"""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.testing import assert_close

from autograder.reference import MultiHeadAttention, causal_mask, split_heads
from autograder.reference.language_model import (
    CharTokenizer,
    DecoderOnlyLM,
    cached_self_attention,
    generate,
    make_lm_examples,
    next_token_probs,
    perplexity,
)
from tests.torch_nn_weights import copy_from_torch, randomize_, to_course_names, torch_encoder

V, D_MODEL, HEADS, D_FF, LAYERS, MAX_LEN, BATCH = 11, 8, 2, 16, 2, 16, 3
NORMS = pytest.mark.parametrize("norm_first", [True, False], ids=["pre_norm", "post_norm"])
ACTIVATIONS = pytest.mark.parametrize("activation", ["gelu", "relu"])
OWN = {"tok_embed.embedding.weight", "pos_embed.embedding.weight", "lm_head.weight"}  # not in nn.TransformerEncoder


from tests.reference_fixtures import _math_attention, _seed, device, dtype  # noqa: E402,F401  (fixtures)


def tol(dtype):
    """Two layers, an embedding and a head: float32 rounding adds up past 1e-5."""
    return {"atol": 1e-10, "rtol": 1e-8} if dtype == torch.float64 else {"atol": 1e-4, "rtol": 1e-4}


def tiny_lm(device="cpu", dtype=torch.float32, norm_first=True, activation="gelu", seed=0, **kwargs):
    """A small DecoderOnlyLM with random weights of size ~0.5 (so that a swapped bias or norm shows)."""
    torch.manual_seed(seed)
    model = DecoderOnlyLM(V, D_MODEL, HEADS, LAYERS, D_FF, max_len=MAX_LEN, norm_first=norm_first,
                          activation=activation, **kwargs)
    return randomize_(model).to(device, dtype)


def tokens(batch, length, device="cpu", seed=1):
    return torch.randint(V, (batch, length), generator=torch.Generator().manual_seed(seed)).to(device)


# ---------------------------------------------------------------------------------------
# DecoderOnlyLM against nn.TransformerEncoder
# ---------------------------------------------------------------------------------------


def lm_and_torch_encoder(norm_first, activation, device, dtype):
    """Our model, and nn.TransformerEncoder holding the same layer weights (a final norm only when pre-norm)."""
    ours = DecoderOnlyLM(V, D_MODEL, HEADS, LAYERS, D_FF, max_len=MAX_LEN, norm_first=norm_first,
                         activation=activation)
    theirs = randomize_(torch_encoder(LAYERS, D_MODEL, HEADS, D_FF, norm_first, activation))
    missing, unexpected = ours.load_state_dict(to_course_names(theirs.state_dict()), strict=False)
    assert not unexpected and set(missing) == OWN, (missing, unexpected)
    randomize_(ours.tok_embed)  # the tied head gets the same random matrix
    randomize_(ours.pos_embed)
    return ours.to(device, dtype), theirs.to(device, dtype)


@NORMS
@ACTIVATIONS
@pytest.mark.parametrize("padded", [False, True], ids=["no_padding", "key_padding"])
def test_decoder_only_lm_matches_torch_encoder(norm_first, activation, padded, device, dtype):
    ours, theirs = lm_and_torch_encoder(norm_first, activation, device, dtype)
    ids = tokens(BATCH, 7, device)
    kpm = (torch.arange(7) >= torch.tensor([7, 4, 6])[:, None]).to(device) if padded else None  # trailing padding

    logits = ours(ids, key_padding_mask=kpm)
    x = ours.pos_embed(ours.tok_embed(ids))  # the same embeddings, then torch's stack, then the same head
    hidden = theirs(x, mask=causal_mask(7, device=device), src_key_padding_mask=kpm)
    expected = ours.lm_head(hidden)
    assert logits.shape == (BATCH, 7, V) and logits.dtype == dtype and logits.device.type == device.type
    assert_close(logits, expected, **tol(dtype))

    # Gradients of every parameter: ours against torch's stack plus our (shared) embeddings and head.
    upstream = torch.randn_like(logits)
    our_params = dict(ours.named_parameters())
    their_params = dict(theirs.named_parameters())
    own = [name for name in our_params if name in OWN]
    our_grads = dict(zip(our_params, torch.autograd.grad(logits, list(our_params.values()), upstream)))
    their_grads = torch.autograd.grad(expected, [*(our_params[n] for n in own), *their_params.values()], upstream)
    expected_grads = dict(zip(own, their_grads[: len(own)]))
    expected_grads.update(to_course_names(dict(zip(their_params, their_grads[len(own):]))))
    assert our_grads.keys() == expected_grads.keys()
    for name, grad in our_grads.items():
        assert_close(grad, expected_grads[name], **tol(dtype), msg=lambda m, name=name: f"gradient of {name}: {m}")


def test_decoder_only_lm_is_causal():
    model = tiny_lm().eval()
    ids = tokens(2, 9)
    changed = ids.clone()
    changed[:, 5] = (ids[:, 5] + 1) % V
    with torch.no_grad():
        a, b = model(ids), model(changed)
    assert torch.equal(a[:, :5], b[:, :5]), "a position must not see the tokens after it"
    assert not torch.allclose(a[:, 5:], b[:, 5:])


def test_decoder_only_lm_modules_and_final_norm():
    pre = DecoderOnlyLM(V, D_MODEL, HEADS, LAYERS, D_FF, max_len=MAX_LEN)
    assert isinstance(pre.norm, nn.LayerNorm) and len(pre.layers) == LAYERS and pre.max_len == MAX_LEN
    assert pre.lm_head.bias is None and pre.lm_head.weight.shape == (V, D_MODEL)
    assert pre.pos_embed.embedding.num_embeddings == MAX_LEN
    assert all(layer.norm_first for layer in pre.layers)
    post = DecoderOnlyLM(V, D_MODEL, HEADS, LAYERS, D_FF, max_len=MAX_LEN, norm_first=False)
    assert post.norm is None and not any(layer.norm_first for layer in post.layers)


def test_weight_tying_is_one_parameter():
    tied = DecoderOnlyLM(V, D_MODEL, HEADS, LAYERS, D_FF, max_len=MAX_LEN)
    assert tied.lm_head.weight is tied.tok_embed.embedding.weight
    untied = DecoderOnlyLM(V, D_MODEL, HEADS, LAYERS, D_FF, max_len=MAX_LEN, tie_weights=False)
    assert untied.lm_head.weight is not untied.tok_embed.embedding.weight
    count = lambda m: sum(p.numel() for p in m.parameters())
    assert count(untied) - count(tied) == V * D_MODEL, "a tied matrix is one parameter, counted once"

    # One tensor: a step through the head moves the embedding too.
    optimizer = torch.optim.SGD(tied.parameters(), lr=0.1)
    before = tied.tok_embed.embedding.weight.detach().clone()
    tied(tokens(2, 5)).sum().backward()
    optimizer.step()
    assert not torch.equal(tied.tok_embed.embedding.weight, before)
    assert torch.equal(tied.lm_head.weight, tied.tok_embed.embedding.weight)


def test_forward_rejects_sequences_past_max_len():
    model = tiny_lm()
    model(tokens(1, MAX_LEN))
    with pytest.raises(ValueError, match="max_len"):
        model(tokens(1, MAX_LEN + 1))


def test_initialisation_gives_near_uniform_predictions():
    torch.manual_seed(0)
    model = DecoderOnlyLM(V, 32, 4, 2, 64, max_len=MAX_LEN).eval()
    with torch.no_grad():
        loss = F.cross_entropy(model(tokens(4, 12)).flatten(0, 1), tokens(4, 12, seed=2).flatten())
    assert abs(loss.item() - math.log(V)) < 0.1, "small initial weights: the first loss is about ln V"


# ---------------------------------------------------------------------------------------
# The KV cache
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("chunks", [(7,), (1,) * 7, (3, 1, 2, 1), (2, 5)], ids=["all", "one_by_one", "3121", "25"])
def test_cached_self_attention_equals_full_causal_attention(chunks, device, dtype):
    attn = randomize_(MultiHeadAttention(D_MODEL, HEADS)).to(device, dtype)
    x = torch.randn(BATCH, sum(chunks), D_MODEL, dtype=torch.float64).to(device, dtype)
    T = x.size(1)
    full, _ = attn(x, x, x, attn_mask=causal_mask(T, device=device))  # (B, T, C)

    key = value = None
    start, outs = 0, []
    for n in chunks:
        out, key, value = cached_self_attention(attn, x[:, start:start + n], key, value)
        start += n
        assert out.shape == (BATCH, n, D_MODEL)
        assert key.shape == value.shape == (BATCH, HEADS, start, D_MODEL // HEADS)
        outs.append(out)
        assert_close(out, full[:, start - n:start], **tol(dtype))  # row for row, as each chunk arrives
    assert_close(torch.cat(outs, dim=1), full, **tol(dtype))
    assert_close(key, split_heads(attn.k_proj(x), HEADS), **tol(dtype))
    assert_close(value, split_heads(attn.v_proj(x), HEADS), **tol(dtype))


def test_cached_self_attention_equals_torch_multihead_attention():
    theirs = randomize_(nn.MultiheadAttention(D_MODEL, HEADS, batch_first=True))
    ours = MultiHeadAttention(D_MODEL, HEADS)
    copy_from_torch(ours, theirs)
    x = torch.randn(BATCH, 6, D_MODEL)
    expected, _ = theirs(x, x, x, attn_mask=causal_mask(6))
    out, key, value = cached_self_attention(ours, x[:, :4])
    out2, _, _ = cached_self_attention(ours, x[:, 4:], key, value)
    assert_close(torch.cat([out, out2], dim=1), expected, atol=1e-5, rtol=1e-4)


@NORMS
@pytest.mark.parametrize("chunks", [(MAX_LEN,), (5, 1, 1, 4, 5), (1,) * MAX_LEN], ids=["whole", "mixed", "one_by_one"])
def test_forward_cached_over_chunks_equals_forward(norm_first, chunks, device, dtype):
    model = tiny_lm(device, dtype, norm_first=norm_first).eval()
    ids = tokens(BATCH, MAX_LEN, device)
    with torch.no_grad():
        expected = model(ids)  # (B, T, V)
        cache, start = [None] * LAYERS, 0
        for n in chunks:
            logits = model.forward_cached(ids[:, start:start + n], cache)  # positions start .. start + n - 1
            start += n
            assert logits.shape == (BATCH, n, V)
            assert all(k.shape == v.shape == (BATCH, HEADS, start, D_MODEL // HEADS) for k, v in cache)
            assert_close(logits, expected[:, start - n:start], **tol(dtype))
        with pytest.raises(ValueError, match="max_len"):
            model.forward_cached(ids[:, :1], cache)  # position MAX_LEN has no embedding


# ---------------------------------------------------------------------------------------
# next_token_probs
# ---------------------------------------------------------------------------------------


def logits_of(probs):
    """Logits whose softmax is ``probs``, (1, V)."""
    return torch.tensor(probs, dtype=torch.float64).log()[None]


def test_temperature_divides_logits_before_softmax(dtype):
    logits = torch.randn(4, V, dtype=torch.float64).to(dtype)
    for t in (0.5, 1.0, 2.0):
        probs = next_token_probs(logits, temperature=t)
        assert probs.shape == (4, V) and probs.dtype == dtype
        assert_close(probs, torch.softmax(logits / t, dim=-1), **tol(dtype))
    # Low temperatures approach the argmax, high ones the uniform distribution.
    assert_close(next_token_probs(logits, 1e-3), F.one_hot(logits.argmax(-1), V).to(dtype), atol=1e-6, rtol=0)
    assert_close(next_token_probs(logits, 1e4), torch.full_like(logits, 1 / V), atol=1e-3, rtol=0)


@pytest.mark.parametrize("temperature", [0, 0.0, -1.0])
def test_temperature_must_be_positive(temperature):
    with pytest.raises(ValueError):
        next_token_probs(torch.zeros(1, V), temperature=temperature)


def test_top_k_keeps_the_k_largest_logits():
    logits = torch.randn(5, V)
    for k in (1, 3, V):
        probs = next_token_probs(logits, top_k=k)
        kept = probs > 0
        assert (kept.sum(-1) == k).all()
        assert torch.equal(kept, torch.zeros_like(kept).scatter(-1, logits.topk(k).indices, True))
        expected = torch.softmax(logits.masked_fill(~kept, float("-inf")), dim=-1)
        assert_close(probs, expected)
    assert torch.equal(next_token_probs(logits, top_k=1), F.one_hot(logits.argmax(-1), V).float())
    assert_close(next_token_probs(logits, top_k=V + 5), torch.softmax(logits, dim=-1))  # k past V keeps all


def test_top_k_breaks_ties_as_torch_topk():
    logits = torch.tensor([[1.0, 3.0, 2.0, 3.0, 2.0, 2.0, 0.0]])
    for k in range(1, 7):
        kept = next_token_probs(logits, top_k=k) > 0
        assert kept.sum() == k
        assert torch.equal(kept[0].nonzero().flatten().sort().values, logits.topk(k).indices[0].sort().values)


@pytest.mark.parametrize("top_p, kept", [
    (0.4, [0]),  # the most likely token alone crosses 0.4
    (0.7, [0, 1]),  # 0.5 falls short, 0.5 + 0.3 crosses: the crossing token stays
    (0.9, [0, 1, 2]),
    (0.99, [0, 1, 2, 3]),
    (1.0, [0, 1, 2, 3]),
    (0.01, [0]),
    (0.0, [0]),  # always at least the most likely token
])
def test_top_p_keeps_the_smallest_set_that_reaches_p(top_p, kept):
    probs = [0.5, 0.3, 0.15, 0.05]
    got = next_token_probs(logits_of(probs), top_p=top_p)[0]
    expected = torch.zeros(4, dtype=torch.float64)
    expected[kept] = torch.tensor(probs, dtype=torch.float64)[kept]
    assert_close(got, expected / expected.sum())


@pytest.mark.parametrize("options", [{"top_k": -1}, {"top_k": -2, "top_p": 0.5}])
def test_a_negative_top_k_raises(options):
    with pytest.raises(ValueError, match="top_k"):
        next_token_probs(torch.zeros(1, V), **options)


def test_top_k_0_and_top_p_1_filter_nothing_as_in_hugging_face():
    logits = torch.randn(3, V, generator=torch.Generator().manual_seed(5)) * 3
    everything = torch.softmax(logits, dim=-1)
    for options in ({"top_k": 0}, {"top_p": 1.0}, {"top_p": 1.5}, {"top_k": 0, "top_p": 1.0}, {"top_k": None, "top_p": None}):
        assert_close(next_token_probs(logits, **options), everything)
    assert_close(next_token_probs(logits, top_k=0, top_p=0.6), next_token_probs(logits, top_p=0.6))


def test_top_p_works_on_each_row_in_its_own_vocabulary_order():
    logits = torch.stack([logits_of([0.05, 0.15, 0.3, 0.5])[0], logits_of([0.3, 0.05, 0.5, 0.15])[0]])
    got = next_token_probs(logits, top_p=0.7)
    assert_close(got, torch.tensor([[0, 0, 0.375, 0.625], [0.375, 0, 0.625, 0]], dtype=torch.float64))


def test_top_k_comes_before_top_p_and_temperature_before_both():
    logits = logits_of([0.4, 0.3, 0.2, 0.1])
    # top_k=2 renormalises to (4/7, 3/7): top_p=0.5 is then crossed by the first token alone.
    assert_close(next_token_probs(logits, top_k=2, top_p=0.5), torch.tensor([[1.0, 0, 0, 0]], dtype=torch.float64))
    # Without top_k, 0.4 falls short of 0.5 and the second token stays.
    assert_close(next_token_probs(logits, top_p=0.5), torch.tensor([[4 / 7, 3 / 7, 0, 0]], dtype=torch.float64))
    # A high temperature flattens the distribution first, so top_p needs more tokens: at 1, 0.6 alone
    # crosses 0.5; at 10 the probabilities are near 0.25 each and two tokens are needed.
    peaked = logits_of([0.6, 0.2, 0.1, 0.1])
    assert (next_token_probs(peaked, top_p=0.5) > 0).sum() == 1
    flat = torch.softmax(peaked / 10, dim=-1)
    expected = torch.cat([flat[:, :2], torch.zeros(1, 2, dtype=torch.float64)], dim=1)
    assert_close(next_token_probs(peaked, temperature=10, top_p=0.5), expected / expected.sum())


def naive_probs(logits, temperature, top_k, top_p):
    """next_token_probs written with Python lists, one row at a time, from the definition."""
    out = []
    for row in (logits / temperature).tolist():
        order = sorted(range(len(row)), key=lambda i: -row[i])  # ties: the lower index first (ties avoided below)
        kept = order[:top_k] if top_k is not None else order
        z = sum(math.exp(row[i]) for i in kept)
        p = {i: math.exp(row[i]) / z for i in kept}
        if top_p is not None:
            chosen, total = [], 0.0
            for i in kept:
                chosen.append(i)
                total += p[i]
                if total >= top_p:
                    break
            kept = chosen
        z = sum(p[i] for i in kept)
        out.append([p[i] / z if i in kept else 0.0 for i in range(len(row))])
    return torch.tensor(out, dtype=torch.float64)


@pytest.mark.parametrize("temperature, top_k, top_p", [
    (1.0, None, None), (0.7, 5, None), (1.3, None, 0.8), (0.9, 6, 0.6), (1.0, 3, 0.95), (2.0, None, 0.3),
])
def test_next_token_probs_matches_the_definition(temperature, top_k, top_p, dtype):
    logits = torch.randn(6, V, dtype=torch.float64)  # distinct values: no ties
    probs = next_token_probs(logits.to(dtype), temperature, top_k, top_p)
    assert probs.dtype == dtype
    assert_close(probs.double(), naive_probs(logits, temperature, top_k, top_p), **tol(dtype))
    assert_close(probs.sum(-1), torch.ones(6, dtype=dtype), **tol(dtype))
    assert (probs >= 0).all()


def test_next_token_probs_follows_the_device(device):
    logits = torch.randn(2, V, device=device)
    probs = next_token_probs(logits, 0.8, 4, 0.9)
    assert probs.device == logits.device
    assert_close(probs.cpu(), next_token_probs(logits.cpu(), 0.8, 4, 0.9))


# ---------------------------------------------------------------------------------------
# generate
# ---------------------------------------------------------------------------------------


def naive_generate(model, prompt, n, temperature, top_k, top_p, generator):
    """Sampling the slow, obvious way: the whole window through the model for every token."""
    model.eval()
    ids = prompt
    with torch.no_grad():
        for _ in range(n):
            probs = next_token_probs(model(ids[:, -model.max_len:])[:, -1], temperature, top_k, top_p)
            ids = torch.cat([ids, torch.multinomial(probs, 1, generator=generator)], dim=1)
    return ids


@pytest.mark.parametrize("temperature, top_k, top_p", [(1.0, None, None), (0.8, 5, None), (1.2, None, 0.9),
                                                       (0.7, 4, 0.8)])
@NORMS
def test_generate_with_cache_gives_the_tokens_of_without(temperature, top_k, top_p, norm_first, device, dtype):
    model = tiny_lm(device, dtype, norm_first=norm_first)
    prompt = tokens(BATCH, 3, device)
    runs = {}
    for use_cache in (True, False):
        generator = torch.Generator(device=device).manual_seed(7)
        runs[use_cache] = generate(model, prompt, MAX_LEN - 3, temperature, top_k, top_p, generator, use_cache)
    assert runs[True].shape == (BATCH, MAX_LEN) and runs[True].dtype == torch.long
    assert torch.equal(runs[True], runs[False])
    assert torch.equal(runs[True][:, :3], prompt)
    generator = torch.Generator(device=device).manual_seed(7)
    assert torch.equal(runs[True], naive_generate(model, prompt, MAX_LEN - 3, temperature, top_k, top_p, generator))


def test_generate_samples_with_the_generator():
    model = tiny_lm()
    prompt = tokens(2, 2)
    one = generate(model, prompt, 10, generator=torch.Generator().manual_seed(3))
    assert torch.equal(one, generate(model, prompt, 10, generator=torch.Generator().manual_seed(3)))
    assert not torch.equal(one, generate(model, prompt, 10, generator=torch.Generator().manual_seed(4)))
    greedy = generate(model, prompt, 10, top_k=1)  # top_k=1 is greedy decoding, whatever the generator
    assert torch.equal(greedy, generate(model, prompt, 10, top_k=1, generator=torch.Generator().manual_seed(9)))


def test_generate_past_max_len_slides_without_cache_and_refuses_with_one():
    model = tiny_lm()
    prompt = tokens(2, MAX_LEN - 2)
    long = generate(model, prompt, 6, use_cache=False, generator=torch.Generator().manual_seed(0))
    assert long.shape == (2, MAX_LEN + 4)
    assert torch.equal(long, naive_generate(model, prompt, 6, 1.0, None, None, torch.Generator().manual_seed(0)))

    calls = []
    model.lm_head.register_forward_hook(lambda *args: calls.append(1))
    generator = torch.Generator().manual_seed(0)
    state = generator.get_state()
    with pytest.raises(ValueError, match="max_len"):
        generate(model, prompt, 3, generator=generator, use_cache=True)
    assert not calls, "the ValueError must come before any token is generated"
    assert torch.equal(generator.get_state(), state)
    assert generate(model, prompt, 2, use_cache=True).shape == (2, MAX_LEN)  # exactly max_len fits


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("use_cache", [True, False], ids=["cache", "no_cache"])
def test_generate_runs_in_eval_mode_without_gradients_and_restores_the_mode(training, use_cache):
    model = tiny_lm(dropout=0.5)
    prompt = tokens(2, 3)
    expected = naive_generate(model, prompt, 6, 1.0, None, None, torch.Generator().manual_seed(1))  # eval: no dropout
    model.train(training)
    grad_enabled, modes = [], []
    model.lm_head.register_forward_hook(lambda module, args, out: grad_enabled.append(out.requires_grad))
    model.layers[0].dropout.register_forward_hook(lambda module, args, out: modes.append(module.training))
    out = generate(model, prompt, 6, generator=torch.Generator().manual_seed(1), use_cache=use_cache)
    assert all(m.training == training for m in model.modules())
    assert grad_enabled and not any(grad_enabled) and not out.requires_grad
    assert modes and not any(modes), "generate must run the model in eval mode"
    assert torch.equal(out, expected), "generate must run in eval mode (no dropout)"


def test_generate_restores_the_mode_after_an_error():
    model = tiny_lm().train()
    with pytest.raises(ValueError):
        generate(model, tokens(1, 3), 2, temperature=0.0, use_cache=False)
    assert model.training


# ---------------------------------------------------------------------------------------
# make_lm_examples and perplexity
# ---------------------------------------------------------------------------------------


def test_make_lm_examples_cuts_non_overlapping_shifted_windows():
    x, y = make_lm_examples(torch.arange(11), 3)  # (11 - 1) // 3 = 3 windows; token 10 is only a target
    assert torch.equal(x, torch.tensor([[0, 1, 2], [3, 4, 5], [6, 7, 8]]))
    assert torch.equal(y, torch.tensor([[1, 2, 3], [4, 5, 6], [7, 8, 9]]))
    for N, bs in ((4, 3), (10, 3), (12, 3), (100, 7), (65, 64)):
        ids = torch.randint(50, (N,))
        x, y = make_lm_examples(ids, bs)
        n = (N - 1) // bs
        assert x.shape == y.shape == (n, bs) and x.dtype == y.dtype == ids.dtype
        assert torch.equal(x.flatten(), ids[: n * bs]) and torch.equal(y.flatten(), ids[1 : n * bs + 1])


@pytest.mark.parametrize("N, bs", [(3, 3), (0, 1), (64, 64)])
def test_make_lm_examples_needs_block_size_plus_one_tokens(N, bs):
    with pytest.raises(ValueError):
        make_lm_examples(torch.zeros(N, dtype=torch.long), bs)


def test_perplexity_is_exp_of_the_mean_cross_entropy(dtype):
    model = tiny_lm(dtype=dtype).eval()
    ids = tokens(1, 200)[0]
    x, y = make_lm_examples(ids, 8)
    with torch.no_grad():
        mean = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
    for batch_size in (1, 7, 64):
        got = perplexity(model, ids, 8, batch_size=batch_size)
        assert isinstance(got, float)
        assert got == pytest.approx(math.exp(mean.item()), rel=1e-5)


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_perplexity_runs_in_eval_mode_and_restores_the_mode(training):
    model = tiny_lm(dropout=0.5)
    ids = tokens(1, 100)[0]
    expected = perplexity(model.eval(), ids, 8)
    model.train(training)
    assert perplexity(model, ids, 8) == expected, "perplexity must switch dropout off (eval mode)"
    assert all(m.training == training for m in model.modules())


def test_perplexity_of_an_untrained_model_is_about_the_vocabulary():
    torch.manual_seed(0)
    model = DecoderOnlyLM(V, 32, 4, 2, 64, max_len=MAX_LEN)
    assert perplexity(model, tokens(1, 500)[0], MAX_LEN) == pytest.approx(V, rel=0.1)


# ---------------------------------------------------------------------------------------
# CharTokenizer (given to the student)
# ---------------------------------------------------------------------------------------


def test_char_tokenizer_round_trip_and_vocabulary():
    tokenizer = CharTokenizer("to be, or not to be")
    assert tokenizer.itos == sorted(set("to be, or not to be")) and tokenizer.vocab_size == 8
    assert all(tokenizer.stoi[ch] == i for i, ch in enumerate(tokenizer.itos))
    ids = tokenizer.encode("not to be")
    assert ids.dtype == torch.long and ids.shape == (9,)
    assert tokenizer.decode(ids) == "not to be" and tokenizer.decode(ids.tolist()) == "not to be"
    with pytest.raises(ValueError, match="'x'"):
        tokenizer.encode("to bex")


# ---------------------------------------------------------------------------------------
# The training loop (given to the student): validation estimates and progress as text
# ---------------------------------------------------------------------------------------


def test_training_estimates_the_loss_on_both_splits_and_prints_text_lines(capsys):
    from lesson_tools import language_data

    config = language_data.TrainConfig(steps=12, batch_size=4, block_size=8, warmup=2, eval_every=5, eval_windows=6)
    train_ids, val_ids = tokens(1, 300)[0], tokens(1, 200)[0]

    def run(**kwargs):
        torch.manual_seed(0)
        model = DecoderOnlyLM(V, 16, 2, 1, 32, max_len=8)
        return model, language_data.train(model, train_ids, config, seed=3, **kwargs)

    model, with_estimates = run(val_ids=val_ids)
    lines = capsys.readouterr().out.strip().split("\n")
    assert [step for step, _, _ in with_estimates.estimates] == [5, 10, 12], "every eval_every steps, and at the end"
    assert len(lines) == 3 and lines[0].startswith("step  5/12: ") and "validation text" in lines[0], lines
    assert "\r" not in "".join(lines), "plain lines, which a saved notebook shows as they were"
    assert model.training, "the model is left in training mode"
    generator = torch.Generator().manual_seed(4)  # seed + 1: the training split's windows first, then the validation's
    fixed = [language_data.random_batch(split, 8, 6, generator) for split in (train_ids, val_ids)]
    assert with_estimates.estimates[-1][1:] == pytest.approx(tuple(language_data.estimate_loss(model, w) for w in fixed))
    _, without = run(progress=False)
    assert capsys.readouterr().out == "" and without.estimates == []
    assert without.losses == with_estimates.losses, "estimates do not change the training batches"
