"""Lesson 09's Llama on the shipped checkpoint against transformers: logits, and generation speed.

    python -m bench.open_weights                 three timed rounds of each generation
    python -m bench.open_weights --quick         one round

1. Equality: the largest |logits of the course's LlamaLM - logits of transformers.LlamaForCausalLM|,
   both loaded from data/llama_shakespeare/, on a 60-token passage, in float32 and in float64
   (stock transformers computes the rotary angles and RMSNorm in float32, so float64 agrees to
   ~1e-7 only), and in float64 with those two parts in float64 too (open_weights.in_model_dtype).
2. Speed: 256 new tokens after the shipped model's chat prompt, greedy, one thread, float32:
   lesson 07's generate on the reference LlamaLM with the cache (cached_gqa_attention) and without
   it (the whole sequence again at every step), and transformers' own generate (its KV cache, its
   sdpa attention) on the same model and settings. Medians over rounds taken A B C A B C ...;
   the ratio is the reference's tokens/s with the cache over transformers'. The issue's goal:
   within 1.5x. Reported, not asserted.
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout's autograder, installed or not

import torch  # noqa: E402

from autograder.reference import LlamaLM, generate, load_llama_weights  # noqa: E402
from bench.report import Row, load_text, quicken_defaults, summary  # noqa: E402
from lesson_tools import open_weights  # noqa: E402
from lesson_tools.threads import cpu_threads  # noqa: E402

NEW_TOKENS = 256


def _models(dtype):
    from transformers import LlamaForCausalLM

    theirs = LlamaForCausalLM.from_pretrained(open_weights.CHECKPOINT, dtype=dtype).eval()
    ours = LlamaLM.from_config(open_weights.read_config()).to(dtype)
    return load_llama_weights(ours, open_weights.read_weights()).eval(), theirs


def equality_rows():
    tokenizer = open_weights.load_tokenizer()
    ids = torch.tensor([tokenizer.encode(open_weights.CHECKPOINT.parent.joinpath(
        "shakespeare", "shakespeare.txt").read_text()[:400]).ids[:60]])  # (1, 60)
    rows = []
    with torch.no_grad():
        for dtype in (torch.float32, torch.float64):
            ours, theirs = _models(dtype)
            difference = (ours(ids) - theirs(ids).logits).abs().max().item()
            print(f"{str(dtype):14} max |ours - transformers| = {difference:.1e}")
            rows.append(Row("lesson 09 open weights", f"max |logits - transformers|, shipped checkpoint, {dtype}",
                            f"{difference:.1e}", "stock transformers: rotary and norms in float32"))
        exact = (ours(ids) - open_weights.in_model_dtype(theirs)(ids).logits).abs().max().item()
    print(f"float64, transformers' rotary and norms in float64: {exact:.1e}")
    rows.append(Row("lesson 09 open weights", "the same, float64, transformers' rotary and norms in float64",
                    f"{exact:.1e}", "the architecture is the same, to rounding"))
    return rows


def speed_rows(rounds):
    ours, theirs = _models(torch.float32)
    prompt = torch.tensor([open_weights.load_tokenizer().encode(open_weights.chat_text(
        [{"role": "user", "content": "What light through yonder window breaks?"}])).ids])
    runs = {
        "reference, with the cache": lambda: generate(ours, prompt, NEW_TOKENS, top_k=1, use_cache=True),
        "reference, without the cache": lambda: generate(ours, prompt, NEW_TOKENS, top_k=1, use_cache=False),
        "transformers' generate": lambda: theirs.generate(prompt, max_new_tokens=NEW_TOKENS,
                                                          min_new_tokens=NEW_TOKENS, do_sample=False,
                                                          pad_token_id=0),
    }
    seconds, outputs = {name: [] for name in runs}, {}
    with cpu_threads(1), torch.no_grad():
        for _ in range(rounds):
            for name, run in runs.items():
                started = time.perf_counter()
                outputs[name] = run()
                seconds[name].append(time.perf_counter() - started)
    rate = {name: NEW_TOKENS / statistics.median(times) for name, times in seconds.items()}
    same = all(torch.equal(out, outputs["transformers' generate"]) for out in outputs.values())
    rows = []
    for name in runs:
        print(f"{name:30} {rate[name]:7.0f} tokens/s")
        rows.append(Row("lesson 09 generation", f"{NEW_TOKENS} new tokens, greedy, 1 thread, {name}",
                        f"{rate[name]:.0f} tokens/s", f"median of {rounds}"))
    ratio = rate["transformers' generate"] / rate["reference, with the cache"]
    print(f"transformers' generate is {ratio:.2f}x the reference's speed with the cache; the same tokens: {same}")
    rows.append(Row("lesson 09 generation", "transformers' generate / the reference with the cache",
                    f"{ratio:.2f}x", f"goal: within 1.5x; the same tokens: {same}"))
    return rows


def run(args):
    print(f"Before: {load_text()}")
    rows = equality_rows() + speed_rows(args.open_weights_rounds)
    print(f"After: {load_text()}")
    return rows


def add_arguments(parser):
    group = parser.add_argument_group("lesson 09 open weights")
    group.add_argument("--open-weights-rounds", type=int, default=3, help="timed rounds (default 3; --quick: 1)")


def quicken(args):
    quicken_defaults(args, {"open_weights_rounds": (3, 1)})


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bench.open_weights", description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    parser.add_argument("--quick", action="store_true", help="one timed round")
    args = parser.parse_args(argv)
    quicken(args)
    found = run(args)
    print()
    print(summary(found))


if __name__ == "__main__":
    main()
