"""Stand-ins that lesson 09's probes hand to the student's code: the shapes of its models, no answer.

``load_llama_weights(model, state_dict)`` needs a model to fill and ``cached_gqa_attention(attn,
...)`` an attention module to read. A probe can carry only plain data, so the runner builds these
from it (``FIXTURES`` in runner.py). They hold the parameters under the names the lesson fixes and
the attributes the exercises read (``num_heads``, ``num_kv_heads``, ``rope_base``), and compute
nothing: neither has a forward, so no answer of lesson 09 is in them. Weights start seeded and
random, so a tensor the loader forgets to copy shows.
"""

import torch
from torch import nn


class _Gain(nn.Module):
    """An RMSNorm's parameters only: ``weight`` (d_model,) and ``eps``."""

    def __init__(self, d_model, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.empty(d_model))


class GQAProjections(nn.Module):
    """What cached_gqa_attention uses of a lesson 08 GroupedQueryAttention: its four projections (no
    bias), num_heads, num_kv_heads, rope_base; with ``state_dict`` given, those weights."""

    def __init__(self, d_model, num_heads, num_kv_heads, rope_base=10000.0, state_dict=None):
        super().__init__()
        head_dim = d_model // num_heads
        self.num_heads, self.num_kv_heads, self.rope_base, self.rotary = num_heads, num_kv_heads, rope_base, True
        self.q_proj = nn.Linear(d_model, d_model, bias=False)
        self.k_proj = nn.Linear(d_model, num_kv_heads * head_dim, bias=False)
        self.v_proj = nn.Linear(d_model, num_kv_heads * head_dim, bias=False)
        self.out_proj = nn.Linear(d_model, d_model, bias=False)
        if state_dict is not None:
            self.to(next(iter(state_dict.values())).dtype).load_state_dict(state_dict)


class _BlockShell(nn.Module):
    def __init__(self, d_model, num_heads, num_kv_heads, d_ff):
        super().__init__()
        self.attn_norm = _Gain(d_model, 1e-6)
        self.attn = GQAProjections(d_model, num_heads, num_kv_heads)
        self.ffn_norm = _Gain(d_model, 1e-6)
        self.ffn = nn.Module()
        self.ffn.w_gate = nn.Linear(d_model, d_ff, bias=False)
        self.ffn.w_up = nn.Linear(d_model, d_ff, bias=False)
        self.ffn.w_down = nn.Linear(d_ff, d_model, bias=False)


class LlamaShell(nn.Module):
    """A LlamaLM's parameters, by the lesson's names (embed, layers.{i}.attn_norm, .attn.{q,k,v,out}_proj,
    .ffn_norm, .ffn.w_{gate,up,down}, norm, lm_head tied to embed when ``tie_weights``), seeded random."""

    def __init__(self, vocab_size, d_model, num_heads, num_kv_heads, num_layers, d_ff, tie_weights=True, seed=0,
                 dtype="float64"):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_model)
        self.layers = nn.ModuleList(_BlockShell(d_model, num_heads, num_kv_heads, d_ff) for _ in range(num_layers))
        self.norm = _Gain(d_model, 1e-6)
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)
        if tie_weights:
            self.lm_head.weight = self.embed.weight
        generator = torch.Generator().manual_seed(seed)
        self.to({"float32": torch.float32, "float64": torch.float64}[dtype])
        with torch.no_grad():
            for parameter in self.parameters():
                parameter.copy_(torch.randn(parameter.shape, generator=generator, dtype=torch.float64))
