"""Find uses of the library call an exercise asks the student to build themselves."""

import ast
import contextlib
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
    names = ", ".join(f"`{name}`" for name in used)
    return (
        f"{exercise} calls PyTorch's built-in {names}, which already does what this exercise asks you "
        "to build: write it with basic tensor operations instead"
    )


class ForbiddenCall(RuntimeError):
    """A built-in that an exercise asks the student to write was called while grading it."""


def _stub(name):
    def forbidden(*args, **kwargs):
        raise ForbiddenCall(f"{name} is what this exercise asks you to build, so it is switched off while grading")

    return forbidden


def _words(name):
    return [word for word in name.lower().split("_") if word]


def named_like(name, forbidden):
    """Whether a torch function called ``name`` is ``forbidden`` or a variant of it.

    A variant contains the forbidden name, or its words in order with others between:
    ``_scaled_dot_product_flash_attention_for_cpu`` is a ``scaled_dot_product_attention``.
    """
    if forbidden in name:
        return True
    wanted, words = _words(forbidden), iter(_words(name))
    return len(wanted) > 1 and all(word in words for word in wanted)  # `in` on an iterator: in order


def _refusing_mode(names):
    """A TorchFunctionMode that refuses torch functions named like a forbidden one.

    It also catches what the attribute swap can't reach: torch._C._nn's kernels, torch.ops.aten's
    and the private variants (_scaled_dot_product_flash_attention_for_cpu, ...), whatever module
    they are called through.
    """
    from torch.overrides import TorchFunctionMode

    refused = {}  # name -> whether it is refused: a grading run makes thousands of calls to a few dozen functions

    class RefuseForbidden(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            name = getattr(func, "__name__", "") or ""
            if name not in refused:
                refused[name] = any(named_like(name, forbidden) for forbidden in names)
            if refused[name]:
                raise ForbiddenCall(f"{name} does what this exercise asks you to build, so it is switched off while grading")
            return func(*args, **(kwargs or {}))

    return RefuseForbidden()


@contextlib.contextmanager
def switched_off(names):
    """Replace the torch built-ins ``names`` by stubs that raise ForbiddenCall, for a while.

    The grader's child does this while it runs a student's cells and while it checks an
    exercise, to catch calls that the source check can't see (getattr, aliases, private
    kernels). A student's code could still find a way around it; the source check and the
    message are the rule.
    """
    import torch
    import torch.nn.functional

    saved = []
    for module in (torch, torch.nn, torch.nn.functional):
        for name in names:
            if hasattr(module, name):
                saved.append((module, name, getattr(module, name)))
                setattr(module, name, _stub(f"{module.__name__}.{name}"))
    mode = _refusing_mode(tuple(names)) if names else contextlib.nullcontext()
    try:
        with mode:
            yield
    finally:
        for module, name, original in reversed(saved):
            setattr(module, name, original)
