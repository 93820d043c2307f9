"""Positional settings of open models from 2024–2026, read from transformers' configs.

:func:`positional_settings` builds one row per model family by instantiating the
family's config class from Hugging Face transformers (``Cls()``) and reading its
attributes at call time: RoPE base θ (``rope_theta``, per layer type where the class
keeps one per type), RoPE type, scale factor and original context, rotary fraction,
head dimension, context length, the layer pattern (computed from the instantiated
``layer_types`` and ``no_rope_layers`` lists), the attention window or chunk, and
the family's other positional specials. :func:`settings_table` renders the rows as a
Markdown table for the book.

**These are the class defaults of transformers 5.23.0, not necessarily a released
checkpoint's values.** A config class's defaults are one size of the family, and
sometimes not even a current one. The class docstring says which checkpoint they are
"similar to" (the row's ``docstring_checkpoint``):

* ``LlamaConfig`` — meta-llama/Llama-2-7b-hf (θ 10 000, 2 048 positions): the class
  that runs Llama 3.1 holds Llama 2's defaults. The ``llama3`` RoPE parameters
  appear only as comments in transformers' ``_compute_llama3_parameters`` ("llama
  3.1"); the "Llama 3.1" row is read from those comments and has no θ.
* ``Llama4TextConfig`` — Llama-4-Scout-17B-16E; ``Gemma3TextConfig`` —
  gemma-3-4b-it (its example calls the defaults "gemma3_text-7b style");
  ``Gemma4TextConfig`` — gemma-4-e2b-it; ``SmolLM3Config`` — SmolLM3-3B;
  ``Phi3Config`` — Phi-3-mini-4k-instruct (no Phi-4-mini values in the class);
  ``Qwen2VLTextConfig`` and ``Qwen2_5_VLTextConfig`` — both Qwen2-VL-7B-Instruct;
  ``Qwen3Config`` — Qwen3-8B; ``GptOssConfig`` — gpt-oss-20b; ``MinistralConfig`` —
  Ministral-8B-Instruct-2410; ``Ministral3Config`` — Ministral-3-8B-Base-2512;
  ``Olmo2Config`` — OLMo-2-1124-7B; ``Olmo3Config`` — Olmo-3-7B-Instruct.
* ``Cohere2Config`` (Command R7B's class) names c4ai-command-r-v01, the checkpoint
  ``CohereConfig`` names too; ``DeepseekV3Config`` names bzantium/tiny-deepseek-v3,
  yet its defaults are full-size (61 layers, width 7168) with plain RoPE, no YaRN.

A value that is neither in the class nor in its docstring is ``None`` (the table
shows "—"): for instance the YaRN/llama3 scaling of released Llama 4, Gemma 3,
DeepSeek-V3 or Phi-4-mini checkpoints. For a real checkpoint, read its own config::

    cfg = transformers.AutoConfig.from_pretrained("Qwen/Qwen3-8B")
    cfg.rope_parameters, cfg.layer_types, cfg.sliding_window

(``rope_parameters`` is keyed by layer type for Gemma 3/4 and Olmo 3.)

Source: transformers 5.23.0, ``models/<name>/configuration_<name>.py`` for each class,
``modeling_rope_utils.py`` (llama3 and proportional RoPE), and the modeling files
cited in the rows' ``specials`` where a behaviour lives in the model, not the config.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from ._versions import BOOK_PINS

TRANSFORMERS_VERSION = BOOK_PINS["transformers"]
"""The transformers release whose class defaults the docstrings and tests describe."""

FIELDS = (
    "model",
    "config_class",
    "source",
    "docstring_checkpoint",
    "rope_theta",
    "rope_type",
    "rope_factor",
    "original_max_position_embeddings",
    "partial_rotary_factor",
    "head_dim",
    "max_position_embeddings",
    "num_hidden_layers",
    "layer_pattern",
    "window",
    "mrope_section",
    "specials",
    "notes",
    "extra",
)
"""Keys of every row of :func:`positional_settings`, in table order."""

_SHORT = {
    "sliding_attention": "sliding",
    "full_attention": "full",
    "chunked_attention": "chunked",
}


def _short(layer_type: str) -> str:
    return _SHORT.get(layer_type, layer_type)


class TransformersUnavailableError(ImportError):
    """transformers is not installed (``pip install posenc[pretrained]``)."""


def _transformers():
    try:
        import transformers
    except ImportError as err:  # pragma: no cover - the test env has it
        raise TransformersUnavailableError(
            "posenc.open_models reads transformers' config classes; install "
            f"transformers=={TRANSFORMERS_VERSION} (pip install posenc[pretrained])"
        ) from err
    return transformers


def _config(class_name: str):
    """The config class ``class_name`` and its default instance."""
    cls = getattr(_transformers(), class_name)
    return cls, cls()


def _docstring_checkpoint(cls) -> str | None:
    """The checkpoint a config class's docstring says its defaults are similar to."""
    found = re.search(r"similar configuration to that of the \[([^\]]+)\]", cls.__doc__)
    return found.group(1) if found else None


