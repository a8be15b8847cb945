"""Code that rewires what it can reach: torch, numpy, the check library, IPython, the child's own machinery.

None of it can reach the verdict, which is computed in the grader's process from plain data;
what it does to the child only changes what the student's own code returns.
"""

from . import (CORRECT_SA, CORRECT_SDPA, NO_OUT_PROJ, NOT_PLAIN, PASSES, SA, SDPA, UNSCALED, WRONG_SA, WRONG_SDPA, added, answer,
               case, code, AtMost, WRONG_SA_EARNS, WRONG_SDPA_EARNS)

# The child keeps the exercises' results only when they are one per check the grader ran.
FORGED = "don't match the checks"


@case(SDPA, deserved=AtMost(WRONG_SDPA_EARNS), says=(UNSCALED,))
def patches_torch_comparisons(ctx):
    """A wrong answer whose cell makes torch.allclose/equal/isclose/testing.assert_close and Tensor.__eq__ always agree: at most what the wrong answer earns alone, the mistake is named."""
    return WRONG_SDPA + code('''
        import torch
        import torch.testing
        torch.allclose = lambda *args, **kwargs: True
        torch.equal = lambda *args, **kwargs: True
        torch.isclose = lambda input, other, *args, **kwargs: torch.ones_like(input, dtype=torch.bool)
        torch.testing.assert_close = lambda *args, **kwargs: None
        torch.Tensor.__eq__ = lambda self, other: torch.ones_like(self, dtype=torch.bool)
    ''')


@case(SA, deserved=WRONG_SA_EARNS, says=(NO_OUT_PROJ,))
def patches_every_assert_close(ctx):
    """A wrong module whose cell replaces every assert_close and check it can name (its own globals, torch.testing, builtins): what the wrong answer earns alone."""
    return WRONG_SA + code('''
        import builtins
        import torch.testing
        assert_close = lambda *args, **kwargs: None
        check = check_hidden = assert_close
        torch.testing.assert_close = assert_close
        builtins.assert_close = builtins.check = builtins.check_hidden = assert_close
    ''')


@case(SDPA, deserved=WRONG_SDPA_EARNS, says=("the softmax runs over the queries",))
def patches_torch_softmax(ctx):
    """A softmax over the queries, disguised by making torch.softmax and F.softmax use that axis for everyone (a reference run here would agree): what the wrong answer earns alone."""
    return code('''
        import torch
        import torch.nn.functional
        _softmax = torch.softmax
        torch.softmax = lambda input, dim=None, **kwargs: _softmax(input, dim=-2)
        torch.nn.functional.softmax = lambda input, dim=None, *args, **kwargs: _softmax(input, dim=-2)


        def scaled_dot_product_attention(query, key, value, attn_mask=None):
            scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
            if attn_mask is not None:
                scores = scores.masked_fill(attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else scores + attn_mask
            weights = torch.softmax(scores, dim=-1)
            return weights @ value, weights
    ''')


@case(SA, deserved=WRONG_SA_EARNS, says=(NO_OUT_PROJ,))
def patches_numpy(ctx):
    """A wrong module whose cell makes numpy's allclose/isclose/array_equal and numpy.testing always agree: what the wrong answer earns alone."""
    return WRONG_SA + code('''
        import numpy
        import numpy.testing
        numpy.allclose = numpy.array_equal = lambda *args, **kwargs: True
        numpy.isclose = lambda a, b, *args, **kwargs: numpy.ones(numpy.shape(a), dtype=bool)
        numpy.testing.assert_allclose = numpy.testing.assert_array_equal = lambda *args, **kwargs: None
    ''')


