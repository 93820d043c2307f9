import math
import re

import pytest
import torch
from transformers import Gemma4TextConfig, LlamaConfig, Phi3Config
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.models.gemma4.modeling_gemma4 import Gemma4TextRotaryEmbedding
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding
from transformers.models.phi3.modeling_phi3 import Phi3RotaryEmbedding

from posenc.rope import apply_rope
from posenc.rope_config import (
    IGNORED_ROPE_PARAMETERS,
    TRANSFORMERS_ROPE_TYPES,
    rope_inv_freq_from_config,
)
from posenc.scaling import (
    ROPE_TYPES,
    check_scaling,
    longrope_attention_factor,
    rope_inv_freq,
    yarn_attention_factor,
    yarn_ramp,
)
from posenc.frequencies import compute_inv_freq


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
        "default": {}, "linear": {"factor": 2.0}, "ntk": {"factor": 2.0},
        "dynamic": {"factor": 2.0, "original_max_position_embeddings": 8},
        "yarn": {"factor": 2.0, "original_max_position_embeddings": 8},
        "llama3": {"factor": 2.0, "original_max_position_embeddings": 8, "low_freq_factor": 1.0, "high_freq_factor": 4.0},
        "longrope": {"short_factor": [1.0] * 6, "long_factor": [2.0] * 6, "factor": 4.0,
                     "original_max_position_embeddings": 8},
        "proportional": {"partial_rotary_factor": 0.5},
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
      "high_freq_factor": 1}, ValueError, "low_freq_factor must not exceed"),
    ("linear", TypeError, "must be None or a dict"),
])
def test_bad_scaling_is_named(scaling, error, message):
    with pytest.raises(error, match=message):
        check_scaling(scaling)


def test_each_rope_type_is_one_entry_of_the_dict():
    """check_scaling and rope_inv_freq read only posenc's ROPE_INIT_FUNCTIONS: a new
    entry is a new rope_type, with its keys checked and its function called."""
    from posenc import scaling as module

    assert module.ROPE_TYPES == tuple(module.ROPE_INIT_FUNCTIONS)
    plain, _ = rope_inv_freq(8, 100.0)
    torch.testing.assert_close(rope_inv_freq(8, 100.0, {"rope_type": "default"})[0], plain)
    with pytest.raises(ValueError, match=r"does not take \['factor'\]"):
        check_scaling({"rope_type": "default", "factor": 2.0})

    def halved(dim, base, scaling, seq_len):
        return module.compute_inv_freq(dim, base) / 2, 1.5

    rule = module.RopeType(halved, frozenset({"factor"}))
    try:
        module.ROPE_INIT_FUNCTIONS["halved"] = rule
        module.ROPE_TYPES = tuple(module.ROPE_INIT_FUNCTIONS)
        inv_freq, factor = rope_inv_freq(8, 100.0, {"rope_type": "halved", "factor": 2.0})
        torch.testing.assert_close(inv_freq, plain / 2)
        assert factor == 1.5
        with pytest.raises(ValueError, match=r"needs \['factor'\]"):
            check_scaling({"rope_type": "halved"})
    finally:
        del module.ROPE_INIT_FUNCTIONS["halved"]
        module.ROPE_TYPES = tuple(module.ROPE_INIT_FUNCTIONS)


def test_bad_sizes_are_named():
    with pytest.raises(ValueError, match="rotary_dim must be even"):
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


# ---------------------------------------------------------------- longrope (Phi-3 / Phi-4-mini)

def longrope_factors(pairs):
    """Deterministic per-pair factors shaped like Phi-3's: short ≈ 1, long growing with i."""
    short = [1.0 + 0.02 * i for i in range(pairs)]
    long = [1.0 + 40.0 * (i / max(pairs - 1, 1)) ** 2 for i in range(pairs)]
    return short, long


@pytest.mark.parametrize("head_dim, base", DIMS_BASES)
@pytest.mark.parametrize("seq_len", [None, 1, 4096, 4097, 20000])
@pytest.mark.parametrize("extra", [{}, {"attention_factor": 1.3}, {"factor": 8.0},
                                   {"factor": 8.0, "attention_factor": 0.9}])
