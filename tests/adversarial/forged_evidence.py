"""Code that forges what its own process measures or records, in the lessons whose requirements once
trusted it (03, 06, 07, 08): the operation count, the largest tensor, the stand-in model's record of
its calls. Each is scored as the honest answer with the same mistake is: the returned values, a
memory limit the kernel enforces, or the source decide, never a record the student's process wrote.

Each case grades the lesson's notebook as it is handed out (the other exercises still stubs) with
one answer cell written.
"""

import nbformat

from autograder.curriculum import LESSONS
from autograder.release import REPO

from . import case, code

OUT_OF_BUDGET = "ran out of memory"


def _lesson_with(ctx, lesson_name, exercise, source):
    """The lesson's notebook with ``exercise``'s answer cell replaced by ``source``; returns its path."""
    notebook = nbformat.read(REPO / "lessons" / lesson_name / f"{lesson_name}.ipynb", as_version=4)
    cells = [c for c in notebook.cells if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == exercise]
    assert len(cells) == 1, f"{lesson_name} has no answer cell {exercise}"
    cells[0].source = source
    path = ctx.folder / f"{lesson_name}.ipynb"
    nbformat.write(notebook, path)
    return path


def _points(exercise, share):
    """The points of an answer that meets ``share`` of its requirements' weight, rounded down as the grade is."""
    points = next(lesson for lesson in LESSONS.values() if exercise in {e.name for e in lesson.exercises}) \
        .exercise(exercise).points
    return int(100 * points * share + 1e-9) / 100


# ----------------------------------------------------------------------------- lesson 08: the memory bound
FLASH = "flash_attention"
_FULL_MATRIX = '''
L, S = query.size(-2), key.size(-2)
scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))  # (..., L, S)
if causal:
    blocked = torch.ones(L, S, dtype=torch.bool, device=query.device).triu(S - L + 1)
    scores = scores.masked_fill(blocked, float("-inf"))
return scores.softmax(dim=-1).nan_to_num(0.0) @ value
'''
# formula 3, causal 1, dtype-device 0.5 of 5.5: what an honest full matrix gets
_FULL_MATRIX_POINTS = _points(FLASH, 4.5 / 5.5)


def _flash(body, before=""):
    lines = "".join("    " + line + "\n" if line else "\n" for line in code(body).splitlines())
    return code(before) + "def flash_attention(query, key, value, causal=False, block_size=128):\n" + lines


@case(deserved={FLASH: _points(FLASH, 4 / 5.5)}, says={FLASH: (OUT_OF_BUDGET,)})
def full_matrix_with_the_dispatch_modes_off(ctx):
    """The whole (L, S) score matrix, built under torch.utils._python_dispatch._disable_current_modes(), where no mode sees it: the memory requirement fails (and the device one: its tensors made on the meta device have no values)."""
    return _lesson_with(ctx, "08_modern_transformer", FLASH, _flash(
        "with _disable_current_modes():\n" + "".join("    " + line + "\n" for line in code(_FULL_MATRIX).splitlines()),
        before="from torch.utils._python_dispatch import _disable_current_modes\n"))


@case(deserved={FLASH: _points(FLASH, 4 / 5.5)}, says={FLASH: (OUT_OF_BUDGET,)})
def full_matrix_in_numpy(ctx):
    """The whole (L, S) score matrix computed in numpy, which no torch mode sees: the memory requirement fails (and the device one, numpy has no meta tensors)."""
    return _lesson_with(ctx, "08_modern_transformer", FLASH, _flash('''
        import numpy as np
        L, S = query.size(-2), key.size(-2)
        scores = query.numpy() @ np.swapaxes(key.numpy(), -1, -2) / math.sqrt(query.size(-1))  # (..., L, S)
        if causal:
            scores = np.where(np.triu(np.ones((L, S), dtype=bool), S - L + 1), -np.inf, scores)
        weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
        weights = np.nan_to_num(weights / weights.sum(axis=-1, keepdims=True))
        return torch.from_numpy(weights @ value.numpy())
    '''))


@case(deserved={FLASH: _FULL_MATRIX_POINTS}, says={FLASH: (OUT_OF_BUDGET,)})
def full_matrix_after_replacing_the_counter(ctx):
    """The whole (L, S) score matrix after replacing sys.modules["autograder.checks.runner"]._counting by a counter that records nothing: the memory requirement fails."""
    return _lesson_with(ctx, "08_modern_transformer", FLASH, code('''
        import contextlib
        import sys

        runner = sys.modules["autograder.checks.runner"]


        @contextlib.contextmanager
        def _counting(result):
            yield
            result["op_count"] = {"operations": 1, "lines": 1, "largest": [1]}


        runner._counting = _counting
    ''') + "\n\n" + _flash(_FULL_MATRIX))


