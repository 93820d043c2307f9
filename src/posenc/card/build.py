""":func:`position_card`: read a model's configuration (:mod:`posenc.card.read`,
:mod:`posenc.card.parse`), compute each layer group's frequencies
(:mod:`posenc.card.card`) and lint it (:mod:`posenc.card.lints`)."""

from __future__ import annotations

from .card import (
    SINK_MODEL_TYPES,
    LayerGroup,
    PositionCard,
    group_name,
    group_window,
    head_dim_for,
    llama4_temperature_note,
    pair_rows,
    rule_parameters,
    scaled_frequencies,
    score_multiplier,
)
from .lints import lint_config
from .parse import layer_kinds, rope_parameters_by_type
from .read import read_config


def position_card(config: object) -> PositionCard:
    """What a model's config does to positions: a :class:`PositionCard`.

    Args:
        config: a ``config.json`` path (str or Path; a folder holding one), a
            ``.gguf`` path (needs the ``gguf`` package), a config dict (transformers
            v4 ``rope_scaling`` + ``rope_theta``, or v5 ``rope_parameters``, flat or
            keyed by layer type; a multimodal config's ``text_config`` is followed),
            GGUF metadata (a dict with ``general.architecture`` and
            ``{arch}.context_length``, ``{arch}.rope.freq_base``, ...), or a
            transformers config object (read through its ``to_dict()``; transformers
            is not imported otherwise).

    Returns:
        A frozen :class:`PositionCard`: per layer group (full, sliding, chunked,
        linear, and the NoPE ones) the 0-based layer indices, rope_type, head_dim
        d_h, rotary_dim r, base b, the per-pair table (θ_i and θ′_i in radians per
        position, wavelength 2π/θ′_i in tokens, turns L·θ′_i/2π within the trained
        context L, θ′/θ, region), the attention factor (on cos and sin) and the
        multiplier every score gets (its square, times MLA's softmax factor), the
        window or chunk; the trained context L (``original_max_position_embeddings``,
        else ``max_position_embeddings``) and the extended one; attention sinks; and
        ``warnings`` (:class:`Lint`: id, severity, message, book chapter). Render
        with ``to_markdown()``, ``to_html()``, ``to_json()``, ``to_text()``.

    Raises:
        TypeError, FileNotFoundError, ImportError: see
            :func:`posenc.card.read.read_config`.
        ValueError: a dict of RoPE parameters alone (``rope_type``, ``factor``, ... at
            the top level, with no ``rope_parameters`` or ``rope_scaling``), which
            would otherwise read as plain RoPE; no head width in the config; a
            ``rope_type`` posenc does not
            implement, or parameters its rule rejects (the message of
            :func:`posenc.rope_config.rope_inv_freq_from_config`); no
            ``num_hidden_layers`` in a config whose layers are of several kinds
            (sliding and full, NoPE, ...). Without it in a config of one kind of
            layer the card has one group with no layer indices,
            ``num_hidden_layers`` None and the lint ``layer-count-unknown``.

    Source: transformers 5.23.0 — ``modeling_rope_utils.py`` (the frequencies, the
    parameters' standardization and validation), the config classes' layer-type
    rules, ``yarn_apply_mscale`` in ``models/deepseek_v3/modeling_deepseek_v3.py``;
    llama.cpp ``gguf-py/gguf/constants.py`` for GGUF keys.
    """
    data, source = read_config(config)
    _refuse_bare_rope_parameters(data)
    by_type, nested = rope_parameters_by_type(data)
    types, rope, counted = _layer_kinds(data)
    groups = []
    for layer_type, uses_rope in _group_keys(types, rope):
        layers = tuple(
            i
            for i, key in enumerate(zip(types, rope))
            if key == (layer_type, uses_rope) and counted
        )
        params = by_type.get("*") if not nested else by_type.get(layer_type)
        rotates = uses_rope and params is not None
        groups.append(_group(data, layer_type, rotates, layers, params))
    lengths = _contexts(data, groups)
    card = PositionCard(
        model_type=data.get("model_type"),
        source=source,
        num_hidden_layers=len(types) if counted else None,
        original_max_position_embeddings=lengths[0],
        max_position_embeddings=data.get("max_position_embeddings"),
        groups=tuple(groups),
        sinks=SINK_MODEL_TYPES.get(data.get("model_type") or ""),
    )
    lints = lint_config(data, card, by_type, nested)
    return PositionCard(**{**card.__dict__, "warnings": tuple(lints)})


#: Layers assumed when a config gives no layer count, to see whether its layer
#: pattern depends on the count (every pattern of transformers' classes repeats
#: within it, and Qwen's ``max_window_layers`` stays below it).
_PROBE_LAYERS = 1024


