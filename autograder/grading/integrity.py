"""What an instructor should look at after a class is graded: answer cells that tamper with the tools.

The trusted grader cannot be fooled by an answer cell that replaces ``torch.allclose`` or the
check functions (it compares in a process where no student code ran), but nbgrader's own
in-kernel run can, and an instructor wants to know who tried. ``tampering(source)`` finds, by
reading the code (never running it), the lines of an answer cell that assign to or patch an
attribute of torch, numpy or the course's package, or rebind the check functions.
"""

import ast

# Modules whose attributes an answer has no reason to assign.
GUARDED_MODULES = {"torch", "np", "numpy", "F", "nn", "autograder", "math", "builtins"}
# Names of the check functions in a lesson's namespace.
CHECK_FUNCTIONS = {"check", "check_hidden", "skip_if_unimplemented"}


def _root_name(node):
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _dotted(node):
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


def tampering(source):
    """[(line, what it does)] for every line of ``source`` that patches the tools; [] when none (or
    when the cell is not valid Python, which the grader reports on its own)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    found = []
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        elif isinstance(node, ast.Delete):
            targets = node.targets
        for target in targets:
            if isinstance(target, ast.Attribute) and _root_name(target) in GUARDED_MODULES:
                found.append((node.lineno, f"replaces {_dotted(target)}"))
            elif isinstance(target, ast.Name) and target.id in CHECK_FUNCTIONS:
                found.append((node.lineno, f"rebinds the check function {target.id}"))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name in CHECK_FUNCTIONS:
            found.append((node.lineno, f"redefines the check function {node.name}"))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("setattr", "delattr"):
            if node.args and _root_name(node.args[0]) in GUARDED_MODULES:
                found.append((node.lineno, f"{node.func.id} on {_dotted(node.args[0]) or 'a module'}"))
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("autograder.checks.hidden"):
            found.append((node.lineno, "imports the hidden checks"))
    return sorted(set(found))
