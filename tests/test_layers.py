"""Layer patterns: sliding-window and chunked attention, Llama 4's NoPE temperature,
gpt-oss's sink logits, per-layer schemes in the tiny LM and the presets of today's
models, with parity against transformers where it implements the same rule."""

import math

import pytest
import torch

from posenc.layers.attention import (
    MultiHeadAttention,
    attention_flex,
    attention_reference,
    attention_sdpa,
)
from posenc.layers.masks import attention_mask, query_temperature_scale
from posenc.layers.model import LAYER_PRESETS, ModelConfig, TinyLM, layer_preset
from posenc.schemes import build_scheme

transformers = pytest.importorskip("transformers")


def _hf_mask(mask_function, q_len, k_len):
    q_idx = torch.arange(k_len - q_len, k_len)[:, None]
    kv_idx = torch.arange(k_len)[None, :]
    return mask_function(0, 0, q_idx, kv_idx).expand(q_len, k_len)


@pytest.mark.parametrize("q_len,k_len", [(9, 9), (1, 9), (3, 12)])
@pytest.mark.parametrize("size", [1, 3, 4])
def test_masks_equal_transformers_rules(q_len, k_len, size):
    from transformers import masking_utils as mu

    sliding = _hf_mask(mu.sliding_window_causal_mask_function(size), q_len, k_len)
    assert torch.equal(attention_mask(q_len, k_len, window=size), sliding)
    chunked = _hf_mask(
        mu.chunked_causal_mask_function(size, torch.zeros(1, dtype=torch.long)),
        q_len,
        k_len,
    )
    assert torch.equal(attention_mask(q_len, k_len, chunk=size), chunked)
    causal = _hf_mask(mu.causal_mask_function, q_len, k_len)
    assert torch.equal(attention_mask(q_len, k_len), causal)


def test_window_and_chunk_by_hand():
    # query 4 of 0..5 with window 2 sees keys 3, 4; with chunk 3 it sees 3, 4
    assert attention_mask(6, 6, window=2)[4].nonzero().flatten().tolist() == [3, 4]
    assert attention_mask(6, 6, chunk=3)[5].nonzero().flatten().tolist() == [3, 4, 5]
    assert attention_mask(6, 6, window=1).equal(torch.eye(6, dtype=torch.bool))
    # a window as long as the sequence is plain causal attention
    assert attention_mask(6, 6, window=6).equal(attention_mask(6, 6))


@pytest.mark.parametrize("bad", [0, -2, 1.5, True])
def test_bad_window_is_rejected(bad):
    with pytest.raises((ValueError, TypeError), match="window"):
        attention_mask(4, 4, window=bad)
    with pytest.raises((ValueError, TypeError), match="chunk"):
        MultiHeadAttention(
            8, 2, build_scheme("none", d_model=8, num_heads=2), chunk=bad
        )


def test_window_needs_causal():
    with pytest.raises(ValueError, match="causal"):
        attention_mask(4, 4, causal=False, window=2)


def _qkv(batch=2, heads=3, q_len=10, k_len=10, dim=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, heads, q_len, dim, generator=g)
    k = torch.randn(batch, heads, k_len, dim, generator=g)
    v = torch.randn(batch, heads, k_len, dim, generator=g)
    return q, k, v


@pytest.mark.parametrize(
    "options",
    [
        {"window": 3},
        {"chunk": 4},
        {"window": 3, "chunk": 4},
        {"sinks": torch.tensor([0.5, -1.0, 2.0])},
        {"window": 2, "sinks": torch.tensor([0.5, -1.0, 2.0])},
        {"bias": torch.randn(3, 10, 10), "sinks": torch.tensor([0.0, 1.0, -3.0])},
    ],
)
@pytest.mark.parametrize("q_len", [10, 4])
def test_reference_equals_sdpa(options, q_len):
    q, k, v = _qkv(q_len=q_len)
    if "bias" in options:
        options = {**options, "bias": options["bias"][:, -q_len:]}
    out, weights = attention_reference(q, k, v, **options)
    torch.testing.assert_close(attention_sdpa(q, k, v, **options), out)
    assert (
        weights[
            attention_mask(
                q_len,
                10,
                **{key: options[key] for key in ("window", "chunk") if key in options},
            )
            .logical_not()
            .expand_as(weights)
        ]
        .abs()
        .max()
        == 0
    )


