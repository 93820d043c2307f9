"""Reading a transformers model's RoPE settings: :func:`rope_inv_freq_from_config` turns
a transformers v5 ``config.rope_parameters`` dict into the frequencies and attention
factor of :func:`posenc.scaling.rope_inv_freq`, filling in what transformers fills in.

The dict is read in three steps, each a short function: the keys themselves
(:func:`_read_parameters`: ``rope_type``, ``rope_theta``, the keys to skip), the
rotated width (:func:`_rotary_dim`, from ``partial_rotary_factor``), and the values a
type takes from the config when the dict leaves them out (one small function per type
in ``_FROM_CONFIG``); :func:`_width_and_scaling` takes the last two steps for a type.
Everything else is :data:`posenc.scaling.ROPE_INIT_FUNCTIONS`'.

Shapes: d_h the width of one head (``head_dim``), r ≤ d_h the rotated width
(``rotary_dim``); the frequencies are (r/2,).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping
from numbers import Real

import torch

from ._checks import check_int
from .scaling import _fraction, _positive, rope_inv_freq

#: The key of the training length L in ``rope_parameters``.
_LENGTH = "original_max_position_embeddings"

TRANSFORMERS_ROPE_TYPES = (
    "default",
    "linear",
    "dynamic",
    "yarn",
    "longrope",
    "llama3",
    "proportional",
)
"""The ``rope_type`` values :func:`rope_inv_freq_from_config` reads: "default" (plain
RoPE) and the keys of transformers 5.23's ``ROPE_INIT_FUNCTIONS``."""

IGNORED_ROPE_PARAMETERS = ("mrope_section", "mrope_interleaved", "llama_4_scaling_beta")
"""Keys transformers models keep in ``rope_parameters`` that change neither the
frequencies nor the cos/sin factor, so :func:`rope_inv_freq_from_config` skips them:
``mrope_section`` and ``mrope_interleaved`` (M-RoPE: how the same frequencies are
split among the temporal, height and width position ids, and their layout) and
``llama_4_scaling_beta`` (Ministral 3 / Mistral 4: a position-dependent query
scaling that the attention applies, outside RoPE)."""


MODEL_CONFIG_KEYS = (
    "_name_or_path",
    "architectures",
    "hidden_size",
    "model_type",
    "num_attention_heads",
    "rope_parameters",
    "rope_scaling",
    "text_config",
)
"""Keys of a whole model config (``config.json``) that no ``rope_parameters`` dict
has: :func:`rope_inv_freq_from_config` refuses a dict holding one, saying to pass
the config's ``rope_parameters``."""


class RopeParametersWarning(UserWarning):
    """A ``rope_parameters`` dict that transformers accepts with a warning and posenc
    reads as transformers does (e.g. a YaRN ``factor`` that disagrees with
    max_position_embeddings / original_max_position_embeddings)."""


