"""Lesson 08's block-wise attention (flash_attention) against lesson 01's: error, memory, speed.

    python -m bench.modern                     all three, real runs up to L = 4096
    python -m bench.modern --quick             fewer timing rounds, real memory runs up to L = 2048
    python -m bench.modern --flash-threads 2   two intra-op CPU threads for the timing

1. Error: the largest |flash_attention - lesson 01's scaled_dot_product_attention| over
   block sizes 1, one that does not divide S, and S, in float32 and float64, without and
   with the causal mask (L == S and L < S, the bottom-right alignment of causal_lower_right).
2. Memory: the peak bytes of the tensors PyTorch creates during one call (the inputs not
   counted, the output counted), for B=1, H=8, D=64, float32, L = S from 1k to 16k. They are
   counted at PyTorch's dispatcher by a TorchDispatchMode (PeakMemory below): every
   operation's outputs, one entry per storage (a view adds nothing), each held until Python
   frees it. Counted on the meta device (shapes without data: the same operations, no
   arithmetic, no memory), so that plain attention can be counted where it would not fit;
   up to --memory-real-up-to the same count is also taken on real CPU tensors, and the two
   must agree. A CPU allocator has no peak statistic to ask; on a CUDA device
   torch.cuda.max_memory_allocated gives the allocator's own figure beside it.
3. Speed: forward only, no gradients, L = S = 4096, B=1, H=8, D=64, float32, without and with
   the causal mask: flash_attention (block 128) and lesson 01's attention, each relative to
   F.scaled_dot_product_attention (whose CPU kernel is a fused, tiled FlashAttention-style
   loop in C++). Medians over rounds taken A B C A B C ...; a shared 2-core machine makes
   these noisy. Reported, no target.

Nothing is asserted: the figures are for people to read.
"""

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout's autograder, installed or not

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.multiprocessing.reductions import StorageWeakRef  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
from torch.utils._pytree import tree_leaves  # noqa: E402

from autograder.reference import causal_mask, scaled_dot_product_attention  # noqa: E402
from autograder.reference.modern import flash_attention  # noqa: E402
from bench.report import Row, load_text, machine, quicken_defaults, summary, table  # noqa: E402

HEADS, HEAD_DIM, BLOCK = 8, 64, 128
MEMORY_LENGTHS = (1024, 2048, 4096, 8192, 16384)
SPEED_LENGTH = 4096
MiB = 2**20
FLASH_NAME = f"flash_attention (block {BLOCK})"


# ----------------------------------------------------------------------------- memory accounting
class PeakMemory(TorchDispatchMode):
    """While active: the most bytes that the tensors created inside were holding at one time.

    Every operation PyTorch runs passes through ``__torch_dispatch__``; its outputs are counted
    by storage (views share their base's storage, so they add nothing), and a storage stops
    counting once Python has freed it (a weak reference tells). Storages that existed before
    (``existing``, the inputs) are not counted. ``largest`` is the biggest single output.
    """

    def __init__(self, *existing):
        super().__init__()
        self.existing = {StorageWeakRef(t.untyped_storage()).cdata for t in existing}
        self.live = {}  # storage id: (weak reference, bytes)
        self.peak = 0
        self.largest = (0, "", ())  # (elements, operation, shape)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        # Forget freed storages first: a new storage may reuse a freed one's address.
        self.live = {key: (ref, size) for key, (ref, size) in self.live.items() if not ref.expired()}
        for tensor in tree_leaves(out):
            if not isinstance(tensor, torch.Tensor):
                continue
            storage = tensor.untyped_storage()
            ref = StorageWeakRef(storage)
            if ref.cdata not in self.existing:
                self.live.setdefault(ref.cdata, (ref, storage.nbytes()))
            if tensor.numel() > self.largest[0]:
                self.largest = (tensor.numel(), str(func), tuple(tensor.shape))
        self.peak = max(self.peak, sum(size for _, size in self.live.values()))
        return out


def plain(q, k, v, causal):
    """Lesson 01's attention (it builds the (L, S) scores and weights); the output only."""
    return scaled_dot_product_attention(q, k, v, causal_mask(q.size(-2), device=q.device) if causal else None)[0]


def flash(q, k, v, causal):
    return flash_attention(q, k, v, causal=causal, block_size=BLOCK)


def count(fn, L, device):
    """PeakMemory of fn on (1, H, L, D) float32 inputs, L = S, without a mask (lesson 01's check for
    fully blocked rows reads the mask's values, which the meta device does not have)."""
    q, k, v = (torch.randn(1, HEADS, L, HEAD_DIM, device="cpu").to(device) for _ in range(3))
    with torch.no_grad(), PeakMemory(q, k, v) as tracker:
        fn(q, k, v, causal=False)
    return tracker


