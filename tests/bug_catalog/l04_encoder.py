"""Wrong answers for lesson 04: PositionwiseFeedForward, EncoderLayer and Encoder."""

from . import PRELUDE as BASE_PRELUDE
from . import Bug, edited

# The lesson's setup cell imports the earlier lessons' pieces from the reference, as the grader's
# sandbox does. Within the lesson, Encoder builds on EncoderLayer, which builds on
# PositionwiseFeedForward: the reference's here. Each bug's __init__ is the one the notebook gives.
PRELUDE = BASE_PRELUDE + '''
from autograder.reference import EncoderLayer, MultiHeadAttention, PositionwiseFeedForward
'''

_FFN_INIT = '''
class PositionwiseFeedForward(nn.Module):
    """FFN(x) = max(0, x W1 + b1) W2 + b2, applied to every position separately."""

    def __init__(self, d_model, d_ff, dropout=0.0, activation="relu"):
        super().__init__()
        if activation not in ("relu", "gelu"):
            raise ValueError(f'activation must be "relu" or "gelu", got {activation!r}')
        self.activation = F.relu if activation == "relu" else F.gelu
        self.linear1 = nn.Linear(d_model, d_ff)  # W1, b1
        self.linear2 = nn.Linear(d_ff, d_model)  # W2, b2
        self.dropout = nn.Dropout(dropout)  # on the hidden layer, as PyTorch does
'''

_LAYER_INIT = '''
class EncoderLayer(nn.Module):
    """Self-attention, then the feed-forward network, each wrapped in a residual connection and a LayerNorm."""

    def __init__(self, d_model, num_heads, d_ff, dropout=0.0, norm_first=False, activation="relu"):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout=dropout)  # lesson 02's
        self.ff = PositionwiseFeedForward(d_model, d_ff, dropout, activation)  # exercise 1's
        self.norm1 = nn.LayerNorm(d_model)  # for the attention sublayer
        self.norm2 = nn.LayerNorm(d_model)  # for the feed-forward sublayer
        self.dropout = nn.Dropout(dropout)  # on each sublayer's output, before the residual sum
'''

_ENCODER_INIT = '''
class Encoder(nn.Module):
    """N encoder layers; a pre-norm stack ends with one more LayerNorm, a post-norm stack does not."""

    def __init__(self, num_layers, d_model, num_heads, d_ff, dropout=0.0, norm_first=False, activation="relu"):
        super().__init__()
        self.layers = nn.ModuleList(
            EncoderLayer(d_model, num_heads, d_ff, dropout, norm_first, activation) for _ in range(num_layers)
        )
        self.norm = nn.LayerNorm(d_model) if norm_first else None  # the final norm of a pre-norm stack
'''

_LAYER_FORWARD = '''
    def forward(self, x, key_padding_mask=None, attn_mask=None):
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.dropout(self.self_attn(h, h, h, key_padding_mask=key_padding_mask, attn_mask=attn_mask)[0])
            return x + self.dropout(self.ff(self.norm2(x)))
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, key_padding_mask=key_padding_mask,
                                                       attn_mask=attn_mask)[0]))
        return self.norm2(x + self.dropout(self.ff(x)))
'''

_ENCODER_FORWARD = '''
    def forward(self, x, key_padding_mask=None):
        for layer in self.layers:
            x = layer(x, key_padding_mask=key_padding_mask)
        return x if self.norm is None else self.norm(x)
'''

