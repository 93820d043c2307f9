import pytest
import torch

import posenc
from posenc.layers.attention import (
    MultiHeadAttention,
    attention_reference,
    attention_sdpa,
)
from posenc.layers.masks import causal_mask
from posenc.schemes import PositionalScheme, build_scheme

D_MODEL, HEADS = 16, 4


def make_layer(scheme, *, causal, seed=0):
    torch.manual_seed(seed)
    return MultiHeadAttention(D_MODEL, HEADS, scheme, causal=causal)


class DistanceBias(PositionalScheme):
    """A toy score bias −|m − n| · (h + 1), to exercise plug-in point 3."""

    name = "toy-bias"
    hooks = frozenset({"score_bias"})

    def score_bias(self, q, k, q_positions, k_positions):
        dist = (q_positions[..., :, None] - k_positions[..., None, :]).abs().float()
        slopes = torch.arange(1, self.num_heads + 1, dtype=torch.float32, device=q.device)
        return -slopes[:, None, None] * dist


class ValueShift(PositionalScheme):
    """A toy value term: Σ_n a_mn · n · 1, to exercise plug-in point 4."""

    name = "toy-value"
    hooks = frozenset({"value_term"})

    def value_term(self, weights, q_positions, k_positions):
        return (weights @ k_positions.float()[..., None]).expand(*weights.shape[:-1], self.head_dim)


class SwapQK(PositionalScheme):
    """A toy q/k transform (scale q by 2), to exercise plug-in point 2."""

    name = "toy-qk"
    hooks = frozenset({"transform_qk"})

    def transform_qk(self, q, k, q_positions, k_positions):
        return 2 * q, k


def test_causal_mask_is_bottom_right_aligned():
    assert torch.equal(causal_mask(3, 3), torch.ones(3, 3, dtype=torch.bool).tril())
    assert causal_mask(2, 4).tolist() == [[True, True, True, False], [True, True, True, True]]
    with pytest.raises(ValueError, match="q_len <= k_len"):
        causal_mask(4, 2)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("q_len", [5, 9])
