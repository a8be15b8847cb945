"""Sequence reversal: the small task on which lesson 06 trains the whole Transformer.

A source is a random string of ordinary tokens; its target is the same string backwards,
framed by BOS and EOS and padded with PAD:

    source  7 3 9 4 12 5 8 8 11 6            target  BOS 6 11 8 8 5 12 4 9 3 7 EOS

To reverse, the decoder's i-th output must copy the source token at position n-1-i, so a
model that has learned the task shows it plainly: its cross-attention is anti-diagonal.
Every string has length ``min_len`` to ``max_len``; shorter ones are padded, so the padding
masks of lesson 05 are used for real.

    from lesson_tools.reversal import ReversalConfig, build_model, train
    config = ReversalConfig()
    model = build_model(config)            # the reference Transformer, or pass your own class
    history = train(model, config, seed=0)
    history.accuracy                       # exact-sequence accuracy on held-out strings

``bench/reversal.py`` trains it with three seeds and reports times and accuracies.
"""

import time
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from .threads import cpu_threads


def _reference(name):
    """The course's reference ``name`` (a lesson-06 answer): in the full repository only.

    What a class receives for lesson 06 leaves that lesson's reference out (docs/architecture.md, the release rule),
    so there the student's own code is used, and a missing piece says so.
    """
    try:
        from autograder import reference
    except ImportError:  # the release of lesson 01 has no reference at all
        reference = None
    if not hasattr(reference, name):
        raise NotImplementedError(f"`{name}` is not written yet, and this copy of the course has no reference for it")
    return getattr(reference, name)


PAD, BOS, EOS = 0, 1, 2
FIRST_SYMBOL = 3  # ordinary tokens are FIRST_SYMBOL .. FIRST_SYMBOL + num_symbols - 1


@dataclass(frozen=True)
class ReversalConfig:
    """The task, the model and the training run. The defaults reach 99% in about 25 s of processor time
    (a minute of wall time or more on a busy 2-core machine: `python bench/reversal.py` measures it)."""

    # The task
    num_symbols: int = 10  # ordinary tokens; the vocabulary adds PAD, BOS and EOS
    min_len: int = 10
    max_len: int = 12
    # The model: a tiny Transformer
    d_model: int = 64
    num_heads: int = 4
    num_layers: int = 2
    d_ff: int = 128
    dropout: float = 0.0
    # The training run
    steps: int = 400
    batch_size: int = 128
    schedule: str = "linear"  # "linear": warm up, then decay linearly to 0; "noam": the paper's (section 5.3)
    warmup: int = 100  # steps of linear warm-up (both schedules)
    peak_lr: float = 5e-3  # the "linear" schedule's rate at the end of warm-up
    lr_factor: float = 0.4  # the "noam" schedule's rate is lr_factor * noam_lr(step, d_model, warmup); 0.4 peaks
    # at 5e-3 too, with the default d_model and warmup
    label_smoothing: float = 0.1
    num_threads: int = 1  # CPU threads while training (None: leave PyTorch's setting alone); see train()
    # The evaluation
    num_test: int = 1000  # held-out strings, never seen in training
    test_seed: int = 1234

    def __post_init__(self):
        if self.num_symbols < 1 or not 1 <= self.min_len <= self.max_len:
            raise ValueError("need num_symbols >= 1 and 1 <= min_len <= max_len")
        if self.schedule not in ("linear", "noam"):
            raise ValueError(f'schedule must be "linear" or "noam", got {self.schedule!r}')

    @property
    def vocab_size(self):
        return FIRST_SYMBOL + self.num_symbols


@dataclass
class TrainingRun:
    """What train() returns: the loss of every step, the held-out accuracy, the wall and CPU time."""

    losses: list = field(default_factory=list)
    accuracy: float = float("nan")
    seconds: float = float("nan")  # wall-clock time of training and evaluation
    cpu_seconds: float = float("nan")  # CPU time of this process, all threads (a fairer figure on a busy machine)


