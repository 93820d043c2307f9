"""Multimodal RoPE (Qwen2-VL's M-RoPE, Qwen3-VL's interleaved variant) and 2-D axial
RoPE: parity with Hugging Face's implementations, the defining properties, the input
checks, and the SymPy proofs (text reduces to 1-D RoPE; image scores are relative in
every axis)."""

import itertools
import types

import pytest
import sympy as sp
import torch
from transformers.models.pixtral import modeling_pixtral
from transformers.models.qwen2_vl import modeling_qwen2_vl as qwen2_vl
from transformers.models.qwen3_vl import modeling_qwen3_vl as qwen3_vl

from posenc import symbolic as S
from posenc.rope_nd import (
    apply_mrope,
    apply_rope_2d,
    mrope_axis_of_pair,
    mrope_positions,
    rope_2d_inv_freq,
)
from posenc.rope import apply_rope
from posenc.frequencies import compute_inv_freq


def _config(head_dim, base, mrope_section=None, rope_type="default"):
    """The attributes the rotary modules read from a config (no model is built)."""
    return types.SimpleNamespace(
        max_position_embeddings=4096,
        head_dim=head_dim,
        hidden_size=4 * head_dim,
        embed_dim=4 * head_dim,
        num_attention_heads=4,
        rope_parameters={
            "rope_type": rope_type,
            "rope_theta": base,
            "mrope_section": mrope_section,
        },
    )


def _hf_mrope(x, positions, section, base, *, interleaved=False, inv_freq=None):
    cls = (
        qwen3_vl.Qwen3VLTextRotaryEmbedding
        if interleaved
        else qwen2_vl.Qwen2VLRotaryEmbedding
    )
    emb = cls(_config(x.shape[-1], base, list(section)))
    if inv_freq is not None:
        emb.inv_freq = inv_freq
    cos, sin = emb(x, positions if positions.dim() == 3 else positions[:, None])
    return qwen2_vl.apply_rotary_pos_emb(x, x, cos, sin)[0]


CASES = [  # head_dim, base, mrope_section, B, T
    (128, 1_000_000.0, (16, 24, 24), 2, 9),  # Qwen2-VL's own
    (128, 5_000_000.0, (24, 20, 20), 3, 5),  # Qwen3-VL's split, chunked here
    (16, 10_000.0, (2, 3, 3), 2, 7),
    (12, 500.0, (1, 4, 1), 1, 4),
]


@pytest.mark.parametrize(
    "interleaved", [False, True], ids=["qwen2-vl", "qwen3-vl-interleaved"]
)
@pytest.mark.parametrize("head_dim,base,section,batch,seq_len", CASES)
def test_mrope_matches_transformers(
    head_dim, base, section, batch, seq_len, interleaved
):
    g = torch.Generator().manual_seed(head_dim + batch)
    x = torch.randn(batch, 3, seq_len, head_dim, generator=g)
    positions = torch.randint(
        0, 400, (3, batch, seq_len), generator=g
    )  # t, h, w all different
    ours = apply_mrope(x, positions, section, base=base, mrope_interleaved=interleaved)
    # with the same frequencies the two agree to the last bit: the same section split
    same_freq = _hf_mrope(
        x,
        positions,
        section,
        base,
        interleaved=interleaved,
        inv_freq=compute_inv_freq(head_dim, base),
    )
    torch.testing.assert_close(ours, same_freq, atol=1e-6, rtol=1e-6)
    # Hugging Face's own θ_i = 1/base**(2i/d) in float32 is a few ulps off posenc's
    # correctly rounded θ_i; at ids ≤ 400 that moves an angle by < 1e-4 rad
    torch.testing.assert_close(
        ours,
        _hf_mrope(x, positions, section, base, interleaved=interleaved),
        atol=5e-4,
        rtol=1e-5,
    )
    # (3, T) ids shared by the batch
    torch.testing.assert_close(
        apply_mrope(
            x, positions[:, 0], section, base=base, mrope_interleaved=interleaved
        ),
        _hf_mrope(
            x,
            positions[:, 0],
            section,
            base,
            interleaved=interleaved,
            inv_freq=compute_inv_freq(head_dim, base),
        ),
        atol=1e-6,
        rtol=1e-6,
    )


