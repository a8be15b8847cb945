"""Speed of the reference implementation against torch.nn: forward + backward, side by side.

    python -m bench.nn_speed                  CPU, and CUDA too when there is one
    python -m bench.nn_speed --quick          fewer rounds
    python -m bench.nn_speed --threads 2      two intra-op CPU threads instead of one
    python -m bench.nn_speed --smoke          tiny sizes, 2 rounds: only proves the script runs

Each case builds the reference module and its torch.nn counterpart with the same weights
(tests/torch_nn_weights.py), checks that their outputs agree, then times a forward pass and
a backward pass (the same upstream gradient) of each in turn, A B A B ..., after a few
warm-up rounds. A case's ratio is the median over rounds of reference time / torch.nn time,
each round's two runs being neighbours in time: lower is better, 1.0 is as fast as PyTorch.
Everything is float32, with dropout 0, in training mode (autograd on). Nothing is asserted.

One thread by default: on a 2-core machine shared with other work, a second thread makes
every small operation wait for whichever thread is not running, and the figures become noise.
"""

import argparse
import copy
import dataclasses
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the checkout's autograder and tests, installed or not

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

from autograder.reference import (  # noqa: E402
    EncoderLayer,
    MultiHeadAttention,
    Transformer,
    causal_mask,
    scaled_dot_product_attention,
)
from bench.report import Row, load_text, machine, summary, table  # noqa: E402
from tests.torch_nn_weights import (  # noqa: E402
    copy_from_torch,
    copy_transformer_from_torch,
    torch_encoder_layer,
    torch_transformer,
)

MHA_TARGET = 1.2  # the goal: the reference multi-head attention within 1.2x of nn.MultiheadAttention


@dataclass(frozen=True)
class Sizes:
    batch: int = 8
    seq: int = 128  # T (= S) for attention, multi-head attention and the encoder layer
    d_model: int = 512
    heads: int = 8
    d_ff: int = 2048
    # The full model: smaller, so that a CPU round stays well under a second.
    model_seq: int = 64
    model_d: int = 256
    model_d_ff: int = 1024
    model_layers: int = 2
    vocab: int = 1000


FULL = Sizes()
SMOKE = Sizes(batch=2, seq=8, d_model=16, heads=2, d_ff=32, model_seq=6, model_d=16, model_d_ff=32, model_layers=1,
              vocab=11)


@dataclass
class Pair:
    """The two sides of a case: each a function running a forward pass and returning one tensor."""

    ours: Callable
    theirs: Callable
    leaves: list  # every tensor whose .grad a backward pass fills (both sides' parameters and the inputs)


@dataclass(frozen=True)
class Case:
    name: str
    compared: str  # what exactly runs on each side
    sizes: Callable  # Sizes -> "B=8 T=128 ..."
    build: Callable  # (Sizes, device) -> Pair
    target: float = None


@dataclass
class Timing:
    case: Case
    device: str
    sizes: str
    ours_ms: float
    theirs_ms: float
    ratio: float  # median over rounds of ours / theirs, wall-clock time
    cpu_ratio: float  # the same in this process's CPU time (less sensitive to other processes); None on CUDA
    max_diff: float  # largest |ours - theirs| of the forward outputs

    @property
    def verdict(self):
        if self.case.target is None:
            return ""
        return "PASS" if self.ratio <= self.case.target else "MISS"


# ----------------------------------------------------------------------------- the cases
def _leaves(*things):
    leaves = []
    for thing in things:
        leaves.extend(thing.parameters() if isinstance(thing, nn.Module) else [thing])
    return leaves


def _rand(*shape, device):
    return torch.randn(*shape, device=device, requires_grad=True)


def attention(s, device, masked=False):
    D = s.d_model // s.heads
    q, k, v = (_rand(s.batch, s.heads, s.seq, D, device=device) for _ in range(3))  # (B, H, T, D) each
    blocked = causal_mask(s.seq, device=device) if masked else None  # (T, T), True = blocked
    allowed = None if blocked is None else ~blocked  # F.scaled_dot_product_attention: True = attend
    return Pair(ours=lambda: scaled_dot_product_attention(q, k, v, blocked)[0],
                theirs=lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=allowed),
                leaves=[q, k, v])