def rope_inv_freq_from_config(
    rope_parameters: Mapping,
    head_dim: int,
    *,
    max_position_embeddings: int | None = None,
    seq_len: int | torch.Tensor | None = None,
) -> tuple[torch.Tensor, float]:
    """RoPE frequencies and attention factor from a transformers v5
    ``config.rope_parameters`` dict, as ``ROPE_INIT_FUNCTIONS`` (or, for "default",
    the models' own ``compute_default_rope_parameters``) compute them.

    The dict is read as transformers 5.23 reads it: ``rope_type`` (the legacy key
    ``type`` when absent; "default" when both are) picks the rule; ``rope_theta`` is
    the base b; ``partial_rotary_factor`` p (default 1) gives the rotated width
    rotary_dim = int(d_h·p), over which the exponents 2i/rotary_dim run — except for
    "proportional", which takes the full d_h and p itself (see :func:`rope_inv_freq`).
    A key whose value is None counts as absent. Per type:

    * "default": plain RoPE, b^(−2i/rotary_dim);
    * "dynamic": L is ``max_position_embeddings`` (transformers takes
      ``config.max_position_embeddings``; an ``original_max_position_embeddings`` in
      the dict is ignored, as transformers ignores it);
    * "yarn", "llama3", "longrope": a missing ``original_max_position_embeddings`` is
      ``max_position_embeddings`` (as ``standardize_rope_params`` fills it in);
    * "yarn": a missing ``factor`` is max_position_embeddings /
      original_max_position_embeddings; without ``attention_factor`` but with both
      ``mscale`` and ``mscale_all_dim`` non-zero (DeepSeek), the attention factor is
      m(s, mscale) / m(s, mscale_all_dim) with m(s, a) = 0.1·a·ln s + 1 (1 for s ≤ 1);
    * "longrope": a missing ``factor`` is max_position_embeddings /
      original_max_position_embeddings, used only for the attention factor; a factor
      ≤ 1 gives attention factor 1, as in transformers.

    Keys in :data:`IGNORED_ROPE_PARAMETERS` are skipped; any other key that the rule
    does not use raises (transformers would only log a warning).

    Args:
        rope_parameters: one flat dict, e.g. ``config.rope_parameters``; for a model
            with per-layer-type RoPE (Gemma 3 / 4) pass one entry, e.g.
            ``config.rope_parameters["full_attention"]``, with that layer type's
            head_dim.
        head_dim: d_h, the width of one head (``config.head_dim``, or hidden_size //
            num_attention_heads; Gemma 4's full-attention layers use
            ``global_head_dim``).
        max_position_embeddings: ``config.max_position_embeddings``; needed by
            "dynamic", and by the other scaled types when the dict leaves out a value
            derived from it (see above).
        seq_len: the current length ℓ for "dynamic" and "longrope" (see
            :func:`rope_inv_freq`).

    Returns:
        ``(inv_freq, attention_factor)``: float32 tensor (rotary_dim/2,) — (d_h/2,)
        for "proportional" — in radians per position, on the CPU; the float that
        multiplies cos and sin.

    Raises:
        TypeError: rope_parameters not a mapping; head_dim or max_position_embeddings
            not an int; partial_rotary_factor not a real number; see
            :func:`rope_inv_freq`.
        ValueError: a dict nested by layer type; an unknown ``rope_type`` (the
            message lists :data:`TRANSFORMERS_ROPE_TYPES`); no ``rope_theta``;
            partial_rotary_factor outside (0, 1] (outside [0, 1] for
            "proportional"); an odd or zero rotary_dim; a key the rule does not take;
            a value that must come from max_position_embeddings when it is None;
            anything :func:`rope_inv_freq` rejects.

    Source: transformers 5.23, ``modeling_rope_utils`` (``ROPE_INIT_FUNCTIONS``,
    ``RotaryEmbeddingConfigMixin.standardize_rope_params``), and e.g.
    ``Phi3RotaryEmbedding.compute_default_rope_parameters`` for "default" with p < 1.
    """
    rope_type, base, params = _read_parameters(rope_parameters)
    head_dim = check_int("head_dim", head_dim, minimum=1)
    if max_position_embeddings is not None:
        max_position_embeddings = check_int(
            "max_position_embeddings", max_position_embeddings, minimum=1
        )
    config = _Config(rope_type, max_position_embeddings)
    width, scaling = _width_and_scaling(params, head_dim, config)
    return rope_inv_freq(width, base, scaling, seq_len=seq_len)


def softmax_scale_multiplier(rope_parameters: Mapping) -> float:
    """DeepSeek's second YaRN factor: m(s, mscale_all_dim)², by which the attention
    of the DeepSeek-V2/V3 family multiplies its softmax scale 1/√d_h, so that every
    score — rotated features and the others alike — gets it.

    m(s, a) = 0.1·a·ln s + 1 for s > 1, else 1 (YaRN's temperature rule with the
    coefficient a). The factor applies when the dict's ``rope_type`` (legacy
    ``type``) is not "default" and ``mscale_all_dim`` is non-zero; otherwise it is 1.
    Only models whose attention applies it get it (in transformers 5.23 the 14
    modeling files that read ``mscale_all_dim``, among them DeepSeek-V2, V3 and
    V3.2, GLM-4-MoE-Lite, MiniCPM3, LongCat-Flash and Mistral 4); a Llama-family
    model ignores ``mscale_all_dim``.

    Args:
        rope_parameters: a flat transformers v5 ``config.rope_parameters`` dict.

    Returns:
        The multiplier (float, ≥ 1 for s ≥ 1).

    Raises:
        TypeError: rope_parameters not a mapping.
        ValueError: a whole model config; ``mscale_all_dim`` without a ``factor``
            (transformers reads ``rope_parameters["factor"]`` there); a factor or
            mscale_all_dim that is not a finite number > 0.

    Source: transformers 5.23, ``models/deepseek_v3/modeling_deepseek_v3.py``
    (``yarn_get_mscale``, ``yarn_apply_mscale``, ``DeepseekV3Attention.scaling``);
    DeepSeek-V3, arXiv:2412.19437, §4.3 (the long-context extension with YaRN).
    """
    if not isinstance(rope_parameters, Mapping):
        _read_parameters(rope_parameters)  # raises the TypeError
    rope_type, _, params = _read_parameters({"rope_theta": 1.0, **rope_parameters})
    mscale_all_dim = params.get("mscale_all_dim")
    if rope_type == "default" or not mscale_all_dim:
        return 1.0
    if "factor" not in params:
        raise ValueError(
            "rope_parameters with mscale_all_dim needs 'factor' (s): the attention "
            "multiplies its softmax scale by m(s, mscale_all_dim)²; got keys "
            f"{sorted(rope_parameters)}"
        )
    factor = _positive("factor", params["factor"])
    return _yarn_mscale(factor, _positive("mscale_all_dim", mscale_all_dim)) ** 2


