"""xPos (posenc.xpos): parity with Microsoft's torchscale 0.3.0 and lucidrains' rotary-embedding-torch 0.9.1,
the defining property (scores depend on m − n and decay as ζ^{(m−n)/B}), the reduction to RoPE, the positions
contract, the float range of the factors, and the input checks."""

import importlib.metadata
import importlib.util
import math
import subprocess
import sys
import zipfile

import pytest
import torch

from posenc.layout import pair_permutation
from posenc.layers.pretrained import _UNREACHABLE
from posenc.rope import apply_rope
from posenc.frequencies import compute_inv_freq
from posenc.xpos import (
    apply_xpos,
    rotate_xpos,
    xpos_center,
    xpos_max_distance,
    xpos_scale,
    xpos_zeta,
)

TORCHSCALE = "torchscale==0.3.0"
TORCHSCALE_FILE = "torchscale/component/xpos_relative_position.py"
ROTARY_VERSION = "0.9.1"


def _randn(*shape, seed=0, device="cpu", dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64).to(device=device, dtype=dtype)


# ---------------------------------------------------------------- reference 1: torchscale 0.3.0 (Microsoft)


@pytest.fixture(scope="module")
def torchscale_xpos(tmp_path_factory):
    """torchscale's xpos_relative_position module, imported from its wheel (fetched with pip download, never
    installed: torchscale pulls timm and fairscale; this one file needs only torch and numpy)."""
    where = tmp_path_factory.mktemp("torchscale")
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--disable-pip-version-check", "--quiet", TORCHSCALE, "-d", str(where)]
    result = subprocess.run(command, capture_output=True, text=True)
    wheels = sorted(where.glob("*.whl"))
    if result.returncode != 0 or len(wheels) != 1:
        said = result.stderr + result.stdout
        if any(s in said for s in _UNREACHABLE):
            pytest.skip(f"the package index is unreachable: {said.strip().splitlines()[-1:]}")
        raise AssertionError(f"pip download {TORCHSCALE} failed: {said}")
    with zipfile.ZipFile(wheels[0]) as wheel:
        wheel.extract(TORCHSCALE_FILE, where)
    spec = importlib.util.spec_from_file_location("torchscale_xpos", where / TORCHSCALE_FILE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _torchscale_inv_freq(head_dim):
    """torchscale's θ_j, 1/10000^(j/(d_h/2)) in float32 (fixed_pos_embedding); posenc rounds the exact value once,
    which differs by a float32 spacing on some j (≈ 3·10⁻⁶ of angle at position 50)."""
    half = head_dim // 2
    return 1.0 / (10000 ** (torch.arange(0, half) / half))


def _torchscale(module, x, offset=0, downscale=False):
    """torchscale's XPOS takes (batch·heads, T, d_h)."""
    b, h, t, d = x.shape
    return module.XPOS(d)(x.reshape(b * h, t, d), offset=offset, downscale=downscale).reshape(b, h, t, d)


@pytest.mark.parametrize("seq_len", [1, 10, 11, 64])
@pytest.mark.parametrize("head_dim", [8, 64])
def test_matches_torchscale_training(torchscale_xpos, seq_len, head_dim):
    # torchscale: keys downscale=True, queries offset=0 (MultiheadAttention.forward); centre ⌈T/2⌉
    q, k = _randn(2, 3, seq_len, head_dim, seed=1), _randn(2, 3, seq_len, head_dim, seed=2)
    positions = torch.arange(seq_len)
    q_ref, k_ref = _torchscale(torchscale_xpos, q), _torchscale(torchscale_xpos, k, downscale=True)
    q_rot, k_rot = apply_xpos(q, k, positions, positions, inv_freq=_torchscale_inv_freq(head_dim))
    torch.testing.assert_close(q_rot, q_ref, atol=2e-6, rtol=2e-6)
    torch.testing.assert_close(k_rot, k_ref, atol=2e-6, rtol=2e-6)


@pytest.mark.parametrize("cache_len", [1, 12, 13])
def test_matches_torchscale_decoding(torchscale_xpos, cache_len):
    # incremental decoding: all cache_len keys re-scaled with offset 0, the new query with offset = src_len − 1;
    # posenc's default centre ⌈L/2⌉ of the key positions is the same
    q, k = _randn(2, 2, 1, 16, seed=3), _randn(2, 2, cache_len, 16, seed=4)
    q_ref = _torchscale(torchscale_xpos, q, offset=cache_len - 1)
    k_ref = _torchscale(torchscale_xpos, k, downscale=True)
    q_rot, k_rot = apply_xpos(q, k, torch.tensor([cache_len - 1]), torch.arange(cache_len),
                              inv_freq=_torchscale_inv_freq(16))
    torch.testing.assert_close(q_rot, q_ref, atol=2e-6, rtol=2e-6)
    torch.testing.assert_close(k_rot, k_ref, atol=2e-6, rtol=2e-6)


def test_torchscale_zeta_is_posenc_zeta(torchscale_xpos):
    torch.testing.assert_close(torchscale_xpos.XPOS(64).scale, xpos_zeta(64), atol=0, rtol=0)


# ---------------------------------------------------------------- reference 2: rotary-embedding-torch 0.9.1


@pytest.fixture(scope="module")
def rotary_embedding():
    module = pytest.importorskip("rotary_embedding_torch")
    version = importlib.metadata.version("rotary-embedding-torch")
    if version != ROTARY_VERSION:
        pytest.skip(f"the parity tests are written against rotary-embedding-torch {ROTARY_VERSION}, found {version}")
    return module.RotaryEmbedding


@pytest.mark.parametrize("seq_len", [1, 10, 11, 64])
def test_matches_rotary_embedding_torch(rotary_embedding, seq_len):
    # lucidrains: interleaved pairs, centre ⌊T/2⌋ (get_scale: t − len(t) // 2), scale_base 512
    q, k = _randn(2, 3, seq_len, 32, seed=5), _randn(2, 3, seq_len, 32, seed=6)
    q_ref, k_ref = rotary_embedding(32, use_xpos=True).rotate_queries_and_keys(q, k)
    positions = torch.arange(seq_len)
    q_rot, k_rot = apply_xpos(q, k, positions, positions, center=seq_len // 2)
    torch.testing.assert_close(q_rot, q_ref, atol=2e-6, rtol=2e-6)
    torch.testing.assert_close(k_rot, k_ref, atol=2e-6, rtol=2e-6)


def test_matches_rotary_embedding_torch_partial_and_scale_base(rotary_embedding):
    # RotaryEmbedding(dim) with dim < head_dim rotates (and scales) the first dim features; ζ uses dim
    q, k = _randn(1, 2, 9, 24, seed=7), _randn(1, 2, 9, 24, seed=8)
    q_ref, k_ref = rotary_embedding(8, use_xpos=True, xpos_scale_base=64).rotate_queries_and_keys(q, k)
    positions = torch.arange(9)
    q_rot, k_rot = apply_xpos(q, k, positions, positions, center=4, inv_freq=compute_inv_freq(8), scale_base=64)
    torch.testing.assert_close(q_rot, q_ref, atol=2e-6, rtol=2e-6)
    torch.testing.assert_close(k_rot, k_ref, atol=2e-6, rtol=2e-6)


def test_rotary_embedding_torch_quirks(rotary_embedding):
    """Two behaviours of 0.9.1 that posenc does not share, pinned here so that a new version shows up.

    1. The scale cache is keyed by length only: after a call with T = 20 (centre 10), a call with T = 11 reuses
       the cached rows, centred at 10, not at ⌊11/2⌋ = 5. Scores are unaffected (q and k share the centre).
    2. rotate_queries_with_cached_keys centres the queries at ⌊T_q/2⌋ of their own slice and the keys at
       ⌊T_k/2⌋, so every score of pair i carries an extra factor ζ_i^{(⌊T_k/2⌋ − ⌊T_q/2⌋)/B}: its scores are not
       those of the full computation.
    """
    rope = rotary_embedding(16, use_xpos=True)
    rope.rotate_queries_and_keys(_randn(1, 1, 20, 16), _randn(1, 1, 20, 16))
    q, k = _randn(1, 1, 11, 16, seed=9), _randn(1, 1, 11, 16, seed=10)
    q_ref, _ = rope.rotate_queries_and_keys(q, k)
    positions = torch.arange(11)
    torch.testing.assert_close(q_ref, apply_xpos(q, k, positions, positions, center=10)[0], atol=2e-6, rtol=2e-6)
    assert not torch.allclose(q_ref, apply_xpos(q, k, positions, positions, center=5)[0], atol=1e-3)

    q, k = _randn(1, 1, 3, 16, seed=11), _randn(1, 1, 12, 16, seed=12)
    q_ref, k_ref = rotary_embedding(16, use_xpos=True).rotate_queries_with_cached_keys(q, k)
    q_pos, k_pos = torch.arange(9, 12), torch.arange(12)
    torch.testing.assert_close(q_ref, rotate_xpos(q, q_pos, key=False, center=1), atol=2e-6, rtol=2e-6)
    torch.testing.assert_close(k_ref, rotate_xpos(k, k_pos, key=True, center=6), atol=2e-6, rtol=2e-6)
    q_rot, k_rot = apply_xpos(q, k, q_pos, k_pos)
    assert not torch.allclose(q_ref @ k_ref.mT, q_rot @ k_rot.mT, atol=1e-3)


# ---------------------------------------------------------------- the definition and its properties


def test_zeta_formula():
    d, gamma = 64, 0.4
    expected = torch.tensor([(i / (d / 2) + gamma) / (1 + gamma) for i in range(d // 2)])
    torch.testing.assert_close(xpos_zeta(d), expected)
    assert math.isclose(xpos_zeta(d)[0].item(), 2 / 7, rel_tol=1e-6)
    assert (xpos_zeta(d) < 1).all() and (xpos_zeta(d).diff() > 0).all()


def _pair_scores(q_rot, k_rot, layout):
    """Per-pair contributions to q·k: (..., r/2)."""
    prod = q_rot * k_rot
    if layout == "interleaved":
        return prod[..., 0::2] + prod[..., 1::2]
    half = prod.shape[-1] // 2
    return prod[..., :half] + prod[..., half:]


@pytest.mark.parametrize("layout", ["interleaved", "half"])
def test_score_is_rope_score_times_zeta_power_of_offset(device, layout):
    # ⟨q̃_m, k̃_n⟩ pair by pair = ζ_i^{(m−n)/B} · RoPE's pair score, whatever the centre (float64 to test exactly)
    d, scale_base = 16, 32.0
    q, k = _randn(1, 1, 1, d, seed=13, device=device), _randn(1, 1, 1, d, seed=14, device=device)
    zeta = xpos_zeta(d, device=device).double()
    for m, n, center in [(5, 2, 0.0), (40, 7, 20.0), (3, 3, -8.0), (0, 30, 11.0), (100, 60, 50.0)]:
        m_t, n_t = torch.tensor([m], device=device), torch.tensor([n], device=device)
        q_rot = rotate_xpos(q.double(), m_t, key=False, center=center, scale_base=scale_base, layout=layout)
        k_rot = rotate_xpos(k.double(), n_t, key=True, center=center, scale_base=scale_base, layout=layout)
        rope = _pair_scores(apply_rope(q.double(), m_t, layout=layout), apply_rope(k.double(), n_t, layout=layout), layout)
        torch.testing.assert_close(_pair_scores(q_rot, k_rot, layout), rope * zeta ** ((m - n) / scale_base),
                                   atol=1e-5, rtol=1e-5)


def test_scores_depend_on_offset_only_and_decay(device):
    # random q, k; shifting all positions by s leaves every score unchanged (default centring). The tolerance
    # grows with s: angles are float32, so m·θ carries a rounding of ~m·6·10⁻⁸ rad, as in RoPE itself
    q, k = _randn(2, 4, 16, 32, seed=15, device=device), _randn(2, 4, 16, 32, seed=16, device=device)
    positions = torch.arange(16, device=device)
    q_rot, k_rot = apply_xpos(q, k, positions, positions)
    reference = q_rot @ k_rot.mT
    for shift, tol in ((7, 1e-5), (300, 2e-4), (5000, 5e-3)):
        q_rot, k_rot = apply_xpos(q, k, positions + shift, positions + shift)
        torch.testing.assert_close(q_rot @ k_rot.mT, reference, atol=tol, rtol=tol)
    # decay: |score(m, n)| ≤ Σ_i ζ_i^{(m−n)/B} |q_i| |k_i| (|·| the norm of pair i), a bound that falls with m − n
    q1, k1 = q[:1, :1, :1], k[:1, :1, :1]
    norms = (q1.reshape(16, 2).norm(dim=-1) * k1.reshape(16, 2).norm(dim=-1)).double()
    zeta = xpos_zeta(32, device=device).double()
    bounds = []
    for distance in (0, 50, 500, 2000, 8000):
        m, n = torch.tensor([distance + 3], device=device), torch.tensor([3], device=device)
        q_rot, k_rot = apply_xpos(q1, k1, m, n)
        bound = (zeta ** (distance / 512) * norms).sum().item()
        assert abs((q_rot * k_rot).sum().item()) <= bound * (1 + 1e-5)
        bounds.append(bound)
    assert bounds == sorted(bounds, reverse=True) and bounds[-1] < 0.25 * bounds[0]


@pytest.mark.parametrize("layout", ["interleaved", "half"])
def test_infinite_scale_base_is_rope(device, layout):
    q, k = _randn(2, 3, 12, 16, seed=17, device=device), _randn(2, 3, 12, 16, seed=18, device=device)
    positions = torch.arange(100, 112, device=device)
    q_rot, k_rot = apply_xpos(q, k, positions, positions, scale_base=math.inf, layout=layout)
    torch.testing.assert_close(q_rot, apply_rope(q, positions, layout=layout), atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(k_rot, apply_rope(k, positions, layout=layout), atol=1e-6, rtol=1e-6)


def test_half_layout_is_interleaved_up_to_the_pair_permutation():
    q, k = _randn(1, 2, 7, 16, seed=19), _randn(1, 2, 7, 16, seed=20)
    perm = pair_permutation(16)
    positions = torch.arange(7)
    q_i, k_i = apply_xpos(q, k, positions, positions, layout="interleaved")
    q_h, k_h = apply_xpos(q[..., perm], k[..., perm], positions, positions, layout="half")
    torch.testing.assert_close(q_h, q_i[..., perm])
    torch.testing.assert_close(k_h, k_i[..., perm])


def test_positions_contract():
    # (B, 1, T) with equal rows = (T,); per-row offsets = each row alone (the default centre is per sequence)
    q, k = _randn(3, 2, 5, 8, seed=21), _randn(3, 2, 5, 8, seed=22)
    positions = torch.arange(5)
    expected = apply_xpos(q, k, positions, positions)
    batched = positions.expand(3, 1, 5)
    for got, want in zip(apply_xpos(q, k, batched, batched), expected, strict=True):
        torch.testing.assert_close(got, want, atol=0, rtol=0)
    offsets = torch.tensor([0, 17, 900])[:, None, None] + positions
    q_rot, k_rot = apply_xpos(q, k, offsets, offsets)
    for b in range(3):
        q_b, k_b = apply_xpos(q[b:b + 1], k[b:b + 1], offsets[b, 0], offsets[b, 0])
        torch.testing.assert_close(q_rot[b:b + 1], q_b, atol=0, rtol=0)
        torch.testing.assert_close(k_rot[b:b + 1], k_b, atol=0, rtol=0)


def test_default_center():
    assert xpos_center(torch.arange(10)).item() == 5  # ⌈10/2⌉
    assert xpos_center(torch.arange(11)).item() == 6  # ⌈11/2⌉, torchscale's −min_pos
    assert xpos_center(torch.arange(100, 111)).item() == 106
    assert xpos_center(torch.tensor([[0, 1, 2], [10, 11, 12]])).tolist() == [[2.0], [12.0]]


def test_half_precision_inputs_keep_their_dtype():
    q, k = _randn(1, 2, 6, 16, seed=23), _randn(1, 2, 6, 16, seed=24)
    positions = torch.arange(6)
    q32, k32 = apply_xpos(q, k, positions, positions)
    q16, k16 = apply_xpos(q.bfloat16(), k.bfloat16(), positions, positions)
    assert q16.dtype == k16.dtype == torch.bfloat16
    torch.testing.assert_close(q16.float(), q32, atol=3e-2, rtol=2e-2)
    torch.testing.assert_close(k16.float(), k32, atol=3e-2, rtol=2e-2)


# ---------------------------------------------------------------- the float range of ζ^{±p/B}


def test_largest_finite_distance_in_float32():
    # uncentred (c = 0, the paper's form): the key factor of the fastest pair, ζ_0^{−n/512} = 3.5^{n/512},
    # overflows float32 at n = 36 261; the query factor turns subnormal at 35 695 and 0 at 42 494
    zeta = xpos_zeta(64)
    positions = torch.arange(30000, 45000)
    query = xpos_scale(positions, zeta)
    key = 1.0 / query
    first_inf = positions[~torch.isfinite(key).all(-1)][0].item()
    first_subnormal = positions[(query < torch.finfo(torch.float32).tiny).any(-1)][0].item()
    first_zero = positions[(query == 0).any(-1)][0].item()
    assert first_inf == math.floor(xpos_max_distance(torch.float32)) + 1 == 36261
    assert (first_subnormal, first_zero) == (35695, 42494)
    assert math.floor(xpos_max_distance(torch.float16)) == 4532


def test_centring_keeps_long_sequences_finite():
    # 60 000 positions: uncentred keys become inf (scores NaN or inf); centred at ⌈L/2⌉ every factor is finite
    seq_len = 60000
    q, k = torch.ones(1, 1, seq_len, 4), torch.ones(1, 1, seq_len, 4)
    positions = torch.arange(seq_len)
    q_c, k_c = apply_xpos(q, k, positions, positions)
    assert torch.isfinite(q_c).all() and torch.isfinite(k_c).all()
    q_0, k_0 = apply_xpos(q, k, positions, positions, center=0)
    assert not torch.isfinite(k_0).all()
    last = (q_0[..., -1:, :] * k_0[..., -1:, :]).sum()
    assert not torch.isfinite(last)  # 0 · inf: the score of the last token with itself is NaN
    torch.testing.assert_close((q_c[..., -1, :] * k_c[..., -1, :]).sum(), torch.tensor(4.0))


# ---------------------------------------------------------------- input checks


def test_errors():
    q, k, pos = torch.randn(1, 1, 4, 8), torch.randn(1, 1, 4, 8), torch.arange(4)
    with pytest.raises(TypeError, match="q must be a floating tensor"):
        apply_xpos(q.long(), k, pos, pos)
    with pytest.raises(ValueError, match="head_dim of k must be even"):
        apply_xpos(q, torch.randn(1, 1, 4, 7), pos, pos)
    with pytest.raises(ValueError, match="same head_dim"):
        apply_xpos(q, torch.randn(1, 1, 4, 6), pos, pos)
    with pytest.raises(ValueError, match="positions must have shape"):
        apply_xpos(q, k, torch.arange(5), pos)
    with pytest.raises(ValueError, match="scale_base must be > 0"):
        apply_xpos(q, k, pos, pos, scale_base=0)
    with pytest.raises(ValueError, match="gamma must be finite and > 0"):
        apply_xpos(q, k, pos, pos, gamma=-0.4)
    with pytest.raises(TypeError, match="gamma must be a real number"):
        xpos_zeta(8, gamma="0.4")
    with pytest.raises(ValueError, match="layout must be one of"):
        apply_xpos(q, k, pos, pos, layout="neox")
    with pytest.raises(TypeError, match="key must be a bool"):
        rotate_xpos(q, pos, key=1)
    with pytest.raises(ValueError, match="rotary_dim = 2·len\\(inv_freq\\) = 16 must not exceed head_dim = 8"):
        apply_xpos(q, k, pos, pos, inv_freq=torch.ones(8))
    with pytest.raises(ValueError, match="at least one position"):
        xpos_center(torch.arange(0))
    with pytest.raises(ValueError, match="rotary_dim must be even"):
        xpos_zeta(7)
