import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import LlamaConfig
from transformers.models.gptj.modeling_gptj import apply_rotary_pos_emb as gptj_apply_rotary_pos_emb
from transformers.models.gptj.modeling_gptj import create_sinusoidal_positions
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb as llama_apply_rotary_pos_emb

import posenc
import posenc.layers.surgery
from posenc.layout import pair_permutation
from posenc.layers.model import ModelConfig, TinyLM
from posenc.rope import (
    ROPE_LAYOUTS,
    apply_rope,
    rope_cos_sin,
    rope_matrix,
    rotate_half,
    rotate_interleaved,
)
from posenc.schemes import build_scheme
from posenc.frequencies import compute_inv_freq


def _llama_rotary(head_dim, base, rope_parameters=None, max_position_embeddings=4096):
    params = {"rope_type": "default", "rope_theta": base, **(rope_parameters or {})}
    config = LlamaConfig(hidden_size=4 * head_dim, num_attention_heads=4, head_dim=head_dim,
                         max_position_embeddings=max_position_embeddings, rope_parameters=params)
    return LlamaRotaryEmbedding(config)


@pytest.mark.parametrize("head_dim, base", [(8, 10000.0), (64, 10000.0), (128, 500000.0)])
def test_half_layout_matches_hf_llama(head_dim, base):
    g = torch.Generator().manual_seed(0)
    q, k = (torch.randn(2, 3, 50, head_dim, generator=g) for _ in range(2))
    positions = torch.arange(1000, 1050)
    cos, sin = _llama_rotary(head_dim, base)(q, positions[None].expand(2, -1))
    q_hf, k_hf = llama_apply_rotary_pos_emb(q, k, cos, sin)
    # HF rounds θ_i differently (base**x in float32): one float32 spacing of θ times m ≈ 1000, plus the
    # rounding of the 1000-rad angle itself, a few 2⁻²² · 1000 ≈ 2.4·10⁻⁴
    torch.testing.assert_close(apply_rope(q, positions, base=base), q_hf, atol=5e-4, rtol=1e-5)
    torch.testing.assert_close(apply_rope(k, positions, base=base), k_hf, atol=5e-4, rtol=1e-5)


