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


def _refuse(*args, **kwargs):
    raise ForbiddenCall("this built-in does what an exercise of this lesson asks you to build, so it is switched off "
                        "while grading")


def _refuse_anywhere(*args, **kwargs):
    # Becomes the code of functions of other modules, whose globals lack ForbiddenCall: builtins only.
    raise RuntimeError("this built-in does what an exercise of this lesson asks you to build, so it is switched off "
                       "while grading")


def block_for_good(names):
    """For the rest of this process (a grading job's, before any student code runs): every operator of
    PyTorch's dispatcher named like one of ``names`` raises, whatever Python path reaches it (``torch._C``,
    ``torch.ops``, ``DisableTorchFunction``, a mode switched off), and so do the Python functions and
    classes of torch.nn so named. The registration's handle is kept alive by a reference no Python object
    holds, so that nothing the job runs later can find it to undo it."""
    import ctypes
    import warnings

    import torch
    import torch.nn.functional  # noqa: F401

    if not names:
        return
    operators = sorted({qualified[len("aten::"):] for qualified in torch._C._dispatch_get_all_op_names()
                        if qualified.startswith("aten::")
                        and any(named_like(qualified[len("aten::"):].split(".")[0], name)
                                for name in names)})
    handle = torch._C._dispatch_library("IMPL", "aten", "", __file__, 0)
    with warnings.catch_warnings():  # "overriding a previously registered kernel": that is the point
        warnings.simplefilter("ignore")
        for operator in operators:
            # The composite kernel serves every backend an operator has no kernel of its own for; the
            # backends' own kernels are replaced one by one. Meta kernels can't be: meta runs reach a
            # backend's or the composite kernel first.
            for key in ("CompositeImplicitAutograd", "CompositeExplicitAutograd", "CPU", "CUDA"):
                try:
                    handle.impl(operator, key, _refuse)
                except RuntimeError:
                    pass
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(handle))
    del handle
    _neuter_python(names)


def _neuter_python(names):
    """The torch.nn functions and classes named like ``names`` raise, wherever they are reached from."""
    import sys
    import types

    modules = [module for key, module in list(sys.modules.items())
               if key == "torch" or key.startswith(("torch.nn.", "torch.functional"))]
    seen = set()
    for module in modules:
        for attribute, value in list(vars(module).items()):
            if id(value) in seen or not any(named_like(attribute, name) for name in names):
                continue
            seen.add(id(value))
            if isinstance(value, types.FunctionType) and not value.__code__.co_freevars:
                value.__code__ = _refuse_anywhere.__code__
            elif isinstance(value, type):
                for method in ("__init__", "forward", "__call__"):
                    if method in vars(value) or method == "__init__":
                        setattr(value, method, _refuse)
