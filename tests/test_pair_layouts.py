"""One permutation, two names: the sinusoidal table's "concatenated" layout and RoPE's
"half" layout both put pair i at features (i, i + d/2), and both differ from their
"interleaved" layout (pair i at (2i, 2i + 1)) by posenc.layout.pair_permutation."""

import pytest
import torch

from posenc.layout import pair_permutation
from posenc.rope import apply_rope
from posenc.sinusoidal import sinusoidal_encoding


@pytest.mark.parametrize("dim", [2, 8, 64])
def test_concatenated_and_half_are_the_same_permutation(dim):
    perm = pair_permutation(dim)
    positions = torch.arange(9)
    # the sinusoidal table: "concatenated" = "interleaved" permuted
    interleaved_table = sinusoidal_encoding(positions, dim, layout="interleaved")
    concatenated_table = sinusoidal_encoding(positions, dim, layout="concatenated")
    assert torch.equal(concatenated_table, interleaved_table[..., perm])
    # RoPE: rotating the permuted features in "half" = permuting the "interleaved" result
    x = torch.randn(2, 3, 9, dim, generator=torch.Generator().manual_seed(dim))
    half = apply_rope(x[..., perm], positions, layout="half")
    interleaved = apply_rope(x, positions, layout="interleaved")
    assert torch.equal(half, interleaved[..., perm])
    # and the one permutation is (i, i + d/2) ← (2i, 2i + 1): sin of pair i at i, cos at i + d/2
    half_pairs = torch.stack((perm[: dim // 2], perm[dim // 2:]), dim=-1)
    assert torch.equal(half_pairs, torch.arange(dim).reshape(dim // 2, 2))


def test_a_wrong_permutation_is_caught():
    """The check above can fail: the identity does not convert the layouts."""
    positions = torch.arange(5)
    interleaved = sinusoidal_encoding(positions, 8, layout="interleaved")
    assert not torch.equal(sinusoidal_encoding(positions, 8, layout="concatenated"), interleaved)
