"""The public checks a student runs in the lesson: stored probes, stored expected values.

No reference implementation and no hidden check is needed here: the expected outputs (and
what known mistakes would output) were computed from the reference when the course was
built and are stored in ``data/<lesson>.pt``.
"""

import contextlib
import dataclasses
import functools
import inspect
import io
import sys
from importlib import resources

import torch

from ..curriculum import EXERCISES, lesson_of
from .compare import NUMBER_TOLERANCE, CheckFailed, Report, RequirementResult, Tolerance, check_probes
from .forbidden import forbidden_message, forbidden_uses, source_of
from .runner import run_probes
from .static import cell_source_of


@functools.lru_cache(maxsize=None)
def load_public_data(lesson_name):
    path = resources.files("autograder.checks") / "data" / f"{lesson_name}.pt"
    with path.open("rb") as f:
        return torch.load(f, weights_only=True)


def summarize(report, kind, tolerance, notes=()):
    """Print a passing report; raise CheckFailed (or NotImplementedError) for a failing one.

    ``notes`` are lines put first in a failure's message (e.g. that a function this exercise
    calls fails its own check).
    """
    # IPython leaves frames marked so out of a student's traceback (all but the last one), so
    # the traceback under a check cell is their own line, this raise and the message.
    __tracebackhide__ = True
    failure = _failure(report, kind, notes)
    if failure is None:
        print(passing_text(report, kind, tolerance))
        return
    # What is wrong, and the likely mistake, is in the message below.
    raise failure


def passing_text(report, kind, tolerance):
    """One line for a report that passed: how many checks, how many requirements, at what tolerance."""
    rtol, atol = tolerance.float32
    how = f"float32 compared at rtol={rtol:g}, atol={atol:g}"
    if report.exact:
        how = "exact comparison"
    elif report.numbers_only:
        how = f"Python floats compared at rel_tol={NUMBER_TOLERANCE[0]:g}, abs_tol={NUMBER_TOLERANCE[1]:g}"
    met = len(report.requirements)
    what = f", meeting its {met} requirements" if met > 1 else ""
    return f"✓ {report.exercise} passes all {report.total} {kind} checks{what} ({how})."


def _failure(report, kind, notes=()):
    if report.not_implemented:
        return NotImplementedError(f"`{report.exercise}` is not implemented yet: write it in its answer cell, "
                                   "run that cell, then this one.")
    if not report.ok:
        return CheckFailed("\n".join([*notes, failure_text(report, kind)]))
    return None


def _sentence(text):
    return text + ("" if text[-1] in ".?!)" else ".")


def _points(name):
    return lesson_of(name).exercise(name).points


def failure_text(report, kind, shown=2, points=None):
    """A failing report in a student's words: the likely mistake first, then each requirement,
    ✓ or ✗, with a few of the failed checks under each ✗."""
    points = _points(report.exercise) if points is None else points
    requirements = list(report.requirements.values())
    met = sum(r.met for r in requirements)
    lines = [f"{report.exercise} meets {met} of {len(requirements)} requirements "
             f"({report.score(points):g} / {points:g} points): it fails {report.total - report.passed} of "
             f"{report.total} {kind} checks."]
    likely = report.likely_mistake
    if likely:
        lines.append(f"Likely mistake: {_sentence(likely)}")
    first = True
    total = sum(r.weight for r in requirements)
    for requirement in requirements:
        share = f"({requirement.weight:g} of {total:g} shares)"
        if requirement.met:
            lines.append(f"✓ {requirement.text} {share[:-1]}{_judged_on_own(requirement)})")
            continue
        own = requirement.likely_mistake
        if own and own == likely and not first:  # the mistake already named, showing again: no repeat
            lines.append(f"✗ {requirement.text} {share}: the likely mistake above fails these checks too")
            continue
        lines.append(f"✗ {requirement.text} {share}")
        first = False
        if own and own != likely:
            lines.append(f"    Likely mistake: {_sentence(own)}")
        lines += [f"    ✗ {failure}" for failure in requirement.failures[:shown]]
        if len(requirement.failures) > shown:
            lines.append(f"    … and {len(requirement.failures) - shown} more.")
    return "\n".join(lines)


