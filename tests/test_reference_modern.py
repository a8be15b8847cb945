"""Lesson 08's reference (autograder/reference/modern.py) against PyTorch and the formulas.

RMSNorm is compared with nn.RMSNorm; SwiGLU and apply_rotary with their formulas written
out; GroupedQueryAttention with lesson 02's MultiHeadAttention (equal when every query head
has its own key/value head, and when the shared heads are copied out by hand);
flash_attention with lesson 01's attention and with F.scaled_dot_product_attention, and its
memory by recording the shape of every tensor that PyTorch creates during a call.
"""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention.bias import causal_lower_right
from torch.testing import assert_close
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from autograder.reference import (MultiHeadAttention, causal_mask, relative_position_matrix,
                                  scaled_dot_product_attention, split_heads)
from autograder.reference.modern import GroupedQueryAttention, RMSNorm, SwiGLU, apply_rotary, flash_attention
from tests.test_reference import default_dtype, rand, tol


from tests.reference_fixtures import _math_attention, _seed, device, dtype  # noqa: E402,F401  (fixtures)


def randomize(module, device, dtype, scale=0.5):
    """The module on device/dtype with every parameter uniform in [-scale, scale] (RMSNorm's ones would hide a swap)."""
    module = module.to(device, dtype)
    with torch.no_grad():
        for p in module.parameters():
            p.uniform_(-scale, scale)
    return module


def grads(out, inputs, upstream):
    return torch.autograd.grad(out, inputs, upstream, retain_graph=True)


# ---------------------------------------------------------------------------------------
# RMSNorm
# ---------------------------------------------------------------------------------------


def test_rms_norm_starts_as_ones():
    norm = RMSNorm(6)
    assert [name for name, _ in norm.named_parameters()] == ["weight"]
    assert torch.equal(norm.weight, torch.ones(6)) and norm.eps == 1e-6


def test_rms_norm_matches_torch(device, dtype):
    ours = randomize(RMSNorm(8), device, dtype)
    theirs = nn.RMSNorm(8, eps=1e-6).to(device, dtype)
    theirs.load_state_dict(ours.state_dict())
    x = rand(2, 5, 8, device=device, dtype=dtype, requires_grad=True)

    out, expected = ours(x), theirs(x)
    assert_close(out, expected, **tol(dtype))
    upstream = torch.randn_like(out)
    for a, b in zip(grads(out, [x, ours.weight], upstream), grads(expected, [x, theirs.weight], upstream)):
        assert_close(a, b, **tol(dtype))


def test_rms_norm_keeps_the_mean_and_scales_with_eps_inside_the_root():
    norm = RMSNorm(4, eps=0.5).double()
    x = torch.tensor([[1.0, 2.0, 3.0, 4.0]], dtype=torch.float64)  # mean(x^2) = 7.5
    assert_close(norm(x), x / math.sqrt(7.5 + 0.5))
    assert_close(norm(3 * x), 3 * x / math.sqrt(9 * 7.5 + 0.5))


# ---------------------------------------------------------------------------------------
# SwiGLU
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("bias", [False, True])
def test_swiglu_matches_formula(bias, device, dtype):
    ffn = randomize(SwiGLU(6, 10, bias=bias), device, dtype)
    assert [name for name, _ in ffn.named_parameters()] == (
        ["w_gate.weight", "w_gate.bias", "w_up.weight", "w_up.bias", "w_down.weight", "w_down.bias"] if bias
        else ["w_gate.weight", "w_up.weight", "w_down.weight"])
    assert ffn.w_gate.weight.shape == ffn.w_up.weight.shape == (10, 6) and ffn.w_down.weight.shape == (6, 10)
    x = rand(2, 3, 6, device=device, dtype=dtype)

    def linear(layer, h):
        return h @ layer.weight.T + (layer.bias if bias else 0)

    gate = linear(ffn.w_gate, x)
    expected = linear(ffn.w_down, gate * torch.sigmoid(gate) * linear(ffn.w_up, x))  # SiLU(g) = g * sigmoid(g)
    assert_close(ffn(x), expected, **tol(dtype))


# ---------------------------------------------------------------------------------------
# apply_rotary
# ---------------------------------------------------------------------------------------


