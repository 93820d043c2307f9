import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from posenc.attention import MultiHeadAttention
from posenc.relative import (
    clipped_relative_position,
    deberta_log_bucket_position,
    relative_shift,
    shaw_key_bias,
    shaw_key_bias_naive,
    shaw_value_term,
    shaw_value_term_naive,
    t5_relative_position_bucket,
)
from posenc.schemes import build_scheme
from posenc.sinusoidal import sinusoidal_encoding

RELATIVE = ["shaw", "transformer_xl", "t5", "deberta", "alibi"]


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("num_buckets, max_distance", [(32, 128), (16, 64), (8, 20), (64, 512), (6, 100)])
def test_t5_buckets_match_hugging_face(bidirectional, num_buckets, max_distance):
    from transformers.models.t5.modeling_t5 import T5Attention

    rel = torch.arange(-1000, 1001)
    ours = t5_relative_position_bucket(rel, bidirectional, num_buckets, max_distance)
    ref = T5Attention._relative_position_bucket(rel, bidirectional=bidirectional, num_buckets=num_buckets,
                                                max_distance=max_distance)
    assert torch.equal(ours, ref)
    assert ours.min() >= 0 and ours.max() < num_buckets


@pytest.mark.parametrize("bucket_size, max_position", [(256, 512), (32, 128), (8, 64), (4, 10)])
def test_deberta_log_buckets_match_hugging_face(bucket_size, max_position):
    from transformers.models.deberta_v2.modeling_deberta_v2 import make_log_bucket_position

    rel = torch.arange(-1500, 1501)
    ours = deberta_log_bucket_position(rel, bucket_size, max_position)
    assert torch.equal(ours, make_log_bucket_position(rel, bucket_size, max_position).long())
    assert torch.equal(deberta_log_bucket_position(-rel, bucket_size, max_position), -ours)  # odd


def _shaw_inputs(batched):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 3, 9, 4, generator=g, requires_grad=True)
    w = torch.randn(2, 3, 9, 9, generator=g).softmax(-1).requires_grad_()
    a = torch.randn(7, 4, generator=g, requires_grad=True)  # k = 3
    pos = torch.stack([torch.arange(9), torch.arange(9) + 5])[:, None] if batched else torch.arange(9)
    return q, w, a, clipped_relative_position(pos, pos, 3)


@pytest.mark.parametrize("batched", [False, True])
def test_shaw_efficient_equals_naive_values_and_gradients(batched):
    for naive, fast, first in [(shaw_key_bias_naive, shaw_key_bias, 0), (shaw_value_term_naive, shaw_value_term, 1)]:
        q, w, a, rel = _shaw_inputs(batched)
        x = (q, w)[first]
        ref = naive(x, a, rel)
        g_ref = torch.autograd.grad(ref.square().sum(), (x, a))
        q, w, a, rel = _shaw_inputs(batched)
        x = (q, w)[first]
        out = fast(x, a, rel)
        g_out = torch.autograd.grad(out.square().sum(), (x, a))
        torch.testing.assert_close(out, ref)
        for gr, go in zip(g_ref, g_out):
            torch.testing.assert_close(go, gr)


def test_clipping():
    rel = clipped_relative_position(torch.arange(6), torch.arange(6), 2)
    assert rel[0].tolist() == [0, 1, 2, 2, 2, 2] and rel[5].tolist() == [-2, -2, -2, -2, -1, 0]


@pytest.mark.parametrize("q_len, k_len", [(6, 6), (3, 8), (1, 5)])
def test_relative_shift_equals_direct_gather(q_len, k_len):
    x = torch.randn(2, q_len, k_len)  # column c: distance k_len - 1 - c
    out = relative_shift(x)
    for i in range(q_len):
        m = i + (k_len - q_len)
        for j in range(m + 1):  # allowed keys only
            assert out[..., i, j].equal(x[..., i, k_len - 1 - (m - j)])