# ----------------------------------------------------------------- layer patterns


def _ordinal(n: int) -> str:
    teens = 10 <= n % 100 <= 20
    suffix = "th" if teens else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _period(seq: Sequence) -> int:
    """Smallest p with seq[i] == seq[i % p] for every i (a truncated last period is
    allowed)."""
    for p in range(1, len(seq) + 1):
        if all(seq[i] == seq[i % p] for i in range(len(seq))):
            return p
    return len(seq)


def _runs(seq: Sequence[str]) -> str:
    """``["a", "a", "b"]`` → ``"2 a : 1 b"`` (run lengths, in order)."""
    parts: list[list] = []
    for item in seq:
        if parts and parts[-1][1] == item:
            parts[-1][0] += 1
        else:
            parts.append([1, item])
    return " : ".join(f"{n} {_short(t)}" for n, t in parts)


def layer_pattern(
    layer_types: Sequence[str] | None, no_rope_layers: Sequence[int] | None = None
) -> str | None:
    """A short description of a config's per-layer attention types and NoPE layers.

    Args:
        layer_types: the config's ``layer_types`` list (``"sliding_attention"``,
            ``"full_attention"``, ``"chunked_attention"``), or None.
        no_rope_layers: the config's ``no_rope_layers`` list, 1 where a layer uses
            RoPE and 0 where it is NoPE (transformers' convention), or None.

    Returns:
        For example ``"5 sliding : 1 full (26 layers; the last 2 are sliding)"``,
        ``"all full (36 layers); NoPE every 4th layer (9 of 36)"``; None when both
        arguments are None.

    Raises:
        ValueError: if both lists are given with different lengths, or
            ``no_rope_layers`` holds a value other than 0 or 1.
    """
    if layer_types is None and no_rope_layers is None:
        return None
    parts = []
    if layer_types is not None:
        n = len(layer_types)
        p = _period(layer_types)
        if p == 1:
            parts.append(f"all {_short(layer_types[0])} ({n} layers)")
        else:
            text = f"{_runs(layer_types[:p])} ({n} layers"
            if n % p:
                tail = layer_types[n - n % p :]
                kind = _short(tail[0]) if len(set(tail)) == 1 else _runs(tail)
                text += f"; the last {n % p} are {kind}"
            parts.append(text + ")")
    if no_rope_layers is not None:
        if set(no_rope_layers) - {0, 1}:
            raise ValueError(
                "no_rope_layers must hold 0 (NoPE) or 1 (RoPE), got "
                f"{list(no_rope_layers)}"
            )
        if layer_types is not None and len(layer_types) != len(no_rope_layers):
            raise ValueError(
                f"layer_types has {len(layer_types)} entries but no_rope_layers has "
                f"{len(no_rope_layers)}; they must describe the same layers"
            )
        n = len(no_rope_layers)
        nope = [i + 1 for i, uses_rope in enumerate(no_rope_layers) if not uses_rope]
        k = nope[0] if nope else 0
        if not nope:
            parts.append("no NoPE layers")
        elif nope == list(range(k, n + 1, k)):
            parts.append(f"NoPE every {_ordinal(k)} layer ({len(nope)} of {n})")
        else:
            parts.append(f"NoPE layers {nope} (1-based, {len(nope)} of {n})")
        if nope and layer_types is not None:
            kinds = {layer_types[i - 1] for i in nope}
            if len(kinds) == 1 and len(set(layer_types)) > 1:
                (kind,) = kinds
                parts[-1] += f" = the {_short(kind)} layers"
    return "; ".join(parts)


# ------------------------------------------------------------------- rope fields


def _is_per_type(rope_parameters: dict) -> bool:
    values = rope_parameters.values()
    return bool(rope_parameters) and all(isinstance(v, dict) for v in values)


def _rope_field(rope_parameters: dict, key: str) -> Any:
    """``rope_parameters[key]``, or ``{layer_type: value}`` for per-type parameters."""
    if _is_per_type(rope_parameters):
        values = {t: p.get(key) for t, p in rope_parameters.items()}
        return values if any(v is not None for v in values.values()) else None
    return rope_parameters.get(key)


