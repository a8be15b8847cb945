"""Kinds of mistakes that recur across lessons 01-06, worded once.

A lesson's mistakes name instances ("norm1 and norm2 are swapped"); these name the kind, so that
a wrong answer nobody catalogued is still named: a module's own sublayer replaced by another of
its sublayers (a sublayer reused), the layers of a stack that are one module (a module shared),
an argument of the given __init__ that never reaches the module built from it (an argument not
passed down).
"""

ACTIVATION_HINT = ('the activation is not passed down: the given __init__ passes `activation` on to {target}, so '
                   'that activation="gelu" reaches every feed-forward network; keep it as given')


def activation_not_passed(target):
    """The hint for a module whose __init__ builds ``target`` without ``activation`` (always ReLU)."""
    return ACTIVATION_HINT.format(target=target)


def layers_shared(stack):
    """The hint for a stack whose layers are one module, or run one layer's weights for every step."""
    return (f"the layers share one set of weights: every step of the stack runs the same layer (one module repeated, "
            f"[layer] * num_layers, or self.layers[0] reused); each of the num_layers layers has its own weights, "
            f"so build a new one each time, nn.ModuleList({stack}(...) for _ in range(num_layers)), and loop over "
            "self.layers")


def sublayer_reused(what, used, own):
    """The hint for a module whose ``what`` ("the value projection") runs its sublayer ``used`` instead of its
    own ``own``."""
    return (f"a sublayer is reused: {what} uses self.{used}, where it has its own, self.{own}, with weights of "
            "its own")


def reusing(base, slot, used, methods=("forward", "encode", "decode")):
    """A subclass of the module ``base`` whose methods run its sublayer ``used`` where ``slot`` belongs (the value
    projection run by k_proj, the source embedded by tgt_embed), everything else as ``base`` does it."""

    def swapped(method):
        def run(self, *args, **kwargs):
            own = self._modules[slot]
            self._modules[slot] = self._modules[used]
            try:
                return method(self, *args, **kwargs)
            finally:
                self._modules[slot] = own

        return run

    wrapped = {name: swapped(getattr(base, name)) for name in methods if hasattr(base, name)}
    return type(f"{base.__name__}_{slot}_runs_{used}", (base,), wrapped)


PROJECTION_ROLES = {"q_proj": "the query projection", "k_proj": "the key projection",
                    "v_proj": "the value projection", "out_proj": "the output projection"}


def projections_reused(base):
    """(hint, wrong module) for every projection of an attention module ``base`` run by another of its projections."""
    return [(sublayer_reused(role, used, slot), reusing(base, slot, used))
            for slot, role in PROJECTION_ROLES.items() for used in PROJECTION_ROLES if used != slot]
