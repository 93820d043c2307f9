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


def test_transformer_xl_terms_have_no_absolute_positions():
    result = S.transformer_xl_terms()
    p_m, p_n, R = result.symbols["p_m"], result.symbols["p_n"], result.symbols["R"]
    for term in result.relative.values():
        assert p_m not in term.free_symbols and p_n not in term.free_symbols
    assert sum(R in t.free_symbols for t in result.relative.values()) == 2  # (b) and (d)


def test_shaw_regrouping_identity():
    for m in range(4):
        direct, grouped = S.shaw_value_regrouping(query=m)
        assert sp.expand(direct - grouped) == 0


def test_t5_bucket_starts_match_the_code():
    import torch

    from posenc.relative import t5_relative_position_bucket

    for num_buckets, max_distance in [(32, 128), (16, 64), (8, 20)]:
        distance = torch.arange(0, 4 * max_distance)
        bucket = t5_relative_position_bucket(-distance, bidirectional=False, num_buckets=num_buckets, max_distance=max_distance)
        for b in range(num_buckets // 2, int(bucket.max()) + 1):
            first = int(distance[bucket == b].min())
            assert first == int(sp.ceiling(S.t5_bucket_start(b, num_buckets, max_distance)))


def test_score_variance_is_the_dimension():
    assert S.dot_product_variance(3) == 3
