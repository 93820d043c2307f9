"""Numerical checks of the properties an encoding may have (Wang et al. 2021, "On Position
Embeddings in BERT", §3).

All three are statements about a *positional similarity* g(m, n) between query position m and key
position n: the dot product ⟨p_m, p_n⟩ of absolute position vectors, or the positional part of the
attention score for relative schemes.

* **translation invariance**: g(m, n) depends on n − m only (g is constant along every diagonal);
* **symmetry**: g(m, n) = g(n, m);
* **monotonicity**: for each m, g(m, n) strictly decreases as |n − m| grows (farther positions are
  less similar), on both sides.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class PropertyReport:
    """Which properties a similarity matrix has, and by how much it misses the others.

    Attributes:
        translation_invariant, symmetric, monotonic: the verdicts (within ``atol``).
        diagonal_spread: the largest max − min along one diagonal (0 for translation invariance).
        asymmetry: max |g(m, n) − g(n, m)|.
        monotonicity_violations: the fraction of steps away from the diagonal at which g does not
            decrease.
    """

    translation_invariant: bool
    symmetric: bool
    monotonic: bool
    diagonal_spread: float
    asymmetry: float
    monotonicity_violations: float

    def row(self) -> dict[str, str]:
        """The report as table cells, ✓ or ✗."""
        mark = {True: "✓", False: "✗"}
        return {
            "translation invariance": mark[self.translation_invariant],
            "symmetry": mark[self.symmetric],
            "monotonicity": mark[self.monotonic],
        }


def position_similarity(vectors: torch.Tensor) -> torch.Tensor:
    """g(m, n) = ⟨p_m, p_n⟩ for a table of position vectors ``(T, d)`` → ``(T, T)`` (float64)."""
    if vectors.dim() != 2:
        raise ValueError(f"vectors must have shape (T, d), got {tuple(vectors.shape)}")
    v = vectors.detach().double()
    return v @ v.T


def check_properties(similarity: torch.Tensor, *, atol: float = 1e-6) -> PropertyReport:
    """Check the three properties on a square similarity matrix ``(T, T)``.

    Args:
        similarity: g(m, n) for m, n = 0 … T−1 (rows are query positions).
        atol: absolute tolerance for the equalities and for "strictly decreases".

    Returns:
        A :class:`PropertyReport`.

    Raises:
        ValueError: if the matrix is not square or smaller than 2 × 2.
    """
    g = similarity.detach().double()
    if g.dim() != 2 or g.shape[0] != g.shape[1] or g.shape[0] < 2:
        raise ValueError(f"similarity must be a square (T, T) matrix with T >= 2, got {tuple(g.shape)}")
    size = g.shape[0]
    spread = max(float(d.max() - d.min()) for d in (g.diagonal(k) for k in range(-size + 1, size)))
    asymmetry = float((g - g.T).abs().max())
    steps, bad = 0, 0
    for m in range(size):
        for side in (g[m, m:], g[m, : m + 1].flip(0)):  # moving away from the diagonal
            diffs = side[1:] - side[:-1]
            steps += diffs.numel()
            bad += int((diffs > -atol).sum())
    violations = bad / steps
    return PropertyReport(spread <= atol, asymmetry <= atol, bad == 0, spread, asymmetry, violations)


def properties_table(reports: dict[str, PropertyReport], *, first_column: str = "scheme") -> str:
    """A Markdown table with one ✓/✗ row per report: the table the chapters fill in.

    Args:
        reports: ``{row name: PropertyReport}``. first_column: title of the name column.
    """
    names = ("translation invariance", "symmetry", "monotonicity")
    lines = [f"| {first_column} | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    lines += [f"| {row} | " + " | ".join(report.row()[n] for n in names) + " |" for row, report in reports.items()]
    return "\n".join(lines)
