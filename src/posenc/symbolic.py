"""The book's derivations as functions that return sympy objects.

The notebooks display these results and ``assert`` the claims; the tests lambdify the
same objects and compare them with the torch code (the derivation-to-code bridge).
Nothing here is numerical.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

# --------------------------------------------------------------------------------------
# Why order matters
# --------------------------------------------------------------------------------------


def symbolic_matrix(name: str, rows: int, cols: int) -> sp.Matrix:
    """A ``rows × cols`` matrix of real symbols ``name_{i,j}``."""
    return sp.Matrix(
        rows, cols, lambda i, j: sp.Symbol(f"{name}_{{{i},{j}}}", real=True)
    )


def row_softmax(scores: sp.Matrix) -> sp.Matrix:
    """Softmax of each row: ``exp(s_ij) / Σ_j exp(s_ij)``."""
    expd = scores.applyfunc(sp.exp)
    rows = []
    for i in range(expd.rows):
        total = sum(expd.row(i))
        rows.append([e / total for e in expd.row(i)])
    return sp.Matrix(rows)


def self_attention(
    X: sp.Matrix, Wq: sp.Matrix, Wk: sp.Matrix, Wv: sp.Matrix
) -> sp.Matrix:
    """Single-head self-attention without positions or mask:
    ``softmax(X W_q (X W_k)ᵀ / √d_h) X W_v`` with X of shape (T, d)."""
    Q, K, V = X * Wq, X * Wk, X * Wv
    return row_softmax(Q * K.T / sp.sqrt(Wq.shape[1])) * V


def permutation_matrix(perm: list[int]) -> sp.Matrix:
    """The matrix P with ``(P X)[i] = X[perm[i]]``."""
    n = len(perm)
    return sp.Matrix(n, n, lambda i, j: 1 if perm[i] == j else 0)


@dataclass(frozen=True)
class PermutationEquivariance:
    """``attention(P X)`` and ``P attention(X)`` for a symbolic X and permutation P."""

    X: sp.Matrix
    P: sp.Matrix
    attention_of_permuted: sp.Matrix
    permuted_attention: sp.Matrix

    def difference(self) -> sp.Matrix:
        return (self.attention_of_permuted - self.permuted_attention).applyfunc(
            sp.simplify
        )


def permutation_equivariance(
    seq_len: int = 3, dim: int = 2, head_dim: int = 2, perm: list[int] | None = None
) -> PermutationEquivariance:
    """Attention of a permuted sequence vs the permuted attention, with every entry of
    X, W_q, W_k, W_v a free symbol. Their difference is the zero matrix: attention
    without positional information is permutation-equivariant."""
    perm = perm if perm is not None else [*range(1, seq_len), 0]
    X = symbolic_matrix("x", seq_len, dim)
    Wq, Wk, Wv = (symbolic_matrix(n, dim, head_dim) for n in ("W^q", "W^k", "W^v"))
    P = permutation_matrix(perm)
    return PermutationEquivariance(
        X, P, self_attention(P * X, Wq, Wk, Wv), P * self_attention(X, Wq, Wk, Wv)
    )


@dataclass(frozen=True)
class AbsoluteScore:
    """The attention logit with absolute positions added to the inputs, expanded.

    ``score`` is ``(x_m + p_m)ᵀ W_qᵀ W_k (x_n + p_n)`` and ``terms`` its four parts."""

    score: sp.MatrixExpr
    expanded: sp.MatrixExpr
    terms: dict[str, sp.MatrixExpr]


def absolute_score_expansion(
    dim: sp.Symbol | int | None = None, head_dim=None
) -> AbsoluteScore:
    """Expand the score between query position m and key position n when position
    vectors are added to the token embeddings, using sympy's non-commutative matrix
    symbols.

    Returns the four terms: content–content ``x_mᵀ W_qᵀ W_k x_n``, content–position
    ``x_mᵀ W_qᵀ W_k p_n``, position–content ``p_mᵀ W_qᵀ W_k x_n`` and position–position
    ``p_mᵀ W_qᵀ W_k p_n`` (Ke et al. 2021, "Rethinking Positional Encoding in Language
    Pre-training", Eq. 4; Dai et al. 2019, §3.3 use the same split for Transformer-XL).
    """
    d = dim if dim is not None else sp.Symbol("d", integer=True, positive=True)
    dh = (
        head_dim
        if head_dim is not None
        else sp.Symbol("d_h", integer=True, positive=True)
    )
    x_m, x_n, p_m, p_n = (
        sp.MatrixSymbol(n, d, 1) for n in ("x_m", "x_n", "p_m", "p_n")
    )
    Wq, Wk = sp.MatrixSymbol("W_q", dh, d), sp.MatrixSymbol("W_k", dh, d)
    score = (Wq * (x_m + p_m)).T * (Wk * (x_n + p_n))
    expanded = sp.expand(score)
    terms = {
        "content-content": x_m.T * Wq.T * Wk * x_n,
        "content-position": x_m.T * Wq.T * Wk * p_n,
        "position-content": p_m.T * Wq.T * Wk * x_n,
        "position-position": p_m.T * Wq.T * Wk * p_n,
    }
    return AbsoluteScore(score, expanded, terms)


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
# Rotary position embedding
# --------------------------------------------------------------------------------------

m_sym, n_sym = sp.symbols("m n", integer=True)
angle_a, angle_b = sp.symbols("a b", real=True)


def rotation_matrix(angle) -> sp.Matrix:
    """The 2D rotation R(a) = [[cos a, −sin a], [sin a, cos a]]."""
    return sp.Matrix([[sp.cos(angle), -sp.sin(angle)], [sp.sin(angle), sp.cos(angle)]])


def rope_block_matrix(position, thetas, layout: str = "interleaved") -> sp.Matrix:
    """R_{Θ,m} of RoFormer Eq. 15: a rotation by ``position·θ_i`` of each feature pair,
    pairs (2i, 2i+1) (``"interleaved"``) or (i, i + d/2) (``"half"``). Size d × d with d
    = 2·len(thetas)."""
    half = len(thetas)
    matrix = sp.zeros(2 * half, 2 * half)
    for i, theta in enumerate(thetas):
        a, b = (2 * i, 2 * i + 1) if layout == "interleaved" else (i, i + half)
        block = rotation_matrix(position * theta)
        matrix[a, a], matrix[a, b], matrix[b, a], matrix[b, b] = (
            block[0, 0],
            block[0, 1],
            block[1, 0],
            block[1, 1],
        )
    return matrix


def rotate_pairs_matrix(dim: int, layout: str = "interleaved") -> sp.Matrix:
    """The matrix J of the 90° turn of every pair, so that ``rotate(x) = J x``
    (``rotate_half`` or ``rotate_interleaved`` of :mod:`posenc.rope`)."""
    return rope_block_matrix(1, [sp.pi / 2] * (dim // 2), layout)


def ntk_base():
    """Solve for the new base b' of NTK-aware scaling: the lowest frequency
    b'^{−(d−2)/d} must equal b^{−(d−2)/d}/s (interpolated by s); the highest, b'^0 = 1,
    is untouched by any base.

    Taking logarithms makes the condition linear in β = ln b'. Returns ``(b', (d, b,
    s))`` with b' = b·s^{d/(d−2)}."""
    d, b, s = sp.symbols("d b s", positive=True)
    beta = sp.Symbol("beta", real=True)
    exponent = -(d - 2) / d
    (solution,) = sp.solve(
        sp.Eq(exponent * beta, exponent * sp.log(b) - sp.log(s)), beta
    )
    # β = c_b·ln b + c_s·ln s, so b' = b^{c_b}·s^{c_s}
    terms = sp.collect(
        sp.expand(sp.expand_log(solution, force=True)),
        [sp.log(b), sp.log(s)],
        evaluate=False,
    )
    if set(terms) - {sp.log(b), sp.log(s)}:
        raise ArithmeticError(f"unexpected terms in ln b' = {solution}")
    return sp.Mul(
        *(
            sp.exp(log_term) ** sp.simplify(coefficient)
            for log_term, coefficient in terms.items()
        )
    ), (d, b, s)


