"""Messages at the public boundary that used to mislead (issue 40, "Messages that
mislead"): each case is reproduced, its message checked to name the value and the rule
and to say what to do, and each value compared with transformers 5.23 where it has one."""

from __future__ import annotations

import warnings
from unittest import mock

import pytest
import torch
from transformers import DeepseekV3Config, LlamaConfig
from transformers import modeling_rope_utils
from transformers.models.deepseek_v3.modeling_deepseek_v3 import (
    DeepseekV3Attention,
    DeepseekV3RotaryEmbedding,
)
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

from posenc.layers.masks import padded_positions
from posenc.rope_config import (
    RopeParametersWarning,
    rope_inv_freq_from_config,
    score_multiplier,
    softmax_scale_multiplier,
)

YARN = {"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0,
        "original_max_position_embeddings": 2048}


# ---------------------------------------------------------------- a whole config


@pytest.mark.parametrize("version", ["v5", "v4"])
def test_a_whole_config_is_refused_saying_which_dict_to_pass(version):
    config = LlamaConfig(hidden_size=64, num_attention_heads=2,
                         rope_parameters=dict(YARN, original_max_position_embeddings=512))
    whole = config.to_dict()
    if version == "v4":  # a v4 config.json: rope_theta at the top, rope_scaling beside it
        rope = whole.pop("rope_parameters")
        whole["rope_theta"], whole["rope_scaling"] = rope.pop("rope_theta"), rope
    with pytest.raises(ValueError, match=r"looks like a whole model config .*'hidden_size'") as error:
        rope_inv_freq_from_config(whole, 32)
    assert "config['rope_parameters']" in str(error.value)
    assert "config['rope_scaling']" in str(error.value)
    with pytest.raises(TypeError, match="pass config.rope_parameters"):
        rope_inv_freq_from_config(config, 32)
    # the dict the message names is read, and equals transformers' own frequencies
    ours, factor = rope_inv_freq_from_config(config.rope_parameters, 32,
                                             max_position_embeddings=config.max_position_embeddings)
    theirs, their_factor = modeling_rope_utils.ROPE_INIT_FUNCTIONS["yarn"](config, "cpu")
    torch.testing.assert_close(ours, theirs)
    assert factor == pytest.approx(their_factor)


# ---------------------------------------------------------------- 'dynamic' and its length


def test_dynamic_with_original_length_names_the_length_transformers_uses():
    params = {"rope_type": "dynamic", "rope_theta": 1e4, "factor": 2.0,
              "original_max_position_embeddings": 2048}
    with pytest.raises(ValueError) as error:
        rope_inv_freq_from_config(params, 64)
    message = str(error.value)
    assert "needs max_position_embeddings" in message and "(here 2048)" in message
    assert "without 'original_max_position_embeddings'" not in message  # the old, wrong claim
    # given it, the dict's own length is ignored, as transformers ignores it
    config = LlamaConfig(hidden_size=128, num_attention_heads=2, max_position_embeddings=4096,
                         rope_parameters=dict(params))
    for seq_len in (100, 9000):
        ours, _ = rope_inv_freq_from_config(params, 64, max_position_embeddings=4096, seq_len=seq_len)
        theirs, _ = modeling_rope_utils.ROPE_INIT_FUNCTIONS["dynamic"](config, "cpu", seq_len=seq_len)
        torch.testing.assert_close(ours, theirs)


# ---------------------------------------------------------------- a factor that disagrees


@pytest.mark.parametrize("original, factor, longest", [
    (2048, 4.0, 8192),    # agrees
    (2048, 8.0, 8192),    # disagrees: transformers warns
    (8192, 4.0, 8192),    # implicit ratio 1 (the length filled in from the maximum): no warning
    (4096, 40.0, 163840), # DeepSeek-V3's settings
    (4096, 32.0, 163840), # disagrees
])
def test_a_factor_that_disagrees_with_the_lengths_warns_as_transformers_does(original, factor, longest):
    params = dict(YARN, factor=factor, original_max_position_embeddings=original)
    with mock.patch.object(modeling_rope_utils.logger, "warning_once") as theirs:
        LlamaConfig(hidden_size=128, num_attention_heads=2, max_position_embeddings=longest,
                    rope_parameters=dict(params))
    transformers_warns = any("does not match" in str(c.args[0]) for c in theirs.call_args_list)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rope_inv_freq_from_config(params, 64, max_position_embeddings=longest)
    ours = [w for w in caught if issubclass(w.category, RopeParametersWarning)]
    assert bool(ours) == transformers_warns == (longest / original not in (factor, 1))
    assert issubclass(RopeParametersWarning, UserWarning)
    if ours:
        text = str(ours[0].message)
        assert f"= {factor}" in text and f"{longest} / {original}" in text
        assert ours[0].filename == __file__  # points at the caller's line


