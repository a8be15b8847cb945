"""Answers that call the built-in the exercise asks the student to write, openly or not.

Every answer here is right (the outputs, weights and gradients all match the reference) but
does the exercise with F.scaled_dot_product_attention or nn.MultiheadAttention, which
deserves 0. The source check sees names; the runtime block (curriculum.py's ``forbidden``
switched off in the child) has to catch what a name doesn't show.
"""

from . import SA, SDPA, SWITCHED_OFF, WRONG_SDPA, answer, case, code, lesson_notebook, self_attention, write

USES_SDPA = "built-in `scaled_dot_product_attention`"
USES_MHA = "built-in `MultiheadAttention`"


def _sdpa_with(fetch, imports=""):
    """A correct scaled_dot_product_attention that gets F's built-in with ``fetch``: the weights come
    from attending over an identity matrix, since the built-in returns only the output."""
    return code(imports) + code(f'''
        def scaled_dot_product_attention(query, key, value, attn_mask=None):
            attend = {fetch}
            if attn_mask is not None and attn_mask.dtype == torch.bool:
                attn_mask = ~attn_mask  # the built-in's True means "takes part"
            S = key.size(-2)
            identity = torch.eye(S, dtype=query.dtype, device=query.device).expand(*key.shape[:-1], S)  # (..., S, S)
            return attend(query, key, value, attn_mask=attn_mask), attend(query, key, identity, attn_mask=attn_mask)
    ''')


def _self_attention_with(fetch, imports=""):
    """A correct SelfAttention that runs the built-in nn.MultiheadAttention (one head) on its own weights."""
    return code(imports) + "\n\n" + self_attention(f'''
        B, T, C = x.shape
        attention = {fetch}(C, 1, batch_first=True, device=x.device, dtype=x.dtype)
        weights = {{"in_proj_weight": torch.cat([self.q_proj.weight, self.k_proj.weight, self.v_proj.weight]),
                   "in_proj_bias": torch.cat([self.q_proj.bias, self.k_proj.bias, self.v_proj.bias]),
                   "out_proj.weight": self.out_proj.weight, "out_proj.bias": self.out_proj.bias}}
        if attn_mask is not None and attn_mask.dim() == 3:
            attn_mask = attn_mask.expand(B, T, T)  # (B * 1 head, T, T)
        out, attn = torch.func.functional_call(attention, weights, (x, x, x), dict(
            attn_mask=attn_mask, need_weights=True, average_attn_weights=False))
        return out, attn[:, 0]  # (B, T, C), (B, T, T)
    ''')


@case(SDPA, deserved=0, says=(USES_SDPA,))
def calls_the_built_in_attention(ctx):
    """A right answer that calls F.scaled_dot_product_attention: 0, the message names the built-in."""
    return _sdpa_with("F.scaled_dot_product_attention")


@case(SDPA, deserved=0, says=(USES_SDPA,))
def imports_the_built_in_attention_under_an_alias(ctx):
    """A right answer that imports F.scaled_dot_product_attention as `attend_fast`: 0, the message names the built-in."""
    return _sdpa_with("attend_fast", "from torch.nn.functional import scaled_dot_product_attention as attend_fast\n")


@case(SDPA, deserved=0, says=(SWITCHED_OFF,))
def reaches_the_built_in_attention_through_getattr(ctx):
    """A right answer that fetches F.scaled_dot_product_attention with getattr and a built-up name: 0, the runtime block says why."""
    return _sdpa_with('getattr(F, "scaled_dot_" + "product_attention")')


@case(SDPA, deserved=0, says=(SWITCHED_OFF,))
def reaches_the_built_in_attention_through_torch_C(ctx):
    """A right answer that fetches the same built-in from torch._C._nn (F's is an alias of it) with getattr: 0."""
    return _sdpa_with('getattr(torch._C._nn, "scaled_dot_" + "product_attention")')


@case(SDPA, deserved=0, says=(SWITCHED_OFF,))
def calls_a_private_attention_kernel(ctx):
    """A right answer that calls torch._scaled_dot_product_attention_math, the kernel behind the built-in, which returns the weights too: 0."""
    return code('''
        def scaled_dot_product_attention(query, key, value, attn_mask=None):
            if attn_mask is not None and attn_mask.dtype == torch.bool:
                attn_mask = torch.zeros(attn_mask.shape, dtype=query.dtype, device=query.device).masked_fill(attn_mask, float("-inf"))
            return torch._scaled_dot_product_attention_math(query, key, value, attn_mask)
    ''')


