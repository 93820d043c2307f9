import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from posenc.layers.attention import MultiHeadAttention
from posenc.relative import (
    clipped_relative_position,
    relative_shift,
    shaw_key_bias,
    shaw_key_bias_naive,
    shaw_value_term,
    shaw_value_term_naive,
)
from posenc.relative_buckets import deberta_log_bucket_position, t5_relative_position_bucket
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
                # δ(i, j), as in DeBERTa's code and transformers (Eq. 4 writes δ(j, i))
                p2c = k[0, h, j] @ qr[delta(i, j), h]
                assert torch.allclose(bias[0, h, i, j], (c2p + p2c) / math.sqrt(3 * 4), atol=1e-5)
    assert scheme.score_scale_factor == 3.0


# ---------------------------------------------------------------------------------------
# DeBERTa's disentangled attention against transformers' DeBERTa-v2 attention
# ---------------------------------------------------------------------------------------

DEB_D, DEB_H, DEB_SPAN, DEB_MAX = 32, 4, 8, 32
DEB_T = 70  # > max_position: exact, log-bucketed and clipped offsets all occur


def _hf_and_posenc_deberta(share_att_key, causal):
    """transformers' v2 attention and posenc's DeBERTa scheme with the same weights.

    What has to be aligned, and why (the differences between the two):

    * posenc's projections have no biases; HF's query/key/value and W_{k,r}, W_{q,r} have
      them: they are set to zero here.
    * posenc always has separate W_{k,r}, W_{q,r} (DeBERTa v1, ``share_att_key=False``);
      ``share_att_key=True`` (the released v2/v3 checkpoints) is posenc with
      W_{k,r} := W_k and W_{q,r} := W_q.
    * HF's attention returns the heads' context before its output projection: posenc's
      output projection is set to the identity.
    * HF takes the relative embeddings from its encoder (after a LayerNorm when
      ``norm_rel_ebd="layer_norm"``, as in v3): the same table is passed to both.
    """
    from transformers import DebertaV2Config
    from transformers.models.deberta_v2 import modeling_deberta_v2

    torch.manual_seed(0)
    config = DebertaV2Config(hidden_size=DEB_D, num_attention_heads=DEB_H,
                             relative_attention=True, position_buckets=DEB_SPAN,
                             max_relative_positions=DEB_MAX, pos_att_type="p2c|c2p",
                             share_att_key=share_att_key, hidden_dropout_prob=0.0,
                             attention_probs_dropout_prob=0.0)
    hf = modeling_deberta_v2.DisentangledSelfAttention(config).eval()
    assert hf.pos_ebd_size == DEB_SPAN and hf.share_att_key == share_att_key
    scheme = build_scheme("deberta", d_model=DEB_D, num_heads=DEB_H, bucket_size=DEB_SPAN,
                          max_position=DEB_MAX)
    layer = MultiHeadAttention(DEB_D, DEB_H, scheme, causal=causal).eval()
    rel_embeddings = torch.randn(2 * DEB_SPAN, DEB_D)
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if name.endswith("bias"):
                p.zero_()
        layer.qkv.weight.copy_(torch.cat([hf.query_proj.weight, hf.key_proj.weight,
                                          hf.value_proj.weight]))
        layer.proj.weight.copy_(torch.eye(DEB_D))
        scheme.rel_embeddings.copy_(rel_embeddings)
        w_kr = hf.key_proj.weight if share_att_key else hf.pos_key_proj.weight
        w_qr = hf.query_proj.weight if share_att_key else hf.pos_query_proj.weight
        scheme.pos_key_proj.weight.copy_(w_kr)
        scheme.pos_query_proj.weight.copy_(w_qr)
    return hf, layer, rel_embeddings


@pytest.mark.parametrize("share_att_key", [False, True])
def test_deberta_score_terms_match_hugging_face(share_att_key):
    """c2p + p2c, each divided by √(3·d_h): posenc's score bias is HF's
    disentangled_attention_bias. HF builds relative positions as query − key from indices;
    posenc's scheme gets the positions and negates n − m."""
    hf, layer, rel_embeddings = _hf_and_posenc_deberta(share_att_key, causal=False)
    g = torch.Generator().manual_seed(1)
    q, k = (torch.randn(2, DEB_H, DEB_T, DEB_D // DEB_H, generator=g) for _ in range(2))
    pos = torch.arange(DEB_T)
    with torch.no_grad():
        ours = layer.scheme.score_bias(q, k, pos, pos)
        theirs = hf.disentangled_attention_bias(q.flatten(0, 1), k.flatten(0, 1), None,
                                                rel_embeddings, 3)
    torch.testing.assert_close(ours, theirs.view_as(ours), atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("share_att_key", [False, True])
@pytest.mark.parametrize("causal", [False, True])
def test_deberta_attention_matches_hugging_face(share_att_key, causal):
    """The whole attention: probabilities and output, on both posenc paths, bidirectional
    as in DeBERTa and causal (HF given a lower-triangular attention mask). Positions per
    sequence (offsets 0 and 100) give the same result: the attention is translation
    invariant, and HF has no absolute position here at all."""
    hf, layer, rel_embeddings = _hf_and_posenc_deberta(share_att_key, causal)
    x = torch.randn(2, DEB_T, DEB_D, generator=torch.Generator().manual_seed(2))
    mask = torch.ones(2, 1, DEB_T, DEB_T, dtype=torch.bool)
    if causal:
        mask = mask & torch.ones(DEB_T, DEB_T, dtype=torch.bool).tril()
    offsets = torch.stack([torch.arange(DEB_T), torch.arange(DEB_T) + 100])
    with torch.no_grad():
        context, probs = hf(x, mask, output_attentions=True,
                            rel_embeddings=rel_embeddings)
        out, weights = layer(x, torch.arange(DEB_T), impl="reference", need_weights=True)
        torch.testing.assert_close(weights, probs, atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(out, context, atol=2e-6, rtol=1e-5)
        for positions in (torch.arange(DEB_T), offsets):
            fast, _ = layer(x, positions, impl="sdpa")
            torch.testing.assert_close(fast, context, atol=2e-6, rtol=1e-5)


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
