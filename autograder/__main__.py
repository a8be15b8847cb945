"""The course's command line.

    python -m autograder grade PATH.ipynb [--json]   trusted grade with the hidden checks (instructors)
    python -m autograder check PATH.ipynb [--json]   the same with the public checks only (students)
    python -m autograder check lessons/ [--json]     the whole course's progress in one table
    python -m autograder autograde [LESSON ...]      grade submitted/ into nbgrader's gradebook
    python -m autograder release DEST [LESSON ...]   what a class receives, one folder per lesson
    python -m autograder gradescope LESSON [--dest DIR]   the lesson's Gradescope autograder zip

Bad input (a missing file, not a notebook, an unknown lesson, no answer cells) prints a
one-line error and exits with code 2.
"""

import argparse
import json
import sys
from pathlib import Path

from .curriculum import INTRODUCTION, LESSONS
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
    print(f"  isolation: {result.isolation}")


def _autograde(args):
    from .grading.batch import GradingBusy, NoIsolation, autograde, summary_table

    try:
        results = autograde(args.course, args.lessons, args.student, args.jobs, args.timeout,
                            allow_no_isolation=args.allow_no_isolation)
    except (SubmissionError, GradingBusy, NoIsolation) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # nbgrader's MissingEntry: the assignment is not in the gradebook yet
        if exc.__class__.__name__ != "MissingEntry":
            raise
        print(f"error: {exc}; register the lesson and its graded cells first: "
              "`nbgrader generate_assignment --force LESSON` (docs/instructors.md, Generate)", file=sys.stderr)
        return 2
    print(summary_table(results))
    return 0


def _course(args, hidden):
    from .grading.progress import course_progress, progress_table

    if args.lesson:
        print("error: --lesson names the lesson of one notebook; a folder's notebooks are found by name",
              file=sys.stderr)
        return 2
    try:
        results = course_progress(args.notebook, hidden=hidden, step_timeout=args.timeout)
    except SubmissionError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({r.lesson: r.grade.as_dict() if r.grade else {"error": r.error} for r in results},
                         indent=2, ensure_ascii=False))
    else:
        print(progress_table(results, "hidden" if hidden else "public"))
    return 0


def _release(args):
    from .release import build_release, release_note

    try:
        built = build_release(args.dest, names=args.lessons)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for folder, lesson in built:
        print(f"wrote {folder}: {release_note(lesson)}")
    if not built:
        print("nothing written: no notebook in lessons/ for the lessons named (make lessons first?)")
    return 0


def _gradescope(args):
    from .gradescope import build_zip

    try:
        archive = build_zip(args.lesson, args.dest, args.visibility)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {archive}: upload it as the autograder of a Gradescope programming assignment "
          "(docs/instructors.md, section 7)")
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m autograder", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    for command, help_text in (("grade", "grade with the hidden checks (instructors)"),
                               ("check", "check with the public checks only (students)")):
        sub = commands.add_parser(command, help=help_text)
        sub.add_argument("notebook", help="path to a lesson notebook (.ipynb), or a folder of lessons "
                                          "(e.g. lessons/) for one table across the course")
        sub.add_argument("--json", action="store_true", help="print JSON: {exercise: {score, max, messages}}")
        sub.add_argument("--lesson", help="the lesson, when the file name doesn't say (e.g. 01_self_attention)")
        sub.add_argument("--timeout", type=float, default=60.0, help="seconds allowed per cell and per exercise")
    autograde = commands.add_parser("autograde", help="grade a class's submissions into nbgrader's gradebook")
    autograde.add_argument("lessons", nargs="*", help="lessons to grade (default: all)")
    autograde.add_argument("--course", default=".", help="the nbgrader course folder (default: here)")
    autograde.add_argument("--student", action="append", help="grade only this student (repeatable)")
    autograde.add_argument("--jobs", type=int, help="notebooks graded at once (default: one per core)")
    autograde.add_argument("--timeout", type=float, default=60.0, help="seconds allowed per cell and per exercise")
    autograde.add_argument("--allow-no-isolation", action="store_true",
                           help="grade into the gradebook even where the sandbox has no isolation (student code "
                                "then runs as you, beside the course and the gradebook)")
    release = commands.add_parser("release", help="write what students receive, one folder per lesson")
    release.add_argument("dest", help="folder to write (e.g. release/)")
    release.add_argument("lessons", nargs="*", help="only these lessons, by name or number (e.g. 01 02; default: all)")
    gradescope = commands.add_parser("gradescope", help="write a lesson's autograder zip for Gradescope")
    gradescope.add_argument("lesson", help="the lesson, by name or number (e.g. 01), or its notebook's path")
    gradescope.add_argument("--dest", default="gradescope", help="folder for the zip (default: gradescope/)")
    gradescope.add_argument("--visibility", choices=("visible", "after_published"), default="visible",
                            help="when students see each exercise's score and messages (default: at once)")
    args = parser.parse_args(argv)
    if args.command == "autograde":
        return _autograde(args)
    if args.command == "release":
        return _release(args)
    if args.command == "gradescope":
        return _gradescope(args)
    hidden = args.command == "grade"
    if Path(args.notebook).is_dir():
        return _course(args, hidden)
    if Path(args.notebook).stem == INTRODUCTION and args.lesson is None:
        print(f"{args.notebook}: {INTRODUCTION} is the course's ungraded introduction: it has no exercises, so "
              f"there is nothing to {args.command}. The first graded lesson is {next(iter(LESSONS))}.")
        return 0
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