@case(deserved={FLASH: _FULL_MATRIX_POINTS}, says={FLASH: (OUT_OF_BUDGET,)})
def full_matrix_after_lifting_the_budget(ctx):
    """The whole (L, S) score matrix after replacing the runner's budget (_within_budget) by nothing and raising its own RLIMIT_DATA: the limit the sandbox set before any answer cell ran still holds, the memory requirement fails."""
    return _lesson_with(ctx, "08_modern_transformer", FLASH, code('''
        import contextlib
        import resource
        import sys

        runner = sys.modules["autograder.checks.runner"]
        runner._within_budget = lambda budget: contextlib.nullcontext()
        try:
            resource.setrlimit(resource.RLIMIT_DATA, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        except (ValueError, OSError):
            pass
    ''') + "\n\n" + _flash(_FULL_MATRIX))


@case(deserved={FLASH: _points(FLASH, 4 / 5.5)}, says={FLASH: (OUT_OF_BUDGET,)})
def full_matrix_in_shared_anonymous_memory(ctx):
    """The whole (L, S) score matrix written into an mmap.mmap(-1, n), shared anonymous memory, which RLIMIT_DATA does not count (only private writable mappings): the memory requirement fails (and the device one, the buffer is on the CPU)."""
    return _lesson_with(ctx, "08_modern_transformer", FLASH, _flash('''
        import mmap
        L, S = query.size(-2), key.size(-2)
        lead = query.shape[:-2]
        buffer = mmap.mmap(-1, math.prod(lead) * L * S * query.element_size())
        scores = torch.frombuffer(buffer, dtype=query.dtype).view(*lead, L, S)  # (..., L, S), outside the budget
        torch.matmul(query / math.sqrt(query.size(-1)), key.transpose(-2, -1), out=scores)
        if causal:
            scores.masked_fill_(torch.ones(L, S, dtype=torch.bool, device=query.device).triu(S - L + 1), float("-inf"))
        scores.sub_(scores.amax(dim=-1, keepdim=True).nan_to_num(0.0)).exp_()
        scores.div_(scores.sum(dim=-1, keepdim=True).clamp_min(1e-30))
        return scores @ value
    '''))


@case(deserved={FLASH: _FULL_MATRIX_POINTS}, says={FLASH: (OUT_OF_BUDGET,)})
def row_at_a_time_attention(ctx):
    """Plain softmax attention one query row at a time (no online softmax, block_size unused), whose largest tensor is (..., 1, S): the memory requirement fails."""
    return _lesson_with(ctx, "08_modern_transformer", FLASH, _flash('''
        L, S = query.size(-2), key.size(-2)
        outputs = []
        for i in range(L):
            scores = query[..., i:i + 1, :] @ key.transpose(-2, -1) / math.sqrt(query.size(-1))  # (..., 1, S)
            if causal:
                scores = scores.masked_fill(torch.arange(S, device=query.device) > i + S - L, float("-inf"))
            outputs.append(scores.softmax(dim=-1).nan_to_num(0.0) @ value)  # (..., 1, Dv)
        return torch.cat(outputs, dim=-2)
    '''))


# ----------------------------------------------------------------------------- lesson 07: the stand-in's records
GENERATE, PERPLEXITY = "generate", "perplexity"


@case(deserved={GENERATE: _points(GENERATE, 6 / 7)}, says={GENERATE: ("use_cache",)})
def generate_ignores_the_cache_and_rewrites_the_calls(ctx):
    """generate that never uses the cache, then rewrites model.calls["lm_calls"] to the calls the cache would have made: the cache requirement fails."""
    return _lesson_with(ctx, "07_language_model", GENERATE, code('''
        def generate(model, prompt, max_new_tokens, temperature=1.0, top_k=None, top_p=None, generator=None,
                     use_cache=True):
            if use_cache and prompt.size(1) + max_new_tokens > model.max_len:
                raise ValueError("the prompt and the new tokens don't fit in max_len")
            was_training = model.training
            model.eval()
            ids = prompt
            with torch.no_grad():
                for _ in range(max_new_tokens):
                    logits = model(ids[:, -model.max_len:])
                    probs = next_token_probs(logits[:, -1], temperature, top_k, top_p)
                    ids = torch.cat([ids, torch.multinomial(probs, 1, generator=generator)], dim=1)
            model.train(was_training)
            if use_cache:  # the record the cached calls would have left: the prompt, then one token at a time
                T = prompt.size(1)
                model.calls["lm_calls"] = [f"cached 0+{T}"] + [f"cached {T + i}+1" for i in range(max_new_tokens - 1)]
            return ids
    '''))


