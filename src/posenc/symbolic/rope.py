"""Rotary position embedding derived with sympy: rotation blocks in both layouts, the
NTK-aware base and YaRN's correction dimension, the block-diagonal induction step, and
multimodal RoPE (Qwen2-VL's M-RoPE): text reduces to 1-D RoPE, images are relative
(the RoPE, context-extension and 2-D RoPE chapters)."""

from __future__ import annotations

from dataclasses import dataclass

import sympy as sp


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
# RoPE for every size: the block-diagonal step, with a symbolic block count
# --------------------------------------------------------------------------------------


def block_diagonal_step():
    """The induction step of RoPE's block argument: for a 2 × 2 block A, B and blocks X,
    Y of any (symbolic) size s, diag(A, X)ᵀ diag(B, Y) = diag(AᵀB, XᵀY). Returns ``(lhs,
    rhs, s)`` with lhs the product as SymPy's ``block_collapse`` evaluates it."""
    s = sp.Symbol("s", integer=True, positive=True)
    A, B = sp.MatrixSymbol("A", 2, 2), sp.MatrixSymbol("B", 2, 2)
    X, Y = sp.MatrixSymbol("X", s, s), sp.MatrixSymbol("Y", s, s)
    lhs = sp.block_collapse(sp.BlockDiagMatrix(A, X).T * sp.BlockDiagMatrix(B, Y))
    return lhs, sp.BlockDiagMatrix(A.T * B, X.T * Y), s


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
