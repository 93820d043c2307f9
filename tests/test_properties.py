import pytest
import torch

from posenc.properties import check_properties, position_similarity
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
    from posenc.properties import properties_table

    idx = torch.arange(6.0)
    text = properties_table({"distance": check_properties(-(idx[:, None] - idx[None, :]).abs()),
                             "offset": check_properties(idx[None, :] - idx[:, None])}, first_column="g")
    assert text.splitlines() == [
        "| g | translation invariance | symmetry | monotonicity |",
        "|---|---|---|---|",
        "| distance | ✓ | ✓ | ✓ |",
        "| offset | ✓ | ✗ | ✗ |",
    ]
