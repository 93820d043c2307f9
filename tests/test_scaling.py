import math
import re

import pytest
import torch
from transformers import LlamaConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

from posenc.scaling import ROPE_TYPES, check_scaling, rope_inv_freq, yarn_attention_factor, yarn_ramp
from posenc.sinusoidal import compute_inv_freq


def hf_inv_freq(rope_type, head_dim, base, parameters, *, max_position_embeddings, seq_len=None):
    config = LlamaConfig(hidden_size=4 * head_dim, num_attention_heads=4, head_dim=head_dim,
                         max_position_embeddings=max_position_embeddings,
                         rope_parameters={"rope_type": rope_type, "rope_theta": base, **parameters})
    return ROPE_INIT_FUNCTIONS[rope_type](config, "cpu", seq_len=seq_len)


def assert_parity(ours, theirs):
    (inv_ours, factor_ours), (inv_theirs, factor_theirs) = ours, theirs
    assert inv_ours.shape == inv_theirs.shape and inv_ours.dtype == torch.float32
    torch.testing.assert_close(inv_ours, inv_theirs.float(), rtol=2e-6, atol=0)
    assert factor_ours == pytest.approx(float(factor_theirs), rel=1e-12)


DIMS_BASES = [(16, 10000.0), (64, 10000.0), (128, 500000.0)]


@pytest.mark.parametrize("head_dim, base", DIMS_BASES)
@pytest.mark.parametrize("factor", [1.0, 2.0, 8.0, 32.0])
def test_linear_matches_hf(head_dim, base, factor):
    assert_parity(rope_inv_freq(head_dim, base, {"rope_type": "linear", "factor": factor}),
                  hf_inv_freq("linear", head_dim, base, {"factor": factor}, max_position_embeddings=2048))


@pytest.mark.parametrize("head_dim, base", DIMS_BASES)
@pytest.mark.parametrize("factor", [1.0, 2.0, 8.0])
@pytest.mark.parametrize("seq_len", [None, 10, 2048, 3000, 16384])
def test_dynamic_matches_hf(head_dim, base, factor, seq_len):
    """Our original_max_position_embeddings is HF's max_position_embeddings for "dynamic"."""
    ours = rope_inv_freq(head_dim, base, {"rope_type": "dynamic", "factor": factor,
                                          "original_max_position_embeddings": 2048}, seq_len=seq_len)
    assert_parity(ours, hf_inv_freq("dynamic", head_dim, base, {"factor": factor}, max_position_embeddings=2048,
                                    seq_len=seq_len))


@pytest.mark.parametrize("head_dim, base", DIMS_BASES)
@pytest.mark.parametrize("factor", [1.5, 4.0, 16.0])
@pytest.mark.parametrize("extra", [{}, {"beta_fast": 16.0, "beta_slow": 2.0}, {"attention_factor": 1.3},
                                   {"truncate": False}])
def test_yarn_matches_hf(head_dim, base, factor, extra):
    original = 4096
    parameters = {"factor": factor, "original_max_position_embeddings": original, **extra}
    assert_parity(rope_inv_freq(head_dim, base, {"rope_type": "yarn", **parameters}),
                  hf_inv_freq("yarn", head_dim, base, parameters, max_position_embeddings=int(original * factor)))


@pytest.mark.parametrize("head_dim, base", DIMS_BASES)
@pytest.mark.parametrize("factor, low, high", [(8.0, 1.0, 4.0), (2.0, 1.0, 2.0), (32.0, 0.5, 8.0)])
def test_llama3_matches_hf(head_dim, base, factor, low, high):
    parameters = {"factor": factor, "original_max_position_embeddings": 8192, "low_freq_factor": low,
                  "high_freq_factor": high}
    assert_parity(rope_inv_freq(head_dim, base, {"rope_type": "llama3", **parameters}),
                  hf_inv_freq("llama3", head_dim, base, parameters, max_position_embeddings=int(8192 * factor)))


