"""Lesson 03 checks: sinusoidal_positional_encoding, PositionalEncoding, LearnedPositionalEmbedding,
TokenEmbedding and relative_position_matrix.

Each exercise's checks are grouped into the requirements its text states (the formula first,
then the ValueErrors, dropout, dtype and device, gradients, "no Python loops"). Public probes are
small and shown to students (their expected values are stored as data); hidden probes try the
same requirements on other sizes and seeds: the paper's sizes (d_model=512, max_len=5000),
other lengths, non-contiguous inputs. PositionalEncoding probes load a `pe` buffer that differs
from the formula, so that a forward that recomputes the encoding instead of adding the module's
buffer is caught. The mistakes below are what students really write; the grader names the one
that reproduces a failing output.
"""

import math

import torch
from ...reference import (
    LearnedPositionalEmbedding,
    PositionalEncoding,
    TokenEmbedding,
    relative_position_matrix,
    sinusoidal_positional_encoding,
)
from ..compare import Tolerance
from .probes import (ExerciseChecks, Requirement, function_probe, module_probe, on_device, randn, requiring,
                     with_gradients)

# The contract compares float32 encodings at atol 1e-3: 10000 ** (2i/d) and exp(-2i/d * log 10000),
# both fine ways to write the formula, differ from the correctly rounded values by up to 5e-4 in
# float32 at d_model=512 and position 5000 (the angle pos * omega loses digits as pos grows). Every
# mistake below is off by far more than that. The only float64 results are those of the probes
# run with float64 as torch's default dtype, which try the dtype alone: a table computed in float32
# and returned in the default dtype meets that requirement, so float64 gets the same tolerance.
ENCODING_TOLERANCE = Tolerance(float32=(1e-5, 1e-3), float64=(1e-5, 1e-3))
# A float32 rotation matrix built from k * omega_i is within 6e-6 of the correctly rounded one for
# |k| <= 100 at d_model=512, the largest the probes ask for: the default atol of 1e-5 holds (and,
# as above, for the float64 results of the default-dtype probes).
ROTATION_TOLERANCE = Tolerance(float32=(1e-4, 1e-5), float64=(1e-4, 1e-5))


