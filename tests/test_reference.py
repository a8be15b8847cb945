"""The reference implementation (autograder/reference) is equal to PyTorch's own.

Every exercise of CURRICULUM.md is compared with its torch.nn / torch.nn.functional
counterpart, weights copied across, in float32 and float64, on the CPU and (where there
is one) on a CUDA device: outputs, attention weights and gradients. Where PyTorch has no
counterpart (positional encodings, the learning-rate schedule, greedy decoding) the
reference is compared with the formula or with a naive, independent computation.
"""

import math
from contextlib import contextmanager

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.testing import assert_close

from autograder.reference import (
    Decoder,
    DecoderLayer,
    Encoder,
    EncoderLayer,
    LearnedPositionalEmbedding,
    MultiHeadAttention,
    PositionalEncoding,
    PositionwiseFeedForward,
    SelfAttention,
    TokenEmbedding,
    Transformer,
    causal_mask,
    count_parameters,
    greedy_decode,
    merge_heads,
    noam_lr,
    padding_mask,
    relative_position_matrix,
    scaled_dot_product_attention,
    sinusoidal_positional_encoding,
    split_heads,
)
from tests.torch_nn_weights import (
    copy_from_torch,
    copy_transformer_from_torch,
    randomize_,
    to_course_names,
    torch_decoder,
    torch_decoder_layer,
    torch_encoder,
    torch_encoder_layer,
    torch_transformer,
)

# Small sizes keep the whole file fast; two heads so that head order matters.
D_MODEL, HEADS, D_FF, BATCH = 8, 2, 16, 2


# ---------------------------------------------------------------------------------------
# Fixtures and helpers
# ---------------------------------------------------------------------------------------


from tests.reference_fixtures import _math_attention, _seed, device, dtype  # noqa: E402,F401  (fixtures)


def tol(dtype, stack=False):
    """Tolerances for assert_close.

    A float32 result is off by a few units in the last place per operation; through a
    stack of layers (and its backward pass) those add up past 1e-5, hence ``stack``.
    """
    if dtype == torch.float64:
        return {"atol": 1e-10, "rtol": 1e-8}
    return {"atol": 1e-4 if stack else 1e-5, "rtol": 1e-4}


def rand(*shape, device, dtype, requires_grad=False):
    """Standard normal noise, drawn on the CPU so that every device sees the same numbers."""
    return torch.randn(shape, dtype=torch.float64).to(device=device, dtype=dtype).requires_grad_(requires_grad)


def blocked_mask(shape, keep_below=None):
    """A random boolean mask, True = blocked, in which every row keeps at least one of its
    first ``keep_below`` keys (so that no row is fully blocked, also with key padding after them)."""
    blocked = torch.rand(shape) < 0.5
    keep = torch.randint(keep_below or shape[-1], (*shape[:-1], 1))
    return blocked.scatter(-1, keep, False)


def additive(blocked, dtype):
    """A float mask that blocks where ``blocked`` is True (-inf) and adds a random bias elsewhere."""
    bias = torch.randn(blocked.shape, dtype=torch.float64)
    return bias.masked_fill(blocked, float("-inf")).to(dtype)


def as_float(mask, dtype):
    """The float (additive) equivalent of a boolean mask; a float mask stays as it is."""
    if mask is None or mask.dtype != torch.bool:
        return mask
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(mask, float("-inf"))


def trailing_padding(lengths, total):
    """(B, total) key padding mask, True after each row's length."""
    return torch.arange(total) >= torch.tensor(lengths)[:, None]


def torch_sdpa(query, key, value, attn_mask=None):
    """F.scaled_dot_product_attention with OUR mask convention (True = blocked).

    F's boolean mask means the opposite (True = take part), hence ``~``. (It runs on the
    math backend: see ``_math_attention``.)
    """
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        attn_mask = ~attn_mask
    return F.scaled_dot_product_attention(query, key, value, attn_mask=attn_mask)


def assert_same_backward(ours, theirs, out, expected, inputs, **tolerance):
    """Equal gradients w.r.t. the shared inputs and every parameter (torch's under our names)."""
    upstream = torch.randn_like(out)
    our_params = dict(ours.named_parameters())
    their_params = dict(theirs.named_parameters())
    our_grads = torch.autograd.grad(out, [*inputs, *our_params.values()], upstream, retain_graph=True)
    their_grads = torch.autograd.grad(expected, [*inputs, *their_params.values()], upstream, retain_graph=True)
    n = len(inputs)
    for i, (a, b) in enumerate(zip(our_grads[:n], their_grads[:n])):
        assert_close(a, b, **tolerance, msg=lambda m, i=i: f"gradient of input {i}: {m}")
    our_named = dict(zip(our_params, our_grads[n:]))
    their_named = to_course_names(dict(zip(their_params, their_grads[n:])))
    assert our_named.keys() == their_named.keys()
    for name, grad in our_named.items():
        assert_close(grad, their_named[name], **tolerance, msg=lambda m, name=name: f"gradient of {name}: {m}")


