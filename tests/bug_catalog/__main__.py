"""Print how many catalogued wrong answers the public and the hidden checks catch, per exercise.

    python -m tests.bug_catalog
"""

import contextlib
import io
from collections import Counter

from autograder.checks import CheckFailed, check
from autograder.checks.hidden import check_hidden
from autograder.curriculum import LESSONS

from . import all_bugs, load


def caught(checker, bug, prelude):
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            checker(bug.exercise, load(bug, prelude))
        except (CheckFailed, NotImplementedError):
            return True
    return False


def main():
    total, public, hidden = Counter(), Counter(), Counter()
    for prelude, bug in all_bugs():
        total[bug.exercise] += 1
        public[bug.exercise] += caught(check, bug, prelude)
        hidden[bug.exercise] += caught(check_hidden, bug, prelude)
    print(f"{'exercise':<32} {'bugs':>5} {'public':>7} {'hidden':>7}")
    for lesson in LESSONS.values():
        for exercise in lesson.exercises:
            name = exercise.name
            print(f"{name:<32} {total[name]:>5} {public[name]:>7} {hidden[name]:>7}")
    print(f"{'all':<32} {sum(total.values()):>5} {sum(public.values()):>7} {sum(hidden.values()):>7}")


if __name__ == "__main__":
    main()
