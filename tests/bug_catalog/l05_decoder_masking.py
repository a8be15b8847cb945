"""Wrong answers for lesson 05: causal_mask, padding_mask, DecoderLayer and Decoder."""

from . import PRELUDE as BASE_PRELUDE
from . import Bug, edited

# The earlier lessons' pieces, as the notebook (and the grader's sandbox) give them; within the
# lesson, Decoder builds on DecoderLayer: the reference's here.
PRELUDE = BASE_PRELUDE + '''
from autograder.reference import DecoderLayer, MultiHeadAttention, PositionwiseFeedForward
'''

_LAYER_INIT = '''
class DecoderLayer(nn.Module):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.0, norm_first=False, activation="relu"):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, num_heads, dropout=dropout)
        self.ff = PositionwiseFeedForward(d_model, d_ff, dropout, activation)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.norm3 = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)
'''

_DECODER_INIT = '''
class Decoder(nn.Module):
    def __init__(self, num_layers, d_model, num_heads, d_ff, dropout=0.0, norm_first=False, activation="relu"):
        super().__init__()
        self.layers = nn.ModuleList(
            DecoderLayer(d_model, num_heads, d_ff, dropout, norm_first, activation) for _ in range(num_layers)
        )
        self.norm = nn.LayerNorm(d_model) if norm_first else None
'''

_LAYER_FORWARD = '''
    def forward(self, x, memory, tgt_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        def attend(h):
            return self.dropout(self.self_attn(h, h, h, key_padding_mask=tgt_key_padding_mask, attn_mask=tgt_mask)[0])

        def cross(h):
            return self.dropout(self.cross_attn(h, memory, memory, key_padding_mask=memory_key_padding_mask)[0])

        def feed(h):
            return self.dropout(self.ff(h))

        for sublayer, norm in ((attend, self.norm1), (cross, self.norm2), (feed, self.norm3)):
            x = x + sublayer(norm(x)) if self.norm_first else norm(x + sublayer(x))
        return x
'''

_DECODER_FORWARD = '''
    def forward(self, x, memory, tgt_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        for layer in self.layers:
            x = layer(x, memory, tgt_mask, tgt_key_padding_mask, memory_key_padding_mask)
        return x if self.norm is None else self.norm(x)
'''

