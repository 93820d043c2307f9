"""Multi-head Latent Attention (posenc.layers.mla): the decoupled RoPE against transformers'
DeepSeek-V3 (and V2) rotary functions, the whole attention against DeepseekV3Attention
with the same weights, the absorbed (latent-cache) path against the naive one, the KV
cache arithmetic, and SymPy's instance of why RoPE must be decoupled for absorption."""

import math

import pytest
import sympy as sp
import torch
from transformers import DeepseekV2Config, DeepseekV3Config
from transformers.models.deepseek_v2.modeling_deepseek_v2 import (
    DeepseekV2RotaryEmbedding,
)
from transformers.models.deepseek_v2.modeling_deepseek_v2 import (
    apply_rotary_emb as v2_apply_rotary_emb,
)
from transformers.models.deepseek_v3.modeling_deepseek_v3 import (
    DeepseekV3Attention,
    DeepseekV3RotaryEmbedding,
    apply_rotary_pos_emb,
    apply_rotary_pos_emb_interleave,
)

from posenc.layout import pair_permutation
from posenc.layers.mla import MLACache, MLAttention, kv_cache_bytes_per_token
from posenc.rope import apply_rope

SIZES = {"kv_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 6, "v_head_dim": 5}


def _v3_config(*, rope_dim=6, base=10000.0, interleave=True, q_lora_rank=None, rope_parameters=None):
    params = rope_parameters or {"rope_type": "default", "rope_theta": base}
    config = DeepseekV3Config(
        hidden_size=32, num_attention_heads=4, num_key_value_heads=4, kv_lora_rank=16, q_lora_rank=q_lora_rank,
        qk_nope_head_dim=8, qk_rope_head_dim=rope_dim, v_head_dim=5, rope_interleave=interleave,
        rope_parameters=params, max_position_embeddings=64,
    )
    config._attn_implementation = "eager"
    return config


def _positions(batch, seq_len, offsets=(0, 5)):
    return torch.arange(seq_len)[None] + torch.tensor(offsets[:batch])[:, None]


# -- the rotary part ----------------------------------------------------------------


@pytest.mark.parametrize("rope_dim, base, seq_len", [(6, 10000.0, 7), (64, 10000.0, 33), (16, 500.0, 5)])
def test_v3_interleave_is_interleaved_rope_then_pair_permutation(rope_dim, base, seq_len):
    """transformers' apply_rotary_pos_emb_interleave rotates the pairs (2i, 2i+1) and returns the features
    de-interleaved: [rotated evens | rotated odds] = apply_rope(x, "interleaved")[..., pair_permutation(r)]
    = apply_rope(x[..., pair_permutation(r)], "half"). Bit-equal with transformers' own inv_freq."""
    g = torch.Generator().manual_seed(rope_dim)
    rotary = DeepseekV3RotaryEmbedding(_v3_config(rope_dim=rope_dim, base=base))
    q = torch.randn(2, 3, seq_len, rope_dim, generator=g)
    k = torch.randn(2, 1, seq_len, rope_dim, generator=g)  # the shared rotary key: one head
    positions = _positions(2, seq_len)
    cos, sin = rotary(q, positions)
    q_hf, k_hf = apply_rotary_pos_emb_interleave(q, k, cos, sin)
    perm = pair_permutation(rope_dim)
    for x, x_hf in ((q, q_hf), (k, k_hf)):
        ours = apply_rope(x, positions[:, None], inv_freq=rotary.inv_freq, layout="interleaved")
        assert torch.equal(ours[..., perm], x_hf)
        assert torch.equal(apply_rope(x[..., perm], positions[:, None], inv_freq=rotary.inv_freq), x_hf)
        # with posenc's own frequencies (inv_freq may differ from transformers' in the last bit)
        ours_default = apply_rope(x, positions[:, None], base=base, layout="interleaved")
        torch.testing.assert_close(ours_default[..., perm], x_hf, rtol=0, atol=2e-5)
    # the scores are those of the un-permuted interleaved rotation
    ours_q = apply_rope(q, positions[:, None], inv_freq=rotary.inv_freq, layout="interleaved")
    ours_k = apply_rope(k, positions[:, None], inv_freq=rotary.inv_freq, layout="interleaved")
    torch.testing.assert_close(ours_q @ ours_k.transpose(-2, -1), q_hf @ k_hf.transpose(-2, -1))


@pytest.mark.parametrize("rope_dim, base", [(6, 10000.0), (32, 1000.0)])
def test_v3_non_interleaved_is_half_rope(rope_dim, base):
    """rope_interleave=False: plain rotate_half, posenc's layout="half"."""
    g = torch.Generator().manual_seed(1)
    rotary = DeepseekV3RotaryEmbedding(_v3_config(rope_dim=rope_dim, base=base))
    q, k = torch.randn(2, 3, 9, rope_dim, generator=g), torch.randn(2, 1, 9, rope_dim, generator=g)
    positions = _positions(2, 9)
    q_hf, k_hf = apply_rotary_pos_emb(q, k, *rotary(q, positions))
    assert torch.equal(apply_rope(q, positions[:, None], inv_freq=rotary.inv_freq, layout="half"), q_hf)
    assert torch.equal(apply_rope(k, positions[:, None], inv_freq=rotary.inv_freq, layout="half"), k_hf)


def test_v2_complex_rope_is_interleaved_rope_without_permutation():
    """DeepSeek-V2's complex-number rotation keeps the interleaved order in its output."""
    config = DeepseekV2Config(
        hidden_size=32, num_attention_heads=4, kv_lora_rank=16, q_lora_rank=None, qk_nope_head_dim=8,
        qk_rope_head_dim=8, v_head_dim=5, rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
    )
    rotary = DeepseekV2RotaryEmbedding(config)
    g = torch.Generator().manual_seed(2)
    q, k = torch.randn(2, 3, 7, 8, generator=g), torch.randn(2, 1, 7, 8, generator=g)
    positions = _positions(2, 7)
    q_hf, k_hf = v2_apply_rotary_emb(q, k, rotary(q, positions))
    for x, x_hf in ((q, q_hf), (k, k_hf)):
        ours = apply_rope(x, positions[:, None], inv_freq=rotary.inv_freq, layout="interleaved")
        torch.testing.assert_close(ours, x_hf, rtol=0, atol=1e-6)


# -- the whole attention ------------------------------------------------------------


def _copy_of(hf, **options):
    mla = MLAttention(32, 4, **SIZES, **options)
    mla.load_state_dict(hf.state_dict(), strict=True)  # the same sub-module names
    return mla


def _hf_attention(config, seed=0):
    torch.manual_seed(seed)
    hf = DeepseekV3Attention(config, layer_idx=0).eval()
    with torch.no_grad():
        for param in hf.parameters():
            param.normal_(0.0, 0.3)  # RMSNorm weights too, so that they are checked
    return hf


def _hf_forward(hf, config, x, positions):
    cos_sin = DeepseekV3RotaryEmbedding(config)(x, positions)
    seq_len = x.shape[1]
    mask = torch.full((seq_len, seq_len), float("-inf")).triu(1)[None, None]
    return hf(x, cos_sin, mask)[0]


@pytest.mark.parametrize("interleave", [True, False], ids=["interleave", "half"])
@pytest.mark.parametrize("q_lora_rank", [None, 12], ids=["q_proj", "q_lora"])
def test_whole_attention_equals_transformers_deepseek_v3(interleave, q_lora_rank):
    config = _v3_config(base=500.0, interleave=interleave, q_lora_rank=q_lora_rank)
    hf = _hf_attention(config)
    layout = "interleaved" if interleave else "half"
    mla = _copy_of(hf, q_lora_rank=q_lora_rank, base=500.0, layout=layout)
    x = torch.randn(2, 7, 32, generator=torch.Generator().manual_seed(3))
    positions = _positions(2, 7)
    with torch.no_grad():
        expected = _hf_forward(hf, config, x, positions)
        torch.testing.assert_close(mla(x, positions), expected, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(mla.forward_absorbed(x, positions)[0], expected, rtol=1e-5, atol=1e-5)


def test_whole_attention_equals_transformers_with_deepseek_yarn_and_mscale():
    """YaRN as DeepSeek configures it: cos and sin scaled by m(s, mscale)/m(s, mscale_all_dim), the softmax
    scale by m(s, mscale_all_dim)², m(s, a) = 0.1·a·ln s + 1."""
    factor, mscale, mscale_all_dim = 4.0, 1.0, 0.8
    params = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": factor, "original_max_position_embeddings": 16,
              "mscale": mscale, "mscale_all_dim": mscale_all_dim, "beta_fast": 32.0, "beta_slow": 1.0}
    config = _v3_config(q_lora_rank=12, rope_parameters=params)
    hf = _hf_attention(config, seed=1)

    def m(a):
        return 0.1 * a * math.log(factor) + 1.0

    scaling = {"rope_type": "yarn", "factor": factor, "original_max_position_embeddings": 16,
               "attention_factor": m(mscale) / m(mscale_all_dim)}
    softmax_scale = m(mscale_all_dim) ** 2 / math.sqrt(8 + 6)
    assert softmax_scale == pytest.approx(hf.scaling, rel=1e-12)
    mla = _copy_of(hf, q_lora_rank=12, scaling=scaling, softmax_scale=softmax_scale)
    x = torch.randn(2, 40, 32, generator=torch.Generator().manual_seed(4))  # beyond the trained 16
    positions = _positions(2, 40, offsets=(0, 3))
    with torch.no_grad():
        torch.testing.assert_close(mla(x, positions), _hf_forward(hf, config, x, positions), rtol=1e-5, atol=1e-5)


# -- the absorbed path and the positions contract -----------------------------------


def _mla(seed=0, **options):
    torch.manual_seed(seed)
    mla = MLAttention(32, 4, **SIZES, **options).double()
    with torch.no_grad():
        for param in mla.parameters():
            param.normal_(0.0, 0.3)
    return mla


@pytest.mark.parametrize("q_lora_rank", [None, 12])
def test_absorbed_path_equals_naive_path(q_lora_rank):
    mla = _mla(q_lora_rank=q_lora_rank)
    x = torch.randn(2, 9, 32, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    positions = _positions(2, 9, offsets=(0, 11))
    with torch.no_grad():
        naive = mla(x, positions)
        prefill, cache = mla.forward_absorbed(x, positions)
        # float32 RoPE angles inside a float64 model: the two paths' products round
        # differently on some CPUs (5.6e-8 on an AMD EPYC with AVX2), never more
        torch.testing.assert_close(prefill, naive, rtol=1e-6, atol=1e-6)
        assert cache.c_kv.shape == (2, 9, 16) and cache.k_pe.shape == (2, 9, 6)
        # a prompt of 4, then one token at a time from the latent cache
        out, cache = mla.forward_absorbed(x[:, :4], positions[:, :4])
        steps = [out]
        for t in range(4, 9):
            out, cache = mla.forward_absorbed(x[:, t : t + 1], positions[:, t : t + 1], cache)
            steps.append(out)
        torch.testing.assert_close(torch.cat(steps, dim=1), naive, rtol=1e-6, atol=1e-6)
        assert cache.c_kv.shape == (2, 9, 16)


def test_cache_is_the_latent_and_the_shared_rotary_key():
    """The cache is c_kv = RMSNorm(W_dkv x) and k_pe = RoPE(W_kr x): no per-head tensor."""
    mla = _mla()
    x = torch.randn(1, 5, 32, dtype=torch.float64)
    positions = torch.arange(5)
    with torch.no_grad():
        _, cache = mla.forward_absorbed(x, positions)
        latent, rope_in = (x @ mla.kv_a_proj_with_mqa.weight.T).split([16, 6], dim=-1)
        torch.testing.assert_close(cache.c_kv, mla.kv_a_layernorm(latent))
        torch.testing.assert_close(cache.k_pe, apply_rope(rope_in, positions, layout="interleaved"))


def test_positions_contract_and_relative_positions():
    mla = _mla()
    x = torch.randn(2, 6, 32, dtype=torch.float64, generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        shared = mla(x, torch.arange(6))
        torch.testing.assert_close(mla(x, torch.arange(6).expand(2, 6)), shared)
        offsets = _positions(2, 6, offsets=(3, 17))
        rows = torch.cat([mla(x[i : i + 1], offsets[i]) for i in range(2)])
        torch.testing.assert_close(mla(x, offsets), rows)
        # only n − m enters the scores: shifting every position changes nothing
        # (up to the float32 angles: posenc forms m·θ_i in float32, book/design.md)
        torch.testing.assert_close(mla(x, torch.arange(6) + 100), shared, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(mla.forward_absorbed(x, offsets)[0], rows, rtol=1e-10, atol=1e-10)


def test_rotary_features_carry_the_position():
    """Zeroing the rotary query features (q_pe) leaves a position-free attention."""
    mla = _mla()
    with torch.no_grad():
        weight = mla.q_proj.weight.view(4, 14, 32)
        weight[:, 8:] = 0.0  # q_pe = 0
    x = torch.randn(1, 6, 32, dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(mla(x, torch.arange(6)), mla(x, torch.tensor([0, 7, 9, 30, 31, 50])))


def test_errors_name_the_value_and_the_rule():
    with pytest.raises(ValueError, match="qk_rope_head_dim must be even"):
        MLAttention(32, 4, kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=5, v_head_dim=5)
    with pytest.raises(ValueError, match="layout must be one of"):
        MLAttention(32, 4, **SIZES, layout="neox")
    with pytest.raises(ValueError, match="softmax_scale must be finite and > 0"):
        MLAttention(32, 4, **SIZES, softmax_scale=0.0)
    with pytest.raises(TypeError, match="kv_lora_rank must be an integer"):
        MLAttention(32, 4, kv_lora_rank=16.0, qk_nope_head_dim=8, qk_rope_head_dim=6, v_head_dim=5)
    mla = MLAttention(32, 4, **SIZES)
    with pytest.raises(ValueError, match=r"x must have shape \(B, T, d_model=32\)"):
        mla(torch.randn(1, 3, 31), torch.arange(3))
    with pytest.raises(TypeError, match="x must be a floating tensor"):
        mla(torch.ones(1, 3, 32, dtype=torch.long), torch.arange(3))
    with pytest.raises(ValueError, match="positions must have shape"):
        mla(torch.randn(1, 3, 32), torch.arange(4))
    _, cache = mla.forward_absorbed(torch.randn(1, 3, 32), torch.arange(3))
    with pytest.raises(ValueError, match="cache must hold c_kv"):
        mla.forward_absorbed(torch.randn(2, 1, 32), torch.tensor([3]), cache)
    with pytest.raises(TypeError, match="cache must be an MLACache"):
        mla.forward_absorbed(torch.randn(1, 1, 32), torch.tensor([3]), tuple(cache))
    assert isinstance(cache, MLACache)


# -- KV cache arithmetic ------------------------------------------------------------


def test_kv_cache_bytes_hand_arithmetic():
    bf16 = {"dtype": torch.bfloat16}
    assert kv_cache_bytes_per_token("mha", num_heads=128, head_dim=128, **bf16) == 2 * 128 * 128 * 2
    assert kv_cache_bytes_per_token("mha", num_heads=128, head_dim=192, v_head_dim=128, **bf16) == 128 * 320 * 2
    assert kv_cache_bytes_per_token("gqa", num_kv_heads=8, head_dim=128, **bf16) == 2 * 8 * 128 * 2
    assert kv_cache_bytes_per_token("mqa", head_dim=128, **bf16) == 2 * 128 * 2
    assert kv_cache_bytes_per_token("mla", kv_lora_rank=512, qk_rope_head_dim=64, **bf16) == 576 * 2
    assert kv_cache_bytes_per_token("mla", kv_lora_rank=512, qk_rope_head_dim=64, dtype=torch.float32) == 2304
    with pytest.raises(ValueError, match="kind must be one of"):
        kv_cache_bytes_per_token("mlp", head_dim=1)
    with pytest.raises(ValueError, match="kind='gqa' needs num_kv_heads"):
        kv_cache_bytes_per_token("gqa", head_dim=128)
    with pytest.raises(TypeError, match="dtype must be a torch.dtype"):
        kv_cache_bytes_per_token("mqa", head_dim=128, dtype=2)


def test_kv_cache_bytes_for_deepseek_v3_defaults():
    """transformers' DeepseekV3Config defaults are DeepSeek-V3's sizes: 576 cached elements per token and
    layer against 40 960 for MHA with the same heads and widths (71×)."""
    config = DeepseekV3Config()
    assert (config.kv_lora_rank, config.qk_rope_head_dim, config.num_attention_heads) == (512, 64, 128)
    assert (config.qk_nope_head_dim, config.v_head_dim, config.num_hidden_layers) == (128, 128, 61)
    mla = kv_cache_bytes_per_token("mla", kv_lora_rank=config.kv_lora_rank, qk_rope_head_dim=config.qk_rope_head_dim)
    mha = kv_cache_bytes_per_token("mha", num_heads=config.num_attention_heads, head_dim=config.qk_head_dim,
                                   v_head_dim=config.v_head_dim)
    mha_128 = kv_cache_bytes_per_token("mha", num_heads=config.num_attention_heads, head_dim=128)
    assert (mla, mha, mha_128) == (1152, 81920, 65536)
    assert mha / mla == pytest.approx(71.11, abs=0.01) and mha_128 / mla == pytest.approx(56.89, abs=0.01)
    assert mla * config.num_hidden_layers == 70272


# -- SymPy: why RoPE is decoupled (an instance: 2×2 matrices) -----------------------


def _rotation(angle):
    return sp.Matrix([[sp.cos(angle), -sp.sin(angle)], [sp.sin(angle), sp.cos(angle)]])


def test_sympy_absorption_needs_a_position_free_product():
    """Checks an instance (2×2 W_q, W_uk, one rotation frequency θ), not the general statement.

    Without RoPE the score x_mᵀ W_qᵀ W_uk c_n = x_mᵀ A c_n with A = W_qᵀ W_uk one fixed matrix: W_uk is
    absorbed and only c_n is cached. With RoPE between them, W_qᵀ R(θm)ᵀ R(θn) W_uk = W_qᵀ R(θ(n−m)) W_uk
    changes with the pair (m, n), so no single matrix can be precomputed. Decoupling keeps the non-rotated
    part absorbable and moves the position into a separate shared rotary key."""
    theta = sp.symbols("theta", positive=True)
    m, n = sp.symbols("m n", integer=True)
    W_q = sp.Matrix(2, 2, sp.symbols("q0:4", real=True))
    W_uk = sp.Matrix(2, 2, sp.symbols("u0:4", real=True))
    W_qr = sp.Matrix(2, 2, sp.symbols("r0:4", real=True))
    x, c, k_r = (sp.Matrix(2, 1, sp.symbols(f"{name}0:2", real=True)) for name in ("x", "c", "kr"))

    # no RoPE: one position-free matrix A
    A = W_q.T * W_uk
    score = ((W_q * x).T * (W_uk * c))[0]
    assert sp.simplify(score - (x.T * A * c)[0]) == 0
    assert not A.free_symbols & {theta, m, n}

    # RoPE between W_q and W_uk: R(θm)ᵀ R(θn) = R(θ(n − m)) ...
    assert sp.simplify(_rotation(theta * m).T * _rotation(theta * n) - _rotation(theta * (n - m))) == sp.zeros(2, 2)

    def product(m_, n_):
        return W_q.T * _rotation(theta * m_).T * _rotation(theta * n_) * W_uk

    # ... so the product W_qᵀ R(θ(n − m)) W_uk depends on the pair through n − m only: (0, 1) and (5, 6)
    # put the same rotation between W_q and W_uk ...
    middle = sp.simplify(_rotation(0).T * _rotation(theta) - _rotation(5 * theta).T * _rotation(6 * theta))
    assert middle == sp.zeros(2, 2)
    # ... but it does vary with n − m, and it is not the position-free A
    assert sp.simplify(product(0, 1) - product(0, 2)) != sp.zeros(2, 2)
    assert sp.simplify(product(0, 1) - A) != sp.zeros(2, 2)
    # nor can the rotation be moved onto the cached latent, R(θn) W_uk c_n ≠ W_uk R(θn) c_n: they do not commute
    assert sp.simplify(_rotation(theta * n) * W_uk - W_uk * _rotation(theta * n)) != sp.zeros(2, 2)

    # decoupled RoPE: score = x_mᵀ A c_n + (R(θm) W_qr x_m)ᵀ (R(θn) k_r): A stays position-free
    q_rot, k_rot = _rotation(theta * m) * W_qr * x, _rotation(theta * n) * k_r
    decoupled = ((W_q * x).T * (W_uk * c))[0] + (q_rot.T * k_rot)[0]
    absorbed = (x.T * A * c)[0] + (x.T * W_qr.T * _rotation(theta * (n - m)) * k_r)[0]
    assert sp.simplify(decoupled - absorbed) == 0