def test_sinks_equal_gpt_oss_eager_attention():
    from transformers.models.gpt_oss import modeling_gpt_oss

    q, k, v = _qkv(q_len=7, k_len=7, heads=4)
    sinks = torch.tensor([0.3, -2.0, 1.5, 4.0])
    module = torch.nn.Module()
    module.sinks, module.num_key_value_groups = torch.nn.Parameter(sinks), 1
    causal = torch.zeros(7, 7).masked_fill(~attention_mask(7, 7), float("-inf"))
    hf_out, hf_weights = modeling_gpt_oss.eager_attention_forward(
        module, q, k, v, causal[None, None], scaling=8**-0.5
    )
    out, weights = attention_reference(q, k, v, sinks=sinks)
    torch.testing.assert_close(out.transpose(1, 2), hf_out)
    torch.testing.assert_close(weights, hf_weights)
    # the sink takes mass: rows sum to less than 1, by e^s / (e^s + Σ e^score)
    assert (weights.sum(-1) < 1).all()


def test_sink_of_minus_infinity_is_plain_attention():
    q, k, v = _qkv()
    plain, _ = attention_reference(q, k, v)
    sunk, _ = attention_reference(q, k, v, sinks=torch.full((3,), -math.inf))
    torch.testing.assert_close(sunk, plain)


def test_sinks_shape_is_checked():
    q, k, v = _qkv()
    with pytest.raises(ValueError, match=r"sinks must have shape \(H,\)"):
        attention_sdpa(q, k, v, sinks=torch.zeros(2))


@pytest.mark.parametrize("masks", [{"window": 5}, {"chunk": 16}])
def test_flex_block_mask_equals_reference(masks):
    q, k, v = _qkv(batch=1, heads=2, q_len=64, k_len=64, dim=16)
    expected, _ = attention_reference(q, k, v, **masks)
    torch.testing.assert_close(attention_flex(q, k, v, **masks), expected)


def test_query_temperature_values():
    positions = torch.tensor([0, 6, 7, 15, 16, 8191, 8192 * 3 - 1])
    tau = query_temperature_scale(positions, floor_scale=8, attn_scale=0.1)
    expected = [1.0, 1.0, 1 + 0.1 * math.log(2), 1 + 0.1 * math.log(3)]
    torch.testing.assert_close(tau[:4], torch.tensor(expected))
    assert tau[4] == tau[3]  # ⌊17/8⌋ = ⌊16/8⌋ = 2
    big = query_temperature_scale(positions, floor_scale=8192, attn_scale=0.1)
    torch.testing.assert_close(big[-1], torch.tensor(1 + 0.1 * math.log(4)))


@pytest.mark.parametrize("bad", [{"floor_scale": 0, "attn_scale": 0.1}, {"floor": 1}])
def test_bad_temperature_is_rejected(bad):
    with pytest.raises(ValueError, match="query_temperature|floor_scale"):
        MultiHeadAttention(
            8, 2, build_scheme("none", d_model=8, num_heads=2), query_temperature=bad
        )


def _llama4_attention(use_rope: bool, chunk: int = 4):
    from transformers import Llama4TextConfig
    from transformers.models.llama4 import modeling_llama4 as ml4

    config = Llama4TextConfig(
        hidden_size=32,
        num_attention_heads=4,
        num_key_value_heads=4,
        head_dim=8,
        num_hidden_layers=1,
        no_rope_layers=[int(use_rope)],
        attn_temperature_tuning=True,
        floor_scale=chunk,
        attn_scale=0.1,
        use_qk_norm=False,
        attention_chunk_size=chunk,
        rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
    )
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    hf = ml4.Llama4TextAttention(config, 0).eval()
    return config, hf, ml4


def _copy_weights(ours: MultiHeadAttention, hf) -> None:
    with torch.no_grad():
        ours.qkv.weight.copy_(
            torch.cat((hf.q_proj.weight, hf.k_proj.weight, hf.v_proj.weight))
        )
        ours.proj.weight.copy_(hf.o_proj.weight)