def _layer_kinds(data: dict) -> tuple[list[str], list[bool], bool]:
    """:func:`~posenc.card.parse.layer_kinds`, and whether the layer count is known.

    Without ``num_hidden_layers`` (nor ``layer_types`` or ``no_rope_layers``), a
    config whose layers are all of one kind gives that one kind (its group then has
    no layer indices, and the lint ``layer-count-unknown`` says so); one whose
    pattern depends on the count is refused.

    Raises:
        ValueError: the count is missing and the layers are of several kinds.
    """
    if any(data.get(k) for k in ("num_hidden_layers", "layer_types", "no_rope_layers")):
        types, rope = layer_kinds(data)
        return types, rope, True
    types, rope = layer_kinds({**data, "num_hidden_layers": _PROBE_LAYERS})
    kinds = _group_keys(types, rope)
    if len(kinds) > 1:
        found = ", ".join(f"{t}{'' if r else ' (NoPE)'}" for t, r in kinds)
        raise ValueError(
            "the config has no num_hidden_layers, and its layers are of several kinds "
            f"({found}: model_type {data.get('model_type')!r}), so which layer is "
            "which depends on the count: add num_hidden_layers (config.json's number "
            "of decoder layers) or layer_types"
        )
    return types[:1], rope[:1], False


def _group_keys(types: list[str], rope: list[bool]) -> list[tuple[str, bool]]:
    """Distinct (layer_type, rope) pairs, in the order of the first layer of each."""
    seen: list[tuple[str, bool]] = []
    for key in zip(types, rope):
        if key not in seen:
            seen.append(key)
    return seen


def _group(data, layer_type, uses_rope, layers, params) -> LayerGroup:
    window, chunk = group_window(layer_type, data)
    name = group_name(layer_type, uses_rope)
    if not uses_rope:
        note = ""
        if data.get("model_type") in ("llama4_text", "llama4"):
            note = llama4_temperature_note(data)
        return LayerGroup(
            name=name,
            layer_type=layer_type,
            rope=False,
            layers=layers,
            window=window,
            chunk=chunk,
            score_note=note,
        )
    head_dim = head_dim_for(data, layer_type)
    used = rule_parameters(params)
    plain, scaled, short, attention_factor, length = scaled_frequencies(
        used, head_dim, data
    )
    factor = used.get("factor")
    if used.get("rope_type") == "dynamic":
        factor = None  # its ratio varies by pair: no pair is "interpolated"
    multiplier, note = score_multiplier(params, attention_factor, data)
    section = params.get("mrope_section")
    return LayerGroup(
        name=name,
        layer_type=layer_type,
        rope=True,
        layers=layers,
        rope_type=params.get("rope_type", "default"),
        head_dim=head_dim,
        rotary_dim=len(plain) * 2,
        rope_theta=float(params["rope_theta"]),
        rope_parameters=dict(params),
        pairs=pair_rows(plain, scaled, short, length, factor),
        attention_factor=float(attention_factor),
        score_multiplier=float(multiplier),
        score_note=note,
        window=window,
        chunk=chunk,
        mrope_section=tuple(section) if section else None,
    )


def _contexts(data: dict, groups: list[LayerGroup]) -> tuple[int | None]:
    """(L,): the trained context, the longest ``original_max_position_embeddings``
    of a group's parameters, else the top level's, else max_position_embeddings."""
    found = [
        g.rope_parameters.get("original_max_position_embeddings")
        for g in groups
        if g.rope and g.rope_type != "dynamic"
    ]
    found = [value for value in found if value]
    if found:
        return (max(found),)
    top = data.get("original_max_position_embeddings")
    return (top or data.get("max_position_embeddings"),)


#: Keys of a RoPE parameters dict that a model config never has at its top level.
_ROPE_ONLY_KEYS = frozenset({
    "rope_type", "type", "factor", "low_freq_factor", "high_freq_factor",
    "beta_fast", "beta_slow", "mscale", "mscale_all_dim", "short_factor",
    "long_factor", "attention_factor",
})


def _refuse_bare_rope_parameters(data: dict) -> None:
    """A RoPE parameters dict given as if it were the config would be read as plain
    RoPE (the config's ``rope_parameters``/``rope_scaling`` are missing): refuse it."""
    if data.get("rope_parameters") or data.get("rope_scaling"):
        return
    bare = sorted(_ROPE_ONLY_KEYS & set(data))
    if bare:
        raise ValueError(
            f"this dict looks like RoPE parameters alone (it has {bare} at its top "
            "level, where a model config has 'rope_parameters' or 'rope_scaling'): "
            "pass the whole config.json, or wrap the parameters as "
            "{'rope_parameters': {...}, 'head_dim': ..., 'num_hidden_layers': ..., "
            "'max_position_embeddings': ...}"
        )