def _judged_on_own(requirement):
    """What a met requirement was judged against where the student's formula differs from the reference's."""
    ways = sorted(set(requirement.judged_on_own))
    if not ways:
        return ""
    against = [f"your own results {way}" for way in ways if way != "gradients"]
    if "gradients" in ways:
        against.append("the inputs and weights your gradients reach")
    return f"; judged against {' and '.join(against)}, since your values differ from the reference's"


def forbidden_report(name, obj):
    """A failing Report if the student's code calls what it should build, else None."""
    exercise = lesson_of(name).exercise(name)
    used = forbidden_uses(source_of(obj), exercise.forbidden, own_names=EXERCISES)
    if not used:
        return None
    message = forbidden_message(name, used)
    refused = RequirementResult("own-code", "is your own code, not a call to PyTorch's built-in", total=1,
                                failures=[message], hints=[None])
    return Report(name, total=1, passed=0, failures=[message], hints=[None], requirements={"own-code": refused})


def public_report(name, obj):
    """The Report of exercise ``name``'s public checks on the student's ``obj`` (nothing printed)."""
    data = load_public_data(lesson_of(name).name)[name]
    report = forbidden_report(name, obj)
    if report is None:
        got = run_probes(obj, data["probes"])
        report = check_probes(name, data["probes"], got, data["expected"], lambda i: data["mistakes"][i],
                              Tolerance(*data["tolerance"]), data.get("requirements", ()), cell_source_of(obj))
    return report


def student_namespace(obj):
    """The global names the student's function or class sees: the notebook's namespace."""
    function = obj
    if isinstance(obj, type):
        function = next((v for v in vars(obj).values() if inspect.isfunction(v)), None)
    globals_ = getattr(function, "__globals__", None)
    if globals_ is None:
        globals_ = vars(sys.modules.get(getattr(obj, "__module__", ""), None) or object())
    return globals_


def callee_notes(name, obj):
    """'X uses your Y, which fails its check: fix that first', for each exercise of the lesson that
    ``name`` calls whose student version (in the namespace ``obj`` sees) fails its public checks."""
    notes = []
    namespace = student_namespace(obj)
    for callee in lesson_of(name).exercise(name).calls:
        theirs = namespace.get(callee)
        if theirs is None:
            continue
        with contextlib.redirect_stdout(io.StringIO()):
            report = public_report(callee, theirs)
        if not report.ok:
            notes.append(f"{name} uses your {callee}, which fails its check: fix that first "
                         f"(the grader checks {name} with a correct {callee}, so it costs you only {callee}'s points).")
    return notes


def check(name, obj):
    """Run the public checks of exercise ``name`` on the student's ``obj``."""
    __tracebackhide__ = True
    data = load_public_data(lesson_of(name).name)[name]
    report = public_report(name, obj)
    notes = callee_notes(name, obj) if not report.ok and not report.not_implemented else []
    summarize(without_diagnosis(report) if notes else report, "public", Tolerance(*data["tolerance"]), notes)


def without_diagnosis(report):
    """The report with no likely mistake: when the student's own callee fails, it explains the caller's failure,
    and a diagnosis of the caller's code would be a guess (a wrong layer makes a right stack look wrong)."""
    requirements = {key: dataclasses.replace(r, hints=[None] * len(r.hints)) for key, r in report.requirements.items()}
    return dataclasses.replace(report, hints=[None] * len(report.hints), requirements=requirements)


@contextlib.contextmanager
def skip_if_unimplemented(name):
    """Run a demo that uses a student's exercise, or say in one line that it needs it first."""
    try:
        yield
    except NotImplementedError:
        print(f"Implement `{name}` above to see this.")