# ---------------------------------------------------------------- a mask holding a 2


def test_a_mask_holding_a_2_names_the_value_not_the_dtype_or_shape():
    with pytest.raises(ValueError, match=r"0/1 or bool mask .*got 2 at index \(1, 2\)"):
        padded_positions(torch.tensor([[1, 1, 1], [0, 1, 2]]))
    with pytest.raises(ValueError, match=r"got 0.5 at index \(0,\)"):
        padded_positions(torch.tensor([0.5, 1.0]))
    with pytest.raises(ValueError, match=r"shape \(T,\) or \(B, T\), got \(1, 1, 3\)"):
        padded_positions(torch.ones(1, 1, 3, dtype=torch.long))
    assert padded_positions(torch.tensor([[0, 1, 1]])).tolist() == [[0, 0, 1]]


# ---------------------------------------------------------------- the multiplier a score gets


def deepseek(rope_parameters, max_position_embeddings):
    config = DeepseekV3Config(
        hidden_size=64, num_attention_heads=2, num_key_value_heads=2, q_lora_rank=16, kv_lora_rank=16,
        qk_nope_head_dim=8, qk_rope_head_dim=8, v_head_dim=8, intermediate_size=32,
        moe_intermediate_size=16, n_routed_experts=4, num_experts_per_tok=2, n_group=1, topk_group=1,
        max_position_embeddings=max_position_embeddings, rope_parameters=dict(rope_parameters))
    attention = DeepseekV3Attention(config, layer_idx=0)
    # the softmax scale's change, and RoPE's attention factor on cos and sin
    softmax = attention.scaling * attention.qk_head_dim**0.5
    return softmax, DeepseekV3RotaryEmbedding(config).attention_scaling


@pytest.mark.parametrize("mscale, mscale_all_dim, factor", [
    (1.0, 1.0, 40.0),    # DeepSeek-V3 as released
    (0.707, 1.0, 40.0),
    (1.0, 0.707, 40.0),
    (1.0, None, 16.0),   # no mscale_all_dim: the softmax scale is left alone
    (1.0, 1.0, 1.0),     # s = 1: m = 1
])
def test_score_multiplier_is_deepseek_v3s_softmax_scale_times_its_attention_scaling(mscale, mscale_all_dim, factor):
    params = {"rope_type": "yarn", "rope_theta": 1e4, "factor": factor,
              "original_max_position_embeddings": 64, "mscale": mscale, "mscale_all_dim": mscale_all_dim,
              "beta_fast": 32.0, "beta_slow": 1.0}
    longest = int(64 * factor)
    softmax, attention_scaling = deepseek(params, longest)
    assert softmax_scale_multiplier(params) == pytest.approx(softmax, rel=1e-12)
    got = score_multiplier(params, 8, max_position_embeddings=longest)
    assert got == pytest.approx(attention_scaling**2 * softmax, rel=1e-12)
    without = score_multiplier(params, 8, max_position_embeddings=longest, softmax_mscale=False)
    assert without == pytest.approx(attention_scaling**2, rel=1e-12)


@pytest.mark.parametrize("rope_parameters", [
    YARN,
    {"rope_type": "linear", "rope_theta": 1e4, "factor": 4.0},
    {"rope_type": "default", "rope_theta": 1e4},
    {"rope_type": "llama3", "rope_theta": 5e5, "factor": 8.0, "original_max_position_embeddings": 1024,
     "low_freq_factor": 1.0, "high_freq_factor": 4.0},
])
def test_score_multiplier_of_a_llama_is_its_rotary_attention_scaling_squared(rope_parameters):
    config = LlamaConfig(hidden_size=128, num_attention_heads=2, max_position_embeddings=8192,
                         rope_parameters=dict(rope_parameters))
    scaling = LlamaRotaryEmbedding(config).attention_scaling
    got = score_multiplier(rope_parameters, 64, max_position_embeddings=8192)
    assert got == pytest.approx(scaling**2, rel=1e-12)
    assert softmax_scale_multiplier(rope_parameters) == 1.0


def test_score_multiplier_refuses_what_it_cannot_read():
    with pytest.raises(ValueError, match="needs 'factor'"):
        softmax_scale_multiplier({"rope_type": "yarn", "mscale_all_dim": 1.0})
    with pytest.raises(TypeError, match="rope_parameters must be a dict"):
        softmax_scale_multiplier([("rope_type", "yarn")])
    with pytest.raises(ValueError, match="whole model config"):
        score_multiplier({"model_type": "deepseek_v3", "rope_parameters": YARN}, 64)
