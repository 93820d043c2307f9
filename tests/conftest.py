"""Shared fixtures: every device test runs on the CPU and, where it exists, on CUDA."""

import pytest
import torch

DEVICES = [
    pytest.param("cpu", id="cpu"),
    pytest.param(
        "cuda",
        id="cuda",
        marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA is not available on this machine"),
    ),
]


@pytest.fixture(params=DEVICES)
def device(request):
    return torch.device(request.param)
