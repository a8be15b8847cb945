"""The course's command line.

    python -m autograder grade PATH.ipynb [--json]   trusted grade with the hidden checks (instructors)
    python -m autograder check PATH.ipynb [--json]   the same with the public checks only (students)

Bad input (a missing file, not a notebook, an unknown lesson, no answer cells) prints a
one-line error and exits with code 2.
"""

import argparse
import json
import sys

from .grading.grade import SubmissionError, grade


def _print_table(result, kind):
    print(f"{result.lesson}: {result.path} ({kind} checks)")
    width = max(len(name) for name in result.exercises)
    for name, exercise in result.exercises.items():
        mark = "✓" if exercise.score == exercise.max else "✗"
        print(f"  {mark} {name:<{width}}  {exercise.score:g} / {exercise.max:g}")
        for message in exercise.messages:
            for line in message.splitlines():
                print(f"      {line}")
    print(f"  total {'':<{width}}  {result.score:g} / {result.max:g}")


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m autograder", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    for command, help_text in (("grade", "grade with the hidden checks (instructors)"),
                               ("check", "check with the public checks only (students)")):
        sub = commands.add_parser(command, help=help_text)
        sub.add_argument("notebook", help="path to a lesson notebook (.ipynb)")
        sub.add_argument("--json", action="store_true", help="print JSON: {exercise: {score, max, messages}}")
        sub.add_argument("--lesson", help="the lesson, when the file name doesn't say (e.g. 01_self_attention)")
        sub.add_argument("--timeout", type=float, default=60.0, help="seconds allowed per cell and per exercise")
    args = parser.parse_args(argv)
    hidden = args.command == "grade"
    try:
        result = grade(args.notebook, hidden=hidden, lesson_name=args.lesson, step_timeout=args.timeout)
    except SubmissionError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result.as_dict(), indent=2, ensure_ascii=False))
    else:
        _print_table(result, "hidden" if hidden else "public")
    return 0


if __name__ == "__main__":
    sys.exit(main())
