"""The position card's lints: what in a config silently changes positions, each with a
short id, a message that says what is wrong and what to do, and the book chapter
that shows it (:data:`LINTS`; :func:`lint_config` runs them all).

Source: transformers 5.23.0 ``modeling_rope_utils.py`` — ``_validate_yarn_rope_
parameters`` (the factor against max_position_embeddings /
original_max_position_embeddings), ``_validate_llama3_rope_parameters``,
``_validate_longrope_rope_parameters``, ``_check_received_keys`` and the per-type key
lists (:data:`TRANSFORMERS_KEYS`), ``standardize_rope_params`` (the training length
filled in from max_position_embeddings), ``dynamic_rope_update`` (the frequencies
recomputed as the sequence grows).
"""

from __future__ import annotations

from collections.abc import Callable

from ..rope_config import IGNORED_ROPE_PARAMETERS
from .card import Lint, PositionCard
from .class_defaults import known, transformers_version
from .parse import (
    NESTED_MODEL_TYPES,
    SLIDING,
    TOP_LEVEL_ORIGINAL_MODEL_TYPES,
    _RENAMED,
    is_nested,
)

_FAIL = "book/failures.ipynb — "
#: Each lint's id and the chapter (notebook — section) that explains it.
LINTS: dict[str, str] = {
    "factor-ratio": _FAIL + "Past the trained length, and a wrong "
    "`original_max_position_embeddings`",
    "missing-original": _FAIL + "Past the trained length, and a wrong "
    "`original_max_position_embeddings`",
    "v4-keys": _FAIL + "Wrong frequencies from a config read the transformers 4 way",
    "v4-v5-disagree": _FAIL + "Wrong frequencies from a config read the transformers "
    "4 way",
    "ignored-keys": "book/context_extension.ipynb — The names in a model's "
    "configuration",
    "static-scaling": _FAIL + "Static YaRN makes short inputs worse",
    "partial-rotary": "book/rope_variants.ipynb — Proportional is not partial",
    "per-layer-type": "book/mixing_layers.ipynb — Today's models: a pattern of layers",
    "scaling-on-sliding": "book/mixing_layers.ipynb — Today's models: a pattern of "
    "layers",
    "longrope-switch": "book/rope_variants.ipynb — The switch and the KV cache",
    "dynamic-cache": _FAIL + "Generation degrades once a dynamic or LongRoPE model "
    "passes its context",
    "default-theta": "book/context_extension.ipynb — The names in a model's "
    "configuration",
    "gguf-rope-freqs": _FAIL + "What Llama 3's frequency factors select",
    "unknown-model-type": "book/context_extension.ipynb — The names in a model's "
    "configuration",
    "layer-count-unknown": "book/mixing_layers.ipynb — Today's models: a pattern of "
    "layers",
}

#: transformers 5.23's keys per rope_type (``_validate_<type>_rope_parameters``:
#: required and optional; ``partial_rotary_factor`` is always allowed).
TRANSFORMERS_KEYS: dict[str, frozenset[str]] = {
    "default": frozenset({"rope_type", "rope_theta"}),
    "linear": frozenset({"rope_type", "factor", "rope_theta"}),
    "dynamic": frozenset({"rope_type", "factor", "rope_theta"}),
    "yarn": frozenset(
        {
            "rope_type",
            "factor",
            "original_max_position_embeddings",
            "rope_theta",
            "attention_factor",
            "beta_fast",
            "beta_slow",
            "mscale",
            "mscale_all_dim",
            "truncate",
        }
    ),
    "longrope": frozenset(
        {
            "rope_type",
            "short_factor",
            "long_factor",
            "original_max_position_embeddings",
            "rope_theta",
            "attention_factor",
            "factor",
        }
    ),
    "llama3": frozenset(
        {
            "rope_type",
            "factor",
            "original_max_position_embeddings",
            "low_freq_factor",
            "high_freq_factor",
            "rope_theta",
        }
    ),
    "proportional": frozenset({"rope_type", "rope_theta"}),
}


def _lint(lint_id: str, message: str, severity: str = "warning") -> Lint:
    return Lint(lint_id, severity, message, LINTS[lint_id])