BUGS = [
    # ------------------------------------------------------------------ causal_mask
    Bug("causal_mask", "blocks the diagonal", '''
def causal_mask(T, device=None):
    return torch.triu(torch.ones(T, T, dtype=torch.bool, device=device))
''', names="diagonal is blocked"),
    Bug("causal_mask", "a 'keep' mask (lower triangle)", '''
def causal_mask(T, device=None):
    return torch.tril(torch.ones(T, T, device=device)).bool()
''', names="marks what may be attended"),
    Bug("causal_mask", "blocks the past", '''
def causal_mask(T, device=None):
    i = torch.arange(T, device=device)
    return i[None, :] < i[:, None]
''', names="blocks the past"),
    Bug("causal_mask", "a float -inf mask", '''
def causal_mask(T, device=None):
    return torch.triu(torch.full((T, T), float("-inf"), device=device), diagonal=1)
''', names="float mask"),
    Bug("causal_mask", "ones and zeros", '''
def causal_mask(T, device=None):
    return torch.triu(torch.ones(T, T, device=device), diagonal=1)
''', names="return a boolean mask"),
    Bug("causal_mask", "no device argument", '''
def causal_mask(T):
    return torch.ones(T, T, dtype=torch.bool).triu(1)
''', names="has no `device` argument"),
    Bug("causal_mask", "ignores the device", '''
def causal_mask(T, device=None):
    return torch.ones(T, T, dtype=torch.bool).triu(diagonal=1)
''', names="made on the CPU whatever `device` says"),
    Bug("causal_mask", "built from the definition, on the CPU", '''
def causal_mask(T, device=None):
    return torch.tensor([[j > i for j in range(T)] for i in range(T)])
''', names="made on the CPU whatever `device` says"),

    # ------------------------------------------------------------------ padding_mask
    Bug("padding_mask", "marks the real tokens", '''
def padding_mask(tokens, pad_id):
    return tokens != pad_id
''', names="wrong way round"),
    Bug("padding_mask", "compares with 0", '''
def padding_mask(tokens, pad_id):
    return tokens == 0
''', names="compared with 0"),
    Bug("padding_mask", "returns integers", '''
def padding_mask(tokens, pad_id):
    return (tokens == pad_id).int()
''', names="return a boolean mask"),
    Bug("padding_mask", "returns floats", '''
def padding_mask(tokens, pad_id):
    return (tokens == pad_id).float()
''', names="return a boolean mask"),
    Bug("padding_mask", "torch.where with 1 and 0", '''
def padding_mask(tokens, pad_id):
    return torch.where(tokens == pad_id, 1, 0)
''', names="return a boolean mask"),
    Bug("padding_mask", "moves the mask to the CPU", '''
def padding_mask(tokens, pad_id):
    return (tokens == pad_id).cpu()
''', names="on the tokens' device"),
    Bug("padding_mask", "builds the mask from Python lists", '''
def padding_mask(tokens, pad_id):
    return torch.tensor([[token == pad_id for token in row] for row in tokens.tolist()])
''', names="on the tokens' device"),
    # ------------------------------------------------------------------ DecoderLayer
    Bug("DecoderLayer", "memory as the cross-attention's query", _LAYER_INIT + '''
    def forward(self, x, memory, tgt_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.self_attn(h, h, h, key_padding_mask=tgt_key_padding_mask, attn_mask=tgt_mask)[0]
            h = self.norm2(x)
            x = x + self.cross_attn(memory, h, h, key_padding_mask=memory_key_padding_mask)[0]
            return x + self.ff(self.norm3(x))
        x = self.norm1(x + self.self_attn(x, x, x, key_padding_mask=tgt_key_padding_mask, attn_mask=tgt_mask)[0])
        x = self.norm2(x + self.cross_attn(memory, x, x, key_padding_mask=memory_key_padding_mask)[0])
        return self.norm3(x + self.ff(x))
''', names="takes its queries from memory"),
    Bug("DecoderLayer", "no causal mask in self-attention", _LAYER_INIT + '''
    def forward(self, x, memory, tgt_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.self_attn(h, h, h, key_padding_mask=tgt_key_padding_mask)[0]
            h = self.norm2(x)
            x = x + self.cross_attn(h, memory, memory, key_padding_mask=memory_key_padding_mask)[0]
            return x + self.ff(self.norm3(x))
        x = self.norm1(x + self.self_attn(x, x, x, key_padding_mask=tgt_key_padding_mask)[0])
        x = self.norm2(x + self.cross_attn(x, memory, memory, key_padding_mask=memory_key_padding_mask)[0])
        return self.norm3(x + self.ff(x))
''', names="tgt_mask is not passed"),
    Bug("DecoderLayer", "memory padding mask in self-attention", _LAYER_INIT + '''
    def forward(self, x, memory, tgt_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.self_attn(h, h, h, key_padding_mask=memory_key_padding_mask, attn_mask=tgt_mask)[0]
            h = self.norm2(x)
            x = x + self.cross_attn(h, memory, memory, key_padding_mask=tgt_key_padding_mask)[0]
            return x + self.ff(self.norm3(x))
        x = self.norm1(x + self.self_attn(x, x, x, key_padding_mask=memory_key_padding_mask, attn_mask=tgt_mask)[0])
        x = self.norm2(x + self.cross_attn(x, memory, memory, key_padding_mask=tgt_key_padding_mask)[0])
        return self.norm3(x + self.ff(x))
''', names="padding masks are swapped"),
    Bug("DecoderLayer", "norms in the wrong order", _LAYER_INIT + '''
    def forward(self, x, memory, tgt_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.self_attn(h, h, h, key_padding_mask=tgt_key_padding_mask, attn_mask=tgt_mask)[0]
            h = self.norm3(x)
            x = x + self.cross_attn(h, memory, memory, key_padding_mask=memory_key_padding_mask)[0]
            return x + self.ff(self.norm2(x))
        x = self.norm1(x + self.self_attn(x, x, x, key_padding_mask=tgt_key_padding_mask, attn_mask=tgt_mask)[0])
        x = self.norm3(x + self.cross_attn(x, memory, memory, key_padding_mask=memory_key_padding_mask)[0])
        return self.norm2(x + self.ff(x))
''', names="wrong order"),
    Bug("DecoderLayer", "NaN when a row's memory is all padding", '''
def attend(attention, query, key, key_padding_mask=None, attn_mask=None):
    B, L, C = query.shape
    S, H = key.size(1), attention.num_heads
    q = attention.q_proj(query).view(B, L, H, C // H).transpose(1, 2)  # (B, H, L, D)
    k = attention.k_proj(key).view(B, S, H, C // H).transpose(1, 2)  # (B, H, S, D)
    v = attention.v_proj(key).view(B, S, H, C // H).transpose(1, 2)  # (B, H, S, D)
    scores = q @ k.transpose(-2, -1) / math.sqrt(C // H)  # (B, H, L, S)
    if attn_mask is not None:
        scores = scores.masked_fill(attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else scores + attn_mask
    if key_padding_mask is not None:
        scores = scores.masked_fill(key_padding_mask[:, None, None, :], float("-inf"))
    out = F.softmax(scores, dim=-1) @ v  # (B, H, L, D)
    return attention.out_proj(out.transpose(1, 2).reshape(B, L, C))
''' + _LAYER_INIT + '''
    def forward(self, x, memory, tgt_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        if self.norm_first:
            x = x + attend(self.self_attn, self.norm1(x), self.norm1(x), tgt_key_padding_mask, tgt_mask)
            x = x + attend(self.cross_attn, self.norm2(x), memory, memory_key_padding_mask)
            return x + self.ff(self.norm3(x))
        x = self.norm1(x + attend(self.self_attn, x, x, tgt_key_padding_mask, tgt_mask))
        x = self.norm2(x + attend(self.cross_attn, x, memory, memory_key_padding_mask))
        return self.norm3(x + self.ff(x))
''', names="NaN"),
    Bug("DecoderLayer", "forgets the memory padding mask", _LAYER_INIT + '''
    def forward(self, x, memory, tgt_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.self_attn(h, h, h, key_padding_mask=tgt_key_padding_mask, attn_mask=tgt_mask)[0]
            h = self.norm2(x)
            x = x + self.cross_attn(h, memory, memory)[0]
            return x + self.ff(self.norm3(x))
        x = self.norm1(x + self.self_attn(x, x, x, key_padding_mask=tgt_key_padding_mask, attn_mask=tgt_mask)[0])
        x = self.norm2(x + self.cross_attn(x, memory, memory)[0])
        return self.norm3(x + self.ff(x))
''', names="memory_key_padding_mask is not passed"),
    Bug("DecoderLayer", "always post-norm", _LAYER_INIT + '''
    def forward(self, x, memory, tgt_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        x = self.norm1(x + self.self_attn(x, x, x, key_padding_mask=tgt_key_padding_mask, attn_mask=tgt_mask)[0])
        x = self.norm2(x + self.cross_attn(x, memory, memory, key_padding_mask=memory_key_padding_mask)[0])
        return self.norm3(x + self.ff(x))
''', names="norm_first is ignored"),
    Bug("DecoderLayer", "builds its own causal mask", _LAYER_INIT + '''
    def forward(self, x, memory, tgt_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        T = x.size(1)
        causal = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.self_attn(h, h, h, key_padding_mask=tgt_key_padding_mask, attn_mask=causal)[0]
            h = self.norm2(x)
            x = x + self.cross_attn(h, memory, memory, key_padding_mask=memory_key_padding_mask)[0]
            return x + self.ff(self.norm3(x))
        x = self.norm1(x + self.self_attn(x, x, x, key_padding_mask=tgt_key_padding_mask, attn_mask=causal)[0])
        x = self.norm2(x + self.cross_attn(x, memory, memory, key_padding_mask=memory_key_padding_mask)[0])
        return self.norm3(x + self.ff(x))
''', names="builds a causal mask of its own"),
    Bug("DecoderLayer", "normalizes the memory in pre-norm cross-attention", _LAYER_INIT + '''
    def forward(self, x, memory, tgt_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        def self_attention(h):
            return self.dropout(self.self_attn(h, h, h, key_padding_mask=tgt_key_padding_mask, attn_mask=tgt_mask,
                                               need_weights=False)[0])

        def cross_attention(h, m):
            return self.dropout(self.cross_attn(h, m, m, key_padding_mask=memory_key_padding_mask,
                                                need_weights=False)[0])

        if self.norm_first:
            x = x + self_attention(self.norm1(x))
            x = x + cross_attention(self.norm2(x), self.norm2(memory))
            return x + self.dropout(self.ff(self.norm3(x)))
        x = self.norm1(x + self_attention(x))
        x = self.norm2(x + cross_attention(x, memory))
        return self.norm3(x + self.dropout(self.ff(x)))
''', names="the memory is normalized too"),
    Bug("DecoderLayer", "forgets the cross-attention residual", _LAYER_INIT + '''
    def forward(self, x, memory, tgt_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.dropout(self.self_attn(h, h, h, key_padding_mask=tgt_key_padding_mask, attn_mask=tgt_mask)[0])
            h = self.norm2(x)
            x = self.dropout(self.cross_attn(h, memory, memory, key_padding_mask=memory_key_padding_mask)[0])
            return x + self.dropout(self.ff(self.norm3(x)))
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, key_padding_mask=tgt_key_padding_mask,
                                                       attn_mask=tgt_mask)[0]))
        x = self.norm2(self.dropout(self.cross_attn(x, memory, memory, key_padding_mask=memory_key_padding_mask)[0]))
        return self.norm3(x + self.dropout(self.ff(x)))
''', names="residual connection of the cross-attention sublayer is missing"),
    Bug("DecoderLayer", "norm1 and norm2 swapped", _LAYER_INIT + '''
    def forward(self, x, memory, tgt_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        if self.norm_first:
            h = self.norm2(x)
            x = x + self.self_attn(h, h, h, key_padding_mask=tgt_key_padding_mask, attn_mask=tgt_mask)[0]
            h = self.norm1(x)
            x = x + self.cross_attn(h, memory, memory, key_padding_mask=memory_key_padding_mask)[0]
            return x + self.ff(self.norm3(x))
        x = self.norm2(x + self.self_attn(x, x, x, key_padding_mask=tgt_key_padding_mask, attn_mask=tgt_mask)[0])
        x = self.norm1(x + self.cross_attn(x, memory, memory, key_padding_mask=memory_key_padding_mask)[0])
        return self.norm3(x + self.ff(x))
''', names="norm1 goes with self-attention, norm2 with cross-attention"),
    Bug("DecoderLayer", "the causal mask in cross-attention too", _LAYER_INIT + '''
    def forward(self, x, memory, tgt_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.self_attn(h, h, h, key_padding_mask=tgt_key_padding_mask, attn_mask=tgt_mask)[0]
            h = self.norm2(x)
            x = x + self.cross_attn(h, memory, memory, key_padding_mask=memory_key_padding_mask, attn_mask=tgt_mask)[0]
            return x + self.ff(self.norm3(x))
        x = self.norm1(x + self.self_attn(x, x, x, key_padding_mask=tgt_key_padding_mask, attn_mask=tgt_mask)[0])
        x = self.norm2(x + self.cross_attn(x, memory, memory, key_padding_mask=memory_key_padding_mask,
                                           attn_mask=tgt_mask)[0])
        return self.norm3(x + self.ff(x))
''', names="passed to cross-attention too"),
    Bug("DecoderLayer", "cross-attention before self-attention", _LAYER_INIT + '''
    def forward(self, x, memory, tgt_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.cross_attn(h, memory, memory, key_padding_mask=memory_key_padding_mask)[0]
            h = self.norm2(x)
            x = x + self.self_attn(h, h, h, key_padding_mask=tgt_key_padding_mask, attn_mask=tgt_mask)[0]
            return x + self.ff(self.norm3(x))
        x = self.norm1(x + self.cross_attn(x, memory, memory, key_padding_mask=memory_key_padding_mask)[0])
        x = self.norm2(x + self.self_attn(x, x, x, key_padding_mask=tgt_key_padding_mask, attn_mask=tgt_mask)[0])
        return self.norm3(x + self.ff(x))
''', names="cross-attention comes before self-attention"),
    Bug("DecoderLayer", "no dropout on the cross-attention output", _LAYER_INIT + '''
    def forward(self, x, memory, tgt_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.dropout(self.self_attn(h, h, h, key_padding_mask=tgt_key_padding_mask, attn_mask=tgt_mask)[0])
            h = self.norm2(x)
            x = x + self.cross_attn(h, memory, memory, key_padding_mask=memory_key_padding_mask)[0]
            return x + self.dropout(self.ff(self.norm3(x)))
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, key_padding_mask=tgt_key_padding_mask,
                                                       attn_mask=tgt_mask)[0]))
        x = self.norm2(x + self.cross_attn(x, memory, memory, key_padding_mask=memory_key_padding_mask)[0])
        return self.norm3(x + self.dropout(self.ff(x)))
''', names="dropout is missing on the cross-attention"),
    Bug("DecoderLayer", "F.dropout without training=", _LAYER_INIT + '''
    def forward(self, x, memory, tgt_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        p = self.dropout.p
        if self.norm_first:
            h = self.norm1(x)
            x = x + F.dropout(self.self_attn(h, h, h, key_padding_mask=tgt_key_padding_mask, attn_mask=tgt_mask)[0], p)
            h = self.norm2(x)
            x = x + F.dropout(self.cross_attn(h, memory, memory, key_padding_mask=memory_key_padding_mask)[0], p)
            return x + F.dropout(self.ff(self.norm3(x)), p)
        x = self.norm1(x + F.dropout(self.self_attn(x, x, x, key_padding_mask=tgt_key_padding_mask,
                                                    attn_mask=tgt_mask)[0], p))
        x = self.norm2(x + F.dropout(self.cross_attn(x, memory, memory, key_padding_mask=memory_key_padding_mask)[0], p))
        return self.norm3(x + F.dropout(self.ff(x), p))
''', names="applied in eval mode"),
    Bug("DecoderLayer", "cross-attention queries from the layer's input", _LAYER_INIT + '''
    def forward(self, x, memory, tgt_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        if self.norm_first:
            h = self.norm1(x)
            out = x + self.self_attn(h, h, h, key_padding_mask=tgt_key_padding_mask, attn_mask=tgt_mask)[0]
            out = out + self.cross_attn(self.norm2(x), memory, memory, key_padding_mask=memory_key_padding_mask)[0]
            return out + self.ff(self.norm3(out))
        out = self.norm1(x + self.self_attn(x, x, x, key_padding_mask=tgt_key_padding_mask, attn_mask=tgt_mask)[0])
        out = self.norm2(out + self.cross_attn(x, memory, memory, key_padding_mask=memory_key_padding_mask)[0])
        return self.norm3(out + self.ff(out))
''', names="queries are the layer's input"),
    # ------------------------------------------------------------------ Decoder
    Bug("Decoder", "no final norm in a pre-norm stack", _DECODER_INIT + '''
    def forward(self, x, memory, tgt_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        for layer in self.layers:
            x = layer(x, memory, tgt_mask, tgt_key_padding_mask, memory_key_padding_mask)
        return x
''', names="final LayerNorm of a pre-norm stack is missing"),
    Bug("Decoder", "forgets the causal mask", _DECODER_INIT + '''
    def forward(self, x, memory, tgt_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        for layer in self.layers:
            x = layer(x, memory, tgt_key_padding_mask=tgt_key_padding_mask,
                      memory_key_padding_mask=memory_key_padding_mask)
        return x if self.norm is None else self.norm(x)
''', names="tgt_mask is not passed on"),
    Bug("Decoder", "forgets the memory padding mask", _DECODER_INIT + '''
    def forward(self, x, memory, tgt_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        for layer in self.layers:
            x = layer(x, memory, tgt_mask=tgt_mask, tgt_key_padding_mask=tgt_key_padding_mask)
        return x if self.norm is None else self.norm(x)
''', names="memory_key_padding_mask is not passed on"),
    Bug("Decoder", "the first layer over and over", _DECODER_INIT + '''
    def forward(self, x, memory, tgt_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        layer = self.layers[0]
        for _ in self.layers:
            x = layer(x, memory, tgt_mask, tgt_key_padding_mask, memory_key_padding_mask)
        return x if self.norm is None else self.norm(x)
''', names="first layer is used"),
    Bug("Decoder", "every layer reads the input", _DECODER_INIT + '''
    def forward(self, x, memory, tgt_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        for layer in self.layers:
            out = layer(x, memory, tgt_mask, tgt_key_padding_mask, memory_key_padding_mask)
        return out if self.norm is None else self.norm(out)
''', names="every layer gets the decoder's input"),
    Bug("Decoder", "padding masks passed in the wrong order", _DECODER_INIT + '''
    def forward(self, x, memory, tgt_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        for layer in self.layers:
            x = layer(x, memory, tgt_mask, memory_key_padding_mask, tgt_key_padding_mask)
        return x if self.norm is None else self.norm(x)
''', names="in each other's places"),
    Bug("Decoder", "masks to the first layer only", _DECODER_INIT + '''
    def forward(self, x, memory, tgt_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        first, *rest = self.layers
        x = first(x, memory, tgt_mask, tgt_key_padding_mask, memory_key_padding_mask)
        for layer in rest:
            x = layer(x, memory)
        return x if self.norm is None else self.norm(x)
''', names="first layer only"),
    Bug("Decoder", "gives each layer x as its memory", _DECODER_INIT + '''
    def forward(self, x, memory, tgt_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        for layer in self.layers:
            x = layer(x, x, tgt_mask, tgt_key_padding_mask, memory_key_padding_mask)
        return x if self.norm is None else self.norm(x)
''', names="as their memory"),
    Bug("Decoder", "the memory follows the stack", _DECODER_INIT + '''
    def forward(self, x, memory, tgt_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        for layer in self.layers:
            x = layer(x, memory, tgt_mask, tgt_key_padding_mask, memory_key_padding_mask)
            memory = x
        return x if self.norm is None else self.norm(x)
''', names="memory changes along the stack"),
    Bug("Decoder", "final norm in a post-norm stack too", _DECODER_INIT + '''
    def forward(self, x, memory, tgt_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        for layer in self.layers:
            x = layer(x, memory, tgt_mask, tgt_key_padding_mask, memory_key_padding_mask)
        return self.norm(x)
''', names="where it is None"),
    Bug("Decoder", "final norm inside the loop", _DECODER_INIT + '''
    def forward(self, x, memory, tgt_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        for layer in self.layers:
            x = layer(x, memory, tgt_mask, tgt_key_padding_mask, memory_key_padding_mask)
            if self.norm is not None:
                x = self.norm(x)
        return x
''', names="after every layer"),
    Bug("Decoder", "forgets the target padding mask", _DECODER_INIT + '''
    def forward(self, x, memory, tgt_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        for layer in self.layers:
            x = layer(x, memory, tgt_mask=tgt_mask, memory_key_padding_mask=memory_key_padding_mask)
        return x if self.norm is None else self.norm(x)
''', names="tgt_key_padding_mask is not passed on"),
    Bug("Decoder", "layers in reverse order", _DECODER_INIT + '''
    def forward(self, x, memory, tgt_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        for layer in reversed(self.layers):
            x = layer(x, memory, tgt_mask, tgt_key_padding_mask, memory_key_padding_mask)
        return x if self.norm is None else self.norm(x)
''', names="reverse order"),
    # ------------------------------------------------------------------ arguments of the given __init__, modules shared
    Bug("DecoderLayer", "builds the feed-forward network without activation", edited(
        _LAYER_INIT, ("PositionwiseFeedForward(d_model, d_ff, dropout, activation)",
                      "PositionwiseFeedForward(d_model, d_ff, dropout)")) + _LAYER_FORWARD,
        names="activation is not passed down"),
    Bug("DecoderLayer", "cross-attention with the self-attention module", _LAYER_INIT + edited(
        _LAYER_FORWARD, ("self.dropout(self.cross_attn(h, memory", "self.dropout(self.self_attn(h, memory")),
        names="a sublayer is reused: cross-attention uses self.self_attn"),
    Bug("Decoder", "builds the layers without activation", edited(
        _DECODER_INIT, ("DecoderLayer(d_model, num_heads, d_ff, dropout, norm_first, activation)",
                        "DecoderLayer(d_model, num_heads, d_ff, dropout, norm_first)")) + _DECODER_FORWARD,
        names="activation is not passed down"),
    Bug("Decoder", "one layer module repeated", edited(
        _DECODER_INIT, ("""nn.ModuleList(
            DecoderLayer(d_model, num_heads, d_ff, dropout, norm_first, activation) for _ in range(num_layers)
        )""", "nn.ModuleList([DecoderLayer(d_model, num_heads, d_ff, dropout, norm_first, activation)] * num_layers)"))
        + _DECODER_FORWARD, names="share one set of weights"),
]

