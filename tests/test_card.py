"""posenc.card: the position card of a model's config, every value held equal to
transformers 5.23.0 — the frequencies and attention factor to
``modeling_rope_utils.ROPE_INIT_FUNCTIONS`` (and the models' own
``compute_default_rope_parameters`` for plain RoPE), called on the config class that
transformers builds from the same dict; the layer types to the class's own parsing;
each lint with a config that triggers it and one that does not; the CLI; GGUF."""

import copy
import importlib
import inspect
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from posenc.card import LINTS, PositionCard, position_card
from posenc.card.card import MLA_MSCALE_MODEL_TYPES
from posenc.card import class_defaults
from posenc.card.parse import TOP_LEVEL_ORIGINAL_MODEL_TYPES

transformers = pytest.importorskip("transformers")
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS  # noqa: E402

REPO = Path(__file__).resolve().parents[1]

LLAMA31 = {
    "model_type": "llama",
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "max_position_embeddings": 131072,
    "rope_theta": 500000.0,
    "rope_scaling": {
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
        "rope_type": "llama3",
    },
}
LLAMA2 = {
    "model_type": "llama",
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "max_position_embeddings": 4096,
    "rope_theta": 10000.0,
}
LINEAR = {**LLAMA2, "rope_scaling": {"type": "linear", "factor": 4.0}}
DYNAMIC = {**LLAMA2, "rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}
QWEN25_YARN = {
    "model_type": "qwen2",
    "hidden_size": 3584,
    "num_attention_heads": 28,
    "num_hidden_layers": 28,
    "max_position_embeddings": 131072,
    "rope_theta": 1000000.0,
    "sliding_window": 131072,
    "use_sliding_window": False,
    "max_window_layers": 28,
    "rope_scaling": {
        "type": "yarn",
        "factor": 4.0,
        "original_max_position_embeddings": 32768,
    },
}
DEEPSEEK_V3 = {
    "model_type": "deepseek_v3",
    "hidden_size": 7168,
    "num_attention_heads": 128,
    "num_hidden_layers": 61,
    "qk_rope_head_dim": 64,
    "qk_nope_head_dim": 128,
    "v_head_dim": 128,
    "kv_lora_rank": 512,
    "q_lora_rank": 1536,
    "max_position_embeddings": 163840,
    "rope_theta": 10000,
    "rope_scaling": {
        "beta_fast": 32,
        "beta_slow": 1,
        "factor": 40,
        "mscale": 1.0,
        "mscale_all_dim": 1.0,
        "original_max_position_embeddings": 4096,
        "type": "yarn",
    },
}
PHI4_MINI = {
    "model_type": "phi3",
    "hidden_size": 3072,
    "num_attention_heads": 24,
    "num_key_value_heads": 8,
    "num_hidden_layers": 32,
    "max_position_embeddings": 131072,
    "original_max_position_embeddings": 4096,
    "partial_rotary_factor": 0.75,
    "rope_theta": 10000.0,
    "sliding_window": 262144,
    "rope_scaling": {
        "type": "longrope",
        "short_factor": [1.0 + 0.01 * i for i in range(48)],
        "long_factor": [1.0 + 0.5 * i for i in range(48)],
    },
}
GEMMA3_TEXT = {
    "model_type": "gemma3_text",
    "hidden_size": 2560,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "head_dim": 256,
    "num_hidden_layers": 34,
    "max_position_embeddings": 131072,
    "rope_theta": 1000000.0,
    "rope_local_base_freq": 10000.0,
    "rope_scaling": {"rope_type": "linear", "factor": 8.0},
    "sliding_window": 1024,
    "sliding_window_pattern": 6,
}
GEMMA3 = {"model_type": "gemma3", "text_config": GEMMA3_TEXT}
OLMO3 = {
    "model_type": "olmo3",
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "max_position_embeddings": 65536,
    "sliding_window": 4096,
    "rope_parameters": {
        "full_attention": {
            "rope_type": "yarn",
            "factor": 8.0,
            "original_max_position_embeddings": 8192,
            "attention_factor": 1.2079441541679836,
            "beta_fast": 32,
            "beta_slow": 1,
            "rope_theta": 500000,
        },
        "sliding_attention": {"rope_type": "default", "rope_theta": 500000},
    },
}
GPT_OSS = {
    "model_type": "gpt_oss",
    "hidden_size": 2880,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "head_dim": 64,
    "num_hidden_layers": 24,
    "max_position_embeddings": 131072,
    "sliding_window": 128,
    "rope_theta": 150000,
    "rope_scaling": {
        "beta_fast": 32.0,
        "beta_slow": 1.0,
        "factor": 32.0,
        "original_max_position_embeddings": 4096,
        "rope_type": "yarn",
        "truncate": False,
    },
}
LLAMA4_SCOUT = {
    "model_type": "llama4_text",
    "hidden_size": 5120,
    "num_attention_heads": 40,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "num_hidden_layers": 48,
    "max_position_embeddings": 10485760,
    "attention_chunk_size": 8192,
    "no_rope_layer_interval": 4,
    "rope_theta": 500000.0,
    "rope_scaling": {
        "factor": 16.0,
        "high_freq_factor": 1.0,
        "low_freq_factor": 1.0,
        "original_max_position_embeddings": 8192,
        "rope_type": "llama3",
    },
}
QWEN2_VL = {
    "model_type": "qwen2_vl",
    "hidden_size": 3584,
    "num_attention_heads": 28,
    "num_hidden_layers": 28,
    "max_position_embeddings": 32768,
    "rope_theta": 1000000.0,
    "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
}

CONFIGS = {
    "llama2-default": LLAMA2,
    "llama-linear": LINEAR,
    "llama-dynamic": DYNAMIC,
    "llama3.1-llama3": LLAMA31,
    "qwen2.5-yarn": QWEN25_YARN,
    "deepseek-v3-yarn-mscale": DEEPSEEK_V3,
    "phi4-mini-longrope": PHI4_MINI,
    "gemma3-text": GEMMA3_TEXT,
    "gemma3-multimodal": GEMMA3,
    "olmo3-per-type": OLMO3,
    "gpt-oss": GPT_OSS,
    "llama4-scout": LLAMA4_SCOUT,
    "qwen2-vl": QWEN2_VL,
}


def hf_config(config: dict):
    """The config class transformers builds from the same dict (its text part)."""
    data = copy.deepcopy(config)
    cfg = transformers.AutoConfig.for_model(data.pop("model_type"), **data)
    return cfg.get_text_config()


def hf_rotary(cfg, layer_type):
    """The model's own rotary embedding module built from ``cfg``: its ``inv_freq``
    and ``attention_scaling`` (per layer type where it keeps one per type)."""
    module = importlib.import_module(type(cfg).__module__.replace("configuration", "modeling"))
    names = sorted(
        name
        for name, value in vars(module).items()
        if isinstance(value, type)
        and name.endswith("RotaryEmbedding")
        and "Vision" not in name
        and "Audio" not in name
    )
    rotary = getattr(module, names[-1])(cfg)
    prefix = f"{layer_type}_" if layer_type is not None else ""
    return getattr(rotary, f"{prefix}inv_freq"), getattr(rotary, f"{prefix}attention_scaling")


def hf_frequencies(cfg, layer_type, seq_len):
    """transformers' frequencies: the model's rotary embedding, or for the types that
    change with the length ("dynamic", "longrope") ``ROPE_INIT_FUNCTIONS`` at
    ``seq_len``."""
    params = cfg.rope_parameters
    if layer_type is not None:
        params = params[layer_type]
    rope_type = params["rope_type"]
    if rope_type not in ("dynamic", "longrope") or seq_len is None and rope_type == "dynamic":
        return hf_rotary(cfg, layer_type)
    return ROPE_INIT_FUNCTIONS[rope_type](cfg, None, seq_len=seq_len, layer_type=layer_type)


def hf_rope_layers(cfg) -> list[bool]:
    n = cfg.num_hidden_layers
    flags = getattr(cfg, "no_rope_layers", None)
    return [bool(x) for x in flags] if flags else [True] * n


def hf_layer_types(cfg) -> list[str]:
    types = getattr(cfg, "layer_types", None)
    if types is not None:
        return list(types)
    window = getattr(cfg, "sliding_window", None)
    return ["sliding_attention" if window else "full_attention"] * cfg.num_hidden_layers


def check_against_transformers(card: PositionCard, cfg) -> None:
    """Layer groups, frequencies (θ′ and θ), attention factor and score multiplier of
    ``card`` equal to transformers' for the config object ``cfg``."""
    types = hf_layer_types(cfg)
    rope = hf_rope_layers(cfg)
    if cfg.model_type == "cohere2":  # modeling_cohere2 rotates only sliding layers
        rope = [t == "sliding_attention" for t in types]
    rope = [r and t != "linear_attention" for r, t in zip(rope, types)]
    seen = {}
    for group in card.groups:
        for i in group.layers:
            seen[i] = (group.layer_type, group.rope)
    assert seen == {i: (t, r) for i, (t, r) in enumerate(zip(types, rope))}
    nested = bool(cfg.nested_rope_parameter_keys(cfg.rope_parameters))
    for group in card.groups:
        if not group.rope:
            assert group.pairs == ()
            continue
        layer_type = group.layer_type if nested else None
        params = cfg.rope_parameters[layer_type] if nested else cfg.rope_parameters
        kind = params["rope_type"]
        assert group.rope_type == kind
        assert group.rope_theta == pytest.approx(params["rope_theta"])
        length = params.get("original_max_position_embeddings")
        seq_len = None
        if kind == "dynamic":
            seq_len = math.ceil(params["factor"] * cfg.max_position_embeddings)
        elif kind == "longrope":
            seq_len = length + 1
        inv_freq, attention_factor = hf_frequencies(cfg, layer_type, seq_len)
        ours = torch.tensor([row.theta_scaled for row in group.pairs], dtype=torch.float64)
        torch.testing.assert_close(ours, inv_freq.double(), rtol=2e-6, atol=0)
        assert group.attention_factor == pytest.approx(attention_factor, rel=1e-12)
        assert group.rotary_dim == 2 * len(inv_freq)
        if kind == "longrope":
            short, _ = hf_frequencies(cfg, layer_type, None)
            ratio = torch.tensor([r.ratio_short * r.theta for r in group.pairs], dtype=torch.float64)
            torch.testing.assert_close(ratio, short.double(), rtol=2e-6, atol=0)
        multiplier = attention_factor**2
        modeling = importlib.import_module(
            type(cfg).__module__.replace("configuration", "modeling")
        )
        if hasattr(modeling, "yarn_apply_mscale"):
            multiplier *= modeling.yarn_apply_mscale(params, 1.0)
        assert group.score_multiplier == pytest.approx(multiplier, rel=1e-12)


@pytest.mark.parametrize("name", CONFIGS)
def test_card_equals_transformers(name):
    config = CONFIGS[name]
    card = position_card(config)
    check_against_transformers(card, hf_config(config))


@pytest.mark.parametrize("name", CONFIGS)
def test_card_of_the_config_object_equals_the_dicts(name):
    """A transformers config object (read through to_dict) gives the same groups and
    frequencies as the dict it was built from."""
    cfg = hf_config(CONFIGS[name])
    from_object = position_card(cfg)
    check_against_transformers(from_object, cfg)


def _family_classes():
    from posenc.open_models import FAMILIES  # noqa: F401 - the families' classes

    return [
        "LlamaConfig",
        "Llama4TextConfig",
        "Gemma3TextConfig",
        "SmolLM3Config",
        "Cohere2Config",
        "Phi3Config",
        "Qwen2VLTextConfig",
        "Qwen2_5_VLTextConfig",
        "Qwen3Config",
        "DeepseekV3Config",
        "GptOssConfig",
        "MinistralConfig",
        "Ministral3Config",
        "Olmo2Config",
        "Olmo3Config",
        "Qwen3NextConfig",
        "Gemma2Config",
    ]


@pytest.mark.parametrize("class_name", _family_classes())
def test_card_of_open_models_class_defaults(class_name):
    """The config classes posenc.open_models reads (their defaults): the card of the
    default instance equals transformers'."""
    cfg = getattr(transformers, class_name)()
    check_against_transformers(position_card(cfg), cfg)
    check_against_transformers(position_card(cfg.to_dict()), cfg)


def test_deepseek_score_multiplier_is_the_mla_factor():
    """DeepSeek-V3: attention_factor m(40, 1)/m(40, 1) = 1 on cos/sin, and the softmax
    scale × m(40, 1)² = (0.1·ln 40 + 1)² on every score."""
    group = position_card(DEEPSEEK_V3).group("full")
    assert group.attention_factor == pytest.approx(1.0)
    assert group.score_multiplier == pytest.approx((0.1 * math.log(40) + 1) ** 2)
    assert group.head_dim == group.rotary_dim == 64


def test_llama4_groups_and_temperature_note():
    card = position_card(LLAMA4_SCOUT)
    chunked, nope = card.group("chunked"), card.group("full (NoPE)")
    assert chunked.chunk == 8192 and len(chunked.layers) == 36
    assert nope.layers == tuple(range(3, 48, 4)) and not nope.rope
    assert "no single number" in nope.score_note and "8192" in nope.score_note


def test_gemma3_per_type_and_window():
    card = position_card(GEMMA3)
    full, sliding = card.group("full"), card.group("sliding")
    assert (full.rope_type, full.rope_theta) == ("linear", 1e6)
    assert (sliding.rope_type, sliding.rope_theta) == ("default", 1e4)
    assert sliding.window == 1024 and full.window is None
    assert {p.region for p in full.pairs} == {"interpolated"}
    assert {p.region for p in sliding.pairs} == {"kept"}


def test_qwen2_vl_mrope_section_and_gpt_oss_sinks():
    group = position_card(QWEN2_VL).group("full")
    assert group.mrope_section == (16, 24, 24)
    assert sum(group.mrope_section) == group.rotary_dim // 2
    assert position_card(GPT_OSS).sinks and position_card(LLAMA2).sinks is None


def test_regions_and_turns():
    """llama3: kept where λ < L/high, interpolated (θ′/θ = 1/8) where λ > L/low."""
    card = position_card(LLAMA31)
    for row in card.group("full").pairs:
        wavelength = 2 * math.pi / row.theta
        if wavelength < 8192 / 4:
            assert row.region == "kept"
        elif wavelength > 8192:
            assert row.region == "interpolated" and row.ratio == pytest.approx(1 / 8)
        else:
            assert row.region == "blended"
        assert row.turns_in_original == pytest.approx(8192 / row.wavelength)


def test_the_stored_class_defaults_are_transformers():
    """class_defaults.json is what the pinned transformers' config classes fill in:
    regenerated here, it must come back unchanged (python -m
    posenc.card.class_defaults rewrites it after a transformers upgrade)."""
    stored = json.loads(class_defaults.PATH.read_text())
    assert stored["transformers"] == transformers.__version__
    assert class_defaults.generate() == stored


@pytest.mark.parametrize("config", [
    {"model_type": "glm", "hidden_size": 4096, "num_attention_heads": 32,
     "num_hidden_layers": 40, "rope_theta": 5e6},
    {"model_type": "qwen3_next", "hidden_size": 2048, "num_attention_heads": 16,
     "head_dim": 256, "num_hidden_layers": 48, "rope_theta": 1e7},
    {"model_type": "gpt_neox", "hidden_size": 2048, "num_attention_heads": 16,
     "num_hidden_layers": 16, "rotary_pct": 0.25, "rotary_emb_base": 20000},
    {"model_type": "smollm3", "hidden_size": 2048, "num_attention_heads": 16,
     "num_hidden_layers": 36},
    {"model_type": "qwen2_vl", "hidden_size": 3584, "num_attention_heads": 28,
     "num_hidden_layers": 28},
])
def test_a_silent_config_gets_its_classs_positions(config):
    """Where a config leaves out partial_rotary_factor (or writes GPT-NeoX's
    rotary_pct) or rope_theta, the card uses what the config class fills in, as
    transformers does: GLM rotates half of each head, Qwen3-Next a quarter."""
    card = position_card(config)
    assert "unknown-model-type" not in {w.id for w in card.warnings}
    check_against_transformers(
        card, transformers.AutoConfig.for_model(**copy.deepcopy(config)).get_text_config())


def test_tables_name_the_transformers_lists():
    """The card's per-model tables agree with transformers 5.23's sources."""
    root = Path(transformers.__file__).parent / "models"
    with_mscale = {
        p.parent.name
        for p in root.glob("*/modeling_*.py")
        if "def yarn_apply_mscale" in p.read_text()
    }
    assert with_mscale <= set(MLA_MSCALE_MODEL_TYPES)
    for model_type in TOP_LEVEL_ORIGINAL_MODEL_TYPES:
        cls = type(transformers.AutoConfig.for_model(model_type))
        assert "original_max_position_embeddings" in cls.__annotations__
    assert "if self.sliding_window is not None:" in (root / "cohere2" / "modeling_cohere2.py").read_text()


# ----------------------------------------------------------------------- lints


def ids(config) -> set[str]:
    return {lint.id for lint in position_card(config).warnings}


def _with(config, **changes):
    out = copy.deepcopy(config)
    out.update(changes)
    return out


LINT_CASES = {
    "factor-ratio": (
        _with(QWEN25_YARN, max_position_embeddings=65536),  # 65536/32768 = 2 ≠ 4
        QWEN25_YARN,
    ),
    "missing-original": (
        _with(GPT_OSS, rope_scaling={"rope_type": "yarn", "factor": 32.0}),
        GPT_OSS,
    ),
    "v4-keys": (
        _with(LLAMA2, rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
        _with({k: v for k, v in LLAMA2.items() if k != "rope_theta"},
              rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
    ),
    "v4-v5-disagree": (
        _with({k: v for k, v in LLAMA2.items() if k != "rope_theta"}, rope_theta=5e5,
              rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
        _with(LLAMA2, rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
    ),
    "ignored-keys": (
        _with(LINEAR, rope_scaling={"type": "linear", "factor": 4.0,
                                    "original_max_position_embeddings": 4096}),
        LINEAR,
    ),
    "static-scaling": (QWEN25_YARN, DYNAMIC),
    "partial-rotary": (PHI4_MINI, _with(PHI4_MINI, partial_rotary_factor=1.0,
        rope_scaling={**PHI4_MINI["rope_scaling"],
                      "short_factor": [1.0] * 64, "long_factor": [2.0] * 64})),
    "per-layer-type": (OLMO3, GPT_OSS),
    "scaling-on-sliding": (
        _with({k: v for k, v in GEMMA3_TEXT.items() if k != "rope_scaling"},
              rope_parameters={"rope_type": "linear", "factor": 8.0,
                               "rope_theta": 1e6}),
        GEMMA3_TEXT,
    ),
    "longrope-switch": (PHI4_MINI, LLAMA31),
    "dynamic-cache": (DYNAMIC, LINEAR),
    "default-theta": ({k: v for k, v in LLAMA2.items() if k != "rope_theta"}, LLAMA2),
    "layer-count-unknown": (
        {k: v for k, v in LLAMA31.items() if k != "num_hidden_layers"},
        LLAMA31,
    ),
    "unknown-model-type": (_with(LLAMA31, model_type="my_llama"), LLAMA31),
}


def test_every_lint_has_a_case():
    assert set(LINT_CASES) | {"gguf-rope-freqs"} == set(LINTS)


@pytest.mark.parametrize("lint_id", LINT_CASES)
def test_lint_triggers_and_stays_quiet(lint_id):
    bad, good = LINT_CASES[lint_id]
    assert lint_id in ids(bad)
    assert lint_id not in ids(good)
    found = [w for w in position_card(bad).warnings if w.id == lint_id][0]
    assert found.chapter == LINTS[lint_id] and found.message
    assert found.severity in ("warning", "note")
    notebook = found.chapter.split(" — ")[0]
    section = found.chapter.split(" — ")[1]
    text = (REPO / notebook).read_text()
    assert json.dumps(section)[1:-1] in text, (notebook, section)


def test_factor_ratio_follows_transformers_rule():
    """transformers warns for YaRN when max/original is neither factor nor 1."""
    import logging

    bad = _with(QWEN25_YARN, max_position_embeddings=65536)
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logger = logging.getLogger("transformers.modeling_rope_utils")
    logger.addHandler(handler)
    try:
        transformers.modeling_rope_utils.logger.warning_once.cache_clear()
    except AttributeError:
        pass
    try:
        hf_config(bad)
        hf_config(QWEN25_YARN)
    finally:
        logger.removeHandler(handler)
    texts = [r.getMessage() for r in records]
    assert sum("does not match" in t for t in texts) == 1


def test_ignored_keys_match_transformers_warning():
    """The keys the card reports are the ones transformers calls unrecognized."""
    bad = LINT_CASES["ignored-keys"][0]
    lint = [w for w in position_card(bad).warnings if w.id == "ignored-keys"][0]
    assert "original_max_position_embeddings" in lint.message


def test_ignored_keys_skip_the_layers_the_config_class_fills(caplog):
    """Olmo 3 written the v4 way: one flat YaRN rope_scaling, which Olmo3Config gives
    to the full layers only; the sliding layers get default RoPE and read none of its
    keys, so transformers reports nothing, and neither does the card."""
    flat = {k: v for k, v in OLMO3.items() if k != "rope_parameters"}
    flat.update(rope_theta=500000.0, layer_types=(["sliding_attention"] * 3
                + ["full_attention"]) * 8,
                rope_scaling=dict(OLMO3["rope_parameters"]["full_attention"]))
    flat["rope_scaling"].pop("rope_theta")
    card = position_card(flat)
    assert {g.rope_type for g in card.groups} == {"default", "yarn"}
    assert "ignored-keys" not in ids(flat)
    with caplog.at_level("INFO"):
        transformers.AutoConfig.for_model(**copy.deepcopy(flat))
    assert "Unrecognized keys" not in caplog.text
    # the same keys on a layer whose rope_type does not use them are still reported
    assert "ignored-keys" in ids(_with(flat, rope_scaling={
        **flat["rope_scaling"], "rope_type": "linear"}))


@pytest.mark.parametrize("kind", ["qwen2_vl", "qwen2_5_vl"])
def test_mrope_is_default_rope_for_both_qwen_vl_generations(kind):
    """Qwen2-VL's and Qwen2.5-VL's configs write M-RoPE as rope_type "mrope", which
    their config classes read as default RoPE with an mrope_section."""
    config = {"model_type": kind, "hidden_size": 3584, "num_attention_heads": 28,
              "num_hidden_layers": 28, "num_key_value_heads": 4,
              "max_position_embeddings": 32768, "rope_theta": 1000000.0,
              "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]}}
    card = position_card(config)
    assert [g.rope_type for g in card.groups] == ["default"]
    cfg = transformers.AutoConfig.for_model(**copy.deepcopy(config)).get_text_config()
    check_against_transformers(card, cfg)


def test_gguf_rope_freqs_lint():
    meta = {
        "general.architecture": "llama",
        "llama.context_length": 131072,
        "llama.embedding_length": 4096,
        "llama.attention.head_count": 32,
        "llama.block_count": 32,
        "llama.rope.freq_base": 500000.0,
    }
    assert "gguf-rope-freqs" in ids({**meta, "_tensors": ["rope_freqs.weight"]})
    assert "gguf-rope-freqs" not in ids(meta)


# ------------------------------------------------------------ inputs and outputs


def test_gguf_metadata_equals_config_json():
    meta = {
        "general.architecture": "llama",
        "llama.context_length": 8192,
        "llama.embedding_length": 576,
        "llama.attention.head_count": 9,
        "llama.block_count": 30,
        "llama.rope.freq_base": 100000.0,
        "llama.rope.dimension_count": 64,
    }
    config = {
        "model_type": "llama",
        "hidden_size": 576,
        "num_attention_heads": 9,
        "num_hidden_layers": 30,
        "max_position_embeddings": 8192,
        "rope_theta": 100000.0,
    }
    a, b = position_card(meta).to_dict(), position_card(config).to_dict()
    a.pop("source"), b.pop("source")
    assert a == b
    yarn = {**meta, "llama.rope.scaling.type": "yarn", "llama.rope.scaling.factor": 4.0,
            "llama.rope.scaling.original_context_length": 2048}
    scaled = _with(config, rope_scaling={"rope_type": "yarn", "factor": 4.0,
                                         "original_max_position_embeddings": 2048})
    a, b = position_card(yarn).to_dict(), position_card(scaled).to_dict()
    a.pop("source"), b.pop("source")
    assert a == b


def test_gguf_file_is_read(tmp_path):
    gguf = pytest.importorskip("gguf")
    path = tmp_path / "tiny.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_context_length(2048)
    writer.add_embedding_length(64)
    writer.add_head_count(4)
    writer.add_block_count(2)
    writer.add_rope_freq_base(10000.0)
    writer.add_tensor("rope_freqs.weight", torch.ones(8).numpy())
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    card = position_card(path)
    assert card.max_position_embeddings == 2048 and card.group("full").head_dim == 16
    assert "gguf-rope-freqs" in {w.id for w in card.warnings}


def test_refusals_name_what_to_pass(tmp_path):
    with pytest.raises(TypeError, match="config.json"):
        position_card(42)
    with pytest.raises(FileNotFoundError):
        position_card(tmp_path / "missing.json")
    with pytest.raises(ValueError, match="head_dim"):
        position_card({"model_type": "llama", "num_hidden_layers": 2})
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    with pytest.raises(ValueError, match="not a config object"):
        position_card(bad)


def test_a_config_without_a_layer_count():
    """No num_hidden_layers (a snippet of a config): one kind of layer gives a card
    with that one group, no layer indices, the same frequencies as the full config
    and a lint that says so; layers of several kinds are refused, since which layer
    is which depends on the count; layer_types alone give the count."""
    snippet = {k: v for k, v in LLAMA31.items() if k != "num_hidden_layers"}
    card, full = position_card(snippet), position_card(LLAMA31)
    assert card.num_hidden_layers is None and full.num_hidden_layers == 32
    assert [g.name for g in card.groups] == ["full"] and card.group("full").layers == ()
    assert full.group("full").layers == tuple(range(32))
    assert card.group("full").pairs == full.group("full").pairs
    lint = [w for w in card.warnings if w.id == "layer-count-unknown"][0]
    assert "num_hidden_layers" in lint.message and lint.severity == "warning"
    for text in (card.to_text(), card.to_markdown(), card.to_html()):
        assert "how many unknown" in text and "None" not in text
    assert json.loads(card.to_json())["num_hidden_layers"] is None
    several = {k: v for k, v in GEMMA3_TEXT.items() if k != "num_hidden_layers"}
    with pytest.raises(ValueError, match="no num_hidden_layers.*sliding_attention, "
                       "full_attention.*add num_hidden_layers"):
        position_card(several)
    types = ["sliding_attention"] * 5 + ["full_attention"]
    typed = position_card({**several, "layer_types": types})
    assert typed.num_hidden_layers == 6 and typed.group("full").layers == (5,)
    assert typed.group("sliding").layers == (0, 1, 2, 3, 4)


def test_the_card_class_is_documented():
    doc = inspect.getdoc(PositionCard)
    for name in ("model_type", "source", "num_hidden_layers", "groups", "sinks",
                 "warnings", "original_max_position_embeddings", "tokens", "Source"):
        assert name in doc, name


def test_renderers():
    card = position_card(GEMMA3)
    md, page = card.to_markdown(), card.to_html()
    assert "### full" in md and "static-scaling" in md
    assert page.count("<details>") == 2 and card._repr_html_() == page
    data = json.loads(card.to_json())
    assert data["groups"][0]["pairs"][0]["region"] in ("kept", "interpolated")
    text = card.to_text()
    assert max(len(line) for line in text.splitlines()) <= 100
    wide_rows = [line for line in page.split("<table")[1].splitlines() if "<td>" in line]
    assert all(line.count("<td>") <= 2 for line in wide_rows)


def test_cli(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(LLAMA31))
    run = subprocess.run(
        [sys.executable, "-m", "posenc", "card", str(path)],
        capture_output=True, text=True, check=True,
    )
    # llama3 is Llama 3.1's own rule, at every length: no static-scaling finding
    assert "llama3" in run.stdout and "static-scaling" not in run.stdout
    assert max(len(line) for line in run.stdout.splitlines()) <= 100
    run = subprocess.run(
        [sys.executable, "-m", "posenc", "card", str(path), "--json"],
        capture_output=True, text=True, check=True,
    )
    data = json.loads(run.stdout)
    assert data == json.loads(position_card(path).to_json())
    assert data["original_max_position_embeddings"] == 8192
    missing = subprocess.run(
        [sys.executable, "-m", "posenc", "card", str(tmp_path / "nope.json")],
        capture_output=True, text=True,
    )
    assert missing.returncode == 2 and "no such config file" in missing.stderr


def test_every_released_config_makes_a_card():
    """Every shipped released config.json (posenc.open_models.released_configs) makes
    a card whose layers, groups and frequencies equal transformers'."""
    released = pytest.importorskip("posenc.open_models.released_configs")
    records = released.released_configs()
    assert len(records) >= 25
    for slug, record in records.items():
        config = copy.deepcopy(dict(record.config))
        if record.parse_as:
            config["model_type"] = record.parse_as
            config.get("text_config", config)["model_type"] = record.parse_as
        card = position_card(config)
        text = copy.deepcopy(dict(record.text_config))
        kind = record.parse_as or text.pop("model_type")
        text.pop("model_type", None)
        cfg = transformers.AutoConfig.for_model(kind, **text).get_text_config()
        assert card.num_hidden_layers == cfg.num_hidden_layers, slug
        assert sum(len(g.layers) for g in card.groups) == cfg.num_hidden_layers, slug
        check_against_transformers(card, cfg)


def test_cli_strict_exits_1_on_findings(tmp_path):
    from posenc.__main__ import main

    for config, status in ((QWEN25_YARN, 1), (LLAMA31, 0)):
        path = tmp_path / "config.json"
        path.write_text(json.dumps(config))
        assert main(["card", str(path), "--strict"]) == status, config["model_type"]
        assert main(["card", str(path)]) == 0


@pytest.mark.parametrize("bare", [
    {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768,
     "rope_theta": 1e6, "head_dim": 128},
    {"type": "linear", "factor": 2.0, "rope_theta": 10000.0, "head_dim": 64},
])
def test_rope_parameters_alone_are_refused_not_read_as_plain_rope(bare):
    """Before: the card read a bare YaRN dict as plain RoPE, attention factor 1."""
    with pytest.raises(ValueError, match=r"RoPE parameters alone .*'rope_parameters'"):
        position_card(bare)
    wrapped = {"rope_parameters": {k: v for k, v in bare.items() if k != "head_dim"},
               "head_dim": bare["head_dim"], "num_hidden_layers": 2,
               "max_position_embeddings": 131072}
    card = position_card(wrapped)
    assert card.groups[0].rope_type == bare.get("rope_type", bare.get("type"))
