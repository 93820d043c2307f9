"""Numerical checks of the properties an encoding may have (Wang et al. 2021, "On
Position Embeddings in BERT", §3), and one table of them across the registered schemes.

All three are statements about a *positional similarity* g(m, n) between query position
m and key position n: the dot product ⟨p_m, p_n⟩ of absolute position vectors, or the
positional part of the attention score for relative schemes.

* **translation invariance**: g(m, n) depends on n − m only (g is constant along every
    diagonal);
* **symmetry**: g(m, n) = g(n, m);
* **monotonicity**: for each m, g(m, n) strictly decreases as |n − m| grows (farther
  positions are less similar), on both sides.

A causal decoder only ever uses n ≤ m. With ``causal=True`` the checks look at that half
only:
translation invariance along the diagonals n − m ≤ 0, monotonicity moving left from the
diagonal, and symmetry is not defined (there is no "ahead" to compare with).

:func:`scheme_similarity` computes g for any registered scheme through its plug-in
points, so the table of properties (:func:`properties_table`) is built by iterating over
the registry.

Shapes:
    T positions, d width of an absolute encoding: encodings (T, d), similarity g (T, T)
    indexed [m, n] (query position m, key position n).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .schemes import PositionalScheme
from .utils import cpu_float64

#: The plug-in points of :class:`posenc.schemes.PositionalScheme`, as ``(method,
#: label)``.
PLUG_IN_POINTS = (
    ("embed", "embedding"),
    ("transform_qk", "q/k transform"),
    ("score_bias", "score bias"),
    ("value_term", "value term"),
)


@dataclass(frozen=True)
class PropertyReport:
    """Which properties a similarity matrix has, and by how much it misses the others.

    Attributes:
        translation_invariant, symmetric, monotonic: the verdicts (within the
            tolerance); ``symmetric`` is None when only the causal half was checked.
        diagonal_spread: the largest max − min along one (checked) diagonal (0 for
            translation invariance).
        asymmetry: max |g(m, n) − g(n, m)|; None for a causal check.
        monotonicity_violations: the fraction of steps away from the diagonal at which g
            does not decrease.
        causal: whether only n ≤ m was checked.
        max_abs: max |g(m, n)| over the checked entries.
    """

    translation_invariant: bool
    symmetric: bool | None
    monotonic: bool
    diagonal_spread: float
    asymmetry: float | None
    monotonicity_violations: float
    causal: bool = False
    max_abs: float = math.nan

    def row(self) -> dict[str, str]:
        """The report as table cells: ✓, ✗, or "n/a" for a property that is not
        defined."""
        mark = {True: "✓", False: "✗", None: "n/a"}
        return {
            "translation invariance": mark[self.translation_invariant],
            "symmetry": mark[self.symmetric],
            "monotonicity": mark[self.monotonic],
        }


def position_similarity(vectors: torch.Tensor) -> torch.Tensor:
    """g(m, n) = ⟨p_m, p_n⟩ for a table of position vectors ``(T, d)`` → ``(T, T)``
    (float64)."""
    if vectors.dim() != 2:
        raise ValueError(f"vectors must have shape (T, d), got {tuple(vectors.shape)}")
    v = cpu_float64(vectors)
    return v @ v.T


def check_properties(
    similarity: torch.Tensor,
    *,
    atol: float = 1e-6,
    rtol: float = 0.0,
    causal: bool = False,
) -> PropertyReport:
    """Check the three properties on a square similarity matrix ``(T, T)``.

    Args:
        similarity: g(m, n) for m, n = 0 … T−1 (rows are query positions).
        atol: absolute tolerance for the equalities and for "strictly decreases".
        rtol: tolerance relative to max |g| over the checked entries, added to ``atol``
            (for float32 inputs whose size is not known in advance).
        causal: check only n ≤ m (a decoder's half); symmetry is then not defined
            (None).

    Returns:
        A :class:`PropertyReport`.

    Raises:
        ValueError: if the matrix is not square or smaller than 2 × 2, or a tolerance is
            negative.
    """
    g = cpu_float64(similarity)
    if g.dim() != 2 or g.shape[0] != g.shape[1] or g.shape[0] < 2:
        raise ValueError(
            "similarity must be a square (T, T) matrix with T >= 2, got "
            f"{tuple(g.shape)}"
        )
    if atol < 0 or rtol < 0:
        raise ValueError(f"atol and rtol must be >= 0, got atol={atol}, rtol={rtol}")
    size = g.shape[0]
    max_abs = float(
        (g.tril() if causal else g).abs().max()
    )  # the zeros above the diagonal change nothing
    tol = atol + rtol * max_abs
    diagonals = range(-size + 1, 1) if causal else range(-size + 1, size)
    spread = max(float(d.max() - d.min()) for d in (g.diagonal(k) for k in diagonals))
    asymmetry = None if causal else float((g - g.T).abs().max())
    steps, bad = 0, 0
    for m in range(size):
        sides = (
            (g[m, : m + 1].flip(0),) if causal else (g[m, m:], g[m, : m + 1].flip(0))
        )
        for side in sides:  # moving away from the diagonal
            diffs = side[1:] - side[:-1]
            steps += diffs.numel()
            bad += int((diffs > -tol).sum())
    violations = bad / steps
    symmetric = None if causal else asymmetry <= tol
    return PropertyReport(
        spread <= tol,
        symmetric,
        bad == 0,
        spread,
        asymmetry,
        violations,
        causal,
        max_abs,
    )


def plug_in_points(scheme: PositionalScheme) -> tuple[str, ...]:
    """Where ``scheme`` acts: the labels of the plug-in points its class declares in
    :attr:`~posenc.schemes.PositionalScheme.hooks` (``"embedding"``, ``"q/k
    transform"``, ``"score bias"``, ``"value term"``); ``()`` for "none"."""
    return tuple(label for method, label in PLUG_IN_POINTS if method in scheme.hooks)


@dataclass(frozen=True)
class SchemeSimilarity:
    """The positional similarity of a scheme, and what it is.

    Attributes:
        values: g(m, n), float64 ``(T, T)``.
        definition: what g is, in words (for a table cell).
        causal: True when g is only meaningful for n ≤ m (a score bias of a decoder).
    """

    values: torch.Tensor
    definition: str
    causal: bool


def scheme_similarity(
    scheme: PositionalScheme,
    seq_len: int,
    *,
    head: int = 0,
    seed: int = 0,
    causal: bool = True,
) -> SchemeSimilarity | None:
    """The positional similarity g(m, n), m, n = 0 … seq_len − 1, of any scheme, read
    off its first plug-in point:

    * embedding: g = ⟨p_m, p_n⟩ with p_m = ``embed(0, m)``, defined for every m, n;
    * q/k transform: g = ⟨f(q, m), f(k, n)⟩ for one random pair q, k (the same at every
      position), defined for every m, n;
    * score bias: g = the bias of head ``head`` for the same random q, k; with
      ``causal`` (the book's decoders) only n ≤ m is meaningful.

    Args:
        scheme: a built scheme (trained or not); its parameters set device and dtype.
        seq_len: T ≥ 2. head: which head. seed: for the random q, k.
        causal: whether a score bias is used by a decoder (then
            ``SchemeSimilarity.causal``).

    Returns:
        A :class:`SchemeSimilarity`, or None for a scheme with no positional term
        ("none").

    Raises:
        ValueError: seq_len < 2 or beyond ``scheme.max_positions``; head out of range.
    """
    if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < 2:
        raise ValueError(f"seq_len must be an int >= 2, got {seq_len!r}")
    if scheme.max_positions is not None and seq_len > scheme.max_positions:
        raise ValueError(
            f"seq_len = {seq_len} exceeds the scheme's max_positions = "
            f"{scheme.max_positions}"
        )
    if not 0 <= head < scheme.num_heads:
        raise ValueError(f"head must be in [0, {scheme.num_heads}), got {head}")
    points = plug_in_points(scheme)
    if not points:
        return None
    tensor = next(scheme.parameters(), None)
    if tensor is None:
        tensor = next(scheme.buffers(), torch.zeros(()))
    device = tensor.device
    dtype = tensor.dtype if tensor.is_floating_point() else torch.float32
    positions = torch.arange(seq_len, device=device)
    with torch.no_grad():
        if points[0] == "embedding":
            p = scheme.embed(
                torch.zeros(1, seq_len, scheme.d_model, device=device, dtype=dtype),
                positions,
            )[0]
            return SchemeSimilarity(position_similarity(p).cpu(), "⟨p_m, p_n⟩", False)
        generator = torch.Generator().manual_seed(seed)
        shape = (1, scheme.num_heads, 1, scheme.head_dim)
        q, k = (
            torch.randn(shape, generator=generator)
            .to(device, dtype)
            .repeat(1, 1, seq_len, 1)
            for _ in range(2)
        )
        if points[0] == "q/k transform":
            q, k = scheme.transform_qk(q, k, positions, positions)
            g = (q @ k.transpose(-2, -1))[0, head]  # (1, H, T, T) → (T, T)
            return SchemeSimilarity(
                cpu_float64(g), "⟨f(q, m), f(k, n)⟩, one random q, k", False
            )
        bias = scheme.score_bias(q, k, positions, positions)
        g = torch.broadcast_to(bias, (1, scheme.num_heads, seq_len, seq_len))[0, head]
        return SchemeSimilarity(
            cpu_float64(g), "score bias b(m, n), one random q, k", causal
        )


def positional_parameters(scheme: PositionalScheme) -> int:
    """The number of trainable parameters of the scheme itself (buffers excluded)."""
    return sum(p.numel() for p in scheme.parameters())


def properties_table(
    reports: dict[str, PropertyReport | None],
    *,
    first_column: str = "scheme",
    extra: dict[str, dict[str, str]] | None = None,
    missing: str = "—",
) -> str:
    """A Markdown table with one ✓/✗ row per report: the table the chapters fill in.

    Args:
        reports: ``{row name: PropertyReport}``; a None report (no positional
            similarity) shows ``missing`` in the three property columns.
        first_column: title of the name column.
        extra: optional further columns after the three properties, ``{column title:
            {row name:
            cell text}}`` (a row missing from a column shows an empty cell).
        missing: the cell text for a None report.
    """
    extra = extra or {}
    names = ("translation invariance", "symmetry", "monotonicity")
    heads = list(names) + list(extra)
    lines = [
        f"| {first_column} | " + " | ".join(heads) + " |",
        "|---" * (len(heads) + 1) + "|",
    ]
    for row, report in reports.items():
        cells = (
            [report.row()[n] for n in names]
            if report is not None
            else [missing] * len(names)
        )
        cells += [column.get(row, "") for column in extra.values()]
        lines.append(f"| {row} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