def rotate_naively(x, positions, base=10000.0):
    """The formula of CURRICULUM.md, pair by pair, in float64: (..., T, D) -> (..., T, D)."""
    out = torch.empty_like(x, dtype=torch.float64)
    D = x.size(-1)
    for t, p in enumerate(positions.tolist()):
        for i in range(D // 2):
            angle = p / base ** (2 * i / D)
            a, b = x[..., t, 2 * i].double(), x[..., t, 2 * i + 1].double()
            out[..., t, 2 * i] = a * math.cos(angle) - b * math.sin(angle)
            out[..., t, 2 * i + 1] = a * math.sin(angle) + b * math.cos(angle)
    return out.to(x.dtype)


@pytest.mark.parametrize("base", [10000.0, 500.0])
def test_apply_rotary_rotates_pairs_2i_2i1(base, device, dtype):
    x = rand(2, 3, 7, 8, device=device, dtype=dtype)
    positions = torch.tensor([0, 1, 2, 5, 40, 300, 4097], device=device)
    out = apply_rotary(x, positions, base=base)
    assert out.shape == x.shape and out.dtype == dtype and out.device == x.device
    assert_close(out, rotate_naively(x, positions, base), **tol(dtype))


def test_apply_rotary_of_a_unit_vector_turns_by_the_angle():
    e0 = torch.tensor([[1.0, 0.0, 0.0, 0.0]] * 3, dtype=torch.float64)  # (T, D) = (3, 4)
    out = apply_rotary(e0)  # positions 0, 1, 2; pair 0 turns by p radians, pair 1 is untouched
    expected = torch.tensor([[math.cos(p), math.sin(p), 0.0, 0.0] for p in range(3)], dtype=torch.float64)
    assert_close(out, expected)
    e2 = torch.tensor([[0.0, 0.0, 1.0, 0.0]], dtype=torch.float64)  # pair 1, frequency 10000^(-2/4) = 0.01
    angle = 100 * 0.01
    assert_close(apply_rotary(e2, torch.tensor([100])), torch.tensor([[0.0, 0.0, math.cos(angle), math.sin(angle)]],
                                                                   dtype=torch.float64))


def test_apply_rotary_is_lesson_03s_rotation():
    """Position p rotates by R(p * omega) per pair: as a row vector, x @ relative_position_matrix(-p)."""
    with default_dtype(torch.float64):
        x = torch.randn(1, 16)
        for p in (0, 1, 7, 250):
            assert_close(apply_rotary(x, torch.tensor([p])), x @ relative_position_matrix(-p, 16))


def test_apply_rotary_scores_depend_only_on_the_distance(dtype):
    D, T = 16, 40
    q, k = torch.randn(D, dtype=dtype), torch.randn(D, dtype=dtype)
    queries = apply_rotary(q.expand(T, D))  # the same q at every position p: (T, D)
    keys = apply_rotary(k.expand(T, D))  # the same k at every position s: (T, D)
    scores = queries @ keys.T  # (T, T): scores[p, s] = (R_p q) . (R_s k)
    assert_close(scores[1:, 1:], scores[:-1, :-1], **tol(dtype, stack=True))  # constant along diagonals
    assert not torch.allclose(scores[0, 1:], scores[0, :-1])  # but not constant: distance matters
    assert_close(queries.norm(dim=-1), q.norm().expand(T), **tol(dtype))  # a rotation keeps lengths
    # Shifting both positions by 1000 changes nothing either.
    far = torch.arange(1000, 1000 + T)
    assert_close(apply_rotary(q.expand(T, D), far) @ apply_rotary(k.expand(T, D), far).T, scores,
                 **tol(dtype, stack=True))


def test_apply_rotary_default_positions_and_offsets(device, dtype):
    x = rand(2, 9, 6, device=device, dtype=dtype)
    assert_close(apply_rotary(x), apply_rotary(x, torch.arange(9, device=device)), atol=0, rtol=0)
    # The last 4 vectors of a sequence, rotated on their own at positions 5..8 (a KV cache's new tokens).
    assert_close(apply_rotary(x[:, 5:], torch.arange(5, 9, device=device)), apply_rotary(x)[:, 5:], atol=0, rtol=0)
    assert_close(apply_rotary(x, torch.zeros(9, dtype=torch.long, device=device)), x, atol=0, rtol=0)


def test_apply_rotary_rejects_an_odd_number_of_features():
    with pytest.raises(ValueError, match="even"):
        apply_rotary(torch.randn(2, 3, 5))


# ---------------------------------------------------------------------------------------
# GroupedQueryAttention
# ---------------------------------------------------------------------------------------


def test_gqa_parameters():
    gqa = GroupedQueryAttention(32, num_heads=8, num_kv_heads=2)
    shapes = {name: tuple(p.shape) for name, p in gqa.named_parameters()}
    assert shapes == {"q_proj.weight": (32, 32), "k_proj.weight": (8, 32), "v_proj.weight": (8, 32),
                      "out_proj.weight": (32, 32)}  # D = 4, two kv heads, no biases
    mqa = GroupedQueryAttention(32, num_heads=8, num_kv_heads=1, bias=True)
    assert mqa.k_proj.weight.shape == (4, 32) and mqa.k_proj.bias.shape == (4,)


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("mask_kind", [None, "causal", "float"])
def test_gqa_with_every_kv_head_is_multi_head_attention(bias, mask_kind, device, dtype):
    T, C, H = 6, 16, 4
    gqa = randomize(GroupedQueryAttention(C, H, H, bias=bias, rotary=False), device, dtype)
    mha = MultiHeadAttention(C, H, bias=bias).to(device, dtype)
    mha.load_state_dict(gqa.state_dict())
    x = rand(2, T, C, device=device, dtype=dtype, requires_grad=True)
    mask = {None: None, "causal": causal_mask(T, device=device),
            "float": torch.randn(T, T, dtype=dtype, device=device)}[mask_kind]

    out, weights = gqa(x, attn_mask=mask)
    expected, expected_weights = mha(x, x, x, attn_mask=mask)
    assert out.shape == (2, T, C) and weights.shape == (2, H, T, T)
    assert_close(out, expected, **tol(dtype))
    assert_close(weights, expected_weights, **tol(dtype))
    upstream = torch.randn_like(out)
    assert_close(grads(out, [x], upstream)[0], grads(expected, [x], upstream)[0], **tol(dtype))


@pytest.mark.parametrize("num_kv_heads", [1, 2])
def test_gqa_query_head_h_reads_kv_head_h_over_group(num_kv_heads, device, dtype):
    """Copy kv head h // group into query head h's slot of a MultiHeadAttention: the same output."""
    T, C, H = 5, 16, 4
    D, group = C // H, H // num_kv_heads
    gqa = randomize(GroupedQueryAttention(C, H, num_kv_heads, bias=True, rotary=False), device, dtype)
    mha = MultiHeadAttention(C, H, bias=True).to(device, dtype)
    state = gqa.state_dict()
    for proj in ("k_proj", "v_proj"):
        heads = [h // group for h in range(H)]  # e.g. [0, 0, 1, 1]: neighbours share, not [0, 1, 0, 1]
        weight = state[f"{proj}.weight"].view(num_kv_heads, D, C)  # (H_kv, D, C)
        bias = state[f"{proj}.bias"].view(num_kv_heads, D)  # (H_kv, D)
        state[f"{proj}.weight"] = weight[heads].reshape(C, C)  # (H*D, C)
        state[f"{proj}.bias"] = bias[heads].reshape(C)
    mha.load_state_dict(state)
    x = rand(2, T, C, device=device, dtype=dtype)
    out, weights = gqa(x)
    expected, expected_weights = mha(x, x, x)
    assert_close(out, expected, **tol(dtype))
    assert_close(weights, expected_weights, **tol(dtype))


def test_gqa_rotates_queries_and_keys_not_values(device, dtype):
    T, C, H, H_kv = 7, 16, 4, 2
    gqa = randomize(GroupedQueryAttention(C, H, H_kv), device, dtype)
    x = rand(2, T, C, device=device, dtype=dtype)
    positions = torch.tensor([3, 4, 5, 9, 10, 11, 20], device=device)
    q = apply_rotary(split_heads(gqa.q_proj(x), H), positions)  # (B, H, T, D)
    k = apply_rotary(split_heads(gqa.k_proj(x), H_kv), positions).repeat_interleave(H // H_kv, dim=1)  # (B, H, T, D)
    v = split_heads(gqa.v_proj(x), H_kv).repeat_interleave(H // H_kv, dim=1)  # (B, H, T, D)
    mask = causal_mask(T, device=device)
    scores = (q @ k.transpose(-2, -1) / math.sqrt(C // H)).masked_fill(mask, float("-inf"))  # (B, H, T, T)
    expected = gqa.out_proj((scores.softmax(-1) @ v).transpose(1, 2).reshape(2, T, C))

    out, weights = gqa(x, attn_mask=mask, positions=positions)
    assert_close(out, expected, **tol(dtype))
    assert_close(weights, scores.softmax(-1), **tol(dtype))
    # Only distances matter: moving every position by the same amount changes nothing.
    shifted, _ = gqa(x, attn_mask=mask, positions=positions + 1000)
    assert_close(shifted, out, **tol(dtype, stack=True))
    default, _ = gqa(x, attn_mask=mask)  # positions 0..T-1: other distances, another output
    assert not torch.allclose(default, out)


@pytest.mark.parametrize("args", [(30, 4, 2), (32, 8, 3), (32, 8, 0), (12, 4, 2)],
                         ids=["d_model%heads", "heads%kv_heads", "no_kv_heads", "odd_head_dim_rotary"])
def test_gqa_rejects_bad_sizes(args):
    with pytest.raises(ValueError):
        GroupedQueryAttention(*args)


def test_gqa_odd_head_dim_is_fine_without_rotary():
    out, _ = GroupedQueryAttention(20, 4, 2, rotary=False)(torch.randn(1, 3, 20))
    assert out.shape == (1, 3, 20)


# ---------------------------------------------------------------------------------------
# flash_attention
# ---------------------------------------------------------------------------------------

FLASH_TOL = {torch.float32: {"atol": 1e-5, "rtol": 1e-5}, torch.float64: {"atol": 1e-10, "rtol": 1e-10}}


def bottom_right_blocked(L, S, device=None):
    """(L, S) bool, True where key j > i + S - L: the keys causal_lower_right hides from query i."""
    return torch.arange(S, device=device)[None, :] > torch.arange(L, device=device)[:, None] + (S - L)


@pytest.mark.parametrize("block_size", [1, 7, 45, 128], ids=lambda b: f"block{b}")
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_flash_attention_matches_lesson_01(block_size, causal, device, dtype):
    """S = 45: 7 does not divide it (the last block has 3 keys), 45 is one block, 128 more than S."""
    q, k, v = (rand(2, 3, 45, 16, device=device, dtype=dtype, requires_grad=True) for _ in range(3))
    expected, _ = scaled_dot_product_attention(q, k, v, causal_mask(45, device=device) if causal else None)
    out = flash_attention(q, k, v, causal=causal, block_size=block_size)
    assert out.shape == expected.shape and out.dtype == dtype
    assert_close(out, expected, **FLASH_TOL[dtype])
    upstream = torch.randn_like(out)
    for a, b in zip(grads(out, [q, k, v], upstream), grads(expected, [q, k, v], upstream)):
        assert_close(a, b, **tol(dtype))


@pytest.mark.parametrize("block_size", [1, 5, 64])
def test_flash_attention_causal_is_bottom_right_when_l_lt_s(block_size, device, dtype):
    L, S = 9, 23
    q = rand(2, 2, L, 8, device=device, dtype=dtype)
    k, v = rand(2, 2, S, 8, device=device, dtype=dtype), rand(2, 2, S, 5, device=device, dtype=dtype)
    out = flash_attention(q, k, v, causal=True, block_size=block_size)
    assert out.shape == (2, 2, L, 5)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(L, S))
    assert_close(out, expected, **FLASH_TOL[dtype])
    lesson01, _ = scaled_dot_product_attention(q, k, v, bottom_right_blocked(L, S, device))
    assert_close(out, lesson01, **FLASH_TOL[dtype])
    # The top-left alignment (query i sees keys 0..i) is a different function here.
    top_left, _ = scaled_dot_product_attention(q, k, v, torch.ones(L, S, dtype=torch.bool, device=device).triu(1))
    assert not torch.allclose(out, top_left)


def test_flash_attention_rows_that_see_no_key_are_zero(device, dtype):
    """Causal with L > S: query i sees keys 0 .. i + S - L, none for the first L - S queries."""
    L, S = 11, 4
    q = rand(1, 2, L, 8, device=device, dtype=dtype, requires_grad=True)
    k = rand(1, 2, S, 8, device=device, dtype=dtype, requires_grad=True)
    v = rand(1, 2, S, 8, device=device, dtype=dtype, requires_grad=True)
    out = flash_attention(q, k, v, causal=True, block_size=3)
    assert torch.equal(out[..., : L - S, :], torch.zeros_like(out[..., : L - S, :]))
    expected, _ = scaled_dot_product_attention(q, k, v, bottom_right_blocked(L, S, device))  # zeros there too
    assert_close(out, expected, **FLASH_TOL[dtype])
    for grad in grads(out, [q, k, v], torch.randn_like(out)):
        assert torch.isfinite(grad).all()


def test_flash_attention_broadcasts_and_handles_other_value_widths(dtype):
    q = torch.randn(2, 1, 6, 4, dtype=dtype)  # one query head against three key heads
    k, v = torch.randn(2, 3, 10, 4, dtype=dtype), torch.randn(2, 3, 10, 7, dtype=dtype)
    expected, _ = scaled_dot_product_attention(q, k, v)
    assert_close(flash_attention(q, k, v, block_size=4), expected, **FLASH_TOL[dtype])
    q3 = torch.randn(6, 4, dtype=dtype)  # no batch dims at all
    expected, _ = scaled_dot_product_attention(q3, k[0, 0], v[0, 0])
    assert_close(flash_attention(q3, k[0, 0], v[0, 0], block_size=3), expected, **FLASH_TOL[dtype])


def test_flash_attention_is_stable_for_large_scores():
    """The running maximum keeps exp() from overflowing where an unshifted softmax would."""
    q = torch.full((1, 3, 4), 30.0)
    k = torch.randn(1, 50, 4) * 30
    v = torch.randn(1, 50, 4)
    out = flash_attention(q, k, v, block_size=8)
    assert torch.isfinite(out).all()
    assert_close(out, torch.softmax(q.double() @ k.double().transpose(-2, -1) / 2, dim=-1).float() @ v,
                 atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("block_size", [0, -3])
def test_flash_attention_rejects_block_size_below_one(block_size):
    with pytest.raises(ValueError, match="block_size"):
        flash_attention(torch.randn(2, 4), torch.randn(3, 4), torch.randn(3, 4), block_size=block_size)


class TensorRecorder(TorchDispatchMode):
    """While active, records (operation, shape) of every tensor that every PyTorch operation returns.

    It sits below autograd, at the dispatcher, so it sees each matmul, exp and masked_fill as
    PyTorch runs it, including the temporaries that Python code never names.
    """

    def __init__(self):
        super().__init__()
        self.made = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.made += [(str(func), tuple(t.shape)) for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
        return out

    def largest(self):
        return max(self.made, key=lambda made: math.prod(made[1]))


def recorded(fn, *inputs, **kwargs):
    with TensorRecorder() as recorder:
        fn(*inputs, **kwargs)
    return recorder


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_flash_attention_never_makes_an_l_by_s_tensor(causal):
    """B=1, H=8, L=S=8192, D=64, float32. The shapes of every tensor made during the call are
    recorded on the meta device (shapes, no data: the same operations, none of the 2-core
    arithmetic); test_the_recorder_sees_the_same_on_real_tensors shows that nothing is lost."""
    q, k, v = (torch.empty(1, 8, 8192, 64, device="meta") for _ in range(3))
    flash = recorded(flash_attention, q, k, v, causal=causal, block_size=128)
    op, shape = flash.largest()
    assert math.prod(shape) <= 1 * 8 * 8192 * 128, f"{op} made a tensor of shape {shape}"
    assert not any(s[-2:] == (8192, 8192) for _, s in flash.made)

    # The same recorder on lesson 01's attention (no mask: its check for fully blocked rows reads
    # the mask's values, which the meta device does not have) sees the (L, S) scores: the test can fail.
    plain = recorded(scaled_dot_product_attention, q, k, v)
    assert math.prod(plain.largest()[1]) == 8 * 8192 * 8192, "the recorder must see lesson 01's (L, S) scores"


def test_the_recorder_sees_the_same_on_real_tensors():
    """The meta device runs the same operations as the CPU: the shapes recorded are identical."""
    shapes = {}
    for device in ("cpu", "meta"):
        q, k, v = (torch.randn(1, 2, 300, 16).to(device) for _ in range(3))
        shapes[device] = recorded(flash_attention, q, k, v, causal=True, block_size=64).made
    assert shapes["cpu"] == shapes["meta"] and len(shapes["cpu"]) > 5 * 10  # 5 blocks, several ops each
    assert max(math.prod(s) for _, s in shapes["cpu"]) == 2 * 300 * 64


def test_gqa_passes_rope_base_to_apply_rotary():
    attn = GroupedQueryAttention(16, 4, 2, rope_base=500.0).double()
    assert (attn.num_heads, attn.num_kv_heads, attn.rope_base) == (4, 2, 500.0)
    x = torch.randn(2, 6, 16, dtype=torch.float64)
    q = apply_rotary(split_heads(attn.q_proj(x), 4), None, 500.0)  # (B, H, T, D)
    k = apply_rotary(split_heads(attn.k_proj(x), 2), None, 500.0).repeat_interleave(2, dim=1)  # (B, H, T, D)
    expected = torch.softmax(q @ k.transpose(-2, -1) / 2.0, dim=-1)  # D = 4
    assert_close(attn(x)[1], expected)
    default_base = GroupedQueryAttention(16, 4, 2).double()
    default_base.load_state_dict(attn.state_dict())
    assert not torch.allclose(default_base(x)[1], attn(x)[1])  # the probe can tell the bases apart
