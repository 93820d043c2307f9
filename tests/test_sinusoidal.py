import math

import numpy as np
import pytest
import sympy as sp
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from posenc import symbolic
from posenc.layout import pair_permutation
from posenc.frequencies import compute_inv_freq
from posenc.sinusoidal import sinusoidal_encoding


def numpy_reference(n_pos, dim, base=10000.0):
    """Vaswani et al. §3.5 written out in float64, entry by entry."""
    out = np.zeros((n_pos, dim))
    for p in range(n_pos):
        for i in range(dim // 2):
            angle = p / base ** (2 * i / dim)
            out[p, 2 * i], out[p, 2 * i + 1] = math.sin(angle), math.cos(angle)
    return out


def test_matches_the_paper_formula(device):
    pe = sinusoidal_encoding(torch.arange(50, device=device), 16)
    assert pe.shape == (50, 16) and pe.dtype == torch.float32 and pe.device.type == device.type
    np.testing.assert_allclose(pe.cpu().numpy(), numpy_reference(50, 16), atol=2e-6)


def test_int_means_range_and_float_positions_interpolate():
    assert torch.equal(sinusoidal_encoding(7, 8), sinusoidal_encoding(torch.arange(7), 8))
    half = sinusoidal_encoding(torch.tensor([2.5]), 8)[0]
    theta = compute_inv_freq(8)
    assert torch.allclose(half[0::2], torch.sin(2.5 * theta)) and torch.allclose(half[1::2], torch.cos(2.5 * theta))


def test_batched_positions_shape(device):
    positions = torch.tensor([[0, 1, 2], [5, 6, 7]], device=device)
    pe = sinusoidal_encoding(positions, 6)
    assert pe.shape == (2, 3, 6)
    assert torch.equal(pe[1], sinusoidal_encoding(torch.arange(5, 8, device=device), 6))


def test_concatenated_is_sin_then_cos():
    pe = sinusoidal_encoding(10, 8, layout="concatenated")
    angles = torch.arange(10.0)[:, None] * compute_inv_freq(8)
    assert torch.allclose(pe[:, :4], angles.sin()) and torch.allclose(pe[:, 4:], angles.cos())


@pytest.mark.parametrize("dim", [2, 8, 64, 512])
@pytest.mark.parametrize("base", [10.0, 10000.0, 500000.0])
def test_inv_freq_log_space_equals_power(dim, base):
    i = torch.arange(0, dim, 2, dtype=torch.float64)
    direct = base ** (-i / dim)
    assert torch.allclose(compute_inv_freq(dim, base).double(), direct, rtol=1e-6)


def test_parity_with_hugging_face_interleaved():
    from transformers.models.distilbert.modeling_distilbert import _create_sinusoidal_embeddings

    ref = _create_sinusoidal_embeddings(n_pos=128, dim=32, out=torch.empty(128, 32))
    assert torch.allclose(sinusoidal_encoding(128, 32), ref, atol=1e-5)


def xlm_reference(n_pos, dim, base=10000.0):
    """XLM's ``create_sinusoidal_embeddings`` (also DistilBERT's), kept in float64: a
    numpy table of pos / base^(2⌊j/2⌋/d), sin on even and cos on odd features."""
    j = np.arange(dim)[None, :]
    angles = np.arange(n_pos)[:, None] / np.power(base, 2 * (j // 2) / dim)
    return np.where(j % 2 == 0, np.sin(angles), np.cos(angles))


@pytest.mark.parametrize("n_pos", [1000, 4096])
def test_float32_table_is_the_float64_table_rounded_once(device, n_pos):
    """Every entry within float32 rounding of the float64 reference: relative error at
    most one float32 epsilon (float32 angles were 5.7e-5 off at position 1000, d = 512)."""
    ours = sinusoidal_encoding(torch.arange(n_pos, device=device), 512)
    assert ours.dtype == torch.float32 and ours.device.type == device.type
    reference = xlm_reference(n_pos, 512)
    eps = float(np.finfo(np.float32).eps)
    np.testing.assert_allclose(ours.cpu().double().numpy(), reference, rtol=eps,
                               atol=1e-11)
    # so it is also the float32 table of XLM / DistilBERT, which round the float64 one
    from transformers.models.distilbert import modeling_distilbert

    hf = modeling_distilbert._create_sinusoidal_embeddings(n_pos=n_pos, dim=512,
                                                           out=torch.empty(n_pos, 512))
    assert (ours.cpu() - hf).abs().max() <= 2 ** -24


def test_float64_tables_and_requested_dtypes(device):
    positions = torch.arange(0, 3000, 7, device=device)
    table = sinusoidal_encoding(positions, 64, layout="concatenated", dtype=torch.float64)
    assert table.dtype == torch.float64
    theta = 10000.0 ** -(torch.arange(0, 64, 2, dtype=torch.float64) / 64)
    angles = positions.double().cpu()[:, None] * theta
    torch.testing.assert_close(table.cpu(), torch.cat((angles.sin(), angles.cos()), -1),
                               rtol=0, atol=1e-12)
    half = sinusoidal_encoding(positions, 64, dtype=torch.bfloat16)
    assert half.dtype == torch.bfloat16
    assert torch.equal(half, table[..., sinusoidal_perm(64)].to(torch.bfloat16))
    message = "dtype must be a floating torch.dtype, got torch.int64"
    with pytest.raises(TypeError, match=message):
        sinusoidal_encoding(positions, 64, dtype=torch.int64)


def sinusoidal_perm(dim):
    """Concatenated → interleaved feature order."""
    return torch.argsort(pair_permutation(dim))


def test_parity_with_hugging_face_concatenated():
    from transformers.models.marian.modeling_marian import MarianSinusoidalPositionalEmbedding

    ref = MarianSinusoidalPositionalEmbedding(128, 32).create_weight()
    assert torch.allclose(sinusoidal_encoding(128, 32, layout="concatenated"), ref, atol=1e-5)


@given(st.integers(1, 32).map(lambda k: 2 * k), st.lists(st.integers(0, 10_000), min_size=1, max_size=8))
@settings(max_examples=50, deadline=None)
def test_layouts_differ_by_the_pair_permutation(dim, positions):
    pos = torch.tensor(positions)
    inter = sinusoidal_encoding(pos, dim, layout="interleaved")
    concat = sinusoidal_encoding(pos, dim, layout="concatenated")
    perm = pair_permutation(dim)
    assert torch.equal(inter[..., perm], concat)
    assert torch.equal(concat[..., torch.argsort(perm)], inter)


_shift = symbolic.sinusoidal_shift_matrix().M
_shift_fn = sp.lambdify((symbolic.omega, symbolic.phi), _shift, "numpy")


@given(st.integers(0, 2000), st.integers(-500, 500), st.sampled_from([16, 64]))
@settings(max_examples=60, deadline=None)
def test_shift_matrix_moves_every_pair(position, offset, dim):
    """PE(pos + φ) = M(φ) PE(pos) pair by pair, with M(φ) the matrix derived in sympy."""
    pe = sinusoidal_encoding(torch.tensor([position, position + offset]), dim).double().numpy()
    theta = compute_inv_freq(dim).double().numpy()
    for i, w in enumerate(theta):
        moved = np.asarray(_shift_fn(w, offset), dtype=float) @ pe[0, 2 * i:2 * i + 2]
        np.testing.assert_allclose(moved, pe[1, 2 * i:2 * i + 2], atol=5e-4)


@given(st.integers(0, 5000), st.integers(0, 5000), st.integers(-300, 300))
@settings(max_examples=60, deadline=None)
def test_dot_product_depends_only_on_the_offset(t1, t2, offset):
    pos = torch.tensor([t1, t1 + offset, t2, t2 + offset], dtype=torch.float64)
    pe = sinusoidal_encoding(pos, 64).double()
    assert abs(float(pe[0] @ pe[1] - pe[2] @ pe[3])) < 1e-3
    expected = torch.cos(offset * compute_inv_freq(64).double()).sum()
    assert abs(float(pe[0] @ pe[1]) - float(expected)) < 1e-3


def test_derivation_to_code_bridge():
    """The sympy table, lambdified, equals the torch code for both layouts."""
    for layout in ("interleaved", "concatenated"):
        table = symbolic.sinusoidal_table(12, base=sp.Integer(10000), layout=layout)
        fn = sp.lambdify(symbolic.pos, table, "numpy")
        expected = np.stack([np.asarray(fn(p), dtype=float).ravel() for p in range(40)])
        got = sinusoidal_encoding(40, 12, layout=layout).double().numpy()
        np.testing.assert_allclose(got, expected, atol=2e-6)


@pytest.mark.parametrize(
    "kwargs, error, text",
    [
        ({"dim": 7}, ValueError, "dim must be even"),
        ({"dim": 0}, ValueError, "dim must be >= 1"),
        ({"dim": 8.0}, TypeError, "dim must be an integer"),
        ({"base": 0.0}, ValueError, "base must be finite and > 0, got 0.0"),
        ({"base": -10.0}, ValueError, "base must be finite and > 0, got -10.0"),
        ({"base": float("inf")}, ValueError, "base must be finite"),
        ({"base": float("nan")}, ValueError, "base must be finite"),
        ({"layout": "half"}, ValueError, "layout must be one of 'interleaved', 'concatenated'; got 'half'"),
        ({"positions": -3}, ValueError, "must be >= 0, got -3"),
        ({"positions": 2.5}, TypeError, "positions must be an int T"),
        ({"positions": torch.tensor([0.0, float("nan")])}, ValueError, "positions must be finite"),
        ({"positions": torch.tensor([True])}, TypeError, "integer or float tensor"),
    ],
)
def test_bad_input_names_value_and_rule(kwargs, error, text):
    args = {"positions": 4, "dim": 8, **kwargs}
    with pytest.raises(error, match=text.replace("(", r"\(").replace(")", r"\)")):
        sinusoidal_encoding(**args)


def test_pair_permutation_errors():
    with pytest.raises(ValueError, match="dim must be even"):
        pair_permutation(5)