BUGS = [
    # ------------------------------------------------------------------ PositionwiseFeedForward
    Bug("PositionwiseFeedForward", "activation after the second layer", _FFN_INIT + '''
    def forward(self, x):
        return self.activation(self.linear2(self.dropout(self.linear1(x))))
''', names="after linear2"),
    Bug("PositionwiseFeedForward", "no activation", _FFN_INIT + '''
    def forward(self, x):
        hidden = self.dropout(self.linear1(x))
        return self.linear2(hidden)
''', names="activation is missing"),
    Bug("PositionwiseFeedForward", "always ReLU", _FFN_INIT + '''
    def forward(self, x):
        return self.linear2(self.dropout(F.relu(self.linear1(x))))
''', names="ignored (ReLU"),
    Bug("PositionwiseFeedForward", "compares the activation function with a string", _FFN_INIT + '''
    def forward(self, x):
        hidden = self.linear1(x)
        hidden = torch.relu(hidden) if self.activation == "relu" else F.gelu(hidden)
        return self.linear2(self.dropout(hidden))
''', names="ignored (GELU"),
    Bug("PositionwiseFeedForward", "activation on the input", _FFN_INIT + '''
    def forward(self, x):
        return self.linear2(self.dropout(self.linear1(self.activation(x))))
''', names="applied to the input"),
    Bug("PositionwiseFeedForward", "forgets dropout", _FFN_INIT + '''
    def forward(self, x):
        return self.linear2(self.activation(self.linear1(x)))
''', names="dropout is missing"),
    Bug("PositionwiseFeedForward", "dropout on the output", _FFN_INIT + '''
    def forward(self, x):
        return self.dropout(self.linear2(self.activation(self.linear1(x))))
''', names="applied to the output"),
    Bug("PositionwiseFeedForward", "F.dropout without training=", _FFN_INIT + '''
    def forward(self, x):
        hidden = F.dropout(self.activation(self.linear1(x)), p=self.dropout.p)
        return self.linear2(hidden)
''', names="applied in eval mode"),
    Bug("PositionwiseFeedForward", "dropout on the input", _FFN_INIT + '''
    def forward(self, x):
        return self.linear2(self.activation(self.linear1(self.dropout(x))))
''', names="applied to the input, before linear1"),
    Bug("PositionwiseFeedForward", "assumes three axes", _FFN_INIT + '''
    def forward(self, x):
        B, T, C = x.shape
        hidden = self.dropout(self.activation(self.linear1(x.reshape(B * T, C))))
        return self.linear2(hidden).reshape(B, T, C)
''', names="any number of leading axes"),
    Bug("PositionwiseFeedForward", "flattens with view", _FFN_INIT + '''
    def forward(self, x):
        flat = x.view(-1, x.size(-1))  # (N, d_model)
        out = self.linear2(self.dropout(self.activation(self.linear1(flat))))
        return out.view(x.shape)
''', names="use .reshape"),
    Bug("PositionwiseFeedForward", "hard-codes float32", _FFN_INIT + '''
    def forward(self, x):
        hidden = self.activation(self.linear1(x)).float()
        return self.linear2(self.dropout(hidden).to(self.linear2.weight.dtype)).float()
''', names="hard-code a dtype"),
    Bug("PositionwiseFeedForward", "detaches the hidden layer", _FFN_INIT + '''
    def forward(self, x):
        hidden = self.activation(self.linear1(x)).detach()
        return self.linear2(self.dropout(hidden))
''', names="detaches the computation"),
    # ------------------------------------------------------------------ EncoderLayer
    Bug("EncoderLayer", "always post-norm", _LAYER_INIT + '''
    def forward(self, x, key_padding_mask=None, attn_mask=None):
        attn, _ = self.self_attn(x, x, x, key_padding_mask=key_padding_mask, attn_mask=attn_mask)
        x = self.norm1(x + self.dropout(attn))
        return self.norm2(x + self.dropout(self.ff(x)))
''', names="norm_first is ignored"),
    Bug("EncoderLayer", "pre-norm and post-norm swapped", _LAYER_INIT + '''
    def forward(self, x, key_padding_mask=None, attn_mask=None):
        if not self.norm_first:
            h = self.norm1(x)
            x = x + self.dropout(self.self_attn(h, h, h, key_padding_mask=key_padding_mask, attn_mask=attn_mask)[0])
            x = x + self.dropout(self.ff(self.norm2(x)))
        else:
            x = self.norm1(x + self.dropout(self.self_attn(x, x, x, key_padding_mask, attn_mask)[0]))
            x = self.norm2(x + self.dropout(self.ff(x)))
        return x
''', names="swapped"),
    Bug("EncoderLayer", "no residual connections", _LAYER_INIT + '''
    def forward(self, x, key_padding_mask=None, attn_mask=None):
        if self.norm_first:
            h = self.norm1(x)
            x = self.self_attn(h, h, h, key_padding_mask=key_padding_mask, attn_mask=attn_mask)[0]
            return self.ff(self.norm2(x))
        x = self.norm1(self.self_attn(x, x, x, key_padding_mask=key_padding_mask, attn_mask=attn_mask)[0])
        return self.norm2(self.ff(x))
''', names="residual connections are missing"),
    Bug("EncoderLayer", "normalizes the sublayer's output only", _LAYER_INIT + '''
    def forward(self, x, key_padding_mask=None, attn_mask=None):
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.self_attn(h, h, h, key_padding_mask=key_padding_mask, attn_mask=attn_mask)[0]
            return x + self.ff(self.norm2(x))
        x = x + self.norm1(self.self_attn(x, x, x, key_padding_mask=key_padding_mask, attn_mask=attn_mask)[0])
        return x + self.norm2(self.ff(x))
''', names="sublayer's output only"),
    Bug("EncoderLayer", "forgets the key padding mask", _LAYER_INIT + '''
    def forward(self, x, key_padding_mask=None, attn_mask=None):
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.dropout(self.self_attn(h, h, h, attn_mask=attn_mask)[0])
            return x + self.dropout(self.ff(self.norm2(x)))
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, attn_mask=attn_mask)[0]))
        return self.norm2(x + self.dropout(self.ff(x)))
''', names="key_padding_mask is not passed"),
    Bug("EncoderLayer", "one LayerNorm for both sublayers", _LAYER_INIT + '''
    def forward(self, x, key_padding_mask=None, attn_mask=None):
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.self_attn(h, h, h, key_padding_mask=key_padding_mask, attn_mask=attn_mask)[0]
            return x + self.ff(self.norm1(x))
        x = self.norm1(x + self.self_attn(x, x, x, key_padding_mask=key_padding_mask, attn_mask=attn_mask)[0])
        return self.norm1(x + self.ff(x))
''', names="norm1 is used for both"),
    Bug("EncoderLayer", "feed-forward on the layer's input", _LAYER_INIT + '''
    def forward(self, x, key_padding_mask=None, attn_mask=None):
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.self_attn(h, h, h, key_padding_mask=key_padding_mask, attn_mask=attn_mask)[0]
            return x + self.ff(self.norm2(x))
        attended = self.norm1(x + self.self_attn(x, x, x, key_padding_mask=key_padding_mask, attn_mask=attn_mask)[0])
        return self.norm2(attended + self.ff(x))
''', names="feed-forward sublayer gets the layer's input"),
    Bug("EncoderLayer", "passes attn_mask where key_padding_mask goes", _LAYER_INIT + '''
    def forward(self, x, key_padding_mask=None, attn_mask=None):
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.self_attn(h, h, h, attn_mask)[0]
            return x + self.ff(self.norm2(x))
        x = self.norm1(x + self.self_attn(x, x, x, attn_mask)[0])
        return self.norm2(x + self.ff(x))
''', names="passed by position"),
    Bug("EncoderLayer", "forgets the attention residual", _LAYER_INIT + '''
    def forward(self, x, key_padding_mask=None, attn_mask=None):
        masks = dict(key_padding_mask=key_padding_mask, attn_mask=attn_mask, need_weights=False)
        if self.norm_first:
            h = self.norm1(x)
            x = self.dropout(self.self_attn(h, h, h, **masks)[0])
            return x + self.dropout(self.ff(self.norm2(x)))
        x = self.norm1(self.dropout(self.self_attn(x, x, x, **masks)[0]))
        return self.norm2(x + self.dropout(self.ff(x)))
''', names="residual connection of the attention sublayer is missing"),
    Bug("EncoderLayer", "forgets the feed-forward residual in pre-norm", _LAYER_INIT + '''
    def forward(self, x, key_padding_mask=None, attn_mask=None):
        masks = dict(key_padding_mask=key_padding_mask, attn_mask=attn_mask, need_weights=False)
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.dropout(self.self_attn(h, h, h, **masks)[0])
            return self.dropout(self.ff(self.norm2(x)))
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, **masks)[0]))
        return self.norm2(x + self.dropout(self.ff(x)))
''', names="residual connection of the feed-forward sublayer is missing"),
    Bug("EncoderLayer", "norm1 and norm2 swapped", _LAYER_INIT + '''
    def forward(self, x, key_padding_mask=None, attn_mask=None):
        masks = dict(key_padding_mask=key_padding_mask, attn_mask=attn_mask, need_weights=False)
        if self.norm_first:
            h = self.norm2(x)
            x = x + self.dropout(self.self_attn(h, h, h, **masks)[0])
            return x + self.dropout(self.ff(self.norm1(x)))
        x = self.norm2(x + self.dropout(self.self_attn(x, x, x, **masks)[0]))
        return self.norm1(x + self.dropout(self.ff(x)))
''', names="norm1 and norm2 are swapped"),
    Bug("EncoderLayer", "forgets the attn_mask", _LAYER_INIT + '''
    def forward(self, x, key_padding_mask=None, attn_mask=None):
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.dropout(self.self_attn(h, h, h, key_padding_mask=key_padding_mask)[0])
            return x + self.dropout(self.ff(self.norm2(x)))
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, key_padding_mask=key_padding_mask)[0]))
        return self.norm2(x + self.dropout(self.ff(x)))
''', names="attn_mask is not passed"),
    Bug("EncoderLayer", "passes no mask at all", _LAYER_INIT + '''
    def forward(self, x, key_padding_mask=None, attn_mask=None):
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.dropout(self.self_attn(h, h, h)[0])
            return x + self.dropout(self.ff(self.norm2(x)))
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x)[0]))
        return self.norm2(x + self.dropout(self.ff(x)))
''', names="neither mask is passed"),
    Bug("EncoderLayer", "no dropout on the attention output", _LAYER_INIT + '''
    def forward(self, x, key_padding_mask=None, attn_mask=None):
        masks = dict(key_padding_mask=key_padding_mask, attn_mask=attn_mask, need_weights=False)
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.self_attn(h, h, h, **masks)[0]
            return x + self.dropout(self.ff(self.norm2(x)))
        x = self.norm1(x + self.self_attn(x, x, x, **masks)[0])
        return self.norm2(x + self.dropout(self.ff(x)))
''', names="dropout is missing on the attention sublayer"),
    Bug("EncoderLayer", "no dropout anywhere", _LAYER_INIT + '''
    def forward(self, x, key_padding_mask=None, attn_mask=None):
        masks = dict(key_padding_mask=key_padding_mask, attn_mask=attn_mask, need_weights=False)
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.self_attn(h, h, h, **masks)[0]
            return x + self.ff(self.norm2(x))
        x = self.norm1(x + self.self_attn(x, x, x, **masks)[0])
        return self.norm2(x + self.ff(x))
''', names="dropout is missing: apply"),
    Bug("EncoderLayer", "F.dropout without training=", _LAYER_INIT + '''
    def forward(self, x, key_padding_mask=None, attn_mask=None):
        p = self.dropout.p
        masks = dict(key_padding_mask=key_padding_mask, attn_mask=attn_mask, need_weights=False)
        if self.norm_first:
            h = self.norm1(x)
            x = x + F.dropout(self.self_attn(h, h, h, **masks)[0], p)
            return x + F.dropout(self.ff(self.norm2(x)), p)
        x = self.norm1(x + F.dropout(self.self_attn(x, x, x, **masks)[0], p))
        return self.norm2(x + F.dropout(self.ff(x), p))
''', names="applied in eval mode"),
    Bug("EncoderLayer", "dropout after the residual sum", _LAYER_INIT + '''
    def forward(self, x, key_padding_mask=None, attn_mask=None):
        masks = dict(key_padding_mask=key_padding_mask, attn_mask=attn_mask, need_weights=False)
        if self.norm_first:
            h = self.norm1(x)
            x = self.dropout(x + self.self_attn(h, h, h, **masks)[0])
            return self.dropout(x + self.ff(self.norm2(x)))
        x = self.norm1(self.dropout(x + self.self_attn(x, x, x, **masks)[0]))
        return self.norm2(self.dropout(x + self.ff(x)))
''', names="after the residual sum"),
    Bug("EncoderLayer", "detaches the attention output", _LAYER_INIT + '''
    def forward(self, x, key_padding_mask=None, attn_mask=None):
        masks = dict(key_padding_mask=key_padding_mask, attn_mask=attn_mask, need_weights=False)
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.dropout(self.self_attn(h, h, h, **masks)[0].detach())
            return x + self.dropout(self.ff(self.norm2(x)))
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, **masks)[0].detach()))
        return self.norm2(x + self.dropout(self.ff(x)))
''', names="detaches the computation"),
    # ------------------------------------------------------------------ Encoder
    Bug("Encoder", "no final norm in a pre-norm stack", _ENCODER_INIT + '''
    def forward(self, x, key_padding_mask=None):
        for layer in self.layers:
            x = layer(x, key_padding_mask=key_padding_mask)
        return x
''', names="final LayerNorm of a pre-norm stack is missing"),
    Bug("Encoder", "final norm in a post-norm stack too", _ENCODER_INIT + '''
    def forward(self, x, key_padding_mask=None):
        for layer in self.layers:
            x = layer(x, key_padding_mask)
        return self.norm(x)
''', names="where it is None"),
    Bug("Encoder", "forgets the padding mask", _ENCODER_INIT + '''
    def forward(self, x, key_padding_mask=None):
        for layer in self.layers:
            x = layer(x)
        return x if self.norm is None else self.norm(x)
''', names="not passed on to the layers"),
    Bug("Encoder", "the first layer over and over", _ENCODER_INIT + '''
    def forward(self, x, key_padding_mask=None):
        for _ in range(len(self.layers)):
            x = self.layers[0](x, key_padding_mask=key_padding_mask)
        if self.norm is not None:
            x = self.norm(x)
        return x
''', names="first layer is used"),
    Bug("Encoder", "every layer reads the input", _ENCODER_INIT + '''
    def forward(self, x, key_padding_mask=None):
        for layer in self.layers:
            out = layer(x, key_padding_mask=key_padding_mask)
        return out if self.norm is None else self.norm(out)
''', names="every layer gets the encoder's input"),
    Bug("Encoder", "final norm inside the loop", _ENCODER_INIT + '''
    def forward(self, x, key_padding_mask=None):
        for layer in self.layers:
            x = layer(x, key_padding_mask=key_padding_mask)
            if self.norm is not None:
                x = self.norm(x)
        return x
''', names="after every layer"),
    Bug("Encoder", "padding mask to the first layer only", _ENCODER_INIT + '''
    def forward(self, x, key_padding_mask=None):
        first, *rest = self.layers
        x = first(x, key_padding_mask=key_padding_mask)
        for layer in rest:
            x = layer(x)
        return x if self.norm is None else self.norm(x)
''', names="first layer only"),
    Bug("Encoder", "layers in reverse order", _ENCODER_INIT + '''
    def forward(self, x, key_padding_mask=None):
        for layer in reversed(self.layers):
            x = layer(x, key_padding_mask=key_padding_mask)
        return x if self.norm is None else self.norm(x)
''', names="reverse order"),
    Bug("Encoder", "final norm before the layers", _ENCODER_INIT + '''
    def forward(self, x, key_padding_mask=None):
        if self.norm is not None:
            x = self.norm(x)
        for layer in self.layers:
            x = layer(x, key_padding_mask=key_padding_mask)
        return x
''', names="applied before the layers"),
    Bug("Encoder", "dropout on the encoder's input", _ENCODER_INIT + '''
    def forward(self, x, key_padding_mask=None):
        x = self.layers[0].dropout(x)  # dropout on the embeddings, as in the paper
        for layer in self.layers:
            x = layer(x, key_padding_mask=key_padding_mask)
        return x if self.norm is None else self.norm(x)
''', names="dropout to its input"),
    # ------------------------------------------------------------------ arguments of the given __init__, modules shared
    Bug("EncoderLayer", "builds the feed-forward network without activation", edited(
        _LAYER_INIT, ("PositionwiseFeedForward(d_model, d_ff, dropout, activation)",
                      "PositionwiseFeedForward(d_model, d_ff, dropout)")) + _LAYER_FORWARD,
        names="activation is not passed down"),
    Bug("Encoder", "builds the layers without activation", edited(
        _ENCODER_INIT, ("EncoderLayer(d_model, num_heads, d_ff, dropout, norm_first, activation)",
                        "EncoderLayer(d_model, num_heads, d_ff, dropout, norm_first)")) + _ENCODER_FORWARD,
        names="activation is not passed down"),
    Bug("Encoder", "one layer module repeated", edited(
        _ENCODER_INIT, ("""nn.ModuleList(
            EncoderLayer(d_model, num_heads, d_ff, dropout, norm_first, activation) for _ in range(num_layers)
        )""", "nn.ModuleList([EncoderLayer(d_model, num_heads, d_ff, dropout, norm_first, activation)] * num_layers)"))
        + _ENCODER_FORWARD, names="share one set of weights"),
]

