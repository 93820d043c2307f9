"""Relative position encodings derived with sympy: Transformer-XL's four terms, T5's
bucket boundaries, Shaw et al.'s value regrouping, and the variance of a score, each
also for symbolic sizes (the relative chapter)."""

from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

from .attention import absolute_score_expansion
from .sinusoidal import t

# --------------------------------------------------------------------------------------
# Relative position encodings
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TransformerXLTerms:
    """The absolute score's four terms and what Transformer-XL's substitutions turn them
    into."""

    absolute: dict[str, sp.MatrixExpr]
    relative: dict[str, sp.MatrixExpr]
    symbols: dict[str, sp.MatrixSymbol]


def transformer_xl_terms() -> TransformerXLTerms:
    """Derive Transformer-XL's terms (a)–(d) (Dai et al. 2019, §3.3) from the absolute
    expansion.

    Three substitutions, applied factor by factor to the four terms of
    :func:`absolute_score_expansion`: the key's absolute position ``W_k p_n`` becomes
    the projected relative encoding ``W_{k,R} R_{m−n}``; the query's position ``p_mᵀ
    W_qᵀ`` becomes a learned vector, ``uᵀ`` where it meets content and ``vᵀ`` where it
    meets position.
    """
    d = sp.Symbol("d", integer=True, positive=True)
    dh = sp.Symbol("d_h", integer=True, positive=True)
    base = absolute_score_expansion(d, dh)
    (x_m, x_n, p_m, p_n) = (
        sp.MatrixSymbol(n, d, 1) for n in ("x_m", "x_n", "p_m", "p_n")
    )
    Wq, Wk = sp.MatrixSymbol("W_q", dh, d), sp.MatrixSymbol("W_k", dh, d)
    R = sp.MatrixSymbol("R_{m-n}", d, 1)
    WkR = sp.MatrixSymbol("W_{k,R}", dh, d)
    u, v = sp.MatrixSymbol("u", dh, 1), sp.MatrixSymbol("v", dh, 1)

    def rewrite(term: sp.MatMul) -> sp.MatrixExpr:
        factors = list(term.args)
        if factors[-1] == p_n:  # ... W_k p_n  ->  ... W_{k,R} R_{m-n}
            factors[-2:] = [WkR, R]
        if factors[:2] == [p_m.T, Wq.T]:  # p_m^T W_q^T ...  ->  u^T ... or v^T ...
            factors[:2] = [(v if factors[-1] == R else u).T]
        return sp.MatMul(*factors)

    relative = {name: rewrite(term) for name, term in base.terms.items()}
    labels = dict(
        zip(
            base.terms,
            [
                "(a) content-content",
                "(b) content-position",
                "(c) global content bias",
                "(d) global position bias",
            ],
        )
    )
    return TransformerXLTerms(
        base.terms,
        {labels[k]: v_ for k, v_ in relative.items()},
        {
            "R": R,
            "W_kR": WkR,
            "u": u,
            "v": v,
            "p_m": p_m,
            "p_n": p_n,
            "x_m": x_m,
            "x_n": x_n,
            "W_q": Wq,
            "W_k": Wk,
        },
    )


def t5_bucket_start(bucket, num_buckets, max_distance):
    """The real distance n at which T5's logarithmic bucket formula reaches ``bucket``
    (one direction, ``num_buckets`` buckets for it): solving ``b = e + (B −
    e)·ln(n/e)/ln(D/e)`` with e = B // 2 exact buckets gives ``n = e·(D/e)^((b − e)/(B −
    e))``. The first integer distance in the bucket is its ceiling."""
    e = num_buckets // 2
    n = sp.Symbol("n", positive=True)
    b = sp.Symbol("b", positive=True)
    solution = sp.solve(
        sp.Eq(
            b,
            e
            + (num_buckets - e) * sp.log(n / e) / sp.log(sp.Rational(max_distance, e)),
        ),
        n,
    )
    if len(solution) != 1:
        raise RuntimeError(f"expected one solution, got {solution}")
    return sp.simplify(solution[0].subs(b, bucket))


