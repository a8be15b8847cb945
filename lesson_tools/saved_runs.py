"""Keep what a long cell of a lesson computed, so that running the notebook again costs nothing
while the code it ran is unchanged (lesson 08's training comparison: a minute and more on a busy
machine, which a student working on a later exercise should not pay at every run).

Results are plain data (numbers, strings, lists, dicts, tensors) in a file named by a fingerprint
of what the code computes, under ``$XDG_CACHE_HOME/transformers-from-scratch`` (``~/.cache`` by
default). Where that folder can't be written, the cell computes every time and nothing else changes.
"""

import hashlib
import os
import pickle
from pathlib import Path

import torch


def folder():
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "transformers-from-scratch"


def fingerprint(*parts):
    """A short digest of tensors (their dtype, shape and values) and of anything else by its repr, with
    PyTorch's version: equal parts give an equal digest, any change in a value another one."""
    digest = hashlib.sha256(torch.__version__.encode())
    for part in parts:
        if isinstance(part, torch.Tensor):
            tensor = part.detach().cpu().contiguous()
            digest.update(f"{tensor.dtype}{tuple(tensor.shape)}".encode())
            digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
        else:
            digest.update(repr(part).encode())
    return digest.hexdigest()[:20]


def remembered(name, key, compute):
    """What ``compute()`` returns, computed the first time for this name and key and read back after."""
    path = folder() / f"{name}-{key}.pt"
    try:
        return torch.load(path, weights_only=True)
    except (OSError, EOFError, RuntimeError, pickle.UnpicklingError):
        pass  # not there yet, or unreadable: compute it again
    value = compute()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
        torch.save(value, partial)
        partial.replace(path)  # whole or not at all, even with two notebooks at once
    except OSError:
        pass
    return value