# Written as a student would, before any diagnosis was designed for them (issue 20): the
# share of these that the checks name measures how well they name kinds of mistakes, not instances.
BUGS += [
    Bug("EncoderLayer", "adds the attention output back instead of x", _LAYER_INIT + '''
    def forward(self, x, key_padding_mask=None, attn_mask=None):
        if self.norm_first:
            h = self.norm1(x)
            a = self.dropout(self.self_attn(h, h, h, key_padding_mask=key_padding_mask, attn_mask=attn_mask)[0])
            x = x + a
            return x + self.dropout(self.ff(self.norm2(x)))
        a = self.dropout(self.self_attn(x, x, x, key_padding_mask=key_padding_mask, attn_mask=attn_mask)[0])
        x1 = self.norm1(x + a)
        return self.norm2(a + self.dropout(self.ff(x1)))
''', names="residual adds back the attention's output"),
    Bug("Encoder", "a residual around every layer", _ENCODER_INIT + '''
    def forward(self, x, key_padding_mask=None):
        for layer in self.layers:
            x = x + layer(x, key_padding_mask=key_padding_mask)
        return x if self.norm is None else self.norm(x)
''', names="adds each layer's input back"),
]

# Written after the kinds above were measured, as a hold-out (issue 20): named by the kinds at
# first try or not, then given the instance or kind that names them.
BUGS += [
    Bug("EncoderLayer", "feeds the attention output to the feed-forward network", _LAYER_INIT + edited(
        _LAYER_FORWARD, ("""        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, key_padding_mask=key_padding_mask,
                                                       attn_mask=attn_mask)[0]))
        return self.norm2(x + self.dropout(self.ff(x)))""", """        a = self.dropout(self.self_attn(x, x, x, key_padding_mask=key_padding_mask, attn_mask=attn_mask)[0])
        x = self.norm1(x + a)
        return self.norm2(x + self.dropout(self.ff(a)))""")), names="gets the attention's output alone"),
]
