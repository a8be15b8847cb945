"""Benchmark: train lesson 06's Transformer on sequence reversal with three seeds.

    python bench/reversal.py                          # the defaults of lesson_tools/reversal.py
    python bench/reversal.py --seeds 0 1 2 3 4        # more seeds
    python bench/reversal.py --threads 2              # two intra-op threads instead of one
    python bench/reversal.py --schedule noam          # the paper's schedule, same peak rate
    python -m bench.all --only reversal               # the same, as a section of `make bench`'s table

Prints one row per seed (wall time, CPU time, held-out exact-sequence accuracy), then the
medians. The goal: at least 99% accuracy within 60 s of wall time on a 2-core CPU. Wall time
depends on what else the machine is doing, so the load average is printed beside it, and CPU
time too. Nothing is asserted: the figures are for people to read.
"""

import argparse
import dataclasses
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the checkout's autograder, installed or not

from lesson_tools.reversal import ReversalConfig, build_model, train  # noqa: E402
from bench.report import Row, load, machine  # noqa: E402

GOAL_ACCURACY, GOAL_SECONDS = 0.99, 60.0


def parse_args(argv=None):
    defaults = ReversalConfig()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="one training run per seed")
    parser.add_argument("--threads", type=int, default=defaults.num_threads, help="intra-op CPU threads")
    parser.add_argument("--steps", type=int, default=defaults.steps)
    parser.add_argument("--schedule", choices=["linear", "noam"], default=defaults.schedule)
    parser.add_argument("--device", default="cpu", help="cpu, or cuda if there is one")
    parser.add_argument("--progress", action="store_true", help="show a progress bar for each run")
    return parser.parse_args(argv)


def train_seeds(seeds, threads=None, steps=None, schedule=None, device="cpu", progress=False):
    """Train one model per seed, printing a row per run and the medians; return the TrainingRuns."""
    defaults = ReversalConfig()
    config = dataclasses.replace(defaults, steps=steps or defaults.steps, schedule=schedule or defaults.schedule,
                                 num_threads=defaults.num_threads if threads is None else threads)
    print(f"Sequence reversal: strings of {config.min_len}-{config.max_len} tokens over {config.num_symbols} "
          f"symbols, {config.num_test} held-out strings, exact-sequence accuracy with greedy decoding")
    print(f"Model: d_model={config.d_model}, {config.num_heads} heads, {config.num_layers}+{config.num_layers} "
          f"layers, d_ff={config.d_ff}; {config.steps} steps of {config.batch_size}, {config.schedule} schedule")
    print(f"Machine: {machine()}; {config.num_threads} thread(s), device {device}")
    print()
    header = f"{'seed':>6} | {'wall s':>7} | {'CPU s':>7} | {'load':>5} | {'accuracy':>8}"
    print(header)
    print("-" * len(header))
    runs = []
    for seed in seeds:
        before = load()
        model = build_model(config, seed=seed).to(device)
        run = train(model, config, seed=seed, progress=progress)
        after = load()
        runs.append(run)
        busy = f"{(before + after) / 2:5.1f}" if before is not None else "    ?"
        print(f"{seed:>6} | {run.seconds:7.1f} | {run.cpu_seconds:7.1f} | {busy} | {run.accuracy:8.1%}", flush=True)
    print("-" * len(header))
    wall = statistics.median(run.seconds for run in runs)
    cpu = statistics.median(run.cpu_seconds for run in runs)
    accuracy = statistics.median(run.accuracy for run in runs)
    print(f"{'median':>6} | {wall:7.1f} | {cpu:7.1f} | {'':>5} | {accuracy:8.1%}")
    print()
    reached = sum(run.accuracy >= GOAL_ACCURACY for run in runs)
    print(f"{reached} of {len(runs)} runs reached {GOAL_ACCURACY:.0%}; goal: {GOAL_ACCURACY:.0%} within "
          f"{GOAL_SECONDS:.0f} s wall on 2 CPU cores (median wall {wall:.1f} s). 'load' is the 1-minute load "
          "average during the run: above the number of CPUs, other processes were competing for them.")
    return runs


def rows(runs):
    """The summary rows: median training time and median held-out accuracy over the seeds."""
    n = len(runs)
    wall = statistics.median(run.seconds for run in runs)
    cpu = statistics.median(run.cpu_seconds for run in runs)
    accuracy = statistics.median(run.accuracy for run in runs)
    reached = sum(run.accuracy >= GOAL_ACCURACY for run in runs)
    return [
        Row("lesson 06 training", f"reversal, train + evaluate, median of {n} seed(s)", f"{wall:.1f} s",
            f"wall; CPU {cpu:.1f} s; goal <= {GOAL_SECONDS:.0f} s: {'PASS' if wall <= GOAL_SECONDS else 'MISS'}"),
        Row("lesson 06 training", f"held-out exact-sequence accuracy, median of {n} seed(s)", f"{accuracy:.1%}",
            f"{reached} of {n} runs >= {GOAL_ACCURACY:.0%}; goal {GOAL_ACCURACY:.0%}: "
            f"{'PASS' if accuracy >= GOAL_ACCURACY else 'MISS'}"),
    ]


def main():
    args = parse_args()
    train_seeds(args.seeds, args.threads, args.steps, args.schedule, args.device, args.progress)


if __name__ == "__main__":
    main()