def shaw_value_regrouping(
    seq_len: int = 4, max_relative_position: int = 1, query: int = 0
):
    """Both sides of Σ_n α_n a_{clip(n−m)} = Σ_r (Σ_{n: clip(n−m)=r} α_n) a_r for one
    query m, with every weight α_n and every (scalar) embedding a_r a free symbol."""
    k = max_relative_position
    alpha = sp.symbols(f"alpha_0:{seq_len}")
    a = {r: sp.Symbol(f"a_{{{r}}}") for r in range(-k, k + 1)}

    def clip(r):
        return max(-k, min(k, r))

    direct = sum(alpha[n] * a[clip(n - query)] for n in range(seq_len))
    grouped = sum(
        sum(alpha[n] for n in range(seq_len) if clip(n - query) == r) * a[r] for r in a
    )
    return direct, grouped


def dot_product_variance(dim: int = 4):
    """E[(q·k)²] for q, k with independent standard-normal entries (the variance of a
    score term)."""
    from sympy.stats import E, Normal

    q = [Normal(f"q_{i}", 0, 1) for i in range(dim)]
    k = [Normal(f"k_{i}", 0, 1) for i in range(dim)]
    return sp.simplify(E(sp.expand(sum(qi * ki for qi, ki in zip(q, k)) ** 2)))


# --------------------------------------------------------------------------------------
# Relative encodings for every size: proofs with symbolic length and width
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ShawRegrouping:
    """The general regrouping Σ_n α_n a_{c(n)} = Σ_r (Σ_n δ_{r,c(n)} α_n) a_r, c(n) =
    clip(n − m, −k, k).

    ``cases`` maps each range of the offset x = n − m (which together cover every
    integer x) to ``(x, k, clip(x), Σ_{r=−k}^{k} δ_{r,clip(x)} a_r)`` with symbolic k,
    t, s ≥ 0: the sifting step a_{clip(x)} = Σ_r δ_{r,clip(x)} a_r holds in a case when
    its last two entries agree (the sum evaluated, the a_r of the clipped offset).
    ``double`` is the direct sum with that step applied, Σ_n Σ_r α_n δ_{r,c(n)} a_r;
    ``regrouped`` is what SymPy makes of it when it exchanges the two finite sums
    (``Sum.reorder``) and takes a_r out of the sum over n (``factor_sum``); ``grouped``
    is the regrouped form as written, Σ_r a_r Σ_n δ_{r,c(n)} α_n. All with symbolic
    length T, window k and query m."""

    cases: dict[str, tuple]
    direct: sp.Expr
    double: sp.Expr
    regrouped: sp.Expr
    grouped: sp.Expr
    symbols: dict[str, sp.Symbol]


def shaw_value_regrouping_general() -> ShawRegrouping:
    """Shaw et al.'s value term regrouped by offset, for symbolic T, k and m (see
    :class:`ShawRegrouping`).

    The offset ranges x < −k, −k ≤ x ≤ 0, 0 ≤ x ≤ k and x > k are written x = −k − 1 −
    t, x = −t with k = t + s, x = t with k = t + s, x = k + 1 + t, for integers t, s ≥
    0."""
    from sympy.simplify.simplify import factor_sum

    T = sp.Symbol("T", integer=True, positive=True)
    k = sp.Symbol("k", integer=True, nonnegative=True)
    m = sp.Symbol("m", integer=True, nonnegative=True)
    t, s = sp.symbols("t s", integer=True, nonnegative=True)
    n, r = sp.symbols("n r", integer=True)
    alpha, a = sp.IndexedBase("alpha"), sp.IndexedBase("a")

    def clip(x, window):
        return sp.Max(-window, sp.Min(window, x))

    cases = {}
    for name, x, window in [
        ("x < −k", -k - 1 - t, k),
        ("−k ≤ x ≤ 0", -t, t + s),
        ("0 ≤ x ≤ k", t, t + s),
        ("x > k", k + 1 + t, k),
    ]:
        c = clip(x, window)
        cases[name] = (
            x,
            window,
            c,
            sp.Sum(sp.KroneckerDelta(r, c) * a[r], (r, -window, window)).doit(),
        )
    c_n = clip(n - m, k)
    direct = sp.Sum(alpha[n] * a[c_n], (n, 0, T - 1))
    double = sp.Sum(
        alpha[n] * sp.KroneckerDelta(r, c_n) * a[r], (r, -k, k), (n, 0, T - 1)
    )
    grouped = sp.Sum(
        a[r] * sp.Sum(sp.KroneckerDelta(r, c_n) * alpha[n], (n, 0, T - 1)), (r, -k, k)
    )
    swapped = double.reorder((0, 1))  # limits now (n, r): n inner
    regrouped = sp.Sum(
        factor_sum(sp.Sum(swapped.function, swapped.limits[0])), swapped.limits[1]
    )
    return ShawRegrouping(
        cases,
        direct,
        double,
        regrouped,
        grouped,
        {
            "T": T,
            "k": k,
            "m": m,
            "n": n,
            "r": r,
            "t": t,
            "s": s,
            "alpha": alpha,
            "a": a,
        },
    )


