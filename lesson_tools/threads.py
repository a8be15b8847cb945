"""How many CPU threads the lessons' training loops use."""

import contextlib

import torch


@contextlib.contextmanager
def cpu_threads(n):
    """Use n intra-op CPU threads for a while (None: no change), then restore PyTorch's setting.

    A step here is thousands of operations on tiny tensors. A second thread makes them about
    1.6x faster on an idle two-core machine, but when another process takes a core, every one
    of those operations waits for the thread that is not running, and a step gets ten times
    slower or worse. One thread degrades gracefully, so it is the default.
    """
    before = torch.get_num_threads()
    if n is not None:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)
