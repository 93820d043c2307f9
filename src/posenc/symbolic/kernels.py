"""Kerple's kernels and FIRE's normalised input, derived with sympy (the biases
themselves: :mod:`posenc.kernels`, :mod:`posenc.fire`).

Every statement is general: the parameters and positions are symbols with only the
assumptions the papers make (r₁, r₂, c > 0; 0 ≤ j ≤ i), and each inequality is reduced
to an expression whose sign SymPy's assumptions decide, by writing free quantities as
"bound + a non-negative symbol". Each function returns its claims as a dict of SymPy
booleans that must all be ``True``; the tests also check them on numbers against the
package's functions.

A note on shape: Kerple's log *bias* −r₁·log(1 + r₂d) is convex in the distance d (it
falls ever more slowly); the *penalty* r₁·log(1 + r₂d) it subtracts is the concave,
increasing function. The power bias −r₁·d^{r₂} is convex for r₂ < 1, linear (ALiBi)
at r₂ = 1 and concave for 1 < r₂ ≤ 2.
"""

from __future__ import annotations

import sympy as sp


def kerple_log_kernel() -> dict[str, sp.Basic]:
    """b(d) = −r₁·log(1 + r₂·d), r₁, r₂ > 0, d ≥ 0 (Chi et al. 2022, §4):

    * b(0) = 0: a token's bias to itself is nothing;
    * b′(d) = −r₁r₂ / (1 + r₂d) < 0: the bias falls with the distance;
    * b″(d) = r₁r₂² / (1 + r₂d)² > 0: convex (the penalty −b is concave);
    * b(d) ≥ −r₁·r₂·d: it falls no faster than the line of slope r₁r₂ (an ALiBi
      slope). The gap g = b + r₁r₂d has g′ ≥ 0 and equals ∫₀ᵈ g′(t) dt, both proved;
      that an integral of a non-negative function is non-negative is the one step
      taken by hand.
    """
    r1, r2 = sp.symbols("r1 r2", positive=True)
    d, t = sp.symbols("d t", nonnegative=True)
    b = -r1 * sp.log(1 + r2 * d)
    first, second = sp.diff(b, d), sp.diff(b, d, 2)
    gap = b + r1 * r2 * d
    slope = sp.simplify(sp.together(sp.diff(gap, d)))  # r₁r₂²d / (1 + r₂d)
    return {
        "b(0) = 0": sp.Eq(b.subs(d, 0), 0),
        "b′(d) < 0": sp.simplify(first).is_negative,
        "b″(d) > 0 (convex)": sp.simplify(second).is_positive,
        "(b + r₁r₂d)′ ≥ 0": slope.is_nonnegative,
        "b + r₁r₂d = ∫₀ᵈ (b + r₁r₂d)′": sp.Eq(
            sp.simplify(sp.integrate(slope.subs(d, t), (t, 0, d)) - gap), 0
        ),
    }


def kerple_power_kernel() -> dict[str, sp.Basic]:
    """b(d) = −r₁·d^{r₂}, r₁ > 0, 0 < r₂ ≤ 2, d > 0 (Chi et al. 2022, §4):

    * b → 0 as d → 0⁺ (b(0) = 0 for r₂ > 0);
    * b′(d) = −r₁r₂d^{r₂−1} < 0;
    * b″(d) = −r₁r₂(r₂ − 1)d^{r₂−2}: > 0 for r₂ = 1/(1 + t) < 1, = 0 at r₂ = 1,
      < 0 for r₂ = 1 + s > 1.
    """
    r1, r2, d, s, t = sp.symbols("r1 r2 d s t", positive=True)
    b = -r1 * d**r2
    second = sp.diff(b, d, 2)
    return {
        "b → 0 as d → 0⁺": sp.Eq(sp.limit(b, d, 0, "+"), 0),
        "b′(d) < 0": sp.diff(b, d).is_negative,
        "b″ > 0 for r₂ < 1": sp.simplify(second.subs(r2, 1 / (1 + t))).is_positive,
        "b″ = 0 at r₂ = 1": sp.Eq(second.subs(r2, 1), 0),
        "b″ < 0 for r₂ > 1": sp.simplify(second.subs(r2, 1 + s)).is_negative,
    }


def fire_interpolation() -> dict[str, sp.Basic]:
    """FIRE's input x(m, n) = ψ(m − n) / ψ(max(L_thr, m)), ψ(u) = log(1 + c·u), c > 0
    (Li et al. 2024, §3, who write i and j), for causal pairs 0 ≤ n ≤ m (the book's
    query and key positions):

    * for m ≥ L_thr (max(L_thr, m) = m), write m = L_thr + a and n = m − d with
      0 ≤ d ≤ m: then ψ(d) ≥ 0 and ψ(m) − ψ(d) = log((1 + c·m) / (1 + c·d))
      = log(1 + c·n / (1 + c·d)) ≥ 0, and ψ(m) > 0; so 0 ≤ x ≤ 1 (this last step,
      from the three proved inequalities, by hand), with x = 1 at n = 0 and x = 0 at
      n = m by construction. Every query past the threshold sees its keys inside
      [0, 1], at any length: the domain the MLP was trained on.
    * for m < L_thr (write m = a, L_thr = a + e, e > 0): ψ(L_thr) − ψ(m) > 0, so
      x ≤ ψ(m)/ψ(L_thr) < 1 — short queries are not stretched to 1.
    * at a fixed distance d > 0, x falls as m grows past L_thr: ∂x/∂m < 0 (a longer
      context compresses the same distance: the interpolation).
    """
    c, e, threshold = sp.symbols("c e L_thr", positive=True)
    a, d, n = sp.symbols("a d n", nonnegative=True)

    def psi(u):
        return sp.log(1 + c * u)

    m = d + n  # 0 ≤ n ≤ m  ⟺  m = d + n with d, n ≥ 0
    ratio = sp.simplify((1 + c * m) / (1 + c * d))
    m_sym = sp.Symbol("m", positive=True)
    dpos = sp.Symbol("d", positive=True)
    x_fixed_d = psi(dpos) / psi(m_sym)
    slope = sp.diff(x_fixed_d, m_sym)
    return {
        "ψ(m − n) ≥ 0": psi(d).is_nonnegative,
        "(1 + c·m)/(1 + c·(m − n)) = 1 + c·n/(1 + c·(m − n))": sp.Eq(
            sp.simplify(ratio - (1 + c * n / (1 + c * d))), 0
        ),
        "ψ(m) − ψ(m − n) ≥ 0": sp.log(1 + c * n / (1 + c * d)).is_nonnegative,
        "ψ(m) > 0 for m ≥ L_thr": psi(threshold + a).is_positive,
        # m = a < L_thr = a + e: ψ(L_thr) − ψ(m) = log((1 + c(a + e)) / (1 + c·a))
        "ψ(L_thr) − ψ(m) > 0 for m < L_thr": sp.Eq(
            sp.simplify((1 + c * (a + e)) / (1 + c * a) - (1 + c * e / (1 + c * a))), 0
        )
        & sp.log(1 + c * e / (1 + c * a)).is_positive,
        "∂x/∂m < 0 at a fixed d > 0": sp.simplify(slope).is_negative,
    }
