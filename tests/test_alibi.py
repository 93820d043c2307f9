import pytest
import torch

from posenc.alibi import alibi_bias, alibi_slopes
from posenc.layers.attention import (
    MultiHeadAttention,
    attention_flex,
    attention_reference,
    attention_sdpa,
)
from posenc.schemes import PositionalScheme, build_scheme


@pytest.mark.parametrize("num_heads", list(range(1, 33)) + [40, 48, 64, 96])
def test_slopes_match_bloom(num_heads):
    from transformers.models.bloom.modeling_bloom import _get_alibi_slopes

    torch.testing.assert_close(alibi_slopes(num_heads), _get_alibi_slopes(num_heads, torch.device("cpu")).float())


def test_slopes_for_eight_heads_are_the_papers():
    assert alibi_slopes(8).tolist() == [2.0 ** -k for k in range(1, 9)]


@pytest.mark.parametrize("num_heads", [4, 6, 12])
def test_bloom_form_gives_the_same_causal_attention(num_heads):
    """BLOOM adds m_h·n (key position); the paper −m_h·(m − n). They differ by a constant per row."""
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor

    T = 10
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, num_heads, T, 8, generator=g) for _ in range(3))
    bloom = build_alibi_tensor(torch.ones(1, T, dtype=torch.long), num_heads, torch.float32).view(1, num_heads, 1, T)
    ours = alibi_bias(torch.arange(T), torch.arange(T), alibi_slopes(num_heads))
    assert not torch.allclose(bloom.expand(1, num_heads, T, T), ours[None])
    _, w_bloom = attention_reference(q, k, v, bias=bloom, causal=True)
    _, w_ours = attention_reference(q, k, v, bias=ours, causal=True)
    torch.testing.assert_close(w_ours, w_bloom, atol=1e-6, rtol=1e-5)


def test_symmetric_variant():
    bias = alibi_bias(torch.arange(5), torch.arange(5), alibi_slopes(2), symmetric=True)
    assert torch.equal(bias, bias.transpose(-1, -2)) and (bias <= 0).all()


def test_reference_sdpa_and_flex_agree():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 4, 33, 8, generator=g) for _ in range(3))
    scheme = build_scheme("alibi", d_model=32, num_heads=4)
    pos = torch.arange(33)
    bias = scheme.score_bias(q, k, pos, pos)
    ref, _ = attention_reference(q, k, v, bias=bias)
    torch.testing.assert_close(attention_sdpa(q, k, v, bias=bias), ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(attention_flex(q, k, v, score_mod=scheme.score_mod(pos, pos)), ref, atol=1e-5, rtol=1e-5)
    layer = MultiHeadAttention(32, 4, scheme)
    x = torch.randn(1, 33, 32)
    with torch.no_grad():  # FlexAttention has no backward on the CPU (torch 2.13)
        torch.testing.assert_close(layer(x, pos, impl="flex")[0], layer(x, pos, impl="reference")[0], atol=1e-5, rtol=1e-5)


def test_flex_refuses_what_it_cannot_do():
    class BiasOnly(PositionalScheme):  # a score bias with no score_mod nor augment_qk
        name = "toy-bias-only"
        hooks = frozenset({"score_bias"})

        def score_bias(self, q, k, q_positions, k_positions):
            return torch.zeros(q.shape[-2], k.shape[-2])

    layer = MultiHeadAttention(16, 4, BiasOnly(d_model=16, num_heads=4))
    with pytest.raises(ValueError, match="no score_mod"):
        layer(torch.randn(1, 5, 16), torch.arange(5), impl="flex")


@pytest.mark.parametrize("bad, error", [(0, ValueError), (2.0, TypeError)])
def test_bad_num_heads(bad, error):
    with pytest.raises(error, match="num_heads"):
        alibi_slopes(bad)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("q_len, k_len", [(33, 33), (5, 40), (130, 130)])
def test_flex_block_mask_matches_reference(device, causal, q_len, k_len):
    """The block mask is bottom-right aligned like the reference mask (a decoding step attends to the
    whole cache), and the full mask leaves every score in place."""
    g = torch.Generator().manual_seed(1)
    q = torch.randn(1, 4, q_len, 8, generator=g).to(device)
    k, v = (torch.randn(1, 4, k_len, 8, generator=g).to(device) for _ in range(2))
    scheme = build_scheme("alibi", d_model=32, num_heads=4, symmetric=not causal).to(device)
    q_pos, k_pos = torch.arange(k_len - q_len, k_len, device=device), torch.arange(k_len, device=device)
    ref, _ = attention_reference(q, k, v, bias=scheme.score_bias(q, k, q_pos, k_pos), causal=causal)
    with torch.no_grad():
        out = attention_flex(q, k, v, score_mod=scheme.score_mod(q_pos, k_pos), causal=causal)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