def score_multiplier(
    rope_parameters: Mapping,
    head_dim: int,
    *,
    max_position_embeddings: int | None = None,
    softmax_mscale: bool = True,
) -> float:
    """The multiplier a score's rotated part gets from the RoPE settings, against
    plain RoPE with the scale 1/√d_h: attention_factor² × m(s, mscale_all_dim)².

    RoPE's ``attention_factor`` (YaRN's √(1/t), LongRoPE's, DeepSeek's m(s, mscale) /
    m(s, mscale_all_dim)) multiplies cos and sin, hence the rotated query and key,
    hence their score by its square; DeepSeek's attention then multiplies the softmax
    scale by m(s, mscale_all_dim)² (:func:`softmax_scale_multiplier`). With
    DeepSeek-V3's settings (s = 40, mscale = mscale_all_dim = 1) the attention factor
    is 1 and every score gets (0.1 ln 40 + 1)² ≈ 1.874; a YaRN Llama-family model
    with s = 4 gets (0.1 ln 4 + 1)² ≈ 1.297. The features RoPE leaves unrotated
    (partial rotary's pass-through features, MLA's ``qk_nope_head_dim`` part) get
    :func:`softmax_scale_multiplier` alone.

    Args:
        rope_parameters: a flat transformers v5 ``config.rope_parameters`` dict, read
            as :func:`rope_inv_freq_from_config` reads it.
        head_dim: d_h (for MLA, ``qk_rope_head_dim``).
        max_position_embeddings: ``config.max_position_embeddings``, where the type
            derives a value from it (see :func:`rope_inv_freq_from_config`).
        softmax_mscale: whether the model's attention applies DeepSeek's
            m(s, mscale_all_dim)² (the DeepSeek family does; a Llama-family model
            does not: pass False).

    Returns:
        The multiplier (float).

    Raises:
        TypeError, ValueError: as :func:`rope_inv_freq_from_config` and
            :func:`softmax_scale_multiplier`.

    Source: transformers 5.23, ``modeling_rope_utils`` (``ROPE_INIT_FUNCTIONS``'
    attention factor, applied to cos and sin in e.g. ``LlamaRotaryEmbedding.forward``)
    and ``models/deepseek_v3/modeling_deepseek_v3.py`` (``yarn_apply_mscale``); Peng
    et al. 2023, YaRN, arXiv:2309.00071, §3.4 (Eq. 22).
    """
    _, attention_factor = rope_inv_freq_from_config(
        rope_parameters, head_dim, max_position_embeddings=max_position_embeddings
    )
    extra = softmax_scale_multiplier(rope_parameters) if softmax_mscale else 1.0
    return attention_factor**2 * extra


