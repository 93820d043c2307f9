"""Failure 3 of the chapter of failures: RoPE angles m·θ_i formed in bfloat16 or
float16 at large positions m, against the float32 angles of
:func:`posenc.rope.rope_cos_sin` (which :func:`posenc.rope.apply_rope` uses).

Two wrong ways, each written out and named so:

* :func:`wrong_half_precision_angles` — positions, θ_i and their product in the
  model's dtype (GPT-NeoX issue 1003; transformers' rotary before PR 29285; a
  matmul under ``torch.autocast``, diffusers issue 13920);
* :func:`wrong_cast_inv_freq` — float32 angles from θ_i rounded to bfloat16: what
  transformers 5.23's rotary module computes after ``model.to(torch.bfloat16)``,
  which casts its ``inv_freq`` buffer (``from_pretrained(dtype=...)`` keeps it in
  float32; both checked in tests/test_failures_configs.py).

Shapes: T positions, r/2 frequency pairs; angles and errors are (T, r/2), in radians.
"""

from __future__ import annotations

import math

import torch

from ...frequencies import compute_inv_freq
from ...rope import rope_cos_sin, rotate_half
from ...utils import cpu_float64


def wrong_half_precision_angles(
    positions: torch.Tensor, inv_freq: torch.Tensor, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """THE WRONG WAY: cos and sin of angles formed in ``dtype`` (bfloat16 or
    float16): positions (T,) and θ (r/2,) rounded to ``dtype`` and multiplied there.
    Returns ``(cos, sin)``, each (T, r/2) in ``dtype``."""
    angles = positions.to(dtype)[:, None] * inv_freq.to(dtype)
    return angles.cos(), angles.sin()


def wrong_cast_inv_freq(
    positions: torch.Tensor, inv_freq: torch.Tensor, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """THE WRONG WAY: float32 angles, but from θ_i rounded to ``dtype`` (an
    ``inv_freq`` buffer cast with the model). Returns ``(cos, sin)``, float32
    (T, r/2)."""
    angles = positions.float()[:, None] * inv_freq.to(dtype).float()
    return angles.cos(), angles.sin()


def _float32_angles(positions, inv_freq, dtype=None):
    """THE FIX: :func:`posenc.rope.rope_cos_sin`'s float32 angles (its half-layout
    tables hold each pair twice: the first r/2 columns are the pairs)."""
    cos, sin = rope_cos_sin(positions, inv_freq.float())
    half = inv_freq.numel()
    return cos[:, :half], sin[:, :half]


#: The ways compared by :func:`angle_errors`: name → (function, dtype).
WAYS = {
    "bfloat16 angles": (wrong_half_precision_angles, torch.bfloat16),
    "float16 angles": (wrong_half_precision_angles, torch.float16),
    "float32 angles, bfloat16 θ": (wrong_cast_inv_freq, torch.bfloat16),
    "float32 angles (apply_rope)": (_float32_angles, None),
}


def _angle_error(cos, sin, exact: torch.Tensor) -> torch.Tensor:
    """|angle − exact| wrapped to [0, π], float64 (T, r/2); π where the angle is not
    finite (float16 positions above 65504 are inf)."""
    cos, sin = cpu_float64(cos), cpu_float64(sin)
    c, s = exact.cos(), exact.sin()
    error = torch.atan2(sin * c - cos * s, cos * c + sin * s)  # angle − exact
    return error.abs().nan_to_num(nan=math.pi)


def angle_errors(
    head_dim: int = 64,
    base: float = 1e5,
    max_position: int = 131072,
    threshold: float = 0.1,
    offset: int = 16,
    seed: int = 0,
):
    """The angle error of each way of :data:`WAYS` at every position
    0 … max_position − 1, where it first exceeds ``threshold``, and what it does to
    q·k scores.

    The exact angle is m·θ_i in float64 with θ_i = b^(−2i/d_h) in float64. Scores:
    random q and k (d_h,), q at position m and k at m − ``offset`` (near) or at 0
    (far), rotated in float64 by each way's cos and sin (so only the angles differ),
    against the exact rotation; the error is relative to the root mean square of the
    exact scores over the positions. A θ_i error shifts q's and k's angles alike, so
    it shows in the score in proportion to the offset m − n; a rounded angle does
    not cancel. Defaults: SmolLM2's d_h = 64 and b = 1e5, up to 2^17 positions.

    Returns:
        ``(summary, curves)``: a pandas DataFrame, one row per way (``way``, ``first
        position > threshold`` (None if never), ``max error at 8191``, ``max error at
        {max_position − 1}`` (radians), ``score error, offset {offset}`` and ``score
        error, key at 0``: max relative score error over the positions), and a
        dict way → float64 tensor (max_position,) of the
        largest angle error over the pairs at each position.

    Sources: EleutherAI/gpt-neox issue 1003; huggingface/transformers PR 29285 and
    issue 25681.
    """
    import pandas as pd

    positions = torch.arange(max_position)
    exact_freq = compute_inv_freq(head_dim, base, dtype=torch.float64)
    exact = cpu_float64(positions)[:, None] * exact_freq  # (T, r/2)
    inv_freq = compute_inv_freq(head_dim, base)  # float32, the model's
    generator = torch.Generator().manual_seed(seed)
    q, k = torch.randn(2, head_dim, generator=generator, dtype=torch.float64)
    keys = {
        f"score error, offset {offset}": (positions - offset).clamp(min=0),
        "score error, key at 0": torch.zeros_like(positions),
    }
    exact_scores = {
        c: _scores(q, k, exact.cos(), exact.sin(), n) for c, n in keys.items()
    }
    summary, curves = [], {}
    for name, (way, dtype) in WAYS.items():
        cos, sin = way(positions, inv_freq, dtype)
        error = _angle_error(cos, sin, exact)
        curves[name] = error.max(dim=1).values
        over = (curves[name] > threshold).nonzero()
        row = {
            "way": name,
            f"first position > {threshold} rad": int(over[0]) if len(over) else None,
            "max error at 8191": float(curves[name][8191]),
            f"max error at {max_position - 1}": float(curves[name][-1]),
        }
        cos, sin = cpu_float64(cos).nan_to_num(), cpu_float64(sin).nan_to_num()
        for column, key_positions in keys.items():
            scores = _scores(q, k, cos, sin, key_positions)
            exact_column = exact_scores[column]
            rms = exact_column.pow(2).mean().sqrt()
            row[column] = float((scores - exact_column).abs().max() / rms)
        summary.append(row)
    return pd.DataFrame(summary), curves


def _scores(q, k, cos, sin, key_positions):
    """q·k with q at each position m (rows of cos, sin: (T, r/2)) and k at
    ``key_positions[m]``, in the half layout, float64 (T,)."""
    cos2, sin2 = torch.cat((cos, cos), -1), torch.cat((sin, sin), -1)  # (T, d_h)
    rotated_q = q * cos2 + rotate_half(q)[None] * sin2
    rotated_k = k * cos2[key_positions] + rotate_half(k)[None] * sin2[key_positions]
    return (rotated_q * rotated_k).sum(-1)