def _self_attention_by_the_native_kernel(fetch):
    """A SelfAttention that runs PyTorch's fused multi-head attention kernel with one head (it takes
    no additive float mask: with one, this module works by hand). Its outputs and weights are
    right; only its gradients are missing (the kernel has no backward), so without the block it
    would fail one hidden check, with a message about derivatives instead of about the kernel."""
    return self_attention(f'''
        if attn_mask is not None and attn_mask.dtype != torch.bool:
            q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)  # (B, T, C) each
            weights = (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)) + attn_mask).softmax(dim=-1)  # (B, T, T)
            return self.out_proj(weights @ v), weights
        B, T, C = x.shape
        kernel = {fetch}
        in_weight = torch.cat([self.q_proj.weight, self.k_proj.weight, self.v_proj.weight])  # (3C, C)
        in_bias = torch.cat([self.q_proj.bias, self.k_proj.bias, self.v_proj.bias])        # (3C,)
        mask = None if attn_mask is None else attn_mask.expand(B, T, T)[:, None]            # (B, 1, T, T)
        out, attn = kernel(x, x, x, C, 1, in_weight, in_bias, self.out_proj.weight, self.out_proj.bias,
                           mask, True, False, None if mask is None else 2)  # 2: a (B, H, T, T) mask
        return out, attn[:, 0]  # (B, T, C), (B, T, T)
    ''')


@case(SA, deserved=0, says=("built-in `_native_multi_head_attention`",))
def runs_the_native_multi_head_attention_kernel(ctx):
    """A module that calls torch._native_multi_head_attention, the fused kernel behind nn.MultiheadAttention, with one head: 0, the message names it."""
    return _self_attention_by_the_native_kernel("torch._native_multi_head_attention")


@case(SA, deserved=0, says=(SWITCHED_OFF,))
def reaches_the_native_multi_head_attention_kernel_through_getattr(ctx):
    """The same module, with the kernel fetched by getattr and a built-up name: 0, the runtime block says why."""
    return _self_attention_by_the_native_kernel('getattr(torch, "_native_multi_" + "head_attention")')


@case(SA, deserved=0, says=(USES_MHA,))
def uses_the_built_in_multihead_attention(ctx):
    """A right module that runs nn.MultiheadAttention with its own weights: 0, the message names the built-in."""
    return _self_attention_with("nn.MultiheadAttention")


@case(SA, deserved=0, says=(USES_MHA,))
def imports_multihead_attention_under_an_alias(ctx):
    """A right module that imports nn.MultiheadAttention as `Heads`: 0, the message names the built-in."""
    return _self_attention_with("Heads", "from torch.nn import MultiheadAttention as Heads\n")


@case(SA, deserved=0, says=(SWITCHED_OFF,))
def reaches_multihead_attention_through_getattr(ctx):
    """A right module that fetches nn.MultiheadAttention with getattr and a built-up name: 0, the runtime block says why."""
    return _self_attention_with('getattr(nn, "Multihead" + "Attention")')


@case(SA, deserved=0, says=(SWITCHED_OFF,))
def reaches_multihead_attention_through_its_module(ctx):
    """A right module that fetches MultiheadAttention from torch.nn.modules.activation, where it is defined, with getattr: 0."""
    return _self_attention_with('getattr(importlib.import_module("torch.nn.modules.activation"), "Multihead" + "Attention")',
                                "import importlib\n")


@case(deserved={SDPA: 0, SA: 0}, says={SDPA: (SWITCHED_OFF,), SA: (USES_SDPA,)})
def smuggles_the_built_in_through_the_other_cell(ctx):
    """A wrong attention cell, and a SelfAttention cell (given up) that redefines scaled_dot_product_attention with the built-in: both 0."""
    sa = self_attention() + "\n\n" + _sdpa_with("F.scaled_dot_product_attention")
    return write(lesson_notebook([answer(WRONG_SDPA, SDPA)], [answer(sa, SA)]), ctx.notebook)