@pytest.mark.parametrize("head_dim, rotary_dim", [(16, 16), (16, 8), (64, 32)])
def test_interleaved_layout_matches_hf_gptj_with_partial_rotary(head_dim, rotary_dim):
    """GPT-J rotates the first rotary_dim features of each head in adjacent pairs."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 40, 3, head_dim, generator=g)  # GPT-J's (B, T, H, d_h)
    positions = torch.arange(40)
    sin, cos = torch.split(create_sinusoidal_positions(64, rotary_dim)[positions][None], rotary_dim // 2, dim=-1)
    expected = torch.cat((gptj_apply_rotary_pos_emb(x[..., :rotary_dim], sin, cos), x[..., rotary_dim:]), dim=-1)
    ours = apply_rope(x.transpose(1, 2), positions, inv_freq=compute_inv_freq(rotary_dim), layout="interleaved")
    torch.testing.assert_close(ours.transpose(1, 2), expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("scaling", [
    {"rope_type": "linear", "factor": 4.0},
    {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 64},
    {"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 64, "low_freq_factor": 1.0,
     "high_freq_factor": 4.0},
])
def test_scaled_scheme_matches_hf_llama_end_to_end(scaling):
    """The 'rope' scheme with a scaling dict rotates q and k exactly as HF's Llama with the same
    rope_parameters, attention factor (YaRN) included."""
    head_dim = 32
    g = torch.Generator().manual_seed(2)
    q, k = (torch.randn(1, 2, 300, head_dim, generator=g) for _ in range(2))
    positions = torch.arange(300)
    rotary = _llama_rotary(head_dim, 10000.0, scaling, max_position_embeddings=512)
    cos, sin = rotary(q, positions[None])
    q_hf, k_hf = llama_apply_rotary_pos_emb(q, k, cos, sin)
    scheme = build_scheme("rope", d_model=2 * head_dim, num_heads=2, scaling=scaling)
    q_ours, k_ours = scheme.transform_qk(q, k, positions, positions)
    torch.testing.assert_close(q_ours, q_hf, atol=1e-4, rtol=1e-5)
    torch.testing.assert_close(k_ours, k_hf, atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize("layout", ROPE_LAYOUTS)
@pytest.mark.parametrize("head_dim, rotary_dim", [(4, 4), (8, 8), (12, 8)])
def test_elementwise_form_equals_matrix_form(layout, head_dim, rotary_dim):
    inv_freq = compute_inv_freq(rotary_dim, 100.0)
    x = torch.randn(5, head_dim, dtype=torch.float64)
    positions = torch.tensor([0.0, 1.0, 7.0, 2.5, 300.0])
    expected = torch.stack([rope_matrix(float(p), inv_freq, layout=layout, head_dim=head_dim) @ row
                            for p, row in zip(positions, x)])
    torch.testing.assert_close(apply_rope(x, positions, inv_freq=inv_freq, layout=layout), expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("layout", ROPE_LAYOUTS)
def test_rope_matrix_is_orthogonal(layout):
    matrix = rope_matrix(12.0, compute_inv_freq(8), layout=layout, head_dim=10)
    torch.testing.assert_close(matrix.T @ matrix, torch.eye(10, dtype=torch.float64))


def test_rotations_are_quarter_turns():
    x = torch.randn(3, 8)
    for rotate in (rotate_half, rotate_interleaved):
        torch.testing.assert_close(rotate(rotate(x)), -x)
        assert torch.allclose((rotate(x) * x).sum(-1), torch.zeros(3), atol=1e-6)


@settings(max_examples=40, deadline=None)
@given(shift=st.integers(0, 5000), layout=st.sampled_from(ROPE_LAYOUTS), seed=st.integers(0, 2**16))
def test_scores_unchanged_when_all_positions_shift(shift, layout, seed):
    g = torch.Generator().manual_seed(seed)
    q, k = (torch.randn(2, 12, 16, generator=g, dtype=torch.float64) for _ in range(2))
    positions = torch.arange(12)

    def scores(offset):
        rq = apply_rope(q, positions + offset, layout=layout)
        rk = apply_rope(k, positions + offset, layout=layout)
        return rq @ rk.transpose(-1, -2)

    # angles are float32 (by design): their rounding grows with the position
    torch.testing.assert_close(scores(shift), scores(0), atol=2e-3 * (1 + shift / 1000), rtol=0)


@settings(max_examples=40, deadline=None)
@given(position=st.floats(-1e4, 1e4), layout=st.sampled_from(ROPE_LAYOUTS), seed=st.integers(0, 2**16))
def test_norm_is_preserved(position, layout, seed):
    x = torch.randn(3, 1, 32, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    out = apply_rope(x, torch.tensor([position]), layout=layout)
    torch.testing.assert_close(out.norm(dim=-1), x.norm(dim=-1), atol=1e-5, rtol=1e-5)


@settings(max_examples=25, deadline=None)
@given(half_dim=st.integers(1, 16), seed=st.integers(0, 2**16))
def test_layouts_differ_by_the_pair_permutation(half_dim, seed):
    """Rotating permuted features in the half layout = permuting the interleaved result; hence
    weights W_q, W_k for one layout serve the other after permuting their output rows."""
    dim = 2 * half_dim
    x = torch.randn(4, 9, dim, generator=torch.Generator().manual_seed(seed))
    positions = torch.arange(9)
    perm = pair_permutation(dim)
    torch.testing.assert_close(apply_rope(x[..., perm], positions, layout="half"),
                               apply_rope(x, positions, layout="interleaved")[..., perm])
    w = torch.randn(dim, 5, generator=torch.Generator().manual_seed(seed + 1))
    h = torch.randn(9, 5, generator=torch.Generator().manual_seed(seed + 2))
    scores_interleaved = apply_rope(h @ w.T, positions, layout="interleaved")
    scores_half = apply_rope(h @ w[perm].T, positions, layout="half")
    torch.testing.assert_close(scores_half @ scores_half.T, scores_interleaved @ scores_interleaved.T, atol=1e-4, rtol=1e-4)


def test_positions_may_be_per_sequence_offsets():
    x = torch.randn(2, 3, 5, 8)
    offsets = torch.tensor([[0], [100]]) + torch.arange(5)  # (B, T)
    out = apply_rope(x, offsets[:, None, :])  # (B, 1, T)
    torch.testing.assert_close(out[1], apply_rope(x[1], torch.arange(100, 105)))


def test_bf16_input_keeps_float32_angles():
    """At position 10⁵ an angle formed in bfloat16 is off by hundreds of radians; apply_rope forms
    angles in float32 and only rounds the final product to bfloat16."""
    x = torch.randn(1, 4, 64, dtype=torch.float64)
    positions = torch.arange(100_000, 100_004)
    exact = apply_rope(x, positions.double())  # float64 x, float32 angles
    ours = apply_rope(x.bfloat16(), positions).double()
    angles_bf16 = (positions.bfloat16()[:, None] * compute_inv_freq(64).bfloat16()).double()
    cos, sin = torch.cat((angles_bf16.cos(),) * 2, -1), torch.cat((angles_bf16.sin(),) * 2, -1)
    naive = x * cos + rotate_half(x) * sin
    ours_error = (ours - exact).abs().max().item()
    naive_error = (naive - exact).abs().max().item()
    assert ours_error < 0.05 and naive_error > 10 * ours_error


def test_cos_sin_dtypes_and_shapes():
    cos, sin = rope_cos_sin(torch.arange(7), compute_inv_freq(6), layout="interleaved", attention_factor=2.0)
    assert cos.shape == sin.shape == (7, 6) and cos.dtype == torch.float32
    torch.testing.assert_close(cos[..., 0::2], cos[..., 1::2])
    torch.testing.assert_close(cos**2 + sin**2, torch.full((7, 6), 4.0))


def test_apply_rope_on_device(device):
    x = torch.randn(2, 2, 9, 8, device=device, dtype=torch.float16 if device.type == "cuda" else torch.float32)
    out = apply_rope(x, torch.arange(9, device=device))
    assert out.device == x.device and out.dtype == x.dtype and out.shape == x.shape
    torch.testing.assert_close(out.float().cpu(), apply_rope(x.float().cpu(), torch.arange(9)), atol=2e-3, rtol=2e-3)


SCHEME_OPTIONS = {"learned": {"max_len": 64}, "rope": {"scaling": {"rope_type": "yarn", "factor": 4.0,
                                                                    "original_max_position_embeddings": 8}}}


@pytest.mark.parametrize("scheme", posenc.available_schemes())
@pytest.mark.parametrize("impl", ["auto", "reference"])
def test_kv_cache_gives_the_full_forward_logits(scheme, impl, device):
    """Feeding the sequence in pieces (a prompt, one token, the rest) with a cache gives the logits
    of one forward pass, for every registered scheme."""
    torch.manual_seed(0)
    model = TinyLM(ModelConfig(scheme=scheme, scheme_options=SCHEME_OPTIONS.get(scheme, {}), attn_impl=impl))
    model = model.to(device).eval()
    tokens = torch.randint(0, 256, (2, 20), device=device)
    with torch.no_grad():
        full = model(tokens)
        cache = model.new_cache()
        pieces = [model(tokens[:, a:b], cache=cache) for a, b in [(0, 7), (7, 8), (8, 20)]]
    assert len(cache) == 20
    torch.testing.assert_close(torch.cat(pieces, dim=1), full, atol=1e-5, rtol=1e-5)


def test_dynamic_ntk_is_not_cache_consistent():
    """Dynamic NTK picks the frequencies from the current length, but cached keys keep the rotation
    of the step that computed them: past the training length, decoding token by token no longer
    gives the full forward pass (the known caveat of dynamic scaling with a KV cache). Within the
    training length the frequencies never change and the two agree."""
    torch.manual_seed(0)
    scaling = {"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 8}
    model = TinyLM(ModelConfig(scheme="rope", scheme_options={"scaling": scaling})).eval()
    tokens = torch.randint(0, 256, (1, 20))

    def step_by_step(seq):
        cache = model.new_cache()
        return torch.cat([model(seq[:, i:i + 1], cache=cache) for i in range(seq.shape[1])], dim=1)

    with torch.no_grad():
        torch.testing.assert_close(step_by_step(tokens[:, :8]), model(tokens[:, :8]), atol=1e-5, rtol=1e-5)
        assert (step_by_step(tokens) - model(tokens)).abs().max() > 1e-3


def test_longrope_switches_factors_at_the_trained_length():
    """LongRoPE's short factors hold up to the trained length L and its long factors beyond,
    decided by the current length max(k_positions) + 1 of each call, as for dynamic NTK."""
    from posenc.scaling import rope_inv_freq

    scaling = {"rope_type": "longrope", "original_max_position_embeddings": 8, "factor": 4.0,
               "short_factor": [1.0, 1.5, 2.0, 3.0], "long_factor": [1.0, 2.0, 4.0, 8.0]}
    scheme = build_scheme("rope", d_model=16, num_heads=2, scaling=scaling)
    q, k = torch.randn(2, 1, 2, 20, 8).unbind(0)
    for length in (8, 20):
        positions = torch.arange(length)
        inv_freq, factor = rope_inv_freq(8, 10000.0, scaling, seq_len=length)
        expected = apply_rope(q[..., :length, :], positions, inv_freq=inv_freq, attention_factor=factor)
        got, _ = scheme.transform_qk(q[..., :length, :], k[..., :length, :], positions, positions)
        torch.testing.assert_close(got, expected)
    short, _ = rope_inv_freq(8, 10000.0, scaling, seq_len=8)
    long, _ = rope_inv_freq(8, 10000.0, scaling, seq_len=20)
    assert not torch.equal(short, long)


def test_cache_rejects_a_model_mismatch():
    model = TinyLM(ModelConfig(scheme="rope", num_layers=2))
    other = TinyLM(ModelConfig(scheme="rope", num_layers=3))
    with pytest.raises(ValueError, match="cache has 3 layers"):
        model(torch.zeros(1, 3, dtype=torch.long), cache=other.new_cache())


@pytest.mark.parametrize("call, message", [
    (lambda: apply_rope(torch.randn(2, 5, 7), torch.arange(5)), "head_dim must be even"),
    (lambda: apply_rope(torch.randn(2, 5, 8), torch.arange(5), inv_freq=torch.ones(6)), "rotary_dim = 2·len"),
    (lambda: apply_rope(torch.randn(2, 5, 8), torch.arange(4)), "T=5"),
    (lambda: apply_rope(torch.randn(2, 5, 8), torch.arange(5), layout="neox"), "layout"),
    (lambda: apply_rope(torch.randn(2, 5, 8), torch.tensor([0.0, 1, 2, 3, math.nan])), "finite"),
    (lambda: build_scheme("rope", d_model=16, num_heads=2, rotary_dim=10), "rotary_dim = 10"),
    (lambda: build_scheme("rope", d_model=14, num_heads=2), "head_dim must be even"),
    (lambda: build_scheme("rope", d_model=16, num_heads=2, scaling={"rope_type": "xpos", "factor": 2.0}), "rope_type"),
    (lambda: build_scheme("rope", d_model=16, num_heads=2, scaling={"rope_type": "linear", "factor": 0.5}), "factor must be >= 1"),
])
def test_bad_input_is_named(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_integer_x_is_a_type_error():
    with pytest.raises(TypeError, match="floating"):
        apply_rope(torch.ones(2, 4, dtype=torch.long), torch.arange(2))


@pytest.mark.parametrize("rotary_dim", [None, 4])
def test_convert_rope_layout_keeps_the_logits(rotary_dim, device):
    torch.manual_seed(0)
    options = {} if rotary_dim is None else {"rotary_dim": rotary_dim}
    model = TinyLM(ModelConfig(scheme="rope", d_model=32, num_heads=4, scheme_options=options)).to(device).eval()
    tokens = torch.randint(0, 256, (2, 24), device=device)
    converted = posenc.layers.surgery.convert_rope_layout(model, "interleaved")
    back = posenc.layers.surgery.convert_rope_layout(converted, "half")
    with torch.no_grad():
        logits = model(tokens)
        torch.testing.assert_close(converted(tokens), logits, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(back(tokens), logits, atol=1e-5, rtol=1e-5)
        assert (model.with_scheme_options(layout="interleaved")(tokens) - logits).abs().max() > 1e-3
    assert converted.scheme.layout == "interleaved"
    for p, q in zip(model.parameters(), back.parameters()):
        assert torch.equal(p, q)


def test_convert_rope_layout_needs_rope():
    with pytest.raises(ValueError, match="'rope' scheme"):
        posenc.layers.surgery.convert_rope_layout(TinyLM(ModelConfig(scheme="alibi")), "half")


# ---- apply_rope_qk: the fast path for queries and keys --------------------------------------------


def _ulps(got, ref):
    """Largest difference in units of the last place of ref's magnitude (at least 1)."""
    eps = torch.finfo(ref.dtype).eps
    scale = ref.float().abs().clamp_min(1.0)
    return ((got.float() - ref.float()).abs() / (eps * scale)).max().item()


