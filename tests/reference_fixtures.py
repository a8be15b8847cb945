"""The fixtures every reference test file uses: a seed, PyTorch's math attention, devices, dtypes.

Imported by name into each test file (pytest finds fixtures in a module's namespace).
"""

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture(autouse=True)
def _math_attention():
    """torch.nn's attention runs on the math backend: on a GPU, fused kernels round
    differently, and we compare with what PyTorch computes, not with how fast."""
    with sdpa_kernel(SDPBackend.MATH):
        yield


@pytest.fixture(params=["cpu", "cuda"])
def device(request):
    if request.param == "cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    return torch.device(request.param)


@pytest.fixture(params=[torch.float32, torch.float64], ids=["float32", "float64"])
def dtype(request):
    return request.param
