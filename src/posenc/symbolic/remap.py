"""Context extension by remapping positions, derived with sympy: SelfExtend's largest
distance and the input length it allows, that DCA's three cases partition the causal
pairs with every distance below the pretraining length, and ReRoPE's bounds (the
positions themselves: :mod:`posenc.remap`).

Every proof here is *general*: integer sizes are symbols, and the only fact about
floor division it uses is its definition for integers (⌊x/G⌋ = q exactly when x = Gq +
r with 0 ≤ r ≤ G − 1; equivalently ⌊x/G⌋ ≤ n ⟺ x ≤ G(n + 1) − 1). Each inequality is
reduced to an expression that SymPy's assumptions decide (a sum of non-negative
symbols plus a constant), by writing the free quantities as "bound ± a non-negative
symbol". Each function returns its claims as a dict of SymPy booleans that must all
be ``True``, with the expressions that support them; the tests also check the
statements on every small instance against :mod:`posenc.remap`.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy as sp


def _nonneg(*names):
    return sp.symbols(names, integer=True, nonnegative=True)


@dataclass(frozen=True)
class RemapProof:
    """``claims``: statement → a SymPy boolean (``True`` when proved); ``formulas``:
    the closed forms the statements are about; ``symbols``: the symbols used."""

    claims: dict[str, sp.Basic]
    formulas: dict[str, sp.Expr]
    symbols: dict[str, sp.Symbol]


def floor_monotone() -> dict[str, sp.Basic]:
    """Two facts about ⌊·/G⌋ on integers that the other proofs use, each from the
    quotient-remainder form:

    * monotone: j ≤ i ⟹ ⌊j/G⌋ ≤ ⌊i/G⌋. With i = G·q + r, 0 ≤ r = G − 1 − u, a j with
      ⌊j/G⌋ = q + 1 + t ≥ q + 1 has j − i = G·t + r_j + u + 1 > 0, so no j ≤ i does.
    * superadditive difference: ⌊i/G⌋ − ⌊j/G⌋ ≥ ⌊(i − j)/G⌋. With i = G·a + r_i, j =
      G·b + r_j: (i − j) − G(a − b + 1) = r_i − r_j − G ≤ (G − 1) − 0 − G < 0, so (i −
      j) ≤ G(a − b + 1) − 1, i.e. ⌊(i − j)/G⌋ ≤ a − b.
    """
    G = sp.Symbol("G", integer=True, positive=True)
    q, t, u, r_j, v = _nonneg("q", "t", "u", "r_j", "v")
    r_i = G - 1 - u
    i = G * q + r_i
    j = G * (q + 1 + t) + r_j
    a, b = _nonneg("a", "b")
    i2, j2 = G * a + (G - 1 - u), G * b + v  # r_i ≤ G − 1, r_j ≥ 0: the extremes
    return {
        "j with a larger quotient lies beyond i": sp.expand(j - i).is_positive,
        "(i − j) < G(⌊i/G⌋ − ⌊j/G⌋ + 1)": sp.expand(
            (i2 - j2) - G * (a - b + 1)
        ).is_negative,
    }


def self_extend_bound() -> RemapProof:
    """SelfExtend's largest remapped distance and the input length it allows (Jin et
    al. 2024, §3; the README of datamllab/LongLM: "(L − W)·G + W").

    Proved, for integers G ≥ 1, W ≥ 1, L > W and T ≥ 1:

    1. every grouped distance ⌊i/G⌋ − ⌊j/G⌋ + W − ⌊W/G⌋ (i − j ≥ W) is ≥ W, above
       every neighbour distance (≤ W − 1) — by the superadditive floor difference;
    2. on positions 0..T−1 it is at most D(T) = ⌊(T−1)/G⌋ + W − ⌊W/G⌋ (floor
       monotone, ⌊j/G⌋ ≥ 0), attained at (i, j) = (T − 1, 0), a grouped pair when T >
       W: D(T) is the largest distance;
    3. D(T) ≤ L − 1 (all distances below L) ⟺ T ≤ G·(L − W + ⌊W/G⌋);
    4. writing W = G·a + b (0 ≤ b < G), that bound is G(L − W) + W − b: the paper's
       T ≤ G(L − W) + W is exact when G divides W and b = W mod G tokens too generous
       otherwise.
    """
    G, W, L = sp.symbols("G W L", integer=True, positive=True)
    a, b, u, n, c = _nonneg("a", "b", "u", "n", "c")
    T = sp.Symbol("T", integer=True, positive=True)
    floor_w = sp.floor(W / G)
    largest = sp.floor((T - 1) / G) + W - floor_w
    bound = G * (L - W + floor_w)
    claims = dict(floor_monotone())
    # 1. grouped ≥ W: ⌊i/G⌋ − ⌊j/G⌋ ≥ ⌊(i − j)/G⌋ ≥ ⌊W/G⌋ (monotone), so the grouped
    #    distance is ≥ ⌊W/G⌋ + W − ⌊W/G⌋ = W.
    claims["grouped distance ≥ W"] = sp.simplify(
        (floor_w + n) + W - floor_w - W
    ).is_nonnegative  # n = ⌊i/G⌋ − ⌊j/G⌋ − ⌊W/G⌋ ≥ 0
    claims["neighbour distance ≤ W − 1 < W"] = sp.Lt(W - 1, W)
    # 2. the pair (T − 1, 0) gives D(T) exactly.
    claims["D(T) is attained at (T − 1, 0)"] = sp.Eq(
        sp.floor((T - 1) / G) - sp.floor(sp.Integer(0) / G) + W - floor_w, largest
    )
    # 3. ⌊(T−1)/G⌋ ≤ n ⟺ T − 1 ≤ G(n + 1) − 1, with n = L − 1 − W + ⌊W/G⌋: both
    #    directions by substitution. (⇒) T − 1 = G·m + r, m = n − c, r = G − 1 − u:
    m_le, r_hi = n - c, G - 1 - u
    claims["⌊(T−1)/G⌋ ≤ n ⇒ T ≤ G(n + 1)"] = sp.expand(
        G * (n + 1) - (G * m_le + r_hi + 1)
    ).is_nonnegative
    # (⇐) m = n + 1 + c, r ≥ 0 (r = u): T = G·m + r + 1 > G(n + 1).
    claims["⌊(T−1)/G⌋ > n ⇒ T > G(n + 1)"] = sp.expand(
        G * (n + 1 + c) + u + 1 - G * (n + 1)
    ).is_positive
    claims["G(n + 1) with n = L − 1 − W + ⌊W/G⌋ is the bound"] = sp.Eq(
        sp.expand(G * ((L - 1 - W + floor_w) + 1)), sp.expand(bound)
    )
    # 4. W = G·a + b: bound − (G(L − W) + W) = −b.
    gap = sp.expand(
        (G * (L - W + a) - (G * (L - W) + W)).subs(W, G * a + b)
    )
    claims["bound = G(L − W) + W − (W mod G)"] = sp.Eq(gap, -b)
    return RemapProof(
        claims,
        {
            "largest distance": largest,
            "max length": bound,
            "paper's max length": G * (L - W) + W,
            "gap (W = G·a + b)": gap,
        },
        {"G": G, "W": W, "L": L, "T": T, "a": a, "b": b},
    )


def dual_chunk_partition() -> RemapProof:
    """DCA's three cases cover every causal pair exactly once, and every distance lies
    in 0..c − 1 (An et al. 2024, §3, Eq. 2, 5–8). General proof, for integers s ≥ 1,
    c > s and 0 ≤ w ≤ c − s.

    Partition: for j ≤ i, n = ⌊i/s⌋ − ⌊j/s⌋ is an integer ≥ 0 (floor monotone,
    :func:`floor_monotone`); every such n is 0, 1 or 2 + t (t ≥ 0) and on each form
    exactly one of the case conditions n = 0, n = 1, n > 1 holds.

    Distances, with i' = i mod s, j' = j mod s ∈ 0..s − 1:
    intra (same chunk, so j' ≤ i'): i' − j' ∈ [0, s − 1];
    successive with i' < w: s + i' − j' ∈ [1, s + w − 1] — the true distance i − j;
    successive with i' ≥ w, and inter: c − 1 − j' ∈ [c − s, c − 1].
    """
    s = sp.Symbol("s", integer=True, positive=True)
    t, x, y, u, e = _nonneg("t", "x", "y", "u", "e")
    c = s + 1 + e  # c > s
    claims = dict(floor_monotone())
    forms = (("n = 0", sp.Integer(0)), ("n = 1", sp.Integer(1)), ("n ≥ 2", 2 + t))
    for label, n in forms:
        hits = [sp.Eq(n, 0), sp.Eq(n, 1), sp.Gt(n, 1)]
        decided = all(h in (sp.true, sp.false) for h in hits)
        claims[f"{label}: exactly one case"] = sp.true if (
            decided and sum(h == sp.true for h in hits) == 1
        ) else sp.false
    # intra: j' = x ≤ i' = x + y ≤ s − 1, i.e. x + y = s − 1 − u
    intra = y  # i' − j', with y = s − 1 − u − x
    claims["intra distance ≥ 0"] = intra.is_nonnegative
    claims["intra distance ≤ s − 1"] = sp.expand(
        (s - 1) - intra.subs(y, s - 1 - u - x)
    ).is_nonnegative
    # successive, local part: i' = x < w (w = x + 1 + u), j' = s − 1 − y ≥ 0
    w = x + 1 + u
    succ_local = s + x - (s - 1 - y)
    claims["successive (local) distance ≥ 1"] = sp.expand(succ_local - 1).is_nonnegative
    # largest at j' = 0: s + i' ≤ s + w − 1 ≤ c − 1 when w ≤ c − s, c = s + w + e
    claims["successive (local) distance ≤ c − 1"] = sp.expand(
        (s + w + e - 1) - (s + x)
    ).is_nonnegative
    # far part of successive, and inter: c − 1 − j', j' = x ≥ 0 or j' = s − 1 − y
    claims["far distance ≤ c − 1"] = sp.expand((c - 1) - (c - 1 - x)).is_nonnegative
    far = (c - 1) - (s - 1 - y)
    claims["far distance ≥ c − s"] = sp.expand(far - (c - s)).is_nonnegative
    return RemapProof(
        claims,
        {"intra": intra, "successive local": succ_local, "far": far},
        {"s": s, "c": c, "w": w},
    )


def rerope_bounds() -> RemapProof:
    """ReRoPE's distance min(d, W) is ≤ W and leaky ReRoPE's f(d) = d (d < W), W + (d
    − W)/k (d ≥ W) is strictly increasing in d with f ≤ d (Su 2023, kexue.fm 9708;
    bojone/rerope). General proof, for integers d ≥ 0, W ≥ 1 and real k > 1: the
    cases d < W (d = W − 1 − u) and d ≥ W (d = W + t); for the increase f(d + 1) −
    f(d) on d + 1 < W, d = W − 1 and d ≥ W; ``formulas`` also holds the largest input
    length with every leaky distance ≤ L − 1, T ≤ k(L − 1 − W) + W + 1."""
    W = sp.Symbol("W", integer=True, positive=True)
    k = sp.Symbol("k", positive=True)
    kk = 1 + k  # k > 1 written as 1 + k', k' > 0
    t, u = _nonneg("t", "u")

    def leaky(d, inside):
        return d if inside else W + (d - W) / kk

    claims = {
        "ReRoPE: min(d, W) = d < W for d < W": sp.And(
            sp.Eq(sp.Min(W - 1 - u, W), W - 1 - u), sp.Lt(W - 1 - u, W)
        ),
        "ReRoPE: min(d, W) = W for d ≥ W": sp.Eq(sp.Min(W + t, W), W),
        "leaky: step inside the window is 1": sp.Eq(
            leaky(W - 1 - u, True) - leaky(W - 2 - u, True), 1
        ),
        "leaky: step into the far band is 1": sp.Eq(
            leaky(W, False) - leaky(W - 1, True), 1
        ),
        "leaky: step in the far band is 1/k > 0": sp.simplify(
            leaky(W + t + 1, False) - leaky(W + t, False)
        ).is_positive,
        "leaky: f(d) ≤ d beyond the window": sp.simplify(
            (W + t) - leaky(W + t, False)
        ).is_nonnegative,
    }
    T, L = sp.symbols("T L", positive=True)
    kr = sp.Symbol("k", positive=True)
    longest = sp.solve(sp.Eq(W + (T - 1 - W) / kr, L - 1), T)
    return RemapProof(
        claims,
        {
            "leaky far distance": W + (sp.Symbol("d") - W) / kr,
            "leaky max length": longest[0],
        },
        {"W": W, "k": kr, "T": T, "L": L},
    )