def _read_parameters(rope_parameters: object) -> tuple[str, object, dict]:
    """``(rope_type, base, params)``: the type (legacy ``type``, else "default"), the
    base ``rope_theta``, and the other keys without None values and without
    :data:`IGNORED_ROPE_PARAMETERS`. Raises as :func:`rope_inv_freq_from_config`."""
    if not isinstance(rope_parameters, Mapping):
        raise TypeError(
            "rope_parameters must be a dict such as config.rope_parameters (for a "
            "transformers config object, pass config.rope_parameters), got "
            f"{type(rope_parameters).__name__}"
        )
    whole = sorted(set(rope_parameters) & set(MODEL_CONFIG_KEYS))
    if whole:
        raise ValueError(
            f"rope_parameters looks like a whole model config (it has {whole}); pass "
            "its RoPE dict: config['rope_parameters'] (transformers v5), or for a v4 "
            "config {'rope_theta': config['rope_theta'], **(config['rope_scaling'] "
            "or {})}, with head_dim and "
            "max_position_embeddings=config['max_position_embeddings']"
        )
    params = {key: value for key, value in rope_parameters.items() if value is not None}
    if (
        "rope_type" not in params
        and "type" not in params
        and params
        and all(isinstance(value, Mapping) for value in params.values())
    ):
        raise ValueError(
            f"rope_parameters is nested by layer type (keys {sorted(params)}); pass "
            "one layer type's dict, e.g. rope_parameters['full_attention'], with that "
            "layer type's head_dim"
        )
    legacy_type = params.pop("type", "default")
    rope_type = params.pop("rope_type", legacy_type)
    if rope_type not in TRANSFORMERS_ROPE_TYPES:
        raise ValueError(
            f"rope_type must be one of {', '.join(map(repr, TRANSFORMERS_ROPE_TYPES))}"
            f" (transformers' types that posenc implements); got {rope_type!r}"
        )
    if "rope_theta" not in params:
        raise ValueError(
            "rope_parameters needs 'rope_theta' (the base b; transformers fills it "
            f"in from the config), got keys {sorted(rope_parameters)}"
        )
    base = params.pop("rope_theta")
    for key in IGNORED_ROPE_PARAMETERS:
        params.pop(key, None)
    return rope_type, base, params


def _rotary_dim(head_dim: int, partial_rotary_factor: object) -> int:
    """r = int(d_h·p), the rotated width of partial RoPE (p in (0, 1]), even and ≥ 2."""
    partial = _fraction("partial_rotary_factor", partial_rotary_factor, low_open=True)
    rotary_dim = int(head_dim * partial)
    if rotary_dim < 2 or rotary_dim % 2:
        raise ValueError(
            "rotary_dim = int(head_dim * partial_rotary_factor) = "
            f"int({head_dim} * {partial}) = {rotary_dim} must be even and >= 2 "
            "(features rotate in pairs)"
        )
    return rotary_dim


def _width_and_scaling(
    params: dict, head_dim: int, config: _Config
) -> tuple[int, dict | None]:
    """What :func:`rope_inv_freq` takes for ``config.rope_type``: the width (d_h for
    "proportional", which reads p itself; else r from ``partial_rotary_factor``) and
    the scaling dict (None for "default"), with the values the type fills in from the
    config (``_FROM_CONFIG``). ``params`` are the keys :func:`_read_parameters` left;
    they are consumed. Raises as :func:`rope_inv_freq_from_config`."""
    rope_type = config.rope_type
    if rope_type == "proportional":  # takes the full d_h and p itself
        return head_dim, {"rope_type": "proportional", **params}
    rotary_dim = _rotary_dim(head_dim, params.pop("partial_rotary_factor", 1.0))
    if rope_type == "default":
        if params:
            raise ValueError(
                f"rope_type 'default' does not take {sorted(params)}; its keys are "
                "['partial_rotary_factor', 'rope_theta', 'rope_type']"
            )
        return rotary_dim, None
    fill_in = _FROM_CONFIG.get(rope_type)
    if fill_in is not None:
        fill_in(params, config)
    return rotary_dim, {"rope_type": rope_type, **params}


class _Config:
    """What a type may take from the model's config: ``max_position_embeddings``."""

    def __init__(self, rope_type: str, max_position_embeddings: int | None) -> None:
        self.rope_type = rope_type
        self.max_position_embeddings = max_position_embeddings

    def from_max(self, key: str, why: str) -> int:
        """``max_position_embeddings`` in place of the missing ``key``, or a
        ValueError saying ``why`` it is needed."""
        if self.max_position_embeddings is None:
            raise ValueError(
                f"rope_type {self.rope_type!r} without {key!r} in rope_parameters "
                f"needs max_position_embeddings ({why}); got None"
            )
        return self.max_position_embeddings

    def derived_factor(self, params: dict) -> float:
        """s = max_position_embeddings / original_max_position_embeddings."""
        why = "s = max_position_embeddings / original_max_position_embeddings"
        longest = self.from_max("factor", why)
        original = params[_LENGTH]
        if isinstance(original, bool) or not isinstance(original, int) or original < 1:
            raise ValueError(
                "original_max_position_embeddings must be a positive int, "
                f"got {original!r}"
            )
        return longest / original


