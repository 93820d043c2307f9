"""Attention without positions and with absolute ones, derived with sympy: why
order matters (permutation equivariance), the expansion of an absolute score into
four terms, and the softmax of one attention row under any mask (the
why-order-matters, sinusoidal and ALiBi chapters)."""

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
# The softmax of one attention row under any mask, with a symbolic number of keys
# (sinusoidal and ALiBi chapters)
# --------------------------------------------------------------------------------------

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