def memory(real_up_to):
    """One row per length: peak MiB of both, and whether the real CPU count agrees with the meta count."""
    lines = []
    for L in MEMORY_LENGTHS:
        line = {"L": L}
        for name, fn in (("plain", plain), ("flash", flash)):
            meta = count(fn, L, "meta")
            line[name] = meta.peak
            line[f"{name} largest"] = meta.largest
            if L <= real_up_to:
                real = count(fn, L, "cpu")
                line[f"{name} real"] = real.peak
            print(f"  ... L = {L}: {name} {meta.peak / MiB:,.0f} MiB" +
                  (f" (real CPU run: {line[f'{name} real'] / MiB:,.0f} MiB)" if L <= real_up_to else ""), flush=True)
        lines.append(line)
    return lines


# ----------------------------------------------------------------------------- error
def max_errors(dtype):
    """(case, max |flash - lesson 01|) for the block sizes and masks of the docstring."""
    torch.manual_seed(0)
    S = 512
    q, k, v = (torch.randn(2, 4, S, HEAD_DIM, dtype=dtype) for _ in range(3))
    short_q = torch.randn(2, 4, 200, HEAD_DIM, dtype=dtype)  # L = 200 < S
    bottom_right = torch.arange(S)[None, :] > torch.arange(200)[:, None] + (S - 200)  # (L, S), True = blocked
    cases = []
    with torch.no_grad():
        expected = scaled_dot_product_attention(q, k, v)[0]
        expected_causal = scaled_dot_product_attention(q, k, v, causal_mask(S))[0]
        expected_short = scaled_dot_product_attention(short_q, k, v, bottom_right)[0]
        for block in (1, 100, S):
            cases.append((f"L=S={S}, block {block}", (flash_attention(q, k, v, block_size=block) - expected)))
            cases.append((f"L=S={S}, causal, block {block}",
                          flash_attention(q, k, v, causal=True, block_size=block) - expected_causal))
        cases.append((f"L=200, S={S}, causal (bottom right), block 100",
                      flash_attention(short_q, k, v, causal=True, block_size=100) - expected_short))
    return [(case, diff.abs().max().item()) for case, diff in cases]


# ----------------------------------------------------------------------------- speed
def speed(rounds, threads):
    """Median seconds per forward of each contender at L = S = 4096, without and with the causal mask.

    Returns {(mask, contender): seconds}; the rounds run every contender in turn, A B C ... A B C ...
    """
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, HEADS, SPEED_LENGTH, HEAD_DIM) for _ in range(3))
    mask = causal_mask(SPEED_LENGTH)  # (L, S), True = blocked, for lesson 01's attention
    contenders = {
        ("no mask", "F.scaled_dot_product_attention"): lambda: F.scaled_dot_product_attention(q, k, v),
        ("no mask", FLASH_NAME): lambda: flash_attention(q, k, v, block_size=BLOCK),
        ("no mask", "lesson 01 attention"): lambda: scaled_dot_product_attention(q, k, v)[0],
        ("causal", "F.scaled_dot_product_attention"): lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        ("causal", FLASH_NAME): lambda: flash_attention(q, k, v, causal=True, block_size=BLOCK),
        ("causal", "lesson 01 attention"): lambda: scaled_dot_product_attention(q, k, v, mask)[0],
    }
    times = {name: [] for name in contenders}
    with torch.no_grad():
        for fn in contenders.values():  # warm-up: first calls allocate and pick kernels
            fn()
        for _ in range(rounds):
            for name, fn in contenders.items():
                start = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


