import pytest
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

    from posenc.relative_buckets import t5_relative_position_bucket

    for num_buckets, max_distance in [(32, 128), (16, 64), (8, 20)]:
        distance = torch.arange(0, 4 * max_distance)
        bucket = t5_relative_position_bucket(-distance, bidirectional=False, num_buckets=num_buckets, max_distance=max_distance)
        for b in range(num_buckets // 2, int(bucket.max()) + 1):
            first = int(distance[bucket == b].min())
            assert first == int(sp.ceiling(S.t5_bucket_start(b, num_buckets, max_distance)))


def test_score_variance_is_the_dimension():
    assert S.dot_product_variance(3) == 3


def test_rope_block_matrix_is_the_code_matrix():
    """The SymPy R_{Θ,m}, lambdified, equals posenc.rope.rope_matrix (both layouts)."""
    import torch

    from posenc.rope import rope_matrix
    from posenc.frequencies import compute_inv_freq

    thetas = sp.symbols("theta_0:3", positive=True)
    inv_freq = compute_inv_freq(6)
    for layout in ("interleaved", "half"):
        fn = sp.lambdify((S.m_sym, *thetas), S.rope_block_matrix(S.m_sym, thetas, layout))
        for position in (0.0, 3.0, 250.5):
            expected = torch.tensor(fn(position, *inv_freq.double().tolist()), dtype=torch.float64)
            torch.testing.assert_close(rope_matrix(position, inv_freq, layout=layout), expected)


def test_ntk_base_is_the_code_base():
    import torch

    from posenc.scaling import rope_inv_freq
    from posenc.frequencies import compute_inv_freq

    b_new, (d, b, s) = S.ntk_base()
    for dim, base, factor in [(16, 10000.0, 4.0), (128, 500000.0, 8.0)]:
        new_base = float(b_new.subs({d: dim, b: base, s: factor}))
        ours, _ = rope_inv_freq(dim, base, {"rope_type": "ntk", "factor": factor})
        torch.testing.assert_close(ours, compute_inv_freq(dim, new_base))


def test_yarn_correction_dim_is_the_code_formula():
    from posenc.scaling import yarn_correction_dim

    expr, (r, d, b, L) = S.yarn_correction_dim_expr()
    fn = sp.lambdify((r, d, b, L), expr)
    for args in [(32.0, 128, 10000.0, 4096), (1.0, 16, 10000.0, 64), (2.0, 64, 500000.0, 8192)]:
        assert fn(*args) == pytest.approx(yarn_correction_dim(*args), rel=1e-12)
