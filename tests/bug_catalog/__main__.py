"""How well the checks know the catalogued wrong answers, per exercise and in all.

    python -m tests.bug_catalog                  every lesson
    python -m tests.bug_catalog 09 08_modern_transformer   only these lessons (numbers or names)

For each exercise: how many catalogued bugs the public and the hidden checks catch; how many
of them the first failing message names (the bug's ``names`` phrase is in the reported likely
mistake; target ≥ 95 %); and on how many of those the public check catches, the student's
check gives the same score as the grade ("the public check predicts the grade").
"""

import argparse
import contextlib
import io
from collections import Counter

from autograder.checks.hidden import hidden_report
from autograder.checks.public import public_report
from autograder.curriculum import LESSONS, lesson_of
from autograder.release import select_lessons

from . import all_bugs, load


def outcome(bug, prelude):
    """(public report, hidden report) of one bug, nothing printed."""
    with contextlib.redirect_stdout(io.StringIO()):
        return public_report(bug.exercise, load(bug, prelude)), hidden_report(bug.exercise, load(bug, prelude))


def named(bug, report):
    likely = report.likely_mistake or ""
    return bool(bug.names) and bug.names in likely


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m tests.bug_catalog", description=__doc__.split("\n\n")[0])
    parser.add_argument("lessons", nargs="*", help="only these lessons, by number (09) or name (default: all)")
    chosen = {lesson.name for lesson in select_lessons(parser.parse_args(argv).lessons)}
    counts = {key: Counter() for key in ("bugs", "public", "hidden", "named", "visible", "same score")}
    unnamed, disagreeing = [], []
    for prelude, bug in all_bugs():
        if lesson_of(bug.exercise).name not in chosen:
            continue
        public, hidden = outcome(bug, prelude)
        points = LESSONS[next(l for l in LESSONS if bug.exercise in {e.name for e in LESSONS[l].exercises})] \
            .exercise(bug.exercise).points
        name = bug.exercise
        counts["bugs"][name] += 1
        counts["public"][name] += not public.ok
        counts["hidden"][name] += not hidden.ok
        counts["named"][name] += named(bug, hidden)
        if not named(bug, hidden):
            unnamed.append(bug.id)
        if not public.ok:
            counts["visible"][name] += 1
            same = public.score(points) == hidden.score(points)
            counts["same score"][name] += same
            if not same:
                disagreeing.append(f"{bug.id}: check {public.score(points):g}, grade {hidden.score(points):g}")
    columns = list(counts)
    print(f"{'exercise':<32} " + " ".join(f"{c:>10}" for c in columns))
    for lesson in LESSONS.values():
        if lesson.name not in chosen:
            continue
        for exercise in lesson.exercises:
            print(f"{exercise.name:<32} " + " ".join(f"{counts[c][exercise.name]:>10}" for c in columns))
    totals = {c: sum(counts[c].values()) for c in columns}
    print(f"{'all':<32} " + " ".join(f"{totals[c]:>10}" for c in columns))
    share = totals["named"] / max(totals["bugs"], 1)
    print(f"\nnamed by the first failing message: {totals['named']} of {totals['bugs']} ({100 * share:.1f} %; target ≥ 95 %)")
    print(f"check and grade give the same score: {totals['same score']} of the {totals['visible']} bugs "
          f"the public checks catch")
    for title, items in (("not named", unnamed), ("check and grade disagree", disagreeing)):
        if items:
            print(f"\n{title}:")
            print("\n".join(f"  {item}" for item in items))


if __name__ == "__main__":
    main()
