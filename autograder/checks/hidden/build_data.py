"""Build the public checks' stored data from the reference: ``python -m autograder.checks.hidden.build_data``.

For each lesson, ``autograder/checks/data/<lesson>.pt`` holds, per exercise, the public probes,
the reference's results on them, and what each known mistake returns on them. A test proves
the stored data equal to what this module builds.
"""

import sys
from pathlib import Path

import torch

from ...curriculum import LESSONS
from ..runner import run_probe, run_probes
from . import specs

DATA_DIR = Path(__file__).resolve().parent.parent / "data"


def public_data(lesson_name):
    """{exercise: {probes, expected, mistakes, tolerance, requirements}} for one lesson.

    Built on one thread: some results (gradients through LayerNorm, say) differ in their last
    bits with the number of threads, and the stored bytes must not depend on the machine.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _public_data(lesson_name)
    finally:
        torch.set_num_threads(threads)


def _public_data(lesson_name):
    data = {}
    for exercise in LESSONS[lesson_name].exercises:
        spec = specs().get(exercise.name)
        if spec is None:
            continue
        probes = spec.public_probes()
        data[exercise.name] = {
            "probes": probes,
            "expected": run_probes(spec.reference, probes),
            "mistakes": [[(hint, run_probe(wrong, p, twins=False)) for hint, wrong in spec.mistakes] for p in probes],
            "tolerance": [list(spec.tolerance.float32), list(spec.tolerance.float64)],
            "requirements": spec.requirement_table(),
        }
    return data


def main(argv=None):
    import argparse

    parser = argparse.ArgumentParser(prog="python -m autograder.checks.hidden.build_data",
                                     description="rebuild the public checks' stored data from the reference")
    parser.add_argument("lessons", nargs="*", help="lessons to rebuild (default: all)")
    args = parser.parse_args(argv)
    DATA_DIR.mkdir(exist_ok=True)
    for lesson_name in args.lessons or LESSONS:
        data = public_data(lesson_name)
        if data:
            torch.save(data, DATA_DIR / f"{lesson_name}.pt")
            print(f"wrote {DATA_DIR / f'{lesson_name}.pt'} ({', '.join(data)})")


if __name__ == "__main__":
    sys.exit(main())