def yarn_correction_dim_expr():
    """Solve L / λ_i = r for the pair index i, with wavelength λ_i = 2π·b^{2i/d}: the
    index whose wavelength fits r times into the training length L (Peng et al. 2023,
    Eq. 17 inverted). In logarithms the condition is linear in i. Returns ``(i, (r, d,
    b, L))`` with i = d·(ln L − ln 2π − ln r) / (2 ln b)."""
    i, r, d, b, L = sp.symbols("i r d b L", positive=True)
    log_wavelength = sp.log(2 * sp.pi) + 2 * i / d * sp.log(b)
    (solution,) = sp.solve(sp.Eq(sp.log(L) - log_wavelength, sp.log(r)), i)
    return sp.factor(solution), (r, d, b, L)


# --------------------------------------------------------------------------------------
# General forms with a symbolic length: the sinusoidal similarity, tensor2tensor's
# frequencies, and the softmax of one attention row under any mask (sinusoidal and ALiBi
# chapters)
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


key_index = sp.Symbol("n", integer=True, nonnegative=True)
num_keys_symbol = sp.Symbol("N", integer=True, positive=True)
key_mask = sp.IndexedBase("w", nonnegative=True)
row_scores = sp.IndexedBase("s", real=True)


def masked_softmax_weight(
    logit, n=key_index, num_keys=num_keys_symbol, mask=key_mask
) -> sp.Expr:
    """The attention weight of key ``n`` in one row of ``num_keys`` keys (symbolic by
    default) under any
    mask: ``w_n·exp(logit(n)) / Σ_{j=0}^{N−1} w_j·exp(logit(j))``.

    ``logit`` maps a key index to that key's score. The mask weights ``w_j ≥ 0`` are
    free symbols:
    ``w_j ∈ {0, 1}`` is any hard mask (causal, padding, sliding window), ``w_j = 0``
    standing for a score of −∞; at least one key of the row must be visible. An identity
    proved about this expression holds for every length and every mask.
    """
    j = sp.Symbol("j", integer=True, nonnegative=True)
    return (
        mask[n]
        * sp.exp(logit(n))
        / sp.Sum(mask[j] * sp.exp(logit(j)), (j, 0, num_keys - 1))
    )