def test_axis_assignment():
    assert mrope_axis_of_pair([16, 24, 24], 128) == [0] * 16 + [1] * 24 + [2] * 24
    interleaved = mrope_axis_of_pair([24, 20, 20], 128, mrope_interleaved=True)
    assert interleaved[:6] == [0, 1, 2, 0, 1, 2] and interleaved[60:] == [0, 0, 0, 0]
    assert [interleaved.count(a) for a in range(3)] == [24, 20, 20]


@pytest.mark.parametrize("interleaved", [False, True])
def test_mrope_on_text_is_rope(interleaved):
    """t = h = w = m: every pair turns by m·θ_i, i.e. 1-D RoPE (bit for bit)."""
    x = torch.randn(2, 2, 11, 32, generator=torch.Generator().manual_seed(1))
    m = torch.arange(5, 16)
    out = apply_mrope(
        x, m.expand(3, -1), (4, 6, 6), base=1e6, mrope_interleaved=interleaved
    )
    torch.testing.assert_close(out, apply_rope(x, m, base=1e6), atol=0, rtol=0)


def test_mrope_batch_rows_are_independent_and_keep_dtype(device):
    g = torch.Generator().manual_seed(2)
    x = torch.randn(3, 2, 6, 16, generator=g).to(device)
    positions = torch.randint(0, 50, (3, 3, 6), generator=g).to(device)
    out = apply_mrope(x, positions, (2, 3, 3))
    for b in range(3):
        torch.testing.assert_close(
            out[b : b + 1], apply_mrope(x[b : b + 1], positions[:, b], (2, 3, 3))
        )
    half = apply_mrope(x.bfloat16(), positions, (2, 3, 3))
    assert (
        half.dtype == torch.bfloat16
        and half.device == x.device
        and half.shape == x.shape
    )
    torch.testing.assert_close(half.float(), out, atol=3e-2, rtol=3e-2)
    assert apply_mrope(x, positions.float(), (2, 3, 3)).equal(out)  # float ids allowed


def test_mrope_image_scores_are_relative():
    """Shifting every query and key id by the same (Δt, Δh, Δw) leaves q·k unchanged."""
    g = torch.Generator().manual_seed(3)
    q, k = torch.randn(2, 1, 1, 8, 16, generator=g, dtype=torch.float64).unbind(0)
    ids = torch.randint(0, 20, (3, 8), generator=g)

    def scores(shift):
        moved = ids + torch.tensor(shift)[:, None]
        return apply_mrope(q, moved, (2, 3, 3)) @ apply_mrope(
            k, moved, (2, 3, 3)
        ).transpose(-1, -2)

    for shift in [(5, 0, 0), (0, 7, 0), (0, 0, 11), (3, -2, 9)]:
        torch.testing.assert_close(
            scores(shift), scores((0, 0, 0)), atol=1e-4, rtol=1e-5
        )


@pytest.mark.parametrize(
    "positions,message",
    [
        (torch.zeros(2, 5, dtype=torch.long), r"\(3, T\) or \(3, B, T\)"),
        (torch.zeros(3, 4, dtype=torch.long), "T=5"),
        (torch.zeros(3, 3, 5, dtype=torch.long), "B=2"),
        (torch.zeros(5, 3, dtype=torch.long), r"\(3, T\)"),
        (torch.tensor([[float("inf")] * 5] * 3), "finite"),
    ],
)
def test_mrope_rejects_bad_positions(positions, message):
    with pytest.raises(ValueError, match=message):
        apply_mrope(torch.zeros(2, 1, 5, 16), positions, (2, 3, 3))