def score_variance_general(terms=(("q", "k"),)):
    """Var(Σ_terms Σ_{i=1}^{d} u_i v_i) for a symbolic width d, each term a dot product
    of two of the vectors named in ``terms`` (pairs of names), all entries independent
    N(0, σ²).

    The default is one score q·k; DeBERTa's three terms are ``(("q", "k"), ("q", "k_r"),
    ("k", "q_r"))`` (content→content, content→position, position→content: they share q
    or k). Every product of two terms is a double sum over (i, j); entries are i.i.d.
    across i, so all d diagonal pairs have the moment of one pair (i, i) and all d² − d
    off-diagonal pairs that of one pair (1, 2), which sympy.stats computes. Returns
    ``(variance, (d, σ), moments)`` with ``moments[(a, b)] = (E[a_i b_i], E[a_1
    b_2])``."""
    from sympy.stats import E, Normal

    d = sp.Symbol("d", integer=True, positive=True)
    sigma = sp.Symbol("sigma", positive=True)
    i, j = sp.symbols("i j", integer=True, positive=True)

    def entry(name, index):
        return Normal(f"{name}_{index}", 0, sigma)

    def product(pair, index):
        return entry(pair[0], index) * entry(pair[1], index)

    mean = sum(sp.Sum(E(product(pair, 1)), (i, 1, d)).doit() for pair in terms)
    second, moments = sp.Integer(0), {}
    for a_ in terms:
        for b_ in terms:
            same, cross = (
                E(product(a_, 1) * product(b_, 1)),
                E(product(a_, 1) * product(b_, 2)),
            )
            moments[(a_, b_)] = (same, cross)
            # Σ_{i,j} = Σ_{i=j} + (Σ_{all i,j} − Σ_{i=j})
            second += (
                sp.Sum(same, (i, 1, d)).doit()
                + sp.Sum(cross, (i, 1, d), (j, 1, d)).doit()
                - sp.Sum(cross, (i, 1, d)).doit()
            )
    return sp.simplify(second - mean**2), (d, sigma), moments


def t5_bucket_start_general():
    """:func:`t5_bucket_start` with every size symbolic: solve ``b = e + (B −
    e)·ln(n/e)/ln(D/e)`` for n, with b the bucket, B the buckets of one direction, e of
    them exact, D = max_distance. Returns ``(solution, closed, (b, B, e, D))``: SymPy's
    solution and the closed form n = e·(D/e)^((b − e)/(B − e)) to compare it with."""
    b, B, e, D = sp.symbols("b B e D", positive=True)
    n = sp.Symbol("n", positive=True)
    solution = sp.solve(sp.Eq(b, e + (B - e) * sp.log(n / e) / sp.log(D / e)), n)
    if len(solution) != 1:
        raise RuntimeError(f"expected one solution, got {solution}")
    return solution[0], e * (D / e) ** ((b - e) / (B - e)), (b, B, e, D)
