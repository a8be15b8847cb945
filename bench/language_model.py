"""Benchmark: lesson 07's language model on Shakespeare (three seeds), its KV cache, and a sample.

    python bench/language_model.py                    # 3 seeds, the cache at 1024 tokens, a sample
    python bench/language_model.py --quick            # 1 seed, the cache at 256 tokens
    python bench/language_model.py --seeds 0 1 2 3 4  # more seeds
    python bench/language_model.py --threads 1        # one intra-op thread instead of two

(1) Training: the lesson's recipe (BENCH_CONFIG below) on the reference DecoderOnlyLM, from
scratch for each seed; then the validation loss in nats per character on the WHOLE validation
split (the last 10 % of the text, through the reference perplexity, in windows of the training
context). Goal: a median of at most 1.75 nats/char within 90 s of training wall time on two
CPU cores. (2) KV cache: generate(use_cache=True) against use_cache=False, the same tokens for
the same generator, for 1024 positions on a model with max_len 1024 (one prompt token and 1023
new ones), at DecoderOnlyLM's default size and at the lesson's smaller trained size, one thread.
Goal: at least 5x faster with the cache. (3) 300 characters sampled at temperature
0.8 from the first seed's model, which should read as a play.

Wall time depends on what else the machine is doing: the load average is printed beside it,
and CPU time too. Nothing is asserted: the figures are for people to read.
"""

import argparse
import dataclasses
import math
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the checkout's autograder, installed or not

import torch  # noqa: E402

from lesson_tools import language_data  # noqa: E402
from autograder.reference.language_model import DecoderOnlyLM, generate, perplexity  # noqa: E402
from bench.report import Row, load, machine  # noqa: E402

GOAL_NATS, GOAL_SECONDS, GOAL_SPEEDUP = 1.75, 90.0, 5.0

# The lesson's model and recipe (lesson_tools/language_data.py), on two threads here.
MODEL = language_data.LESSON_MODEL
BENCH_CONFIG = dataclasses.replace(language_data.TrainConfig(), num_threads=2)
CACHE_LENGTH = 1024
SAMPLE_CHARS, SAMPLE_TEMPERATURE, SAMPLE_PROMPT = 300, 0.8, "\n"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="one seed, and the cache timed at 256 positions")
    parser.add_argument("--seeds", type=int, nargs="+", default=None, help="one training run per seed (default 0 1 2)")
    parser.add_argument("--threads", type=int, default=BENCH_CONFIG.num_threads, help="intra-op CPU threads")
    parser.add_argument("--steps", type=int, default=BENCH_CONFIG.steps, help="training steps per seed")
    parser.add_argument("--cache-length", type=int, default=None, help=f"positions generated (default {CACHE_LENGTH})")
    parser.add_argument("--progress", action="store_true", help="print a line of progress every eval_every steps of each training run")
    args = parser.parse_args(argv)
    if args.seeds is None:
        args.seeds = [0] if args.quick else [0, 1, 2]
    if args.cache_length is None:
        args.cache_length = 256 if args.quick else CACHE_LENGTH
    return args


def corpus():
    """The tokenizer and the (train, validation) token ids of the whole text."""
    text = language_data.load_text()
    tokenizer = language_data.CharTokenizer(text)
    train_text, val_text = language_data.split_text(text)
    return tokenizer, tokenizer.encode(train_text), tokenizer.encode(val_text)


def build_model(vocab_size, seed, max_len):
    torch.manual_seed(seed)
    return DecoderOnlyLM(vocab_size, max_len=max_len, **MODEL)


@dataclasses.dataclass
class SeedRun:
    seed: int
    seconds: float  # training wall time
    cpu_seconds: float
    eval_seconds: float
    nats: float  # validation cross-entropy per character
    load: float = None
    model: torch.nn.Module = None


