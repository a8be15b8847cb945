"""Wrong answers for lesson 06: Transformer, count_parameters, noam_lr and greedy_decode."""

from . import PRELUDE as BASE_PRELUDE
from . import Bug, edited

# The earlier lessons' pieces, as the notebook (and the grader's sandbox) give them.
PRELUDE = BASE_PRELUDE + '''
from autograder.reference import (
    Decoder, Encoder, PositionalEncoding, TokenEmbedding, causal_mask, padding_mask,
)
'''

_INIT = '''
class Transformer(nn.Module):
    def __init__(
        self,
        src_vocab_size,
        tgt_vocab_size,
        d_model=512,
        num_heads=8,
        num_layers=6,
        d_ff=2048,
        dropout=0.1,
        max_len=5000,
        norm_first=False,
        pad_id=0,
        share_embeddings=False,
        activation="relu",
    ):
        super().__init__()
        self.pad_id = pad_id
        self.src_embed = TokenEmbedding(src_vocab_size, d_model)
        self.tgt_embed = TokenEmbedding(tgt_vocab_size, d_model)
        self.pos_enc = PositionalEncoding(d_model, max_len, dropout)
        self.encoder = Encoder(num_layers, d_model, num_heads, d_ff, dropout, norm_first, activation)
        self.decoder = Decoder(num_layers, d_model, num_heads, d_ff, dropout, norm_first, activation)
        self.generator = nn.Linear(d_model, tgt_vocab_size)
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)
        if share_embeddings:
            if src_vocab_size != tgt_vocab_size:
                raise ValueError("share_embeddings needs one vocabulary: src_vocab_size == tgt_vocab_size")
            self.tgt_embed.embedding.weight = self.src_embed.embedding.weight
            self.generator.weight = self.src_embed.embedding.weight
'''

_ENCODE = '''
    def encode(self, src, src_key_padding_mask=None):
        x = self.pos_enc(self.src_embed(src))
        return self.encoder(x, key_padding_mask=src_key_padding_mask)
'''

_DECODE = '''
    def decode(self, tgt, memory, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        y = self.pos_enc(self.tgt_embed(tgt))
        mask = causal_mask(tgt.size(1), device=tgt.device)
        return self.decoder(y, memory, mask, tgt_key_padding_mask, memory_key_padding_mask)
'''

_FORWARD = '''
    def forward(self, src, tgt, src_key_padding_mask=None, tgt_key_padding_mask=None):
        memory = self.encode(src, src_key_padding_mask)
        return self.generator(self.decode(tgt, memory, tgt_key_padding_mask, src_key_padding_mask))
'''

_GREEDY_HEAD = '''
def greedy_decode(model, src, max_len, bos_id, eos_id, src_key_padding_mask=None):
'''

# A right greedy_decode, as a student writes it; most wrong ones are it with a few lines changed.
_GREEDY = _GREEDY_HEAD + '''
    was_training = model.training
    model.eval()
    with torch.no_grad():
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
    return ys
'''


def _greedy(*edits):
    return edited(_GREEDY, *edits)


def _without_no_grad(source):
    """``source`` with the body of its ``with torch.no_grad():`` run as plain code."""
    head, rest = source.split("    with torch.no_grad():\n")
    body, tail = rest.split("    model.train(was_training)\n")
    return head + "".join(line[4:] for line in body.splitlines(True)) + "    model.train(was_training)\n" + tail


