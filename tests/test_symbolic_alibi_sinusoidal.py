"""The general (symbolic-length) derivations of the sinusoidal and ALiBi chapters, and their bridges to
the torch code: sinusoidal_dot_product_sum, tensor2tensor_inv_freq, masked_softmax_weight."""

import math

import numpy as np
import sympy as sp
import torch

from posenc import symbolic as S
from posenc.alibi import alibi_bias, alibi_slopes
from posenc.frequencies import compute_inv_freq
from posenc.sinusoidal import sinusoidal_encoding


def test_dot_product_sum_is_a_sum_of_cosines_for_every_width():
    expr, closed = S.sinusoidal_dot_product_sum()
    assert S.num_pairs_symbol in expr.free_symbols  # the width is symbolic
    assert sp.simplify(expr - closed) == 0
    assert S.t not in closed.free_symbols and sp.simplify(closed.subs(S.phi, -S.phi) - closed) == 0


def test_dot_product_sum_agrees_with_the_fixed_width_form_and_the_torch_table():
    expr, closed = S.sinusoidal_dot_product_sum(3)
    fixed, fixed_closed, freqs = S.sinusoidal_dot_product(3)
    to_fixed = {S.pair_frequency[k]: freqs[k] for k in range(3)}
    assert sp.simplify(expr.doit().subs(to_fixed) - fixed) == 0
    assert sp.simplify(closed.doit().subs(to_fixed) - fixed_closed) == 0
    # numerically, with the frequencies of d = 16: PE(t)·PE(t+φ) = Σ_k cos(θ_k φ)
    theta = compute_inv_freq(16).double()
    closed8 = sp.lambdify((S.phi, sp.IndexedBase("omega")), S.sinusoidal_dot_product_sum(8)[1].doit(), "numpy")
    table = sinusoidal_encoding(torch.arange(300), 16).double()
    for t0, offset in [(0, 7), (13, 100), (150, 149)]:
        assert abs(float(table[t0] @ table[t0 + offset]) - closed8(offset, theta.numpy())) < 1e-4


def test_tensor2tensor_frequencies_match_fairseq_and_differ_from_the_paper():
    d = 64
    half = d // 2
    fairseq = torch.exp(torch.arange(half, dtype=torch.float64) * -(math.log(10000) / (half - 1)))
    ours = [float(S.tensor2tensor_inv_freq(d, i, sp.Integer(10000))) for i in range(half)]
    assert np.allclose(fairseq.numpy(), ours, rtol=1e-12)
    assert ours[0] == 1.0 and math.isclose(ours[-1], 1e-4, rel_tol=1e-12)
    i, dim = sp.Symbol("i", integer=True, nonnegative=True), sp.Symbol("d", integer=True, positive=True)
    log_ratio = sp.expand_log(sp.log(S.tensor2tensor_inv_freq(dim, i) / S.sinusoidal_inv_freq(dim, i)), force=True)
    assert sp.simplify(log_ratio + 4 * i * sp.log(S.base_symbol) / (dim * (dim - 2))) == 0


def test_masked_softmax_is_shift_invariant_for_any_length_and_mask():
    c = sp.Symbol("c", real=True)
    s = S.row_scores
    assert sp.simplify(S.masked_softmax_weight(lambda n: s[n] + c) - S.masked_softmax_weight(lambda n: s[n])) == 0


def test_masked_softmax_weight_is_torch_softmax_with_minus_infinity():
    g = torch.Generator().manual_seed(0)
    scores = torch.randn(6, generator=g, dtype=torch.float64)
    mask = torch.tensor([1, 0, 1, 1, 0, 1])
    weights = [S.masked_softmax_weight(lambda n: S.row_scores[n], n=n, num_keys=6).doit() for n in range(6)]
    values = {**{S.row_scores[j]: float(scores[j]) for j in range(6)}, **{S.key_mask[j]: int(mask[j]) for j in range(6)}}
    ours = torch.tensor([float(w.subs(values)) for w in weights], dtype=torch.float64)
    reference = torch.softmax(scores.masked_fill(mask == 0, float("-inf")), dim=0)
    assert torch.allclose(ours, reference, atol=1e-12)


def test_alibi_paper_and_key_only_biases_give_the_same_attention_under_any_mask():
    slope, m = sp.Symbol("m_h", positive=True), sp.Symbol("m", integer=True, nonnegative=True)
    s = S.row_scores
    paper = S.masked_softmax_weight(lambda n: s[n] - slope * (m - n))
    key_only = S.masked_softmax_weight(lambda n: s[n] + slope * n)
    assert sp.simplify(paper - key_only) == 0
    # numerically, with a padding mask that differs from row to row and within rows
    T, H = 12, 4
    g = torch.Generator().manual_seed(1)
    scores = torch.randn(2, H, T, T, generator=g, dtype=torch.float64)
    keep = torch.rand(2, 1, T, T, generator=g) > 0.3
    keep |= torch.eye(T, dtype=torch.bool)  # every row sees at least one key
    p = torch.arange(T)
    paper_bias = alibi_bias(p, p, alibi_slopes(H)).double()
    key_bias = alibi_slopes(H).double()[:, None, None] * p.double()  # (H, 1, T): BLOOM's form, one row for all queries
    a = torch.softmax((scores + paper_bias).masked_fill(~keep, float("-inf")), dim=-1)
    b = torch.softmax((scores + key_bias).masked_fill(~keep, float("-inf")), dim=-1)
    assert torch.allclose(a, b, atol=1e-12)
