"""Hidden checks: the grader's probes, expected values computed live by the reference.

Never shipped to students. ``check_hidden`` runs them in-process (for nbgrader's hidden test
cells); the trusted grader (``autograder.grading``) instead runs the student's code on
``probes_for(name)`` in a sandbox and calls ``report_for`` on what comes back.
"""

import copy
import functools
import importlib

import torch

from ...curriculum import LESSONS
from ..compare import Report, check_probes
from ..public import forbidden_report, student_namespace, summarize
from ..runner import run_probe, run_probes
from ..static import cell_source_of
from .callees import reference_callee_objects, swapped

# One module of checks per lesson, named l<NN>_<topic>; lessons without one yet are skipped.
_LESSON_MODULES = {name: f"{__name__}.l{name}" for name in LESSONS}


@functools.lru_cache(maxsize=None)
def specs():
    """{exercise name: ExerciseChecks} for every lesson whose checks exist."""
    found = {}
    for module_name in _LESSON_MODULES.values():
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            continue
        found.update({spec.name: spec for spec in module.EXERCISES})
    return found


def available_devices():
    return ("cpu", "cuda") if torch.cuda.is_available() else ("cpu",)


def probes_for(name, devices=None):
    """Every probe the grader runs for an exercise: the public ones and the hidden ones (a copy
    of its own, which the caller may run code on)."""
    return copy.deepcopy(shared_probes(name, devices))


def shared_probes(name, devices=None):
    """The same, built once per process and shared: for callers that only send them to the sandbox
    and read them, never run code on them (report_for runs the reference on copies)."""
    return _built_probes(name, tuple(devices or available_devices()))


@functools.lru_cache(maxsize=None)
def _built_probes(name, devices):
    return specs()[name].hidden_probes(list(devices))


# What the reference (and each known mistake) gives on a probe is the same for every student:
# computed once per process, keyed by the exercise and the probes' ids, which name their inputs.
_EXPECTED, _MISTAKEN = {}, {}


def _key(name, probes):
    return name, tuple(probe["id"] for probe in probes)


def _expected(name, probes):
    key = _key(name, probes)
    if key not in _EXPECTED:
        _EXPECTED[key] = run_probes(specs()[name].reference, copy.deepcopy(probes))
    return _EXPECTED[key]


def report_for(name, probes, got_results, source=None):
    """Compare a student's results (plain data) with the reference's; the trusted side of grading.
    ``source``, the answer cell, decides the rules read in it ("no Python loops")."""
    spec = specs()[name]
    expected = _expected(name, probes)

    def mistakes_for(i):
        key = (*_key(name, probes), i)
        if key not in _MISTAKEN:
            _MISTAKEN[key] = [(hint, run_probe(wrong, copy.deepcopy(probes[i]), twins=False)) for hint, wrong in spec.mistakes]
        return _MISTAKEN[key]

    return check_probes(name, probes, got_results, expected, mistakes_for, spec.tolerance, spec.requirement_table(),
                        source)


def hidden_report(name, obj):
    """The Report of the hidden checks on the student's ``obj``, run in this process.

    As in the trusted grader, the reference's versions of the exercises ``name`` calls stand in
    for the student's while it is checked (one mistake costs one exercise).
    """
    report = forbidden_report(name, obj)
    if report is None:
        probes = probes_for(name)
        with swapped(student_namespace(obj), reference_callee_objects(name)):
            results = run_probes(obj, probes)
        report = report_for(name, probes, results, cell_source_of(obj))
    return report


def check_hidden(name, obj):
    """Run the hidden checks on the student's object in this process (nbgrader's hidden tests)."""
    __tracebackhide__ = True
    summarize(hidden_report(name, obj), "hidden", specs()[name].tolerance)


__all__ = ["check_hidden", "hidden_report", "probes_for", "report_for", "specs", "Report"]
