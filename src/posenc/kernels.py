"""Kerple: kernelized relative positional embedding (Chi et al., NeurIPS 2022, "KERPLE:
Kernelized Relative Positional Embedding for Length Extrapolation", arXiv:2205.09921).

Kerple adds to the score of query position m and key position n ≤ m a conditionally
positive definite kernel of the distance |m − n|, shifted to be ≤ 0, with
two positive parameters per head, r₁ and r₂ (the paper's §3 derives the kernels, §4
the two variants):

* the **log** kernel:    b_h(m, n) = −r₁ · log(1 + r₂ · |m − n|);
* the **power** kernel:  b_h(m, n) = −r₁ · |m − n|^{r₂},  0 < r₂ ≤ 2.

ALiBi is the power kernel with r₂ = 1 and fixed r₁ (its slopes). Both are causal
biases: the authors' code (``megatron/mpu/layers.py`` of github.com/chijames/KERPLE,
classes ``ParallelKerpleLog`` and ``ParallelKerplePower``) builds the distance as
``tril(m − n)``, so every pair n > m (masked by the causal mask) gets distance 0; we do
the same with ``clamp(m − n, min=0)``.

Parametrisation, as the authors' code does it (not a softplus): r₁ and r₂ are stored
as they are and *projected* onto their ranges before every use, in place on the
parameters' data (``param.data.clamp_(min=eps)``, and ``max=2`` for the power kernel's
exponent), eps = 0.01: projected gradient descent. Their initialisation (same file):
for the log kernel r₁ ~ 2·U(0, 1) (``bias_p``) and r₂ ~ U(0, 1) (``bias_a``); for the
power kernel (the ``kerple_power_ap_`` configuration of ``generate_ymls.py``, learned
r₁ and r₂) r₁ ~ U(0, 1) (``bias_a``) and r₂ ~ 2·U(0, 1) (``bias_p``).

Both biases are elementwise functions of (h, m − n) with H pairs of parameters, so the
FlexAttention ``score_mod`` computes them in the kernel from the positions alone: no
table at all (ALiBi's form), and float positions work.
"""

from __future__ import annotations

import torch
from torch import nn

from ._checks import check_choice
from .schemes import (
    PositionalScheme,
    flex_pair,
    flex_positions,
    register_scheme,
    sequence_positions,
)

#: The kernels of Chi et al. 2022, §4.
KERNELS = ("log", "power")
#: The authors' lower bound on r₁ and r₂ (``self.eps = 1e-2`` in
#: ``megatron/mpu/layers.py``).
KERPLE_EPS = 1e-2
#: The power kernel's largest exponent: |m − n|^{r₂} is conditionally positive
#: definite for 0 < r₂ ≤ 2 (Chi et al. 2022, §3); the authors clamp r₂ to ≤ 2.
POWER_MAX_EXPONENT = 2.0


def kerple_bias(
    q_positions: torch.Tensor,
    k_positions: torch.Tensor,
    r1: torch.Tensor,
    r2: torch.Tensor,
    *,
    kernel: str = "log",
) -> torch.Tensor:
    """The Kerple score bias of every (query, key) pair, per head.

    ``log``: −r₁ · log(1 + r₂ · d); ``power``: −r₁ · d^{r₂}; d = max(m − n, 0), the
    causal distance (pairs n > m, which a causal mask hides, get d = 0, as in the
    authors' ``tril``).

    Args:
        q_positions: query positions m, integer or float: (T_q,), (B, T_q) or the
            attention's (B′, 1, T_q).
        k_positions: key positions n, (T_k,), (B, T_k) or (B′, 1, T_k).
        r1, r2: (H,) positive parameters (not checked here: the scheme projects them).
        kernel: ``"log"`` or ``"power"``.

    Returns:
        (H, T_q, T_k) for positions the batch shares, (B, H, T_q, T_k) per row; the
        dtype of ``r1`` (float32 for the scheme), ≤ 0 for r₁, r₂ > 0.

    Raises:
        ValueError: an unknown kernel; positions of another shape.

    Source: Chi et al. 2022, §4 (the logarithmic and power variants); the authors'
    ``ParallelKerpleLog.forward`` and ``ParallelKerplePower.forward``.
    """
    check_choice("kernel", kernel, KERNELS)
    q_positions = sequence_positions(q_positions)
    k_positions = sequence_positions(k_positions)
    distance = (q_positions[..., :, None] - k_positions[..., None, :]).to(r1.dtype)
    distance = distance.clamp(min=0).unsqueeze(-3)  # (..., 1, T_q, T_k)
    r1 = r1.to(distance.device)[:, None, None]  # (H, 1, 1)
    r2 = r2.to(distance.device)[:, None, None]
    if kernel == "log":
        return -r1 * torch.log1p(r2 * distance)
    return -r1 * distance.pow(r2)


