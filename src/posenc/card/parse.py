"""A config dict read as transformers 5.23.0 reads it, for the position card: the
RoPE parameters per layer type (:func:`rope_parameters_by_type`), the layer types and
NoPE layers (:func:`layer_kinds`), and the head width (:func:`head_dim_of`), each
without importing transformers.

The rules follow the config classes: ``RotaryEmbeddingConfigMixin`` in
``modeling_rope_utils.py`` (``convert_rope_params_to_dict``,
``standardize_rope_params``) and the ``__post_init__`` / ``convert_rope_params_to_dict``
of ``models/<name>/configuration_<name>.py`` for the families with a rule of their own
(Gemma 2/3, Olmo 3, gpt-oss, Command R7B, Qwen2/3, Qwen3-Next, Llama 4, SmolLM3,
Phi-3, Qwen2-VL). tests/test_card.py holds them equal to the classes.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping

from .class_defaults import class_default

#: The layer-type names transformers uses in ``layer_types``.
FULL, SLIDING, CHUNKED, LINEAR = (
    "full_attention",
    "sliding_attention",
    "chunked_attention",
    "linear_attention",
)

#: Model types whose config class keys ``rope_parameters`` by layer type (a v4
#: ``rope_scaling`` goes to the full layers only; the sliding ones keep plain RoPE).
NESTED_MODEL_TYPES = ("gemma3_text", "gemma3", "gemma3n_text", "olmo3")

#: Model types whose config class reads GPT-NeoX's names: ``rotary_pct`` as
#: ``partial_rotary_factor`` and ``rotary_emb_base`` as ``rope_theta``
#: (configuration_gpt_neox*.py, convert_rope_params_to_dict).
NEOX_NAMES_MODEL_TYPES = ("gpt_neox", "gpt_neox_japanese")

#: Model types whose config class has a top-level ``original_max_position_embeddings``
#: field, which then wins over the one in ``rope_parameters`` (transformers 5.23:
#: Phi3Config and Phi4MultimodalConfig; other classes ignore the top-level key).
TOP_LEVEL_ORIGINAL_MODEL_TYPES = ("phi3", "phi4_multimodal")

#: Legacy ``rope_type`` names the config classes rename: Phi-3's "su" and "yarn"
#: are LongRoPE (Phi3Config); Qwen2-VL's and Qwen2.5-VL's "mrope" is plain RoPE
#: (convert_rope_params_to_dict of Qwen2VLTextConfig and Qwen2_5_VLTextConfig).
_RENAMED = {
    "phi3": {"su": "longrope", "yarn": "longrope"},
    **{
        kind: {"mrope": "default"}
        for kind in ("qwen2_vl", "qwen2_vl_text", "qwen2_5_vl", "qwen2_5_vl_text")
    },
}


def _scaled_types() -> tuple[str, ...]:
    return ("llama3", "yarn", "longrope")


def is_nested(rope_parameters: object) -> bool:
    """Whether a ``rope_parameters`` dict is keyed by layer type (each value a dict or
    None, and every key a layer-type name ending in ``_attention``)."""
    if not isinstance(rope_parameters, Mapping) or not rope_parameters:
        return False
    return all(
        str(key).endswith("_attention")
        and (value is None or isinstance(value, Mapping))
        for key, value in rope_parameters.items()
    )


def _default_theta(model_type: str | None, layer_type: str = FULL) -> float:
    """The config class's base when the config gives none (class_defaults.json;
    10000, transformers' own fallback, for a model type it does not know)."""
    value = class_default(model_type, "rope_theta", layer_type)
    return 10_000.0 if value is None else value


def _partial(config: dict, layer_type: str = FULL) -> float | None:
    """``partial_rotary_factor`` as the config class reads it: the config's own (or
    GPT-NeoX's ``rotary_pct``), else the class default (GlmConfig 0.5, ...)."""
    value = config.get("partial_rotary_factor")
    if value is None and config.get("model_type") in NEOX_NAMES_MODEL_TYPES:
        value = config.get("rotary_pct")
    if value is None:
        value = class_default(config.get("model_type"), "partial_rotary_factor",
                              layer_type)
    return value


