"""Every benchmark of the course, then one table of every figure (`make bench`).

    python -m bench.all                              everything (22 minutes on 2 cores)
    python -m bench.all --quick                      1 grading run, 1 training seed, 7 rounds per ratio, a class of 20
    python -m bench.all --only nn                    one section (or several: --only nbval grade)
    python -m bench.all --only nn --threads 2 --rounds 41

Sections: nbval (seconds per solution notebook, bench/notebooks.py), grade (the trusted
grader on each solution notebook, bench/notebooks.py), reversal (lesson 06's training over
three seeds, bench/reversal.py), class (a class of 100 students x every lesson graded at once by
`autograder autograde`, with warm servers, and 8 of them with fresh interpreters;
bench/class_grading.py), nn (reference vs torch.nn speed, bench/nn_speed.py), modern
(lesson 08's block-wise attention: error, memory, speed; bench/modern.py), lm (lesson 07's
language model: training over the seeds, the KV cache's speed-up, a sample; bench/language_model.py),
open (lesson 09's Llama on the shipped checkpoint: logits against transformers in float32 and
float64, 256 tokens with and without the cache and transformers' own generate; bench/open_weights.py). Each
prints its details as it goes; the summary table at the end has one row per figure.
Nothing is asserted. The slow nbgrader-vs-trusted comparison is separate: bench/grading.py
(`make bench-grading`).
"""

import argparse
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout's autograder, installed or not

from bench import class_grading, language_model, modern, nn_speed, notebooks, open_weights, reversal  # noqa: E402
from bench.report import load_text, machine, summary  # noqa: E402

SECTIONS = ("nbval", "grade", "class", "reversal", "lm", "nn", "modern", "open")


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bench.all", description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", choices=SECTIONS, default=list(SECTIONS), metavar="SECTION",
                        help=f"run only these sections: {', '.join(SECTIONS)}")
    parser.add_argument("--quick", action="store_true", help="fewer repeats everywhere (figures noisier)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2],
                        help="training runs of lessons 06 and 07 (--quick: 0)")
    notebooks.add_arguments(parser)
    class_grading.add_arguments(parser)
    nn_speed.add_arguments(parser)
    modern.add_arguments(parser)
    open_weights.add_arguments(parser)
    args = parser.parse_args(argv)
    notebooks.quicken(args)
    class_grading.quicken(args)
    nn_speed.quicken(args)
    modern.quicken(args)
    open_weights.quicken(args)
    if args.quick and args.seeds == [0, 1, 2]:
        args.seeds = [0]

    started = time.perf_counter()
    print(f"Benchmarks {', '.join(args.only)}{' (quick)' if args.quick else ''}, "
          f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC; {machine()}; {load_text()}")
    found = []
    for section in SECTIONS:
        if section not in args.only:
            continue
        print(f"\n=== {section} " + "=" * 60)
        if section == "nbval":
            found += notebooks.run_nbval()
        elif section == "grade":
            found += notebooks.run_grade(args.runs)
        elif section == "class":
            found += class_grading.run(args.students, args.cold_students)
        elif section == "reversal":
            found += reversal.rows(reversal.train_seeds(args.seeds))
        elif section == "lm":
            found += language_model.run(language_model.parse_args(
                ["--seeds", *map(str, args.seeds)] + (["--quick"] if args.quick else [])))
        elif section == "nn":
            found += nn_speed.run(args)
        elif section == "modern":
            found += modern.run(args)
        else:
            found += open_weights.run(args)
    minutes = (time.perf_counter() - started) / 60
    print("\n=== summary " + "=" * 60)
    print(f"{machine()}; {load_text()} at the end; {minutes:.1f} min in all")
    print(summary(found))


if __name__ == "__main__":
    main()
