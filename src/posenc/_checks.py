"""Input checks shared by the public functions.

Every check raises at the public boundary with a message that names the offending value
and the rule it broke (book/design.md, "Conventions"), so that a reader never meets an
IndexError from deep inside a tensor expression.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from numbers import Integral, Real

import torch


def check_int(name: str, value: object, *, minimum: int | None = None) -> int:
    """Return ``value`` as an int; raise TypeError for non-integers, ValueError below
    ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise TypeError(
            f"{name} must be an integer, got {value!r} of type {type(value).__name__}"
        )
    value = int(value)
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def check_even_dim(name: str, value: object) -> int:
    """A positive, even feature width (features come in sin/cos or rotation pairs)."""
    value = check_int(name, value, minimum=1)
    if value % 2:
        raise ValueError(f"{name} must be even (features come in pairs), got {value}")
    return value


def check_base(value: object) -> float:
    """The frequency base b of sinusoidal and rotary encodings: a finite number > 0."""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(
            f"base must be a real number, got {value!r} of type {type(value).__name__}"
        )
    value = float(value)
    if not math.isfinite(value) or value <= 0.0:
        raise ValueError(f"base must be finite and > 0, got {value}")
    return value


def check_choice(name: str, value: object, choices: Iterable[str]) -> str:
    """One of a fixed set of names."""
    choices = tuple(choices)
    if value not in choices:
        raise ValueError(
            f"{name} must be one of {', '.join(map(repr, choices))}; got {value!r}"
        )
    return value  # type: ignore[return-value]


def as_positions(
    positions: object, *, device: torch.device | None = None
) -> torch.Tensor:
    """Turn ``positions`` into a tensor.

    An int ``T`` means the positions ``0 .. T-1`` (int64). A tensor is returned
    unchanged after checking that it is real and finite; integer and float positions are
    both allowed (float positions arise from position interpolation).
    """
    if isinstance(positions, torch.Tensor):
        if positions.is_complex() or positions.dtype == torch.bool:
            raise TypeError(
                "positions must be an integer or float tensor, got dtype "
                f"{positions.dtype}"
            )
        if positions.is_floating_point() and not torch.isfinite(positions).all():
            raise ValueError("positions must be finite, got a tensor with inf or nan")
        return positions
    if isinstance(positions, bool) or not isinstance(positions, Integral):
        raise TypeError(
            "positions must be an int T (meaning 0..T-1) or a tensor of positions, "
            f"got {positions!r} of type {type(positions).__name__}"
        )
    seq_len = check_int("positions (sequence length T)", positions, minimum=0)
    return torch.arange(seq_len, device=device)