# ----------------------------------------------------------------------------- mistakes
def _angles(positions, d_model, exponent="2i", multiply=False):
    """(len(positions), d_model/2) angles pos * omega_i in float64, with one knob turned the wrong way.

    exponent "2i": omega_i = 10000^(-2i/d); "i": 10000^(-i/d); "column": as "2i" for the sines,
    10000^(-(2i+1)/d) for the cosines (the second half of the returned columns). ``multiply``
    multiplies the positions by 10000^(2i/d) instead of dividing.
    """
    i = torch.arange(d_model // 2, dtype=torch.float64)
    power = {"2i": 2 * i / d_model, "i": i / d_model, "column": 2 * i / d_model, "zero": 0 * i}[exponent]
    if exponent == "column":
        power = torch.cat([power, (2 * i + 1) / d_model])
    omega = 10000.0 ** power if multiply else 10000.0 ** -power
    return positions.to(torch.float64)[:, None] * omega  # (P, d/2) or (P, d) for "column"


def _encoding(max_len, d_model, exponent="2i", swap=False, start=0, halves=False, multiply=False, dtype=None):
    """A sinusoidal table with one knob turned the wrong way (see _angles); ``dtype`` a fixed dtype."""
    angles = _angles(torch.arange(start, start + max_len), d_model, exponent, multiply)
    sin_angles, cos_angles = (angles[:, : d_model // 2], angles[:, d_model // 2:]) if exponent == "column" else (angles, angles)
    first, second = (torch.cos(cos_angles), torch.sin(sin_angles)) if swap else (torch.sin(sin_angles), torch.cos(cos_angles))
    if halves:
        pe = torch.cat([first, second], dim=-1)  # (max_len, d_model): [sin..., cos...]
    else:
        pe = torch.stack([first, second], dim=-1).reshape(max_len, d_model)  # sin, cos, sin, cos, ...
    return pe.to(dtype or torch.get_default_dtype())


def _mistaken_encoding(**knobs):
    def encoding(max_len, d_model):
        if d_model % 2:
            raise ValueError(f"d_model must be even, got {d_model}")
        return _encoding(max_len, d_model, **knobs)

    return encoding


SINUSOIDAL_MISTAKES = [
    ("sin and cos are swapped: sin goes in the even columns (2i), cos in the odd ones (2i+1)",
     _mistaken_encoding(swap=True)),
    ("the exponent is i/d_model; it should be 2i/d_model (i counts the (sin, cos) pairs: use "
     "torch.arange(0, d_model, 2) / d_model)", _mistaken_encoding(exponent="i")),
    ("the cos column 2i+1 uses its own exponent (2i+1)/d_model: both columns of a pair share the angle "
     "pos / 10000^(2i/d_model)", _mistaken_encoding(exponent="column")),
    ("the exponent 2i/d_model is 0 for every pair, so every pair turns at the same rate: an integer division "
     "(2i // d_model) or integer tensors; compute it in floating point, torch.arange(0, d_model, 2) / d_model",
     _mistaken_encoding(exponent="zero")),
    ("the positions start at 1; they start at 0 (position 0 encodes as [0, 1, 0, 1, ...])",
     _mistaken_encoding(start=1)),
    ("the sines fill the first half of the columns and the cosines the second: they alternate, sin in the "
     "even columns (pe[:, 0::2]), cos in the odd ones (pe[:, 1::2])", _mistaken_encoding(halves=True)),
    ("the positions are multiplied by 10000^(2i/d_model); divide by it, so that the frequencies get slower "
     "along the features", _mistaken_encoding(multiply=True)),
    ("the table is float32 whatever torch's default dtype is: return it in torch.get_default_dtype() (build it "
     "in float64 and end with .to(torch.get_default_dtype()), or create it without a dtype)",
     _mistaken_encoding(dtype=torch.float32)),
]
SINUSOIDAL_ODD_HINT = ("an odd d_model must raise ValueError: check d_model % 2 before building the table (the last "
                       "sine would have no cosine beside it)")
NO_LOOP_HINT = ("the table is built with a Python loop over the positions: build the whole table with whole-tensor "
                "operations instead (a column of positions times a row of frequencies gives every angle at once)")


class _PositionalEncodingMistake(PositionalEncoding):
    variant = None

    def forward(self, x):
        B, T, C = x.shape
        if self.variant == "recomputed":
            return x + sinusoidal_positional_encoding(T, C).to(x)  # (B, T, C)
        if self.variant == "batch_as_length":
            return x + self.pe[:B]  # (B, C) broadcast: right only when B == 1 or B == T
        if self.variant == "scaled_input":
            return x * math.sqrt(C) + self.pe[:T]
        if self.variant == "encoding_only":
            return self.pe[:T]  # (T, C)
        if self.variant == "no_dropout":
            return x + self.pe[:T]  # (B, T, C)
        if self.variant == "dropout_on_table":
            return x + self.dropout(self.pe[:T])  # (B, T, C)
        if self.variant == "dropout_first":
            return self.dropout(x) + self.pe[:T]  # (B, T, C)
        raise AssertionError(self.variant)


def _positional_encoding_mistake(variant):
    return type(f"PositionalEncoding_{variant}", (_PositionalEncodingMistake,), {"variant": variant})


POSITIONAL_ENCODING_MISTAKES = [
    ("forward recomputes the encoding instead of adding the module's buffer: use self.pe[:T] (it is saved with "
     "the model and follows its device and dtype)", _positional_encoding_mistake("recomputed")),
    ("the batch size is used as the sequence length: x is (B, T, C), so T = x.size(1)",
     _positional_encoding_mistake("batch_as_length")),
    ("x is scaled by sqrt(d_model) before the encoding is added: that scaling belongs to TokenEmbedding; here "
     "just add self.pe[:T]", _positional_encoding_mistake("scaled_input")),
    ("forward returns the encoding alone: add self.pe[:T] to x", _positional_encoding_mistake("encoding_only")),
    ("dropout is never applied: return self.dropout(x + self.pe[:T]) (in training mode it drops; in eval mode it "
     "does nothing)", _positional_encoding_mistake("no_dropout")),
    ("dropout is applied to x before the encoding is added; as in the paper and PyTorch, drop out the sum: "
     "self.dropout(x + self.pe[:T])", _positional_encoding_mistake("dropout_first")),
    ("dropout is applied to the table before it is added; as in the paper and PyTorch, drop out the sum: "
     "self.dropout(x + self.pe[:T])", _positional_encoding_mistake("dropout_on_table")),
]
TOO_LONG_HINT = ("a sequence longer than max_len must raise ValueError, and one of exactly max_len tokens must not: "
                 "compare T = x.size(1) with max_len before adding (if T > max_len: raise ValueError(...))")


class _LearnedPositionalEmbeddingMistake(LearnedPositionalEmbedding):
    variant = None

    def forward(self, x):
        B, T, C = x.shape
        if self.variant == "from_one":
            return x + self.embedding(torch.arange(1, T + 1, device=x.device))
        if self.variant == "batch_as_length":
            return x + self.embedding(torch.arange(B, device=x.device))  # (B, C) broadcast
        if self.variant == "embedding_only":
            return self.embedding(torch.arange(T, device=x.device))  # (T, C)
        if self.variant == "wrong_axis":
            return x + self.embedding(torch.arange(T, device=x.device)).unsqueeze(1)  # (T, 1, C) + (B, T, C)
        raise AssertionError(self.variant)


def _learned_mistake(variant):
    return type(f"LearnedPositionalEmbedding_{variant}", (_LearnedPositionalEmbeddingMistake,), {"variant": variant})


LEARNED_POSITIONAL_EMBEDDING_MISTAKES = [
    ("the positions start at 1; they start at 0: torch.arange(T)", _learned_mistake("from_one")),
    ("the batch size is used as the sequence length: x is (B, T, C), so T = x.size(1)",
     _learned_mistake("batch_as_length")),
    ("forward returns the position embeddings alone: add them to x", _learned_mistake("embedding_only")),
    ("the position embeddings get their new axis in the wrong place: self.embedding(positions) is (T, C) and "
     "broadcasts over the batch as it is (or unsqueeze(0), to (1, T, C)), not unsqueeze(1), which makes (T, 1, C)",
     _learned_mistake("wrong_axis")),
]


class _TokenEmbeddingMistake(TokenEmbedding):
    scale = None

    def forward(self, tokens):
        return self.embedding(tokens) * self.scale(self)


def _token_mistake(name, scale):
    return type(f"TokenEmbedding_{name}", (_TokenEmbeddingMistake,), {"scale": staticmethod(scale)})


TOKEN_EMBEDDING_MISTAKES = [
    ("the embeddings are not scaled: multiply them by math.sqrt(d_model)", _token_mistake("unscaled", lambda m: 1.0)),
    ("the embeddings are multiplied by d_model; the paper multiplies them by its square root, math.sqrt(d_model)",
     _token_mistake("times_d_model", lambda m: m.d_model)),
    ("the embeddings are divided by sqrt(d_model); multiply them by it",
     _token_mistake("divided", lambda m: 1 / math.sqrt(m.d_model))),
    ("the embeddings are scaled by the square root of the vocabulary size; the scale is math.sqrt(d_model)",
     _token_mistake("sqrt_vocab", lambda m: math.sqrt(m.embedding.num_embeddings))),
]


def _rotation(k, d_model, exponent="2i", multiply=False, transpose=False, frequency=True, dtype=None):
    """The relative-position matrix with one knob turned the wrong way (see _angles); ``dtype`` a fixed dtype."""
    angles = _angles(torch.tensor([k]), d_model, exponent, multiply)[0] if frequency else torch.full(
        (d_model // 2,), float(k), dtype=torch.float64)
    cos, sin = torch.cos(angles), torch.sin(angles)
    blocks = torch.stack([torch.stack([cos, -sin], -1), torch.stack([sin, cos], -1)], -2)  # (d/2, 2, 2)
    if transpose:
        blocks = blocks.transpose(-1, -2)
    return torch.block_diag(*blocks).to(dtype or torch.get_default_dtype())  # (d_model, d_model)


def _mistaken_rotation(**knobs):
    def rotation(k, d_model):
        if d_model % 2:
            raise ValueError(f"d_model must be even, got {d_model}")
        return _rotation(k, d_model, **knobs)

    return rotation


RELATIVE_POSITION_MISTAKES = [
    ("M turns every (sin, cos) pair by -k instead of +k: it is the transpose of the right matrix. With row "
     "vectors, PE[pos] @ M, each 2x2 block is [[cos, -sin], [sin, cos]] of the angle k * omega_i",
     _mistaken_rotation(transpose=True)),
    ("the exponent is i/d_model; it should be 2i/d_model (omega_i = 1 / 10000^(2i/d_model), i counting the pairs)",
     _mistaken_rotation(exponent="i")),
    ("k is multiplied by 10000^(2i/d_model); divide by it: the angle is k * omega_i, omega_i = 1 / 10000^(2i/d_model)",
     _mistaken_rotation(multiply=True)),
    ("every pair turns by the same angle k: pair i turns by k * omega_i, omega_i = 1 / 10000^(2i/d_model)",
     _mistaken_rotation(frequency=False)),
    ("M is float32 whatever torch's default dtype is: return it in torch.get_default_dtype() (or create it "
     "without a dtype)", _mistaken_rotation(dtype=torch.float32)),
]
ROTATION_ODD_HINT = "an odd d_model must raise ValueError, as in exercise 1: check d_model % 2 first"


# ----------------------------------------------------------------------------- probes
def _encoding_probe(id, title, max_len, d_model, **extra):
    return function_probe(id, title, (max_len, d_model), None, ("encoding",), **extra)


def _odd_encoding_probe(id, title, max_len, d_model):
    return _encoding_probe(id, title, max_len, d_model, hint=SINUSOIDAL_ODD_HINT)


def _loop_free_probe(id, title, max_len, d_model):
    """"No Python loop" is read in the answer cell's source (static.no_loops), which the grader holds. A caller
    without the source falls back on the operations counted in the student's process: a loop over the
    positions grows with max_len, a whole-tensor answer takes the same dozen or so at every length."""
    return _encoding_probe(id, title, max_len, d_model, source_rule="no-loops", count_ops=True,
                           op_limit={"at_most": 64, "size": f"max_len={max_len}", "advice": NO_LOOP_HINT})


SINUSOIDAL_REQUIREMENTS = (
    Requirement("formula", "PE[pos, 2i] = sin(pos / 10000^(2i/d_model)), PE[pos, 2i+1] = cos(same), for "
                           "pos = 0 .. max_len-1 (within 1e-3 in float32)", 3),
    Requirement("odd-d-model", "an odd d_model raises ValueError"),
    Requirement("default-dtype", "returns torch's default dtype (float64 when that is the default)"),
    Requirement("no-loops", "builds the table with whole-tensor operations: the answer cell has no Python loop "
                            "(for, while, comprehension, map, recursion) but over a tuple written out"),
)


def sinusoidal_public_probes():
    return [
        *requiring("formula", [
            _encoding_probe("small", "max_len=6, d_model=4", 6, 4),
            _encoding_probe("medium", "max_len=10, d_model=8", 10, 8),
        ]),
        *requiring("odd-d-model", [_odd_encoding_probe("odd", "an odd d_model=5 raises ValueError", 4, 5)]),
        *requiring("default-dtype", [
            _encoding_probe("float64-default", "float64 as torch's default dtype, max_len=6, d_model=4", 6, 4,
                            default_dtype="float64"),
        ]),
        *requiring("no-loops", [_loop_free_probe("loop-free", "the source read for Python loops (max_len=256, "
                                                 "d_model=4)", 256, 4)]),
    ]


def sinusoidal_hidden_probes(devices=("cpu",)):
    return sinusoidal_public_probes() + [
        *requiring("formula", [
            _encoding_probe("paper", "the paper's d_model=512, max_len=5000", 5000, 512),
            _encoding_probe("one-pair", "d_model=2: one (sin, cos) pair", 7, 2),
            _encoding_probe("odd-pairs", "d_model=6: an odd number of pairs", 50, 6),
            _encoding_probe("one-position", "a single position", 1, 16),
            _encoding_probe("wide", "max_len=100, d_model=128", 100, 128),
        ]),
        *requiring("odd-d-model", [
            _odd_encoding_probe("odd-7", "d_model=7 raises ValueError", 10, 7),
            _odd_encoding_probe("odd-1", "d_model=1 raises ValueError", 3, 1),
        ]),
        *requiring("default-dtype", [
            _encoding_probe("float64-default-wide", "float64 as torch's default dtype, max_len=20, d_model=10", 20, 10,
                            default_dtype="float64"),
        ]),
        *requiring("no-loops", [_loop_free_probe("loop-free-long", "the source read for Python loops (max_len=1000, "
                                                 "d_model=6)", 1000, 6)]),
    ]


def _perturb_buffer(probe, name, seed, scale=0.1):
    """Perturb a buffer of the probe's state_dict, so that only a forward that uses it gets it right."""
    state_dict = dict(probe["construct"]["state_dict"])
    buffer = state_dict[name]
    state_dict[name] = buffer + randn(*buffer.shape, seed=seed, scale=scale).to(buffer.dtype)
    probe["construct"] = dict(probe["construct"], state_dict=state_dict)
    return probe


def _positional_probe(id, title, B, T, C, seed, max_len=None, dropout=None, dtype="float32", **extra):
    init_kwargs = {k: v for k, v in (("max_len", max_len), ("dropout", dropout)) if v is not None}
    x = randn(B, T, C, seed=seed + 100, dtype=dtype)
    probe = module_probe(id, title, PositionalEncoding, (C,), init_kwargs, (x,), None, seed=seed, dtype=dtype,
                         output_names=("output",), **extra)
    return _perturb_buffer(probe, "pe", seed=seed + 200)


POSITIONAL_ENCODING_REQUIREMENTS = (
    Requirement("adds-buffer", "returns x + self.pe[:T] (the module's buffer), the same rows for every sequence", 3),
    Requirement("max-len", "T > max_len raises ValueError; T = max_len is fine"),
    Requirement("dropout", "applies self.dropout to the sum x + pe, as PyTorch does (nothing is dropped in eval "
                           "mode)"),
    Requirement("dtype-device", "follows the dtype (float64) and device (meta) of the module and its input"),
)


def positional_encoding_public_probes():
    return [
        *requiring("adds-buffer", [
            _positional_probe("basic", "batch 2, 6 tokens, d_model=8, max_len=10", 2, 6, 8, seed=900, max_len=10),
            _positional_probe("one-sequence", "one sequence of 5 tokens, d_model=4", 1, 5, 4, seed=910, max_len=8),
        ]),
        *requiring("max-len", [
            _positional_probe("too-long", "8 tokens with max_len=6 raises ValueError", 2, 8, 4, seed=920, max_len=6,
                              hint=TOO_LONG_HINT),
            _positional_probe("full-length", "T = max_len = 6 is allowed", 2, 6, 4, seed=940, max_len=6,
                              hint=TOO_LONG_HINT),
        ]),
        *requiring("dropout", [
            _positional_probe("dropout-eval", "dropout=0.5 in eval mode (no dropout)", 2, 5, 8, seed=970, max_len=10,
                              dropout=0.5),
            _positional_probe("dropout-train", "dropout=1.0 in training mode (every value dropped)", 2, 5, 8,
                              seed=975, max_len=10, dropout=1.0, training=True),
        ]),
        *requiring("dtype-device", [
            _positional_probe("float64", "float64, batch 3, 7 tokens, d_model=6", 3, 7, 6, seed=930, max_len=12,
                              dtype="float64"),
            _positional_probe("meta", "module and input on the meta device", 2, 4, 8, seed=935, max_len=10,
                              device="meta"),
        ]),
    ]


def positional_encoding_hidden_probes(devices=("cpu",)):
    probes = [
        *requiring("adds-buffer", [
            _positional_probe("one-token", "a single token", 3, 1, 8, seed=950, max_len=10),
            _positional_probe("default-max-len", "the default max_len=5000, 20 tokens", 2, 20, 16, seed=960),
            _positional_probe("noncontiguous", "a non-contiguous input", 2, 5, 6, seed=980, max_len=10,
                              noncontiguous=True),
        ]),
        *requiring("max-len", [
            _positional_probe("too-long-by-one", "max_len + 1 tokens raises ValueError", 3, 7, 4, seed=990, max_len=6,
                              hint=TOO_LONG_HINT),
            _positional_probe("full-length-2", "T = max_len = 9 is allowed", 3, 9, 6, seed=995, max_len=9,
                              hint=TOO_LONG_HINT),
        ]),
        *requiring("dropout", [
            _positional_probe("dropout-eval-2", "dropout=0.3 in eval mode, batch 3, 4 tokens", 3, 4, 6, seed=1020,
                              max_len=8, dropout=0.3),
            _positional_probe("dropout-train-2", "dropout=1.0 in training mode, batch 3, 7 tokens", 3, 7, 4,
                              seed=1025, max_len=9, dropout=1.0, training=True),
        ]),
        *requiring("dtype-device", [
            _positional_probe("float64-2", "float64, batch 2, 5 tokens, d_model=4", 2, 5, 4, seed=1030, max_len=8,
                              dtype="float64"),
            _positional_probe("meta-2", "on the meta device, batch 3, 6 tokens", 3, 6, 6, seed=1035, max_len=12,
                              device="meta"),
            *[on_device(_positional_probe("device", "batch 2, 4 tokens", 2, 4, 6, seed=1010, max_len=8), device)
              for device in devices if device != "cpu"],
        ]),
    ]
    return positional_encoding_public_probes() + probes


def _learned_probe(id, title, B, T, C, max_len, seed, dtype="float32", **extra):
    x = randn(B, T, C, seed=seed + 100, dtype=dtype)
    return module_probe(id, title, LearnedPositionalEmbedding, (max_len, C), None, (x,), None, seed=seed,
                        dtype=dtype, output_names=("output",), **extra)


LEARNED_REQUIREMENTS = (
    Requirement("adds-rows", "returns x + self.embedding(positions 0 .. T-1), the same rows for every sequence", 3),
    Requirement("max-len", "T > max_len raises ValueError; T = max_len is fine"),
    Requirement("dtype-device", "creates the positions on x's device (meta) and follows the dtype (float64)"),
    Requirement("gradients", "is differentiable: gradients reach x and self.embedding.weight"),
)


def learned_public_probes():
    return [
        *requiring("adds-rows", [
            _learned_probe("basic", "batch 2, 6 tokens, d_model=8, max_len=10", 2, 6, 8, 10, seed=1100),
            _learned_probe("one-sequence", "one sequence of 4 tokens, d_model=4", 1, 4, 4, 6, seed=1110),
        ]),
        *requiring("max-len", [
            _learned_probe("too-long", "8 tokens with max_len=6 raises ValueError", 2, 8, 4, 6, seed=1190,
                           hint=TOO_LONG_HINT),
            _learned_probe("full-length", "T = max_len = 6 is allowed", 2, 6, 4, 6, seed=1130, hint=TOO_LONG_HINT),
        ]),
        *requiring("dtype-device", [
            _learned_probe("float64", "float64, batch 3, 7 tokens, d_model=6", 3, 7, 6, 12, seed=1120, dtype="float64"),
            _learned_probe("meta", "module and input on the meta device", 2, 5, 8, 10, seed=1125, device="meta"),
        ]),
        *requiring("gradients", [
            with_gradients(_learned_probe("grad", "batch 2, 4 tokens, max_len=8", 2, 4, 6, 8, seed=1170),
                           LearnedPositionalEmbedding, seed=1171),
        ]),
    ]


def learned_hidden_probes(devices=("cpu",)):
    probes = [
        *requiring("adds-rows", [
            _learned_probe("one-token", "a single token", 3, 1, 8, 10, seed=1140),
            _learned_probe("noncontiguous", "a non-contiguous input", 2, 5, 6, 10, seed=1150, noncontiguous=True),
            _learned_probe("wide", "batch 4, 30 tokens, d_model=64, max_len=512", 4, 30, 64, 512, seed=1160),
        ]),
        *requiring("max-len", [
            _learned_probe("too-long-by-one", "max_len + 1 tokens raises ValueError", 3, 9, 6, 8, seed=1195,
                           hint=TOO_LONG_HINT),
            _learned_probe("full-length-2", "T = max_len = 9 is allowed", 3, 9, 6, 9, seed=1135, hint=TOO_LONG_HINT),
        ]),
        *requiring("dtype-device", [
            _learned_probe("float64-2", "float64, batch 2, 5 tokens, d_model=4", 2, 5, 4, 8, seed=1185,
                           dtype="float64"),
            _learned_probe("meta-2", "on the meta device, batch 3, 7 tokens", 3, 7, 6, 12, seed=1187, device="meta"),
            *[on_device(_learned_probe("device", "batch 2, 4 tokens", 2, 4, 6, 8, seed=1180), device)
              for device in devices if device != "cpu"],
        ]),
        *requiring("gradients", [
            with_gradients(_learned_probe("grad-2", "batch 3, 5 tokens, max_len=7", 3, 5, 4, 7, seed=1175),
                           LearnedPositionalEmbedding, seed=1176),
        ]),
    ]
    return learned_public_probes() + probes


def _tokens(B, T, vocab_size, seed):
    return torch.randint(vocab_size, (B, T), generator=torch.Generator().manual_seed(seed))  # int64


def _token_probe(id, title, B, T, vocab_size, C, seed, dtype="float32", **extra):
    return module_probe(id, title, TokenEmbedding, (vocab_size, C), None, (_tokens(B, T, vocab_size, seed + 100),),
                        None, seed=seed, dtype=dtype, output_names=("embeddings",), **extra)


TOKEN_EMBEDDING_REQUIREMENTS = (
    Requirement("scale", "returns self.embedding(tokens) * sqrt(d_model)", 3),
    Requirement("dtype-device", "follows the dtype of its weights (float64) and the device of the tokens (meta)"),
    Requirement("gradients", "is differentiable: gradients reach self.embedding.weight"),
)


def token_embedding_public_probes():
    return [
        *requiring("scale", [
            _token_probe("basic", "batch 2, 5 tokens, vocabulary 10, d_model=4", 2, 5, 10, 4, seed=1200),
            _token_probe("wider", "batch 1, 6 tokens, vocabulary 20, d_model=9", 1, 6, 20, 9, seed=1210),
        ]),
        *requiring("dtype-device", [
            _token_probe("float64", "float64 weights, batch 3, 7 tokens", 3, 7, 50, 16, seed=1220, dtype="float64"),
            _token_probe("meta", "weights and tokens on the meta device", 2, 5, 10, 8, seed=1225, device="meta"),
        ]),
        *requiring("gradients", [
            with_gradients(_token_probe("grad", "batch 2, 5 tokens", 2, 5, 10, 8, seed=1260), TokenEmbedding,
                           seed=1261),
        ]),
    ]


def token_embedding_hidden_probes(devices=("cpu",)):
    probes = [
        *requiring("scale", [
            _token_probe("paper", "d_model=512, vocabulary 100", 2, 8, 100, 512, seed=1230),
            _token_probe("one-token", "a single token", 1, 1, 7, 6, seed=1240),
            _token_probe("repeated", "the same few tokens many times", 4, 12, 3, 8, seed=1250),
        ]),
        *requiring("dtype-device", [
            _token_probe("float64-2", "float64 weights, batch 2, 4 tokens, d_model=6", 2, 4, 9, 6, seed=1280,
                         dtype="float64"),
            _token_probe("meta-2", "on the meta device, batch 3, 6 tokens", 3, 6, 12, 10, seed=1285, device="meta"),
            *[on_device(_token_probe("device", "batch 2, 5 tokens", 2, 5, 10, 8, seed=1270), device)
              for device in devices if device != "cpu"],
        ]),
        *requiring("gradients", [
            with_gradients(_token_probe("grad-2", "batch 3, 4 tokens, d_model=6", 3, 4, 7, 6, seed=1290),
                           TokenEmbedding, seed=1291),
        ]),
    ]
    return token_embedding_public_probes() + probes


def _rotation_probe(id, title, k, d_model, **extra):
    return function_probe(id, title, (k, d_model), None, ("M",), **extra)


RELATIVE_POSITION_REQUIREMENTS = (
    Requirement("matrix", "M is block-diagonal, block i = [[cos k w_i, -sin k w_i], [sin k w_i, cos k w_i]], so that "
                          "PE[pos + k] = PE[pos] @ M, for k of any sign", 3),
    Requirement("odd-d-model", "an odd d_model raises ValueError"),
    Requirement("default-dtype", "returns torch's default dtype (float64 when that is the default)"),
)


def relative_position_public_probes():
    return [
        *requiring("matrix", [
            _rotation_probe("one-step", "k=1, d_model=4", 1, 4),
            _rotation_probe("zero", "k=0 (the identity), d_model=4", 0, 4),
            _rotation_probe("five", "k=5, d_model=6", 5, 6),
            _rotation_probe("backwards", "a negative shift, k=-3, d_model=8", -3, 8),
        ]),
        *requiring("odd-d-model", [_rotation_probe("odd", "an odd d_model=5 raises ValueError", 1, 5,
                                                   hint=ROTATION_ODD_HINT)]),
        *requiring("default-dtype", [
            _rotation_probe("float64-default", "float64 as torch's default dtype, k=2, d_model=4", 2, 4,
                            default_dtype="float64"),
        ]),
    ]


def relative_position_hidden_probes(devices=("cpu",)):
    return relative_position_public_probes() + [
        *requiring("matrix", [
            _rotation_probe("one-pair", "k=2, d_model=2", 2, 2),
            _rotation_probe("zero-wide", "k=0, d_model=64", 0, 64),
            _rotation_probe("paper", "k=7, d_model=512", 7, 512),
            _rotation_probe("far", "k=100, d_model=512", 100, 512),
            _rotation_probe("far-back", "k=-50, d_model=64", -50, 64),
        ]),
        *requiring("odd-d-model", [
            _rotation_probe("odd-7", "d_model=7 raises ValueError", 3, 7, hint=ROTATION_ODD_HINT),
            _rotation_probe("odd-1", "d_model=1 raises ValueError", 0, 1, hint=ROTATION_ODD_HINT),
        ]),
        *requiring("default-dtype", [
            _rotation_probe("float64-default-2", "float64 as torch's default dtype, k=-3, d_model=6", -3, 6,
                            default_dtype="float64"),
        ]),
    ]


EXERCISES = [
    ExerciseChecks("sinusoidal_positional_encoding", sinusoidal_positional_encoding, sinusoidal_public_probes,
                   sinusoidal_hidden_probes, SINUSOIDAL_MISTAKES, ENCODING_TOLERANCE,
                   requirements=SINUSOIDAL_REQUIREMENTS),
    ExerciseChecks("PositionalEncoding", PositionalEncoding, positional_encoding_public_probes,
                   positional_encoding_hidden_probes, POSITIONAL_ENCODING_MISTAKES,
                   requirements=POSITIONAL_ENCODING_REQUIREMENTS),
    ExerciseChecks("LearnedPositionalEmbedding", LearnedPositionalEmbedding, learned_public_probes,
                   learned_hidden_probes, LEARNED_POSITIONAL_EMBEDDING_MISTAKES, requirements=LEARNED_REQUIREMENTS),
    ExerciseChecks("TokenEmbedding", TokenEmbedding, token_embedding_public_probes, token_embedding_hidden_probes,
                   TOKEN_EMBEDDING_MISTAKES, requirements=TOKEN_EMBEDDING_REQUIREMENTS),
    ExerciseChecks("relative_position_matrix", relative_position_matrix, relative_position_public_probes,
                   relative_position_hidden_probes, RELATIVE_POSITION_MISTAKES, ROTATION_TOLERANCE,
                   requirements=RELATIVE_POSITION_REQUIREMENTS),
]
