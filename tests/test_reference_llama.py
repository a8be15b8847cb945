"""Lesson 09's reference (autograder/reference/llama.py) against transformers.LlamaForCausalLM.

The proof of equality: tiny random Llama configs (multi-head, grouped-query and multi-query
attention; tied and untied heads; two rope_theta and two eps values) loaded into both models.
Stock transformers computes the rotary angles and RMSNorm in float32 whatever the model's dtype,
so in float64 the two agree to ~1e-7; with those two modules patched to run in the model's dtype
(lesson_tools.open_weights.in_model_dtype), to 1e-10: the architecture is the same, operation for operation.
"""

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from autograder.reference import GroupedQueryAttention, generate
from autograder.reference.llama import LlamaBlock, LlamaLM, cached_gqa_attention, load_llama_weights
from autograder.reference.decoder import causal_mask
from lesson_tools.open_weights import in_model_dtype

from tests.reference_fixtures import _math_attention, _seed  # noqa: F401  (fixtures)

CONFIGS = {
    "mha-tied": dict(num_attention_heads=4, num_key_value_heads=4, tie_word_embeddings=True, rope_theta=10000.0,
                     rms_norm_eps=1e-6),
    "gqa-untied": dict(num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False, rope_theta=500.0,
                       rms_norm_eps=1e-5),
    "mqa-tied": dict(num_attention_heads=4, num_key_value_heads=1, tie_word_embeddings=True, rope_theta=500.0,
                     rms_norm_eps=1e-6),
    "gqa-tied": dict(num_attention_heads=6, num_key_value_heads=3, tie_word_embeddings=True, rope_theta=10000.0,
                     rms_norm_eps=1e-5, hidden_size=36),
}


def hf_model(name, dtype=torch.float64, seed=0):
    """A transformers Llama with random weights (norm gains too, so that a swapped norm shows)."""
    sizes = dict(vocab_size=61, hidden_size=32, num_hidden_layers=2, intermediate_size=40,
                 max_position_embeddings=128)
    config = LlamaConfig(**{**sizes, **CONFIGS[name]})
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).to(dtype).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0.0, 0.3)
    return model


def ours_from(hf):
    model = LlamaLM.from_config(hf.config.to_dict()).to(next(hf.parameters()).dtype).eval()
    return load_llama_weights(model, hf.state_dict())


