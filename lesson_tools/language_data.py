"""Lesson 07's text and what the lesson gives around the model: tokenizer, split, batches, training.

    from lesson_tools import language_data as data
    text = data.load_text()                                 # Shakespeare's 37 plays, 4.8M characters
    tokenizer = data.CharTokenizer(text)                    # one token per distinct character: 82
    train_text, val_text = data.split_text(text)            # the last 10 % of the characters validate
    train_ids = tokenizer.encode(train_text)                # (N,) long
    x, y = data.random_batch(train_ids, 128, 32, generator)  # (32, 128) inputs, the same shifted by one
    model = DecoderOnlyLM(tokenizer.vocab_size, max_len=64, **data.LESSON_MODEL)  # lesson 07's exercise
    run = data.train(model, train_ids, data.TrainConfig(), seed=0, val_ids=tokenizer.encode(val_text))

The text is committed with the course (data/shakespeare/shakespeare.txt, built by
data/shakespeare/build.py), so everything here works offline. The lesson asks the student to
write the model, the cache, sampling and perplexity; the tokenizer and the training loop are
given, here, and nothing here uses the reference of lesson 07, so that a class has all of it.
"""

import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F

from .threads import cpu_threads

TEXT_PATH = Path(__file__).resolve().parent.parent / "data" / "shakespeare" / "shakespeare.txt"
VALIDATION_FRACTION = 0.1


# ----------------------------------------------------------------------------- text and tokens
def load_text(path=None):
    """The plays as one string (UTF-8 on disk)."""
    return Path(path or TEXT_PATH).read_text(encoding="utf-8")


def split_text(text, validation_fraction=VALIDATION_FRACTION):
    """(train, validation): the first characters train, the last ``validation_fraction`` of them validate.

    A split at the end, not at random windows, keeps whole plays out of training: a random
    split would put lines of every scene on both sides, and the validation loss would
    reward remembering them.
    """
    cut = int(len(text) * (1 - validation_fraction))
    return text[:cut], text[cut:]


class CharTokenizer:
    """One token per distinct character of ``text``, numbered in the order of the characters' code points.

    stoi maps a character to its id, itos an id to its character; encode(str) -> (T,) long
    tensor, decode(ids) -> str. A character the text never had has no id: encode raises a
    ValueError that names it.
    """

    def __init__(self, text):
        self.itos = sorted(set(text))
        self.stoi = {ch: i for i, ch in enumerate(self.itos)}

    @property
    def vocab_size(self):
        return len(self.itos)

    def encode(self, s):
        try:
            ids = [self.stoi[ch] for ch in s]
        except KeyError as missing:
            raise ValueError(f"the character {missing.args[0]!r} is not in the tokenizer's vocabulary") from None
        return torch.tensor(ids, dtype=torch.long)  # (T,)

    def decode(self, ids):
        if isinstance(ids, torch.Tensor):
            ids = ids.tolist()
        return "".join(self.itos[i] for i in ids)

    def __repr__(self):
        return f"CharTokenizer(vocab_size={self.vocab_size})"


def random_batch(ids, block_size, batch_size, generator=None):
    """(x, y), each (batch_size, block_size): windows of ``ids`` starting anywhere, and the same shifted by one.

    Training reads windows at random offsets, so that every character is seen at every
    position of the context over the run; evaluation (perplexity) reads the text once, in
    consecutive windows.
    """
    starts = torch.randint(len(ids) - block_size, (batch_size,), generator=generator)  # (B,)
    offsets = starts[:, None] + torch.arange(block_size + 1)  # (B, block_size + 1)
    windows = ids[offsets]  # (B, block_size + 1)
    return windows[:, :-1], windows[:, 1:]  # (B, block_size) each


# ----------------------------------------------------------------------------- training
# The lesson's model (DecoderOnlyLM's arguments, with max_len = the training context) and recipe,
# tuned on two CPU cores by bench/language_model.py. Within a fixed time, a small, shallow model
# that takes many steps learns more than a larger one that takes few: at this scale the loss
# falls with every step, and a step of a 4-layer, 128-wide model costs about four of this one's.
LESSON_MODEL = dict(d_model=64, num_heads=4, num_layers=2, d_ff=256, dropout=0.0)


@dataclass(frozen=True)
class TrainConfig:
    """A training run: batches of random windows, AdamW, linear warm-up then a cosine decay.

    The defaults are the lesson's recipe, as bench/language_model.py runs it (there on two threads).
    """

    steps: int = 7000
    batch_size: int = 16
    block_size: int = 64  # the context the model is trained on (<= the model's max_len)
    peak_lr: float = 5e-3
    warmup: int = 100  # steps of linear warm-up
    final_lr_fraction: float = 0.1  # the cosine ends at peak_lr * final_lr_fraction
    weight_decay: float = 0.1  # on the matrices only, not on biases and LayerNorms
    betas: tuple = (0.9, 0.99)
    grad_clip: float = 1.0  # the gradient's norm is clipped to this (None: no clipping)
    num_threads: int = 1  # CPU threads while training (None: leave PyTorch's setting alone); see threads.cpu_threads
    eval_every: int = 250  # steps between two estimates of the loss (and progress lines)
    eval_windows: int = 64  # windows of each split that an estimate averages over (the same ones every time)