def _head_dim(cfg) -> int:
    """``config.head_dim``, or hidden_size // num_attention_heads where the class has
    none (what the modeling files fall back to)."""
    return getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads


def _row(model: str, cls, cfg, **fields: Any) -> dict:
    """A row from a config instance; ``fields`` override or add to what is read."""
    rope = dict(cfg.rope_parameters or {})
    partial = _rope_field(rope, "partial_rotary_factor")
    if partial is None:
        partial = getattr(cfg, "partial_rotary_factor", None)
    original = _rope_field(rope, "original_max_position_embeddings")
    if original is None:
        original = getattr(cfg, "original_max_position_embeddings", None)
    row = {
        "model": model,
        "config_class": cls.__name__,
        "source": "config defaults",
        "docstring_checkpoint": _docstring_checkpoint(cls),
        "rope_theta": _rope_field(rope, "rope_theta"),
        "rope_type": _rope_field(rope, "rope_type"),
        "rope_factor": _rope_field(rope, "factor"),
        "original_max_position_embeddings": original,
        "partial_rotary_factor": partial,
        "head_dim": fields["head_dim"] if "head_dim" in fields else _head_dim(cfg),
        "max_position_embeddings": cfg.max_position_embeddings,
        "num_hidden_layers": cfg.num_hidden_layers,
        "layer_pattern": layer_pattern(
            getattr(cfg, "layer_types", None), getattr(cfg, "no_rope_layers", None)
        )
        or f"all alike ({cfg.num_hidden_layers} layers; no layer_types)",
        "window": getattr(cfg, "sliding_window", None),
        "mrope_section": None,
        "specials": "",
        "notes": "",
        "extra": {},
    }
    row.update(fields)
    return row


def _comment_values(func: Callable) -> dict[str, int]:
    """``{key: n}`` from lines like ``x = d["key"]  # `n` in the original ...``."""
    pattern = r'\["(\w+)"\]\s*#\s*`(\d+)` in the original implementation'
    return {k: int(v) for k, v in re.findall(pattern, inspect.getsource(func))}


def _modeling_text(module: str) -> str:
    """Text of transformers' models/<module>/modeling_<module>.py (not imported)."""
    root = Path(_transformers().__file__).parent
    return (root / "models" / module / f"modeling_{module}.py").read_text()


# ------------------------------------------------------------- one per family


def _llama2() -> dict:
    cls, cfg = _config("LlamaConfig")
    return _row(
        "Llama (LlamaConfig defaults)",
        cls,
        cfg,
        notes="Llama 2 7B defaults; a Llama 3.x checkpoint's config.json sets its "
        "own θ and llama3 scaling",
    )


