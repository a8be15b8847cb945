"""The reference's versions of the exercises another exercise calls, as source for the sandbox.

"One mistake costs one exercise": while exercise X is graded, the reference of every exercise
of X's lesson that X calls stands in for the student's. The sandbox gets that reference as
source code, for X's probes only, and never X's own reference: ``callee_source`` keeps the
lesson's reference module's imports, constants and helpers and the callees' definitions, and
drops the definitions of every other exercise of the lesson. In-process (nbgrader's hidden test cells), ``reference_callees``
swaps the objects into the student's namespace for the duration of X's checks.
"""

import ast
import functools
import importlib
import inspect
import re

from ...curriculum import callees, lesson_of
from ..runner import swapped  # noqa: F401  (re-exported for the hidden checks)

REFERENCE_PACKAGE = "autograder.reference"


@functools.lru_cache(maxsize=None)
def callee_source(exercise_name):
    """Source defining the reference of every exercise ``exercise_name`` calls; "" if it calls none."""
    names = callees(exercise_name)
    if not names:
        return ""
    module_name = f"{REFERENCE_PACKAGE}.{lesson_of(exercise_name).reference_module}"
    source = inspect.getsource(importlib.import_module(module_name))
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    exercises = {e.name for e in lesson_of(exercise_name).exercises}
    kept = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
            if node.name in exercises and node.name not in names:
                continue  # another exercise of the lesson, X itself among them: never shipped
        start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])]) - 1
        text = "".join(lines[start:node.end_lineno])
        if isinstance(node, ast.ImportFrom) and node.level:
            # The module's relative imports, made absolute: the sandbox has autograder.reference
            # with the earlier lessons' modules these name.
            package = REFERENCE_PACKAGE.rsplit(".", node.level - 1)[0]  # ".x" in the reference, "..x" above it
            text = re.sub(r"^from\s+\.+", f"from {package}.", text)
        kept.append(text)
    return "\n".join(kept)


def reference_callee_objects(exercise_name):
    """{name: reference object} for the exercises ``exercise_name`` calls."""
    reference = importlib.import_module(REFERENCE_PACKAGE)
    return {name: getattr(reference, name) for name in callees(exercise_name)}