def test_llama4_nope_layer_with_temperature_equals_transformers():
    config, hf, _ = _llama4_attention(use_rope=False, chunk=4)
    ours = MultiHeadAttention(
        32,
        4,
        build_scheme("none", d_model=32, num_heads=4),
        query_temperature={"floor_scale": 4, "attn_scale": 0.1},
    )
    _copy_weights(ours, hf)
    x = torch.randn(2, 19, 32)
    mask = torch.zeros(19, 19).masked_fill(~attention_mask(19, 19), float("-inf"))
    plain = MultiHeadAttention(32, 4, build_scheme("none", d_model=32, num_heads=4))
    plain.load_state_dict(ours.state_dict())
    with torch.no_grad():
        expected, _ = hf(x, None, mask[None, None])
        got, _ = ours(x, torch.arange(19), impl="reference")
        untempered, _ = plain(x, torch.arange(19))
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    # positions 0 … 2 have τ = 1; from position 3 on, the temperature matters
    torch.testing.assert_close(untempered[:, :3], expected[:, :3], atol=1e-5, rtol=1e-5)
    assert (untempered[:, 3:] - expected[:, 3:]).abs().max() > 1e-3


def test_llama4_chunked_rope_layer_equals_transformers():
    config, hf, ml4 = _llama4_attention(use_rope=True, chunk=4)
    ours = MultiHeadAttention(
        32,
        4,
        build_scheme(
            "rope", d_model=32, num_heads=4, base=500000.0, layout="interleaved"
        ),
        chunk=4,
    )
    _copy_weights(ours, hf)
    x = torch.randn(2, 13, 32)
    positions = torch.arange(13)
    rotary = ml4.Llama4TextRotaryEmbedding(config)
    freqs_cis = rotary(x, positions[None])
    mask = torch.zeros(13, 13).masked_fill(
        ~attention_mask(13, 13, chunk=4), float("-inf")
    )
    with torch.no_grad():
        expected, _ = hf(x, freqs_cis, mask[None, None])
        got, _ = ours(x, positions, impl="sdpa")
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("impl", ["reference", "sdpa"])
def test_pattern_model_matches_its_layers(impl):
    layers = layer_preset("gemma3", 2, window=4, period=2)
    model = TinyLM(
        ModelConfig(
            scheme="rope", d_model=16, num_heads=2, layers=layers, attn_impl=impl
        )
    )
    first, second = model.blocks[0].attn, model.blocks[1].attn
    assert (first.window, second.window) == (4, None)
    assert (first.scheme.base, second.scheme.base) == (10000.0, 1000000.0)
    assert first.scheme is not second.scheme
    # layers that name no scheme share the model's scheme module
    shared = TinyLM(ModelConfig(scheme="t5", layers=[{}, {"window": 3}]))
    assert shared.blocks[0].attn.scheme is shared.blocks[1].attn.scheme is shared.scheme
    assert len(shared.layer_schemes) == 0
    tokens = torch.randint(0, 256, (2, 12))
    logits = model(tokens)
    # feeding in pieces through the KV cache gives the same logits (the window mask is
    # bottom-right aligned)
    cache = model.new_cache()
    pieces = torch.cat(
        [model(tokens[:, :5], cache=cache), model(tokens[:, 5:], cache=cache)], 1
    )
    torch.testing.assert_close(pieces, logits, atol=1e-5, rtol=1e-5)


def test_window_changes_only_long_rows():
    torch.manual_seed(0)
    plain = TinyLM(ModelConfig(scheme="rope", d_model=16, num_heads=2))
    windowed = TinyLM(
        ModelConfig(scheme="rope", d_model=16, num_heads=2, layers=[{"window": 4}] * 2)
    )
    windowed.load_state_dict(plain.state_dict())
    tokens = torch.randint(0, 256, (1, 10))
    a, b = plain(tokens), windowed(tokens)
    torch.testing.assert_close(a[:, :4], b[:, :4])
    assert (a[:, 4:] - b[:, 4:]).abs().max() > 1e-4


def test_uniform_config_keeps_its_cache_key():
    # `layers` left out of to_dict when None: adding the field retrained nothing
    assert "layers" not in ModelConfig(scheme="rope").to_dict()
    assert ModelConfig(scheme="rope", layers=[{}, {}]).to_dict()["layers"] == [{}, {}]