BUGS = [
    # ------------------------------------------------------------------ Transformer
    Bug("Transformer", "embeddings not scaled", _INIT + '''
    def encode(self, src, src_key_padding_mask=None):
        x = self.pos_enc(self.src_embed.embedding(src))
        return self.encoder(x, key_padding_mask=src_key_padding_mask)

    def decode(self, tgt, memory, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        y = self.pos_enc(self.tgt_embed.embedding(tgt))
        mask = causal_mask(tgt.size(1), device=tgt.device)
        return self.decoder(y, memory, mask, tgt_key_padding_mask, memory_key_padding_mask)
''' + _FORWARD, names="not scaled by sqrt(d_model)"),
    Bug("Transformer", "no positional encoding on the target", _INIT + _ENCODE + '''
    def decode(self, tgt, memory, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        y = self.tgt_embed(tgt)
        mask = causal_mask(tgt.size(1), device=tgt.device)
        return self.decoder(y, memory, mask, tgt_key_padding_mask, memory_key_padding_mask)
''' + _FORWARD, names="target tokens get no positional encoding"),
    Bug("Transformer", "decodes without the causal mask", _INIT + _ENCODE + '''
    def decode(self, tgt, memory, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        y = self.pos_enc(self.tgt_embed(tgt))
        return self.decoder(y, memory, tgt_key_padding_mask=tgt_key_padding_mask,
                            memory_key_padding_mask=memory_key_padding_mask)
''' + _FORWARD, names="doesn't apply the causal mask"),
    Bug("Transformer", "causal mask from tril", _INIT + _ENCODE + '''
    def decode(self, tgt, memory, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        T = tgt.size(1)
        mask = torch.tril(torch.ones(T, T, dtype=torch.bool, device=tgt.device))
        return self.decoder(self.pos_enc(self.tgt_embed(tgt)), memory, mask, tgt_key_padding_mask,
                            memory_key_padding_mask)
''' + _FORWARD, names="wrong way round"),
    Bug("Transformer", "the decoder attends to the source's padding", _INIT + _ENCODE + _DECODE + '''
    def forward(self, src, tgt, src_key_padding_mask=None, tgt_key_padding_mask=None):
        memory = self.encode(src, src_key_padding_mask)
        return self.generator(self.decode(tgt, memory, tgt_key_padding_mask))
''', names="as memory_key_padding_mask"),
    Bug("Transformer", "softmax in forward", _INIT + _ENCODE + _DECODE + '''
    def forward(self, src, tgt, src_key_padding_mask=None, tgt_key_padding_mask=None):
        memory = self.encode(src, src_key_padding_mask)
        hidden = self.decode(tgt, memory, tgt_key_padding_mask, src_key_padding_mask)
        return F.softmax(self.generator(hidden), dim=-1)
''', names="applies a softmax"),
    Bug("Transformer", "copies the shared matrix instead of sharing it", _INIT.replace(
        '''            self.tgt_embed.embedding.weight = self.src_embed.embedding.weight
            self.generator.weight = self.src_embed.embedding.weight
''', '''            with torch.no_grad():
                self.tgt_embed.embedding.weight.copy_(self.src_embed.embedding.weight)
                self.generator.weight.copy_(self.src_embed.embedding.weight)
''') + _ENCODE + _DECODE + _FORWARD, names="must be one matrix"),
    Bug("Transformer", "infers the padding masks from pad_id", _INIT + _ENCODE + _DECODE + '''
    def forward(self, src, tgt, src_key_padding_mask=None, tgt_key_padding_mask=None):
        if src_key_padding_mask is None:
            src_key_padding_mask = padding_mask(src, self.pad_id)
        if tgt_key_padding_mask is None:
            tgt_key_padding_mask = padding_mask(tgt, self.pad_id)
        memory = self.encode(src, src_key_padding_mask)
        return self.generator(self.decode(tgt, memory, tgt_key_padding_mask, src_key_padding_mask))
''', names="masks are never inferred"),
    Bug("Transformer", "infers the source mask in encode", _INIT + '''
    def encode(self, src, src_key_padding_mask=None):
        if src_key_padding_mask is None:
            src_key_padding_mask = src == self.pad_id
        x = self.pos_enc(self.src_embed(src))
        return self.encoder(x, key_padding_mask=src_key_padding_mask)
''' + _DECODE + _FORWARD, names="masks are never inferred"),
    Bug("Transformer", "infers the target mask in decode", _INIT + _ENCODE + '''
    def decode(self, tgt, memory, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        if tgt_key_padding_mask is None:
            tgt_key_padding_mask = padding_mask(tgt, self.pad_id)
        y = self.pos_enc(self.tgt_embed(tgt))
        mask = causal_mask(tgt.size(1), device=tgt.device)
        return self.decoder(y, memory, mask, tgt_key_padding_mask, memory_key_padding_mask)
''' + _FORWARD, names="masks are never inferred"),
    Bug("Transformer", "adds the positional table itself, without its dropout", _INIT + '''
    def encode(self, src, src_key_padding_mask=None):
        x = self.src_embed(src) + self.pos_enc.pe[:src.size(1)]
        return self.encoder(x, key_padding_mask=src_key_padding_mask)

    def decode(self, tgt, memory, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        y = self.tgt_embed(tgt) + self.pos_enc.pe[:tgt.size(1)]
        mask = causal_mask(tgt.size(1), device=tgt.device)
        return self.decoder(y, memory, mask, tgt_key_padding_mask, memory_key_padding_mask)
''' + _FORWARD, names="without its dropout"),
    Bug("Transformer", "decode applies the generator", _INIT + _ENCODE + '''
    def decode(self, tgt, memory, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        y = self.pos_enc(self.tgt_embed(tgt))
        mask = causal_mask(tgt.size(1), device=tgt.device)
        return self.generator(self.decoder(y, memory, mask, tgt_key_padding_mask, memory_key_padding_mask))

    def forward(self, src, tgt, src_key_padding_mask=None, tgt_key_padding_mask=None):
        memory = self.encode(src, src_key_padding_mask)
        return self.decode(tgt, memory, tgt_key_padding_mask, src_key_padding_mask)
''', names="decode applies the generator"),
    Bug("Transformer", "runs the layers itself and skips the final norms", _INIT + '''
    def encode(self, src, src_key_padding_mask=None):
        x = self.pos_enc(self.src_embed(src))
        for layer in self.encoder.layers:
            x = layer(x, key_padding_mask=src_key_padding_mask)
        return x

    def decode(self, tgt, memory, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        y = self.pos_enc(self.tgt_embed(tgt))
        mask = causal_mask(tgt.size(1), device=tgt.device)
        for layer in self.decoder.layers:
            y = layer(y, memory, mask, tgt_key_padding_mask, memory_key_padding_mask)
        return y
''' + _FORWARD, names="final LayerNorms"),
    Bug("Transformer", "builds the causal mask on the CPU", _INIT + _ENCODE + '''
    def decode(self, tgt, memory, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        y = self.pos_enc(self.tgt_embed(tgt))
        mask = causal_mask(tgt.size(1))
        return self.decoder(y, memory, mask, tgt_key_padding_mask, memory_key_padding_mask)
''' + _FORWARD, names="inputs' device"),
    Bug("Transformer", "a float causal mask of ones", _INIT + _ENCODE + '''
    def decode(self, tgt, memory, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        T = tgt.size(1)
        mask = torch.triu(torch.ones(T, T, device=tgt.device), diagonal=1)
        return self.decoder(self.pos_enc(self.tgt_embed(tgt)), memory, mask, tgt_key_padding_mask,
                            memory_key_padding_mask)
''' + _FORWARD, names="sees the future"),
    Bug("Transformer", "drops the target padding mask", _INIT + _ENCODE + _DECODE + '''
    def forward(self, src, tgt, src_key_padding_mask=None, tgt_key_padding_mask=None):
        memory = self.encode(src, src_key_padding_mask)
        return self.generator(self.decode(tgt, memory, memory_key_padding_mask=src_key_padding_mask))
''', names="tgt_key_padding_mask is not passed"),
    Bug("Transformer", "the encoder never gets the source padding mask", _INIT + '''
    def encode(self, src, src_key_padding_mask=None):
        return self.encoder(self.pos_enc(self.src_embed(src)))
''' + _DECODE + _FORWARD, names="not passed to the encoder"),
    Bug("Transformer", "encodes without gradients", _INIT + _ENCODE + _DECODE + '''
    def forward(self, src, tgt, src_key_padding_mask=None, tgt_key_padding_mask=None):
        with torch.no_grad():
            memory = self.encode(src, src_key_padding_mask)
        return self.generator(self.decode(tgt, memory, tgt_key_padding_mask, src_key_padding_mask))
''', names="detaches the computation"),
    # ------------------------------------------------------------------ count_parameters
    Bug("Transformer", "builds the stacks without activation", edited(
        _INIT, ("Encoder(num_layers, d_model, num_heads, d_ff, dropout, norm_first, activation)",
                "Encoder(num_layers, d_model, num_heads, d_ff, dropout, norm_first)"),
        ("Decoder(num_layers, d_model, num_heads, d_ff, dropout, norm_first, activation)",
         "Decoder(num_layers, d_model, num_heads, d_ff, dropout, norm_first)")) + _ENCODE + _DECODE + _FORWARD,
        names="activation is not passed down"),
    Bug("Transformer", "shares one matrix over two vocabularies", edited(
        _INIT, ("""            if src_vocab_size != tgt_vocab_size:
                raise ValueError("share_embeddings needs one vocabulary: src_vocab_size == tgt_vocab_size")
""", "")) + _ENCODE + _DECODE + _FORWARD, names="needs one vocabulary"),
    Bug("count_parameters", "counts the state_dict", '''
def count_parameters(model):
    return sum(t.numel() for t in model.state_dict().values())
''', names="state_dict()"),
    Bug("count_parameters", "counts frozen parameters", '''
def count_parameters(model):
    return sum(p.numel() for p in model.parameters())
''', names="frozen parameters are counted"),
    Bug("count_parameters", "counts a shared weight once per module", '''
def count_parameters(model):
    total = 0
    for module in model.modules():
        for p in module.parameters(recurse=False):
            if p.requires_grad:
                total += p.numel()
    return total
''', names="counted twice"),
    Bug("count_parameters", "named_parameters without removing duplicates", '''
def count_parameters(model):
    return sum(p.numel() for _, p in model.named_parameters(remove_duplicate=False) if p.requires_grad)
''', names="counted twice"),
    Bug("count_parameters", "counts tensors", '''
def count_parameters(model):
    return len([p for p in model.parameters() if p.requires_grad])
''', names="tensors are counted"),
    Bug("count_parameters", "counts buffers too", '''
def count_parameters(model):
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return trainable + sum(b.numel() for b in model.buffers())
''', names="buffers are counted"),
    # ------------------------------------------------------------------ noam_lr
    Bug("noam_lr", "step**0.5", '''
def noam_lr(step, d_model, warmup):
    if step < 1:
        raise ValueError("step counts from 1")
    return d_model ** -0.5 * min(step ** 0.5, step * warmup ** -1.5)
''', names="step**0.5"),
    Bug("noam_lr", "warmup**-0.5", '''
def noam_lr(step, d_model, warmup):
    if step < 1:
        raise ValueError("step counts from 1")
    return d_model ** -0.5 * min(step ** -0.5, step * warmup ** -0.5)
''', names="warmup**-0.5"),
    Bug("noam_lr", "max for min", '''
def noam_lr(step, d_model, warmup):
    if step <= 0:
        raise ValueError(f"step must be positive, got {step}")
    return math.pow(d_model, -0.5) * max(math.pow(step, -0.5), step * math.pow(warmup, -1.5))
''', names="max where"),
    Bug("noam_lr", "no ValueError for step 0", '''
def noam_lr(step, d_model, warmup):
    return d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)
''', names="should raise a ValueError"),
    Bug("noam_lr", "returns 0 for step 0", '''
def noam_lr(step, d_model, warmup):
    if step == 0:
        return 0.0
    return d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)
''', names="should raise a ValueError"),
    Bug("noam_lr", "returns a tensor", '''
def noam_lr(step, d_model, warmup):
    if step < 1:
        raise ValueError("step counts from 1")
    step = torch.tensor(float(step), dtype=torch.float64)
    return d_model ** -0.5 * torch.minimum(step ** -0.5, step * warmup ** -1.5)
''', names="Python float"),
    Bug("noam_lr", "forgets d_model", '''
def noam_lr(step, d_model, warmup):
    if step < 1:
        raise ValueError("step counts from 1")
    return min(1 / math.sqrt(step), step / warmup ** 1.5)
''', names="d_model**-0.5 is missing"),
    # ------------------------------------------------------------------ greedy_decode
    Bug("greedy_decode", "never stops early", _GREEDY_HEAD + '''
    was_training = model.training
    model.eval()
    with torch.no_grad():
        memory = model.encode(src, src_key_padding_mask)
        ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)
        done = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
        for _ in range(max_len - 1):
            logits = model.generator(model.decode(ys, memory, memory_key_padding_mask=src_key_padding_mask)[:, -1])
            token = torch.where(done, torch.full_like(logits[:, 0], model.pad_id, dtype=torch.long), logits.argmax(-1))
            ys = torch.cat([ys, token[:, None]], dim=1)
            done = done | (token == eos_id)
    model.train(was_training)
    return ys
''', names="doesn't stop once every row"),
    Bug("greedy_decode", "keeps generating after eos", _GREEDY_HEAD + '''
    was_training = model.training
    model.eval()
    with torch.no_grad():
        memory = model.encode(src, src_key_padding_mask)
        ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)
        for _ in range(max_len - 1):
            hidden = model.decode(ys, memory, memory_key_padding_mask=src_key_padding_mask)
            next_token = model.generator(hidden[:, -1]).argmax(dim=-1)
            ys = torch.cat([ys, next_token.unsqueeze(1)], dim=1)
            if (ys == eos_id).any(dim=1).all():
                break
    model.train(was_training)
    return ys
''', names="goes on producing tokens"),
    Bug("greedy_decode", "leaves the model in eval mode", _greedy(("    was_training = model.training\n", ""),
                                                               ("    model.train(was_training)\n", "")),
        names="restore it"),
    Bug("greedy_decode", "drops bos from the output", _greedy(("    return ys\n", "    return ys[:, 1:]\n")),
        names="doesn't start with bos_id"),
    Bug("greedy_decode", "reads the first position's logits", _greedy(
        ("            hidden = model.decode(ys, memory, memory_key_padding_mask=src_key_padding_mask)\n"
         "            next_token = model.generator(hidden[:, -1]).argmax(dim=-1).masked_fill(finished, model.pad_id)\n",
         "            logits = model.generator(model.decode(ys, memory, memory_key_padding_mask=src_key_padding_mask))\n"
         "            next_token = logits.argmax(dim=-1)[:, 0].masked_fill(finished, model.pad_id)\n")),
        names="first position's logits"),
    Bug("greedy_decode", "decodes with gradients on", _without_no_grad(_GREEDY), names="torch.no_grad()"),
    Bug("greedy_decode", "never switches to eval mode", _greedy(("    was_training = model.training\n    model.eval()\n", ""),
                                                             ("    model.train(was_training)\n", "")),
        names="training mode (dropout on)"),
    Bug("greedy_decode", "forgets the memory padding mask", _greedy(
        ("            hidden = model.decode(ys, memory, memory_key_padding_mask=src_key_padding_mask)\n"
         "            next_token = model.generator(hidden[:, -1]).argmax(dim=-1).masked_fill(finished, model.pad_id)\n",
         "            next_token = model.generator(model.decode(ys, memory)[:, -1]).argmax(dim=-1)\n"
         "            next_token[finished] = model.pad_id\n")),
        names="memory_key_padding_mask"),
    Bug("greedy_decode", "stops when the first row finishes", _greedy(
        ("        finished = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)\n", ""),
        (".argmax(dim=-1).masked_fill(finished, model.pad_id)\n", ".argmax(dim=-1)\n"),
        ("            finished |= next_token == eos_id\n            if finished.all():\n",
         "            if (next_token == eos_id).any():\n")),
        names="stops when the first row"),
    Bug("greedy_decode", "runs the whole model every step", _greedy(
        ("        memory = model.encode(src, src_key_padding_mask)\n", ""),
        ("            hidden = model.decode(ys, memory, memory_key_padding_mask=src_key_padding_mask)\n"
         "            next_token = model.generator(hidden[:, -1]).argmax(dim=-1).masked_fill(finished, model.pad_id)\n",
         "            logits = model(src, ys, src_key_padding_mask=src_key_padding_mask)\n"
         "            next_token = logits[:, -1].argmax(dim=-1).masked_fill(finished, model.pad_id)\n")),
        names="encode the source once"),
    Bug("greedy_decode", "pads with 0", _greedy((".masked_fill(finished, model.pad_id)", ".masked_fill(finished, 0)")),
        names="fill them with model.pad_id"),
    Bug("greedy_decode", "infers the source padding mask", _greedy(
        ("    was_training = model.training\n", "    if src_key_padding_mask is None:\n"
                                              "        src_key_padding_mask = src == model.pad_id\n"
                                              "    was_training = model.training\n")),
        names="masks are never inferred"),
    Bug("greedy_decode", "switches the model to training mode at the end", _greedy(
        ("    was_training = model.training\n", ""), ("    model.train(was_training)\n", "    model.train()\n")),
        names="restore it"),
]