# ----------------------------------------------------------------------------- data
def random_strings(n, config, generator):
    """n random strings as a padded (n, max_len) tensor of symbols and their (n,) lengths."""
    lengths = torch.randint(config.min_len, config.max_len + 1, (n,), generator=generator)  # (n,)
    symbols = torch.randint(FIRST_SYMBOL, config.vocab_size, (n, config.max_len), generator=generator)
    padding = torch.arange(config.max_len)[None, :] >= lengths[:, None]  # (n, max_len), True after the end
    return symbols.masked_fill(padding, PAD), lengths


def make_batch(strings, lengths):
    """Source and target tensors for padded strings (B, S) of the given (B,) lengths.

    Returns src (B, S) = the strings, PAD after each length, and tgt (B, S + 2) = BOS, the
    string reversed, EOS, then PAD. The decoder reads tgt[:, :-1] and learns to predict tgt[:, 1:].
    """
    B, S = strings.shape
    positions = torch.arange(S)[None, :]  # (1, S)
    inside = positions < lengths[:, None]  # (B, S): True on the string
    src = strings.masked_fill(~inside, PAD)  # (B, S)
    backwards = (lengths[:, None] - 1 - positions).clamp(min=0)  # (B, S): where position i reads from
    reversed_strings = src.gather(1, backwards).masked_fill(~inside, PAD)  # (B, S)
    tgt = torch.full((B, S + 2), PAD, dtype=torch.long)  # (B, S + 2)
    tgt[:, 0] = BOS
    tgt[:, 1:S + 1] = reversed_strings
    tgt[torch.arange(B), lengths + 1] = EOS
    return src, tgt


def string_keys(strings, config):
    """One int64 per padded string (B, S), equal for equal strings (base-vocab digits, wrapping on overflow)."""
    powers = torch.ones(strings.size(1), dtype=torch.long)
    powers[1:] = config.vocab_size
    powers = powers.cumprod(0)  # (S,): 1, V, V^2, ...
    return (strings * powers).sum(dim=1)  # (B,)


def sample_batch(config, generator, exclude=None):
    """A training batch (src, tgt) of random strings, none of whose keys is in ``exclude``."""
    strings, lengths = random_strings(config.batch_size, config, generator)
    if exclude is not None:
        clash = torch.isin(string_keys(strings, config), exclude)  # (B,)
        while clash.any():  # redraw the rare string that is also a test string
            redrawn, redrawn_lengths = random_strings(int(clash.sum()), config, generator)
            strings[clash], lengths[clash] = redrawn, redrawn_lengths
            clash = torch.isin(string_keys(strings, config), exclude)
    return make_batch(strings, lengths)


def held_out_set(config):
    """The test strings (src, tgt): drawn with their own seed, and never drawn by sample_batch."""
    generator = torch.Generator().manual_seed(config.test_seed)
    strings, lengths = random_strings(config.num_test, config, generator)
    return make_batch(strings, lengths)


# ----------------------------------------------------------------------------- model, loss, accuracy
def build_model(config, transformer=None, seed=0):
    """A Transformer class (the course's reference when None) sized by ``config``, its weights seeded.

    The model shares one matrix between its two embeddings and its generator (share_embeddings=True).
    """
    transformer = _reference("Transformer") if transformer is None else transformer
    torch.manual_seed(seed)
    return transformer(config.vocab_size, config.vocab_size, d_model=config.d_model, num_heads=config.num_heads,
                       num_layers=config.num_layers, d_ff=config.d_ff, dropout=config.dropout,
                       max_len=config.max_len + 2, pad_id=PAD, share_embeddings=True)


def loss_on(model, src, tgt, label_smoothing=0.0):
    """Label-smoothed cross-entropy of predicting tgt[:, 1:] from tgt[:, :-1] (teacher forcing), PAD ignored."""
    tgt_in, tgt_out = tgt[:, :-1], tgt[:, 1:]  # (B, T), (B, T)
    logits = model(src, tgt_in, src_key_padding_mask=src == PAD, tgt_key_padding_mask=tgt_in == PAD)  # (B, T, V)
    return F.cross_entropy(logits.flatten(0, 1), tgt_out.flatten(), ignore_index=PAD,  # (B*T, V), (B*T,)
                           label_smoothing=label_smoothing)