def _standardize(params: dict, config: dict, *, top_level_original: bool) -> dict:
    """``standardize_rope_params`` for one flat dict: rope_type from ``type``; the
    training length of a scaled type from the config's top-level
    ``original_max_position_embeddings`` where the class has that field
    (:data:`TOP_LEVEL_ORIGINAL_MODEL_TYPES`; it then wins), or else
    ``max_position_embeddings``; the family's renamed types."""
    params.setdefault("rope_type", params.get("type", "default"))
    renamed = _RENAMED.get(config.get("model_type") or "", {})
    params["rope_type"] = renamed.get(params["rope_type"], params["rope_type"])
    if params["rope_type"] in _scaled_types():
        top = config.get("original_max_position_embeddings")
        if top_level_original and top is not None:
            params["original_max_position_embeddings"] = top
        elif config.get("max_position_embeddings") is not None:
            params.setdefault(
                "original_max_position_embeddings", config["max_position_embeddings"]
            )
    return params


def rope_parameters_by_type(config: dict) -> tuple[dict[str, dict | None], bool]:
    """The RoPE parameters of each layer type, as the config class fills them in.

    Returns:
        ``(by_type, nested)``: ``{layer_type: params}`` (the key ``"*"`` when one flat
        dict serves every layer), each params dict complete with ``rope_type``,
        ``rope_theta`` (the config's, else the class default of
        :mod:`~posenc.card.class_defaults`, else 10000), ``partial_rotary_factor``
        where the config or its class gives one, and
        ``original_max_position_embeddings`` for llama3, yarn and longrope (filled in
        from ``max_position_embeddings`` when missing, as transformers does; the
        lints say so); ``nested`` is True when the config or
        its class keys the parameters by layer type.
    """
    model_type = config.get("model_type")
    scaling = config.get("rope_scaling")
    v5 = config.get("rope_parameters")
    top_theta = config.get("rope_theta")
    if top_theta is None and model_type in NEOX_NAMES_MODEL_TYPES:
        top_theta = config.get("rotary_emb_base")
    if model_type in NESTED_MODEL_TYPES and not (v5 and not is_nested(v5)):
        return _nested_family(config, scaling, v5), True
    params = copy.deepcopy(scaling or v5 or {})
    if is_nested(params):
        out = {}
        for layer_type, entry in params.items():
            if entry is None:
                out[layer_type] = None
                continue
            entry = dict(entry)
            entry.setdefault("rope_theta",
                             top_theta or _default_theta(model_type, layer_type))
            partial = _partial(config, layer_type)
            if partial is not None:
                entry.setdefault("partial_rotary_factor", partial)
            out[layer_type] = _standardize(entry, config, top_level_original=False)
        return out, True
    params = dict(params)
    params.setdefault("rope_theta", top_theta or _default_theta(model_type))
    partial = _partial(config)
    if partial is not None:
        params.setdefault("partial_rotary_factor", partial)
    top_level = model_type in TOP_LEVEL_ORIGINAL_MODEL_TYPES
    return {"*": _standardize(params, config, top_level_original=top_level)}, False


def _nested_family(config: dict, scaling: object, v5: object) -> dict[str, dict]:
    """Gemma 3 / Olmo 3's ``convert_rope_params_to_dict``: plain RoPE on both types
    by default, a v4 ``rope_scaling`` on the full layers only, Gemma 3's sliding base
    from ``rope_local_base_freq``."""
    model_type = config.get("model_type")
    nested = copy.deepcopy(v5) if v5 else {}
    nested.setdefault(FULL, None)
    nested.setdefault(SLIDING, None)
    nested = {k: dict(v or {"rope_type": "default"}) for k, v in nested.items()}
    if scaling:
        nested[FULL].update(scaling)
    top = config.get("rope_theta")
    nested[FULL].setdefault("rope_theta", top or _default_theta(model_type, FULL))
    if model_type == "olmo3":
        local = top or _default_theta(model_type, SLIDING)
    else:
        local = config.get("rope_local_base_freq")
        local = local or _default_theta(model_type, SLIDING)
    nested[SLIDING].setdefault("rope_theta", local)
    for key, entry in nested.items():
        _standardize(entry, config, top_level_original=False)
    return nested