@pytest.mark.parametrize("max_position_embeddings", [131072, 4096])
def test_longrope_matches_hf(head_dim, base, seq_len, extra, max_position_embeddings):
    """Short regime (seq_len None or ≤ L) and long regime (> L), with the attention factor derived
    from max_position_embeddings / L (no factor given), from an explicit factor, or given outright."""
    original = 4096
    short, long = longrope_factors(head_dim // 2)
    parameters = {"short_factor": short, "long_factor": long, "original_max_position_embeddings": original,
                  **extra}
    theirs = hf_inv_freq("longrope", head_dim, base, parameters, max_position_embeddings=max_position_embeddings,
                         seq_len=seq_len)
    ours_parameters = dict(parameters)
    if "factor" not in extra and "attention_factor" not in extra:  # transformers' derived factor
        ours_parameters["factor"] = max_position_embeddings / original
    ours = rope_inv_freq(head_dim, base, {"rope_type": "longrope", **ours_parameters}, seq_len=seq_len)
    assert_parity(ours, theirs)


def test_longrope_switches_factors_past_the_training_length():
    short, long = [1.0, 2.0, 4.0, 8.0], [3.0, 5.0, 7.0, 9.0]
    scaling = {"rope_type": "longrope", "short_factor": short, "long_factor": long, "factor": 32.0,
               "original_max_position_embeddings": 64}
    plain, _ = rope_inv_freq(8, 10000.0)
    for seq_len, factors in [(None, short), (1, short), (64, short), (torch.tensor(64), short),
                             (65, long), (torch.tensor(65), long), (10**6, long)]:
        inv_freq, attention = rope_inv_freq(8, 10000.0, scaling, seq_len=seq_len)
        torch.testing.assert_close(inv_freq, plain / torch.tensor(factors), rtol=1e-6, atol=0)
        # one attention factor for both regimes (transformers keeps the one of its init)
        assert attention == pytest.approx(math.sqrt(1 + math.log(32) / math.log(64)), rel=1e-15)


def test_longrope_attention_factor():
    assert longrope_attention_factor(1.0, 4096) == 1.0
    assert longrope_attention_factor(0.5, 4096) == 1.0
    # Phi-3-mini-128K: s = 131072 / 4096 = 32
    assert longrope_attention_factor(32.0, 4096) == pytest.approx(math.sqrt(1 + 5 / 12), rel=1e-15)


def test_longrope_without_factor_or_attention_factor_is_named():
    with pytest.raises(ValueError, match="needs 'factor'.*or an explicit 'attention_factor'"):
        check_scaling({"rope_type": "longrope", "short_factor": [1.0], "long_factor": [1.0],
                       "original_max_position_embeddings": 64})
    # either one is enough
    check_scaling({"rope_type": "longrope", "short_factor": [1.0], "long_factor": [1.0],
                   "original_max_position_embeddings": 64, "attention_factor": 1.1})


@pytest.mark.parametrize("length", [4, 16])
def test_longrope_list_lengths_must_be_half_the_rotated_width(length):
    """(Lists of different lengths are caught before, by check_scaling: see test_bad_new_scaling_is_named.)"""
    scaling = {"rope_type": "longrope", "short_factor": [1.0] * length, "long_factor": [1.0] * length,
               "factor": 4.0, "original_max_position_embeddings": 64}
    rule = (f"longrope short_factor has {length} entries, but rotary_dim = 16 rotated features make 8 pairs: "
            r"it needs rotary_dim/2 = 8 \(one factor per pair\)")
    with pytest.raises(ValueError, match=rule):
        rope_inv_freq(16, 10000.0, scaling)


# ---------------------------------------------------------------- proportional (Gemma 4)

@pytest.mark.parametrize("head_dim, base", DIMS_BASES + [(256, 1e6), (512, 1e6)])
@pytest.mark.parametrize("partial_rotary_factor", [0.0, 0.25, 0.3, 0.5, 1.0])
@pytest.mark.parametrize("extra", [{}, {"factor": 2.0}])
def test_proportional_matches_hf(head_dim, base, partial_rotary_factor, extra):
    parameters = {"partial_rotary_factor": partial_rotary_factor, **extra}
    assert_parity(rope_inv_freq(head_dim, base, {"rope_type": "proportional", **parameters}),
                  hf_inv_freq("proportional", head_dim, base, parameters, max_position_embeddings=2048))


@pytest.mark.parametrize("head_dim, p, rotated", [(512, 0.25, 64), (64, 0.25, 8), (16, 0.3, 2), (16, 1.0, 8)])
def test_proportional_rotates_the_first_pairs_with_the_full_head_exponents(head_dim, p, rotated):
    """⌊p·d_h/2⌋ pairs keep θ_i = b^(−2i/d_h) of the whole head (not of the rotated width); the rest get
    θ = 0, so apply_rope leaves those features as they are."""
    inv_freq, attention = rope_inv_freq(head_dim, 1e6, {"rope_type": "proportional", "partial_rotary_factor": p})
    plain, _ = rope_inv_freq(head_dim, 1e6)
    assert attention == 1.0 and inv_freq.shape == (head_dim // 2,)
    assert torch.equal(inv_freq[:rotated], plain[:rotated])
    assert (inv_freq[rotated:] == 0).all()
    x = torch.randn(1, 2, 5, head_dim, generator=torch.Generator().manual_seed(0))
    y = apply_rope(x, torch.arange(100, 105), inv_freq=inv_freq)
    unrotated = torch.cat([torch.arange(rotated, head_dim // 2), torch.arange(head_dim // 2 + rotated, head_dim)])
    torch.testing.assert_close(y[..., unrotated], x[..., unrotated], rtol=0, atol=0)
    assert not torch.allclose(y[..., :rotated], x[..., :rotated])


def test_proportional_fills_its_defaults():
    assert check_scaling({"rope_type": "proportional"}) == {"rope_type": "proportional", "factor": 1.0,
                                                             "partial_rotary_factor": 1.0}
    torch.testing.assert_close(rope_inv_freq(32, 1e4, {"rope_type": "proportional"})[0], rope_inv_freq(32, 1e4)[0],
                               rtol=0, atol=0)


@pytest.mark.parametrize("scaling, error, message", [
    ({"rope_type": "longrope", "short_factor": "1.0", "long_factor": [1.0], "factor": 2.0,
      "original_max_position_embeddings": 64}, TypeError, "short_factor must be a list of numbers"),
    ({"rope_type": "longrope", "short_factor": [], "long_factor": [], "factor": 2.0,
      "original_max_position_embeddings": 64}, ValueError, "short_factor must not be empty"),
    ({"rope_type": "longrope", "short_factor": [1.0, -2.0], "long_factor": [1.0, 1.0], "factor": 2.0,
      "original_max_position_embeddings": 64}, ValueError, r"short_factor\[1\] must be a finite number > 0, got -2.0"),
    ({"rope_type": "longrope", "short_factor": [1.0, 1.0], "long_factor": [1.0, math.nan], "factor": 2.0,
      "original_max_position_embeddings": 64}, ValueError, r"long_factor\[1\] must be a finite number > 0"),
    ({"rope_type": "longrope", "short_factor": [1.0, True], "long_factor": [1.0, 1.0], "factor": 2.0,
      "original_max_position_embeddings": 64}, ValueError, r"short_factor\[1\] must be a finite number > 0"),
    ({"rope_type": "longrope", "short_factor": [1.0] * 4, "long_factor": [1.0] * 3, "factor": 2.0,
      "original_max_position_embeddings": 64}, ValueError, "same length .* got 4 and 3"),
    ({"rope_type": "longrope", "short_factor": [1.0], "long_factor": [1.0], "factor": 2.0},
     ValueError, r"needs \['original_max_position_embeddings'\]"),
    ({"rope_type": "longrope", "long_factor": [1.0], "factor": 2.0, "original_max_position_embeddings": 64},
     ValueError, r"needs \['short_factor'\]"),
    ({"rope_type": "longrope", "short_factor": [1.0], "long_factor": [1.0], "factor": 0.5,
      "original_max_position_embeddings": 64}, ValueError, "factor must be >= 1"),
    ({"rope_type": "longrope", "short_factor": [1.0], "long_factor": [1.0], "factor": 2.0,
      "original_max_position_embeddings": 64, "attention_factor": 0.0}, ValueError, "attention_factor must be"),
    ({"rope_type": "longrope", "short_factor": [1.0], "long_factor": [1.0], "factor": 2.0,
      "original_max_position_embeddings": 1}, ValueError, "needs original_max_position_embeddings L >= 2"),
    ({"rope_type": "longrope", "short_factor": [1.0], "long_factor": [1.0], "factor": 2.0,
      "original_max_position_embeddings": 64, "beta_fast": 32}, ValueError, r"does not take \['beta_fast'\]"),
    ({"rope_type": "proportional", "partial_rotary_factor": 1.5}, ValueError,
     r"partial_rotary_factor must be in \[0, 1\], got 1.5"),
    ({"rope_type": "proportional", "partial_rotary_factor": "0.25"}, TypeError,
     "partial_rotary_factor must be a real number"),
    ({"rope_type": "proportional", "factor": 0.5}, ValueError, "factor must be >= 1"),
    ({"rope_type": "proportional", "original_max_position_embeddings": 64}, ValueError,
     r"does not take \['original_max_position_embeddings'\]"),
])
def test_bad_new_scaling_is_named(scaling, error, message):
    with pytest.raises(error, match=message):
        check_scaling(scaling)


# ---------------------------------------------------------------- transformers config.rope_parameters

def from_config(config, head_dim=None, seq_len=None, rope_parameters=None):
    return rope_inv_freq_from_config(rope_parameters or config.rope_parameters, head_dim or config.head_dim,
                                     max_position_embeddings=config.max_position_embeddings, seq_len=seq_len)


def llama(head_dim=64, max_position_embeddings=8192, **rope_parameters):
    return LlamaConfig(hidden_size=4 * head_dim, num_attention_heads=4, head_dim=head_dim,
                       max_position_embeddings=max_position_embeddings, rope_parameters=rope_parameters)


LLAMA_CASES = [
    {"rope_type": "linear", "rope_theta": 1e4, "factor": 4.0},
    {"rope_type": "linear", "rope_theta": 1e4, "factor": 4.0, "partial_rotary_factor": 0.5},
    {"rope_type": "dynamic", "rope_theta": 5e5, "factor": 2.0},
    {"rope_type": "dynamic", "rope_theta": 1e4, "factor": 4.0, "partial_rotary_factor": 0.25},
    {"rope_type": "yarn", "rope_theta": 1e6, "factor": 4.0, "original_max_position_embeddings": 2048},
    {"rope_type": "yarn", "rope_theta": 1e6, "factor": 4.0, "original_max_position_embeddings": 2048,
     "partial_rotary_factor": 0.5, "beta_fast": 16.0, "beta_slow": 2.0, "truncate": False},
    {"rope_type": "yarn", "rope_theta": 1e4, "factor": 40.0, "original_max_position_embeddings": 2048,
     "mscale": 1.0, "mscale_all_dim": 0.707},  # DeepSeek's pair
    {"rope_type": "yarn", "rope_theta": 1e4, "factor": 40.0, "original_max_position_embeddings": 2048,
     "mscale": 1.0},  # one of the pair alone: ignored, as in transformers
    {"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0, "original_max_position_embeddings": 2048,
     "attention_factor": 1.25, "mscale": 1.0, "mscale_all_dim": 1.0},
    {"rope_type": "yarn", "rope_theta": 1e4, "factor": None, "original_max_position_embeddings": 2048},
    {"rope_type": "yarn", "rope_theta": 1e4, "factor": 2.0},  # L filled in from max_position_embeddings
    {"rope_type": "llama3", "rope_theta": 5e5, "factor": 8.0, "original_max_position_embeddings": 1024,
     "low_freq_factor": 1.0, "high_freq_factor": 4.0},
    {"rope_type": "longrope", "rope_theta": 1e4, "short_factor": longrope_factors(32)[0],
     "long_factor": longrope_factors(32)[1], "original_max_position_embeddings": 1024},
    {"rope_type": "longrope", "rope_theta": 1e4, "short_factor": longrope_factors(16)[0],
     "long_factor": longrope_factors(16)[1], "original_max_position_embeddings": 1024, "factor": 2.0,
     "partial_rotary_factor": 0.5},
    {"rope_type": "longrope", "rope_theta": 1e4, "short_factor": longrope_factors(32)[0],
     "long_factor": longrope_factors(32)[1], "original_max_position_embeddings": 16384},  # s = 0.5: factor 1
    {"rope_type": "proportional", "rope_theta": 1e6, "partial_rotary_factor": 0.25},
    {"rope_type": "proportional", "rope_theta": 1e6},
]


@pytest.mark.parametrize("rope_parameters", LLAMA_CASES, ids=lambda p: p["rope_type"])
@pytest.mark.parametrize("seq_len", [None, 100, 5000, 20000])
def test_from_config_matches_hf_init_functions(rope_parameters, seq_len):
    config = llama(**rope_parameters)
    theirs = ROPE_INIT_FUNCTIONS[rope_parameters["rope_type"]](config, "cpu", seq_len=seq_len)
    assert_parity(from_config(config, seq_len=seq_len), theirs)


@pytest.mark.parametrize("rope_parameters", LLAMA_CASES, ids=lambda p: p["rope_type"])
def test_from_config_matches_the_models_rotary_embedding(rope_parameters):
    """What the model itself holds after init: its inv_freq buffer and attention_scaling."""
    config = llama(**rope_parameters)
    rotary = LlamaRotaryEmbedding(config)
    assert_parity(from_config(config), (rotary.inv_freq, rotary.attention_scaling))


@pytest.mark.parametrize("head_dim, base", DIMS_BASES)
def test_from_config_default_is_plain_rope(head_dim, base):
    config = llama(head_dim, rope_type="default", rope_theta=base)
    ours = from_config(config)
    assert_parity(ours, LlamaRotaryEmbedding.compute_default_rope_parameters(config))
    assert_parity(ours, rope_inv_freq(head_dim, base))
    assert_parity(ours, rope_inv_freq_from_config({"rope_theta": base}, head_dim))  # no rope_type: "default"


@pytest.mark.parametrize("partial_rotary_factor", [1.0, 0.75, 0.5, 0.4])
def test_from_config_default_partial_rotary_matches_phi3(partial_rotary_factor):
    """Partial rotary: the exponents run over rotary_dim = int(d_h·p) (Phi-3's and GPT-NeoX's default)."""
    config = Phi3Config(hidden_size=80 * 8, num_attention_heads=8, rope_theta=1e4,
                        partial_rotary_factor=partial_rotary_factor)
    ours = from_config(config, head_dim=80)
    assert ours[0].shape == (int(80 * partial_rotary_factor) // 2,)
    assert_parity(ours, Phi3RotaryEmbedding.compute_default_rope_parameters(config))


def phi3_longrope(hidden_size, num_attention_heads, partial_rotary_factor=1.0, **rope_extra):
    head_dim = hidden_size // num_attention_heads
    short, long = longrope_factors(int(head_dim * partial_rotary_factor) // 2)
    # the legacy layout of Phi-3's config.json: rope_scaling with "type", L outside it
    return Phi3Config(hidden_size=hidden_size, num_attention_heads=num_attention_heads,
                      max_position_embeddings=131072, original_max_position_embeddings=4096,
                      rope_theta=10000.0, partial_rotary_factor=partial_rotary_factor,
                      rope_scaling={"type": "longrope", "short_factor": short, "long_factor": long, **rope_extra})


PHI3_MODELS = {
    "phi-3-mini-128k": dict(hidden_size=3072, num_attention_heads=32),
    "phi-4-mini": dict(hidden_size=3072, num_attention_heads=24, partial_rotary_factor=0.75),
    "explicit attention_factor": dict(hidden_size=3072, num_attention_heads=32, attention_factor=1.5),
}


@pytest.mark.parametrize("model", PHI3_MODELS)
@pytest.mark.parametrize("seq_len", [None, 4096, 4097, 131072])
def test_from_config_longrope_matches_phi3(model, seq_len):
    config = phi3_longrope(**PHI3_MODELS[model])
    head_dim = config.hidden_size // config.num_attention_heads
    ours = from_config(config, head_dim=head_dim, seq_len=seq_len)
    assert_parity(ours, ROPE_INIT_FUNCTIONS["longrope"](config, "cpu", seq_len=seq_len))
    if model != "explicit attention_factor":
        assert ours[1] == pytest.approx(longrope_attention_factor(131072 / 4096, 4096), rel=1e-15)


@pytest.mark.parametrize("model", PHI3_MODELS)
@pytest.mark.parametrize("length", [4096, 4097])
def test_from_config_longrope_matches_phi3_rotary_forward(model, length):
    """Phi3RotaryEmbedding switches to the long factors when max(position_ids) + 1 > L; cos and sin from our
    frequencies for seq_len = that length agree with its forward."""
    config = phi3_longrope(**PHI3_MODELS[model])
    rotary = Phi3RotaryEmbedding(config)
    positions = torch.arange(length)[None]
    cos, sin = rotary(torch.zeros(1, dtype=torch.float32), positions)
    inv_freq, attention = from_config(config, head_dim=config.hidden_size // config.num_attention_heads,
                                      seq_len=length)
    angles = positions[0, :, None].float() * inv_freq
    angles = torch.cat([angles, angles], dim=-1)
    # angles up to ~4096 rad in float32: HF rounds θ_i differently (see test_rope), a few 10⁻⁴
    torch.testing.assert_close(cos[0], angles.cos() * attention, atol=2e-3, rtol=0)
    torch.testing.assert_close(sin[0], angles.sin() * attention, atol=2e-3, rtol=0)
    long_regime = not torch.equal(rotary.inv_freq, rotary.original_inv_freq)
    assert long_regime == (length > 4096)


def test_from_config_matches_gemma4():
    """Gemma 4: sliding layers plain RoPE on head_dim, full layers proportional (p = 1/4) on global_head_dim."""
    config = Gemma4TextConfig(hidden_size=64, num_attention_heads=2, head_dim=32, global_head_dim=128,
                              num_hidden_layers=6, vocab_size=100, intermediate_size=64)
    rotary = Gemma4TextRotaryEmbedding(config)
    assert config.rope_parameters["full_attention"]["rope_type"] == "proportional"
    full = rope_inv_freq_from_config(config.rope_parameters["full_attention"], 128)
    assert_parity(full, (rotary.full_attention_inv_freq, rotary.full_attention_attention_scaling))
    assert (full[0][16:] == 0).all() and (full[0][:16] > 0).all()
    sliding = rope_inv_freq_from_config(config.rope_parameters["sliding_attention"], 32)
    assert_parity(sliding, (rotary.sliding_attention_inv_freq, rotary.sliding_attention_attention_scaling))
    with pytest.raises(ValueError, match=r"nested by layer type .*rope_parameters\['full_attention'\]"):
        rope_inv_freq_from_config(config.rope_parameters, 128)


def test_from_config_reads_the_legacy_type_key_and_skips_ignored_keys():
    legacy = rope_inv_freq_from_config({"type": "linear", "factor": 2.0, "rope_theta": 1e4}, 32)
    assert_parity(legacy, rope_inv_freq(32, 1e4, {"rope_type": "linear", "factor": 2.0}))
    assert set(IGNORED_ROPE_PARAMETERS) == {"mrope_section", "mrope_interleaved", "llama_4_scaling_beta"}
    qwen_vl = {"rope_type": "default", "rope_theta": 1e6, "mrope_section": [4, 6, 6], "mrope_interleaved": True}
    assert_parity(rope_inv_freq_from_config(qwen_vl, 32), rope_inv_freq(32, 1e6))
    # a None value counts as absent, as transformers' .get() reads it
    assert_parity(rope_inv_freq_from_config({"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0,
                                             "original_max_position_embeddings": 64, "attention_factor": None,
                                             "beta_fast": None}, 32),
                  rope_inv_freq(32, 1e4, {"rope_type": "yarn", "factor": 4.0,
                                          "original_max_position_embeddings": 64}))


def test_from_config_dynamic_takes_L_from_max_position_embeddings():
    """transformers' dynamic rule reads config.max_position_embeddings, not the dict's L."""
    params = {"rope_type": "dynamic", "rope_theta": 1e4, "factor": 4.0, "original_max_position_embeddings": 64}
    ours = rope_inv_freq_from_config(params, 32, max_position_embeddings=2048, seq_len=3000)
    scaling = {"rope_type": "dynamic", "factor": 4.0, "original_max_position_embeddings": 2048}
    assert_parity(ours, rope_inv_freq(32, 1e4, scaling, seq_len=3000))


def test_transformers_rope_types_are_hfs():
    assert set(TRANSFORMERS_ROPE_TYPES) == set(ROPE_INIT_FUNCTIONS) | {"default"}


@pytest.mark.parametrize("call, error, message", [
    (lambda: rope_inv_freq_from_config({"rope_type": "axial", "rope_theta": 1e4}, 32), ValueError,
     "rope_type must be one of 'default', 'linear'.*got 'axial'"),
    (lambda: rope_inv_freq_from_config({"rope_type": "ntk", "rope_theta": 1e4, "factor": 2.0}, 32), ValueError,
     "got 'ntk'"),
    (lambda: rope_inv_freq_from_config({"rope_type": "default"}, 32), ValueError, "needs 'rope_theta'"),
    (lambda: rope_inv_freq_from_config([("rope_theta", 1e4)], 32), TypeError, "must be a dict"),
    (lambda: rope_inv_freq_from_config({"rope_theta": 1e4}, 32.0), TypeError, "head_dim must be an integer"),
    (lambda: rope_inv_freq_from_config({"rope_theta": 1e4, "factor": 2.0}, 32), ValueError,
     r"rope_type 'default' does not take \['factor'\]"),
    (lambda: rope_inv_freq_from_config({"rope_theta": 1e4, "partial_rotary_factor": 0.5}, 10), ValueError,
     r"rotary_dim = int\(head_dim \* partial_rotary_factor\) = int\(10 \* 0.5\) = 5 must be even"),
    (lambda: rope_inv_freq_from_config({"rope_theta": 1e4, "partial_rotary_factor": 0.0}, 32), ValueError,
     r"partial_rotary_factor must be in \(0, 1\]"),
    (lambda: rope_inv_freq_from_config({"rope_type": "dynamic", "rope_theta": 1e4, "factor": 2.0}, 32),
     ValueError, "needs max_position_embeddings .*config.max_position_embeddings"),
    (lambda: rope_inv_freq_from_config({"rope_type": "yarn", "rope_theta": 1e4, "factor": 2.0}, 32), ValueError,
     "without 'original_max_position_embeddings' in rope_parameters needs max_position_embeddings"),
    (lambda: rope_inv_freq_from_config({"rope_type": "longrope", "rope_theta": 1e4, "short_factor": [1.0] * 16,
                                        "long_factor": [1.0] * 16, "original_max_position_embeddings": 64}, 32),
     ValueError, "without 'factor' in rope_parameters needs max_position_embeddings"),
    (lambda: rope_inv_freq_from_config({"rope_type": "longrope", "rope_theta": 1e4, "short_factor": [1.0] * 8,
                                        "long_factor": [1.0] * 8, "original_max_position_embeddings": 64},
                                       32, max_position_embeddings=1024),
     ValueError, "longrope short_factor has 8 entries, but rotary_dim = 32 .* needs rotary_dim/2 = 16"),
    (lambda: rope_inv_freq_from_config({"rope_theta": 1e4}, 32, max_position_embeddings=0), ValueError,
     "max_position_embeddings must be >= 1"),
])
def test_bad_rope_parameters_are_named(call, error, message):
    with pytest.raises(error, match=message):
        call()
