"""One row function per model family, :data:`FAMILIES`, and
:func:`positional_settings`, which runs them. A family's function instantiates its
transformers config class (:func:`~posenc.open_models.config.load_config`), starts
from the generic row (:func:`~posenc.open_models.config.config_row`) and adds what is
special to the family — per-layer-type θ, chunked attention, NoPE layers, M-RoPE,
MLA's decoupled RoPE, attention sinks — in ``specials``, ``notes`` and ``extra``,
reading the modeling file's text where a behaviour lives in the model, not the config.
The Llama 3.1 row is the exception: it is read from comments in transformers'
``_compute_llama3_parameters``. To add a family, write its function and add it to
:data:`FAMILIES` (and pin its values in tests/test_open_models.py).

Source: transformers 5.23.0, ``models/<name>/configuration_<name>.py`` and the
``modeling_<name>.py`` files cited in the rows.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

from .config import (
    comment_values,
    config_row,
    import_transformers,
    load_config,
    modeling_text,
)

# ------------------------------------------------------------- one per family


def _llama2() -> dict:
    cls, cfg = load_config("LlamaConfig")
    return config_row(
        "Llama (LlamaConfig defaults)",
        cls,
        cfg,
        notes="Llama 2 7B defaults; a Llama 3.x checkpoint's config.json sets its "
        "own θ and llama3 scaling",
    )


def _llama31() -> dict:
    rope_utils = import_transformers().modeling_rope_utils
    values = comment_values(rope_utils._compute_llama3_parameters)
    return {
        "model": "Llama 3.1 (llama3 RoPE)",
        "config_class": "LlamaConfig",
        "source": "rope function comments",
        "docstring_checkpoint": None,
        "rope_theta": None,
        "rope_type": "llama3",
        "rope_factor": float(values["factor"]),
        "original_max_position_embeddings": values["original_max_position_embeddings"],
        "partial_rotary_factor": None,
        "head_dim": None,
        "max_position_embeddings": None,
        "num_hidden_layers": None,
        "layer_pattern": None,
        "window": None,
        "mrope_section": None,
        "specials": f"low_freq_factor {values['low_freq_factor']}, high_freq_factor "
        f"{values['high_freq_factor']}",
        "notes": "from comments in modeling_rope_utils._compute_llama3_parameters "
        "('llama 3.1'); θ and sizes are not in the config class",
        "extra": {k: values[k] for k in ("low_freq_factor", "high_freq_factor")},
    }


def _llama4() -> dict:
    cls, cfg = load_config("Llama4TextConfig")
    formula = f"1 + {cfg.attn_scale}·log1p(floor((pos + 1) / {cfg.floor_scale}))"
    return config_row(
        "Llama 4",
        cls,
        cfg,
        window=cfg.attention_chunk_size,
        specials=f"chunked attention (chunk {cfg.attention_chunk_size}) on RoPE "
        "layers; "
        f"NoPE layers scale queries by {formula} "
        f"(attn_temperature_tuning={cfg.attn_temperature_tuning}); "
        f"use_qk_norm={cfg.use_qk_norm} (L2 norm on RoPE layers)",
        notes="rope_type 'default' in the class; a released checkpoint's scaling is "
        "not in the config class",
        extra={
            "no_rope_layer_interval": cfg.no_rope_layer_interval,
            "attention_chunk_size": cfg.attention_chunk_size,
            "attn_temperature_tuning": cfg.attn_temperature_tuning,
            "floor_scale": cfg.floor_scale,
            "attn_scale": cfg.attn_scale,
            "use_qk_norm": cfg.use_qk_norm,
        },
    )


def _gemma3() -> dict:
    cls, cfg = load_config("Gemma3TextConfig")
    return config_row(
        "Gemma 3",
        cls,
        cfg,
        specials="θ per layer type (rope_parameters keyed by layer type; the old "
        "rope_local_base_freq sets the sliding one)",
        notes="pattern from sliding_window_pattern 6 (5:1); released checkpoints' "
        "global-layer scaling is not in the config class",
        extra={"query_pre_attn_scalar": cfg.query_pre_attn_scalar},
    )


def _gemma4() -> dict:
    cls, cfg = load_config("Gemma4TextConfig")
    head_dims: dict[str, int] = {}
    for i, layer_type in enumerate(cfg.layer_types):
        head_dims.setdefault(layer_type, cfg.per_layer_config[i].head_dim)
    return config_row(
        "Gemma 4",
        cls,
        cfg,
        head_dim=head_dims,
        specials="full layers: 'proportional' RoPE, rotary fraction "
        f"{cfg.rope_parameters['full_attention'].get('partial_rotary_factor')} with "
        "exponents over the whole head_dim and zero frequencies on the rest "
        "(modeling_rope_utils); head_dim set per layer (global_head_dim); the class "
        "forces the last layer to full",
    )


def _smollm3() -> dict:
    cls, cfg = load_config("SmolLM3Config")
    return config_row(
        "SmolLM3",
        cls,
        cfg,
        specials=f"use_sliding_window={cfg.use_sliding_window}; NoPE layers have no "
        "extra attention temperature",
        extra={"no_rope_layer_interval": cfg.no_rope_layer_interval},
    )


def _cohere2() -> dict:
    cls, cfg = load_config("Cohere2Config")
    text = modeling_text("cohere2")
    rope_only_sliding = bool(
        re.search(
            r"if self\.sliding_window is not None:\s*\n\s*"
            r"query_states, key_states = apply_rotary_pos_emb",
            text,
        )
    )
    specials = (
        "RoPE only on sliding layers, so the full layers are NoPE (modeling_cohere2)"
        if rope_only_sliding
        else "RoPE on every layer (modeling_cohere2)"
    )
    return config_row(
        "Command R7B",
        cls,
        cfg,
        specials=specials,
        notes="docstring names c4ai-command-r-v01, not an R7B checkpoint",
    )


def _phi3() -> dict:
    cls, cfg = load_config("Phi3Config")
    return config_row(
        "Phi-3 / Phi-4-mini",
        cls,
        cfg,
        specials="'longrope' (short_factor / long_factor lists) is the scaling the "
        "class validates; the defaults use 'default'",
        notes="Phi-3-mini-4k defaults; Phi-4-mini's partial_rotary_factor and longrope "
        "factors are not in the config class",
    )


def _qwen_vl(model: str, class_name: str, module: str) -> dict:
    cls, cfg = load_config(class_name)
    found = re.search(r'get\("mrope_section", (\[[\d, ]+\])\)', modeling_text(module))
    fallback = found.group(1) if found else "none"
    return config_row(
        model,
        cls,
        cfg,
        specials=f"M-RoPE: mrope_section not in the config class; modeling_{module} "
        f"falls back to {fallback} (t, h, w frequency pairs)",
        notes="docstring names Qwen2-VL-7B-Instruct, but the class's "
        f"{cfg.num_hidden_layers} layers × width {cfg.hidden_size} are a far larger "
        "model",
        extra={"mrope_fallback": fallback},
    )


def _qwen3() -> dict:
    cls, cfg = load_config("Qwen3Config")
    return config_row(
        "Qwen3",
        cls,
        cfg,
        specials=f"use_sliding_window={cfg.use_sliding_window}, max_window_layers="
        f"{cfg.max_window_layers} (window off by default)",
        notes="θ 10 000 is the generic default (the class sets no default_theta)",
    )


def _deepseek_v3() -> dict:
    cls, cfg = load_config("DeepseekV3Config")
    return config_row(
        "DeepSeek-V3",
        cls,
        cfg,
        specials=f"MLA decoupled RoPE: qk_rope_head_dim {cfg.qk_rope_head_dim} + "
        f"qk_nope_head_dim {cfg.qk_nope_head_dim} (qk_head_dim {cfg.qk_head_dim}); "
        f"config.head_dim is the rope part; rope_interleave={cfg.rope_interleave}",
        notes="docstring names bzantium/tiny-deepseek-v3 but the defaults are "
        "full-size; YaRN factor and mscale are not in the config class",
        extra={
            "qk_rope_head_dim": cfg.qk_rope_head_dim,
            "qk_nope_head_dim": cfg.qk_nope_head_dim,
            "rope_interleave": cfg.rope_interleave,
        },
    )


def _gpt_oss() -> dict:
    cls, cfg = load_config("GptOssConfig")
    rope = cfg.rope_parameters
    return config_row(
        "gpt-oss",
        cls,
        cfg,
        specials=f"YaRN beta_fast {rope['beta_fast']}, beta_slow {rope['beta_slow']}, "
        f"truncate={rope['truncate']}; learned per-head attention sinks "
        "(modeling_gpt_oss, not in the config)",
        extra={k: rope[k] for k in ("beta_fast", "beta_slow", "truncate")},
    )


def _ministral() -> dict:
    cls, cfg = load_config("MinistralConfig")
    notes = "every layer sliding in the defaults"
    return config_row("Ministral 8B", cls, cfg, notes=notes)


def _ministral3() -> dict:
    cls, cfg = load_config("Ministral3Config")
    rope = cfg.rope_parameters
    beta, floor = rope["llama_4_scaling_beta"], rope["original_max_position_embeddings"]
    return config_row(
        "Ministral 3",
        cls,
        cfg,
        specials=f"YaRN mscale {rope['mscale']}, "
        f"mscale_all_dim {rope['mscale_all_dim']}; "
        f"every layer scales queries by 1 + {beta}·log(1 + floor(pos / {floor})) "
        "(llama_4_scaling_beta, modeling_ministral3)",
        extra={
            k: rope[k]
            for k in (
                "beta_fast",
                "beta_slow",
                "mscale",
                "mscale_all_dim",
                "llama_4_scaling_beta",
            )
        },
    )


def _olmo2() -> dict:
    cls, cfg = load_config("Olmo2Config")
    return config_row("OLMo 2", cls, cfg)


def _olmo3() -> dict:
    cls, cfg = load_config("Olmo3Config")
    return config_row("Olmo 3", cls, cfg, specials="same θ on sliding and full layers")


FAMILIES: dict[str, Callable[[], dict]] = {
    "Llama (LlamaConfig defaults)": _llama2,
    "Llama 3.1 (llama3 RoPE)": _llama31,
    "Llama 4": _llama4,
    "Gemma 3": _gemma3,
    "Gemma 4": _gemma4,
    "SmolLM3": _smollm3,
    "Command R7B": _cohere2,
    "Phi-3 / Phi-4-mini": _phi3,
    "Qwen2-VL": lambda: _qwen_vl("Qwen2-VL", "Qwen2VLTextConfig", "qwen2_vl"),
    "Qwen2.5-VL": lambda: _qwen_vl("Qwen2.5-VL", "Qwen2_5_VLTextConfig", "qwen2_5_vl"),
    "Qwen3": _qwen3,
    "DeepSeek-V3": _deepseek_v3,
    "gpt-oss": _gpt_oss,
    "Ministral 8B": _ministral,
    "Ministral 3": _ministral3,
    "OLMo 2": _olmo2,
    "Olmo 3": _olmo3,
}
"""Model name → function that reads its row."""


def positional_settings(models: Iterable[str] | None = None) -> list[dict]:
    """One row of positional settings per model family, read from transformers.

    Each row is a dict with the keys of :data:`FIELDS`: ``model``, ``config_class``,
    ``source`` (``"config defaults"``: read from ``Cls()``; ``"rope function
    comments"``: the Llama 3.1 row), ``docstring_checkpoint`` (the checkpoint the
    class docstring says its defaults are similar to), ``rope_theta``, ``rope_type``,
    ``rope_factor``, ``original_max_position_embeddings``, ``partial_rotary_factor``
    (each a ``{layer_type: value}`` dict where the class keys ``rope_parameters`` by
    layer type), ``head_dim`` (int, or a dict per layer type), ``max_position_
    embeddings``, ``num_hidden_layers``, ``layer_pattern`` (see
    :func:`layer_pattern`), ``window`` (sliding window, or Llama 4's attention chunk),
    ``mrope_section``, ``specials`` and ``notes`` (text), ``extra`` (the family's
    other positional attributes, by config attribute name). Missing values are None.

    Args:
        models: names from :data:`FAMILIES` to read; all of them when None.

    Returns:
        list of row dicts, in :data:`FAMILIES` order (or the order given).

    Raises:
        ValueError: if a name is not in :data:`FAMILIES`.
        TransformersUnavailableError: if transformers is not installed.

    Source: transformers 5.23.0 config classes (see the module docstring).
    """
    names = list(FAMILIES) if models is None else list(models)
    unknown = [name for name in names if name not in FAMILIES]
    if unknown:
        raise ValueError(f"unknown model(s) {unknown}; choose from {list(FAMILIES)}")
    return [FAMILIES[name]() for name in names]
