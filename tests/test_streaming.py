"""StreamingLLM: the streaming cache keeps sinks and a window, re-positions keys at
their slots, and equals full attention as long as nothing is evicted."""

import pytest
import torch

from posenc.layers import streaming
from posenc.layers.attention import MultiHeadAttention, attention_reference
from posenc.layers.kv_cache import StreamingLayerKVCache
from posenc.layers.model import ModelConfig, TinyLM
from posenc.schemes import build_scheme


def _model(scheme="rope", **config):
    torch.manual_seed(0)
    return TinyLM(ModelConfig(scheme=scheme, d_model=16, num_heads=2, **config)).eval()


@pytest.mark.parametrize("scheme", ["rope", "alibi", "t5", "xpos", "none"])
def test_streaming_equals_dense_before_eviction(scheme):
    model = _model(scheme)
    tokens = torch.randint(0, 256, (30,))
    dense = streaming.dense_losses(model, tokens)
    for sink_tokens, window in [(4, 26), (0, 40)]:
        streamed = streaming.streaming_losses(
            model, tokens, sink_tokens=sink_tokens, window=window
        )
        torch.testing.assert_close(streamed, dense)


def test_recompute_equals_dense_within_the_window():
    model = _model()
    tokens = torch.randint(0, 256, (20,))
    torch.testing.assert_close(
        streaming.window_recompute_losses(model, tokens, window=25),
        streaming.dense_losses(model, tokens),
    )


def test_recompute_predicts_from_the_last_window_at_positions_from_zero():
    model = _model()
    tokens = torch.randint(0, 256, (40,))
    losses = streaming.window_recompute_losses(model, tokens, window=8, batch_size=3)
    for t in (7, 8, 20, 38):  # token t + 1 from tokens t − 7 … t
        logits = model(tokens[None, t - 7 : t + 1])[0, -1]
        expected = torch.nn.functional.cross_entropy(logits.double(), tokens[t + 1])
        torch.testing.assert_close(losses[t], expected)


def test_one_step_of_the_cache_by_hand():
    """After 20 tokens with 3 sinks and a window of 5, the last query attends to
    tokens 0, 1, 2, 15 … 19 at slots 0 … 7, itself at slot 7."""
    torch.manual_seed(1)
    scheme = build_scheme("rope", d_model=16, num_heads=2)
    attn = MultiHeadAttention(16, 2, scheme).eval()
    x = torch.randn(1, 20, 16)
    cache = StreamingLayerKVCache(3, 5)
    with torch.no_grad():
        attn(x[:, :8], torch.arange(8), cache=cache)
        for t in range(8, 20):
            out, _ = attn(x[:, t : t + 1], torch.tensor([7]), cache=cache)
        q, k, v = attn.qkv(x).view(1, 20, 3, 2, 8).permute(2, 0, 3, 1, 4).unbind(0)
        kept = torch.tensor([0, 1, 2, 15, 16, 17, 18, 19])
        slots = torch.arange(8)
        q_rot, k_rot = scheme.transform_qk(
            q[:, :, 19:20], k[:, :, kept], slots[-1:], slots
        )
        expected, _ = attention_reference(q_rot, k_rot, v[:, :, kept], causal=False)
        expected = attn.proj(expected.transpose(1, 2).reshape(1, 1, 16))
    assert len(cache) == 8 and cache.seen == 20
    torch.testing.assert_close(out, expected)


@pytest.mark.parametrize("scheme", ["rope", "alibi"])
def test_one_layer_window_attention_equals_recompute(scheme):
    """In one layer a cached key depends on its token only, and a relative scheme sees
    the same distances at cache slots as in a window encoded from 0: window attention
    (no sinks) then equals the sliding window with re-computation exactly. With two
    layers it does not: the second layer's keys carry the first's longer history."""
    tokens = torch.randint(0, 256, (50,))
    one = _model(scheme, num_layers=1)
    torch.testing.assert_close(
        streaming.streaming_losses(one, tokens, sink_tokens=0, window=10),
        streaming.window_recompute_losses(one, tokens, window=10),
    )
    two = _model(scheme, num_layers=2)
    difference = streaming.streaming_losses(
        two, tokens, sink_tokens=0, window=10
    ) - streaming.window_recompute_losses(two, tokens, window=10)
    assert difference[:10].abs().max() == 0 and difference[10:].abs().max() > 1e-6


def test_sinks_matter_after_eviction():
    model = _model()
    tokens = torch.randint(0, 256, (60,))
    window = streaming.streaming_losses(model, tokens, sink_tokens=0, window=12)
    sinks = streaming.streaming_losses(model, tokens, sink_tokens=4, window=8)
    assert (window[12:] - sinks[12:]).abs().max() > 1e-6


def test_errors():
    model = _model()
    with pytest.raises(ValueError, match="1-D integer tensor"):
        streaming.dense_losses(model, torch.rand(10))
    with pytest.raises(ValueError, match="at least 2"):
        streaming.streaming_losses(model, torch.tensor([3]), sink_tokens=1, window=2)
    with pytest.raises(ValueError, match="embeddings"):
        _model("sinusoidal").new_streaming_cache(sink_tokens=4, window=8)
    cache = model.new_streaming_cache(sink_tokens=1, window=3)
    model(torch.randint(0, 256, (1, 4)), cache=cache)
    with pytest.raises(ValueError, match="one token per step"):
        model(torch.randint(0, 256, (1, 2)), cache=cache)
    with pytest.raises(ValueError, match="slot"):
        model(torch.randint(0, 256, (1, 1)), torch.tensor([9]), cache=cache)
    with pytest.raises((ValueError, TypeError), match="window"):
        model.new_streaming_cache(sink_tokens=1, window=0)


def test_sink_logit_model_streams():
    model = _model(layers=[{"sink": True}] * 2)
    tokens = torch.randint(0, 256, (30,))
    torch.testing.assert_close(
        streaming.streaming_losses(model, tokens, sink_tokens=0, window=40),
        streaming.dense_losses(model, tokens),
    )