@pytest.mark.parametrize("head_dim, base", DIMS_BASES)
@pytest.mark.parametrize("factor", [2.0, 8.0])
def test_static_ntk_is_hf_dynamic_at_the_matching_length(head_dim, base, factor):
    """HF has no static NTK; its dynamic rule with factor 1 at length s·L uses the base b·s^(d/(d−2))."""
    ours = rope_inv_freq(head_dim, base, {"rope_type": "ntk", "factor": factor})
    theirs = hf_inv_freq("dynamic", head_dim, base, {"factor": 1.0}, max_position_embeddings=1024,
                         seq_len=int(factor * 1024))
    assert_parity(ours, theirs)


@pytest.mark.parametrize("head_dim", [8, 64, 128])
def test_ntk_divides_the_lowest_frequency_by_s_and_keeps_the_highest(head_dim):
    base, factor = 10000.0, 8.0
    plain, _ = rope_inv_freq(head_dim, base)
    ntk, _ = rope_inv_freq(head_dim, base, {"rope_type": "ntk", "factor": factor})
    assert ntk[0] == plain[0] == 1.0
    assert (plain[-1] / ntk[-1]).item() == pytest.approx(factor, rel=1e-5)


def test_yarn_ramp_regimes():
    dim, base, original = 64, 10000.0, 64
    gamma = yarn_ramp(dim, base, beta_fast=32, beta_slow=1, original_max_position_embeddings=original)
    wavelengths = 2 * math.pi / compute_inv_freq(dim, base)
    rotations = original / wavelengths
    assert (gamma[rotations > 32] == 0).all()  # fast dimensions: extrapolated (kept)
    assert (gamma[rotations < 1] == 1).all()  # slow dimensions: interpolated
    assert (gamma.diff() >= 0).all()


def test_yarn_attention_factor():
    assert yarn_attention_factor(1.0) == 1.0
    assert yarn_attention_factor(math.e) == pytest.approx(1.1)


def test_dynamic_is_plain_within_the_training_length():
    scaling = {"rope_type": "dynamic", "factor": 4.0, "original_max_position_embeddings": 100}
    for seq_len in (1, 50, 100):
        torch.testing.assert_close(rope_inv_freq(32, 10000.0, scaling, seq_len=seq_len)[0], rope_inv_freq(32)[0])


def test_llama3_keeps_high_and_interpolates_low_frequencies():
    scaling = {"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 64,
               "low_freq_factor": 1.0, "high_freq_factor": 4.0}
    plain, _ = rope_inv_freq(64, 10000.0)
    scaled, _ = rope_inv_freq(64, 10000.0, scaling)
    wavelengths = 2 * math.pi / plain
    short, long = wavelengths < 64 / 4, wavelengths > 64 / 1
    assert short.any() and long.any()
    torch.testing.assert_close(scaled[short], plain[short])
    torch.testing.assert_close(scaled[long], plain[long] / 8)


def test_all_types_return_float32_half_dim():
    scalings = {
        "linear": {"factor": 2.0}, "ntk": {"factor": 2.0},
        "dynamic": {"factor": 2.0, "original_max_position_embeddings": 8},
        "yarn": {"factor": 2.0, "original_max_position_embeddings": 8},
        "llama3": {"factor": 2.0, "original_max_position_embeddings": 8, "low_freq_factor": 1.0, "high_freq_factor": 4.0},
    }
    assert set(scalings) == set(ROPE_TYPES)
    for rope_type, parameters in scalings.items():
        inv_freq, factor = rope_inv_freq(12, 100.0, {"rope_type": rope_type, **parameters}, seq_len=30)
        assert inv_freq.shape == (6,) and inv_freq.dtype == torch.float32 and factor >= 1.0


