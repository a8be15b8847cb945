"""Wrong answers for lesson 03: positional encodings, token embeddings and relative positions."""

from . import PRELUDE as BASE_PRELUDE
from . import Bug

# PositionalEncoding's given __init__ calls the lesson's own sinusoidal_positional_encoding.
PRELUDE = BASE_PRELUDE + """
from autograder.reference import sinusoidal_positional_encoding
"""

_POSITIONAL_INIT = '''
class PositionalEncoding(nn.Module):
    def __init__(self, d_model, max_len=5000, dropout=0.0):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("pe", sinusoidal_positional_encoding(max_len, d_model))
'''

_LEARNED_INIT = '''
class LearnedPositionalEmbedding(nn.Module):
    def __init__(self, max_len, d_model):
        super().__init__()
        self.embedding = nn.Embedding(max_len, d_model)
'''

_TOKEN_INIT = '''
class TokenEmbedding(nn.Module):
    def __init__(self, vocab_size, d_model):
        super().__init__()
        self.d_model = d_model
        self.embedding = nn.Embedding(vocab_size, d_model)
'''

BUGS = [
    # ------------------------------------------------------------------ sinusoidal_positional_encoding
    Bug("sinusoidal_positional_encoding", "swaps sin and cos", '''
def sinusoidal_positional_encoding(max_len, d_model):
    if d_model % 2:
        raise ValueError("d_model must be even")
    position = torch.arange(max_len).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2] = torch.cos(position * div_term)
    pe[:, 1::2] = torch.sin(position * div_term)
    return pe
''', names="sin and cos are swapped"),
    Bug("sinusoidal_positional_encoding", "uses the column index as the exponent", '''
def sinusoidal_positional_encoding(max_len, d_model):
    if d_model % 2 != 0:
        raise ValueError(f"odd d_model: {d_model}")
    i = torch.arange(d_model, dtype=torch.float32)
    angles = torch.arange(max_len, dtype=torch.float32)[:, None] / 10000 ** (i / d_model)
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2] = torch.sin(angles[:, 0::2])
    pe[:, 1::2] = torch.cos(angles[:, 1::2])
    return pe
''', names="(2i+1)/d_model"),
    Bug("sinusoidal_positional_encoding", "exponent i/d_model over the pairs", '''
def sinusoidal_positional_encoding(max_len, d_model):
    if d_model % 2:
        raise ValueError("d_model must be even")
    i = torch.arange(d_model // 2)
    angles = torch.arange(max_len)[:, None] / 10000 ** (i / d_model)
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2] = torch.sin(angles)
    pe[:, 1::2] = torch.cos(angles)
    return pe
''', names="2i/d_model"),
    Bug("sinusoidal_positional_encoding", "counts positions from 1", '''
def sinusoidal_positional_encoding(max_len, d_model):
    if d_model % 2:
        raise ValueError("d_model must be even")
    position = torch.arange(1, max_len + 1, dtype=torch.float32).unsqueeze(1)
    div_term = 10000 ** (torch.arange(0, d_model, 2, dtype=torch.float32) / d_model)
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2] = torch.sin(position / div_term)
    pe[:, 1::2] = torch.cos(position / div_term)
    return pe
''', names="start at 1"),
    Bug("sinusoidal_positional_encoding", "concatenates the sines and the cosines", '''
def sinusoidal_positional_encoding(max_len, d_model):
    if d_model % 2:
        raise ValueError("d_model must be even")
    position = torch.arange(max_len, dtype=torch.float32)[:, None]
    freqs = 1.0 / 10000 ** (torch.arange(0, d_model, 2, dtype=torch.float32) / d_model)
    angles = position * freqs
    return torch.cat([torch.sin(angles), torch.cos(angles)], dim=-1)
''', names="first half"),
    Bug("sinusoidal_positional_encoding", "multiplies instead of dividing", '''
def sinusoidal_positional_encoding(max_len, d_model):
    if d_model % 2:
        raise ValueError("d_model must be even")
    position = torch.arange(max_len).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d_model, 2) * (math.log(10000.0) / d_model))
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe
''', names="multiplied by 10000^(2i/d_model)"),
    Bug("sinusoidal_positional_encoding", "never checks for an odd d_model", '''
def sinusoidal_positional_encoding(max_len, d_model):
    position = torch.arange(max_len).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe
''', names="odd d_model must raise ValueError"),
    Bug("sinusoidal_positional_encoding", "fills the table with a double Python loop", '''
def sinusoidal_positional_encoding(max_len, d_model):
    if d_model % 2:
        raise ValueError("d_model must be even")
    pe = torch.zeros(max_len, d_model)
    for pos in range(max_len):
        for i in range(d_model // 2):
            angle = pos / 10000 ** (2 * i / d_model)
            pe[pos, 2 * i] = math.sin(angle)
            pe[pos, 2 * i + 1] = math.cos(angle)
    return pe
''', names="Python loop over the positions"),
    Bug("sinusoidal_positional_encoding", "loops over the positions, one row at a time", '''
def sinusoidal_positional_encoding(max_len, d_model):
    if d_model % 2:
        raise ValueError("d_model must be even")
    omega = 1.0 / 10000 ** (torch.arange(0, d_model, 2) / d_model)
    rows = []
    for pos in range(max_len):
        rows.append(torch.stack([torch.sin(pos * omega), torch.cos(pos * omega)], dim=-1).flatten())
    return torch.stack(rows)
''', names="Python loop over the positions"),
    Bug("sinusoidal_positional_encoding", "builds the table from nested list comprehensions", '''
def sinusoidal_positional_encoding(max_len, d_model):
    if d_model % 2:
        raise ValueError("d_model must be even")
    return torch.tensor([[f(pos / 10000 ** (2 * i / d_model))
                          for i in range(d_model // 2) for f in (math.sin, math.cos)]
                         for pos in range(max_len)])
''', names="Python loop over the positions"),
    Bug("sinusoidal_positional_encoding", "hard-codes float32", '''
def sinusoidal_positional_encoding(max_len, d_model):
    if d_model % 2:
        raise ValueError("d_model must be even")
    position = torch.arange(max_len, dtype=torch.float64)[:, None]
    omega = 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    pe = torch.zeros(max_len, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(position * omega)
    pe[:, 1::2] = torch.cos(position * omega)
    return pe.float()
''', names="default dtype"),
    # ------------------------------------------------------------------ PositionalEncoding
    Bug("PositionalEncoding", "recomputes the encoding in forward", _POSITIONAL_INIT + '''
    def forward(self, x):
        T, C = x.size(1), x.size(2)
        if T > self.pe.size(0):
            raise ValueError(f"sequence of {T} tokens is longer than max_len={self.pe.size(0)}")
        return self.dropout(x + sinusoidal_positional_encoding(T, C).to(x.device, x.dtype))
''', names="instead of adding the module's buffer"),
    Bug("PositionalEncoding", "takes the length from the batch axis", _POSITIONAL_INIT + '''
    def forward(self, x):
        seq_len = x.size(0)
        if seq_len > self.pe.size(0):
            raise ValueError("sequence too long")
        return self.dropout(x + self.pe[:seq_len])
''', names="batch size is used as the sequence length"),
    Bug("PositionalEncoding", "scales x by sqrt(d_model)", _POSITIONAL_INIT + '''
    def forward(self, x):
        T = x.size(1)
        if T > self.pe.size(0):
            raise ValueError(f"{T} tokens but max_len={self.pe.size(0)}")
        x = x * math.sqrt(x.size(-1))
        return self.dropout(x + self.pe[:T])
''', names="belongs to TokenEmbedding"),
    Bug("PositionalEncoding", "returns the encoding alone", _POSITIONAL_INIT + '''
    def forward(self, x):
        T = x.size(1)
        if T > self.pe.size(0):
            raise ValueError(f"{T} tokens but max_len={self.pe.size(0)}")
        return self.dropout(self.pe[:T])
''', names="returns the encoding alone"),
    Bug("PositionalEncoding", "never checks max_len", _POSITIONAL_INIT + '''
    def forward(self, x):
        return self.dropout(x + self.pe[: x.size(1)])
''', names="longer than max_len must raise ValueError"),
    Bug("PositionalEncoding", "refuses a sequence of exactly max_len tokens", _POSITIONAL_INIT + '''
    def forward(self, x):
        T = x.size(1)
        if T >= self.pe.size(0):
            raise ValueError(f"{T} tokens but max_len={self.pe.size(0)}")
        return self.dropout(x + self.pe[:T])
''', names="exactly max_len tokens must not"),
    Bug("PositionalEncoding", "forgets the dropout", _POSITIONAL_INIT + '''
    def forward(self, x):
        T = x.size(1)
        if T > self.pe.size(0):
            raise ValueError(f"{T} tokens but max_len={self.pe.size(0)}")
        return x + self.pe[:T]
''', names="dropout is never applied"),
    Bug("PositionalEncoding", "drops out x before adding the encoding", _POSITIONAL_INIT + '''
    def forward(self, x):
        T = x.size(1)
        if T > self.pe.size(0):
            raise ValueError(f"{T} tokens but max_len={self.pe.size(0)}")
        return self.dropout(x) + self.pe[:T]
''', names="before the encoding is added"),
    Bug("PositionalEncoding", "applies dropout in eval mode too", _POSITIONAL_INIT + '''
    def forward(self, x):
        T = x.size(1)
        if T > self.pe.size(0):
            raise ValueError(f"{T} tokens but max_len={self.pe.size(0)}")
        return F.dropout(x + self.pe[:T], p=self.dropout.p)
''', names="dropout is applied in eval mode"),
    # ------------------------------------------------------------------ LearnedPositionalEmbedding
    Bug("LearnedPositionalEmbedding", "counts positions from 1", _LEARNED_INIT + '''
    def forward(self, x):
        positions = torch.arange(1, x.size(1) + 1, device=x.device)
        return x + self.embedding(positions)
''', names="start at 1"),
    Bug("LearnedPositionalEmbedding", "takes the length from the batch axis", _LEARNED_INIT + '''
    def forward(self, x):
        positions = torch.arange(x.size(0), device=x.device)
        return x + self.embedding(positions)
''', names="batch size is used as the sequence length"),
    Bug("LearnedPositionalEmbedding", "returns the embeddings alone", _LEARNED_INIT + '''
    def forward(self, x):
        B, T, C = x.shape
        return self.embedding(torch.arange(T, device=x.device))
''', names="position embeddings alone"),
    Bug("LearnedPositionalEmbedding", "detaches the embedding table", _LEARNED_INIT + '''
    def forward(self, x):
        T = x.size(1)
        if T > self.embedding.num_embeddings:
            raise ValueError(f"{T} tokens but max_len={self.embedding.num_embeddings}")
        return x + self.embedding.weight.data[:T]
''', names="detaches the computation"),
    Bug("LearnedPositionalEmbedding", "unsqueezes the wrong axis", _LEARNED_INIT + '''
    def forward(self, x):
        positions = torch.arange(x.size(1), device=x.device)
        return x + self.embedding(positions).unsqueeze(1)
''', names="wrong place"),
    Bug("LearnedPositionalEmbedding", "never checks max_len", _LEARNED_INIT + '''
    def forward(self, x):
        positions = torch.arange(x.size(1), device=x.device)
        return x + self.embedding(positions)
''', names="longer than max_len must raise ValueError"),
    Bug("LearnedPositionalEmbedding", "creates the positions on the CPU", _LEARNED_INIT + '''
    def forward(self, x):
        T = x.size(1)
        if T > self.embedding.num_embeddings:
            raise ValueError(f"{T} tokens but max_len={self.embedding.num_embeddings}")
        return x + self.embedding(torch.arange(T))
''', names="device=x.device"),
    # ------------------------------------------------------------------ TokenEmbedding
    Bug("TokenEmbedding", "forgets the scale", _TOKEN_INIT + '''
    def forward(self, tokens):
        return self.embedding(tokens)
''', names="not scaled"),
    Bug("TokenEmbedding", "multiplies by d_model", _TOKEN_INIT + '''
    def forward(self, tokens):
        return self.embedding(tokens) * self.d_model
''', names="multiplied by d_model"),
    Bug("TokenEmbedding", "divides by sqrt(d_model)", _TOKEN_INIT + '''
    def forward(self, tokens):
        return self.embedding(tokens) / math.sqrt(self.d_model)
''', names="divided by sqrt(d_model)"),
    Bug("TokenEmbedding", "scales by the vocabulary size", _TOKEN_INIT + '''
    def forward(self, tokens):
        return self.embedding(tokens) * math.sqrt(self.embedding.num_embeddings)
''', names="vocabulary size"),
    Bug("TokenEmbedding", "scales by log(d_model)", _TOKEN_INIT + '''
    def forward(self, tokens):
        return self.embedding(tokens) * math.log(self.d_model)
''', names="the paper multiplies them by sqrt(d_model)"),
    Bug("TokenEmbedding", "reads the weight's .data", _TOKEN_INIT + '''
    def forward(self, tokens):
        return self.embedding.weight.data[tokens] * math.sqrt(self.d_model)
''', names="detaches the computation"),
    # ------------------------------------------------------------------ relative_position_matrix
    Bug("relative_position_matrix", "transposes the rotation blocks", '''
def relative_position_matrix(k, d_model):
    M = torch.zeros(d_model, d_model)
    for i in range(d_model // 2):
        angle = k / 10000 ** (2 * i / d_model)
        c, s = math.cos(angle), math.sin(angle)
        M[2 * i, 2 * i], M[2 * i, 2 * i + 1] = c, s
        M[2 * i + 1, 2 * i], M[2 * i + 1, 2 * i + 1] = -s, c
    return M
''', names="by -k instead of +k"),
    Bug("relative_position_matrix", "exponent i/d_model", '''
def relative_position_matrix(k, d_model):
    M = torch.zeros(d_model, d_model)
    for i in range(d_model // 2):
        angle = k / 10000 ** (i / d_model)
        M[2 * i:2 * i + 2, 2 * i:2 * i + 2] = torch.tensor([[math.cos(angle), -math.sin(angle)],
                                                            [math.sin(angle), math.cos(angle)]])
    return M
''', names="2i/d_model"),
    Bug("relative_position_matrix", "multiplies k by the wavelength", '''
def relative_position_matrix(k, d_model):
    wavelengths = 10000 ** (torch.arange(0, d_model, 2, dtype=torch.float32) / d_model)
    angles = k * wavelengths
    cos, sin = torch.cos(angles), torch.sin(angles)
    blocks = [torch.stack([torch.stack([c, -s]), torch.stack([s, c])]) for c, s in zip(cos, sin)]
    return torch.block_diag(*blocks)
''', names="divide by it"),
    Bug("relative_position_matrix", "forgets the frequencies", '''
def relative_position_matrix(k, d_model):
    c, s = math.cos(k), math.sin(k)
    block = torch.tensor([[c, -s], [s, c]])
    return torch.block_diag(*[block] * (d_model // 2))
''', names="same angle k"),
    Bug("relative_position_matrix", "overlapping blocks", '''
def relative_position_matrix(k, d_model):
    M = torch.zeros(d_model, d_model)
    for i in range(d_model // 2):
        angle = k / 10000 ** (2 * i / d_model)
        M[i:i + 2, i:i + 2] = torch.tensor([[math.cos(angle), -math.sin(angle)],
                                            [math.sin(angle), math.cos(angle)]])
    return M
''', names="rotation"),
    Bug("relative_position_matrix", "never checks for an odd d_model", '''
def relative_position_matrix(k, d_model):
    idx = torch.arange(0, d_model, 2)
    angles = k / 10000 ** (idx / d_model)
    M = torch.zeros(d_model, d_model)
    M[idx, idx], M[idx, idx + 1] = torch.cos(angles), -torch.sin(angles)
    M[idx + 1, idx], M[idx + 1, idx + 1] = torch.sin(angles), torch.cos(angles)
    return M
''', names="odd d_model must raise ValueError"),
    Bug("relative_position_matrix", "hard-codes float32", '''
def relative_position_matrix(k, d_model):
    if d_model % 2:
        raise ValueError("d_model must be even")
    idx = torch.arange(0, d_model, 2)
    angles = k / 10000 ** (idx.float() / d_model)
    M = torch.zeros(d_model, d_model, dtype=torch.float32)
    M[idx, idx], M[idx, idx + 1] = torch.cos(angles), -torch.sin(angles)
    M[idx + 1, idx], M[idx + 1, idx + 1] = torch.sin(angles), torch.cos(angles)
    return M
''', names="default dtype"),
]