# --------------------------------------------------------------------------------------
# Relative encodings and RoPE, for every size: proofs with symbolic length, width and
# block count
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


def block_diagonal_step():
    """The induction step of RoPE's block argument: for a 2 × 2 block A, B and blocks X,
    Y of any (symbolic) size s, diag(A, X)ᵀ diag(B, Y) = diag(AᵀB, XᵀY). Returns ``(lhs,
    rhs, s)`` with lhs the product as SymPy's ``block_collapse`` evaluates it."""
    s = sp.Symbol("s", integer=True, positive=True)
    A, B = sp.MatrixSymbol("A", 2, 2), sp.MatrixSymbol("B", 2, 2)
    X, Y = sp.MatrixSymbol("X", s, s), sp.MatrixSymbol("Y", s, s)
    lhs = sp.block_collapse(sp.BlockDiagMatrix(A, X).T * sp.BlockDiagMatrix(B, Y))
    return lhs, sp.BlockDiagMatrix(A.T * B, X.T * Y), s


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


# --------------------------------------------------------------------------------------
# Multimodal RoPE (Qwen2-VL's M-RoPE): text reduces to 1-D RoPE; images are relative
# --------------------------------------------------------------------------------------

mrope_ids = sp.symbols("t h w", integer=True)
mrope_key_ids = sp.symbols("t' h' w'", integer=True)


def mrope_block_matrix(ids, thetas, sections) -> sp.Matrix:
    """M-RoPE's rotation of one token in the ``"half"`` layout: pair i (features (i, i +
    d/2)) turns by ``ids[a(i)]·θ_i``, a(i) the axis whose section holds pair i (the
    first ``sections[0]`` pairs temporal, the next ``sections[1]`` height, the last
    ``sections[2]`` width; Qwen2-VL §2.1, :func:`posenc.rope_nd.apply_mrope`)."""
    axes = [axis for axis, size in enumerate(sections) for _ in range(size)]
    if len(axes) != len(thetas):
        raise ValueError(
            f"sections {list(sections)} must sum to the number of frequencies "
            f"{len(thetas)}"
        )
    half = len(thetas)
    matrix = sp.zeros(2 * half, 2 * half)
    for i, (axis, theta) in enumerate(zip(axes, thetas, strict=True)):
        block = rotation_matrix(ids[axis] * theta)
        for (r, c), value in zip([(0, 0), (0, 1), (1, 0), (1, 1)], block, strict=True):
            matrix[(i, i + half)[r], (i, i + half)[c]] = value
    return matrix


@dataclass(frozen=True)
class MRopeTextReduction:
    """M-RoPE on a text token (t = h = w = m) against 1-D RoPE at position m.

    ``mrope`` is the rotation with free ids (t, h, w) and frequencies θ_0 … θ_{k−1};
    ``text`` the same with t = h = w = m; ``rope`` RoFormer's R_{Θ,m} (``"half"``
    layout). ``pair_angle`` is the angle of a general pair, ``p_{a(i)}·θ_i`` with an
    undetermined axis function a and symbolic pair index i; ``pair_angle_text`` is it
    with every axis's id set to m, and ``rope_angle`` is m·θ_i."""

    mrope: sp.Matrix
    text: sp.Matrix
    rope: sp.Matrix
    pair_angle: sp.Expr
    pair_angle_text: sp.Expr
    rope_angle: sp.Expr
    symbols: dict


