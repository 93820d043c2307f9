"""Context extension for RoPE: new frequencies (and an attention temperature) for
sequences longer than the training length L = ``original_max_position_embeddings``.

With the scale factor s and the frequencies θ_i = b^(−2i/d), i = 0 … d/2 − 1, of d
rotated features:

* ``"linear"`` — Position Interpolation (Chen et al. 2023, Eq. 2): θ_i / s, i.e.
    positions m/s;
* ``"ntk"`` — NTK-aware scaling (bloc97, 2023; Peng et al. 2023 §3.1): base b' =
  b·s^(d/(d−2)), which divides the lowest frequency by exactly s and keeps the highest;
* ``"dynamic"`` — dynamic NTK (emozilla, 2023; Peng et al. 2023 §3.3): the NTK base with
  s' = s·ℓ/L − (s − 1) for the current length ℓ > L, and the original frequencies for ℓ
  ≤ L;
* ``"yarn"`` — YaRN (Peng et al. 2023, §3.2–3.4, Eq. 18–23): per frequency, a ramp
  between extrapolation (wavelengths shorter than L/β_fast) and interpolation (longer
  than L/β_slow), and the attention temperature √(1/t) = 0.1·ln s + 1, applied to cos
  and sin;
* ``"llama3"`` — Llama 3.1's rule (Meta's reference code, ``apply_scaling``):
  interpolate wavelengths longer than L/low_freq_factor by s, keep those shorter than
  L/high_freq_factor, and blend in between;
* ``"longrope"`` — LongRoPE (Ding et al. 2024, arXiv:2402.13753; Phi-3 / Phi-4-mini,
  Abdin et al. 2024, arXiv:2404.14219): θ_i / λ_i with a searched factor λ_i per pair,
  ``short_factor`` for ℓ ≤ L and ``long_factor`` for ℓ > L, and the attention factor
  √(1 + ln s / ln L);
* ``"proportional"`` — Gemma 4's global layers (transformers'
  ``_compute_proportional_rope_parameters``): only the first ⌊p·d_h/2⌋ pairs rotate,
  with the exponents 2i/d_h of the *full* head; the other pairs get θ = 0 (no rotation).

Each ``rope_type`` is one small function and one entry of :data:`ROPE_INIT_FUNCTIONS`
(its required and optional keys beside it), as in transformers; a new type is a new
entry. Parameter names and the formulas follow Hugging Face's
``transformers.modeling_rope_utils``, and the tests hold the results equal to its
``ROPE_INIT_FUNCTIONS`` (static "ntk" against "dynamic", which equals it at the length
where ``factor·ℓ/L − (factor − 1) = s``).
:func:`posenc.rope_config.rope_inv_freq_from_config` reads a transformers v5
``config.rope_parameters`` dict directly.

Shapes:
    r rotated width (``rotary_dim``): every ``rope_type`` returns inv_freq (r/2,), one
    angle per position for each frequency pair, and a float attention factor.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from numbers import Integral, Real

import torch

from ._checks import check_base, check_choice, check_even_dim, check_int
from .frequencies import DEFAULT_BASE, compute_inv_freq


def _positive(name: str, value: object) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value <= 0
    ):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return float(value)


def _positive_list(name: str, value: object) -> list[float]:
    """A non-empty list (or tuple) of finite numbers > 0, as a list of floats."""
    if not isinstance(value, (list, tuple)):
        raise TypeError(
            f"{name} must be a list of numbers (one per rotated pair), got "
            f"{type(value).__name__}"
        )
    if not value:
        raise ValueError(f"{name} must not be empty (one factor per rotated pair)")
    return [_positive(f"{name}[{i}]", entry) for i, entry in enumerate(value)]


def _fraction(name: str, value: object, *, low_open: bool) -> float:
    """A real number in (0, 1] (``low_open``) or [0, 1]."""
    rule = "in (0, 1]" if low_open else "in [0, 1]"
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(
            f"{name} must be a real number {rule}, got {value!r} of type "
            f"{type(value).__name__}"
        )
    value = float(value)
    if not (0.0 < value <= 1.0 if low_open else 0.0 <= value <= 1.0):
        raise ValueError(f"{name} must be {rule}, got {value}")
    return value


def _check_bool(name: str, value: object) -> bool:
    """A flag must be a bool: a string such as "false" is truthy and would mean True."""
    if not isinstance(value, bool):
        raise TypeError(
            f"{name} must be a bool (True or False), got {value!r} of type "
            f"{type(value).__name__}"
        )
    return value


def _check_seq_len(seq_len: object) -> int | None:
    """None, a positive int, or a 0-d integer tensor (transformers passes
    ``max(position_ids) + 1``), as an int."""
    if seq_len is None:
        return None
    rule = "seq_len must be an int or a 0-d integer tensor"
    if isinstance(seq_len, torch.Tensor):
        if (
            seq_len.dim() != 0
            or seq_len.is_floating_point()
            or seq_len.is_complex()
            or seq_len.dtype == torch.bool
        ):
            raise TypeError(
                f"{rule}, got a tensor of shape {tuple(seq_len.shape)} and "
                f"dtype {seq_len.dtype}"
            )
        seq_len = int(seq_len.item())
    elif isinstance(seq_len, bool) or not isinstance(seq_len, Integral):
        raise TypeError(f"{rule}, got {seq_len!r} of type {type(seq_len).__name__}")
    if seq_len < 1:
        raise ValueError(f"seq_len must be >= 1, got {seq_len}")
    return int(seq_len)


def check_scaling(scaling: dict | None) -> dict | None:
    """Validate a scaling dict (see :func:`rope_inv_freq`) and return a copy with
    defaults filled in.

    Raises:
        TypeError: if ``scaling`` is neither None nor a dict; a yarn ``truncate`` that
            is not a bool; a longrope ``short_factor`` / ``long_factor`` that is not a
            list or tuple; a proportional ``partial_rotary_factor`` that is not a real
            number.
        ValueError: unknown ``rope_type``; a missing or unknown key (the message names
            it); factor < 1; a length that is not a positive integer; beta_fast ≤
            beta_slow; low_freq_factor ≥ high_freq_factor; a non-positive parameter;
            longrope: an empty factor list, a factor entry that is not finite and > 0,
            short and long lists of different lengths, neither ``factor`` nor
            ``attention_factor`` given, or a derived attention factor with L < 2;
            proportional: ``partial_rotary_factor`` outside [0, 1]. (That the
            longrope lists have rotary_dim/2 entries is checked by
            :func:`rope_inv_freq`, which knows rotary_dim.)
    """
    if scaling is None:
        return None
    if not isinstance(scaling, dict):
        raise TypeError(
            "scaling must be None or a dict with a 'rope_type', "
            f"got {type(scaling).__name__}"
        )
    if "rope_type" not in scaling:
        raise ValueError(
            f"scaling needs a 'rope_type' (one of "
            f"{', '.join(ROPE_TYPES)}), got keys {sorted(scaling)}"
        )
    rope_type = check_choice("rope_type", scaling["rope_type"], ROPE_TYPES)
    rule = ROPE_INIT_FUNCTIONS[rope_type]
    keys = set(scaling) - {"rope_type"}
    missing = rule.required - keys
    if missing:
        raise ValueError(
            f"rope_type {rope_type!r} needs {sorted(missing)}; "
            f"got keys {sorted(scaling)}"
        )
    unknown = keys - rule.required - rule.optional
    if unknown:
        allowed = sorted(rule.required | rule.optional)
        raise ValueError(
            f"rope_type {rope_type!r} does not take {sorted(unknown)}; "
            f"its keys are {allowed}"
        )
    out = dict(scaling)
    for key, value in rule.defaults.items():
        out.setdefault(key, value)
    # factor: required by most types; optional for "longrope" (None means absent, as
    # in transformers) and "proportional" (default 1)
    if "factor" in rule.required or out.get("factor") is not None:
        out["factor"] = _positive("factor", out["factor"])
        if out["factor"] < 1:
            raise ValueError(
                "factor must be >= 1 (it is the ratio of the new length to "
                f"the trained one), got {scaling['factor']!r}"
            )
    if "original_max_position_embeddings" in out:
        length = out["original_max_position_embeddings"]
        if isinstance(length, bool) or not isinstance(length, int) or length < 1:
            raise ValueError(
                "original_max_position_embeddings must be a positive int, "
                f"got {length!r}"
            )
    rule.check(out)
    return out


def _check_nothing(out: dict) -> None:
    """A rope_type with no rule beyond its keys and ``factor``."""


def _check_yarn(out: dict) -> None:
    """Validate (in place) the yarn part of a scaling dict."""
    out["beta_fast"] = _positive("beta_fast", out["beta_fast"])
    out["beta_slow"] = _positive("beta_slow", out["beta_slow"])
    if out["beta_fast"] <= out["beta_slow"]:
        raise ValueError(
            f"beta_fast must exceed beta_slow, got beta_fast="
            f"{out['beta_fast']}, beta_slow={out['beta_slow']}"
        )
    if out.get("attention_factor") is not None:
        out["attention_factor"] = _positive("attention_factor", out["attention_factor"])
    out["truncate"] = _check_bool("truncate", out["truncate"])


def _check_llama3(out: dict) -> None:
    """Validate the llama3 part of a scaling dict."""
    low = _positive("low_freq_factor", out["low_freq_factor"])
    high = _positive("high_freq_factor", out["high_freq_factor"])
    if low > high:
        raise ValueError(
            f"low_freq_factor must not exceed high_freq_factor, got {low} and {high}"
        )


def _check_proportional(out: dict) -> None:
    """Validate (in place) the proportional part of a scaling dict."""
    out["partial_rotary_factor"] = _fraction(
        "partial_rotary_factor", out["partial_rotary_factor"], low_open=False
    )


def _check_longrope(out: dict) -> None:
    """Validate (in place) the longrope part of a scaling dict."""
    short = out["short_factor"] = _positive_list("short_factor", out["short_factor"])
    long = out["long_factor"] = _positive_list("long_factor", out["long_factor"])
    if len(short) != len(long):
        raise ValueError(
            f"short_factor and long_factor must have the same length (one factor "
            f"per rotated pair), got {len(short)} and {len(long)}"
        )
    if out.get("attention_factor") is not None:
        out["attention_factor"] = _positive("attention_factor", out["attention_factor"])
    else:
        out["attention_factor"] = None
        if out["factor"] is None:
            raise ValueError(
                "rope_type 'longrope' needs 'factor' (s = max_position_embeddings / "
                "original_max_position_embeddings, as transformers derives it) or "
                "an explicit 'attention_factor'; got neither"
            )
        if out["factor"] > 1 and out["original_max_position_embeddings"] < 2:
            raise ValueError(
                "longrope's attention factor √(1 + ln s / ln L) needs "
                "original_max_position_embeddings L >= 2, got "
                f"{out['original_max_position_embeddings']}"
            )


def longrope_attention_factor(
    factor: float, original_max_position_embeddings: int
) -> float:
    """LongRoPE's default attention factor √(1 + ln s / ln L) for s > 1, else 1.

    It multiplies cos and sin, as YaRN's temperature does. transformers 5.23
    (``_compute_longrope_parameters``) and Microsoft's Phi-3 code use it with
    s = max_position_embeddings / original_max_position_embeddings unless the
    config gives ``factor``.

    Args:
        factor: the context-extension factor s (a float).
        original_max_position_embeddings: the training length L (an int ≥ 2 when
            s > 1).

    Returns:
        A float ≥ 1.

    Source: transformers 5.23, ``modeling_rope_utils._compute_longrope_parameters``
    (the Phi-3-mini-128K / Phi-3.5 / Phi-4-mini configs of Abdin et al. 2024,
    arXiv:2404.14219, rely on it).
    """
    if factor <= 1.0:
        return 1.0
    return math.sqrt(1 + math.log(factor) / math.log(original_max_position_embeddings))


def yarn_attention_factor(factor: float) -> float:
    """YaRN's attention temperature √(1/t) = 0.1·ln s + 1 for s > 1, else 1 (Peng et al.
    2023, Eq. 22)."""
    return 0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0


def yarn_correction_dim(
    num_rotations: float, dim: int, base: float, original_max_position_embeddings: int
) -> float:
    """The (fractional) pair index i whose wavelength 2π·b^(2i/d) fits ``num_rotations``
    times into the training length L: i = d·ln(L / (2π·r)) / (2·ln b) (Peng et al. 2023,
    Eq. 17 solved for i)."""
    return (
        dim
        * math.log(original_max_position_embeddings / (num_rotations * 2 * math.pi))
        / (2 * math.log(base))
    )


def yarn_ramp(
    dim: int,
    base: float,
    *,
    beta_fast: float,
    beta_slow: float,
    original_max_position_embeddings: int,
    truncate: bool = True,
) -> torch.Tensor:
    """γ_i for each pair i: 0 where the frequency is kept (many rotations within L), 1
    where it is interpolated (few rotations), linear in i in between (Peng et al. 2023,
    Eq. 18–19).

    Args:
        dim: rotated features d. base: frequency base b.
        beta_fast, beta_slow: rotations within L that bound the ramp (YaRN: 32 and 1).
        original_max_position_embeddings: the training length L.
        truncate: round the ramp's ends to whole pair indices (floor / ceil), as Hugging
            Face does by default; a bool.

    Returns:
        float32 tensor (dim/2,) in [0, 1].

    Raises:
        TypeError: ``truncate`` not a bool.
    """
    truncate = _check_bool("truncate", truncate)
    low = yarn_correction_dim(beta_fast, dim, base, original_max_position_embeddings)
    high = yarn_correction_dim(beta_slow, dim, base, original_max_position_embeddings)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001  # a ramp of zero width
    ramp = (torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low)
    return ramp.clamp(0, 1)


def rope_inv_freq(
    rotary_dim: int,
    base: float = DEFAULT_BASE,
    scaling: dict | None = None,
    seq_len: int | torch.Tensor | None = None,
) -> tuple[torch.Tensor, float]:
    """RoPE frequencies, optionally scaled for a longer context, and the attention
    factor.

    Args:
        rotary_dim: r, the number of rotated features: ``head_dim`` for full RoPE, the
            rotated width for partial rotary (as Hugging Face and GPT-NeoX pass it:
            the exponents are 2i/r) — except for "proportional", which takes the full
            head width d_h here and rotates part of it itself.
        base: frequency base b, finite and > 0; default ``DEFAULT_BASE`` (10000).
        scaling: None (or ``{"rope_type": "default"}``) for plain RoPE, or a dict
            with ``"rope_type"`` in ``"linear"``, ``"ntk"``, ``"dynamic"``,
            ``"yarn"``, ``"llama3"``, ``"longrope"``, ``"proportional"`` (the keys of
            :data:`ROPE_INIT_FUNCTIONS`, one function per type) and Hugging Face's
            parameter names: ``factor`` (s ≥ 1;
            required except for "longrope" and "proportional");
            ``original_max_position_embeddings`` (the training length L, int;
            "dynamic", "yarn", "llama3", "longrope"); ``beta_fast`` (32),
            ``beta_slow`` (1), ``attention_factor`` (default 0.1·ln s + 1),
            ``truncate`` (a bool, default True) for "yarn"; ``low_freq_factor``,
            ``high_freq_factor`` for "llama3"; for "longrope" ``short_factor`` and
            ``long_factor`` (lists of rotary_dim/2 numbers > 0, one λ_i per pair),
            ``factor`` (optional, used only for the attention factor) and
            ``attention_factor`` (default √(1 + ln s / ln L); one of the two is
            needed); for "proportional" ``partial_rotary_factor`` p in [0, 1]
            (default 1) and ``factor`` (default 1).
        seq_len: the current sequence length ℓ, used by "dynamic" (None means L) and
            "longrope" (``long_factor`` when ℓ > L, else ``short_factor``; None
            means short): an int or a 0-d integer tensor (transformers passes
            ``max(position_ids) + 1``).

    Returns:
        ``(inv_freq, attention_factor)``: float32 tensor (rotary_dim/2,) in radians per
        position, on the CPU (for "proportional" its last d_h/2 − ⌊p·d_h/2⌋ entries
        are 0: those pairs do not rotate); a float that multiplies cos and sin (1.0
        except for "yarn" and "longrope").

    Raises:
        ValueError: odd rotary_dim (head_dim for "proportional"), base not finite
            and > 0, or an invalid scaling (see :func:`check_scaling`), longrope
            factor lists whose length is not rotary_dim/2, or seq_len < 1.
        TypeError: seq_len neither None, an int nor a 0-d integer tensor; a yarn
            ``truncate`` that is not a bool; see :func:`check_scaling`.

    Sources: Chen et al. 2023 (PI), Eq. 2; Peng et al. 2023 (YaRN), §3.1–3.4; Meta's
    Llama 3.1 ``apply_scaling``; Ding et al. 2024 (LongRoPE, arXiv:2402.13753), the
    per-dimension rescaling θ_i/λ_i with separate short and long factors, and the
    Phi-3 technical report (Abdin et al. 2024, arXiv:2404.14219) for its use in
    Phi-3; "proportional" has no paper: it is transformers 5.23's
    ``_compute_proportional_rope_parameters``, written for Gemma 4. Parity with
    ``transformers.modeling_rope_utils.ROPE_INIT_FUNCTIONS`` (5.23) for every type
    but "ntk".
    """
    scaling = check_scaling(scaling)
    proportional = scaling is not None and scaling["rope_type"] == "proportional"
    dim = check_even_dim("head_dim" if proportional else "rotary_dim", rotary_dim)
    base = check_base(base)
    seq_len = _check_seq_len(seq_len)
    if scaling is None:
        return compute_inv_freq(dim, base), 1.0
    rule = ROPE_INIT_FUNCTIONS[scaling["rope_type"]]
    return rule.inv_freq(dim, base, scaling, seq_len)


# One function per rope_type, as transformers' ROPE_INIT_FUNCTIONS: each takes the
# rotated width d (dim), the base b, the validated scaling dict and the current length
# ℓ (seq_len, or None) and returns (inv_freq (d/2,) float32, attention_factor).


def _default(dim: int, base: float, scaling: dict, seq_len: int | None):
    """Plain RoPE, θ_i = b^(−2i/d) (Su et al. 2021, Eq. 15)."""
    return compute_inv_freq(dim, base), 1.0


def _linear(dim: int, base: float, scaling: dict, seq_len: int | None):
    """Position Interpolation: θ_i / s (Chen et al. 2023, Eq. 2)."""
    return compute_inv_freq(dim, base) / scaling["factor"], 1.0


def _ntk(dim: int, base: float, scaling: dict, seq_len: int | None):
    """NTK-aware: the base b·s^(d/(d−2)) (bloc97 2023; Peng et al. 2023 §3.1)."""
    factor = scaling["factor"]
    return compute_inv_freq(dim, base * factor ** (dim / (dim - 2))), 1.0


def _dynamic(dim: int, base: float, scaling: dict, seq_len: int | None):
    """Dynamic NTK: the NTK base at s' = s·ℓ/L − (s − 1) for ℓ > L (Peng et al.
    2023 §3.3)."""
    factor = scaling["factor"]
    original = scaling["original_max_position_embeddings"]
    length = original if seq_len is None else max(seq_len, original)
    scale = factor * length / original - (factor - 1)
    return compute_inv_freq(dim, base * scale ** (dim / (dim - 2))), 1.0


def _yarn(dim: int, base: float, scaling: dict, seq_len: int | None):
    """YaRN: per pair, interpolate by the ramp γ_i (1: interpolate), and the
    attention factor 0.1·ln s + 1 (Peng et al. 2023, Eq. 18–23)."""
    inv_freq, factor = compute_inv_freq(dim, base), scaling["factor"]
    gamma = yarn_ramp(
        dim,
        base,
        beta_fast=scaling["beta_fast"],
        beta_slow=scaling["beta_slow"],
        original_max_position_embeddings=scaling["original_max_position_embeddings"],
        truncate=scaling["truncate"],
    )
    attention_factor = scaling.get("attention_factor")
    if attention_factor is None:
        attention_factor = yarn_attention_factor(factor)
    inv_freq = inv_freq * (1 - gamma) + (inv_freq / factor) * gamma
    return inv_freq, float(attention_factor)


def _llama3(dim: int, base: float, scaling: dict, seq_len: int | None):
    """Llama 3.1: interpolate wavelengths longer than L/low_freq_factor by s, keep
    those shorter than L/high_freq_factor, blend in L/λ between (Meta's reference
    ``apply_scaling``). With low_freq_factor = high_freq_factor (Llama 4 Scout's
    released config: both 1) there is no blended band: a pair is kept when
    L/λ ≥ low, interpolated otherwise (transformers 5.23
    ``_compute_llama3_parameters`` computes the same, warning only)."""
    inv_freq, factor = compute_inv_freq(dim, base), scaling["factor"]
    original = scaling["original_max_position_embeddings"]
    low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
    wavelength = 2 * math.pi / inv_freq
    # 0: interpolate, 1: keep
    if high == low:
        smooth = (original / wavelength >= low).to(inv_freq.dtype)
    else:
        smooth = ((original / wavelength - low) / (high - low)).clamp(0, 1)
    return (1 - smooth) * inv_freq / factor + smooth * inv_freq, 1.0


def _proportional(dim: int, base: float, scaling: dict, seq_len: int | None):
    """Gemma 4's global layers: ⌊p·d_h/2⌋ pairs rotate with exponents 2i/d_h of the
    full head, the others get θ = 0 (transformers'
    ``_compute_proportional_rope_parameters``)."""
    inv_freq = compute_inv_freq(dim, base)
    angles = int(scaling["partial_rotary_factor"] * dim // 2)
    inv_freq[angles:] = 0.0
    return inv_freq / scaling["factor"], 1.0


def _longrope(
    dim: int, base: float, scaling: dict, seq_len: int | None
) -> tuple[torch.Tensor, float]:
    """LongRoPE: θ_i / λ_i with λ = long_factor for ℓ > L, else short_factor."""
    original = scaling["original_max_position_embeddings"]
    for name in ("short_factor", "long_factor"):
        if len(scaling[name]) != dim // 2:
            raise ValueError(
                f"longrope {name} has {len(scaling[name])} entries, but rotary_dim = "
                f"{dim} rotated features make {dim // 2} pairs: it needs "
                f"rotary_dim/2 = {dim // 2} (one factor per pair)"
            )
    use_long = seq_len is not None and seq_len > original
    ext = torch.tensor(
        scaling["long_factor" if use_long else "short_factor"], dtype=torch.float64
    )
    inv_freq = (compute_inv_freq(dim, base, dtype=torch.float64) / ext).float()
    attention_factor = scaling["attention_factor"]
    if attention_factor is None:
        attention_factor = longrope_attention_factor(scaling["factor"], original)
    return inv_freq, float(attention_factor)


@dataclass(frozen=True)
class RopeType:
    """One ``rope_type``: the function that computes its frequencies, the keys it
    needs and may take (besides ``rope_type``), their defaults, and the checks of its
    own values (run on a copy of the dict after ``factor`` and
    ``original_max_position_embeddings`` are validated)."""

    inv_freq: Callable[[int, float, dict, int | None], tuple[torch.Tensor, float]]
    required: frozenset[str] = frozenset()
    optional: frozenset[str] = frozenset()
    defaults: Mapping[str, object] = field(default_factory=dict)
    check: Callable[[dict], None] = _check_nothing


_LENGTH = "original_max_position_embeddings"

#: Every ``rope_type`` posenc implements, by name. To add one, write its function and
#: add an entry: :func:`check_scaling` and :func:`rope_inv_freq` read only this dict.
ROPE_INIT_FUNCTIONS: dict[str, RopeType] = {
    "default": RopeType(_default),
    "linear": RopeType(_linear, frozenset({"factor"})),
    "ntk": RopeType(_ntk, frozenset({"factor"})),
    "dynamic": RopeType(_dynamic, frozenset({"factor", _LENGTH})),
    "yarn": RopeType(
        _yarn,
        frozenset({"factor", _LENGTH}),
        frozenset({"beta_fast", "beta_slow", "attention_factor", "truncate"}),
        {"beta_fast": 32.0, "beta_slow": 1.0, "truncate": True},
        _check_yarn,
    ),
    "llama3": RopeType(
        _llama3,
        frozenset({"factor", _LENGTH, "low_freq_factor", "high_freq_factor"}),
        check=_check_llama3,
    ),
    "longrope": RopeType(
        _longrope,
        frozenset({"short_factor", "long_factor", _LENGTH}),
        frozenset({"factor", "attention_factor"}),
        {"factor": None},
        _check_longrope,
    ),
    "proportional": RopeType(
        _proportional,
        optional=frozenset({"factor", "partial_rotary_factor"}),
        defaults={"factor": 1.0, "partial_rotary_factor": 1.0},
        check=_check_proportional,
    ),
}
#: The ``rope_type`` names of :data:`ROPE_INIT_FUNCTIONS`.
ROPE_TYPES = tuple(ROPE_INIT_FUNCTIONS)
