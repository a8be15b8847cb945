"""The public checks a student runs in the lesson: stored probes, stored expected values.

No reference implementation and no hidden check is needed here: the expected outputs (and
what known mistakes would output) were computed from the reference when the course was
built and are stored in ``data/<lesson>.pt``.
"""

import contextlib
import functools
from importlib import resources

import torch

from ..curriculum import EXERCISES, lesson_of
from .compare import CheckFailed, Report, Tolerance, check_probes
from .forbidden import forbidden_message, forbidden_uses, source_of
from .runner import run_probes


@functools.lru_cache(maxsize=None)
def load_public_data(lesson_name):
    path = resources.files("autograder.checks") / "data" / f"{lesson_name}.pt"
    with path.open("rb") as f:
        return torch.load(f, weights_only=True)


def summarize(report, kind, tolerance):
    """Print a passing report; raise CheckFailed (or NotImplementedError) for a failing one."""
    # IPython leaves frames marked so out of a student's traceback (all but the last one), so
    # the traceback under a check cell is their own line, this raise and the message.
    __tracebackhide__ = True
    failure = _failure(report, kind)
    if failure is None:
        rtol, atol = tolerance.float32
        print(f"✓ {report.exercise} passes all {report.total} {kind} checks "
              f"(float32 compared at rtol={rtol:g}, atol={atol:g}).")
        return
    # What is wrong, and the likely mistake, is in the message below.
    raise failure


def _failure(report, kind):
    if report.not_implemented:
        return NotImplementedError(f"`{report.exercise}` is not implemented yet: write it in its answer cell, "
                                   "run that cell, then this one.")
    if not report.ok:
        return CheckFailed(failure_text(report, kind))
    return None


def failure_text(report, kind, shown=3):
    """A failing report in a student's words: the likely mistake first, then a few failed checks."""
    lines = [f"{report.exercise} fails {report.total - report.passed} of {report.total} {kind} checks."]
    if report.likely_mistake:
        hint = report.likely_mistake
        lines.append(f"Likely mistake: {hint}" + ("" if hint[-1] in ".?!)" else "."))
    lines += [f"✗ {failure}" for failure in report.failures[:shown]]
    if len(report.failures) > shown:
        lines.append(f"… and {len(report.failures) - shown} more.")
    return "\n".join(lines)


def forbidden_report(name, obj):
    """A failing Report if the student's code calls what it should build, else None."""
    exercise = lesson_of(name).exercise(name)
    used = forbidden_uses(source_of(obj), exercise.forbidden, own_names=EXERCISES)
    if not used:
        return None
    return Report(name, total=1, passed=0, failures=[forbidden_message(name, used)])


def check(name, obj):
    """Run the public checks of exercise ``name`` on the student's ``obj``."""
    __tracebackhide__ = True
    data = load_public_data(lesson_of(name).name)[name]
    tolerance = Tolerance(*data["tolerance"])
    report = forbidden_report(name, obj)
    if report is None:
        got = run_probes(obj, data["probes"])
        report = check_probes(name, data["probes"], got, data["expected"], lambda i: data["mistakes"][i], tolerance)
    summarize(report, "public", tolerance)


@contextlib.contextmanager
def skip_if_unimplemented(name):
    """Run a demo that uses a student's exercise, or say in one line that it needs it first."""
    try:
        yield
    except NotImplementedError:
        print(f"Implement `{name}` above to see this.")