# Written as a student would, before any diagnosis was designed for them (issue 20): the
# share of these that the checks name measures how well they name kinds of mistakes, not instances.
BUGS += [
    Bug("DecoderLayer", "cross-attention reads x, not memory", _LAYER_INIT + edited(
        _LAYER_FORWARD, ("self.cross_attn(h, memory, memory,", "self.cross_attn(h, h, h,")), names="attends to the decoder's own states"),
    Bug("Decoder", "skips the last layer", _DECODER_INIT + '''
    def forward(self, x, memory, tgt_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        for i in range(len(self.layers) - 1):
            x = self.layers[i](x, memory, tgt_mask, tgt_key_padding_mask, memory_key_padding_mask)
        return x if self.norm is None else self.norm(x)
''', names='the last layer is skipped'),
]

# Written after the kinds above were measured, as a hold-out (issue 20): named by the kinds at
# first try or not, then given the instance or kind that names them.
BUGS += [
    Bug("Decoder", "gives the layers the target's padding as the memory's", _DECODER_INIT + '''
    def forward(self, x, memory, tgt_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        for layer in self.layers:
            x = layer(x, memory, tgt_mask=tgt_mask, tgt_key_padding_mask=tgt_key_padding_mask,
                      memory_key_padding_mask=tgt_key_padding_mask)
        return x if self.norm is None else self.norm(x)
''', names='given as memory_key_padding_mask too'),
    Bug("causal_mask", "made from ones, then cast", '''
def causal_mask(T, device=None):
    return torch.triu(torch.ones(T, T), diagonal=1).bool()
''', names='made on the CPU'),
]
