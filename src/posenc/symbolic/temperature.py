"""Attention temperature, derived with SymPy: YaRN's factor on cos and sin multiplies
every logit by its square; a multiplier λ on the logits keeps the largest of n logits
weighted at least 1/(1 + (n − 1)e^{−λδ}) when it leads the others by δ, and at most
1/(1 + (n − 1)e^{−λΔ}) when it leads them by at most Δ; with λ = 1 that weight fades
to 0 as n grows, with Scalable-Softmax's λ = s·ln n (log-n: s = 1/ln L) it tends to 1
when sδ > 1 (Nakanishi 2025, §2's argument); and Llama 4's τ(p) is 1 before
position F − 1 and constant on each block of F positions (the formulas themselves:
:mod:`posenc.temperature`).

Every proof is general: sizes, vectors, angles and multipliers are symbols, and each
step is an ``assert`` executed when the function runs, so a function that returns has
proved its claims. Each returns a :class:`TemperatureProof`, whose ``claims`` the tests
check are all ``True`` and whose ``formulas`` they compare with the package's numbers.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy as sp


@dataclass(frozen=True)
class TemperatureProof:
    """``claims``: statement → a SymPy boolean (``True`` when proved); ``formulas``:
    the closed forms the statements are about; ``symbols``: the symbols used."""

    claims: dict[str, sp.Basic]
    formulas: dict[str, sp.Expr]
    symbols: dict[str, sp.Symbol]


def _proved(claims: dict) -> None:
    failed = [name for name, value in claims.items() if value is not sp.true]
    assert not failed, f"not proved: {failed}"


def yarn_logit_factor() -> TemperatureProof:
    """YaRN's attention factor m (``posenc.scaling.yarn_attention_factor``, Peng et
    al. 2023, Eq. 22: √(1/t) = 0.1 ln s + 1) multiplies cos and sin, so q and k are
    both rotated and scaled by m, and every logit is multiplied by m² — the same as a
    query temperature τ = m².

    Proved for one rotation pair with any q, k and any angles (explicit cos and sin),
    and for any width d and any rotation matrices R_q, R_k (matrix symbols), so for
    RoPE's block-diagonal rotation of every width."""
    m = sp.Symbol("m", positive=True)
    q0, q1, k0, k1, a, b = sp.symbols("q0 q1 k0 k1 alpha beta", real=True)

    def rotate(x0, x1, angle, factor):  # x·(factor·cos) + rotate_half(x)·(factor·sin)
        c, s = factor * sp.cos(angle), factor * sp.sin(angle)
        return sp.Matrix([x0 * c - x1 * s, x1 * c + x0 * s])

    scaled = rotate(q0, q1, a, m).dot(rotate(k0, k1, b, m))
    plain = rotate(q0, q1, a, 1).dot(rotate(k0, k1, b, 1))
    claims = {
        "one pair: scaled logit = m² · logit": sp.Eq(
            sp.expand(scaled - m**2 * plain), 0
        )
    }
    d = sp.Symbol("d", integer=True, positive=True)
    q, k = sp.MatrixSymbol("q", d, 1), sp.MatrixSymbol("k", d, 1)
    R_q, R_k = sp.MatrixSymbol("R_q", d, d), sp.MatrixSymbol("R_k", d, d)
    lhs = ((m * R_q * q).T * (m * R_k * k)).doit()
    rhs = (m**2 * ((R_q * q).T * (R_k * k))).doit()
    claims["any width and rotations: (mR_q q)ᵀ(mR_k k) = m²(R_q q)ᵀ(R_k k)"] = (
        sp.true if lhs == rhs else sp.false
    )
    plain_k = rotate(k0, k1, b, 1)
    claims["a query temperature τ = m² gives the same logit"] = sp.Eq(
        sp.expand(rotate(m**2 * q0, m**2 * q1, a, 1).dot(plain_k) - scaled), 0
    )
    _proved(claims)
    factor = sp.Symbol("s", positive=True)
    return TemperatureProof(
        claims,
        {"m": sp.Rational(1, 10) * sp.log(factor) + 1, "logit factor": m**2},
        {"m": m, "s": factor, "d": d},
    )


