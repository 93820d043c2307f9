import pytest
import torch

from posenc.properties import (
    check_properties,
    plug_in_points,
    position_similarity,
    positional_parameters,
    properties_table,
    scheme_similarity,
)
from posenc.schemes import available_schemes, build_scheme
from posenc.sinusoidal import sinusoidal_encoding


def test_distance_kernel_has_all_three():
    idx = torch.arange(10.0)
    report = check_properties(-(idx[:, None] - idx[None, :]).abs())
    assert report.translation_invariant and report.symmetric and report.monotonic
    assert report.row() == {"translation invariance": "✓", "symmetry": "✓", "monotonicity": "✓"}


def test_each_property_can_fail():
    idx = torch.arange(6.0)
    causal_like = idx[None, :] - idx[:, None]  # g = n - m: translation invariant, antisymmetric, not monotone
    report = check_properties(causal_like)
    assert report.translation_invariant and not report.symmetric and not report.monotonic
    absolute = idx[:, None] * idx[None, :]
    assert not check_properties(absolute).translation_invariant


def test_sinusoidal_is_translation_invariant_and_symmetric_but_not_monotonic():
    report = check_properties(position_similarity(sinusoidal_encoding(200, 16)), atol=1e-4)
    assert report.translation_invariant and report.symmetric and not report.monotonic
    assert 0 < report.monotonicity_violations < 1


def test_bad_shapes():
    with pytest.raises(ValueError, match="square"):
        check_properties(torch.zeros(3, 4))
    with pytest.raises(ValueError, match=r"\(T, d\)"):
        position_similarity(torch.zeros(3))


def test_properties_table():
    idx = torch.arange(6.0)
    text = properties_table({"distance": check_properties(-(idx[:, None] - idx[None, :]).abs()),
                             "offset": check_properties(idx[None, :] - idx[:, None])}, first_column="g")
    assert text.splitlines() == [
        "| g | translation invariance | symmetry | monotonicity |",
        "|---|---|---|---|",
        "| distance | ✓ | ✓ | ✓ |",
        "| offset | ✓ | ✗ | ✗ |",
    ]


def test_causal_checks_only_the_lower_half():
    idx = torch.arange(8.0)
    alibi_like = -(idx[:, None] - idx[None, :])  # −(m − n): decreasing to the left, growing to the right
    full = check_properties(alibi_like)
    assert full.translation_invariant and not full.monotonic and not full.symmetric
    causal = check_properties(alibi_like, causal=True)
    assert causal.translation_invariant and causal.monotonic and causal.symmetric is None
    assert causal.asymmetry is None and causal.row()["symmetry"] == "n/a"
    assert causal.max_abs == 7.0 and full.max_abs == 7.0
    upper_noise = alibi_like + torch.triu(torch.rand(8, 8), diagonal=1)  # n > m is never used by a decoder
    assert check_properties(upper_noise, causal=True) == causal


def test_relative_tolerance():
    idx = torch.arange(6.0)
    g = 1e6 * -(idx[:, None] - idx[None, :]).abs()
    noisy = g + 1e-3 * torch.rand(6, 6)
    assert not check_properties(noisy).translation_invariant
    assert check_properties(noisy, rtol=1e-8).translation_invariant
    with pytest.raises(ValueError, match="rtol"):
        check_properties(g, rtol=-1.0)


def test_plug_in_points_and_similarity_for_every_registered_scheme():
    for name in available_schemes():
        scheme = build_scheme(name, d_model=32, num_heads=2)
        points = plug_in_points(scheme)
        sim = scheme_similarity(scheme, 12)
        if not points:
            assert sim is None and positional_parameters(scheme) == 0
            continue
        assert sim.values.shape == (12, 12) and sim.values.dtype == torch.float64
        report = check_properties(sim.values, rtol=1e-5, causal=sim.causal)
        if points[0] == "embedding":  # a dot product of position vectors is symmetric
            assert report.symmetric and not sim.causal
        else:  # the relative schemes and RoPE are relative by construction
            assert report.translation_invariant, name
        assert positional_parameters(scheme) == sum(p.numel() for p in scheme.parameters())


def test_scheme_similarity_values():
    assert plug_in_points(build_scheme("rope", d_model=32, num_heads=2)) == ("q/k transform",)
    assert plug_in_points(build_scheme("shaw", d_model=32, num_heads=2)) == ("score bias", "value term")
    sinusoidal = scheme_similarity(build_scheme("sinusoidal", d_model=16, num_heads=2), 20)
    expected = position_similarity(sinusoidal_encoding(20, 16))
    assert torch.allclose(sinusoidal.values, expected, atol=1e-5)
    alibi = scheme_similarity(build_scheme("alibi", d_model=16, num_heads=2), 10, head=1)
    assert alibi.causal and check_properties(alibi.values, causal=True).monotonic
    rope = scheme_similarity(build_scheme("rope", d_model=16, num_heads=2), 10, seed=1)
    assert torch.equal(rope.values, scheme_similarity(build_scheme("rope", d_model=16, num_heads=2), 10, seed=1).values)


def test_scheme_similarity_errors():
    with pytest.raises(ValueError, match="max_positions"):
        scheme_similarity(build_scheme("learned", d_model=16, num_heads=2, max_len=8), 9)
    with pytest.raises(ValueError, match="seq_len"):
        scheme_similarity(build_scheme("alibi", d_model=16, num_heads=2), 1)
    with pytest.raises(ValueError, match="head"):
        scheme_similarity(build_scheme("alibi", d_model=16, num_heads=2), 4, head=2)


def test_properties_table_with_missing_reports_and_extra_columns():
    idx = torch.arange(4.0)
    text = properties_table({"none": None, "alibi": check_properties(idx[None, :] - idx[:, None], causal=True)},
                            extra={"parameters": {"none": "0", "alibi": "0"}})
    assert text.splitlines() == [
        "| scheme | translation invariance | symmetry | monotonicity | parameters |",
        "|---|---|---|---|---|",
        "| none | — | — | — | 0 |",
        "| alibi | ✓ | n/a | ✓ | 0 |",
    ]
