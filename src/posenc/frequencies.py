"""The frequencies every sinusoidal and rotary encoding is built on: θ_i = b^(−2i/d)
(Vaswani et al. 2017, §3.5; Su et al. 2021, §3.3), and the one default base b.

Shapes: d features, d/2 frequencies (one per pair of features).
"""

from __future__ import annotations

import math

import torch

from ._checks import check_base, check_even_dim

#: The frequency base b of the original Transformer, RoFormer and most RoPE models
#: (Vaswani et al. 2017, §3.5): θ_i = 10000^(−2i/d).
DEFAULT_BASE = 10000.0


def compute_inv_freq(
    dim: int,
    base: float = DEFAULT_BASE,
    *,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """The inverse frequencies θ_i = base^(−2i/dim), i = 0 … dim/2 − 1, computed in log
    space.

    ``exp(−(2i/dim)·ln base)`` turns a linear ramp into the geometric sequence of
    frequencies without forming ``base**x`` itself, which overflows in float16 for
    large bases (base 500000 of Llama 3 exceeds float16's maximum of 65504). It is
    evaluated in float64 on the CPU and rounded once to ``dtype``, so each θ_i is the
    ``dtype`` number nearest the exact value (a float32 evaluation of the log form is
    off by up to ~7·10⁻⁷ relative, which becomes ~10⁻³ rad of angle at position 1000).

    Args:
        dim: even number of features (d for sinusoidal tables, the rotated width for
            RoPE).
        base: the frequency base b, finite and > 0.
        device: where to create the tensor.
        dtype: float32 (the default: RoPE's frequencies, as in Hugging Face) or float64
            (the sinusoidal tables, see :func:`sinusoidal_encoding`).

    Returns:
        ``dtype`` tensor ``(dim // 2,)``, decreasing from 1 to base^(−(dim−2)/dim)
        (radians per position), on ``device``.

    Raises:
        ValueError: if ``dim`` is not a positive even integer or ``base`` is not finite
            and > 0.

    Source: Vaswani et al. 2017, §3.5; the log-space form follows tensor2tensor's
    ``get_timing_signal_1d``.
    """
    dim = check_even_dim("dim", dim)
    base = check_base(base)
    exponents = torch.arange(0, dim, 2, dtype=torch.float64) / dim
    return torch.exp(exponents * -math.log(base)).to(device=device, dtype=dtype)