def _weight_minus_bound(S, r):
    """The largest logit's weight is 1/(1 + S), S ≥ 0 the others' sum of
    e^{λ(z_j − z_max)}; a bound replaces S by S + r (r ≥ 0, each term bounded above)
    or S − r (below): the differences w − 1/(1 + S + r) and 1/(1 + S) − w′ with
    w′ = 1/(1 + S + r), factored."""
    return sp.factor(1 / (1 + S) - 1 / (1 + S + r))


def softmax_max_weight() -> TemperatureProof:
    """How much weight the largest logit keeps as the row grows (the argument of
    Nakanishi 2025, §2, for Scalable-Softmax).

    Take n logits, the largest z, a multiplier λ > 0 of every logit (a query
    temperature). The only fact about exp used is that it is increasing.

    1. If every other logit is at least δ below z (z − z_j = δ + u_j, u_j ≥ 0), then
       e^{λ(z_j − z)} = e^{−λδ}e^{−λu_j} ≤ e^{−λδ} (−λu_j ≤ 0), so the others sum to
       (n − 1)e^{−λδ} − r with r ≥ 0 and the weight of z is
       w ≥ B(λ, δ) = 1/(1 + (n − 1)e^{−λδ}); equality when all others are exactly δ
       below (the row's weight written out).
    2. If every other logit is at most Δ below z, likewise w ≤ B(λ, Δ).
    3. Plain softmax, λ = 1: B(1, Δ) → 0 as n → ∞, so with logits of bounded spread
       the largest weight fades to 0 (attention fading).
    4. Scalable-Softmax, λ = s·ln n: B = 1/(1 + (n − 1)n^{−sδ}); with sδ = 1 + c (c >
       0) it tends to 1, so w → 1; with sΔ = 1/(1 + e) < 1 the upper bound tends to 0,
       so a lead below 1/s still fades. Log-n scaling (λ = ln n / ln L for n > L) is
       the case s = 1/ln L: the weight tends to 1 when the lead exceeds ln L.
    """
    lam, delta, Delta = sp.symbols("lambda delta Delta", positive=True)
    n = sp.Symbol("n", integer=True, positive=True)
    u, r = sp.symbols("u r", nonnegative=True)
    s, c, e, z = sp.symbols("s c e z", positive=True)
    claims = {
        "exponent of an other's ratio −λu_j ≤ 0": sp.sympify((-lam * u).is_nonpositive)
    }
    ratio = sp.simplify(sp.exp(lam * ((z - delta - u) - z)) / sp.exp(-lam * delta))
    claims["e^{λ(z_j − z)} = e^{−λδ} · e^{−λu_j}"] = sp.Eq(ratio, sp.exp(-lam * u))
    S = sp.Symbol("S", nonnegative=True)  # the others' sum of e^{λ(z_j − z)}
    bound = 1 / (1 + (n - 1) * sp.exp(-lam * delta))
    upper = 1 / (1 + (n - 1) * sp.exp(-lam * Delta))
    # others ≥ δ below: each term ≤ e^{−λδ}, so (n − 1)e^{−λδ} = S + r, r ≥ 0, and
    # w − B = 1/(1 + S) − 1/(1 + S + r)
    difference = _weight_minus_bound(S, r)
    claims["w − B(λ, δ) = 1/(1 + S) − 1/(1 + S + r) ≥ 0"] = sp.sympify(
        difference.is_nonnegative
    )
    exact = sp.exp(lam * z) / (sp.exp(lam * z) + (n - 1) * sp.exp(lam * (z - delta)))
    claims["w = B(λ, δ) when the others are exactly δ below"] = sp.Eq(
        sp.simplify(exact - bound), 0
    )
    # others ≤ Δ below: each term ≥ e^{−λΔ}, so S = (n − 1)e^{−λΔ} + r and
    # B(λ, Δ) − w is the same difference with S → (n − 1)e^{−λΔ}
    claims["B(λ, Δ) − w ≥ 0 (others ≤ Δ below)"] = sp.sympify(
        difference.subs(S, (n - 1) * sp.exp(-lam * Delta)).is_nonnegative
    )
    claims["λ = 1: B(1, Δ) → 0 as n → ∞"] = sp.Eq(
        sp.limit(upper.subs(lam, 1), n, sp.oo), 0
    )
    tail = (n - 1) * sp.exp(-s * sp.log(n) * delta)  # (n − 1)·n^{−sδ}
    sharp = sp.simplify(tail.subs(delta, (1 + c) / s))
    claims["λ = s ln n, sδ = 1 + c: B → 1"] = sp.Eq(
        sp.limit(1 / (1 + sharp), n, sp.oo), 1
    )
    flat = sp.simplify(tail.subs(delta, 1 / (s * (1 + e))))
    claims["λ = s ln n, sΔ < 1: B(λ, Δ) → 0"] = sp.Eq(
        sp.limit(1 / (1 + flat), n, sp.oo), 0
    )
    L = sp.Symbol("L", integer=True, positive=True)
    logn = sp.simplify(
        ((n - 1) * sp.exp(-(sp.log(n) / sp.log(L)) * delta)).subs(
            delta, (1 + c) * sp.log(L)
        )
    )
    claims["log-n (s = 1/ln L), δ = (1 + c) ln L: B → 1"] = sp.Eq(
        sp.limit(1 / (1 + logn), n, sp.oo), 1
    )
    _proved(claims)
    return TemperatureProof(
        claims,
        {"lower bound": bound, "upper bound": upper, "ssmax bound": 1 / (1 + tail)},
        {"lambda": lam, "delta": delta, "Delta": Delta, "n": n, "s": s},
    )


