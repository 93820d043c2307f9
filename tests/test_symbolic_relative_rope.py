"""The general (symbolic-size) derivations of the relative and RoPE chapters: Shaw et al.'s value
regrouping for any length, window and query; the score variance for any width (one term, and
DeBERTa's three); the block step that carries RoPE's 2 × 2 identity to any even width."""

import sympy as sp

from posenc import symbolic as S


def test_shaw_regrouping_holds_for_symbolic_length_window_and_query():
    result = S.shaw_value_regrouping_general()
    a = result.symbols["a"]
    assert len(result.cases) == 4
    for x, window, clipped, sifted in result.cases.values():
        assert sifted == a[clipped]  # the sum over r picks a_{clip(x)}
        assert sp.simplify(clipped - sp.Max(-window, sp.Min(window, x))) == 0
    assert result.regrouped == result.grouped
    for symbol in ("T", "k", "m"):
        assert result.symbols[symbol] in result.grouped.free_symbols


def test_shaw_general_form_agrees_with_the_expanded_instance():
    """Substituting a length, window and query into the general sums gives the expanded instance."""
    result = S.shaw_value_regrouping_general()
    sym = result.symbols
    for seq_len, k, m in [(4, 1, 0), (4, 1, 3), (6, 2, 2)]:
        values = {sym["T"]: seq_len, sym["k"]: k, sym["m"]: m}
        direct, grouped = S.shaw_value_regrouping(seq_len=seq_len, max_relative_position=k, query=m)
        alpha = sp.symbols(f"alpha_0:{seq_len}")
        names = {sym["alpha"][n]: alpha[n] for n in range(seq_len)}
        names.update({sym["a"][r]: sp.Symbol(f"a_{{{r}}}") for r in range(-k, k + 1)})
        for general in (result.direct, result.grouped):
            expanded = general.subs(values).doit().subs(names)
            assert sp.expand(expanded - direct) == 0 and sp.expand(expanded - grouped) == 0


def test_score_variance_for_symbolic_width():
    variance, (d, sigma), moments = S.score_variance_general()
    assert sp.simplify(variance - d * sigma**4) == 0
    assert moments[(("q", "k"), ("q", "k"))] == (sigma**4, 0)
    assert variance.subs({d: 3, sigma: 1}) == S.dot_product_variance(3)


def test_deberta_three_terms_have_three_times_the_variance():
    variance, (d, sigma), moments = S.score_variance_general((("q", "k"), ("q", "k_r"), ("k", "q_r")))
    assert sp.simplify(variance - 3 * d * sigma**4) == 0
    assert all(same == 0 and cross == 0 for (a, b), (same, cross) in moments.items() if a != b)  # uncorrelated


def test_block_diagonal_step_for_symbolic_block_size():
    lhs, rhs, s = S.block_diagonal_step()
    assert lhs == rhs
    assert s in lhs.shape[0].free_symbols


def test_t5_bucket_start_for_symbolic_sizes():
    solution, closed, (b, B, e, D) = S.t5_bucket_start_general()
    assert sp.simplify(sp.expand_log(sp.log(solution) - sp.log(closed), force=True)) == 0
    for num_buckets, max_distance in [(32, 128), (32, 64), (16, 64)]:
        for bucket in range(num_buckets // 2, num_buckets):
            instance = closed.subs({b: bucket, B: num_buckets, e: num_buckets // 2, D: max_distance})
            assert sp.simplify(instance - S.t5_bucket_start(bucket, num_buckets, max_distance)) == 0