# Written as a student would, before any diagnosis was designed for them (issue 20): the
# share of these that the checks name measures how well they name kinds of mistakes, not instances.
BUGS += [
    Bug("sinusoidal_positional_encoding", "multiplies by the frequency's inverse", '''
def sinusoidal_positional_encoding(max_len, d_model):
    if d_model % 2:
        raise ValueError("d_model must be even")
    pos = torch.arange(max_len, dtype=torch.float32)[:, None]
    div = 10000 ** (torch.arange(0, d_model, 2, dtype=torch.float32) / d_model)
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2] = torch.sin(pos * div)
    pe[:, 1::2] = torch.cos(pos * div)
    return pe
''', names='multiplied by 10000'),
    Bug("sinusoidal_positional_encoding", "integer division in the exponent", '''
def sinusoidal_positional_encoding(max_len, d_model):
    if d_model % 2:
        raise ValueError("d_model must be even")
    pos = torch.arange(max_len)[:, None]
    i = torch.arange(0, d_model, 2)
    angles = pos / 10000 ** (i // d_model)
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2] = torch.sin(angles)
    pe[:, 1::2] = torch.cos(angles)
    return pe
''', names='integer division'),
    Bug("PositionalEncoding", "slices the table by the batch size", _POSITIONAL_INIT + '''
    def forward(self, x):
        if x.size(1) > self.pe.size(0):
            raise ValueError(f"sequence of {x.size(1)} tokens is longer than max_len={self.pe.size(0)}")
        return self.dropout(x + self.pe[: x.size(0)])
''', names='batch size is used as the sequence length'),
    Bug("TokenEmbedding", "divides by sqrt(d_model)", _TOKEN_INIT + '''
    def forward(self, tokens):
        return self.embedding(tokens) / math.sqrt(self.d_model)
''', names='divided by sqrt(d_model)'),
    Bug("LearnedPositionalEmbedding", "positions made on the CPU", _LEARNED_INIT + '''
    def forward(self, x):
        if x.size(1) > self.embedding.num_embeddings:
            raise ValueError("the sequence is longer than max_len")
        positions = torch.arange(x.size(1))
        return x + self.embedding(positions)
''', names='meta device'),
]

# Written after the kinds above were measured, as a hold-out (issue 20): named by the kinds at
# first try or not, then given the instance or kind that names them.
BUGS += [
    Bug("PositionalEncoding", "dropout on the table before adding it", _POSITIONAL_INIT + '''
    def forward(self, x):
        T = x.size(1)
        if T > self.pe.size(0):
            raise ValueError(f"{T} tokens is more than max_len={self.pe.size(0)}")
        return x + self.dropout(self.pe[:T])
''', names='applied to the table before it is added'),
    Bug("TokenEmbedding", "scales by the square root of the length", _TOKEN_INIT + '''
    def forward(self, tokens):
        return self.embedding(tokens) * math.sqrt(tokens.size(-1))
''', names='the paper multiplies them by sqrt(d_model)'),
    Bug("sinusoidal_positional_encoding", "sines in both columns", '''
def sinusoidal_positional_encoding(max_len, d_model):
    if d_model % 2:
        raise ValueError("d_model must be even")
    angles = torch.arange(max_len)[:, None] / 10000 ** (torch.arange(0, d_model, 2) / d_model)
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2] = torch.sin(angles)
    pe[:, 1::2] = torch.sin(angles)
    return pe
''', names='sine and the cosine of the same angle'),
]