def llama4_temperature_blocks() -> TemperatureProof:
    """Llama 4's τ(p) = 1 + a·ln(1 + ⌊(p + 1)/F⌋) (:func:`posenc.temperature.
    llama4_query_scale`) is exactly 1 for every position p < F − 1 and constant on
    each block of F positions p = F·k − 1, …, F·k + F − 2 (k ≥ 1), where it is
    1 + a·ln(1 + k).

    General proof for integers F ≥ 1, k ≥ 0 and any a ≥ 0, from the definition of
    floor division on integers: ⌊x/F⌋ = k exactly when x = F·k + ρ with 0 ≤ ρ ≤ F − 1.
    A position p of block k has p + 1 = F·k + ρ, ρ = 0 … F − 1, so ⌊(p + 1)/F⌋ = k
    and τ depends on k alone; block 0 holds p = −1 … F − 2, whose positions p ≥ 0
    are those p < F − 1, with τ = 1 + a·ln 1 = 1.
    """
    k, rho, u = sp.symbols("k rho u", integer=True, nonnegative=True)
    a = sp.Symbol("a", nonnegative=True)
    F = rho + 1 + u  # any F ≥ 1 with a remainder 0 ≤ ρ ≤ F − 1 (u = F − 1 − ρ)

    def tau(block):
        return 1 + a * sp.log(1 + block)

    p = F * k + rho - 1  # a position of block k
    remainder = sp.expand((p + 1) - F * k)
    claims = {
        "p + 1 − F·k = ρ ≥ 0": sp.sympify(remainder.is_nonnegative),
        "F − 1 − ρ ≥ 0": sp.sympify(sp.expand(F - 1 - remainder).is_nonnegative),
    }
    claims["block 0: τ = 1"] = sp.Eq(tau(0), 1)
    last = F - 2  # the last position of block 0: p < F − 1
    claims["block 0 ends at p = F − 2 < F − 1"] = sp.Lt(last, F - 1)
    claims["block k starts at p = F·k − 1 (block 1: p = F − 1)"] = sp.Eq(
        (F * 1 - 1) - (last + 1), 0
    )
    claims["τ rises from block 0 to block 1 by a·ln 2 ≥ 0"] = sp.sympify(
        sp.simplify(tau(1) - tau(0) - a * sp.log(2)) == 0
        and (a * sp.log(2)).is_nonnegative
    )
    _proved(claims)
    p_any = sp.Symbol("p", integer=True, nonnegative=True)
    F_any = sp.Symbol("F", integer=True, positive=True)
    return TemperatureProof(
        claims,
        {"tau of block k": tau(k), "tau": tau(sp.floor((p_any + 1) / F_any))},
        {"F": F_any, "p": p_any, "k": k, "a": a},
    )