@case(SDPA, deserved=WRONG_SDPA_EARNS, says=(UNSCALED,))
def patches_the_check_library(ctx):
    """A wrong answer whose cell rewires autograder.checks (check, compare, public, and hidden if it can) to report success: what the wrong answer earns alone."""
    return WRONG_SDPA + code('''
        import autograder.checks
        import autograder.checks.compare as compare
        import autograder.checks.public as public

        passing = compare.Report("scaled_dot_product_attention", total=1, passed=1)
        autograder.checks.check = public.check = lambda *args, **kwargs: None
        compare.check_probes = public.check_probes = lambda *args, **kwargs: passing
        compare.compare = lambda *args, **kwargs: []
        compare._close = compare._matches = lambda *args, **kwargs: True
        public.summarize = lambda *args, **kwargs: None
        try:
            import autograder.checks.hidden as hidden
            hidden.check_hidden = hidden.report_for = lambda *args, **kwargs: passing
        except ImportError:
            pass
    ''')


@case(SA, deserved=WRONG_SA_EARNS, says=(NO_OUT_PROJ,))
def tampers_from_an_added_cell(ctx):
    """A wrong module, and a cell the student added above it that patches torch.testing, the check library and redefines check: what the wrong answer earns alone."""
    tamper = added(code('''
        import torch
        import autograder.checks
        import autograder.checks.compare as compare
        torch.testing.assert_close = lambda *args, **kwargs: None
        torch.allclose = lambda *args, **kwargs: True
        compare._close = lambda *args, **kwargs: True
        autograder.checks.check = check = lambda *args, **kwargs: None
    '''))
    return [tamper, answer(WRONG_SA, SA)]


@case(SDPA, deserved=WRONG_SDPA_EARNS, says=(UNSCALED,))
def hooks_ipython(ctx):
    """A wrong answer whose cell installs IPython input transformers, a custom exception handler, a silent showtraceback and a post-run hook (guarded: no IPython in the grader): what the wrong answer earns alone."""
    return WRONG_SDPA + code('''
        import IPython

        shell = IPython.get_ipython()  # None outside IPython
        if shell is not None:
            shell.input_transformers_cleanup.append(lambda lines: [l for l in lines if "check" not in l])
            shell.set_custom_exc((Exception,), lambda *args, **kwargs: None)
            shell.showtraceback = lambda *args, **kwargs: None
            shell.events.register("post_run_cell", lambda result: setattr(result, "error_in_exec", None))
    ''')


@case(SA, deserved=4, says=("NameError", PASSES))
def calls_get_ipython_unguarded(ctx):
    """A correct module whose cell then silences tracebacks through get_ipython(), unguarded (a NameError in the grader): full marks, the error is reported."""
    return CORRECT_SA + code('''
        get_ipython().showtraceback = lambda *args, **kwargs: None
    ''')


@case(SDPA, deserved=0, says=(FORGED,))
def forges_results_in_the_child(ctx):
    """A wrong answer whose cell swaps the child's run_probes for the stored public expected values (fewer results than checks): 0, said so."""
    return WRONG_SDPA + code('''
        import sys
        from autograder.checks.public import load_public_data

        _expected = load_public_data("01_self_attention")["scaled_dot_product_attention"]["expected"]
        _child = sys.modules["__main__"]
        _run_probes = _child.run_probes
        _child.run_probes = lambda obj, probes: _expected if obj is scaled_dot_product_attention else _run_probes(obj, probes)
    ''')


@case(SA, deserved=0, says=(NOT_PLAIN,))
def saves_garbage_for_its_results(ctx):
    """A wrong module whose cell makes torch.save write a bare number in place of its exercise's results: 0, and grading goes on."""
    return WRONG_SA + code('''
        import torch
        _save = torch.save
        torch.save = lambda obj, f, *args, **kwargs: _save(42 if "SelfAttention" in str(f) else obj, f, *args, **kwargs)
    ''')


@case(SDPA, deserved=6, says=(PASSES,))
def forges_a_cell_error_record(ctx):
    """A correct answer whose cell writes a malformed error record for itself into the child's out/ folder: full marks, and the record can't break grading."""
    return CORRECT_SDPA + code('''
        import os
        import torch
        os.makedirs("out", exist_ok=True)
        torch.save(["not", "an", "error"], "out/cell-scaled_dot_product_attention.pt")
    ''')
