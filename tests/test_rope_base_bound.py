"""Men et al. (NeurIPS 2024, "Base of RoPE Bounds Context Length"): B_{m,θ} = Σ cos(mθ_i),
the attention a similar token gains over a random one at distance m, and the smallest
base that keeps it non-negative up to a context length (posenc.rope.token_discrimination,
posenc.rope.base_lower_bound)."""

import math

import pytest
import torch

from posenc.frequencies import compute_inv_freq
from posenc.rope import base_lower_bound, rope_matrix, token_discrimination


@pytest.mark.parametrize("base", [10.0, 500.0, 1e4, 1e6])
@pytest.mark.parametrize("head_dim", [2, 8, 32])
def test_it_is_half_the_trace_of_the_rotation(head_dim, base):
    """Each rotation block has trace 2 cos(mθ_i), so tr R_m = 2 B_m (instances)."""
    distances = torch.tensor([0.0, 1.0, 7.0, 100.0, 12345.0])
    inv_freq = compute_inv_freq(head_dim, base, dtype=torch.float64)
    traces = torch.tensor([torch.trace(rope_matrix(float(m), inv_freq)) for m in distances])
    torch.testing.assert_close(2 * token_discrimination(distances, head_dim, base), traces.double(), rtol=0, atol=1e-9)
    assert token_discrimination(torch.tensor([0]), head_dim, base).item() == head_dim / 2


def test_it_is_the_expected_gain_of_a_similar_key():
    """E[qᵀR_m k*] − E[qᵀR_m k] = 2σ² B_m for q, k i.i.d. N(0, σ²) and k* = q + ε
    (Monte Carlo, 200,000 draws, within 5 standard errors at every distance)."""
    g = torch.Generator().manual_seed(0)
    d, base, sigma, n = 16, 100.0, 0.7, 200_000
    q = sigma * torch.randn(n, d, generator=g, dtype=torch.float64)
    k = sigma * torch.randn(n, d, generator=g, dtype=torch.float64)
    similar = q + 0.3 * torch.randn(n, d, generator=g, dtype=torch.float64)
    inv_freq = compute_inv_freq(d, base, dtype=torch.float64)
    for m in (0, 3, 20, 57):
        R = rope_matrix(float(m), inv_freq)
        gain = ((q @ R) * similar).sum(1) - ((q @ R) * k).sum(1)
        expected = 2 * sigma**2 * token_discrimination(torch.tensor([m]), d, base).item()
        assert abs(gain.mean().item() - expected) < 5 * gain.std().item() / math.sqrt(n), m


def _first_passing(head_dim, length, bases):
    """The first of ``bases`` (ascending) with B_m ≥ 0 for every m ≤ L, by brute force."""
    m = torch.arange(length + 1, dtype=torch.float64)
    exponents = torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim
    for chunk in bases.split(512):
        theta = torch.exp(-exponents[None, :] * chunk.log()[:, None])
        lowest = torch.cos(m[None, :, None] * theta[:, None, :]).sum(-1).min(1).values
        if bool((lowest >= 0).any()):
            return float(chunk[int((lowest >= 0).nonzero()[0])])
    return None


@pytest.mark.parametrize(("head_dim", "length"), [(32, 32), (32, 64), (32, 128), (16, 200), (64, 300)])
def test_the_bound_is_the_first_base_that_keeps_b_non_negative(head_dim, length):
    """The returned base passes (B_m ≥ 0 for m = 0 … L), a base 1e-6 below it fails,
    and a brute-force scan of 5,000 bases per decade (steps of 0.05 %) finds no
    passing base below it."""
    bound = base_lower_bound(head_dim, length)
    m = torch.arange(length + 1)
    assert token_discrimination(m, head_dim, bound).min() >= 0
    assert token_discrimination(m, head_dim, bound * (1 - 1e-6)).min() < 0
    scan = torch.logspace(0, math.log10(bound * (1 - 1e-6)), int(5e3 * math.log10(bound)), dtype=torch.float64)
    assert _first_passing(head_dim, length, scan) is None


def test_the_bound_at_the_papers_head_dim():
    """d = 128, L = 1024: the paper's Figure 1 reads about 4e3; no base in the 1 %
    below the result passes (2,000 bases)."""
    bound = base_lower_bound(128, 1024)
    assert 4250 < bound < 4350
    below = torch.logspace(math.log10(bound / 1.01), math.log10(bound * (1 - 1e-6)), 2000, dtype=torch.float64)
    assert _first_passing(128, 1024, below) is None


def test_the_bound_grows_with_the_context_length_at_the_studys_head_dim():
    """d = 32 (the study's heads): the bases the study sweeps (10², 10³, 10⁴, 10⁵) sit
    on either side of the bounds at L = 32, 64 and 128."""
    bounds = [base_lower_bound(32, L) for L in (32, 64, 128)]
    assert bounds == sorted(bounds)
    assert 100 < bounds[0] < 1000 and 100 < bounds[1] < 1000 and 1000 < bounds[2] < 10_000


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="head_dim must be even"):
        base_lower_bound(31, 64)
    with pytest.raises(ValueError, match="context_length must be >= 1"):
        base_lower_bound(32, 0)
    with pytest.raises(ValueError, match=r"no base in 1 … 100 keeps B_m >= 0 for every m <= 128 at head_dim 32"):
        base_lower_bound(32, 128, max_base=100)
    with pytest.raises(ValueError, match=r"max_base \(1\.5\) must be >= min_base \(2\)"):
        base_lower_bound(32, 128, min_base=2, max_base=1.5)
    with pytest.raises(ValueError, match="rtol must be a finite number > 0"):
        base_lower_bound(32, 128, rtol=0)
    with pytest.raises(ValueError, match="no base in 1 … 1e\\+12"):
        base_lower_bound(2, 2)
    with pytest.raises(ValueError, match="base must be finite and > 0"):
        token_discrimination(torch.arange(3), 32, -1.0)
    with pytest.raises(TypeError, match="distances must be a real tensor, got list"):
        token_discrimination([1, 2], 32)
    with pytest.raises(ValueError, match=r"distances must be a 1-D tensor \(N,\), got shape \(2, 2\)"):
        token_discrimination(torch.ones(2, 2), 32)