def _dynamic_from_config(params: dict, config: _Config) -> None:
    """L is always max_position_embeddings: transformers ignores the dict's value."""
    given = params.pop(_LENGTH, None)
    if given is not None and config.max_position_embeddings is None:
        raise ValueError(
            f"rope_type 'dynamic' needs max_position_embeddings: transformers 5.23 "
            "takes the training length L from config.max_position_embeddings and "
            f"ignores rope_parameters['original_max_position_embeddings'] (here "
            f"{given!r}); pass max_position_embeddings=config.max_position_embeddings"
        )
    params[_LENGTH] = config.from_max(
        _LENGTH,
        "transformers' dynamic rule takes L from config.max_position_embeddings",
    )


def _length_from_config(params: dict, config: _Config) -> None:
    """A missing L is max_position_embeddings (``standardize_rope_params``)."""
    if _LENGTH not in params:
        why = "the training length L defaults to it"
        params[_LENGTH] = config.from_max(_LENGTH, why)


def _yarn_from_config(params: dict, config: _Config) -> None:
    """L and s from the config when missing; DeepSeek's ``mscale`` and
    ``mscale_all_dim`` give the attention factor when it is missing. An explicit s
    that disagrees with max_position_embeddings / L warns, as transformers does."""
    _length_from_config(params, config)
    if "factor" not in params:
        params["factor"] = config.derived_factor(params)
    else:
        _warn_factor_mismatch(params, config)
    mscale = params.pop("mscale", None)
    mscale_all_dim = params.pop("mscale_all_dim", None)
    if "attention_factor" not in params and mscale and mscale_all_dim:
        s = _positive("factor", params["factor"])
        params["attention_factor"] = _yarn_mscale(s, mscale) / _yarn_mscale(
            s, mscale_all_dim
        )


def _warn_factor_mismatch(params: dict, config: _Config) -> None:
    """transformers' rule: warn when the implicit factor max_position_embeddings / L
    is neither 1 (L filled in from max_position_embeddings) nor the explicit one; the
    explicit factor is used (transformers 5.23, ``modeling_rope_utils``,
    ``RotaryEmbeddingConfigMixin._validate_yarn_rope_parameters``)."""
    longest, original = config.max_position_embeddings, params[_LENGTH]
    factor = params["factor"]
    if longest is None or isinstance(original, bool) or not isinstance(original, int):
        return
    if original < 1 or isinstance(factor, bool) or not isinstance(factor, Real):
        return
    implicit = longest / original
    if implicit != factor and implicit != 1:
        warnings.warn(
            f"the YaRN factor rope_parameters['factor'] = {factor} does not match "
            "max_position_embeddings / original_max_position_embeddings = "
            f"{longest} / {original} = {implicit:g}; the explicit factor is used, "
            "as transformers does (it warns too). Check which length the model was "
            "trained at (original_max_position_embeddings) and which it is extended "
            "to (max_position_embeddings)",
            RopeParametersWarning,
            stacklevel=5,
        )


def _longrope_from_config(params: dict, config: _Config) -> None:
    """L from the config when missing; s, used only for the attention factor, from
    the config when missing, and attention factor 1 for s ≤ 1, as transformers."""
    _length_from_config(params, config)
    if "attention_factor" in params:
        return
    if "factor" not in params:
        params["factor"] = config.derived_factor(params)
    s = params["factor"]
    if isinstance(s, Real) and not isinstance(s, bool) and s <= 1:
        # transformers: attention factor 1 for s <= 1; s is used for nothing else
        params.pop("factor")
        params["attention_factor"] = 1.0


#: Per ``rope_type``, how it fills in from the config what the dict leaves out
#: ("linear" takes nothing from it; "default" and "proportional" are read above).
_FROM_CONFIG: dict[str, Callable[[dict, _Config], None]] = {
    "dynamic": _dynamic_from_config,
    "yarn": _yarn_from_config,
    "llama3": _length_from_config,
    "longrope": _longrope_from_config,
}


def _yarn_mscale(factor: float, mscale: float) -> float:
    """transformers' ``get_mscale``: 0.1·mscale·ln s + 1 for s > 1, else 1."""
    return 0.1 * mscale * math.log(factor) + 1.0 if factor > 1 else 1.0