def test_mrope_rejects_bad_arguments():
    x, ids = torch.zeros(1, 1, 4, 16), torch.zeros(3, 4, dtype=torch.long)
    with pytest.raises(ValueError, match="sum 9"):
        apply_mrope(x, ids, (3, 3, 3))
    with pytest.raises(ValueError, match="3 ints"):
        apply_mrope(x, ids, (4, 4))
    with pytest.raises(ValueError, match=r"mrope_section\[0\] must be >= 1"):
        apply_mrope(x, ids, (0, 4, 4))
    with pytest.raises(TypeError, match=r"mrope_section\[1\] must be an integer"):
        apply_mrope(x, ids, (2, 3.0, 3))
    with pytest.raises(TypeError, match="sequence of 3 ints"):
        apply_mrope(x, ids, 8)
    with pytest.raises(ValueError, match="head_dim must be even"):
        apply_mrope(torch.zeros(1, 1, 4, 15), ids, (2, 3, 3))
    with pytest.raises(TypeError, match="x must be a floating tensor"):
        apply_mrope(torch.zeros(1, 1, 4, 16, dtype=torch.long), ids, (2, 3, 3))
    with pytest.raises(ValueError, match=r"\(B, H, T, head_dim\)"):
        apply_mrope(torch.zeros(4, 16), ids, (2, 3, 3))
    with pytest.raises(TypeError, match="positions must be an integer or float tensor"):
        apply_mrope(x, ids.bool(), (2, 3, 3))
    with pytest.raises(ValueError, match="base must be finite"):
        apply_mrope(x, ids, (2, 3, 3), base=0.0)


# --------------------------------------------------------------------------------------
# Position ids of a text-image-text sequence
# --------------------------------------------------------------------------------------


def _hf_rope_index(segments, merge=2):
    """transformers' Qwen2VLModel.get_rope_index, called without a model (it reads
    only the vision merge size from the config)."""
    model = types.SimpleNamespace(
        config=types.SimpleNamespace(
            vision_config=types.SimpleNamespace(spatial_merge_size=merge)
        ),
        get_vision_position_ids=lambda *a, **k: (
            qwen2_vl.Qwen2VLModel.get_vision_position_ids(None, *a, **k)
        ),
    )
    types_, grids = [], []
    for seg in segments:
        if isinstance(seg, tuple):
            types_ += [1] * (seg[0] * seg[1] * seg[2])
            grids.append(
                [seg[0], seg[1] * merge, seg[2] * merge]
            )  # patch grid before the merge
        else:
            types_ += [0] * seg
    token_types = torch.tensor([types_])
    ids, _ = qwen2_vl.Qwen2VLModel.get_rope_index(
        model,
        torch.zeros_like(token_types),
        token_types,
        image_grid_thw=torch.tensor(grids),
    )
    return ids[:, 0]


@pytest.mark.parametrize(
    "segments",
    [
        [3, (1, 2, 3), 4],
        [(1, 4, 2), 5],
        [2, (1, 3, 3), 1, (1, 1, 2), 3],
        [4, (2, 3, 3), 2],
    ],
)
def test_mrope_positions_match_get_rope_index(segments):
    assert mrope_positions(segments).equal(_hf_rope_index(segments))


def test_mrope_positions_layout_and_checks():
    ids = mrope_positions([2, (1, 2, 3), 1])
    assert ids.tolist() == [
        [0, 1, 2, 2, 2, 2, 2, 2, 5],
        [0, 1, 2, 2, 2, 3, 3, 3, 5],
        [0, 1, 2, 3, 4, 2, 3, 4, 5],
    ]
    assert mrope_positions([3, (5, 1, 1), 1])[:, -1].tolist() == [
        8,
        8,
        8,
    ]  # past the last frame
    with pytest.raises(ValueError, match=r"segments\[1\]\[0\] must be >= 1"):
        mrope_positions([2, (0, 2, 2)])
    with pytest.raises(ValueError, match="vision grid"):
        mrope_positions([(1, 2)])
    with pytest.raises(ValueError, match="at least one"):
        mrope_positions([])
    with pytest.raises(TypeError, match="text run"):
        mrope_positions(["abc"])


