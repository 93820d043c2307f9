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
  L/high_freq_factor, and blend in between.

Parameter names and the formulas follow Hugging Face's
``transformers.modeling_rope_utils``, and the tests hold the results equal to its
``ROPE_INIT_FUNCTIONS`` (static "ntk" against "dynamic", which equals it at the length
where ``factor·ℓ/L − (factor − 1) = s``).
"""

from __future__ import annotations

import math
from numbers import Integral

import torch

from ._checks import check_base, check_choice, check_even_dim
from .sinusoidal import compute_inv_freq

ROPE_TYPES = ("linear", "ntk", "dynamic", "yarn", "llama3")

_REQUIRED = {
    "linear": {"factor"},
    "ntk": {"factor"},
    "dynamic": {"factor", "original_max_position_embeddings"},
    "yarn": {"factor", "original_max_position_embeddings"},
    "llama3": {
        "factor",
        "original_max_position_embeddings",
        "low_freq_factor",
        "high_freq_factor",
    },
}
_OPTIONAL = {
    "linear": set(),
    "ntk": set(),
    "dynamic": set(),
    "yarn": {"beta_fast", "beta_slow", "attention_factor", "truncate"},
    "llama3": set(),
}


def _positive(name: str, value: object) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value <= 0
    ):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return float(value)


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
            is not a bool.
        ValueError: unknown ``rope_type``; a missing or unknown key (the message names
            it); factor < 1; a length that is not a positive integer; beta_fast ≤
            beta_slow; low_freq_factor ≥ high_freq_factor; a non-positive parameter.
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
    keys = set(scaling) - {"rope_type"}
    missing = _REQUIRED[rope_type] - keys
    if missing:
        raise ValueError(
            f"rope_type {rope_type!r} needs {sorted(missing)}; "
            f"got keys {sorted(scaling)}"
        )
    unknown = keys - _REQUIRED[rope_type] - _OPTIONAL[rope_type]
    if unknown:
        allowed = sorted(_REQUIRED[rope_type] | _OPTIONAL[rope_type])
        raise ValueError(
            f"rope_type {rope_type!r} does not take {sorted(unknown)}; "
            f"its keys are {allowed}"
        )
    out = dict(scaling)
    out["factor"] = _positive("factor", scaling["factor"])
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
    if rope_type == "yarn":
        out["beta_fast"] = _positive("beta_fast", out.get("beta_fast", 32.0))
        out["beta_slow"] = _positive("beta_slow", out.get("beta_slow", 1.0))
        if out["beta_fast"] <= out["beta_slow"]:
            raise ValueError(
                f"beta_fast must exceed beta_slow, got beta_fast="
                f"{out['beta_fast']}, beta_slow={out['beta_slow']}"
            )
        if out.get("attention_factor") is not None:
            temperature = _positive("attention_factor", out["attention_factor"])
            out["attention_factor"] = temperature
        out["truncate"] = _check_bool("truncate", out.get("truncate", True))
    if rope_type == "llama3":
        low = _positive("low_freq_factor", out["low_freq_factor"])
        high = _positive("high_freq_factor", out["high_freq_factor"])
        if low >= high:
            raise ValueError(
                f"low_freq_factor must be below high_freq_factor, got {low} and {high}"
            )
    return out


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
    head_dim: int,
    base: float = 10000.0,
    scaling: dict | None = None,
    seq_len: int | torch.Tensor | None = None,
) -> tuple[torch.Tensor, float]:
    """RoPE frequencies, optionally scaled for a longer context, and the attention
    factor.

    Args:
        head_dim: the number of rotated features d (pass rotary_dim for partial rotary,
            as Hugging Face and GPT-NeoX do: the exponents are 2i/rotary_dim).
        base: frequency base b, finite and > 0.
        scaling: None for plain RoPE, or a dict with ``"rope_type"`` in ``"linear"``,
            ``"ntk"``, ``"dynamic"``, ``"yarn"``, ``"llama3"`` and Hugging Face's
            parameter names: ``factor`` (s ≥ 1, all types);
            ``original_max_position_embeddings`` (the training length L, int; "dynamic",
            "yarn", "llama3"); ``beta_fast`` (32), ``beta_slow`` (1),
            ``attention_factor`` (default 0.1·ln s + 1), ``truncate`` (a bool, default
            True) for "yarn"; ``low_freq_factor``, ``high_freq_factor`` for "llama3".
        seq_len: the current sequence length ℓ, used by "dynamic" only (None means
            L): an int or a 0-d integer tensor (transformers passes
            ``max(position_ids) + 1``).

    Returns:
        ``(inv_freq, attention_factor)``: float32 tensor (head_dim/2,) in radians per
        position, on the CPU; a float that multiplies cos and sin (1.0 except for
        "yarn").

    Raises:
        ValueError: odd head_dim, base not finite and > 0, or an invalid scaling (see
            :func:`check_scaling`), or seq_len < 1.
        TypeError: seq_len neither None, an int nor a 0-d integer tensor; a yarn
            ``truncate`` that is not a bool.

    Sources: Chen et al. 2023 (PI), Eq. 2; Peng et al. 2023 (YaRN), §3.1–3.4; Meta's
    Llama 3.1 ``apply_scaling``; parity with
    ``transformers.modeling_rope_utils.ROPE_INIT_FUNCTIONS``.
    """
    dim = check_even_dim("head_dim", head_dim)
    base = check_base(base)
    scaling = check_scaling(scaling)
    seq_len = _check_seq_len(seq_len)
    inv_freq = compute_inv_freq(dim, base)
    if scaling is None:
        return inv_freq, 1.0
    rope_type, factor = scaling["rope_type"], scaling["factor"]
    if rope_type == "linear":
        return inv_freq / factor, 1.0
    if rope_type == "ntk":
        return compute_inv_freq(dim, base * factor ** (dim / (dim - 2))), 1.0
    if rope_type == "dynamic":
        original = scaling["original_max_position_embeddings"]
        length = original if seq_len is None else max(seq_len, original)
        scale = factor * length / original - (factor - 1)
        return compute_inv_freq(dim, base * scale ** (dim / (dim - 2))), 1.0
    if rope_type == "yarn":
        original = scaling["original_max_position_embeddings"]
        gamma = yarn_ramp(
            dim,
            base,
            beta_fast=scaling["beta_fast"],
            beta_slow=scaling["beta_slow"],
            original_max_position_embeddings=original,
            truncate=scaling["truncate"],
        )
        attention_factor = scaling.get("attention_factor")
        if attention_factor is None:
            attention_factor = yarn_attention_factor(factor)
        inv_freq = inv_freq * (1 - gamma) + (inv_freq / factor) * gamma
        return inv_freq, float(attention_factor)
    # llama3
    original = scaling["original_max_position_embeddings"]
    low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
    wavelength = 2 * math.pi / inv_freq
    # 0: interpolate, 1: keep
    smooth = ((original / wavelength - low) / (high - low)).clamp(0, 1)
    return (1 - smooth) * inv_freq / factor + smooth * inv_freq, 1.0