# ----------------------------------------------------------------------------- report
def run(args):
    """Measure, print the details, return the summary rows."""
    print(f"Lesson 08 attention: flash_attention (reference, autograder/reference/modern.py) vs lesson 01's "
          f"scaled_dot_product_attention and F.scaled_dot_product_attention")
    print(f"Machine: {machine()}; {load_text()}")
    rows = []

    print("\n1. Error: max |flash_attention - lesson 01 attention|, B=2 H=4 D=64, random normal inputs")
    errors = {dtype: max_errors(dtype) for dtype in (torch.float32, torch.float64)}
    cases = [case for case, _ in errors[torch.float32]]
    print(table(["case", "float32", "float64"],
                [(case, f"{errors[torch.float32][i][1]:.1e}", f"{errors[torch.float64][i][1]:.1e}")
                 for i, case in enumerate(cases)], align=["<", ">", ">"]))
    for dtype, name, bound in ((torch.float32, "float32", 1e-5), (torch.float64, "float64", 1e-10)):
        worst_case, worst = max(errors[dtype], key=lambda e: e[1])
        rows.append(Row("lesson 08 flash_attention", f"max |flash - lesson 01 attention|, {name}, {len(cases)} cases",
                        f"{worst:.1e}", f"worst: {worst_case}; tests require <= {bound:g}"))

    print(f"\n2. Memory: peak MiB of the tensors created during one forward, B=1 H={HEADS} D={HEAD_DIM} float32, "
          f"no mask, L = S; flash block {BLOCK}")
    lines = memory(args.memory_real_up_to)

    def real_note(line, name):
        if f"{name} real" not in line:
            return "meta only"
        return "= real" if line[f"{name} real"] == line[name] else f"real {line[f'{name} real'] / MiB:,.1f}"

    print(table(["L = S", "plain MiB", "counted", "plain largest tensor", "flash MiB", "counted",
                 "flash largest tensor", "plain / flash"],
                [(f"{line['L']:,}", f"{line['plain'] / MiB:,.1f}", real_note(line, "plain"),
                  str(line["plain largest"][2]), f"{line['flash'] / MiB:,.1f}", real_note(line, "flash"),
                  str(line["flash largest"][2]), f"{line['plain'] / line['flash']:.1f}x") for line in lines],
                align=[">", ">", "<", "<", ">", "<", "<", ">"]))
    print("counted: '= real' where a real CPU run gave the same count as the meta device; 'meta only' where it was "
          "not run for real (plain attention's scores alone are 4 L^2 H bytes: 8 GiB at 16k)")
    for line in lines:
        rows.append(Row("lesson 08 memory", f"peak MiB, plain / flash, L=S={line['L']:,} B=1 H={HEADS} D={HEAD_DIM}",
                        f"{line['plain'] / MiB:,.0f} / {line['flash'] / MiB:,.0f}",
                        f"{line['plain'] / line['flash']:.1f}x; counted at the dispatcher "
                        f"({'meta and real agree' if 'flash real' in line else 'meta device'})"))

    print(f"\n3. Speed: forward, no gradients, L = S = {SPEED_LENGTH}, B=1 H={HEADS} D={HEAD_DIM} float32, "
          f"{args.flash_threads} CPU thread(s), median of {args.flash_rounds} rounds")
    seconds = speed(args.flash_rounds, args.flash_threads)
    print(table(["mask", "", "ms", "relative to F"],
                [(mask, name, f"{1e3 * s:.0f}", f"{s / seconds[(mask, 'F.scaled_dot_product_attention')]:.2f}x")
                 for (mask, name), s in seconds.items()], align=["<", "<", ">", ">"]))
    print("Why flash_attention is slower than F's kernel on a CPU: both walk through the keys block by block, but "
          "F's C++ loop splits the queries too, into tiles whose scores stay in the CPU's cache, and fuses the max, "
          "exp, sum and rescaling into one pass over each tile; the Python version runs each step as a separate "
          "PyTorch operation over a whole (L, block) tensor, through main memory, with Python in between. With the "
          "causal mask F also skips the tiles above the diagonal (about half the work), while flash_attention "
          "computes every block for every query and masks it (it could leave out, in each block, the queries that "
          "see none of its keys; the course keeps the simpler loop). The point of flash_attention is the algorithm "
          "and its memory, not speed. Lesson 01's attention does fewer, larger operations but writes and reads "
          "whole (L, S) tensors.")
    for mask in ("no mask", "causal"):
        torch_s = seconds[(mask, "F.scaled_dot_product_attention")]
        rows.append(Row("lesson 08 flash_attention",
                        f"time / F.scaled_dot_product_attention, CPU forward, {mask}, L=S={SPEED_LENGTH}",
                        f"{seconds[(mask, FLASH_NAME)] / torch_s:.2f}x",
                        f"lesson 01 attention {seconds[(mask, 'lesson 01 attention')] / torch_s:.2f}x; "
                        f"{args.flash_threads} thread(s); noisy on a shared machine; no target"))
    print(f"After: {load_text()}")
    return rows


def add_arguments(parser):
    group = parser.add_argument_group("lesson 08 attention")
    group.add_argument("--flash-rounds", type=int, default=5, help="timed rounds (default 5; --quick: 2)")
    group.add_argument("--flash-threads", type=int, default=1, help="intra-op CPU threads for the timing (default 1)")
    group.add_argument("--memory-real-up-to", type=int, default=4096, metavar="L",
                       help="also count on real CPU tensors up to this length (default 4096; --quick: 2048)")


def quicken(args):
    """--quick: fewer rounds and smaller real runs, unless set explicitly."""
    quicken_defaults(args, {"flash_rounds": (5, 2), "memory_real_up_to": (4096, 2048)})


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bench.modern", description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    parser.add_argument("--quick", action="store_true", help="fewer rounds, smaller real runs")
    args = parser.parse_args(argv)
    quicken(args)
    found = run(args)
    print()
    print(summary(found))


if __name__ == "__main__":
    main()
