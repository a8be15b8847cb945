"""Properties every correct answer has, used to explain a wrong one.

Each function takes a probe and the outputs the student's code returned, and returns a hint
in a student's words when the property is broken (None when it holds). They need no
reference, so they work in the notebook as well as in the grader.
"""

import torch


def _argument(probe, name, position):
    if name in probe.get("kwargs", {}):
        return probe["kwargs"][name]
    args = probe.get("args", ())
    return args[position] if len(args) > position else None


def _weights(outputs, index=1):
    weights = outputs[index] if len(outputs) > index else None
    return weights if isinstance(weights, torch.Tensor) and weights.is_floating_point() else None


def weights_sum_to_one(index=1):
    def check(probe, outputs):
        weights = _weights(outputs, index)
        if weights is None or weights.dim() < 1:
            return None
        sums = weights.double().sum(-1)
        if torch.allclose(sums, torch.ones_like(sums), atol=1e-4):
            return None
        if weights.dim() >= 2 and torch.allclose(weights.double().sum(-2), torch.ones_like(weights.double().sum(-2)), atol=1e-4):
            return "the weights sum to 1 over the queries, not the keys: take the softmax over the last axis (dim=-1)"
        return "the weights don't sum to 1 over the last axis: is the softmax taken over the keys (dim=-1)?"

    return check


def blocked_keys_get_zero_weight(mask_name, mask_position, index=1):
    def check(probe, outputs):
        weights, mask = _weights(outputs, index), _argument(probe, mask_name, mask_position)
        if weights is None or mask is None or mask.dtype != torch.bool:
            return None
        try:
            blocked = mask.expand_as(weights)
        except RuntimeError:
            return None
        if (weights[blocked].abs() > 1e-6).any():
            if (weights[~blocked].abs() < 1e-6).all():
                return (
                    "the mask works the wrong way round: in this course (and in nn.MultiheadAttention) True means "
                    "BLOCKED, so fill the scores with float('-inf') where the mask is True"
                )
            return "keys the mask blocks (True) still get weight: fill their scores with float('-inf') before the softmax"
        return None

    return check




PROPERTIES = {
    "scaled_dot_product_attention": (weights_sum_to_one(), blocked_keys_get_zero_weight("attn_mask", 3)),
    "SelfAttention": (weights_sum_to_one(), blocked_keys_get_zero_weight("attn_mask", 1)),
}

# What a difference in a fixture's recorded state means (e.g. the model given to greedy_decode).
FIXTURE_HINTS = {
    "training": "leaves the model in a different mode than it found it: remember model.training and restore it",
    "grad_enabled": "decodes with gradients enabled: wrap the loop in torch.no_grad()",
    "encode": "calls model.encode a different number of times: encode the source once, before the loop",
    "decode": "calls model.decode a different number of times: stop as soon as every row has produced eos_id",
}
