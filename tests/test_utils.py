import pytest
import torch

import posenc


def test_get_device_prefers_accelerators():
    device = posenc.get_device()
    assert isinstance(device, torch.device)
    if torch.cuda.is_available():
        assert device.type == "cuda"
    elif device.type != "mps":
        assert device.type == "cpu"


def test_seed_everything_reproduces_draws():
    g1 = posenc.seed_everything(123)
    a, ga = torch.randn(3), torch.randn(3, generator=g1)
    g2 = posenc.seed_everything(123)
    assert torch.equal(a, torch.randn(3)) and torch.equal(ga, torch.randn(3, generator=g2))


@pytest.mark.parametrize("seed, error", [(-1, ValueError), (1.5, TypeError), (True, TypeError)])
def test_seed_everything_bad_seed(seed, error):
    with pytest.raises(error, match="seed"):
        posenc.seed_everything(seed)