# Written as a student would, before any diagnosis was designed for them (issue 20): the
# share of these that the checks name measures how well they name kinds of mistakes, not instances.
BUGS += [
    Bug("Transformer", "causal mask over the batch size", _INIT + _ENCODE + '''
    def decode(self, tgt, memory, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        y = self.pos_enc(self.tgt_embed(tgt))
        mask = causal_mask(tgt.size(0), device=tgt.device)
        return self.decoder(y, memory, mask, tgt_key_padding_mask, memory_key_padding_mask)
''' + _FORWARD, names='built over the batch size'),
    Bug("Transformer", "the target's padding mask as the memory's", _INIT + _ENCODE + _DECODE + '''
    def forward(self, src, tgt, src_key_padding_mask=None, tgt_key_padding_mask=None):
        memory = self.encode(src, src_key_padding_mask)
        return self.generator(self.decode(tgt, memory, tgt_key_padding_mask, tgt_key_padding_mask))
''', names="target's padding mask where the source's belongs"),
    Bug("Transformer", "encodes the source with the target embedding", _INIT + '''
    def encode(self, src, src_key_padding_mask=None):
        x = self.pos_enc(self.tgt_embed(src))
        return self.encoder(x, key_padding_mask=src_key_padding_mask)
''' + _DECODE + _FORWARD, names='encode uses self.tgt_embed'),
    Bug("noam_lr", "loses the sign of warmup's exponent", '''
def noam_lr(step, d_model, warmup):
    if step < 1:
        raise ValueError("step counts from 1")
    return d_model ** -0.5 * min(step ** -0.5, step * warmup ** 1.5)
''', names='warmup**1.5 where'),
    Bug("greedy_decode", "stops when every token so far is eos", _greedy(
        ("            if finished.all():\n", "            if (ys == eos_id).all():\n")), names="doesn't stop"),
]

# Written after the kinds above were measured, as a hold-out (issue 20): named by the kinds at
# first try or not, then given the instance or kind that names them.
BUGS += [
    Bug("Transformer", "encodes with the target's padding mask", _INIT + _ENCODE + _DECODE + '''
    def forward(self, src, tgt, src_key_padding_mask=None, tgt_key_padding_mask=None):
        memory = self.encode(src, tgt_key_padding_mask)
        return self.generator(self.decode(tgt, memory, tgt_key_padding_mask, src_key_padding_mask))
''', names="target's padding mask where the source's belongs"),
]
