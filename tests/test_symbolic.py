import sympy as sp

from posenc import symbolic as S


def test_attention_without_positions_is_permutation_equivariant():
    for perm in ([1, 2, 0], [2, 1, 0]):
        result = S.permutation_equivariance(perm=perm)
        assert result.difference() == sp.zeros(3, 2)


def test_a_positional_term_breaks_equivariance():
    """Adding a position matrix P_pos to X breaks it: attention(P X + Pos) ≠ P attention(X + Pos)."""
    X = S.symbolic_matrix("x", 3, 2)
    pos = S.symbolic_matrix("p", 3, 2)
    W = [S.symbolic_matrix(n, 2, 2) for n in ("q", "k", "v")]
    P = S.permutation_matrix([1, 2, 0])
    lhs = S.self_attention(P * X + pos, *W)
    rhs = P * S.self_attention(X + pos, *W)
    values = {s: sp.Rational(i % 7 + 1, 5) * (-1) ** i for i, s in enumerate(sorted((lhs - rhs).free_symbols, key=str))}
    assert any(abs(float(e.subs(values))) > 1e-6 for e in (lhs - rhs))


def test_absolute_score_has_four_terms():
    result = S.absolute_score_expansion()
    assert len(result.expanded.args) == 4
    assert sp.simplify(result.expanded - sp.MatAdd(*result.terms.values())) == sp.ZeroMatrix(1, 1)


def test_shift_matrix_is_a_rotation_independent_of_position():
    M = S.sinusoidal_shift_matrix().M
    assert S.pos not in M.free_symbols
    assert sp.simplify(M.T * M) == sp.eye(2) and sp.simplify(M.det()) == 1
    moved = M * S.sinusoidal_pair(S.pos) - S.sinusoidal_pair(S.pos + S.phi)
    assert moved.applyfunc(lambda e: sp.simplify(sp.expand(e, trig=True))) == sp.zeros(2, 1)


def test_dot_product_depends_only_on_offset_and_is_symmetric():
    expr, closed, _ = S.sinusoidal_dot_product(4)
    assert sp.simplify(sp.expand(expr, trig=True) - closed) == 0
    assert S.t not in closed.free_symbols
    assert sp.simplify(closed.subs(S.phi, -S.phi) - closed) == 0


def test_log_space_frequency_identity():
    i, d = sp.Symbol("i", nonnegative=True), sp.Symbol("d", positive=True)
    theta = S.sinusoidal_inv_freq(d, i)
    assert sp.simplify(theta - sp.exp(-2 * i * sp.log(S.base_symbol) / d)) == 0