def _pattern(n: int, period: int, other: str) -> list[str]:
    """Every ``period``-th layer full, the others ``other``."""
    return [other if (i + 1) % period else FULL for i in range(n)]


def _nope_interval(config: dict, n: int) -> list[int]:
    interval = config.get("no_rope_layer_interval") or 4
    return [int((i + 1) % interval != 0) for i in range(n)]


def layer_kinds(config: dict) -> tuple[list[str], list[bool]]:
    """Each layer's attention type and whether it rotates (RoPE) or not (NoPE).

    The config's own ``layer_types`` when it has one; else the class's rule:
    Gemma 3 (every ``sliding_window_pattern``-th layer full, default 6), Gemma 2 and
    gpt-oss (alternating, sliding first), Command R7B (every 4th full), Olmo 3 (every
    4th full), Qwen2/Qwen3 (sliding from ``max_window_layers`` on when
    ``use_sliding_window``), Qwen3-Next (every ``full_attention_interval``-th full,
    the others linear attention), Llama 4 (RoPE layers chunked, NoPE layers full),
    SmolLM3 (NoPE layers sliding when ``use_sliding_window``); any other model: every
    layer sliding when ``sliding_window`` is set, else full. NoPE layers: the
    config's ``no_rope_layers`` (1 = RoPE), else Llama 4's and SmolLM3's
    ``no_rope_layer_interval`` (every 4th), Command R7B's full layers (its modeling
    file rotates only sliding layers), and linear-attention layers (no positions).
    """
    model_type = config.get("model_type") or ""
    given = config.get("layer_types") or config.get("no_rope_layers") or ()
    n = int(config.get("num_hidden_layers") or len(given))
    window = config.get("sliding_window")
    if config.get("use_sliding_window") is False:
        window = None
    rope = [True] * n
    if config.get("no_rope_layers"):
        rope = [bool(x) for x in config["no_rope_layers"]]
    elif model_type in ("llama4_text", "llama4", "smollm3"):
        rope = [bool(x) for x in _nope_interval(config, n)]
    types = config.get("layer_types")
    if types is None:
        types = _default_types(model_type, n, window, rope, config)
    types = list(types)
    if model_type == "cohere2":
        rope = [t == SLIDING for t in types]
    rope = [r and t != LINEAR for r, t in zip(rope, types)]
    return types, rope


def _default_types(model_type, n, window, rope, config) -> list[str]:
    """``layer_types`` as the config class builds it when the config has none."""
    if model_type in ("gemma3_text", "gemma3"):
        return _pattern(n, config.get("sliding_window_pattern") or 6, SLIDING)
    if model_type in ("gemma2", "gpt_oss"):
        return _pattern(n, 2, SLIDING)
    if model_type in ("cohere2", "olmo3"):
        return _pattern(n, config.get("sliding_window_pattern") or 4, SLIDING)
    if model_type in ("qwen2", "qwen3", "qwen2_moe", "qwen3_moe"):
        first = config.get("max_window_layers", 28)
        return [
            SLIDING if window is not None and i >= first else FULL for i in range(n)
        ]
    if model_type == "qwen3_next":
        return _pattern(n, config.get("full_attention_interval") or 4, LINEAR)
    if model_type in ("llama4_text", "llama4"):
        return [CHUNKED if uses_rope else FULL for uses_rope in rope]
    if model_type == "smollm3":
        return [SLIDING if window is not None and not r else FULL for r in rope]
    return [SLIDING if window is not None else FULL] * n


def head_dim_of(config: dict, layer_type: str) -> int | None:
    """d_h of ``layer_type``'s layers: MLA's ``qk_rope_head_dim`` (DeepSeek: the
    rotated part is its own head), Gemma 4's ``global_head_dim`` on full layers,
    ``head_dim``, else hidden_size // num_attention_heads; None if none is given."""
    if config.get("qk_rope_head_dim"):
        return int(config["qk_rope_head_dim"])
    if layer_type == FULL and config.get("global_head_dim"):
        return int(config["global_head_dim"])
    if config.get("head_dim"):
        return int(config["head_dim"])
    width, heads = config.get("hidden_size"), config.get("num_attention_heads")
    if width and heads:
        return int(width) // int(heads)
    return None
