"""Lesson 03 checks: sinusoidal_positional_encoding, PositionalEncoding, LearnedPositionalEmbedding,
TokenEmbedding and relative_position_matrix.

Public probes are small and shown to students (their expected values are stored as data);
hidden probes add the paper's sizes (d_model=512, max_len=5000), float64 inputs, the longest
allowed sequence and one too long, non-contiguous inputs, gradients and the input's device.
PositionalEncoding probes load a `pe` buffer that differs from the formula, so that a forward
that recomputes the encoding instead of adding the module's buffer is caught. The mistakes
below are what students really write; the grader names the one that reproduces a failing output.
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
from .probes import ExerciseChecks, function_probe, module_probe, on_device, randn, with_gradients

# The contract compares float32 encodings at atol 1e-3: 10000 ** (2i/d) and exp(-2i/d * log 10000),
# both fine ways to write the formula, differ from the correctly rounded values by up to 5e-4 in
# float32 at d_model=512 and position 5000 (the angle pos * omega loses digits as pos grows). Every
# mistake below is off by far more than that.
ENCODING_TOLERANCE = Tolerance(float32=(1e-5, 1e-3), float64=(1e-7, 1e-9))
# A float32 rotation matrix built from k * omega_i is within 6e-6 of the correctly rounded one for
# |k| <= 100 at d_model=512, the largest the probes ask for: the default atol of 1e-5 holds.
ROTATION_TOLERANCE = Tolerance(float32=(1e-4, 1e-5), float64=(1e-7, 1e-9))


# ----------------------------------------------------------------------------- mistakes
def _angles(positions, d_model, exponent="2i", multiply=False):
    """(len(positions), d_model/2) angles pos * omega_i in float64, with one knob turned the wrong way.

    exponent "2i": omega_i = 10000^(-2i/d); "i": 10000^(-i/d); "column": as "2i" for the sines,
    10000^(-(2i+1)/d) for the cosines (the second half of the returned columns). ``multiply``
    multiplies the positions by 10000^(2i/d) instead of dividing.
    """
    i = torch.arange(d_model // 2, dtype=torch.float64)
    power = {"2i": 2 * i / d_model, "i": i / d_model, "column": 2 * i / d_model}[exponent]
    if exponent == "column":
        power = torch.cat([power, (2 * i + 1) / d_model])
    omega = 10000.0 ** power if multiply else 10000.0 ** -power
    return positions.to(torch.float64)[:, None] * omega  # (P, d/2) or (P, d) for "column"


def _encoding(max_len, d_model, exponent="2i", swap=False, start=0, halves=False, multiply=False):
    """A sinusoidal table with one knob turned the wrong way (see _angles)."""
    angles = _angles(torch.arange(start, start + max_len), d_model, exponent, multiply)
    sin_angles, cos_angles = (angles[:, : d_model // 2], angles[:, d_model // 2:]) if exponent == "column" else (angles, angles)
    first, second = (torch.cos(cos_angles), torch.sin(sin_angles)) if swap else (torch.sin(sin_angles), torch.cos(cos_angles))
    if halves:
        pe = torch.cat([first, second], dim=-1)  # (max_len, d_model): [sin..., cos...]
    else:
        pe = torch.stack([first, second], dim=-1).reshape(max_len, d_model)  # sin, cos, sin, cos, ...
    return pe.to(torch.get_default_dtype())


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
    ("the positions start at 1; they start at 0 (position 0 encodes as [0, 1, 0, 1, ...])",
     _mistaken_encoding(start=1)),
    ("the sines fill the first half of the columns and the cosines the second: they alternate, sin in the "
     "even columns (pe[:, 0::2]), cos in the odd ones (pe[:, 1::2])", _mistaken_encoding(halves=True)),
    ("the positions are multiplied by 10000^(2i/d_model); divide by it, so that the frequencies get slower "
     "along the features", _mistaken_encoding(multiply=True)),
]


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
]


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
        raise AssertionError(self.variant)


def _learned_mistake(variant):
    return type(f"LearnedPositionalEmbedding_{variant}", (_LearnedPositionalEmbeddingMistake,), {"variant": variant})


LEARNED_POSITIONAL_EMBEDDING_MISTAKES = [
    ("the positions start at 1; they start at 0: torch.arange(T)", _learned_mistake("from_one")),
    ("the batch size is used as the sequence length: x is (B, T, C), so T = x.size(1)",
     _learned_mistake("batch_as_length")),
    ("forward returns the position embeddings alone: add them to x", _learned_mistake("embedding_only")),
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


def _rotation(k, d_model, exponent="2i", multiply=False, transpose=False, frequency=True):
    """The relative-position matrix with one knob turned the wrong way (see _angles)."""
    angles = _angles(torch.tensor([k]), d_model, exponent, multiply)[0] if frequency else torch.full(
        (d_model // 2,), float(k), dtype=torch.float64)
    cos, sin = torch.cos(angles), torch.sin(angles)
    blocks = torch.stack([torch.stack([cos, -sin], -1), torch.stack([sin, cos], -1)], -2)  # (d/2, 2, 2)
    if transpose:
        blocks = blocks.transpose(-1, -2)
    return torch.block_diag(*blocks).to(torch.get_default_dtype())  # (d_model, d_model)


def _mistaken_rotation(**knobs):
    def rotation(k, d_model):
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
]


# ----------------------------------------------------------------------------- probes
def _encoding_probe(id, title, max_len, d_model, **extra):
    return function_probe(id, title, (max_len, d_model), None, ("encoding",), **extra)


def sinusoidal_public_probes():
    return [
        _encoding_probe("small", "max_len=6, d_model=4", 6, 4),
        _encoding_probe("medium", "max_len=10, d_model=8", 10, 8),
        _encoding_probe("odd", "an odd d_model=5 raises ValueError", 4, 5),
    ]


def sinusoidal_hidden_probes(devices=("cpu",)):
    return sinusoidal_public_probes() + [
        _encoding_probe("paper", "the paper's d_model=512, max_len=5000", 5000, 512),
        _encoding_probe("one-pair", "d_model=2: one (sin, cos) pair", 7, 2),
        _encoding_probe("odd-pairs", "d_model=6: an odd number of pairs", 50, 6),
        _encoding_probe("one-position", "a single position", 1, 16),
        _encoding_probe("wide", "max_len=100, d_model=128", 100, 128),
        _encoding_probe("odd-7", "d_model=7 raises ValueError", 10, 7),
        _encoding_probe("odd-1", "d_model=1 raises ValueError", 3, 1),
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


def positional_encoding_public_probes():
    return [
        _positional_probe("basic", "batch 2, 6 tokens, d_model=8, max_len=10", 2, 6, 8, seed=900, max_len=10),
        _positional_probe("one-sequence", "one sequence of 5 tokens, d_model=4", 1, 5, 4, seed=910, max_len=8),
        _positional_probe("too-long", "8 tokens with max_len=6 raises ValueError", 2, 8, 4, seed=920, max_len=6),
    ]


def positional_encoding_hidden_probes(devices=("cpu",)):
    probes = [
        _positional_probe("float64", "float64, batch 3, 7 tokens, d_model=6", 3, 7, 6, seed=930, max_len=12,
                          dtype="float64"),
        _positional_probe("full-length", "T = max_len", 2, 6, 4, seed=940, max_len=6),
        _positional_probe("one-token", "a single token", 3, 1, 8, seed=950, max_len=10),
        _positional_probe("default-max-len", "the default max_len=5000, 20 tokens", 2, 20, 16, seed=960),
        _positional_probe("dropout-eval", "dropout=0.5 in eval mode (no dropout)", 2, 5, 8, seed=970, max_len=10,
                          dropout=0.5),
        _positional_probe("noncontiguous", "a non-contiguous input", 2, 5, 6, seed=980, max_len=10,
                          noncontiguous=True),
        _positional_probe("too-long-by-one", "max_len + 1 tokens raises ValueError", 1, 7, 4, seed=990, max_len=6),
    ]
    probes.append(with_gradients(_positional_probe("grad", "batch 2, 4 tokens", 2, 4, 6, seed=1000, max_len=8),
                                 PositionalEncoding, seed=1001))
    for device in devices:
        if device != "cpu":
            probes.append(on_device(_positional_probe("device", "batch 2, 4 tokens", 2, 4, 6, seed=1010, max_len=8),
                                    device))
    return positional_encoding_public_probes() + probes


def _learned_probe(id, title, B, T, C, max_len, seed, dtype="float32", **extra):
    x = randn(B, T, C, seed=seed + 100, dtype=dtype)
    return module_probe(id, title, LearnedPositionalEmbedding, (max_len, C), None, (x,), None, seed=seed,
                        dtype=dtype, output_names=("output",), **extra)


def learned_public_probes():
    return [
        _learned_probe("basic", "batch 2, 6 tokens, d_model=8, max_len=10", 2, 6, 8, 10, seed=1100),
        _learned_probe("one-sequence", "one sequence of 4 tokens, d_model=4", 1, 4, 4, 6, seed=1110),
    ]


def learned_hidden_probes(devices=("cpu",)):
    probes = [
        _learned_probe("float64", "float64, batch 3, 7 tokens, d_model=6", 3, 7, 6, 12, seed=1120, dtype="float64"),
        _learned_probe("full-length", "T = max_len", 2, 6, 4, 6, seed=1130),
        _learned_probe("one-token", "a single token", 3, 1, 8, 10, seed=1140),
        _learned_probe("noncontiguous", "a non-contiguous input", 2, 5, 6, 10, seed=1150, noncontiguous=True),
        _learned_probe("wide", "batch 4, 30 tokens, d_model=64, max_len=512", 4, 30, 64, 512, seed=1160),
    ]
    probes.append(with_gradients(_learned_probe("grad", "batch 2, 4 tokens, max_len=8", 2, 4, 6, 8, seed=1170),
                                 LearnedPositionalEmbedding, seed=1171))
    for device in devices:
        if device != "cpu":
            probes.append(on_device(_learned_probe("device", "batch 2, 4 tokens", 2, 4, 6, 8, seed=1180), device))
    return learned_public_probes() + probes


def _tokens(B, T, vocab_size, seed):
    return torch.randint(vocab_size, (B, T), generator=torch.Generator().manual_seed(seed))  # int64


def _token_probe(id, title, B, T, vocab_size, C, seed, dtype="float32", **extra):
    return module_probe(id, title, TokenEmbedding, (vocab_size, C), None, (_tokens(B, T, vocab_size, seed + 100),),
                        None, seed=seed, dtype=dtype, output_names=("embeddings",), **extra)


def token_embedding_public_probes():
    return [
        _token_probe("basic", "batch 2, 5 tokens, vocabulary 10, d_model=4", 2, 5, 10, 4, seed=1200),
        _token_probe("wider", "batch 1, 6 tokens, vocabulary 20, d_model=9", 1, 6, 20, 9, seed=1210),
    ]


def token_embedding_hidden_probes(devices=("cpu",)):
    probes = [
        _token_probe("float64", "float64 weights, batch 3, 7 tokens", 3, 7, 50, 16, seed=1220, dtype="float64"),
        _token_probe("paper", "d_model=512, vocabulary 100", 2, 8, 100, 512, seed=1230),
        _token_probe("one-token", "a single token", 1, 1, 7, 6, seed=1240),
        _token_probe("repeated", "the same few tokens many times", 4, 12, 3, 8, seed=1250),
    ]
    probes.append(with_gradients(_token_probe("grad", "batch 2, 5 tokens", 2, 5, 10, 8, seed=1260),
                                 TokenEmbedding, seed=1261))
    for device in devices:
        if device != "cpu":
            probes.append(on_device(_token_probe("device", "batch 2, 5 tokens", 2, 5, 10, 8, seed=1270), device))
    return token_embedding_public_probes() + probes


def _rotation_probe(id, title, k, d_model):
    return function_probe(id, title, (k, d_model), None, ("M",))


def relative_position_public_probes():
    return [
        _rotation_probe("one-step", "k=1, d_model=4", 1, 4),
        _rotation_probe("zero", "k=0 (the identity), d_model=4", 0, 4),
        _rotation_probe("five", "k=5, d_model=6", 5, 6),
    ]


def relative_position_hidden_probes(devices=("cpu",)):
    return relative_position_public_probes() + [
        _rotation_probe("backwards", "a negative shift, k=-3, d_model=8", -3, 8),
        _rotation_probe("one-pair", "k=2, d_model=2", 2, 2),
        _rotation_probe("zero-wide", "k=0, d_model=64", 0, 64),
        _rotation_probe("paper", "k=7, d_model=512", 7, 512),
        _rotation_probe("far", "k=100, d_model=512", 100, 512),
        _rotation_probe("far-back", "k=-50, d_model=64", -50, 64),
    ]


EXERCISES = [
    ExerciseChecks("sinusoidal_positional_encoding", sinusoidal_positional_encoding, sinusoidal_public_probes,
                   sinusoidal_hidden_probes, SINUSOIDAL_MISTAKES, ENCODING_TOLERANCE),
    ExerciseChecks("PositionalEncoding", PositionalEncoding, positional_encoding_public_probes,
                   positional_encoding_hidden_probes, POSITIONAL_ENCODING_MISTAKES),
    ExerciseChecks("LearnedPositionalEmbedding", LearnedPositionalEmbedding, learned_public_probes,
                   learned_hidden_probes, LEARNED_POSITIONAL_EMBEDDING_MISTAKES),
    ExerciseChecks("TokenEmbedding", TokenEmbedding, token_embedding_public_probes, token_embedding_hidden_probes,
                   TOKEN_EMBEDDING_MISTAKES),
    ExerciseChecks("relative_position_matrix", relative_position_matrix, relative_position_public_probes,
                   relative_position_hidden_probes, RELATIVE_POSITION_MISTAKES, ROTATION_TOLERANCE),
]