def exact_match(predictions, targets):
    """(B,) bool: True where a decoded row equals its target row, token for token.

    Rows are compared after padding the shorter tensor with PAD, so a prediction that stops
    at EOS (and holds only PAD after it) matches a target padded the same way.
    """
    width = max(predictions.size(1), targets.size(1))
    predictions = F.pad(predictions, (0, width - predictions.size(1)), value=PAD)  # (B, width)
    targets = F.pad(targets, (0, width - targets.size(1)), value=PAD)  # (B, width)
    return (predictions == targets).all(dim=1)


def accuracy(model, src, tgt, decode=None, batch_size=500):
    """The fraction of sources whose decoded output is exactly the target (decode: the reference greedy_decode if None)."""
    decode = _reference("greedy_decode") if decode is None else decode
    device = next(model.parameters()).device
    correct = 0
    for start in range(0, src.size(0), batch_size):
        s, t = src[start:start + batch_size].to(device), tgt[start:start + batch_size].to(device)
        predictions = decode(model, s, t.size(1), BOS, EOS, src_key_padding_mask=s == PAD)  # (b, <= T)
        correct += int(exact_match(predictions, t).sum())
    return correct / src.size(0)


# ----------------------------------------------------------------------------- training
def learning_rate(step, config):
    """The rate of step ``step`` (1 .. steps) under the config's schedule.

    Both schedules warm up linearly for ``warmup`` steps. The paper's then decays as 1/sqrt(step),
    a tail made for a run of 100 000 steps: in a run of a few hundred it leaves the rate high at
    the end, and Adam at a high rate on a task it has already solved keeps kicking the model out
    of the solution (the loss spikes, the accuracy collapses, it recovers, and the run may end in
    a collapse). "linear" decays towards zero over the remaining steps instead, so the run ends
    where it has settled.
    """
    if config.schedule == "noam":
        return config.lr_factor * _reference("noam_lr")(step, config.d_model, config.warmup)
    if step <= config.warmup:
        return config.peak_lr * step / config.warmup
    return config.peak_lr * (config.steps + 1 - step) / (config.steps + 1 - config.warmup)  # down to 0 after the last


def train(model, config, seed=0, decode=None, progress=True, test_set=None):
    """Train ``model`` on reversal with Adam and label smoothing; return a TrainingRun.

    The learning rate follows learning_rate(step, config). The batches come from a generator
    seeded with ``seed``; seed the model's initialisation yourself (build_model does). Accuracy
    is measured at the end, with ``decode`` (the reference greedy_decode if None), on the held-out
    strings (``test_set``, or held_out_set(config)).
    """
    start, cpu_start = time.perf_counter(), time.process_time()
    device = next(model.parameters()).device
    generator = torch.Generator().manual_seed(seed)
    test_src, test_tgt = test_set if test_set is not None else held_out_set(config)
    exclude = string_keys(test_src, config)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.0, betas=(0.9, 0.98), eps=1e-9)  # section 5.3
    run = TrainingRun()
    with cpu_threads(config.num_threads):
        model.train()
        bar = tqdm(range(1, config.steps + 1), desc="training", disable=not progress)
        for step in bar:
            for group in optimizer.param_groups:
                group["lr"] = learning_rate(step, config)
            src, tgt = sample_batch(config, generator, exclude)
            loss = loss_on(model, src.to(device), tgt.to(device), config.label_smoothing)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            run.losses.append(loss.item())
            if step % 20 == 0 or step == config.steps:
                bar.set_postfix(loss=f"{run.losses[-1]:.3f}")
        bar.close()
        model.eval()
        run.accuracy = accuracy(model, test_src, test_tgt, decode)
    run.seconds = time.perf_counter() - start
    run.cpu_seconds = time.process_time() - cpu_start
    return run