@pytest.mark.parametrize("layout", ROPE_LAYOUTS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rotary_dim", [32, 24])
@pytest.mark.parametrize("mode", ["new", "out", "inplace", "fused"])
def test_apply_rope_qk_equals_apply_rope(device, layout, dtype, rotary_dim, mode):
    from posenc.experiments.kernels import apply_rope_qk

    g = torch.Generator().manual_seed(1)
    q = torch.randn(2, 4, 9, 32, generator=g).to(device, dtype)
    k = torch.randn(2, 4, 9, 32, generator=g).to(device, dtype)
    positions = torch.tensor([0, 1, 2, 5, 8, 13, 21, 34, 4000], device=device)
    inv_freq = compute_inv_freq(rotary_dim, 500000.0, device=device)
    kw = dict(inv_freq=inv_freq, layout=layout, attention_factor=1.2)
    ref = [apply_rope(x, positions, **kw) for x in (q, k)]
    q0, k0 = q.clone(), k.clone()
    if mode == "out":
        out = (torch.full_like(q, float("nan")), torch.full_like(k, float("nan")))
        got = apply_rope_qk(q, k, positions, out=out, **kw)
        assert got[0] is out[0] and got[1] is out[1]
    elif mode == "inplace":
        got = apply_rope_qk(q, k, positions, out=(q, k), **kw)
        assert got[0] is q and got[1] is k
    else:
        got = apply_rope_qk(q, k, positions, fused=mode == "fused", **kw)
    if mode != "inplace":  # the inputs are untouched
        assert torch.equal(q, q0) and torch.equal(k, k0)
    for g_, r in zip(got, ref):
        assert g_.shape == r.shape and g_.dtype == dtype and g_.device == r.device
        # one multiply-add rounded once instead of twice: within one unit in the last place
        assert _ulps(g_, r) <= 1.0
        if rotary_dim < 32:  # the pass-through features are copied unchanged
            assert torch.equal(g_[..., rotary_dim:], r[..., rotary_dim:])
    # the check can fail: the other layout gives a different rotation
    other = apply_rope(q0, positions, **{**kw, "layout": [x for x in ROPE_LAYOUTS if x != layout][0]})
    assert _ulps(got[0], other) > 100


def test_apply_rope_qk_batched_positions_match_hf_llama():
    from posenc.experiments.kernels import apply_rope_qk

    g = torch.Generator().manual_seed(2)
    q, k = torch.randn(2, 4, 6, 16, generator=g), torch.randn(2, 4, 6, 16, generator=g)
    position_ids = torch.tensor([[0, 1, 2, 3, 4, 5], [7, 8, 9, 10, 11, 12]])
    rotary = _llama_rotary(16, 10000.0)
    cos, sin = rotary(q, position_ids)
    q_hf, k_hf = llama_apply_rotary_pos_emb(q, k, cos, sin)
    q_rot, k_rot = apply_rope_qk(q, k, position_ids[:, None, :])
    torch.testing.assert_close(q_rot, q_hf, atol=2e-6, rtol=1e-6)
    torch.testing.assert_close(k_rot, k_hf, atol=2e-6, rtol=1e-6)


def test_apply_rope_qk_errors():
    from posenc.experiments.kernels import apply_rope_qk

    q, k, pos = torch.randn(1, 2, 5, 8), torch.randn(1, 2, 5, 8), torch.arange(5)
    with pytest.raises(TypeError, match="q must be a floating tensor"):
        apply_rope_qk(torch.ones(1, 2, 5, 8, dtype=torch.long), k, pos)
    with pytest.raises(ValueError, match="head_dim, dtype and device"):
        apply_rope_qk(q, torch.randn(1, 2, 5, 6), pos)
    with pytest.raises(ValueError, match="head_dim, dtype and device"):
        apply_rope_qk(q, k.double(), pos)
    with pytest.raises(ValueError, match="T=5"):
        apply_rope_qk(q, k, torch.arange(4))
    with pytest.raises(ValueError, match="layout"):
        apply_rope_qk(q, k, pos, layout="diagonal")
    with pytest.raises(ValueError, match="must not exceed head_dim"):
        apply_rope_qk(q, k, pos, inv_freq=torch.ones(5))
    with pytest.raises(TypeError, match="out must be a pair"):
        apply_rope_qk(q, k, pos, out=torch.empty_like(q))
    with pytest.raises(ValueError, match="k_out must have the input's shape"):
        apply_rope_qk(q, k, pos, out=(torch.empty_like(q), torch.empty(1, 2, 5, 4)))
    with pytest.raises(ValueError, match="q_out shares memory with its input"):
        apply_rope_qk(q, k, pos, out=(q.view(-1).view(1, 2, 5, 8)[...], torch.empty_like(k)))


@pytest.mark.parametrize("layout", ROPE_LAYOUTS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_apply_rope_qk_tiles_cover_every_position(monkeypatch, layout, dtype):
    """The sequence is rotated tile by tile (posenc.experiments.kernels.ROPE_TILE_BYTES): with tiles of 8
    positions, 37 positions take five tiles, the last one short, in every mode."""
    import posenc.experiments.kernels
    from posenc.experiments.kernels import apply_rope_qk

    monkeypatch.setattr(posenc.experiments.kernels, "ROPE_TILE_BYTES", 1)
    g = torch.Generator().manual_seed(3)
    q, k = (torch.randn(2, 3, 37, 16, generator=g).to(dtype) for _ in range(2))
    positions = torch.arange(37)[None, None] + torch.tensor([0, 100])[:, None, None]  # (B, 1, T)
    inv_freq = compute_inv_freq(12, 10000.0)  # partial rotary: 4 features pass through
    ref = [apply_rope(x, positions, inv_freq=inv_freq, layout=layout) for x in (q, k)]
    for got in (apply_rope_qk(q, k, positions, inv_freq=inv_freq, layout=layout),
                apply_rope_qk(q.clone(), k.clone(), positions, inv_freq=inv_freq, layout=layout,
                              out=(torch.empty_like(q), torch.empty_like(k)))):
        assert all(_ulps(g_, r) <= 1.0 for g_, r in zip(got, ref))
    q2, k2 = q.clone(), k.clone()
    apply_rope_qk(q2, k2, positions, inv_freq=inv_freq, layout=layout, out=(q2, k2))
    assert _ulps(q2, ref[0]) <= 1.0 and _ulps(k2, ref[1]) <= 1.0


def test_apply_rope_qk_on_strided_inputs():
    """Queries and keys split from one projection are strided views (B, H, T, d_h) of a
    (B, T, 3, H, d_h) tensor; rotating them in place must write through to it."""
    from posenc.experiments.kernels import apply_rope_qk

    qkv = torch.randn(2, 11, 3, 4, 16, generator=torch.Generator().manual_seed(4))
    q, k, _ = qkv.permute(2, 0, 3, 1, 4)
    assert not q.is_contiguous()
    positions = torch.arange(11)
    ref = apply_rope(q, positions), apply_rope(k, positions)
    got = apply_rope_qk(q, k, positions)
    assert _ulps(got[0], ref[0]) <= 1.0 and _ulps(got[1], ref[1]) <= 1.0
    apply_rope_qk(q, k, positions, out=(q, k))
    assert _ulps(qkv[:, :, 0].transpose(1, 2), ref[0]) <= 1.0
    assert _ulps(qkv[:, :, 1].transpose(1, 2), ref[1]) <= 1.0