@pytest.mark.parametrize("scaling, error, message", [
    ({"factor": 2.0}, ValueError, "needs a 'rope_type'"),
    ({"rope_type": "ntk-by-parts", "factor": 2.0}, ValueError, "rope_type"),
    ({"rope_type": "linear", "factor": 0.5}, ValueError, "factor must be >= 1"),
    ({"rope_type": "linear", "factor": math.inf}, ValueError, "finite number > 0"),
    ({"rope_type": "linear"}, ValueError, r"needs \['factor'\]"),
    ({"rope_type": "linear", "factor": 2.0, "beta_fast": 3}, ValueError, r"does not take \['beta_fast'\]"),
    ({"rope_type": "yarn", "factor": 2.0}, ValueError, "original_max_position_embeddings"),
    ({"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 64.5}, ValueError, "positive int"),
    ({"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 64, "beta_fast": 1, "beta_slow": 2},
     ValueError, "beta_fast must exceed beta_slow"),
    ({"rope_type": "llama3", "factor": 2.0, "original_max_position_embeddings": 64, "low_freq_factor": 4,
      "high_freq_factor": 1}, ValueError, "low_freq_factor must be below"),
    ("linear", TypeError, "must be None or a dict"),
])
def test_bad_scaling_is_named(scaling, error, message):
    with pytest.raises(error, match=message):
        check_scaling(scaling)


def test_bad_sizes_are_named():
    with pytest.raises(ValueError, match="head_dim must be even"):
        rope_inv_freq(7)
    with pytest.raises(ValueError, match="seq_len"):
        rope_inv_freq(8, scaling={"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 4}, seq_len=0)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
@pytest.mark.parametrize("seq_len", [10, 3000])
def test_dynamic_takes_a_0d_integer_tensor_as_transformers_passes_it(seq_len, dtype):
    """transformers' dynamic RoPE calls the init function with
    seq_len = max(position_ids) + 1, a 0-d tensor; the result is that of the int, and HF's
    own for the same tensor."""
    scaling = {"rope_type": "dynamic", "factor": 4.0,
               "original_max_position_embeddings": 2048}
    position_ids = torch.arange(seq_len, dtype=dtype)[None]
    as_tensor = torch.max(position_ids) + 1
    assert as_tensor.dim() == 0
    ours = rope_inv_freq(64, 10000.0, scaling, seq_len=as_tensor)
    assert ours[0].dtype == torch.float32
    as_int = rope_inv_freq(64, 10000.0, scaling, seq_len=seq_len)
    torch.testing.assert_close(ours[0], as_int[0], rtol=0, atol=0)
    assert_parity(ours, hf_inv_freq("dynamic", 64, 10000.0, {"factor": 4.0},
                                    max_position_embeddings=2048, seq_len=as_tensor))
    if seq_len > 2048:  # past L the tensor really reaches the formula
        assert not torch.equal(ours[0], rope_inv_freq(64, 10000.0, scaling)[0])


@pytest.mark.parametrize("seq_len, error, message", [
    (torch.tensor([30]), TypeError, r"0-d integer tensor, got a tensor of shape \(1,\)"),
    (torch.tensor(30.0), TypeError, "dtype torch.float32"),
    (torch.tensor(True), TypeError, "dtype torch.bool"),
    (30.0, TypeError, "got 30.0 of type float"),
    (True, TypeError, "got True of type bool"),
    (torch.tensor(0), ValueError, "seq_len must be >= 1, got 0"),
    (-5, ValueError, "seq_len must be >= 1, got -5"),
])
def test_bad_seq_len_is_named(seq_len, error, message):
    scaling = {"rope_type": "dynamic", "factor": 2.0,
               "original_max_position_embeddings": 4}
    with pytest.raises(error, match=message):
        rope_inv_freq(8, scaling=scaling, seq_len=seq_len)


@pytest.mark.parametrize("truncate", ["false", "False", 0, 1, None, 1.0])
def test_yarn_truncate_must_be_a_bool(truncate):
    """A string "false" is truthy: taken as a flag it would silently mean True."""
    scaling = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64,
               "truncate": truncate}
    rule = f"truncate must be a bool \\(True or False\\), got {re.escape(repr(truncate))}"
    with pytest.raises(TypeError, match=rule):
        rope_inv_freq(32, 10000.0, scaling)
    with pytest.raises(TypeError, match="truncate must be a bool"):
        yarn_ramp(32, 10000.0, beta_fast=32, beta_slow=1,
                  original_max_position_embeddings=64, truncate=truncate)


def test_yarn_truncate_false_differs_from_true():
    scaling = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}
    kept = rope_inv_freq(32, 10000.0, {**scaling, "truncate": True})[0]
    assert torch.equal(kept, rope_inv_freq(32, 10000.0, scaling)[0])  # the default
    untruncated = rope_inv_freq(32, 10000.0, {**scaling, "truncate": False})[0]
    assert not torch.equal(kept, untruncated)