def test_transformer_xl_bias_equals_the_four_term_formula():
    torch.manual_seed(0)
    scheme = build_scheme("transformer_xl", d_model=8, num_heads=2)
    torch.nn.init.normal_(scheme.u)
    torch.nn.init.normal_(scheme.v)
    q, k = torch.randn(1, 2, 5, 4), torch.randn(1, 2, 5, 4)
    pos = torch.arange(5) + 3
    bias = scheme.score_bias(q, k, pos, pos)
    for h in range(2):
        for i in range(5):
            for j in range(5):
                r = scheme.r_proj(sinusoidal_encoding(torch.tensor([i - j]), 8, layout="concatenated"))[0]
                r = r.view(2, 4)[h]
                expected = ((q[0, h, i] + scheme.v[h]) @ r + scheme.u[h] @ k[0, h, j]) / 2.0
                assert torch.allclose(bias[0, h, i, j], expected, atol=1e-5)


def test_deberta_bias_equals_the_paper_loops():
    torch.manual_seed(0)
    scheme = build_scheme("deberta", d_model=8, num_heads=2, bucket_size=4, max_position=16)
    q, k = torch.randn(1, 2, 7, 4), torch.randn(1, 2, 7, 4)
    pos = torch.arange(7)
    bias = scheme.score_bias(q, k, pos, pos)
    kr = scheme.pos_key_proj(scheme.rel_embeddings).view(-1, 2, 4)
    qr = scheme.pos_query_proj(scheme.rel_embeddings).view(-1, 2, 4)

    def delta(a, b):  # DeBERTa's δ(a, b): bucket of a − b, shifted and clipped to the table
        d = deberta_log_bucket_position(torch.tensor(a - b), 4, 16)
        return int((d + 4).clamp(0, 7))

    for h in range(2):
        for i in range(7):
            for j in range(7):
                c2p = q[0, h, i] @ kr[delta(i, j), h]
                p2c = k[0, h, j] @ qr[delta(i, j), h]  # δ(j, i) with the index convention of the code
                assert torch.allclose(bias[0, h, i, j], (c2p + p2c) / math.sqrt(3 * 4), atol=1e-5)
    assert scheme.score_scale_factor == 3.0


@pytest.mark.parametrize("name", RELATIVE)
@given(shift=st.integers(1, 10_000))
@settings(max_examples=15, deadline=None)
def test_shifting_all_positions_leaves_attention_unchanged(name, shift):
    torch.manual_seed(0)
    scheme = build_scheme(name, d_model=16, num_heads=4)
    for p in scheme.parameters():
        torch.nn.init.normal_(p)
    layer = MultiHeadAttention(16, 4, scheme, causal=True)
    x = torch.randn(2, 7, 16)
    with torch.no_grad():
        base, _ = layer(x, torch.arange(7))
        moved, _ = layer(x, torch.arange(7) + shift)
    torch.testing.assert_close(moved, base, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("name", ["shaw", "t5", "deberta", "transformer_xl"])
def test_schemes_run_on_device(device, name):
    scheme = build_scheme(name, d_model=16, num_heads=4).to(device)
    layer = MultiHeadAttention(16, 4, scheme).to(device)
    out, _ = layer(torch.randn(1, 6, 16, device=device), torch.arange(6, device=device))
    assert out.device.type == device.type and torch.isfinite(out).all()


@pytest.mark.parametrize(
    "call, error, text",
    [
        (lambda: t5_relative_position_bucket(torch.arange(3), num_buckets=1), ValueError, "num_buckets must be >= 2"),
        (lambda: t5_relative_position_bucket(torch.arange(3), True, num_buckets=3), ValueError, "num_buckets must be >= 4 when bidirectional"),
        (lambda: t5_relative_position_bucket(torch.arange(3), True, 32, 8), ValueError, "max_distance must be larger than the exact range max_exact=8"),
        (lambda: t5_relative_position_bucket(torch.arange(3.0)), TypeError, "integer tensor"),
        (lambda: clipped_relative_position(torch.arange(3), torch.arange(3), -1), ValueError, "max_relative_position must be >= 0"),
        (lambda: deberta_log_bucket_position(torch.arange(3), 1, 10), ValueError, "bucket_size must be >= 2"),
        (lambda: deberta_log_bucket_position(torch.arange(3), 32, 17), ValueError, "max_position must be larger than"),
        (lambda: build_scheme("shaw", d_model=8, num_heads=2, max_relative_position=-2), ValueError, "max_relative_position"),
        (lambda: build_scheme("t5", d_model=8, num_heads=2, num_buckets=8, max_distance=4), ValueError, "max_distance"),
    ],
)
def test_bad_input(call, error, text):
    with pytest.raises(error, match=text):
        call()