@pytest.mark.parametrize(
    "layers,match",
    [
        ([{}], "list of num_layers = 2"),
        ([{}, {"windw": 3}], r"layers\[1\] must be a dict with keys"),
        ([{}, {"scheme": "sinusoidal"}], "adds to the embeddings"),
        ([{}, {"window": 0}], "window"),
        ([{}, {"sink": 1}], "sink"),
        ([{}, {"scheme": "nope"}], "unknown positional scheme"),
    ],
)
def test_bad_layers_are_rejected(layers, match):
    with pytest.raises((ValueError, TypeError), match=match):
        ModelConfig(scheme="rope", layers=layers)


def test_flex_refuses_sinks():
    with pytest.raises(ValueError, match="sink"):
        ModelConfig(scheme="rope", attn_impl="flex", layers=[{"sink": True}] * 2)


def _period(row):
    text = row["layer_pattern"]
    if "NoPE every 4th" in text and "full (" in text and "sliding" not in text:
        return row["extra"]["no_rope_layer_interval"]
    local, full = text.split(" : ")
    return int(local.split()[0]) + int(full.split()[0])


def test_presets_follow_the_config_classes():
    from posenc.open_models import positional_settings

    rows = {r["model"]: r for r in positional_settings()}
    models = {
        "llama4": "Llama 4",
        "gemma3": "Gemma 3",
        "smollm3": "SmolLM3",
        "command_r7b": "Command R7B",
        "gpt_oss": "gpt-oss",
    }
    assert set(models) == set(LAYER_PRESETS)
    for name, model in models.items():
        row, preset = rows[model], LAYER_PRESETS[name]
        assert preset["period"] == _period(row), name
        theta = row["rope_theta"]
        local_theta = theta["sliding_attention"] if isinstance(theta, dict) else theta
        assert preset["local"]["base"] == local_theta, name
        if preset["global"]["scheme"] == "rope":
            full_theta = theta["full_attention"] if isinstance(theta, dict) else theta
            assert preset["global"]["base"] == full_theta, name
        local_kind = {"chunk": "chunked", "window": "sliding"}
        for key, kind in local_kind.items():
            assert (key in preset["local"]) == (kind in row["layer_pattern"]), name
    llama4 = rows["Llama 4"]["extra"]
    assert LAYER_PRESETS["llama4"]["global"]["temperature"] == llama4["attn_scale"]
    assert llama4["floor_scale"] == llama4["attention_chunk_size"]  # both → window
    # NoPE global layers where the config says so
    assert "NoPE" in rows["Command R7B"]["specials"]
    assert "learned per-head attention sinks" in rows["gpt-oss"]["specials"]


def test_layer_preset_layout():
    layers = layer_preset("llama4", 8, window=16)
    assert [layer["scheme"] for layer in layers] == ["rope"] * 3 + ["none"] + [
        "rope"
    ] * 3 + ["none"]
    assert layers[3]["query_temperature"] == {"floor_scale": 16.0, "attn_scale": 0.1}
    assert layers[0]["chunk"] == 16 and "chunk" not in layers[3]
    with pytest.raises(ValueError, match="name"):
        layer_preset("llama5", 2, window=4)


def test_a_uniform_model_is_the_pattern_with_one_entry_repeated():
    torch.manual_seed(0)
    uniform = TinyLM(ModelConfig(scheme="alibi", d_model=16, num_heads=2))
    pattern = TinyLM(
        ModelConfig(scheme="alibi", d_model=16, num_heads=2, layers=[{}] * 2)
    )
    pattern.load_state_dict(uniform.state_dict())
    tokens = torch.randint(0, 256, (2, 9))
    torch.testing.assert_close(pattern(tokens), uniform(tokens), rtol=0, atol=0)


def test_describe_layer():
    from posenc.layers.model import describe_layer

    llama4 = layer_preset("llama4", 2, window=16, period=2)
    assert [describe_layer(layer) for layer in llama4] == [
        "RoPE, b = 500,000, chunk 16",
        "NoPE, full, temperature (F = 16, a = 0.1)",
    ]
    assert describe_layer({"sink": True, "window": 8}) == "RoPE, window 8, sink logits"
