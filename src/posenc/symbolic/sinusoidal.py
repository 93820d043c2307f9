"""The sinusoidal encoding derived with sympy: its frequencies, the rotation that
shifts it by k positions, the dot product of two encodings as a function of their
distance (for a fixed and for a symbolic number of pairs), and tensor2tensor's
frequencies (the sinusoidal chapter)."""

from __future__ import annotations

from dataclasses import dataclass

import sympy as sp


# --------------------------------------------------------------------------------------
# Sinusoidal
# --------------------------------------------------------------------------------------

pos, phi, t = sp.symbols("pos phi t", real=True)
omega = sp.Symbol("omega", positive=True)
base_symbol = sp.Symbol("b", positive=True)


def sinusoidal_inv_freq(dim: int | sp.Symbol, i=None, base=None) -> sp.Expr:
    """θ_i = b^(−2i/d) (Vaswani et al. 2017, §3.5)."""
    i = i if i is not None else sp.Symbol("i", integer=True, nonnegative=True)
    b = base if base is not None else base_symbol
    return b ** (-2 * sp.Integer(1) * i / dim)


def sinusoidal_pair(position=pos, frequency=omega) -> sp.Matrix:
    """One feature pair of the encoding: ``[sin(ω·pos), cos(ω·pos)]ᵀ``."""
    return sp.Matrix([sp.sin(frequency * position), sp.cos(frequency * position)])


def sinusoidal_table(
    dim: int, base=None, layout: str = "interleaved", position=pos
) -> sp.Matrix:
    """The full encoding vector PE(pos) of width ``dim`` as a column of sympy
    expressions."""
    freqs = [sinusoidal_inv_freq(dim, i, base) for i in range(dim // 2)]
    sins = [sp.sin(position * f) for f in freqs]
    coss = [sp.cos(position * f) for f in freqs]
    if layout == "interleaved":
        return sp.Matrix([v for pair in zip(sins, coss) for v in pair])
    if layout == "concatenated":
        return sp.Matrix(sins + coss)
    raise ValueError(f"layout must be 'interleaved' or 'concatenated', got {layout!r}")


@dataclass(frozen=True)
class ShiftMatrix:
    """The solution of ``M · PE(pos) = PE(pos + φ)`` for one frequency."""

    unknowns: sp.Matrix
    equations: list[sp.Expr]
    M: sp.Matrix


def sinusoidal_shift_matrix() -> ShiftMatrix:
    """Solve for the 2×2 matrix M with ``M · [sin ωpos, cos ωpos]ᵀ = [sin ω(pos+φ), cos
    ω(pos+φ)]ᵀ`` for every pos.

    The right side expands (angle addition) into a linear combination of ``sin ωpos``
    and ``cos ωpos``; the identity holds for all pos exactly when the coefficients of
    both agree, which gives four linear equations in the four unknowns.
    """
    a, b, c, d = sp.symbols("m_11 m_12 m_21 m_22")
    unknowns = sp.Matrix([[a, b], [c, d]])
    s, co = sp.symbols("s c")  # stand-ins for sin(ω pos), cos(ω pos)
    lhs = unknowns * sp.Matrix([s, co])
    rhs = (
        sinusoidal_pair(pos + phi)
        .applyfunc(lambda e: sp.expand(e, trig=True))
        .subs({sp.sin(omega * pos): s, sp.cos(omega * pos): co})
    )
    equations = []
    for row in range(2):
        diff = sp.expand(lhs[row] - rhs[row])
        equations += [diff.coeff(s), diff.coeff(co)]
    solution = sp.solve(equations, [a, b, c, d], dict=True)
    if len(solution) != 1:
        raise RuntimeError(f"expected one solution, got {solution}")
    return ShiftMatrix(unknowns, equations, unknowns.subs(solution[0]))


def sinusoidal_dot_product(num_pairs: int = 4):
    """``PE(t) · PE(t + φ)`` for ``num_pairs`` pairs with free frequencies ω_0 …
    ω_{k−1}.

    Returns:
        ``(expression, closed_form, frequencies)`` where closed_form is ``Σ_k cos(ω_k
        φ)``.
    """
    freqs = sp.symbols(f"omega_0:{num_pairs}", positive=True)
    expr = sum(
        (sinusoidal_pair(t, w).T * sinusoidal_pair(t + phi, w))[0] for w in freqs
    )
    closed = sum(sp.cos(w * phi) for w in freqs)
    return expr, closed, freqs


# --------------------------------------------------------------------------------------
# General forms with a symbolic number of pairs: the sinusoidal similarity and
# tensor2tensor's frequencies
# --------------------------------------------------------------------------------------

num_pairs_symbol = sp.Symbol("K", integer=True, positive=True)
pair_index = sp.Symbol("k", integer=True, nonnegative=True)
pair_frequency = sp.IndexedBase("omega", positive=True)


def sinusoidal_dot_product_sum(num_pairs=num_pairs_symbol):
    """``PE(t) · PE(t + φ)`` for ``num_pairs`` pairs (symbolic by default, so that an
    identity proved about it holds for every width) with free frequencies ω_k, as a
    ``sp.Sum``.

    Returns:
        ``(expression, closed_form)``: ``Σ_{k=0}^{K−1} [sin(ω_k t) sin(ω_k (t+φ)) +
        cos(ω_k t) cos(ω_k (t+φ))]`` and ``Σ_{k=0}^{K−1} cos(ω_k φ)``.
    """
    w = pair_frequency[pair_index]
    pair = sinusoidal_pair(t, w).T * sinusoidal_pair(t + phi, w)
    limits = (pair_index, 0, num_pairs - 1)
    return sp.Sum(pair[0], limits), sp.Sum(sp.cos(w * phi), limits)


def tensor2tensor_inv_freq(dim, i=None, base=None) -> sp.Expr:
    """θ_i = b^(−i/(d/2 − 1)), i = 0 … d/2 − 1: the frequencies of tensor2tensor's
    ``get_timing_signal_1d`` (``log_timescale_increment = ln(b)/(d/2 − 1)``) and of
    fairseq's ``SinusoidalPositionalEmbedding.get_embedding``, which spread the
    exponents over d/2 − 1 steps instead of the paper's d/2
    (:func:`sinusoidal_inv_freq`). Both share θ_0 = 1; the lowest is exactly 1/b instead
    of b^(−(d−2)/d)."""
    i = i if i is not None else sp.Symbol("i", integer=True, nonnegative=True)
    b = base if base is not None else base_symbol
    return b ** (-i / (sp.sympify(dim) / 2 - 1))
