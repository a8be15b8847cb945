"""Code that behaves one way in Jupyter and another under the grader, or returns things that lie.

What is graded is what runs in the grader: a detector only decides which of its own two
answers gets scored. What comes back is copied into plain tensors and numbers before it
leaves the child, so a rigged __eq__ or __torch_function__ has nothing to act on.
"""

from . import NO_OUT_PROJ, NOT_PLAIN, PASSES, SA, SDPA, UNSCALED, case, code, self_attention, AtMost, WRONG_SA_EARNS, WRONG_SDPA_EARNS


@case(SDPA, deserved=WRONG_SDPA_EARNS, says=(UNSCALED,))
def correct_only_inside_jupyter(ctx):
    """Scaled only when it sees Jupyter (JPY_PARENT_PID, ipykernel, get_ipython, __name__ == "__main__"), unscaled elsewhere: graded as what runs in the grader, what the wrong answer earns alone."""
    return code('''
        import os
        import sys

        IN_JUPYTER = ("JPY_PARENT_PID" in os.environ or "ipykernel" in sys.modules or "get_ipython" in globals()
                      or __name__ == "__main__")


        def scaled_dot_product_attention(query, key, value, attn_mask=None):
            scale = math.sqrt(query.size(-1)) if IN_JUPYTER else 1.0
            scores = query @ key.transpose(-2, -1) / scale
            if attn_mask is not None:
                scores = scores.masked_fill(attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else scores + attn_mask
            weights = scores.softmax(dim=-1)
            return weights @ value, weights
    ''')


@case(SA, deserved=4, says=(PASSES,))
def correct_only_when_graded(ctx):
    """Right only where there is no IPython and __name__ isn't __main__ (the grader), wrong in the student's notebook: full marks, that is what the grader ran."""
    return code('''
        GRADED = "get_ipython" not in globals() and __name__ != "__main__"
    ''') + "\n\n" + self_attention('''
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        if attn_mask is not None:
            scores = scores.masked_fill(attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else scores + attn_mask
        weights = scores.softmax(dim=-1)
        return (self.out_proj(weights @ v) if GRADED else weights @ v), weights
    ''')


@case(SA, deserved=WRONG_SA_EARNS, says=(NO_OUT_PROJ,))
def wrong_when_it_looks_like_a_grader(ctx):
    """Right in the student's Jupyter, wrong when its cwd, PYTHONPATH, environment or module name look like a grading job: what the wrong answer earns alone."""
    return code('''
        import os
        import sys

        _where = os.getcwd() + os.pathsep + os.environ.get("PYTHONPATH", "") + os.pathsep + " ".join(sys.path)
        GRADER = (any(word in _where for word in ("job", "autograder", "grad")) or __name__ not in ("__main__", "builtins")
                  or "JPY_PARENT_PID" not in os.environ or any(k.startswith(("NBGRADER", "AUTOGRADER")) for k in os.environ))
    ''') + "\n\n" + self_attention('''
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        if attn_mask is not None:
            scores = scores.masked_fill(attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else scores + attn_mask
        weights = scores.softmax(dim=-1)
        return (weights @ v if GRADER else self.out_proj(weights @ v)), weights
    ''')


@case(SDPA, deserved=AtMost(WRONG_SDPA_EARNS), says=(UNSCALED,))
def returns_a_tensor_that_always_agrees(ctx):
    """A wrong answer returning a Tensor subclass whose __eq__, allclose, equal, isclose and __torch_function__ report a match with anything: at most what the wrong answer earns alone."""
    return code('''
        class Agreeable(torch.Tensor):
            @classmethod
            def __torch_function__(cls, func, types, args=(), kwargs=None):
                name = getattr(func, "__name__", "")
                if name in ("allclose", "equal"):
                    return True
                if name in ("eq", "__eq__", "isclose"):
                    return torch.ones(args[0].shape, dtype=torch.bool)
                return super().__torch_function__(func, types, args, kwargs or {})

            def __eq__(self, other):
                return True

            __hash__ = torch.Tensor.__hash__


        def scaled_dot_product_attention(query, key, value, attn_mask=None):
            scores = query @ key.transpose(-2, -1)
            if attn_mask is not None:
                scores = scores.masked_fill(attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else scores + attn_mask
            weights = scores.softmax(dim=-1)
            return (weights @ value).as_subclass(Agreeable), weights.as_subclass(Agreeable)
    ''')


@case(SA, deserved=0, says=(NOT_PLAIN,), alone=True)
def returns_a_payload_that_runs_when_loaded(ctx):
    """A module whose output is a Tensor subclass that hands the grader an object whose unpickling runs a shell command: refused as data, the command never runs, 0."""
    marker = ctx.folder / "payload-ran"
    return code(f'''
        import os


        class Payload:
            def __reduce__(self):
                return (os.system, ({f"touch {marker}"!r},))

            def as_subclass(self, cls):
                return self

            def to(self, *args, **kwargs):
                return self

            def contiguous(self):
                return self


        class Smuggler(torch.Tensor):
            @classmethod
            def __torch_function__(cls, func, types, args=(), kwargs=None):
                if getattr(func, "__name__", "") in ("detach", "as_subclass", "to", "contiguous"):
                    return Payload()
                return super().__torch_function__(func, types, args, kwargs or {{}})
    ''') + "\n\n" + self_attention('''
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        if attn_mask is not None:
            scores = scores.masked_fill(attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else scores + attn_mask
        weights = scores.softmax(dim=-1)
        return self.out_proj(weights @ v).as_subclass(Smuggler), weights
    ''')


@case(SDPA, deserved=0, says=("expected a tensor or a number",))
def returns_objects_with_a_rigged_eq(ctx):
    """A wrong answer returning an int subclass and an object whose __eq__ says True to anything: refused, 0."""
    return code('''
        class AlwaysEqual:
            def __eq__(self, other):
                return True

            __hash__ = object.__hash__


        class AlwaysEqualInt(int):
            def __eq__(self, other):
                return True

            __hash__ = int.__hash__


        def scaled_dot_product_attention(query, key, value, attn_mask=None):
            return AlwaysEqualInt(0), AlwaysEqual()
    ''')