@contextmanager
def default_dtype(dtype):
    """The functions without a dtype argument build tensors of the default dtype."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


# ---------------------------------------------------------------------------------------
# 01: scaled dot-product attention and single-head self-attention
# ---------------------------------------------------------------------------------------

# name: (query shape, key shape, value shape, mask kind, mask shape)
SDPA_CASES = {
    "no_mask": ((2, 5, 4), (2, 5, 4), (2, 5, 4), None, None),
    "bool_mask": ((2, 5, 4), (2, 5, 4), (2, 5, 4), "bool", (2, 5, 5)),
    "float_mask": ((2, 5, 4), (2, 5, 4), (2, 5, 4), "float", (2, 5, 5)),
    "L_ne_S": ((2, 3, 4), (2, 6, 4), (2, 6, 4), "bool", (2, 3, 6)),
    "broadcast_bool_mask": ((2, 2, 4, 4), (2, 2, 6, 4), (2, 2, 6, 4), "bool", (2, 1, 1, 6)),
    "broadcast_float_mask": ((2, 2, 4, 4), (2, 2, 6, 4), (2, 2, 6, 4), "float", (4, 6)),
    "extra_batch_dims": ((2, 3, 2, 4, 4), (2, 3, 2, 6, 4), (2, 3, 2, 6, 4), "bool", (3, 1, 4, 6)),
    "value_dim_ne_key_dim": ((2, 4, 4), (2, 6, 4), (2, 6, 7), "float", (2, 4, 6)),
}


@pytest.mark.parametrize("case", SDPA_CASES)
def test_sdpa_matches_torch(case, device, dtype):
    q_shape, k_shape, v_shape, mask_kind, mask_shape = SDPA_CASES[case]
    q, k, v = (rand(*s, device=device, dtype=dtype, requires_grad=True) for s in (q_shape, k_shape, v_shape))
    mask = None
    if mask_kind is not None:
        blocked = blocked_mask(mask_shape)
        mask = (blocked if mask_kind == "bool" else additive(blocked, dtype)).to(device)

    out, weights = scaled_dot_product_attention(q, k, v, mask)
    expected = torch_sdpa(q, k, v, mask)
    assert out.shape == expected.shape
    assert_close(out, expected, **tol(dtype))

    # F does not return the weights: compare them with the formula written out.
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores + as_float(mask, dtype)
    assert_close(weights, torch.softmax(scores, dim=-1), **tol(dtype))

    upstream = torch.randn_like(out)
    ours = torch.autograd.grad(out, (q, k, v), upstream)
    theirs = torch.autograd.grad(expected, (q, k, v), upstream)
    for name, a, b in zip("qkv", ours, theirs):
        assert_close(a, b, **tol(dtype), msg=lambda m, name=name: f"gradient of {name}: {m}")


@pytest.mark.parametrize("mask_kind", ["bool", "float"])
def test_sdpa_fully_blocked_row_gives_zeros(mask_kind, device, dtype):
    q = rand(2, 4, 4, device=device, dtype=dtype, requires_grad=True)
    k = rand(2, 5, 4, device=device, dtype=dtype, requires_grad=True)
    v = rand(2, 5, 6, device=device, dtype=dtype, requires_grad=True)
    blocked = blocked_mask((2, 4, 5))
    blocked[:, 1] = True  # query 1 may attend to nothing, in both batch entries
    blocked[0, 3] = True  # and query 3 of the first entry neither
    mask = (blocked if mask_kind == "bool" else additive(blocked, dtype)).to(device)
    dead = blocked.all(-1).to(device)  # (2, 4)

    out, weights = scaled_dot_product_attention(q, k, v, mask)
    assert torch.equal(weights[dead], torch.zeros_like(weights[dead]))
    assert torch.equal(out[dead], torch.zeros_like(out[dead]))
    assert_close(weights[~dead].sum(-1), torch.ones_like(weights[~dead].sum(-1)), **tol(dtype))

    expected = torch_sdpa(q, k, v, mask)  # F gives zeros there too
    assert torch.equal(expected[dead], torch.zeros_like(expected[dead]))
    assert_close(out, expected, **tol(dtype))

    upstream = torch.randn_like(out)
    grads = torch.autograd.grad(out, (q, k, v), upstream)
    for name, grad in zip("qkv", grads):
        assert torch.isfinite(grad).all(), f"gradient of {name} is not finite"
    assert torch.equal(grads[0][dead], torch.zeros_like(grads[0][dead]))
    their_grads = torch.autograd.grad(expected, (q, k, v), upstream)
    for a, b in zip(grads, their_grads):
        assert_close(a, b, **tol(dtype))


@pytest.mark.parametrize("mask_kind", [None, "bool", "float"])
def test_self_attention_matches_single_head_torch(mask_kind, device, dtype):
    T = 5
    theirs = randomize_(nn.MultiheadAttention(D_MODEL, 1, batch_first=True)).to(device, dtype)
    ours = SelfAttention(D_MODEL).to(device, dtype)
    copy_from_torch(ours, theirs)
    x = rand(BATCH, T, D_MODEL, device=device, dtype=dtype, requires_grad=True)
    mask = None
    if mask_kind is not None:
        blocked = blocked_mask((T, T))
        mask = (blocked if mask_kind == "bool" else additive(blocked, dtype)).to(device)

    out, weights = ours(x, attn_mask=mask)
    expected, expected_weights = theirs(x, x, x, attn_mask=mask, need_weights=True)
    assert out.shape == (BATCH, T, D_MODEL) and weights.shape == (BATCH, T, T)
    assert_close(out, expected, **tol(dtype))
    assert_close(weights, expected_weights, **tol(dtype))
    assert_same_backward(ours, theirs, out, expected, [x], **tol(dtype))


# ---------------------------------------------------------------------------------------
# 02: multi-head attention
# ---------------------------------------------------------------------------------------

MHA_CASES = [
    "self",
    "cross",
    "key_padding",
    "bool_2d",
    "float_2d",
    "bool_3d",
    "float_3d",
    "bool_3d_non_contiguous",
    "bool_2d+key_padding",
    "float_2d+key_padding",
    "bool_3d+key_padding",
    "float_3d+key_padding",
]


def mha_inputs(case, device, dtype, L=4, S=6):
    """(query, key, value, leaves, our mask kwargs, torch's mask kwargs) for a MHA case.

    Every case but "self" is cross-attention with L != S, so a transposed mask cannot pass.
    Row 1's last two keys are padding; random masks keep one of the first S - 2 keys per row.
    """
    if case == "self":
        x = rand(BATCH, S, D_MODEL, device=device, dtype=dtype, requires_grad=True)
        return x, x, x, [x], {}, {}
    q, k, v = (rand(BATCH, n, D_MODEL, device=device, dtype=dtype, requires_grad=True) for n in (L, S, S))
    ours, theirs = {}, {}
    kind, _, padding = case.partition("+")
    if kind == "key_padding" or padding:
        kpm = trailing_padding([S, S - 2], S).to(device)
        ours["key_padding_mask"] = kpm
        theirs["key_padding_mask"] = kpm
    if kind not in ("cross", "key_padding"):
        shape = (L, S) if "2d" in kind else (BATCH * HEADS, L, S)
        blocked = blocked_mask(shape, keep_below=S - 2)
        mask = (blocked if kind.startswith("bool") else additive(blocked, dtype)).to(device)
        if kind.endswith("non_contiguous"):
            mask = mask.transpose(-2, -1).contiguous().transpose(-2, -1)
            assert not mask.is_contiguous()
        ours["attn_mask"] = mask
        theirs["attn_mask"] = mask
        if padding and mask.dtype != torch.bool:
            # torch warns about mixed mask types; give it the float padding mask we mean.
            theirs["key_padding_mask"] = as_float(theirs["key_padding_mask"], dtype)
    return q, k, v, [q, k, v], ours, theirs


def mha_pair(device, dtype, bias=True):
    theirs = randomize_(nn.MultiheadAttention(D_MODEL, HEADS, bias=bias, batch_first=True)).to(device, dtype)
    ours = MultiHeadAttention(D_MODEL, HEADS, bias=bias).to(device, dtype)
    copy_from_torch(ours, theirs)
    return ours, theirs


@pytest.mark.parametrize("case", MHA_CASES)
def test_multi_head_attention_matches_torch(case, device, dtype):
    ours, theirs = mha_pair(device, dtype)
    q, k, v, leaves, our_masks, their_masks = mha_inputs(case, device, dtype)

    out, weights = ours(q, k, v, **our_masks)
    expected, expected_weights = theirs(q, k, v, **their_masks, need_weights=True, average_attn_weights=False)
    assert out.shape == q.shape
    assert weights.shape == (BATCH, HEADS, q.size(1), k.size(1))
    assert_close(out, expected, **tol(dtype))
    assert_close(weights, expected_weights, **tol(dtype))
    assert_same_backward(ours, theirs, out, expected, leaves, **tol(dtype))

    # torch takes another code path (F.scaled_dot_product_attention) without weights.
    out, none = ours(q, k, v, **our_masks, need_weights=False)
    expected, _ = theirs(q, k, v, **their_masks, need_weights=False)
    assert none is None
    assert_close(out, expected, **tol(dtype))


@pytest.mark.parametrize("case", ["self", "bool_2d+key_padding"])
def test_multi_head_attention_without_bias_matches_torch(case, device, dtype):
    ours, theirs = mha_pair(device, dtype, bias=False)
    assert all(p.ndim == 2 for p in ours.parameters()), "bias=False must leave no bias"
    q, k, v, leaves, our_masks, their_masks = mha_inputs(case, device, dtype)
    out, weights = ours(q, k, v, **our_masks)
    expected, expected_weights = theirs(q, k, v, **their_masks, average_attn_weights=False)
    assert_close(out, expected, **tol(dtype))
    assert_close(weights, expected_weights, **tol(dtype))
    assert_same_backward(ours, theirs, out, expected, leaves, **tol(dtype))


def test_multi_head_attention_need_weights_false_returns_none(device, dtype):
    ours, _ = mha_pair(device, dtype)
    x = rand(BATCH, 5, D_MODEL, device=device, dtype=dtype)
    out, weights = ours(x, x, x, need_weights=False)
    assert weights is None
    assert_close(out, ours(x, x, x)[0], **tol(dtype))


def test_split_heads_gives_each_head_its_slice(device, dtype):
    x = rand(BATCH, 5, 12, device=device, dtype=dtype)
    for num_heads in (1, 2, 3, 4, 6, 12):
        size = 12 // num_heads
        heads = split_heads(x, num_heads)
        assert heads.shape == (BATCH, num_heads, 5, size)
        for h in range(num_heads):
            assert torch.equal(heads[:, h], x[..., h * size : (h + 1) * size])


def test_merge_heads_inverts_split_heads(device, dtype):
    x = rand(BATCH, 5, 12, device=device, dtype=dtype)
    for num_heads in (1, 2, 3, 4, 6, 12):
        assert torch.equal(merge_heads(split_heads(x, num_heads)), x)
        y = rand(BATCH, num_heads, 5, 12 // num_heads, device=device, dtype=dtype)
        assert torch.equal(split_heads(merge_heads(y), num_heads), y)


def test_heads_must_divide_d_model():
    with pytest.raises(ValueError):
        split_heads(torch.zeros(1, 2, 10), 3)
    with pytest.raises(ValueError):
        MultiHeadAttention(10, 3)


# ---------------------------------------------------------------------------------------
# 03: positional encoding and embeddings
# ---------------------------------------------------------------------------------------


def sinusoids_by_pow(max_len, d_model):
    """The paper's formula written with pow, in float64, independent of the reference."""
    position = torch.arange(max_len, dtype=torch.float64)[:, None]  # (max_len, 1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # (d_model/2,)
    angle = position / torch.pow(10000.0, two_i / d_model)  # (max_len, d_model/2)
    return torch.stack([torch.sin(angle), torch.cos(angle)], dim=-1).flatten(1)  # (max_len, d_model)


# float32: the contract's tolerance, over the range it names (d_model 512, pos up to 5000).
# float64: angles near pos = 5000 are only good to one ulp (9e-13), so stop at pos 1000.
@pytest.mark.parametrize(
    "dtype, max_len, atol", [(torch.float32, 5000, 1e-3), (torch.float64, 1000, 1e-12)], ids=["float32", "float64"]
)
def test_sinusoidal_positional_encoding_matches_formula(dtype, max_len, atol):
    with default_dtype(dtype):
        pe = sinusoidal_positional_encoding(max_len, 512)
    assert pe.shape == (max_len, 512) and pe.dtype == dtype
    assert_close(pe, sinusoids_by_pow(max_len, 512).to(dtype), atol=atol, rtol=0)


def test_odd_d_model_is_rejected():
    with pytest.raises(ValueError):
        sinusoidal_positional_encoding(10, 7)
    with pytest.raises(ValueError):
        PositionalEncoding(7)
    with pytest.raises(ValueError):
        relative_position_matrix(1, 7)


def test_positional_encoding_adds_pe(device, dtype):
    with default_dtype(dtype):  # the table is built in the default dtype
        module = PositionalEncoding(D_MODEL, max_len=10).to(device)
    assert "pe" in dict(module.named_buffers()) and not list(module.parameters())
    # Built in float32 and then moved to float64, the table keeps float32's precision (3e-8).
    moved = PositionalEncoding(D_MODEL, max_len=10).to(device, dtype)
    for T in (1, 7, 10):
        x = rand(BATCH, T, D_MODEL, device=device, dtype=dtype)
        expected = x + sinusoids_by_pow(10, D_MODEL)[:T].to(device, dtype)
        out = module(x)
        assert out.dtype == dtype and out.device == x.device
        assert_close(out, expected, **tol(dtype))
        assert_close(moved(x), expected, atol=1e-6, rtol=0)


def test_positional_encoding_rejects_long_sequences():
    module = PositionalEncoding(D_MODEL, max_len=10)
    with pytest.raises(ValueError, match="max_len"):
        module(torch.zeros(1, 11, D_MODEL))


def test_positional_encoding_drops_out_the_sum_where_pytorch_does(device):
    """Dropout comes after the addition, as nn.Dropout applied to x + pe (PyTorch's own tutorial module):
    off in eval mode, every value dropped at dropout=1.0, and the same entries kept under the same seed."""
    x = rand(BATCH, 6, D_MODEL, device=device, dtype=torch.float32)
    module = PositionalEncoding(D_MODEL, max_len=10, dropout=0.5).to(device)
    summed = x + module.pe[:6]  # (B, T, C)
    assert_close(module.eval()(x), summed, **tol(torch.float32))
    torch.manual_seed(7)
    dropped = module.train()(x)
    torch.manual_seed(7)
    assert_close(dropped, nn.Dropout(0.5).train()(summed), **tol(torch.float32))
    everything = PositionalEncoding(D_MODEL, max_len=10, dropout=1.0).to(device).train()
    assert torch.equal(everything(x), nn.Dropout(1.0).train()(summed))
    assert torch.equal(everything(x), torch.zeros_like(x))


def test_relative_position_matrix_moves_positions(dtype):
    with default_dtype(dtype):
        pe = sinusoidal_positional_encoding(200, 16)
        for k in (-37, -9, -1, 0, 1, 2, 5, 40):
            M = relative_position_matrix(k, 16)
            assert M.shape == (16, 16) and M.dtype == dtype
            pos = torch.arange(max(0, -k), 150)
            assert_close(pe[pos] @ M, pe[pos + k], **tol(dtype))
            assert_close(M @ M.T, torch.eye(16), **tol(dtype))  # a rotation: orthogonal
        assert_close(relative_position_matrix(0, 16), torch.eye(16), **tol(dtype))


def test_token_embedding_scales_by_sqrt_d_model(device, dtype):
    module = TokenEmbedding(11, D_MODEL).to(device, dtype)
    tokens = torch.randint(0, 11, (BATCH, 6), device=device)
    out = module(tokens)
    assert out.shape == (BATCH, 6, D_MODEL)
    assert_close(out, module.embedding.weight[tokens] * D_MODEL**0.5, **tol(dtype))


def test_learned_positional_embedding_adds_one_vector_per_position(device, dtype):
    module = LearnedPositionalEmbedding(10, D_MODEL).to(device, dtype)
    x = rand(BATCH, 6, D_MODEL, device=device, dtype=dtype)
    assert_close(module(x), x + module.embedding(torch.arange(6, device=device)), **tol(dtype))
    assert_close(module(x), x + module.embedding.weight[:6], **tol(dtype))


# ---------------------------------------------------------------------------------------
# 04: encoder
# ---------------------------------------------------------------------------------------

ACTIVATIONS = pytest.mark.parametrize("activation", ["relu", "gelu"])


@ACTIVATIONS
def test_feed_forward_matches_formula(activation, device, dtype):
    module = PositionwiseFeedForward(D_MODEL, D_FF, activation=activation).to(device, dtype)
    x = rand(BATCH, 5, D_MODEL, device=device, dtype=dtype)
    act = {"relu": F.relu, "gelu": F.gelu}[activation]  # torch.nn's exact (erf) gelu
    hidden = act(F.linear(x, module.linear1.weight, module.linear1.bias))
    assert_close(module(x), F.linear(hidden, module.linear2.weight, module.linear2.bias), **tol(dtype))


def test_feed_forward_rejects_unknown_activation():
    with pytest.raises(ValueError, match="activation"):
        PositionwiseFeedForward(D_MODEL, D_FF, activation="swish")


NORMS = pytest.mark.parametrize("norm_first", [False, True], ids=["post_norm", "pre_norm"])


@NORMS
@ACTIVATIONS
@pytest.mark.parametrize("with_attn_mask", [False, True], ids=["padding", "padding+attn_mask"])
def test_encoder_layer_matches_torch(norm_first, activation, with_attn_mask, device, dtype):
    T = 6
    theirs = randomize_(torch_encoder_layer(D_MODEL, HEADS, D_FF, norm_first, activation)).to(device, dtype)
    ours = EncoderLayer(D_MODEL, HEADS, D_FF, norm_first=norm_first, activation=activation).to(device, dtype)
    copy_from_torch(ours, theirs)
    x = rand(BATCH, T, D_MODEL, device=device, dtype=dtype, requires_grad=True)
    kpm = trailing_padding([T, T - 2], T).to(device)
    attn_mask = blocked_mask((T, T), keep_below=T - 2).to(device) if with_attn_mask else None

    out = ours(x, key_padding_mask=kpm, attn_mask=attn_mask)
    expected = theirs(x, src_mask=attn_mask, src_key_padding_mask=kpm)
    assert_close(out, expected, **tol(dtype))
    assert_same_backward(ours, theirs, out, expected, [x], **tol(dtype))


@NORMS
@ACTIVATIONS
def test_encoder_matches_torch(norm_first, activation, device, dtype):
    T = 6
    theirs = randomize_(torch_encoder(2, D_MODEL, HEADS, D_FF, norm_first, activation)).to(device, dtype)
    ours = Encoder(2, D_MODEL, HEADS, D_FF, norm_first=norm_first, activation=activation).to(device, dtype)
    assert (ours.norm is None) == (not norm_first)
    copy_from_torch(ours, theirs)
    x = rand(BATCH, T, D_MODEL, device=device, dtype=dtype, requires_grad=True)
    kpm = trailing_padding([T, T - 2], T).to(device)

    out = ours(x, key_padding_mask=kpm)
    expected = theirs(x, src_key_padding_mask=kpm)
    # Two layers: float32 rounding adds up past 1e-5.
    assert_close(out, expected, **tol(dtype, stack=True))
    assert_same_backward(ours, theirs, out, expected, [x], **tol(dtype, stack=True))


# ---------------------------------------------------------------------------------------
# 05: masks and decoder
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("T", [1, 2, 5, 7])
def test_causal_mask_matches_torch(T, device):
    mask = causal_mask(T, device=device)
    assert mask.dtype == torch.bool and mask.shape == (T, T)
    assert mask.device.type == device.type
    theirs = nn.Transformer.generate_square_subsequent_mask(T, device=device)  # -inf above the diagonal
    assert torch.equal(mask, torch.isneginf(theirs))
    assert torch.equal(theirs[~mask], torch.zeros_like(theirs[~mask]))
    assert causal_mask(T).device.type == "cpu"


def test_padding_mask(device):
    tokens = torch.tensor([[5, 6, 7, 0, 0], [3, 0, 4, 2, 2]], device=device)
    for pad_id in (0, 2):
        mask = padding_mask(tokens, pad_id)
        assert mask.dtype == torch.bool and mask.shape == tokens.shape and mask.device == tokens.device
        assert torch.equal(mask, torch.tensor([[t == pad_id for t in row] for row in tokens.tolist()], device=device))


def decoder_inputs(device, dtype, T=5, S=6):
    y = rand(BATCH, T, D_MODEL, device=device, dtype=dtype, requires_grad=True)
    memory = rand(BATCH, S, D_MODEL, device=device, dtype=dtype, requires_grad=True)
    tgt_kpm = trailing_padding([T, T - 2], T).to(device)
    memory_kpm = trailing_padding([S - 3, S], S).to(device)
    return y, memory, tgt_kpm, memory_kpm


@NORMS
@ACTIVATIONS
@pytest.mark.parametrize("mask_kind", ["bool", "float"])
def test_decoder_layer_matches_torch(norm_first, activation, mask_kind, device, dtype):
    theirs = randomize_(torch_decoder_layer(D_MODEL, HEADS, D_FF, norm_first, activation)).to(device, dtype)
    ours = DecoderLayer(D_MODEL, HEADS, D_FF, norm_first=norm_first, activation=activation).to(device, dtype)
    copy_from_torch(ours, theirs)
    y, memory, tgt_kpm, memory_kpm = decoder_inputs(device, dtype)
    T = y.size(1)
    if mask_kind == "bool":
        tgt_mask, their_tgt_kpm = causal_mask(T, device=device), tgt_kpm
    else:  # torch warns about mixed mask types: give it the float padding mask we mean
        tgt_mask = nn.Transformer.generate_square_subsequent_mask(T, device=device, dtype=dtype)
        their_tgt_kpm = as_float(tgt_kpm, dtype)

    out = ours(y, memory, tgt_mask=tgt_mask, tgt_key_padding_mask=tgt_kpm, memory_key_padding_mask=memory_kpm)
    expected = theirs(
        y, memory, tgt_mask=tgt_mask, tgt_key_padding_mask=their_tgt_kpm, memory_key_padding_mask=memory_kpm
    )
    assert_close(out, expected, **tol(dtype))
    assert_same_backward(ours, theirs, out, expected, [y, memory], **tol(dtype))


@NORMS
@ACTIVATIONS
def test_decoder_matches_torch(norm_first, activation, device, dtype):
    theirs = randomize_(torch_decoder(2, D_MODEL, HEADS, D_FF, norm_first, activation)).to(device, dtype)
    ours = Decoder(2, D_MODEL, HEADS, D_FF, norm_first=norm_first, activation=activation).to(device, dtype)
    assert (ours.norm is None) == (not norm_first)
    copy_from_torch(ours, theirs)
    y, memory, tgt_kpm, memory_kpm = decoder_inputs(device, dtype)
    tgt_mask = causal_mask(y.size(1), device=device)

    out = ours(y, memory, tgt_mask, tgt_kpm, memory_kpm)
    expected = theirs(y, memory, tgt_mask=tgt_mask, tgt_key_padding_mask=tgt_kpm, memory_key_padding_mask=memory_kpm)
    # Two layers: float32 rounding adds up past 1e-5.
    assert_close(out, expected, **tol(dtype, stack=True))
    assert_same_backward(ours, theirs, out, expected, [y, memory], **tol(dtype, stack=True))


# ---------------------------------------------------------------------------------------
# 06: the full model
# ---------------------------------------------------------------------------------------

SRC_VOCAB, TGT_VOCAB, PAD = 13, 11, 0


def token_batch(vocab, lengths, total, device):
    """Random non-pad tokens, padded with PAD after each row's length."""
    tokens = torch.randint(1, vocab, (len(lengths), total))
    return tokens.masked_fill(trailing_padding(lengths, total), PAD).to(device)


def transformer_pair(norm_first, activation, device, dtype):
    # Ours keeps its default dropout of 0.1 and is put in eval mode: that must switch it off.
    ours = Transformer(
        SRC_VOCAB, TGT_VOCAB, D_MODEL, HEADS, num_layers=2, d_ff=D_FF, max_len=16,
        norm_first=norm_first, pad_id=PAD, activation=activation,
    )
    theirs = randomize_(torch_transformer(D_MODEL, HEADS, 2, D_FF, norm_first, activation))
    copy_transformer_from_torch(ours, theirs)
    return ours.to(device, dtype).eval(), theirs.to(device, dtype).eval()


@NORMS
@ACTIVATIONS
def test_transformer_matches_torch(norm_first, activation, device, dtype):
    ours, theirs = transformer_pair(norm_first, activation, device, dtype)
    src = token_batch(SRC_VOCAB, [7, 4], 7, device)
    tgt = token_batch(TGT_VOCAB, [3, 6], 6, device)
    src_kpm, tgt_kpm = padding_mask(src, PAD), padding_mask(tgt, PAD)

    def torch_path(src_kpm=None, tgt_kpm=None):
        """nn.Transformer between our own embeddings and generator (the same modules)."""
        hidden = theirs(
            ours.pos_enc(ours.src_embed(src)),
            ours.pos_enc(ours.tgt_embed(tgt)),
            tgt_mask=causal_mask(tgt.size(1), device=device),
            src_key_padding_mask=src_kpm,
            tgt_key_padding_mask=tgt_kpm,
            memory_key_padding_mask=src_kpm,
        )
        return ours.generator(hidden)

    # Two layers of encoder and decoder: float32 rounding adds up past 1e-5.
    tolerance = tol(dtype, stack=True)
    logits = ours(src, tgt, src_key_padding_mask=src_kpm, tgt_key_padding_mask=tgt_kpm)
    expected = torch_path(src_kpm, tgt_kpm)
    assert logits.shape == (BATCH, tgt.size(1), TGT_VOCAB)
    assert_close(logits, expected, **tolerance)

    memory = ours.encode(src, src_kpm)
    assert_close(memory, theirs.encoder(ours.pos_enc(ours.src_embed(src)), src_key_padding_mask=src_kpm), **tolerance)

    # Masks are never inferred from the pad tokens: without masks, both attend to padding.
    unmasked = ours(src, tgt)
    assert_close(unmasked, torch_path(), **tolerance)
    assert not torch.allclose(unmasked, logits, **tolerance)

    # Gradients: every parameter of ours, against torch's path (which shares our embeddings
    # and generator, so their gradients come from the same tensors).
    upstream = torch.randn_like(logits)
    our_params = dict(ours.named_parameters())
    own = ["src_embed.embedding.weight", "tgt_embed.embedding.weight", "generator.weight", "generator.bias"]
    their_params = dict(theirs.named_parameters())
    our_grads = dict(zip(our_params, torch.autograd.grad(logits, list(our_params.values()), upstream)))
    their_grads = torch.autograd.grad(expected, [*(our_params[n] for n in own), *their_params.values()], upstream)
    expected_grads = dict(zip(own, their_grads[: len(own)]))
    expected_grads.update(to_course_names(dict(zip(their_params, their_grads[len(own) :]))))
    assert our_grads.keys() == expected_grads.keys()
    for name, grad in our_grads.items():
        assert_close(grad, expected_grads[name], **tolerance, msg=lambda m, name=name: f"gradient of {name}: {m}")


@NORMS
def test_transformer_drops_out_where_torch_does(norm_first, device, dtype):
    """With dropout=1.0 in training mode every value dropout acts on is zero, so the logits show where it
    is applied. Ours must equal nn.Transformer's layers, every dropout of theirs at 1.0, between our
    embeddings and generator, with dropout applied to each embedding-plus-positions sum (as in PyTorch's
    tutorial): nowhere else. (With a rate of 0.5, eval mode switches it all off: test_transformer_matches_torch.)"""
    ours = Transformer(SRC_VOCAB, TGT_VOCAB, D_MODEL, HEADS, num_layers=2, d_ff=D_FF, max_len=16,
                       norm_first=norm_first, pad_id=PAD, dropout=1.0)
    theirs = randomize_(torch_transformer(D_MODEL, HEADS, 2, D_FF, norm_first))
    copy_transformer_from_torch(ours, theirs)
    for module in theirs.modules():
        if isinstance(module, nn.Dropout):
            module.p = 1.0
        if isinstance(module, nn.MultiheadAttention):
            module.dropout = 1.0
    ours, theirs = ours.to(device, dtype).train(), theirs.to(device, dtype).train()
    src = token_batch(SRC_VOCAB, [7, 4], 7, device)
    tgt = token_batch(TGT_VOCAB, [3, 6], 6, device)
    src_kpm, tgt_kpm = padding_mask(src, PAD), padding_mask(tgt, PAD)

    def embedded(embed, tokens):
        return F.dropout(embed(tokens) + ours.pos_enc.pe[: tokens.size(1)], p=1.0, training=True)  # (B, T, C)

    logits = ours(src, tgt, src_key_padding_mask=src_kpm, tgt_key_padding_mask=tgt_kpm)
    hidden = theirs(embedded(ours.src_embed, src), embedded(ours.tgt_embed, tgt),
                    tgt_mask=causal_mask(tgt.size(1), device=device), src_key_padding_mask=src_kpm,
                    tgt_key_padding_mask=tgt_kpm, memory_key_padding_mask=src_kpm)
    assert_close(logits, ours.generator(hidden), **tol(dtype, stack=True))
    # Every position of every example is the same: nothing of the input survives all that dropout.
    assert_close(logits, logits[:1, :1].expand_as(logits), **tol(dtype, stack=True))


def expected_parameter_count(vocab, d, d_ff, num_layers, norm_first, shared):
    attention = 4 * (d * d + d)
    feed_forward = (d * d_ff + d_ff) + (d_ff * d + d)
    layer_norm = 2 * d
    encoder_layer = attention + feed_forward + 2 * layer_norm
    decoder_layer = 2 * attention + feed_forward + 3 * layer_norm
    final_norms = 2 * layer_norm if norm_first else 0
    embeddings = vocab * d if shared else 3 * vocab * d  # src, tgt and the generator's weight
    return embeddings + vocab + num_layers * (encoder_layer + decoder_layer) + final_norms


@NORMS
def test_shared_embeddings_are_one_parameter_counted_once(norm_first):
    vocab, d, d_ff, layers = 11, D_MODEL, D_FF, 2
    kwargs = dict(d_model=d, num_heads=HEADS, num_layers=layers, d_ff=d_ff, norm_first=norm_first)
    shared = Transformer(vocab, vocab, share_embeddings=True, **kwargs)
    weight = shared.src_embed.embedding.weight
    assert shared.tgt_embed.embedding.weight is weight and shared.generator.weight is weight
    unique = {id(p): p for _, p in shared.named_parameters(remove_duplicate=False)}
    assert count_parameters(shared) == sum(p.numel() for p in unique.values())
    assert count_parameters(shared) == expected_parameter_count(vocab, d, d_ff, layers, norm_first, shared=True)

    separate = Transformer(vocab, vocab, share_embeddings=False, **kwargs)
    assert separate.tgt_embed.embedding.weight is not separate.src_embed.embedding.weight
    assert count_parameters(separate) == expected_parameter_count(vocab, d, d_ff, layers, norm_first, shared=False)


def test_count_parameters_counts_only_trainable():
    model = Transformer(11, 11, D_MODEL, HEADS, num_layers=1, d_ff=D_FF)
    total = count_parameters(model)
    model.src_embed.embedding.weight.requires_grad_(False)
    assert count_parameters(model) == total - 11 * D_MODEL


def test_share_embeddings_needs_one_vocabulary():
    with pytest.raises(ValueError):
        Transformer(11, 12, D_MODEL, HEADS, num_layers=1, d_ff=D_FF, share_embeddings=True)


@pytest.mark.parametrize("step", [1, 2, 50, 399, 400, 401, 1000, 100_000])
def test_noam_lr_matches_formula(step):
    expected = 512**-0.5 * min(step**-0.5, step * 400**-1.5)
    assert noam_lr(step, 512, 400) == pytest.approx(expected, rel=1e-12)


def test_noam_lr_peaks_at_warmup():
    rates = [noam_lr(step, 512, 400) for step in range(1, 2001)]
    assert max(range(len(rates)), key=rates.__getitem__) + 1 == 400
    assert rates[399] == pytest.approx(512**-0.5 * 400**-0.5, rel=1e-12)
    assert all(a < b for a, b in zip(rates[:399], rates[1:400]))  # linear warm-up
    assert all(a > b for a, b in zip(rates[399:], rates[400:]))  # then 1/sqrt(step)


@pytest.mark.parametrize("step", [0, -1])
def test_noam_lr_rejects_steps_before_one(step):
    with pytest.raises(ValueError):
        noam_lr(step, 512, 400)


# ---------------------------------------------------------------------------------------
# Greedy decoding
# ---------------------------------------------------------------------------------------

BOS = 1
NEVER = -1  # an eos id that no model can produce


def tiny_model(device, dtype):
    torch.manual_seed(0)
    model = Transformer(9, 9, d_model=16, num_heads=2, num_layers=2, d_ff=32, dropout=0.1, max_len=32, pad_id=PAD)
    return model.to(device, dtype)


def tiny_source(device):
    torch.manual_seed(1)
    return token_batch(9, [6, 4, 6, 5], 6, device)


def naive_greedy(model, src, max_len, bos_id, eos_id, src_key_padding_mask=None):
    """Greedy decoding the slow, obvious way: the whole model, from scratch, for every token."""
    model.eval()
    with torch.no_grad():
        ys = torch.full((src.size(0), 1), bos_id, device=src.device)
        done = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
        while ys.size(1) < max_len and not done.all():
            logits = model(src, ys, src_key_padding_mask=src_key_padding_mask)  # (B, t, V)
            token = torch.where(done, model.pad_id, logits[:, -1].argmax(-1))
            ys = torch.cat([ys, token[:, None]], dim=1)
            done |= token == eos_id
    return ys


def test_greedy_decode_equals_naive_loop(device, dtype):
    model, src = tiny_model(device, dtype), tiny_source(device)
    kpm = padding_mask(src, PAD)
    free = greedy_decode(model, src, 10, BOS, NEVER, src_key_padding_mask=kpm)
    assert free.shape == (4, 10) and free.dtype == torch.long
    assert torch.equal(free, naive_greedy(model, src, 10, BOS, NEVER, kpm))
    assert torch.equal(free[:, 0], torch.full((4,), BOS, device=device))


def test_greedy_decode_pads_after_eos(device, dtype):
    model, src = tiny_model(device, dtype), tiny_source(device)
    kpm = padding_mask(src, PAD)
    free = greedy_decode(model, src, 10, BOS, NEVER, src_key_padding_mask=kpm)
    eos = int(free[1, 3])  # a token that ends row 1 at step 3 (and maybe other rows elsewhere)

    out = greedy_decode(model, src, 10, BOS, eos, src_key_padding_mask=kpm)
    assert torch.equal(out, naive_greedy(model, src, 10, BOS, eos, kpm))
    # Rows do not influence each other: each is the free run cut at its first eos, then padding.
    expected = free.clone()
    for row in expected:
        hits = (row[1:] == eos).nonzero()
        if len(hits):
            row[int(hits[0]) + 2 :] = PAD
    assert torch.equal(out, expected[:, : out.size(1)])
    assert not torch.equal(out, free[:, : out.size(1)]), "the test needs a row that finished before the end"


def test_greedy_decode_stops_when_every_row_has_finished(device, dtype):
    model, src = tiny_model(device, dtype), tiny_source(device)
    eos = 5
    with torch.no_grad():
        model.generator.bias[eos] = 1e4  # every row says eos at once
    out = greedy_decode(model, src, 10, BOS, eos, src_key_padding_mask=padding_mask(src, PAD))
    assert torch.equal(out, torch.tensor([[BOS, eos]] * 4, device=device))


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_greedy_decode_leaves_mode_and_builds_no_graph(training):
    model, src = tiny_model("cpu", torch.float32), tiny_source("cpu")
    expected = naive_greedy(model, src, 8, BOS, NEVER)  # in eval mode, so without dropout
    model.train(training)
    grad_enabled = []
    model.generator.register_forward_hook(lambda module, args, out: grad_enabled.append(out.requires_grad))

    out = greedy_decode(model, src, 8, BOS, NEVER)
    assert all(m.training == training for m in model.modules())
    assert grad_enabled and not any(grad_enabled), "greedy_decode must run under torch.no_grad()"
    assert not out.requires_grad
    assert torch.equal(out, expected), "greedy_decode must run in eval mode (no dropout)"


# ---------------------------------------------------------------------------------------
# Dropout: active in training only
# ---------------------------------------------------------------------------------------


def test_multi_head_attention_dropout_only_in_training(device):
    noisy = MultiHeadAttention(D_MODEL, HEADS, dropout=0.5).to(device)
    plain = MultiHeadAttention(D_MODEL, HEADS, dropout=0.0).to(device)
    plain.load_state_dict(noisy.state_dict())
    x = rand(BATCH, 5, D_MODEL, device=device, dtype=torch.float32)
    expected, expected_weights = plain(x, x, x)

    out, weights = noisy.eval()(x, x, x)
    assert_close(out, expected)
    assert_close(weights, expected_weights)

    out, weights = noisy.train()(x, x, x)
    assert not torch.allclose(out, expected)
    assert not torch.allclose(out, noisy(x, x, x)[0])
    # Dropout on the weights: each one is dropped or scaled by 1 / (1 - p).
    kept = weights != 0
    assert kept.any() and not kept.all()
    assert_close(weights[kept], 2 * expected_weights[kept])


def test_multi_head_attention_drops_the_weights_where_torch_does(device, dtype):
    """With dropout=1.0 in training mode, dropout is deterministic: every value it acts on is zero.
    nn.MultiheadAttention drops the attention weights, before they mix the values, and returns the
    dropped ones: all zero, and an output of out_proj's bias alone. Ours must agree, with and
    without the weights (torch takes another code path without them)."""
    theirs = randomize_(nn.MultiheadAttention(D_MODEL, HEADS, dropout=1.0, batch_first=True)).to(device, dtype)
    ours = MultiHeadAttention(D_MODEL, HEADS, dropout=1.0).to(device, dtype)
    copy_from_torch(ours, theirs)
    ours.train(), theirs.train()
    query = rand(BATCH, 3, D_MODEL, device=device, dtype=dtype)
    memory = rand(BATCH, 5, D_MODEL, device=device, dtype=dtype)
    masks = {"key_padding_mask": trailing_padding([5, 2], 5).to(device)}

    out, weights = ours(query, memory, memory, **masks)
    expected, expected_weights = theirs(query, memory, memory, **masks, average_attn_weights=False)
    assert weights.shape == (BATCH, HEADS, 3, 5) and not weights.any()
    assert_close(weights, expected_weights, **tol(dtype))
    assert_close(out, expected, **tol(dtype))
    assert_close(out, theirs.out_proj.bias.expand_as(out), **tol(dtype))

    out, none = ours(query, memory, memory, **masks, need_weights=False)
    expected, _ = theirs(query, memory, memory, **masks, need_weights=False)
    assert none is None
    assert_close(out, expected, **tol(dtype))


def test_feed_forward_dropout_only_in_training(device):
    noisy = PositionwiseFeedForward(D_MODEL, D_FF, dropout=0.5).to(device)
    plain = PositionwiseFeedForward(D_MODEL, D_FF, dropout=0.0).to(device)
    plain.load_state_dict(noisy.state_dict())
    x = rand(BATCH, 5, D_MODEL, device=device, dtype=torch.float32)
    expected = plain(x)
    assert_close(noisy.eval()(x), expected)
    noisy.train()
    assert not torch.allclose(noisy(x), expected)


def test_encoder_layer_dropout_only_in_training(device):
    noisy = EncoderLayer(D_MODEL, HEADS, D_FF, dropout=0.5).to(device)
    plain = EncoderLayer(D_MODEL, HEADS, D_FF, dropout=0.0).to(device)
    plain.load_state_dict(noisy.state_dict())
    x = rand(BATCH, 5, D_MODEL, device=device, dtype=torch.float32)
    expected = plain(x)
    assert_close(noisy.eval()(x), expected)
    noisy.train()
    assert not torch.allclose(noisy(x), expected)
    assert not torch.allclose(noisy(x), noisy(x))


# ---------------------------------------------------------------------------------------
# 04 and 05: dropout exactly where torch.nn's encoder and decoder drop
# ---------------------------------------------------------------------------------------
# With dropout=1.0 in training mode every dropped value is zero, deterministically: a layer that
# drops where PyTorch does not (or not where it does) differs from it. The weights are random, so
# that a sublayer whose output escaped dropout would add at least its output bias.


def with_dropout_one(theirs, ours, device, dtype):
    """torch.nn's module (random weights) and ours with the same weights, both in training mode."""
    theirs = randomize_(theirs).to(device, dtype).train()
    ours = ours.to(device, dtype).train()
    copy_from_torch(ours, theirs)
    return theirs, ours


@NORMS
def test_encoder_layer_drops_where_torch_does(norm_first, device, dtype):
    T = 6
    theirs, ours = with_dropout_one(
        nn.TransformerEncoderLayer(D_MODEL, HEADS, D_FF, dropout=1.0, batch_first=True, norm_first=norm_first),
        EncoderLayer(D_MODEL, HEADS, D_FF, dropout=1.0, norm_first=norm_first), device, dtype)
    x = rand(BATCH, T, D_MODEL, device=device, dtype=dtype, requires_grad=True)
    kpm = trailing_padding([T, T - 2], T).to(device)
    out = ours(x, key_padding_mask=kpm)
    expected = theirs(x, src_key_padding_mask=kpm)
    assert_close(out, expected, **tol(dtype))
    assert_same_backward(ours, theirs, out, expected, [x], **tol(dtype))
    # Both sublayers are dropped entirely: pre-norm leaves x, post-norm normalizes it twice.
    assert_close(out, x if norm_first else ours.norm2(ours.norm1(x)), **tol(dtype))


@NORMS
def test_encoder_drops_where_torch_does(norm_first, device, dtype):
    T = 6
    layer = nn.TransformerEncoderLayer(D_MODEL, HEADS, D_FF, dropout=1.0, batch_first=True, norm_first=norm_first)
    theirs, ours = with_dropout_one(
        nn.TransformerEncoder(layer, 2, norm=nn.LayerNorm(D_MODEL) if norm_first else None, enable_nested_tensor=False),
        Encoder(2, D_MODEL, HEADS, D_FF, dropout=1.0, norm_first=norm_first), device, dtype)
    x = rand(BATCH, T, D_MODEL, device=device, dtype=dtype, requires_grad=True)
    kpm = trailing_padding([T, T - 3], T).to(device)
    out = ours(x, key_padding_mask=kpm)
    expected = theirs(x, src_key_padding_mask=kpm)
    assert_close(out, expected, **tol(dtype, stack=True))
    assert_same_backward(ours, theirs, out, expected, [x], **tol(dtype, stack=True))


@NORMS
def test_decoder_layer_drops_where_torch_does(norm_first, device, dtype):
    theirs, ours = with_dropout_one(
        nn.TransformerDecoderLayer(D_MODEL, HEADS, D_FF, dropout=1.0, batch_first=True, norm_first=norm_first),
        DecoderLayer(D_MODEL, HEADS, D_FF, dropout=1.0, norm_first=norm_first), device, dtype)
    y, memory, tgt_kpm, memory_kpm = decoder_inputs(device, dtype)
    tgt_mask = causal_mask(y.size(1), device=device)
    out = ours(y, memory, tgt_mask, tgt_kpm, memory_kpm)
    expected = theirs(y, memory, tgt_mask=tgt_mask, tgt_key_padding_mask=tgt_kpm, memory_key_padding_mask=memory_kpm)
    assert_close(out, expected, **tol(dtype))
    assert_same_backward(ours, theirs, out, expected, [y, memory], **tol(dtype))
    # All three sublayers are dropped entirely.
    assert_close(out, y if norm_first else ours.norm3(ours.norm2(ours.norm1(y))), **tol(dtype))


@NORMS
def test_decoder_drops_where_torch_does(norm_first, device, dtype):
    layer = nn.TransformerDecoderLayer(D_MODEL, HEADS, D_FF, dropout=1.0, batch_first=True, norm_first=norm_first)
    theirs, ours = with_dropout_one(
        nn.TransformerDecoder(layer, 2, norm=nn.LayerNorm(D_MODEL) if norm_first else None),
        Decoder(2, D_MODEL, HEADS, D_FF, dropout=1.0, norm_first=norm_first), device, dtype)
    y, memory, tgt_kpm, memory_kpm = decoder_inputs(device, dtype)
    tgt_mask = causal_mask(y.size(1), device=device)
    out = ours(y, memory, tgt_mask, tgt_kpm, memory_kpm)
    expected = theirs(y, memory, tgt_mask=tgt_mask, tgt_key_padding_mask=tgt_kpm, memory_key_padding_mask=memory_kpm)
    assert_close(out, expected, **tol(dtype, stack=True))
    assert_same_backward(ours, theirs, out, expected, [y, memory], **tol(dtype, stack=True))


@pytest.mark.parametrize("layer", ["encoder", "decoder"])
def test_dropout_one_is_off_in_eval_mode(layer, device):
    """The checks' eval-mode dropout probes: dropout=1.0 in eval mode computes what dropout=0.0 does."""
    make = {"encoder": EncoderLayer, "decoder": DecoderLayer}[layer]
    noisy = make(D_MODEL, HEADS, D_FF, dropout=1.0).to(device).eval()
    plain = make(D_MODEL, HEADS, D_FF, dropout=0.0).to(device).eval()
    plain.load_state_dict(noisy.state_dict())
    inputs = [rand(BATCH, 5, D_MODEL, device=device, dtype=torch.float32)]
    if layer == "decoder":
        inputs.append(rand(BATCH, 4, D_MODEL, device=device, dtype=torch.float32))
    assert_close(noisy(*inputs), plain(*inputs))


@ACTIVATIONS
def test_feed_forward_drops_the_hidden_layer_as_torch_does(activation, device):
    """nn.TransformerEncoderLayer's feed-forward block, dropout2 aside, draws the same dropout mask as ours."""
    theirs = randomize_(nn.TransformerEncoderLayer(D_MODEL, HEADS, D_FF, dropout=0.5, activation=activation,
                                                   batch_first=True)).to(device).train()
    theirs.dropout2 = nn.Identity()  # the layer's dropout on the sublayer's output: EncoderLayer's self.dropout
    ours = PositionwiseFeedForward(D_MODEL, D_FF, dropout=0.5, activation=activation).to(device).train()
    ours.load_state_dict({f"{name}.{p}": t for name in ("linear1", "linear2")
                          for p, t in getattr(theirs, name).state_dict().items()})
    x = rand(BATCH, 5, D_MODEL, device=device, dtype=torch.float32)
    torch.manual_seed(1)
    out = ours(x)
    torch.manual_seed(1)
    expected = theirs._ff_block(x)
    assert_close(out, expected)
    assert not torch.allclose(out, ours.eval()(x))  # something was dropped