def train_seeds(seeds, threads=BENCH_CONFIG.num_threads, steps=BENCH_CONFIG.steps, progress=False):
    """Train one model per seed, printing a row per run and the medians; return the SeedRuns."""
    config = dataclasses.replace(BENCH_CONFIG, num_threads=threads, steps=steps)
    tokenizer, train_ids, val_ids = corpus()
    params = sum(p.numel() for p in build_model(tokenizer.vocab_size, 0, config.block_size).parameters())
    print(f"Shakespeare, character level: {len(train_ids):,} training and {len(val_ids):,} validation characters, "
          f"vocabulary {tokenizer.vocab_size}")
    print(f"Model: the reference DecoderOnlyLM, {MODEL}, context {config.block_size}, {params:,} parameters "
          "(embedding and head tied)")
    print(f"Recipe: {config.steps} steps of {config.batch_size} x {config.block_size} characters, AdamW "
          f"(peak {config.peak_lr:g}, betas {config.betas}, weight decay {config.weight_decay}), {config.warmup} "
          f"warm-up steps, cosine to {config.final_lr_fraction:g} of the peak, gradient clipping {config.grad_clip}")
    print(f"Machine: {machine()}; {config.num_threads} thread(s)")
    print()
    header = (f"{'seed':>6} | {'train s':>7} | {'CPU s':>7} | {'load':>5} | {'eval s':>6} | {'nats/char':>9} | "
              f"{'bits/char':>9}")
    print(header)
    print("-" * len(header))
    runs = []
    for seed in seeds:
        before = load()
        model = build_model(tokenizer.vocab_size, seed, config.block_size)
        trained = language_data.train(model, train_ids, config, seed=seed, progress=progress)
        after = load()
        start = time.perf_counter()
        with language_data.cpu_threads(config.num_threads):
            nats = math.log(perplexity(model, val_ids, config.block_size, batch_size=64))
        run = SeedRun(seed, trained.seconds, trained.cpu_seconds, time.perf_counter() - start, nats,
                      None if before is None else (before + after) / 2, model)
        runs.append(run)
        busy = f"{run.load:5.1f}" if run.load is not None else "    ?"
        print(f"{seed:>6} | {run.seconds:7.1f} | {run.cpu_seconds:7.1f} | {busy} | {run.eval_seconds:6.1f} | "
              f"{nats:9.3f} | {nats / math.log(2):9.3f}", flush=True)
    print("-" * len(header))
    wall = statistics.median(r.seconds for r in runs)
    cpu = statistics.median(r.cpu_seconds for r in runs)
    nats = statistics.median(r.nats for r in runs)
    print(f"{'median':>6} | {wall:7.1f} | {cpu:7.1f} | {'':>5} | {'':>6} | {nats:9.3f} | {nats / math.log(2):9.3f}")
    print()
    print(f"Goal: at most {GOAL_NATS} nats/char on the whole validation split within {GOAL_SECONDS:.0f} s of "
          f"training wall on 2 CPU cores. 'load' is the 1-minute load average during training: above the number "
          "of CPUs, other processes were competing for them, and wall time says more about them than about the "
          "recipe.")
    return runs


def time_generation(model, length, use_cache, seed=0):
    """(seconds, ids) to generate ``length`` positions from a one-token prompt."""
    prompt = torch.zeros(1, 1, dtype=torch.long)
    generator = torch.Generator().manual_seed(seed)
    start = time.perf_counter()
    ids = generate(model, prompt, length - 1, generator=generator, use_cache=use_cache)
    return time.perf_counter() - start, ids


CACHE_MODELS = {  # name: DecoderOnlyLM's arguments besides the vocabulary and max_len
    "default size": {},
    "lesson's size": MODEL,
}