def ids(T=24, B=2, vocab=61, seed=1):
    return torch.randint(0, vocab, (B, T), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("name", CONFIGS)
def test_equal_to_transformers_in_its_own_dtype_to_1e_10(name):
    hf = in_model_dtype(hf_model(name))
    tokens = ids(T=100)
    with torch.no_grad():
        difference = (ours_from(hf)(tokens) - hf(tokens).logits).abs().max().item()
    assert difference < 1e-10, difference


@pytest.mark.parametrize("name", CONFIGS)
def test_equal_to_stock_transformers(name):
    hf = hf_model(name)
    tokens = ids(T=100)
    with torch.no_grad():
        difference = (ours_from(hf)(tokens) - hf(tokens).logits).abs().max().item()
    assert difference < 1e-6, difference
    hf32 = hf_model(name, dtype=torch.float32)
    with torch.no_grad():
        difference = (ours_from(hf32)(tokens) - hf32(tokens).logits).abs().max().item()
    assert difference < 1e-4, difference


def test_the_proof_can_fail():
    """Without the q/k permutation, or with the other rotary convention, the logits differ."""
    hf = in_model_dtype(hf_model("gqa-untied"))
    ours = ours_from(hf)
    with torch.no_grad():
        for layer in ours.layers:  # undo the permutation: rows 2i, 2i+1 back to i, i + D/2
            for proj, heads in ((layer.attn.q_proj, layer.attn.num_heads), (layer.attn.k_proj, layer.attn.num_kv_heads)):
                rows, columns = proj.weight.shape
                proj.weight.copy_(proj.weight.reshape(heads, rows // heads // 2, 2, columns).transpose(1, 2)
                                  .reshape(rows, columns))
        tokens = ids()
        assert (ours(tokens) - hf(tokens).logits).abs().max() > 1e-2


def test_tied_and_untied_heads():
    tied, untied = ours_from(hf_model("mqa-tied")), ours_from(hf_model("gqa-untied"))
    assert tied.lm_head.weight is tied.embed.weight
    assert untied.lm_head.weight is not untied.embed.weight
    assert not torch.equal(untied.lm_head.weight, untied.embed.weight)


def test_from_config_reads_both_places_of_rope_theta():
    config = hf_model("gqa-untied").config.to_dict()
    assert config["rope_parameters"]["rope_theta"] == 500.0 and "rope_theta" not in config  # transformers 5
    assert LlamaLM.from_config(config).layers[0].attn.rope_base == 500.0
    hub_style = {k: v for k, v in config.items() if k != "rope_parameters"} | {"rope_theta": 250.0,
                                                                               "rope_scaling": None}
    model = LlamaLM.from_config(hub_style)  # transformers 4 and the hub's config.json files
    assert [layer.attn.rope_base for layer in model.layers] == [250.0, 250.0]
    assert model.layers[0].attn_norm.eps == 1e-5 and model.norm.eps == 1e-5
    assert model.layers[0].attn.num_kv_heads == 2 and model.max_len == 128
    without_kv = {k: v for k, v in hub_style.items() if k != "num_key_value_heads"}
    assert LlamaLM.from_config(without_kv).layers[0].attn.num_kv_heads == 4


@pytest.mark.parametrize("change", [{"head_dim": 16}, {"hidden_act": "gelu"},
                                    {"rope_scaling": {"rope_type": "linear", "factor": 2.0}},
                                    {"rope_parameters": {"rope_type": "llama3", "rope_theta": 1e4}}])
def test_from_config_refuses_what_it_would_compute_differently(change):
    config = hf_model("mha-tied").config.to_dict() | change
    with pytest.raises(ValueError):
        LlamaLM.from_config(config)


def test_load_refuses_a_wrong_state_dict_before_copying():
    hf = hf_model("gqa-untied")
    state = hf.state_dict()
    model = LlamaLM.from_config(hf.config.to_dict())
    before = {k: v.clone() for k, v in model.state_dict().items()}
    bad = {
        "missing": {k: v for k, v in state.items() if k != "model.layers.1.mlp.up_proj.weight"},
        "unexpected": state | {"model.layers.2.mlp.up_proj.weight": torch.zeros(40, 32)},
        "shape": state | {"model.layers.1.self_attn.k_proj.weight": torch.zeros(32, 32)},
    }
    for what, state_dict in bad.items():
        with pytest.raises(ValueError, match=r"model\.layers\.[12]\.(mlp\.up_proj|self_attn\.k_proj)"):
            load_llama_weights(model, state_dict)
        assert all(torch.equal(before[k], v) for k, v in model.state_dict().items()), what
    tied = LlamaLM.from_config(hf_model("mqa-tied").config.to_dict())
    with pytest.raises(ValueError, match="lm_head"):  # an untied head into a tied model
        load_llama_weights(tied, hf_model("mqa-tied").state_dict() | {"lm_head.weight": state["lm_head.weight"]})


def test_load_by_name_whatever_the_order():
    hf = hf_model("gqa-tied")
    shuffled = dict(reversed(list(hf.state_dict().items())))
    a, b = ours_from(hf), load_llama_weights(LlamaLM.from_config(hf.config.to_dict()).double(), shuffled)
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))


def test_forward_refuses_more_than_max_len():
    model = LlamaLM(20, 8, 2, 1, 1, 12, max_len=5)
    with pytest.raises(ValueError):
        model(torch.zeros(1, 6, dtype=torch.long))


def test_block_is_the_formula():
    block = LlamaBlock(16, 4, 2, 24, eps=1e-5, rope_base=500.0).double()
    x = torch.randn(2, 7, 16, dtype=torch.float64)
    h = x + block.attn(block.attn_norm(x), attn_mask=causal_mask(7), positions=None)[0]
    torch.testing.assert_close(block(x), h + block.ffn(block.ffn_norm(h)), rtol=0, atol=0)
    assert block.attn.rope_base == 500.0 and block.attn_norm.eps == 1e-5 and block.ffn_norm.eps == 1e-5


@pytest.mark.parametrize("heads", [(4, 4), (4, 2), (4, 1)])
def test_cached_attention_equals_the_whole_sequence(heads):
    attn = GroupedQueryAttention(16, *heads, rope_base=300.0).double()
    x = torch.randn(2, 9, 16, dtype=torch.float64)
    whole, _ = attn(x, attn_mask=causal_mask(9))
    key = value = None
    outs = []
    for start, stop in ((0, 4), (4, 5), (5, 9)):  # a chunk, one token, a chunk
        out, key, value = cached_gqa_attention(attn, x[:, start:stop], torch.arange(start, stop), key, value)
        outs.append(out)
    assert key.shape == value.shape == (2, heads[1], 9, 4)  # H_kv heads in the cache, never H
    torch.testing.assert_close(torch.cat(outs, dim=1), whole, rtol=0, atol=1e-12)


def test_generate_with_and_without_cache_gives_the_same_tokens():
    model = ours_from(hf_model("gqa-untied", dtype=torch.float32))
    prompt = ids(T=5, B=1)
    with_cache = generate(model, prompt, 20, top_k=1, use_cache=True)
    without = generate(model, prompt, 20, top_k=1, use_cache=False)
    assert torch.equal(with_cache, without)
    with torch.no_grad():
        expected = hf_model("gqa-untied", dtype=torch.float32).generate(prompt, max_new_tokens=20, do_sample=False)
    assert torch.equal(with_cache, expected)
