import pytest
import torch

from posenc.learned import LearnedPositionalEmbedding


def test_lookup_and_parameter_count(device):
    table = LearnedPositionalEmbedding(16, 8).to(device)
    assert sum(p.numel() for p in table.parameters()) == 16 * 8
    out = table(torch.tensor([[0, 3], [15, 1]], device=device))
    assert out.shape == (2, 2, 8) and out.device.type == device.type
    assert torch.equal(out[1, 0], table.weight[15])
    assert torch.equal(table(5), table.weight[:5])


def test_gradient_reaches_only_used_rows():
    table = LearnedPositionalEmbedding(10, 4)
    table(torch.arange(3)).sum().backward()
    assert table.weight.grad[:3].abs().sum() > 0 and table.weight.grad[3:].abs().sum() == 0


@pytest.mark.parametrize(
    "positions, error, text",
    [
        (torch.tensor([0, 16]), ValueError, r"position 16 is outside the learned table: positions must lie in 0\.\.15 \(max_len=16\)"),
        (17, ValueError, r"position 16 is outside"),
        (torch.tensor([-1, 2]), ValueError, r"position -1 is outside"),
        (torch.tensor([0.5]), TypeError, "needs integer positions"),
    ],
)
def test_bad_positions(positions, error, text):
    with pytest.raises(error, match=text):
        LearnedPositionalEmbedding(16, 8)(positions)


@pytest.mark.parametrize("args, error", [((0, 8), ValueError), ((8, -1), ValueError), ((8.0, 8), TypeError)])
def test_bad_sizes(args, error):
    with pytest.raises(error):
        LearnedPositionalEmbedding(*args)
