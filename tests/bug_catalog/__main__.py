"""How well the checks know the catalogued wrong answers, per exercise and in all.

    python -m tests.bug_catalog                  every lesson
    python -m tests.bug_catalog 09 08_modern_transformer   only these lessons (numbers or names)

For each exercise: how many catalogued bugs the public and the hidden checks catch; how many
of them the first failing message names (the bug's ``names`` phrase is in the reported likely
mistake; target ≥ 95 %); and on how many of those the public check catches, the student's
check gives the same score as the grade ("the public check predicts the grade").

Then what one mistake costs: the share of its exercise's points each bug loses in the grade
(1 - score / points), its median over all bugs, per lesson, and over the bugs that break one
stated requirement (target ≤ 0.5 there). A bug breaks one stated requirement when one of the
exercise's behavioural requirements fails, whatever secondary ones (dtype, device, gradients,
dropout: ``SECONDARY``) fail with it, or, failing none of those, when one secondary one fails:
a secondary requirement that fails next to a behavioural one is the same mistake seen again.
"""

import argparse
import contextlib
import io
import statistics
from collections import Counter, defaultdict

from autograder.checks.hidden import hidden_report
from autograder.checks.public import public_report
from autograder.curriculum import LESSONS, lesson_of
from autograder.release import select_lessons

from . import all_bugs, load


def outcome(bug, prelude):
    """(public report, hidden report) of one bug, nothing printed."""
    with contextlib.redirect_stdout(io.StringIO()):
        return public_report(bug.exercise, load(bug, prelude)), hidden_report(bug.exercise, load(bug, prelude))


# What a requirement key names when the requirement is about a property of any answer's code (the dtype
# it follows, the device, its gradients, its mode) rather than the exercise's own behaviour.
SECONDARY = ("dtype", "device", "gradient", "dropout")


def secondary(key):
    return any(word in key for word in SECONDARY)


def breaks_one_requirement(report):
    """Whether a failing report fails one behavioural requirement (secondary ones beside it aside), or
    else exactly one secondary one."""
    failing = [r.key for r in report.failing_requirements]
    behavioural = [key for key in failing if not secondary(key)]
    return len(behavioural or failing) == 1


def cost(report, points):
    """The share of the exercise's points the report loses."""
    return 1 - report.score(points) / points


def cost_lines(costs):
    """The median share one mistake costs, over all bugs, per lesson, and over those that break one
    requirement; ``costs`` holds (lesson, one requirement or not, share) per bug."""
    def median(shares):
        return f"{statistics.median(shares):.2f} (mean {statistics.mean(shares):.2f}, {len(shares)} bugs)" \
            if shares else "no bugs"

    by_lesson = defaultdict(list)
    for lesson, _, share in costs:
        by_lesson[lesson].append(share)
    one = [share for _, single, share in costs if single]
    lines = ["share of its exercise's points one mistake costs in the grade (1 - score / points):",
             f"  all bugs: median {median([share for _, _, share in costs])}",
             f"  bugs that break one stated requirement: median {median(one)} (target ≤ 0.50)"]
    for lesson in sorted(by_lesson):
        single = [share for name, s, share in costs if name == lesson and s]
        lines.append(f"  lesson {lesson}: median {median(by_lesson[lesson])}; one requirement: {median(single)}")
    return lines


def named(bug, report):
    likely = report.likely_mistake or ""
    return bool(bug.names) and bug.names in likely


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m tests.bug_catalog", description=__doc__.split("\n\n")[0])
    parser.add_argument("lessons", nargs="*", help="only these lessons, by number (09) or name (default: all)")
    parser.add_argument("--each", action="store_true",
                        help="also list every bug's cost and the requirements it fails")
    args = parser.parse_args(argv)
    chosen = {lesson.name for lesson in select_lessons(args.lessons)}
    counts = {key: Counter() for key in ("bugs", "public", "hidden", "named", "visible", "same score")}
    unnamed, disagreeing, costs, each = [], [], [], []
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
        costs.append((lesson_of(name).name, breaks_one_requirement(hidden), cost(hidden, points)))
        each.append(f"{bug.id}: costs {cost(hidden, points):.2f}, "
                        f"{'one requirement' if breaks_one_requirement(hidden) else 'several'}, fails "
                        f"{[r.key for r in hidden.failing_requirements]}")
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
    print()
    print("\n".join(cost_lines(costs)))
    for title, items in (("not named", unnamed), ("check and grade disagree", disagreeing),
                         ("what each bug costs", each if args.each else [])):
        if items:
            print(f"\n{title}:")
            print("\n".join(f"  {item}" for item in items))


if __name__ == "__main__":
    main()