@register_scheme
class KerpleScheme(PositionalScheme):
    """``"kerple"``: Chi et al. 2022's log kernel (default) or power kernel added to
    the scores (plug-in point 3), with r₁, r₂ learned per head.

    Args:
        d_model, num_heads: model sizes.
        kernel: ``"log"`` (default; the variant that extrapolated best in the paper's
            experiments) or ``"power"``.

    Attributes:
        r1, r2: (H,) float32 parameters, projected onto [0.01, ∞) (r₂ of the power
            kernel onto [0.01, 2]) before every use, as the authors' code does.

    Raises:
        ValueError: an unknown kernel (and the base class's size errors).
    """

    name = "kerple"
    hooks = frozenset({"score_bias", "score_mod"})
    #: A study condition, not a chapter's run (:attr:`PositionalScheme.study_only`).
    study_only = True

    def __init__(self, *, d_model: int, num_heads: int, kernel: str = "log") -> None:
        super().__init__(d_model=d_model, num_heads=num_heads)
        self.kernel = check_choice("kernel", kernel, KERNELS)
        scale_r1, scale_r2 = (2.0, 1.0) if self.kernel == "log" else (1.0, 2.0)
        self.r1 = nn.Parameter(torch.rand(num_heads) * scale_r1)
        self.r2 = nn.Parameter(torch.rand(num_heads) * scale_r2)
        self.project_()

    @torch.no_grad()
    def project_(self) -> None:
        """Project r₁, r₂ onto their ranges in place, on the parameters' data (the
        authors' ``param.data.clamp_``): a no-op once they are inside."""
        self.r1.data.clamp_(min=KERPLE_EPS)
        top = POWER_MAX_EXPONENT if self.kernel == "power" else None
        self.r2.data.clamp_(min=KERPLE_EPS, max=top)

    def score_bias(self, q, k, q_positions, k_positions):
        self.project_()
        bias = kerple_bias(
            q_positions, k_positions, self.r1, self.r2, kernel=self.kernel
        )
        return bias.to(q.dtype)

    def score_mod(self, q_positions, k_positions, *, q=None, k=None):
        """The bias as a FlexAttention ``score_mod`` (see
        :meth:`PositionalScheme.score_mod`): the kernel of m − n computed pair by pair
        from the positions and the 2H parameters; no table and no T×T tensor. ``q``
        gives only the dtype; ``k`` is not needed."""
        self.project_()
        dtype = q.dtype if q is not None else self.r1.dtype
        r1, r2, log = self.r1.to(dtype), self.r2.to(dtype), self.kernel == "log"
        qp, kp = flex_positions(q_positions, k_positions)
        pair = flex_pair(qp.to(dtype), kp.to(dtype))

        def mod(score, b, h, q_idx, kv_idx):
            m, n = pair(b, q_idx, kv_idx)
            distance = (m - n).clamp(min=0)
            if log:
                return score - r1[h] * torch.log1p(r2[h] * distance)
            return score - r1[h] * distance.pow(r2[h])

        return mod

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, kernel={self.kernel!r}"
