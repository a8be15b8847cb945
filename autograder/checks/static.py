"""Rules decided by reading the student's source, which the grader holds: nothing the student's
process measures or reports can change what the source says.

A probe with a "source_rule" (a key of RULES) is decided by the rule on the answer cell's source
when the caller has it (the grader: the cell; the notebook: the cell the function was defined in),
and by its values, as any probe, too.
"""

import ast
import inspect
import linecache
import textwrap
from pathlib import Path

# Calls that run Python code once per element, as a loop does.
LOOPING_CALLS = {"map", "filter", "reduce", "fromfunction", "vectorize", "apply_", "map_", "exec", "eval"}


def _literal_sequence(node):
    """A tuple or list written out (`for f in (torch.sin, torch.cos)`), or enumerate, zip or reversed of such:
    its length doesn't grow with the input."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("enumerate", "zip", "reversed"):
        return bool(node.args) and all(_literal_sequence(a) for a in node.args)
    return isinstance(node, (ast.Tuple, ast.List)) and not any(isinstance(e, ast.Starred) for e in node.elts)


def _called_name(call):
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None


def _recursive_calls(tree):
    """(line, name) of each call a function makes to itself by its bare name (a method's super().__init__()
    is another function)."""
    found = []
    for function in ast.walk(tree):
        if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found += [(node.lineno, function.name) for node in ast.walk(function)
                      if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == function.name]
    return found


def python_loops(source):
    """(line, what) for each Python loop in ``source``: a for or while loop, a comprehension, a call that runs
    Python code per element (map, reduce, numpy's vectorize, ...), or recursion. Loops over a tuple or list
    written out (a fixed number of passes, such as (sin, cos)) are not loops over the input."""
    try:
        tree = ast.parse(textwrap.dedent(source))
    except SyntaxError:
        return []
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.For, ast.AsyncFor)) and not _literal_sequence(node.iter):
            found.append((node.lineno, "a for loop"))
        elif isinstance(node, ast.While):
            found.append((node.lineno, "a while loop"))
        elif isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)) and not all(
                _literal_sequence(g.iter) for g in node.generators):
            found.append((node.lineno, "a comprehension"))
        elif isinstance(node, ast.Call) and _called_name(node) in LOOPING_CALLS:
            found.append((node.lineno, f"{_called_name(node)}(...)"))
    found += [(line, f"recursion ({name} calls itself)") for line, name in _recursive_calls(tree)]
    return sorted(found)


def no_loops(source):
    """The rule "no Python loop": None when it holds, else what breaks it, in words."""
    loops = python_loops(source)
    if not loops:
        return None
    where = ", ".join(f"{what} on line {line}" for line, what in loops[:3])
    return f"the answer cell has {where}"


RULES = {"no-loops": no_loops}


def cell_source_of(obj):
    """The whole source of the notebook cell where the student's function or class was defined, helpers
    included (a cell is in linecache, not on disk); for one defined in a module, its own source; '' when
    Python can't find it."""
    code = getattr(obj, "__code__", None)
    if code is None and isinstance(obj, type):
        code = next((v.__code__ for v in vars(obj).values() if inspect.isfunction(v)), None)
    if code is not None and not Path(code.co_filename).is_file():
        lines = linecache.getlines(code.co_filename)
        if lines:
            return "".join(lines)
    try:
        return inspect.getsource(obj)
    except (OSError, TypeError):
        return ""