def cache_speedup(vocab_size, length=CACHE_LENGTH, threads=1):
    """Time generate with and without the cache on models with max_len = length; print, return {name: figures}.

    The models are untrained: the time does not depend on the weights.
    """
    print(f"KV cache: {length} positions (a 1-token prompt, {length - 1} new tokens) on models with "
          f"max_len={length}, {threads} thread(s)")
    found = {}
    for name, kwargs in CACHE_MODELS.items():
        torch.manual_seed(0)
        model = DecoderOnlyLM(vocab_size, max_len=length, **kwargs)
        with language_data.cpu_threads(threads):
            time_generation(model, 16, True)  # warm-up
            with_cache, ids_cached = time_generation(model, length, use_cache=True)
            without, ids_plain = time_generation(model, length, use_cache=False)
        same = torch.equal(ids_cached, ids_plain)
        found[name] = (without / with_cache, same)
        size = ", ".join(f"{k}={v}" for k, v in {**dict(d_model=128, num_heads=4, num_layers=4, d_ff=512),
                                                   **kwargs}.items() if k != "dropout")
        print(f"  {name} ({size}):")
        print(f"    with the cache    {with_cache:7.2f} s  {(length - 1) / with_cache:8.0f} tokens/s")
        print(f"    without the cache {without:7.2f} s  {(length - 1) / without:8.0f} tokens/s")
        print(f"    speed-up {without / with_cache:.1f}x (goal >= {GOAL_SPEEDUP:.0f}x at {CACHE_LENGTH} positions); "
              f"the same tokens both ways: {same}")
    return found


def sample(model, tokenizer, seed=0):
    """SAMPLE_CHARS characters at SAMPLE_TEMPERATURE; the window slides past the model's context."""
    prompt = tokenizer.encode(SAMPLE_PROMPT)[None]  # (1, T)
    ids = generate(model, prompt, SAMPLE_CHARS, temperature=SAMPLE_TEMPERATURE,
                   generator=torch.Generator().manual_seed(seed), use_cache=False)
    return tokenizer.decode(ids[0, prompt.size(1):])


def rows(runs, cache=None, length=CACHE_LENGTH):
    """The summary rows: median validation loss, median training wall, and the cache's speed-ups."""
    n = len(runs)
    wall = statistics.median(r.seconds for r in runs)
    cpu = statistics.median(r.cpu_seconds for r in runs)
    nats = statistics.median(r.nats for r in runs)
    reached = sum(r.nats <= GOAL_NATS for r in runs)
    found = [
        Row("lesson 07 training", f"validation nats/char, whole split, median of {n} seed(s)", f"{nats:.3f}",
            f"{nats / math.log(2):.3f} bits/char; {reached} of {n} runs <= {GOAL_NATS}; goal {GOAL_NATS}: "
            f"{'PASS' if nats <= GOAL_NATS else 'MISS'}"),
        Row("lesson 07 training", f"training wall, median of {n} seed(s)", f"{wall:.1f} s",
            f"CPU {cpu:.1f} s; goal <= {GOAL_SECONDS:.0f} s: {'PASS' if wall <= GOAL_SECONDS else 'MISS'}"),
    ]
    for name, (speedup, same) in (cache or {}).items():
        if length == CACHE_LENGTH:
            verdict = f"goal >= {GOAL_SPEEDUP:.0f}x: {'PASS' if speedup >= GOAL_SPEEDUP and same else 'MISS'}"
        else:  # the cache's gain grows with the length: the goal is set at CACHE_LENGTH positions
            verdict = f"the goal (>= {GOAL_SPEEDUP:.0f}x) is set at {CACHE_LENGTH} positions"
        found.append(Row("lesson 07 KV cache", f"generate {length} positions, {name}: without / with cache",
                         f"{speedup:.1f}x", f"same tokens: {same}; {verdict}"))
    return found


def run(args):
    """Everything main() prints; returns the summary rows."""
    runs = train_seeds(args.seeds, args.threads, args.steps, args.progress)
    tokenizer, _, _ = corpus()
    print()
    cache = cache_speedup(tokenizer.vocab_size, args.cache_length)
    print()
    print(f"{SAMPLE_CHARS} characters at temperature {SAMPLE_TEMPERATURE} from seed {runs[0].seed}'s model:")
    print("-" * 60)
    print("\n".join(line.rstrip() for line in sample(runs[0].model, tokenizer).split("\n")))
    print("-" * 60)
    return rows(runs, cache, args.cache_length)


def main(argv=None):
    from bench.report import summary

    found = run(parse_args(argv))
    print()
    print(summary(found))


if __name__ == "__main__":
    main()