def test_sdpa_equals_reference_functions(device, causal, q_len):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 3, q_len, 8, generator=g).to(device)
    k, v = torch.randn(2, 2, 3, 9, 8, generator=g).to(device)
    bias = torch.randn(3, q_len, 9, generator=g).to(device)
    for b in (None, bias):
        ref, weights = attention_reference(q, k, v, bias=b, causal=causal)
        torch.testing.assert_close(attention_sdpa(q, k, v, bias=b, causal=causal), ref, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(weights.sum(-1), torch.ones_like(weights.sum(-1)))


@pytest.mark.parametrize("name", posenc.available_schemes())
def test_every_registered_scheme_same_on_both_paths(device, name):
    scheme = build_scheme(name, d_model=D_MODEL, num_heads=HEADS).to(device)
    layer = make_layer(scheme, causal=True).to(device)
    x = torch.randn(2, 11, D_MODEL, device=device)
    positions = torch.arange(11, device=device)
    x = scheme.embed(x, positions)
    ref, weights = layer(x, positions, impl="reference", need_weights=True)
    assert weights.shape == (2, HEADS, 11, 11)
    if scheme.needs_attention_weights:  # a value term: no fused path exists, and asking for one says so
        with pytest.raises(ValueError, match="cannot return attention weights"):
            layer(x, positions, impl="sdpa")
        fast, _ = layer(x, positions, impl="auto")
    else:
        fast, none = layer(x, positions, impl="sdpa")
        assert none is None
    torch.testing.assert_close(fast, ref, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("scheme_cls", [DistanceBias, SwapQK, ValueShift])
def test_plug_in_points_reach_the_scores(scheme_cls):
    scheme = scheme_cls(d_model=D_MODEL, num_heads=HEADS)
    plain = make_layer(PositionalScheme(d_model=D_MODEL, num_heads=HEADS), causal=True)
    layer = make_layer(scheme, causal=True)
    x, positions = torch.randn(1, 6, D_MODEL), torch.arange(6)
    out, _ = layer(x, positions, impl="auto")
    base, _ = plain(x, positions)
    assert not torch.allclose(out, base)
    # recompute by hand on the reference path
    q, k, v = layer.qkv(x).view(1, 6, 3, HEADS, -1).permute(2, 0, 3, 1, 4)
    q, k = scheme.transform_qk(q, k, positions, positions)
    bias = scheme.score_bias(q, k, positions, positions)
    scores = q @ k.transpose(-2, -1) / (D_MODEL // HEADS) ** 0.5 + (0 if bias is None else bias)
    weights = scores.masked_fill(~causal_mask(6, 6), float("-inf")).softmax(-1)
    manual = weights @ v
    term = scheme.value_term(weights, positions, positions)
    manual = manual + (0 if term is None else term)
    torch.testing.assert_close(out, layer.proj(manual.transpose(1, 2).reshape(1, 6, D_MODEL)), atol=1e-5, rtol=1e-5)


def test_batched_positions_broadcast_over_heads():
    scheme = DistanceBias(d_model=D_MODEL, num_heads=HEADS)
    layer = make_layer(scheme, causal=True)
    x = torch.randn(2, 5, D_MODEL)
    positions = torch.stack([torch.arange(5), torch.arange(5) + 100])
    batched, _ = layer(x, positions)
    # a bias of relative distance: a uniform shift of positions changes nothing
    single, _ = layer(x, torch.arange(5))
    torch.testing.assert_close(batched, single, atol=1e-5, rtol=1e-5)


def _layer_output(name, x, positions):
    scheme = build_scheme(name, d_model=D_MODEL, num_heads=HEADS)
    layer = make_layer(scheme, causal=False)
    with torch.no_grad():
        out, _ = layer(scheme.embed(x, positions), positions)
    return out


def test_no_positions_means_permutation_equivariant():
    x, positions = torch.randn(1, 7, D_MODEL), torch.arange(7)
    perm = torch.randperm(7, generator=torch.Generator().manual_seed(3))
    torch.testing.assert_close(_layer_output("none", x[:, perm], positions), _layer_output("none", x, positions)[:, perm])


@pytest.mark.parametrize("name", [n for n in posenc.available_schemes() if n != "none"])
def test_every_positional_scheme_breaks_equivariance(name):
    torch.manual_seed(1)
    x, positions = torch.randn(1, 7, D_MODEL), torch.arange(7)
    perm = torch.tensor([6, 5, 4, 3, 2, 1, 0])
    permuted_out = _layer_output(name, x[:, perm], positions)
    assert not torch.allclose(permuted_out, _layer_output(name, x, positions)[:, perm], atol=1e-4)


def test_bad_calls():
    layer = make_layer(ValueShift(d_model=D_MODEL, num_heads=HEADS), causal=True)
    x = torch.randn(1, 4, D_MODEL)
    with pytest.raises(ValueError, match="impl='sdpa' cannot return attention weights"):
        layer(x, torch.arange(4), impl="sdpa")
    with pytest.raises(ValueError, match="impl must be one of"):
        layer(x, torch.arange(4), impl="flash")
    with pytest.raises(ValueError, match=r"positions must have shape \(T,\) or \(B, T\) with T=4, got \(5,\)"):
        layer(x, torch.arange(5))
    with pytest.raises(ValueError, match="divisible by num_heads"):
        MultiHeadAttention(10, 3, PositionalScheme(d_model=12, num_heads=3))


def test_a_cache_that_is_not_a_layer_cache_is_refused():
    layer = make_layer(build_scheme("rope", d_model=D_MODEL, num_heads=HEADS), causal=True)
    with pytest.raises(TypeError, match="cache must be a LayerKVCache, got dict"):
        layer(torch.randn(1, 3, D_MODEL), torch.arange(3), cache={})


def test_positions_keep_one_shape_inside():
    """head_positions: (T,) and (1, T) → (1, 1, T), (B, T) → (B, 1, T), grid (A, T) or
    (A, B, T) → (B′, 1, T, A); a view of the caller's tensor, never expanded to B."""
    from posenc.layers.attention import head_positions

    shared = torch.arange(5)
    for given in (shared, shared[None]):
        inside = head_positions(given, 3, 5)
        assert inside.shape == (1, 1, 5) and inside.data_ptr() == shared.data_ptr()
    rows = torch.arange(15).view(3, 5)
    assert torch.equal(head_positions(rows, 3, 5)[:, 0], rows)
    grid = torch.stack((torch.arange(5), torch.arange(5) * 2))  # (2, T): row, column
    inside = head_positions(grid, 3, 5, axes=2)
    assert inside.shape == (1, 1, 5, 2) and torch.equal(inside[0, 0], grid.T)
    per_row = grid[:, None].expand(2, 3, 5) + torch.arange(3)[:, None]
    assert torch.equal(head_positions(per_row, 3, 5, axes=2)[:, 0], per_row.permute(1, 2, 0))
    with pytest.raises(TypeError, match="positions must be a tensor"):
        head_positions([0, 1, 2], 1, 3)
    with pytest.raises(ValueError, match="need B = 1 or the batch size 3"):
        head_positions(torch.arange(10).view(2, 5), 3, 5)


@pytest.mark.parametrize("name", posenc.available_schemes())
def test_shared_positions_give_the_same_bits_as_t_or_1_t(name):
    """(T,) and (1, T) are one shape inside, so every path gives bit-identical output
    (a bias of positions alone stays batch-free for both: posenc.schemes.sequence_positions)."""
    scheme = build_scheme(name, d_model=D_MODEL, num_heads=HEADS)
    layer = make_layer(scheme, causal=True).eval()
    x = torch.randn(2, 6, D_MODEL, generator=torch.Generator().manual_seed(1))
    impls = ("reference",) if scheme.needs_attention_weights else ("reference", "sdpa")
    with torch.no_grad():
        for impl in impls:
            out, _ = layer(x, torch.arange(6), impl=impl)
            assert torch.equal(layer(x, torch.arange(6)[None], impl=impl)[0], out)


def test_a_cache_step_keeps_the_batch_of_its_positions():
    from posenc.layers.kv_cache import LayerKVCache, StreamingLayerKVCache

    layer = make_layer(build_scheme("rope", d_model=D_MODEL, num_heads=HEADS), causal=True)
    x = torch.randn(2, 4, D_MODEL)
    cache = LayerKVCache()
    layer(x[:, :3], torch.arange(3), cache=cache)  # shared positions: (1, 1, 3) cached
    assert cache.positions.shape == (1, 1, 3)
    with pytest.raises(ValueError, match=r"keep the batch and axes.*\(1, 1, 3\).*\(2, 1, 1\)"):
        layer(x[:, 3:], torch.tensor([[3], [7]]), cache=cache)
    streaming = StreamingLayerKVCache(1, 4)
    with pytest.raises(ValueError, match="by their slot, shared by the batch"):
        layer(x[:, :2], torch.tensor([[0, 1], [0, 1]]), cache=streaming)
    layer(x[:, :2], torch.arange(2)[None], cache=streaming)  # (1, T) is (T,) inside
    assert streaming.positions.shape == (1, 1, 2)


def test_query_temperature_needs_sequence_positions():
    scheme = build_scheme("rope_2d", d_model=D_MODEL, num_heads=HEADS, namespace="2d")
    with pytest.raises(ValueError, match="query_temperature.*2-axis positions"):
        MultiHeadAttention(
            D_MODEL, HEADS, scheme, causal=False,
            query_temperature={"floor_scale": 8.0, "attn_scale": 0.1},
        )


def test_inside_shape_errors_of_the_helpers():
    from posenc.rope_nd import rope_2d_rotate
    from posenc.schemes import flex_positions

    with pytest.raises(ValueError, match=r"\(B′, 1, T, 2\) with B′ = 1 or 2 and T=5"):
        rope_2d_rotate(torch.randn(2, 1, 5, 8), torch.zeros(2, 5))
    with pytest.raises(ValueError, match="share their batch"):
        flex_positions(torch.zeros(2, 1, 5), torch.zeros(3, 1, 5))
    qp, kp = flex_positions(torch.arange(5).view(1, 1, 5), torch.arange(5))
    assert qp.shape == kp.shape == (5,)
    qp, kp = flex_positions(torch.arange(5).view(1, 1, 5), torch.zeros(3, 1, 5))
    assert qp.shape == kp.shape == (3, 5)