@dataclass
class TrainingRun:
    """What train() returns: the loss of every step (nats per character), the estimates made every
    eval_every steps as (step, training loss, validation loss), wall and CPU time."""

    losses: list = field(default_factory=list)
    estimates: list = field(default_factory=list)
    seconds: float = float("nan")
    cpu_seconds: float = float("nan")


def learning_rate(step, config):
    """The rate of step ``step`` (1 .. steps): linear warm-up, then half a cosine down to final_lr_fraction."""
    if step <= config.warmup:
        return config.peak_lr * step / config.warmup
    progress = (step - config.warmup) / max(1, config.steps - config.warmup)  # 0 .. 1
    floor = config.peak_lr * config.final_lr_fraction
    return floor + (config.peak_lr - floor) * 0.5 * (1 + math.cos(math.pi * progress))


def make_optimizer(model, config):
    """AdamW that decays the matrices (weights, embeddings) but not the biases and LayerNorm parameters."""
    matrices = [p for p in model.parameters() if p.requires_grad and p.dim() >= 2]
    others = [p for p in model.parameters() if p.requires_grad and p.dim() < 2]
    groups = [{"params": matrices, "weight_decay": config.weight_decay}, {"params": others, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=config.peak_lr, betas=config.betas)


def estimate_loss(model, windows):
    """The mean cross-entropy (nats per token) of a model on fixed windows (x, y), in eval mode and without
    gradients; the model is left in the mode it was in."""
    x, y = windows
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            logits = model(x.to(device))  # (n, T, V)
            return F.cross_entropy(logits.flatten(0, 1), y.to(device).flatten()).item()
    finally:
        model.train(was_training)


def train(model, ids, config=TrainConfig(), seed=0, progress=True, val_ids=None):
    """Train a language model (ids (B, T) -> logits (B, T, V)) on the token ids ``ids`` (N,); return a TrainingRun.

    The batches come from a generator seeded with ``seed``; seed the model's initialisation
    yourself. The model is left in training mode. With ``val_ids``, every ``config.eval_every``
    steps the loss is estimated on the same ``config.eval_windows`` windows of each split (as
    nanoGPT's estimate_loss does, but on fixed windows, so that two estimates differ only by what
    the model learned), and the gap between the two shows how much the model fits its own text
    better than text it never read. With ``progress``, a line is printed at each estimate.
    """
    start, cpu_start = time.perf_counter(), time.process_time()
    device = next(model.parameters()).device
    generator = torch.Generator().manual_seed(seed)
    optimizer = make_optimizer(model, config)
    run = TrainingRun()
    fixed = None
    if val_ids is not None:  # their own generator: the training batches are the same with or without estimates
        windows = torch.Generator().manual_seed(seed + 1)
        fixed = [random_batch(split, config.block_size, config.eval_windows, windows) for split in (ids, val_ids)]
    with cpu_threads(config.num_threads):
        model.train()
        for step in range(1, config.steps + 1):
            for group in optimizer.param_groups:
                group["lr"] = learning_rate(step, config)
            x, y = random_batch(ids, config.block_size, config.batch_size, generator)
            logits = model(x.to(device))  # (B, T, V)
            loss = F.cross_entropy(logits.flatten(0, 1), y.to(device).flatten())  # (B*T, V), (B*T,)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if config.grad_clip is not None:
                torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
            optimizer.step()
            run.losses.append(loss.item())
            if step % config.eval_every == 0 or step == config.steps:
                _report(run, step, config, model, fixed, time.perf_counter() - start, progress)
    run.seconds = time.perf_counter() - start
    run.cpu_seconds = time.process_time() - cpu_start
    return run


def _report(run, step, config, model, fixed, seconds, progress):
    """Estimate the losses (with fixed windows) and print a line of text: a line stays readable in a saved
    notebook, where a progress widget shows only its state when the page was saved."""
    recent = run.losses[-config.eval_every:]
    line = f"step {step:>{len(str(config.steps))}}/{config.steps}: training batches {sum(recent) / len(recent):.3f}"
    if fixed is not None:
        train_loss, val_loss = (estimate_loss(model, windows) for windows in fixed)
        run.estimates.append((step, train_loss, val_loss))
        line += f", estimate on training text {train_loss:.3f}, on validation text {val_loss:.3f}"
    if progress:
        left = seconds / step * (config.steps - step)
        print(f"{line} nats/char ({seconds:.0f} s, about {left:.0f} s to go)", flush=True)