# --------------------------------------------------------------------------------------
# 2-D axial RoPE
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("head_dim,base", [(32, 10_000.0), (80, 10_000.0), (16, 100.0)])
@pytest.mark.parametrize("frequencies", ["shared", "alternating"])
def test_rope_2d_matches_transformers(head_dim, base, frequencies):
    """Qwen2-VL's vision encoder ("shared") and Pixtral ("alternating"); their
    positions are (N, 2)."""
    g = torch.Generator().manual_seed(head_dim)
    n, heads = 12, 3
    x = torch.randn(n, heads, head_dim, generator=g)  # Hugging Face's (N, H, d_h)
    hw = torch.randint(0, 40, (n, 2), generator=g)
    config = _config(head_dim, base, rope_type="axial")
    row, col = rope_2d_inv_freq(head_dim, base, frequencies=frequencies)
    ours = apply_rope_2d(
        x.transpose(0, 1)[None], hw.T, base=base, frequencies=frequencies
    )
    if frequencies == "shared":
        emb = qwen2_vl.Qwen2VLVisionRotaryEmbedding(config)
        torch.testing.assert_close(emb.inv_freq, row, atol=0, rtol=1e-6)
        emb.inv_freq = row  # posenc's correctly rounded frequencies: then bit for bit

        def hf():
            return qwen2_vl.apply_rotary_pos_emb_vision(x, x, *emb(x, hw))[0].transpose(
                0, 1
            )[None]
    else:
        emb = modeling_pixtral.PixtralVisionRotaryEmbedding(config)
        torch.testing.assert_close(
            emb.inv_freq, torch.cat((row, col)), atol=0, rtol=1e-6
        )
        emb.inv_freq = torch.cat((row, col))
        xb = x.transpose(0, 1)[None]

        def hf():
            return modeling_pixtral.apply_rotary_pos_emb(
                xb, xb, *emb(xb, hw), unsqueeze_dim=0
            )[0]

    torch.testing.assert_close(ours, hf(), atol=1e-6, rtol=1e-6)