def _layers(group) -> str:
    return f"{group.name} layers ({len(group.layers) or 'how many: unknown'})"


def _layer_count(data: dict, card: PositionCard) -> list[Lint]:
    """No layer count in the config: the card's one group lists no layers."""
    if card.num_hidden_layers is not None:
        return []
    return [
        _lint(
            "layer-count-unknown",
            "the config has no num_hidden_layers (nor layer_types): the card assumes "
            "every layer is of the one kind its rules give, with no layer indices. "
            "Add num_hidden_layers (config.json's number of decoder layers) to see "
            "them, and check that the model has no sliding, chunked or NoPE layers",
        )
    ]


def _raw(data: dict, layer_type: str) -> dict:
    """The parameters as the file writes them (before anything is filled in)."""
    raw = data.get("rope_scaling") or data.get("rope_parameters") or {}
    if is_nested(raw):
        raw = raw.get(layer_type) or {}
    return dict(raw)


def _factor_ratio(data: dict, card: PositionCard) -> list[Lint]:
    out = []
    longest = data.get("max_position_embeddings")
    for group in card.groups:
        p, kind = group.rope_parameters, group.rope_type
        original = p.get("original_max_position_embeddings")
        if not (group.rope and longest and original):
            continue
        implicit = longest / original
        if kind == "yarn" and implicit not in (p.get("factor"), 1):
            out.append(_lint("factor-ratio", (
                f"{_layers(group)}: YaRN factor {p.get('factor')} but "
                f"max_position_embeddings / original_max_position_embeddings = "
                f"{longest} / {original} = {implicit:g}; transformers warns and uses "
                "the factor. Make the three agree (set factor to the ratio, or fix "
                "original_max_position_embeddings)")))
        if kind == "longrope" and p.get("factor") is None:
            out.append(_lint("factor-ratio", (
                f"{_layers(group)}: LongRoPE without 'factor': transformers derives "
                "s = "
                f"{longest} / {original} = {implicit:g} for the attention factor and "
                "asks for an explicit factor; set rope_parameters['factor']"), "note"))
        if kind == "llama3" and original >= longest:
            out.append(_lint("factor-ratio", (
                f"{_layers(group)}: llama3 original_max_position_embeddings {original} "
                f">= max_position_embeddings {longest}: the scaled context is no "
                "longer than the trained one; transformers warns. Set "
                "max_position_embeddings to the extended length")))
    return out


def _missing_original(data: dict, card: PositionCard) -> list[Lint]:
    out = []
    for group in card.groups:
        if group.rope_type not in ("yarn", "llama3", "longrope"):
            continue
        raw = _raw(data, group.layer_type)
        top = data.get("original_max_position_embeddings")
        if raw.get("original_max_position_embeddings") or (
            top and data.get("model_type") in TOP_LEVEL_ORIGINAL_MODEL_TYPES
        ):
            continue
        filled = group.rope_parameters.get("original_max_position_embeddings")
        out.append(_lint("missing-original", (
            f"{_layers(group)}: rope_type {group.rope_type!r} needs "
            "original_max_position_embeddings (the trained length L) and the config "
            f"has none: transformers takes max_position_embeddings = {filled}, the "
            "extended length, so the pairs are split at the wrong wavelength. Add "
            "the model's pretraining length to rope_parameters")))
    return out


def _v4_keys(data: dict, card: PositionCard) -> list[Lint]:
    v5 = data.get("rope_parameters")
    version = str(data.get("transformers_version") or "")
    if not (v5 or version.startswith("5")):
        return []
    old = [key for key in ("rope_scaling", "rope_theta") if data.get(key) is not None]
    out = []
    if old:
        out.append(_lint("v4-keys", (
            f"a transformers v5 config with the v4 keys {old}: transformers 5 lets "
            "'rope_scaling' replace 'rope_parameters' and uses a top-level "
            "'rope_theta' only where rope_parameters has none; engines that read one "
            "form differ. Keep only rope_parameters (with rope_theta in it)"), "note"))
    scaling = data.get("rope_scaling")
    if isinstance(v5, dict) and isinstance(scaling, dict) and not is_nested(v5):
        clash = sorted(k for k in set(v5) & set(scaling) if v5[k] != scaling[k])
        if clash:
            out.append(_lint("v4-v5-disagree", (
                f"rope_scaling and rope_parameters disagree on {clash}; transformers "
                "5 uses rope_scaling's values. Delete the form you do not mean")))
    top = data.get("rope_theta")
    if isinstance(v5, dict) and not is_nested(v5) and top is not None:
        inner = v5.get("rope_theta")
        if inner is not None and inner != top and not scaling:
            out.append(_lint("v4-v5-disagree", (
                f"top-level rope_theta {top} but rope_parameters['rope_theta'] "
                f"{inner}; transformers 5 uses {inner}, a v4 reader {top}. Keep one")))
    return out


