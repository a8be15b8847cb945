"""A catalog of realistic wrong answers, one module per lesson, as a student would write them.

Each Bug is source code for one exercise. The tests execute it the way the grader does (the
lesson's imports first) and require that the hidden checks fail it and, where the bug has a
known signature, that the message names the mistake (``names`` must appear in the likely
mistake the checks report).
"""

import importlib
import linecache
from dataclasses import dataclass

from autograder.curriculum import LESSONS

PRELUDE = """
import math
import torch
from torch import nn
import torch.nn.functional as F
"""


@dataclass(frozen=True)
class Bug:
    exercise: str
    title: str  # what the student got wrong, in a few words
    source: str  # the student's whole answer cell
    names: str = ""  # a phrase the reported likely mistake must contain ("" = any failure will do)

    @property
    def id(self):
        return f"{self.exercise}: {self.title}"


def load(bug, prelude=PRELUDE):
    """Execute a bug's source after the lesson prelude; return the object it defines."""
    namespace = {}
    exec(compile(prelude, "<prelude>", "exec"), namespace)
    filename = f"<bug {bug.id}>"
    # Registered like a notebook cell, so that inspect.getsource finds it as it would in Jupyter.
    linecache.cache[filename] = (len(bug.source), None, bug.source.splitlines(True), filename)
    exec(compile(bug.source, filename, "exec"), namespace)
    return namespace[bug.exercise]


def edited(source, *edits):
    """``source`` with each (old, new) edit made: a wrong answer as a right one with a few lines
    changed. An old text that isn't there exactly once is an error."""
    for before, after in edits:
        assert source.count(before) == 1, f"not exactly once in the source: {before!r}"
        source = source.replace(before, after)
    return source


def all_bugs():
    bugs = []
    for lesson in LESSONS:
        try:
            module = importlib.import_module(f"{__name__}.l{lesson}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.l{lesson}":
                raise
            continue
        bugs += [(getattr(module, "PRELUDE", PRELUDE), bug) for bug in module.BUGS]
    return bugs
