"""ALiBi: attention with linear biases (Press et al. 2022, "Train Short, Test Long",
§3).

No position vectors at all: each head h adds ``−m_h · (m − n)`` to the score of query
position m and key position n ≤ m, a penalty linear in the distance with a head-specific
slope m_h.
"""

from __future__ import annotations

import math

import torch

from ._checks import check_int
from .schemes import (
    PositionalScheme,
    flex_positions,
    register_scheme,
    sequence_positions,
)


def _power_of_two_slopes(n: int) -> list[float]:
    start = 2.0 ** (
        -8.0 / n
    )  # 2^(-8/n): the geometric sequence 2^(-8/n), 2^(-16/n), ..., 2^(-8)
    return [start ** (i + 1) for i in range(n)]


def alibi_slopes(num_heads: int) -> torch.Tensor:
    """The head slopes m_1 … m_H of ALiBi (Press et al. 2022, §3).

    For H a power of two, the geometric sequence starting at 2^(−8/H) with that same
    ratio: for H = 8, 1/2, 1/4, …, 1/256. For other H, the rule of the authors' code
    (fairseq's ``get_slopes``; the paper trains only 8- and 16-head models and states
    the geometric rule alone), which BLOOM and transformers copy: the slopes of the
    closest smaller power of two, P, followed by every other slope of 2P (its
    odd-indexed ones), until there are H.

    Args:
        num_heads: H ≥ 1.

    Returns:
        float32 tensor (H,), decreasing for powers of two, all in (0, 1).

    Raises:
        TypeError / ValueError: num_heads not an integer ≥ 1.
    """
    num_heads = check_int("num_heads", num_heads, minimum=1)
    closest = 2 ** int(math.floor(math.log2(num_heads)))
    slopes = _power_of_two_slopes(closest)
    if closest < num_heads:
        slopes += _power_of_two_slopes(2 * closest)[0::2][: num_heads - closest]
    return torch.tensor(slopes, dtype=torch.float32)


def alibi_bias(
    q_positions: torch.Tensor,
    k_positions: torch.Tensor,
    slopes: torch.Tensor,
    *,
    symmetric: bool = False,
) -> torch.Tensor:
    """The ALiBi score bias ``−m_h · (m − n)``, or ``−m_h · |m − n|`` when
    ``symmetric``.

    Args:
        q_positions: query positions m, integer or float: (T_q,) for every sequence
            alike, or (B, T_q) or (B, 1, T_q) (the attention's form) per sequence.
        k_positions: key positions n, (T_k,), (B, T_k) or (B, 1, T_k), like q_positions.
        slopes: (H,) head slopes, e.g. :func:`alibi_slopes`.
        symmetric: the bidirectional variant for encoders.

    Returns:
        float32 (H, T_q, T_k) for 1-D positions, (B, H, T_q, T_k) for batched ones.
        Under a causal mask only n ≤ m matters, where the bias is ≤ 0.

    Raises:
        ValueError: positions of any other shape.

    Source: Press et al. 2022, "Train Short, Test Long", §3 (Figure 3).
    """
    q_positions = sequence_positions(q_positions)  # (T_q,) or (B, T_q)
    k_positions = sequence_positions(k_positions)
    distance = (q_positions[..., :, None] - k_positions[..., None, :]).float()  # m − n
    if symmetric:
        distance = distance.abs()
    # (H, 1, 1) · (..., 1, T_q, T_k): the heads go in front of the two position axes
    return -slopes.to(distance.device)[:, None, None] * distance.unsqueeze(-3)


def _flex_positions(q_positions, k_positions):
    """Float positions for a ``score_mod`` (:func:`posenc.schemes.flex_positions`)."""
    qp, kp = flex_positions(q_positions, k_positions)
    return qp.float(), kp.float()


@register_scheme
class AlibiScheme(PositionalScheme):
    """``"alibi"``: add :func:`alibi_bias` to the scores (plug-in point 3). No
    parameters. Also provides a FlexAttention ``score_mod``, so no T×T bias needs to be
    stored.

    Args:
        d_model, num_heads: model sizes. symmetric: use |m − n| (encoders).
    """

    name = "alibi"
    hooks = frozenset({"score_bias", "score_mod"})

    def __init__(
        self, *, d_model: int, num_heads: int, symmetric: bool = False
    ) -> None:
        super().__init__(d_model=d_model, num_heads=num_heads)
        self.symmetric = bool(symmetric)
        self.register_buffer("slopes", alibi_slopes(num_heads), persistent=False)

    def score_bias(self, q, k, q_positions, k_positions):
        bias = alibi_bias(
            q_positions, k_positions, self.slopes, symmetric=self.symmetric
        )
        return bias.to(q.dtype)

    def score_mod(self, q_positions, k_positions, *, q=None, k=None):
        """The bias as a FlexAttention ``score_mod`` (see
        :meth:`PositionalScheme.score_mod`): ``score − m_h · (m − n)``, reading the
        positions (T_q + T_k floats, or B rows of them) and the H slopes; ``q`` and
        ``k`` are not needed. No T×T tensor is stored."""
        slopes, symmetric = self.slopes, self.symmetric
        qp, kp = _flex_positions(q_positions, k_positions)

        if qp.dim() == 1:  # one set of positions for the whole batch

            def mod(score, b, h, q_idx, kv_idx):
                distance = qp[q_idx] - kp[kv_idx]
                if symmetric:
                    distance = distance.abs()
                return score - slopes[h] * distance

        else:  # positions per sequence: row b of the batch

            def mod(score, b, h, q_idx, kv_idx):
                distance = qp[b, q_idx] - kp[b, kv_idx]
                if symmetric:
                    distance = distance.abs()
                return score - slopes[h] * distance

        return mod
