"""Find uses of the library call an exercise asks the student to build themselves."""

import ast
import inspect
import textwrap


def forbidden_uses(source, forbidden, own_names=()):
    """The forbidden names that ``source`` refers to (as an attribute, import or name), sorted.

    A bare name in ``own_names`` is the student's own definition (their
    ``scaled_dot_product_attention`` from lesson 01, say), not the library's.
    """
    if not forbidden:
        return []
    try:
        tree = ast.parse(textwrap.dedent(source))
    except SyntaxError:
        return []
    used = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in forbidden:
            used.add(node.attr)
        elif isinstance(node, ast.Name) and node.id in forbidden and node.id not in own_names:
            used.add(node.id)
        elif isinstance(node, ast.alias) and node.name.split(".")[-1] in forbidden:
            used.add(node.name.split(".")[-1])
    return sorted(used)


def source_of(obj):
    """The source code of a student's function or class, or '' when Python can't find it."""
    try:
        return inspect.getsource(obj)
    except (OSError, TypeError):
        return ""


def forbidden_message(exercise, used):
    names = ", ".join(used)
    return (
        f"{exercise} uses {names}, which already does what this exercise asks you to build: "
        "write it with basic tensor operations instead"
    )