def _padding(s, T, device):
    """(B, T) key padding mask: every other row has its last quarter padded."""
    mask = torch.zeros(s.batch, T, dtype=torch.bool, device=device)
    mask[::2, T - T // 4:] = True
    return mask


def multi_head_attention(s, device, padded=False, need_weights=False):
    theirs = nn.MultiheadAttention(s.d_model, s.heads, batch_first=True).to(device)
    ours = MultiHeadAttention(s.d_model, s.heads).to(device)
    copy_from_torch(ours, theirs)
    x = _rand(s.batch, s.seq, s.d_model, device=device)  # (B, T, C)
    kpm = _padding(s, s.seq, device) if padded else None
    extra = {"average_attn_weights": False} if need_weights else {}  # per-head weights, as the reference's
    return Pair(ours=lambda: ours(x, x, x, key_padding_mask=kpm, need_weights=need_weights)[0],
                theirs=lambda: theirs(x, x, x, key_padding_mask=kpm, need_weights=need_weights, **extra)[0],
                leaves=_leaves(ours, theirs, x))


def encoder_layer(s, device):
    theirs = torch_encoder_layer(s.d_model, s.heads, s.d_ff).to(device)  # post-norm, relu, dropout 0
    ours = EncoderLayer(s.d_model, s.heads, s.d_ff).to(device)
    copy_from_torch(ours, theirs)
    x = _rand(s.batch, s.seq, s.d_model, device=device)
    kpm = _padding(s, s.seq, device)
    return Pair(ours=lambda: ours(x, key_padding_mask=kpm),
                theirs=lambda: theirs(x, src_key_padding_mask=kpm),
                leaves=_leaves(ours, theirs, x))


class TorchTransformer(nn.Module):
    """nn.Transformer between copies of the reference model's embeddings, positional encoding and generator."""

    def __init__(self, reference, core):
        super().__init__()
        self.src_embed = copy.deepcopy(reference.src_embed)
        self.tgt_embed = copy.deepcopy(reference.tgt_embed)
        self.pos_enc = copy.deepcopy(reference.pos_enc)
        self.generator = copy.deepcopy(reference.generator)
        self.core = core

    def forward(self, src, tgt, src_key_padding_mask, tgt_key_padding_mask):
        hidden = self.core(self.pos_enc(self.src_embed(src)), self.pos_enc(self.tgt_embed(tgt)),
                           tgt_mask=causal_mask(tgt.size(1), device=tgt.device),
                           src_key_padding_mask=src_key_padding_mask, tgt_key_padding_mask=tgt_key_padding_mask,
                           memory_key_padding_mask=src_key_padding_mask)  # (B, T, C)
        return self.generator(hidden)  # (B, T, vocab)


def full_model(s, device):
    core = torch_transformer(s.model_d, s.heads, s.model_layers, s.model_d_ff)  # post-norm, relu, dropout 0
    ours = Transformer(s.vocab, s.vocab, s.model_d, s.heads, s.model_layers, s.model_d_ff, dropout=0.0,
                       max_len=s.model_seq)
    copy_transformer_from_torch(ours, core)
    theirs = TorchTransformer(ours, core)
    ours, theirs = ours.to(device), theirs.to(device)
    src = torch.randint(1, s.vocab, (s.batch, s.model_seq), device=device)  # (B, S)
    tgt = torch.randint(1, s.vocab, (s.batch, s.model_seq), device=device)  # (B, T)
    src_kpm, tgt_kpm = _padding(s, s.model_seq, device), _padding(s, s.model_seq, device).roll(1, 0)
    return Pair(ours=lambda: ours(src, tgt, src_kpm, tgt_kpm),
                theirs=lambda: theirs(src, tgt, src_kpm, tgt_kpm),
                leaves=_leaves(ours, theirs))


def _attention_sizes(s):
    return f"B={s.batch} H={s.heads} T={s.seq} D={s.d_model // s.heads}"


def _long(s):
    return dataclasses.replace(s, seq=2 * s.seq, d_model=s.d_model // 2)


def _layer_sizes(s):
    return f"B={s.batch} T={s.seq} C={s.d_model} H={s.heads}"


CASES = [
    Case("attention", "reference scaled_dot_product_attention vs F.scaled_dot_product_attention, no mask",
         _attention_sizes, attention),
    Case("attention, causal mask", "the same with a (T, T) causal mask (bool; torch's gets its negation)",
         _attention_sizes, lambda s, d: attention(s, d, masked=True)),
    Case("multi-head attention", "reference MultiHeadAttention vs nn.MultiheadAttention(batch_first=True), "
         "self-attention, need_weights=False (as the layers call it), no mask",
         _layer_sizes, multi_head_attention, MHA_TARGET),
    Case("multi-head attention, padding", "the same with a (B, T) key padding mask (every other row: last T/4)",
         _layer_sizes, lambda s, d: multi_head_attention(s, d, padded=True), MHA_TARGET),
    Case("multi-head attention, long", "the same as multi-head attention, at twice the sequence and half the "
         "width: the attention itself, not the projections, takes most of the time",
         lambda s: _layer_sizes(_long(s)), lambda s, d: multi_head_attention(_long(s), d), MHA_TARGET),
    Case("multi-head attention, weights", "the same, no mask, need_weights=True (both defaults; "
         "torch's with average_attn_weights=False, i.e. per-head weights as the reference's)",
         _layer_sizes, lambda s, d: multi_head_attention(s, d, need_weights=True), MHA_TARGET),
    Case("encoder layer", "reference EncoderLayer vs nn.TransformerEncoderLayer(batch_first=True): post-norm, "
         "relu, dropout 0; key padding mask",
         lambda s: f"{_layer_sizes(s)} d_ff={s.d_ff}", encoder_layer),
    Case("full model", "reference Transformer vs nn.Transformer (final norms nn.Identity, as post-norm) between "
         "copies of the reference's TokenEmbedding x2, PositionalEncoding and generator Linear; causal mask, "
         "source and target padding masks; logits backward",
         lambda s: (f"B={s.batch} S=T={s.model_seq} C={s.model_d} H={s.heads} "
                    f"layers={s.model_layers}+{s.model_layers} d_ff={s.model_d_ff} vocab={s.vocab}"),
         full_model),
]


# ----------------------------------------------------------------------------- timing
def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _run_once(forward, upstream, leaves, device):
    """Wall and CPU seconds of one forward and backward pass (gradients cleared beforehand, off the clock)."""
    for t in leaves:
        t.grad = None
    _sync(device)
    start, cpu_start = time.perf_counter(), time.process_time()
    forward().backward(upstream)
    _sync(device)
    return time.perf_counter() - start, time.process_time() - cpu_start


def measure(case, sizes, device, rounds, warmup):
    """Time one case: warm-up, then ``rounds`` rounds of reference then torch.nn."""
    torch.manual_seed(0)
    pair = case.build(sizes, device)
    with torch.no_grad():
        ours_out, theirs_out = pair.ours(), pair.theirs()
    max_diff = (ours_out - theirs_out).abs().max().item()
    upstream = torch.randn_like(ours_out)
    ours_times, theirs_times, cpu_ratios = [], [], []
    for i in range(warmup + rounds):
        (a, a_cpu), (b, b_cpu) = (_run_once(side, upstream, pair.leaves, device) for side in (pair.ours, pair.theirs))
        if i >= warmup:
            ours_times.append(a)
            theirs_times.append(b)
            cpu_ratios.append(a_cpu / b_cpu if b_cpu > 0 else float("nan"))
    ratio = statistics.median(a / b for a, b in zip(ours_times, theirs_times))
    cpu_ratio = statistics.median(cpu_ratios) if device.type == "cpu" else None
    return Timing(case, device.type, case.sizes(sizes), 1e3 * statistics.median(ours_times),
                  1e3 * statistics.median(theirs_times), ratio, cpu_ratio, max_diff)


def devices():
    return [torch.device("cpu")] + ([torch.device("cuda")] if torch.cuda.is_available() else [])


def rows(timings):
    """The summary rows of a list of Timings."""
    out = []
    for t in timings:
        note = f"ref {t.ours_ms:.2f} ms / nn {t.theirs_ms:.2f} ms"
        if t.cpu_ratio is not None:
            note += f"; CPU-time ratio {t.cpu_ratio:.2f}x"
        if t.case.target is not None:
            note += f"; target <= {t.case.target}x: {t.verdict}"
        out.append(Row(f"ref/torch.nn {t.device}", f"{t.case.name} ({t.sizes})", f"{t.ratio:.2f}x", note))
    return out


def run(args):
    """Measure every case on every device; print the details; return the summary rows."""
    sizes = SMOKE if args.smoke else FULL
    rounds, warmup = (2, 1) if args.smoke else (args.rounds, args.warmup)
    torch.set_num_threads(args.threads)
    print(f"Reference vs torch.nn, forward + backward, float32, dropout 0, training mode; "
          f"{torch.get_num_threads()} CPU thread(s) (torch.get_num_threads()); {rounds} rounds A B A B ... after "
          f"{warmup} warm-up; ratio = median over rounds of reference / torch.nn (lower is better)")
    print(f"Machine: {machine()}; {load_text()}")
    if args.smoke:
        print("SMOKE RUN: tiny sizes and 2 rounds; the figures mean nothing")
    print("Compared:")
    for case in CASES:
        print(f"  {case.name}: {case.compared}")
    timings = []
    for device in devices():
        for case in CASES:
            if args.cases and case.name not in args.cases:
                continue
            timings.append(measure(case, sizes, device, rounds, warmup))
            print(f"  ... {device.type} {case.name}: {timings[-1].ratio:.2f}x", flush=True)
    print()
    print(table(["device", "case", "sizes", "ref ms", "nn ms", "ratio", "CPU-time ratio", "target", "", "max |diff|"],
                [(t.device, t.case.name, t.sizes, f"{t.ours_ms:.2f}", f"{t.theirs_ms:.2f}", f"{t.ratio:.2f}x",
                  "" if t.cpu_ratio is None else f"{t.cpu_ratio:.2f}x",
                  "" if t.case.target is None else f"<= {t.case.target}x", t.verdict, f"{t.max_diff:.1e}")
                 for t in timings],
                align=["<", "<", "<", ">", ">", ">", ">", ">", "<", ">"]))
    print("ms: median wall milliseconds per forward + backward; ratio: median over rounds of reference / torch.nn "
          "wall time; CPU-time ratio: the same in this process's CPU time; max |diff|: the largest difference "
          "between the two forward outputs (they compute the same function)")
    print(f"After: {load_text()}")
    return rows(timings)


def add_arguments(parser):
    group = parser.add_argument_group("reference vs torch.nn")
    group.add_argument("--rounds", type=int, default=21, help="timed rounds per case (default 21; --quick: 7)")
    group.add_argument("--warmup", type=int, default=3, help="untimed rounds first (default 3)")
    group.add_argument("--threads", type=int, default=1, help="intra-op CPU threads (default 1)")
    group.add_argument("--smoke", action="store_true", help="tiny sizes and 2 rounds: proves the script runs")
    group.add_argument("--cases", nargs="+", metavar="CASE", choices=[c.name for c in CASES],
                       help="only these cases (quote names with spaces)")


def quicken(args):
    """--quick: fewer rounds, unless set explicitly."""
    if getattr(args, "quick", False) and args.rounds == 21:
        args.rounds = 7


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bench.nn_speed", description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    args = parser.parse_args(argv)
    quicken(args)
    found = run(args)
    print()
    print(summary(found))


if __name__ == "__main__":
    main()