def _ignored_keys(data: dict, card: PositionCard) -> list[Lint]:
    out = []
    for group in card.groups:
        allowed = TRANSFORMERS_KEYS.get(group.rope_type or "")
        if not group.rope or allowed is None:
            continue
        raw = _raw(data, group.layer_type)
        raw_type = raw.get("rope_type", raw.get("type"))
        renamed = _RENAMED.get(data.get("model_type") or "", {})
        raw_type = renamed.get(raw_type, raw_type)
        # a layer type the config class gives its own parameters (Olmo3Config: the
        # sliding layers get default RoPE from a flat YaRN rope_scaling) reads none of
        # the file's keys, and transformers validates only what it gave the layer
        given = set(group.rope_parameters)
        if raw_type in (None, group.rope_type):
            given |= set(raw)
        extra = given - allowed - {"type", "partial_rotary_factor"}
        extra -= set(IGNORED_ROPE_PARAMETERS)
        if extra:
            out.append(_lint("ignored-keys", (
                f"{_layers(group)}: rope_type {group.rope_type!r} ignores "
                f"{sorted(extra)} (transformers logs 'Unrecognized keys'); its keys "
                f"are {sorted(allowed)}. Remove them, or set the rope_type that "
                "uses them")))
    return out


def _trained(card: PositionCard) -> str:
    """"L = 8192", or words when the config does not give L."""
    length = card.original_max_position_embeddings
    if length is None:
        return "the trained length L (which this config does not give)"
    return f"L = {length}"


def _static_scaling(data: dict, card: PositionCard) -> list[Lint]:
    out = []
    for group in card.groups:
        # llama3 is left out: it is Llama 3.1's own rule, which Meta's reference code
        # applies at every length (meta-llama/llama-models, ``apply_scaling`` under
        # ``use_scaled_rope``), so the scaled frequencies are the released model's
        if group.rope_type not in ("linear", "yarn"):
            continue
        changed = sum(row.region != "kept" for row in group.pairs)
        extra = ""
        if group.score_multiplier != 1:
            extra = f"; every score is multiplied by {group.score_multiplier:.4g}"
        out.append(_lint("static-scaling", (
            f"{_layers(group)}: {group.rope_type} scaling is static: prompts shorter "
            f"than {_trained(card)} also get the scaled "
            f"frequencies ({changed} of {len(group.pairs)} pairs differ from the "
            f"unscaled ones{extra}). If the model was trained or fine-tuned with "
            "this scaling (as DeepSeek-V3 and gpt-oss were), these are its trained "
            "frequencies and nothing is lost. If the scaling was added to a model "
            "trained without it (as Qwen2.5's YaRN recipe adds it), short prompts "
            "get frequencies it never saw: enable it only for long inputs, or use "
            "dynamic scaling")))
    return out


def _partial(data: dict, card: PositionCard) -> list[Lint]:
    out = []
    for group in card.groups:
        if group.rope and group.rope_type != "proportional":
            if group.rotary_dim < group.head_dim:
                out.append(_lint("partial-rotary", (
                    f"{_layers(group)}: partial_rotary_factor "
                    f"{group.rope_parameters.get('partial_rotary_factor')}: only "
                    f"rotary_dim = {group.rotary_dim} of head_dim = {group.head_dim} "
                    f"features rotate; the other {group.head_dim - group.rotary_dim} "
                    "carry no position. Exponents run over rotary_dim: a converter "
                    "or kernel must be given rotary_dim, not head_dim"), "note"))
    return out


