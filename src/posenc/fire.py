"""FIRE: functional interpolation for relative positions (Li et al., ICLR 2024,
"Functional Interpolation for Relative Positions Improves Long Context Transformers",
arXiv:2310.04418, §3).

FIRE adds to the score of query position i and key position j ≤ i (the paper's
notation; the book writes m and n) a bias that a small learned MLP f_θ computes from
the distance, log-transformed and normalised by the query's own position (§3,
"progressive interpolation"):

    b_h(i, j) = f_θ( ψ(i − j) / ψ(max(L, i)) )_h,    ψ(x) = log(c·x + 1),

with one output per head h. ψ compresses large distances (c > 0 learned); dividing by
ψ(max(L, i)) maps every causal pair of a query at i ≥ L into [0, 1]
(:func:`posenc.symbolic.kernels.fire_interpolation`), the same interval at any
length, so a longer context *interpolates* inside the domain the MLP was trained on
instead of extrapolating beyond it; the learned threshold L keeps short queries
(i < L) from being stretched over [0, 1]. FIRE is causal only: pairs j > i are
hidden by the causal mask (the code evaluates them at |i − j| so that they stay
finite).

Parametrisation (§3 and the paper's implementation): f_θ is Linear(1, 32) → ReLU →
Linear(32, H), PyTorch's default initialisation; c is one learned scalar, initialised
to 0.1 and used as |c|; the threshold is L = |ℓ · L₀| with a learned scalar ℓ
initialised to 1 and a fixed L₀ = 512; ε = 10⁻⁶ is added to the denominator. Those
defaults are the paper's for models trained at 2048 tokens; ``init_threshold`` sets
L₀ for another training length.

The bias depends on i and on i − j through a ratio, not on i − j alone, so no table of
O(T) entries holds it: :meth:`FireScheme.score_bias` builds (H, T_q, T_k). The
FlexAttention ``score_mod`` instead evaluates the 32-unit MLP pair by pair inside the
kernel (O(32·H) parameters captured, no T×T tensor).
"""

from __future__ import annotations

import math
from numbers import Real

import torch
from torch import nn

from ._checks import check_int
from .schemes import (
    PositionalScheme,
    flex_pair,
    flex_positions,
    register_scheme,
    sequence_positions,
)

#: The paper's defaults (Li et al. 2024, §3 and its implementation).
FIRE_MLP_WIDTH = 32
FIRE_INIT_C = 0.1
FIRE_INIT_THRESHOLD = 512.0
FIRE_EPS = 1e-6