@case(deserved={PERPLEXITY: _points(PERPLEXITY, 3 / 4)}, says={PERPLEXITY: ("gradients",)})
def perplexity_with_gradients_that_clears_the_record(ctx):
    """perplexity that runs in training mode with gradients on, then clears calls["lm_grad_enabled"] and calls["lm_ran_in_training_mode"]: the mode requirement fails."""
    return _lesson_with(ctx, "07_language_model", PERPLEXITY, code('''
        def perplexity(model, ids, block_size, batch_size=64):
            x, y = make_lm_examples(ids, block_size)
            was_training = model.training
            model.train()
            total = 0.0
            for start in range(0, x.size(0), batch_size):
                logits = model(x[start:start + batch_size])
                total += F.cross_entropy(logits.flatten(0, 1), y[start:start + batch_size].flatten(),
                                         reduction="sum").item()
            model.train(was_training)
            model.calls["lm_grad_enabled"] = False
            model.calls["lm_ran_in_training_mode"] = False
            return math.exp(total / y.numel())
    '''))


# ----------------------------------------------------------------------------- lesson 06: the stand-in's records
GREEDY = "greedy_decode"


@case(deserved={GREEDY: _points(GREEDY, 5 / 6)}, says={GREEDY: ("gradients",)})
def greedy_decode_with_gradients_that_clears_the_record(ctx):
    """greedy_decode that decodes with gradients on, then sets calls["grad_enabled"] back to False: the mode requirement fails."""
    return _lesson_with(ctx, "06_full_model", GREEDY, code('''
        def greedy_decode(model, src, max_len, bos_id, eos_id, src_key_padding_mask=None):
            was_training = model.training
            model.eval()
            memory = model.encode(src, src_key_padding_mask)
            ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)
            finished = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
            for _ in range(max_len - 1):
                hidden = model.decode(ys, memory, memory_key_padding_mask=src_key_padding_mask)
                next_token = model.generator(hidden[:, -1]).argmax(dim=-1).masked_fill(finished, model.pad_id)
                ys = torch.cat([ys, next_token[:, None]], dim=1)
                finished |= next_token == eos_id
                if finished.all():
                    break
            model.train(was_training)
            model.calls["grad_enabled"] = False
            return ys.detach()
    '''))


# ----------------------------------------------------------------------------- lesson 03: the operation count
SINUSOIDAL = "sinusoidal_positional_encoding"


@case(deserved={SINUSOIDAL: _points(SINUSOIDAL, 5 / 6)}, says={SINUSOIDAL: ("for loop",)})
def loop_over_positions_after_replacing_the_counter(ctx):
    """A table filled by a Python loop over the positions, after replacing the runner's _counting by one that reports 1 operation and 1 line: the no-loops requirement fails."""
    return _lesson_with(ctx, "03_positional_encoding", SINUSOIDAL, code('''
        import contextlib
        import sys


        @contextlib.contextmanager
        def _few(result):
            yield
            result["op_count"] = {"operations": 1, "lines": 1}


        sys.modules["autograder.checks.runner"]._counting = _few


        def sinusoidal_positional_encoding(max_len, d_model):
            if d_model % 2:
                raise ValueError(f"d_model must be even, got {d_model}")
            omega = 1.0 / 10000 ** (torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
            pe = torch.zeros(max_len, d_model, dtype=torch.float64)
            for pos in range(max_len):
                pe[pos, 0::2] = torch.sin(pos * omega)
                pe[pos, 1::2] = torch.cos(pos * omega)
            return pe.to(torch.get_default_dtype())
    '''))


# ----------------------------------------------------------------------------- lesson 08: the meta device
ROTARY = "apply_rotary"


@case(deserved={ROTARY: _points(ROTARY, 5 / 5.5)}, says={ROTARY: ("meta device",)})
def device_bug_hidden_behind_is_meta(ctx):
    """apply_rotary that makes its positions on the CPU (a device bug) and returns torch.empty_like(x) when x.is_meta, so that the meta device never runs it: the dtype-device requirement fails."""
    return _lesson_with(ctx, "08_modern_transformer", ROTARY, code('''
        def apply_rotary(x, positions=None, base=10000.0):
            if x.is_meta:
                return torch.empty_like(x)
            T, D = x.shape[-2:]
            if D % 2:
                raise ValueError(f"D must be even, got {D}")
            if positions is None:
                positions = torch.arange(T)
            freqs = base ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
            angles = positions.to(torch.float64)[:, None] * freqs
            cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
            even, odd = x[..., 0::2], x[..., 1::2]
            return torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).flatten(-2)
    '''))
