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
# The ways past the grader's guards (the forbidden built-ins are refused at PyTorch's dispatcher in the
# job, and nothing the job measures decides a grade): no lesson's answer needs one, so each is shown.
ESCAPE_HATCH_MODULES = ("ctypes", "importlib", "gc", "torch._C", "torch.utils._python_dispatch", "torch.library",
                        "torch.ops", "sys.modules")
ESCAPE_HATCH_NAMES = {"DisableTorchFunction", "_disable_current_modes", "__code__", "__globals__", "get_referrers",
                      "get_objects", "_dispatch_library", "__import__"}


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
        hatch = _escape_hatch(node)
        if hatch:
            found.append((node.lineno, f"reaches past the grader's guards: {hatch}"))
    return sorted(set(found))


def _escape_hatch(node):
    """The escape hatch that ``node`` names (an import, an attribute chain, a bare name), or None."""
    names = []
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    elif isinstance(node, ast.ImportFrom):
        names = [node.module or ""] + [f"{node.module}.{alias.name}" for alias in node.names]
    elif isinstance(node, ast.Attribute):
        names = [_dotted(node), node.attr]
    elif isinstance(node, ast.Name):
        names = [node.id]
    elif isinstance(node, ast.Constant) and isinstance(node.value, str):
        names = [node.value]
    for name in names:
        if name in ESCAPE_HATCH_NAMES:
            return name
        for module in ESCAPE_HATCH_MODULES:
            if name == module or name.startswith(module + "."):
                return module
    return None