def _check_positive(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(
            f"{name} must be a real number, got {value!r} of type "
            f"{type(value).__name__}"
        )
    value = float(value)
    if not math.isfinite(value) or value <= 0.0:
        raise ValueError(f"{name} must be finite and > 0, got {value}")
    return value


def fire_inputs(
    q_positions: torch.Tensor,
    k_positions: torch.Tensor,
    c: torch.Tensor,
    threshold: torch.Tensor,
    *,
    eps: float = FIRE_EPS,
) -> torch.Tensor:
    """The MLP's input of every pair, ψ(|i − j|) / (ψ(max(L, i)) + ε), ψ(x) =
    log(|c|·x + 1).

    Args:
        q_positions: query positions i, (T_q,), (B, T_q) or the attention's (B′, 1,
            T_q); integer or float.
        k_positions: key positions j, likewise with T_k.
        c: scalar tensor, the log transform's scale (used as |c|).
        threshold: scalar tensor, L > 0.
        eps: added to the denominator.

    Returns:
        (T_q, T_k) or (B, T_q, T_k), the dtype of ``c``; in [0, 1] for causal pairs
        (j ≤ i) of queries at i ≥ L ≥ 0.

    Raises:
        ValueError: positions of another shape.

    Source: Li et al. 2024, §3 (the log transform and progressive interpolation).
    """
    qp = sequence_positions(q_positions).to(c.dtype)
    kp = sequence_positions(k_positions).to(c.dtype)
    scale = c.abs()
    distance = (qp[..., :, None] - kp[..., None, :]).abs()  # (..., T_q, T_k)
    # ψ(max(L, i)): (..., T_q, 1)
    normaliser = torch.maximum(qp, threshold.to(qp.device))[..., :, None]
    return torch.log1p(scale * distance) / (torch.log1p(scale * normaliser) + eps)


@register_scheme
class FireScheme(PositionalScheme):
    """``"fire"``: FIRE's learned bias (plug-in point 3), one MLP output per head.

    Args:
        d_model, num_heads: model sizes.
        mlp_width: hidden units of f_θ (default 32, the paper's).
        init_c: initial c of ψ (default 0.1).
        init_threshold: L₀, the fixed factor of the threshold L = |ℓ·L₀| (default
            512, the paper's at a training length of 2048).

    Attributes:
        mlp: ``nn.Sequential(Linear(1, mlp_width), ReLU(), Linear(mlp_width, H))``.
        c: scalar parameter. threshold_scale: ℓ, scalar parameter (init 1).
        init_threshold: float L₀, a constant (not a parameter).

    Raises:
        TypeError / ValueError: mlp_width not an integer ≥ 1; init_c or
            init_threshold not finite and > 0.
    """

    name = "fire"
    hooks = frozenset({"score_bias", "score_mod"})
    #: A study condition, not a chapter's run (:attr:`PositionalScheme.study_only`).
    study_only = True

    def __init__(
        self,
        *,
        d_model: int,
        num_heads: int,
        mlp_width: int = FIRE_MLP_WIDTH,
        init_c: float = FIRE_INIT_C,
        init_threshold: float = FIRE_INIT_THRESHOLD,
    ) -> None:
        super().__init__(d_model=d_model, num_heads=num_heads)
        self.mlp_width = check_int("mlp_width", mlp_width, minimum=1)
        self.init_threshold = _check_positive("init_threshold", init_threshold)
        init_c = _check_positive("init_c", init_c)
        self.mlp = nn.Sequential(
            nn.Linear(1, self.mlp_width),
            nn.ReLU(),
            nn.Linear(self.mlp_width, num_heads),
        )
        self.c = nn.Parameter(torch.tensor(init_c))
        self.threshold_scale = nn.Parameter(torch.tensor(1.0))

    def threshold(self) -> torch.Tensor:
        """L = |ℓ · L₀|, a scalar tensor."""
        return (self.threshold_scale * self.init_threshold).abs()

    def score_bias(self, q, k, q_positions, k_positions):
        """(H, T_q, T_k) for positions the batch shares, (B, H, T_q, T_k) per row; the
        dtype of ``q``."""
        x = fire_inputs(q_positions, k_positions, self.c, self.threshold())
        bias = self.mlp(x.unsqueeze(-1)).movedim(-1, -3)  # (..., H, T_q, T_k)
        return bias.to(q.dtype)

    def score_mod(self, q_positions, k_positions, *, q=None, k=None):
        """The bias as a FlexAttention ``score_mod`` (see
        :meth:`PositionalScheme.score_mod`): ψ, the normaliser and the MLP's
        ``mlp_width`` hidden units evaluated pair by pair in the kernel, from the
        positions, |c|, L and the MLP's weights (O(mlp_width · H) numbers); no T×T
        tensor. ``q`` gives only the dtype; ``k`` is not needed."""
        dtype = q.dtype if q is not None else self.c.dtype
        first, last = self.mlp[0], self.mlp[2]
        w1, b1 = first.weight[:, 0].to(dtype), first.bias.to(dtype)  # (W,), (W,)
        w2, b2 = last.weight.to(dtype), last.bias.to(dtype)  # (H, W), (H,)
        scale, threshold = self.c.abs().to(dtype), self.threshold().to(dtype)
        qp, kp = flex_positions(q_positions, k_positions)
        pair = flex_pair(qp.to(dtype), kp.to(dtype))
        width = self.mlp_width

        def mod(score, b, h, q_idx, kv_idx):
            i, j = pair(b, q_idx, kv_idx)
            normaliser = torch.log1p(scale * torch.maximum(i, threshold)) + FIRE_EPS
            x = torch.log1p(scale * (i - j).abs()) / normaliser
            out = b2[h]
            for unit in range(width):  # unrolled into the kernel
                out = out + w2[h, unit] * torch.relu(w1[unit] * x + b1[unit])
            return score + out

        return mod

    def extra_repr(self) -> str:
        return (
            f"{super().extra_repr()}, mlp_width={self.mlp_width}, "
            f"init_threshold={self.init_threshold}"
        )