def _per_layer_type(data: dict, card: PositionCard, nested: bool) -> list[Lint]:
    rope_groups = [g for g in card.groups if g.rope]
    if nested:
        parts = [
            f"{g.name} layers ({len(g.layers)}): {g.rope_type}, θ = {g.rope_theta:g}"
            for g in rope_groups
        ]
        return [_lint("per-layer-type", (
            "rope_parameters are set per layer type: " + "; ".join(parts)
            + ". An engine that reads one flat dict applies the full layers' "
            "scaling to the sliding ones: check that yours reads both"), "note")]
    sliding = [g for g in rope_groups if g.layer_type == SLIDING]
    scaled = [g for g in rope_groups if g.rope_type not in ("default", None)]
    if data.get("model_type") in NESTED_MODEL_TYPES and sliding and scaled:
        return [_lint("scaling-on-sliding", (
            f"one flat rope_parameters ({scaled[0].rope_type}) for a "
            f"{data.get('model_type')} model: the scaling meant for its full layers "
            f"applies to the {len(sliding[0].layers)} sliding layers too. Write "
            "rope_parameters keyed by layer type: {'full_attention': {...scaling}, "
            "'sliding_attention': {'rope_type': 'default', 'rope_theta': ...}}"))]
    return []


def _cache(data: dict, card: PositionCard) -> list[Lint]:
    out = []
    for group in card.groups:
        if group.rope_type == "longrope":
            out.append(_lint("longrope-switch", (
                f"{_layers(group)}: LongRoPE switches from short_factor to long_factor "
                f"once the sequence passes L = "
                f"{group.rope_parameters.get('original_max_position_embeddings')}; "
                "with "
                "a KV cache the keys cached before the switch keep the short rotation "
                "while new queries use the long one. Re-encode the prompt past L, or "
                "pick one factor set for the whole generation")))
        if group.rope_type == "dynamic":
            out.append(_lint("dynamic-cache", (
                f"{_layers(group)}: dynamic NTK recomputes the frequencies as the "
                f"sequence grows past {data.get('max_position_embeddings')}; keys "
                "already in the KV cache were rotated with the earlier frequencies. "
                "Recompute the cache after a change, or use a static rule")))
    return out


def _defaults(data: dict, card: PositionCard) -> list[Lint]:
    out = []
    raw = data.get("rope_scaling") or data.get("rope_parameters") or {}
    inner = [raw] if not is_nested(raw) else [v or {} for v in raw.values()]
    has_theta = data.get("rope_theta") is not None or data.get("rope_local_base_freq")
    if any(g.rope for g in card.groups) and not has_theta:
        if not any(entry.get("rope_theta") is not None for entry in inner):
            bases = sorted({g.rope_theta for g in card.groups if g.rope})
            out.append(_lint("default-theta", (
                f"the config gives no rope_theta: the card used {bases}, the config "
                "class's default. Write the base into the config"), "note"))
    model_type = data.get("model_type")
    if any(g.rope for g in card.groups) and not known(model_type):
        out.append(_lint("unknown-model-type", (
            f"model_type {model_type!r} is not a RoPE config class of transformers "
            f"{transformers_version()}: where the config is silent the card assumed "
            "rope_theta 10000 and the whole head rotated, transformers' fallbacks. "
            "Check both against the model's code, or write them into the config")))
    if "rope_freqs.weight" in data.get("_gguf_tensors", []):
        out.append(_lint("gguf-rope-freqs", (
            "the GGUF file carries rope_freqs.weight, per-pair divisors of θ "
            "(llama.cpp "
            "stores Llama 3's scaling there, not in metadata); the card's θ′ does not "
            "include them. Read the model's config.json for the scaling")))
    return out


_CHECKS: tuple[Callable[[dict, PositionCard], list[Lint]], ...] = (
    _layer_count,
    _factor_ratio,
    _missing_original,
    _v4_keys,
    _ignored_keys,
    _static_scaling,
    _partial,
    _cache,
    _defaults,
)


def lint_config(data: dict, card: PositionCard, by_type: dict, nested: bool) -> list:
    """Every lint of :data:`LINTS` on the config dict ``data`` and its card."""
    found = [lint for check in _CHECKS for lint in check(data, card)]
    return found + _per_layer_type(data, card, nested)