def mrope_text_reduction(sections=(1, 1, 1)) -> MRopeTextReduction:
    """M-RoPE reduces to 1-D RoPE on text: with all three ids equal to m, the rotation
    of M-RoPE equals RoPE's rotation for position m.

    Two results. (1) The instance: the full (d × d) matrices for ``sections`` (default
    one pair per axis, d = 6) with symbolic m and symbolic frequencies θ_i — an
    identity of matrices, checked for this split. (2) The general statement, for
    every width and every split (chunked as in Qwen2-VL or interleaved as in Qwen3-VL):
    pair i's angle is ``p_{a(i)}·θ_i`` whatever the axis function a; setting every
    axis's id p_0 = p_1 = p_2 = m makes it m·θ_i, independent of a(i). Since a RoPE
    matrix is determined pair by pair by its angles (a block-diagonal matrix of 2 × 2
    rotations, :func:`block_diagonal_step`), equal angles for every i give equal
    matrices: this proves the general statement.

    Source: Wang et al. 2024, Qwen2-VL, arXiv:2409.12191, §2.1 (for text "M-RoPE is
    functionally equivalent to 1D-RoPE"); RoFormer Eq. 15.
    """
    num_pairs = sum(sections)
    thetas = sp.symbols(f"theta_0:{num_pairs}", positive=True)
    m = m_sym
    mrope = mrope_block_matrix(mrope_ids, thetas, sections)
    text = mrope.subs({axis_id: m for axis_id in mrope_ids})
    rope = rope_block_matrix(m, thetas, layout="half")
    i = sp.Symbol("i", integer=True, nonnegative=True)
    axis_of = sp.Function("a")
    p, theta = sp.IndexedBase("p"), sp.IndexedBase("theta", positive=True)
    pair_angle = p[axis_of(i)] * theta[i]
    pair_angle_text = pair_angle.replace(
        lambda e: isinstance(e, sp.Indexed) and e.base == p, lambda e: m
    )
    return MRopeTextReduction(
        mrope,
        text,
        rope,
        pair_angle,
        pair_angle_text,
        m * theta[i],
        {"m": m, "ids": mrope_ids, "thetas": thetas, "i": i, "a": axis_of, "p": p},
    )


@dataclass(frozen=True)
class MRopeRelativeScore:
    """The M-RoPE score between a query at (t, h, w) and a key at (t', h', w'), one
    rotary pair per axis (d = 6).

    ``score`` is ``(R(t, h, w) q)ᵀ (R(t', h', w') k)``; ``relative`` is ``qᵀ R(t' − t,
    h' − h, w' − w) k``, a function of the differences only; ``shifted`` is the score
    with every id of both tokens moved by its axis's offset (Δt, Δh, Δw)."""

    score: sp.Expr
    relative: sp.Expr
    shifted: sp.Expr
    symbols: dict


def mrope_relative_score() -> MRopeRelativeScore:
    """M-RoPE is relative in every axis: the score depends on (t' − t, h' − h, w' − w)
    only.

    Proved with free q, k (6 real entries each), free frequencies and free integer ids
    for sections (1, 1, 1): an instance of the split, but the argument carries to any
    split, since the score is a sum over pairs and each pair is the 2 × 2 RoFormer
    identity R(aθ)ᵀR(bθ) = R((b − a)θ) on its own axis's ids. The same proof covers
    2-D axial RoPE (:func:`posenc.rope_nd.apply_rope_2d`), which is M-RoPE without the
    temporal axis.

    Source: Wang et al. 2024, Qwen2-VL, arXiv:2409.12191, §2.1; RoFormer Eq. 16.
    """
    thetas = sp.symbols("theta_0:3", positive=True)
    q = sp.Matrix(sp.symbols("q_0:6", real=True))
    k = sp.Matrix(sp.symbols("k_0:6", real=True))
    offsets = sp.symbols("Delta_t Delta_h Delta_w", integer=True)

    def rotation(ids):
        return mrope_block_matrix(ids, thetas, (1, 1, 1))

    score = ((rotation(mrope_ids) * q).T * (rotation(mrope_key_ids) * k))[0]
    differences = [b - a for a, b in zip(mrope_ids, mrope_key_ids, strict=True)]
    relative = (q.T * rotation(differences) * k)[0]
    shift = {}
    for query_id, key_id, offset in zip(mrope_ids, mrope_key_ids, offsets, strict=True):
        shift.update({query_id: query_id + offset, key_id: key_id + offset})
    shifted = score.subs(shift, simultaneous=True)
    return MRopeRelativeScore(
        score,
        relative,
        shifted,
        {
            "q": q,
            "k": k,
            "thetas": thetas,
            "query_ids": mrope_ids,
            "key_ids": mrope_key_ids,
            "offsets": offsets,
        },
    )