def test_rope_2d_interleaved_with_flipped_ids_is_heo_et_al():
    """naver-ai/rope-vit's compute_axial_cis: complex pairs (2j, 2j+1), the first d/4
    turned by the column (x), the rest by the row (y), frequencies base^(−4j/d), base
    100."""
    d, rows, cols = 16, 3, 4
    theta = compute_inv_freq(d // 2, 100.0)
    t = torch.arange(rows * cols)
    x_pos, y_pos = (t % cols).float(), (t // cols).float()
    cis = torch.polar(
        torch.ones(rows * cols, d // 2),
        torch.cat((x_pos[:, None] * theta, y_pos[:, None] * theta), dim=-1),
    )
    x = torch.randn(1, 2, rows * cols, d, generator=torch.Generator().manual_seed(4))
    expected = torch.view_as_real(
        torch.view_as_complex(x.reshape(1, 2, -1, d // 2, 2)) * cis
    ).flatten(-2)
    row_col = torch.stack((y_pos, x_pos)).long()
    out = apply_rope_2d(x, row_col.flip(0), base=100.0, layout="interleaved")
    torch.testing.assert_close(out, expected, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_rope_2d_is_relative_in_both_axes(layout):
    g = torch.Generator().manual_seed(5)
    q, k = torch.randn(2, 1, 1, 10, 16, generator=g, dtype=torch.float64).unbind(0)
    ids = torch.randint(0, 30, (2, 10), generator=g)

    def scores(shift):
        moved = ids + torch.tensor(shift)[:, None]
        rot = dict(layout=layout, frequencies="alternating")
        return apply_rope_2d(q, moved, **rot) @ apply_rope_2d(
            k, moved, **rot
        ).transpose(-1, -2)

    for shift in [(4, 0), (0, 9), (-3, 7)]:
        torch.testing.assert_close(scores(shift), scores((0, 0)), atol=1e-4, rtol=1e-5)


def test_rope_2d_along_a_row_is_1d_rope_on_the_column_pairs():
    """Row id 0: the row pairs stay; the column pairs are 1-D RoPE of width d/2, base
    b."""
    d, base = 32, 10_000.0
    x = torch.randn(2, 3, 7, d, generator=torch.Generator().manual_seed(6))
    cols = torch.arange(3, 10)
    out = apply_rope_2d(x, torch.stack((torch.zeros_like(cols), cols)), base=base)
    row_feats = torch.cat((torch.arange(0, d // 4), torch.arange(d // 2, 3 * d // 4)))
    col_feats = torch.cat((torch.arange(d // 4, d // 2), torch.arange(3 * d // 4, d)))
    torch.testing.assert_close(out[..., row_feats], x[..., row_feats], atol=0, rtol=0)
    torch.testing.assert_close(
        out[..., col_feats], apply_rope(x[..., col_feats], cols, base=base)
    )


def test_rope_2d_checks():
    x, ids = torch.zeros(1, 1, 4, 16), torch.zeros(2, 4, dtype=torch.long)
    with pytest.raises(ValueError, match="multiple of 4"):
        apply_rope_2d(torch.zeros(1, 1, 4, 18), ids)
    with pytest.raises(ValueError, match=r"\(2, T\) or \(2, B, T\).*\(row, column\)"):
        apply_rope_2d(x, torch.zeros(3, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="frequencies must be one of"):
        apply_rope_2d(x, ids, frequencies="mixed")
    with pytest.raises(ValueError, match="layout must be one of"):
        apply_rope_2d(x, ids, layout="split")
    with pytest.raises(TypeError, match="floating"):
        apply_rope_2d(x.long(), ids)


# --------------------------------------------------------------------------------------
# SymPy: text reduces to 1-D RoPE; image scores are relative
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("sections", [(1, 1, 1), (2, 1, 2)])
def test_mrope_with_equal_ids_is_the_rope_matrix(sections):
    result = S.mrope_text_reduction(sections)
    size = 2 * sum(sections)
    assert (result.text - result.rope).applyfunc(sp.simplify) == sp.zeros(size, size)
    assert (
        set(result.symbols["ids"]) <= result.mrope.free_symbols
    )  # not trivially equal before


def test_mrope_text_reduction_general_pair():
    """Any pair i, any axis function a: p_{a(i)}·θ_i with every id m is m·θ_i."""
    result = S.mrope_text_reduction()
    assert result.pair_angle.has(result.symbols["a"](result.symbols["i"]))
    assert sp.simplify(result.pair_angle_text - result.rope_angle) == 0


def test_mrope_score_depends_only_on_id_differences():
    result = S.mrope_relative_score()
    assert sp.expand(sp.expand_trig(sp.expand(result.score - result.relative))) == 0
    assert sp.expand(sp.expand(result.shifted - result.score).rewrite(sp.exp)) == 0
    # written with the differences r = key id − query id: no absolute id is left
    ids = result.symbols
    pairs = list(zip(ids["query_ids"], ids["key_ids"], strict=True))
    differences = sp.symbols("r_t r_h r_w", integer=True)
    in_differences = result.relative.subs(
        {
            key_id: query_id + r
            for (query_id, key_id), r in zip(pairs, differences, strict=True)
        }
    )
    assert in_differences.free_symbols.isdisjoint(itertools.chain(*pairs))
    assert all(
        {query_id, key_id} <= result.score.free_symbols for query_id, key_id in pairs
    )


def test_symbolic_mrope_matrix_is_the_code():
    """The SymPy rotation, lambdified, equals apply_mrope: x @ Rᵀ for each token."""
    sections, d = (1, 2, 1), 8
    thetas = sp.symbols("theta_0:4", positive=True)
    fn = sp.lambdify(
        (*S.mrope_ids, *thetas), S.mrope_block_matrix(S.mrope_ids, thetas, sections)
    )
    inv_freq = compute_inv_freq(d, 1000.0).double().tolist()
    g = torch.Generator().manual_seed(7)
    x = torch.randn(1, 1, 5, d, generator=g, dtype=torch.float64)
    ids = torch.randint(0, 60, (3, 5), generator=g)
    out = apply_mrope(x, ids, sections, base=1000.0)
    for j, (t, h, w) in enumerate(itertools.zip_longest(*ids.tolist())):
        matrix = torch.tensor(fn(t, h, w, *inv_freq), dtype=torch.float64)
        torch.testing.assert_close(
            out[0, 0, j], matrix @ x[0, 0, j], atol=1e-5, rtol=1e-5
        )