def _llama31() -> dict:
    rope_utils = _transformers().modeling_rope_utils
    values = _comment_values(rope_utils._compute_llama3_parameters)
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
    cls, cfg = _config("Llama4TextConfig")
    formula = f"1 + {cfg.attn_scale}·log1p(floor((pos + 1) / {cfg.floor_scale}))"
    return _row(
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
    cls, cfg = _config("Gemma3TextConfig")
    return _row(
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
    cls, cfg = _config("Gemma4TextConfig")
    head_dims: dict[str, int] = {}
    for i, layer_type in enumerate(cfg.layer_types):
        head_dims.setdefault(layer_type, cfg.per_layer_config[i].head_dim)
    return _row(
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
    cls, cfg = _config("SmolLM3Config")
    return _row(
        "SmolLM3",
        cls,
        cfg,
        specials=f"use_sliding_window={cfg.use_sliding_window}; NoPE layers have no "
        "extra attention temperature",
        extra={"no_rope_layer_interval": cfg.no_rope_layer_interval},
    )


def _cohere2() -> dict:
    cls, cfg = _config("Cohere2Config")
    text = _modeling_text("cohere2")
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
    return _row(
        "Command R7B",
        cls,
        cfg,
        specials=specials,
        notes="docstring names c4ai-command-r-v01, not an R7B checkpoint",
    )


def _phi3() -> dict:
    cls, cfg = _config("Phi3Config")
    return _row(
        "Phi-3 / Phi-4-mini",
        cls,
        cfg,
        specials="'longrope' (short_factor / long_factor lists) is the scaling the "
        "class validates; the defaults use 'default'",
        notes="Phi-3-mini-4k defaults; Phi-4-mini's partial_rotary_factor and longrope "
        "factors are not in the config class",
    )


def _qwen_vl(model: str, class_name: str, module: str) -> dict:
    cls, cfg = _config(class_name)
    found = re.search(r'get\("mrope_section", (\[[\d, ]+\])\)', _modeling_text(module))
    fallback = found.group(1) if found else "none"
    return _row(
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
    cls, cfg = _config("Qwen3Config")
    return _row(
        "Qwen3",
        cls,
        cfg,
        specials=f"use_sliding_window={cfg.use_sliding_window}, max_window_layers="
        f"{cfg.max_window_layers} (window off by default)",
        notes="θ 10 000 is the generic default (the class sets no default_theta)",
    )


def _deepseek_v3() -> dict:
    cls, cfg = _config("DeepseekV3Config")
    return _row(
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
    cls, cfg = _config("GptOssConfig")
    rope = cfg.rope_parameters
    return _row(
        "gpt-oss",
        cls,
        cfg,
        specials=f"YaRN beta_fast {rope['beta_fast']}, beta_slow {rope['beta_slow']}, "
        f"truncate={rope['truncate']}; learned per-head attention sinks "
        "(modeling_gpt_oss, not in the config)",
        extra={k: rope[k] for k in ("beta_fast", "beta_slow", "truncate")},
    )


def _ministral() -> dict:
    cls, cfg = _config("MinistralConfig")
    return _row("Ministral 8B", cls, cfg, notes="every layer sliding in the defaults")


def _ministral3() -> dict:
    cls, cfg = _config("Ministral3Config")
    rope = cfg.rope_parameters
    beta, floor = rope["llama_4_scaling_beta"], rope["original_max_position_embeddings"]
    return _row(
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
    cls, cfg = _config("Olmo2Config")
    return _row("OLMo 2", cls, cfg)


def _olmo3() -> dict:
    cls, cfg = _config("Olmo3Config")
    return _row("Olmo 3", cls, cfg, specials="same θ on sliding and full layers")


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


# ------------------------------------------------------------------------ table


def _fmt_value(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float) and value.is_integer() and abs(value) >= 1000:
        return f"{value:,.0f}"
    if isinstance(value, float) and value.is_integer():
        return f"{value:g}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _fmt(value: Any) -> str:
    """A cell: per-layer-type dicts as ``sliding 10,000 / full 1,000,000``."""
    if isinstance(value, dict):
        values = list(value.values())
        if values and all(v == values[0] for v in values):
            return _fmt_value(values[0])
        return " / ".join(f"{_short(k)} {_fmt_value(v)}" for k, v in value.items())
    return _fmt_value(value)


def _rope_cell(row: dict) -> str:
    cell = _fmt(row["rope_type"])
    if row["rope_factor"] is not None:
        cell += f" ×{_fmt(row['rope_factor'])}"
    if row["original_max_position_embeddings"] is not None:
        cell += f" (orig. {_fmt(row['original_max_position_embeddings'])})"
    return cell


_COLUMNS = (
    ("Model", lambda r: r["model"]),
    ("Config class", lambda r: f"`{r['config_class']}`"),
    ("Defaults ≈", lambda r: _fmt(r["docstring_checkpoint"])),
    ("θ (rope_theta)", lambda r: _fmt(r["rope_theta"])),
    ("RoPE type", _rope_cell),
    ("rotary fraction", lambda r: _fmt(r["partial_rotary_factor"])),
    ("head_dim", lambda r: _fmt(r["head_dim"])),
    ("max positions", lambda r: _fmt(r["max_position_embeddings"])),
    ("layer pattern", lambda r: _fmt(r["layer_pattern"])),
    ("window / chunk", lambda r: _fmt(r["window"])),
    ("other positional settings", lambda r: _fmt(r["specials"] or None)),
)


def settings_table(rows: Sequence[dict]) -> str:
    """A Markdown table of :func:`positional_settings` rows, one line per model.

    Args:
        rows: row dicts as :func:`positional_settings` returns them.

    Returns:
        The table: a header line, a separator line and one line per row, joined by
        newlines (no trailing newline). Missing values show as "—"; per-layer-type
        values as ``sliding … / full …``.

    Raises:
        TypeError: if a row is not a dict.
        ValueError: if ``rows`` is empty or a row lacks a key of :data:`FIELDS`.
    """
    if not rows:
        raise ValueError("settings_table needs at least one row, got none")
    for row in rows:
        if not isinstance(row, dict):
            raise TypeError(f"each row must be a dict, got {type(row).__name__}")
        missing = [key for key in FIELDS if key not in row]
        if missing:
            raise ValueError(f"row {row.get('model')!r} lacks keys {missing}")

    def line(cells: Iterable[str]) -> str:
        return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

    lines = [line(name for name, _ in _COLUMNS), line("---" for _ in _COLUMNS)]
    lines += [line(cell(row) for _, cell in _COLUMNS) for row in rows]
    return "\n".join(lines)
