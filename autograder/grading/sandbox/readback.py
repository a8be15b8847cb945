"""Read what a job wrote, as the hostile data it may be.

A job's files come from a process where student code ran: a file may be a decompression bomb, a
pickle whose one list is shared ten million times, a tensor whose few stored bytes are viewed as a
billion values, or a message of twenty megabytes. Before ``torch.load`` sees a file, its size and
its zip records are checked (stored, never compressed; the pickle small); after, the data is walked
once with a bound on the nodes visited (shared ones counted each time they are met), its depth,
each tensor's size and layout, and every string is cut.
"""

import zipfile

import torch

FILE_LIMIT = 48 * 2**20  # bytes of one result file
PICKLE_LIMIT = 2 * 2**20  # bytes of its pickle (the part that is not tensor data)
NODE_LIMIT = 200_000  # containers and values met while walking it, shared ones each time
DEPTH_LIMIT = 24
TENSOR_LIMIT = 2**22  # values in one tensor
TOTAL_TENSOR_LIMIT = 2**24  # values in all the file's tensors
STRING_LIMIT = 2000  # characters of one string (an error's traceback is cut to 1500 by the child)
MESSAGE_LIMIT = 500  # characters of an error message


class Unreadable(ValueError):
    """A job's file that is not the plain, bounded data a job writes."""


def _check_archive(path):
    size = path.stat().st_size
    if size > FILE_LIMIT:
        raise Unreadable(f"{size} bytes, more than {FILE_LIMIT}")
    try:
        with zipfile.ZipFile(path) as archive:
            records = archive.infolist()
    except (zipfile.BadZipFile, OSError) as exc:
        raise Unreadable(f"not a tensor file ({exc.__class__.__name__})") from None
    for record in records:
        if record.compress_type != zipfile.ZIP_STORED:
            raise Unreadable(f"a compressed record ({record.filename})")
        if record.filename.endswith(".pkl") and record.file_size > PICKLE_LIMIT:
            raise Unreadable(f"a pickle of {record.file_size} bytes")
    if sum(record.file_size for record in records) > FILE_LIMIT:
        raise Unreadable("records larger than the file limit")


class _Walk:
    def __init__(self):
        self.nodes = 0
        self.values = 0

    def copy(self, value, depth=0):
        """A fresh copy of ``value`` (shared parts copied apart), within the bounds."""
        self.nodes += 1
        if self.nodes > NODE_LIMIT:
            raise Unreadable(f"more than {NODE_LIMIT} values")
        if depth > DEPTH_LIMIT:
            raise Unreadable(f"nested deeper than {DEPTH_LIMIT}")
        if value is None or isinstance(value, (bool, int, float)):
            return value
        if isinstance(value, str):
            return value[:STRING_LIMIT]
        if isinstance(value, torch.Tensor):
            return self.tensor(value)
        if isinstance(value, (list, tuple)):
            copied = [self.copy(item, depth + 1) for item in value]
            return copied if isinstance(value, list) else tuple(copied)
        if isinstance(value, dict):
            return {self.copy(key, depth + 1): self.copy(item, depth + 1) for key, item in value.items()}
        raise Unreadable(f"a value of type {type(value).__name__}")

    def tensor(self, tensor):
        if type(tensor) is not torch.Tensor or tensor.layout != torch.strided or tensor.is_quantized:
            raise Unreadable("a tensor that is not a plain dense one")
        self.values += tensor.numel()
        if tensor.numel() > TENSOR_LIMIT or self.values > TOTAL_TENSOR_LIMIT:
            raise Unreadable(f"tensors of more than {TENSOR_LIMIT} values ({tuple(tensor.shape)})")
        if not tensor.is_contiguous() or tensor.untyped_storage().nbytes() < tensor.numel() * tensor.element_size():
            raise Unreadable("a tensor viewed over a storage smaller than itself")
        return tensor.clone()


def load(path):
    """The data of a job's file ``path``; Unreadable when it is not plain, bounded data."""
    _check_archive(path)
    try:
        data = torch.load(path, weights_only=True, mmap=False)
    except Exception as exc:  # a file the child couldn't or wouldn't write as plain data
        raise Unreadable(f"torch.load refused it ({exc.__class__.__name__})") from None
    return _Walk().copy(data)


def cell_error(data):
    """A cell's error record as three short strings, whatever the file held."""
    if isinstance(data, dict) and data.get("type") and all(isinstance(data.get(key, ""), str)
                                                          for key in ("type", "message", "traceback")):
        return {"type": data["type"][:100], "message": data.get("message", "")[:MESSAGE_LIMIT],
                "traceback": data.get("traceback", "")[:STRING_LIMIT]}
    return {"type": "an error", "message": "its record is not plain data", "traceback": ""}
