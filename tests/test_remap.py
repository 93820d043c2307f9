"""SelfExtend, ReRoPE (and leaky ReRoPE) and Dual Chunk Attention: distances against
hand-worked cases and against the authors' own index computations (transcribed here as
tiny loops from their repositories, each cited by file and function), the efficient
attention against the naive reference, the KV-cache claims, bad input, and the
symbolic proofs of posenc.symbolic.remap."""

import math

import pytest
import torch

from posenc.layers.attention import attention_reference
from posenc.layers.masks import padded_positions
from posenc.layers.remapped_attention import (
    dual_chunk_attention,
    dual_chunk_attention_reference,
    relative_rope_scores,
    rerope_attention,
    rerope_attention_reference,
    self_extend_attention,
    self_extend_attention_reference,
)
from posenc.remap import (
    dual_chunk_distances,
    dual_chunk_positions,
    rerope_distances,
    self_extend_distances,
    self_extend_max_distance,
    self_extend_max_length,
)
from posenc.rope import apply_rope
from posenc.symbolic.remap import dual_chunk_partition, rerope_bounds, self_extend_bound

# --------------------------------------------------------------------------------------
# Hand-worked cases
# --------------------------------------------------------------------------------------


def test_self_extend_hand_worked_row():
    # G = 2, W = 4, i = 9: grouped query 9//2 + 4 − 4//2 = 6; keys 0..5 are grouped at
    # ⌊j/2⌋ = 0,0,1,1,2,2; keys 6..9 are neighbours at 3,2,1,0.
    distance, grouped = self_extend_distances(10, group_size=2, window_size=4)
    assert distance[9].tolist() == [6, 6, 5, 5, 4, 4, 3, 2, 1, 0]
    assert grouped[9].tolist() == [True] * 6 + [False] * 4
    assert distance[3].tolist()[:4] == [3, 2, 1, 0]  # no grouped pair before i = W


def test_dual_chunk_paper_figure_2():
    # An et al. 2024, Fig. 2 / Eq. 7: c = 10, s = 6, w = 4 give P_q^Succ = [6, 7, 8, 9,
    # 9, 9] per chunk and P_q^Inter = 9.
    pos = dual_chunk_positions(18, chunk_size=6, pretraining_length=10, local_window=4)
    assert pos.successive_query[:6].tolist() == [6, 7, 8, 9, 9, 9]
    assert pos.inter_query.unique().tolist() == [9]
    assert pos.key[:12].tolist() == list(range(6)) * 2
    distance, case = dual_chunk_distances(
        18, chunk_size=6, pretraining_length=10, local_window=4
    )
    assert distance[11].tolist()[:12] == [9, 8, 7, 6, 5, 4, 5, 4, 3, 2, 1, 0]
    assert case[11].tolist()[:12] == [1] * 6 + [0] * 6
    assert distance[6].tolist()[:6] == [6, 5, 4, 3, 2, 1]  # inside w: the true i − j
    assert case[17].tolist()[:6] == [2] * 6  # two chunks apart: inter
    assert distance[17].tolist()[:6] == [9, 8, 7, 6, 5, 4]
    assert pos.intra_query.tolist() == pos.key.tolist()


def test_rerope_hand_worked_rows():
    distance, far = rerope_distances(6, window=3)
    assert distance[5].tolist() == [3, 3, 3, 2, 1, 0]
    assert far[5].tolist() == [True, True, True, False, False, False]
    leaky, _ = rerope_distances(8, window=3, scaling_factor=2)
    assert leaky[7].tolist() == [5.0, 4.5, 4.0, 3.5, 3.0, 2.0, 1.0, 0.0]


# --------------------------------------------------------------------------------------
# The authors' formulas, transcribed as independent index computations
# --------------------------------------------------------------------------------------


def longlm_prefill_distances(seq_len, group_size_1, group_size_2):
    """datamllab/LongLM, self_extend_patch/Llama.py, ``self_extend_forward``, branch
    ``q_len == kv_seq_len``: group query position ``query_position // group_size_1 +
    _re_group_size_2 - _re_group_size_2 / group_size_1`` (true division), group key
    ``key_position // group_size_1``, and the neighbour mask built as a lower triangle
    minus a lower triangle shifted by group_size_2."""
    pos = torch.arange(seq_len, dtype=torch.float64)
    re_g2 = 0 if pos.max() < group_size_2 else group_size_2
    group_q = torch.div(pos, group_size_1, rounding_mode="floor") + re_g2 - re_g2 / group_size_1
    group_k = torch.div(pos, group_size_1, rounding_mode="floor")
    neighbor = torch.tril(torch.ones(seq_len, seq_len))
    if seq_len - group_size_2 > 0:
        neighbor[group_size_2:, :-group_size_2] -= torch.tril(
            torch.ones(seq_len - group_size_2, seq_len - group_size_2)
        )
    near = pos[:, None] - pos[None, :]
    far = group_q[:, None] - group_k[None, :]
    return torch.where(neighbor.bool(), near, far), neighbor.bool()


def longlm_decode_row(kv_seq_len, group_size_1, group_size_2):
    """datamllab/LongLM, self_extend_patch/Llama.py, ``flash_self_extend_forward``,
    branch ``q_len == 1``: ``neighbor_key_position = position_ids[:, -1] -
    key_position``; ``group_key_position = position_ids[:, -1]//group_size_1 -
    key_position//group_size_1 + (_re_group_size_2 - _re_group_size_2//group_size_1)``;
    the last group_size_2 keys take the neighbour distance, the others the group one."""
    last = kv_seq_len - 1
    re_g2 = 0 if last < group_size_2 else group_size_2
    row = []
    for j in range(kv_seq_len):
        if j >= kv_seq_len - group_size_2:
            row.append(last - j)
        else:
            row.append(last // group_size_1 - j // group_size_1 + re_g2 - re_g2 // group_size_1)
    return row


@pytest.mark.parametrize("group, window", [(2, 4), (3, 6), (4, 4), (1, 3), (8, 16), (5, 5)])
@pytest.mark.parametrize("seq_len", [3, 17, 40])
def test_self_extend_matches_longlm_when_group_divides_window(group, window, seq_len):
    ours, grouped = self_extend_distances(seq_len, group_size=group, window_size=window)
    theirs, neighbor = longlm_prefill_distances(seq_len, group, window)
    causal = torch.ones(seq_len, seq_len).tril().bool()
    assert torch.equal(ours[causal].double(), theirs[causal])
    assert torch.equal(~grouped & causal, neighbor)
    assert ours[-1].tolist() == longlm_decode_row(seq_len, group, window)


@pytest.mark.parametrize("group, window", [(3, 4), (4, 6), (5, 12)])
def test_self_extend_where_group_does_not_divide_window(group, window):
    """LongLM's prefill shifts by W − W/G (a fractional position) where its decoding
    path and this package shift by W − ⌊W/G⌋: grouped distances here exceed theirs by
    the fraction W/G − ⌊W/G⌋; neighbour distances agree."""
    seq_len = 40
    ours, grouped = self_extend_distances(seq_len, group_size=group, window_size=window)
    theirs, _ = longlm_prefill_distances(seq_len, group, window)
    causal = torch.ones(seq_len, seq_len).tril().bool()
    gap = (ours.double() - theirs)[causal & grouped]
    fraction = window / group - window // group  # ours − theirs
    assert fraction != 0 and torch.allclose(gap, torch.full_like(gap, fraction))
    assert torch.equal(ours[causal & ~grouped].double(), theirs[causal & ~grouped])
    assert ours[-1].tolist() == longlm_decode_row(seq_len, group, window)


def bojone_rerope_distances(seq_len, window, scaling_factor=None):
    """bojone/rerope, ``forward_with_rerope`` (rerope_patch.py), q_len > 1: scores 1
    with RoPE at ``position_ids`` for query and key, scores 2 with the query at
    ``position_ids * 0 + window`` and the key un-rotated, picked by ``rectified_mask =
    (i - j).abs() < window``. ``forward_with_leaky_rerope`` (leaky_rerope_patch.py):
    scores 2 with LlamaLinearScalingRotaryEmbedding (positions / scaling_factor), the
    query at ``position_ids + offset``, ``offset = window * (scaling_factor - 1)``."""
    out = torch.zeros(seq_len, seq_len, dtype=torch.float64)
    for i in range(seq_len):
        for j in range(i + 1):
            if abs(i - j) < window:
                out[i, j] = i - j
            elif scaling_factor is None:
                out[i, j] = window - 0
            else:
                offset = window * (scaling_factor - 1)
                out[i, j] = (i + offset) / scaling_factor - j / scaling_factor
    return out


def bojone_decode_row(kv_seq_len, window, scaling_factor=None):
    """bojone/rerope decoding (q_len == 1): ``(position_ids[:, -1:] -
    position_ids).clip(max=window)``; leaky: the table ``cat(cos[:window],
    cos2[window + offset:])`` indexed by i − j, i.e. angle (d + offset)/k for d ≥ W."""
    last = kv_seq_len - 1
    row = []
    for j in range(kv_seq_len):
        d = last - j
        if scaling_factor is None:
            row.append(min(d, window))
        else:
            offset = window * (scaling_factor - 1)
            row.append(d if d < window else (d + offset) / scaling_factor)
    return row


@pytest.mark.parametrize("window, factor", [(3, None), (8, None), (3, 16), (5, 2), (4, 3)])
def test_rerope_matches_bojone(window, factor):
    seq_len = 30
    ours, _ = rerope_distances(seq_len, window=window, scaling_factor=factor)
    causal = torch.ones(seq_len, seq_len).tril().bool()
    theirs = bojone_rerope_distances(seq_len, window, factor)
    assert torch.allclose(ours[causal], theirs[causal], atol=1e-12, rtol=0)
    assert torch.allclose(
        ours[-1], torch.tensor(bojone_decode_row(seq_len, window, factor)).double()
    )


def chunkllama_distances(seq_len, chunk_size, local_window):
    """HKUNLP/ChunkLlama, chunkllama_attn_replace.py: ``ChunkLlamaRotaryEmbedding.
    _set_cos_sin_cache`` (``chunk_len = chunk_size - local_window``; ``q_t =
    arange(chunk_len)``; ``qc_t = (arange(chunk_len) + chunk_len).clamp(max=chunk_size)``;
    ``k_t = arange % chunk_len``) and ``forward``'s prefill loop: intra-chunk with q_t,
    successive with qc_t against the previous chunk, inter with ``qc_t[chunk_len - 1]``
    against keys ``[: begin - prev_len]``. Their ``chunk_size`` is a position bound,
    their ``chunk_len`` the chunk."""
    chunk_len = chunk_size - local_window
    q_t = list(range(chunk_len))
    qc_t = [min(t + chunk_len, chunk_size) for t in range(chunk_len)]
    out = torch.full((seq_len, seq_len), -1, dtype=torch.int64)
    for i in range(seq_len):
        begin = (i // chunk_len) * chunk_len
        for j in range(i + 1):
            k_t = j % chunk_len
            if j >= begin:
                out[i, j] = q_t[i % chunk_len] - k_t
            elif j >= begin - chunk_len:
                out[i, j] = qc_t[i % chunk_len] - k_t
            else:
                out[i, j] = qc_t[chunk_len - 1] - k_t
    return out


def chunkllama_decode_row(kv_seq_len, chunk_size, local_window):
    """chunkllama_attn_replace.py ``forward``, the ``has_kv_cache`` branch:
    ``chunk_num_curr = (kv_seq_len - 1) // chunk_len``, the query at ``position_ids %
    chunk_len`` (q_cos for the current chunk, qc_cos for the previous one) and at
    ``chunk_len - 1`` through qc_cos for older chunks."""
    chunk_len = chunk_size - local_window
    i = kv_seq_len - 1
    current = (kv_seq_len - 1) // chunk_len
    qc = [min(t + chunk_len, chunk_size) for t in range(chunk_len)]
    row = []
    for j in range(kv_seq_len):
        if j >= chunk_len * current:
            row.append(i % chunk_len - j % chunk_len)
        elif j >= chunk_len * (current - 1):
            row.append(qc[i % chunk_len] - j % chunk_len)
        else:
            row.append(qc[chunk_len - 1] - j % chunk_len)
    return row


@pytest.mark.parametrize("pretraining_length", [16, 32, 40])
@pytest.mark.parametrize("seq_len", [7, 61, 100])
def test_dual_chunk_matches_chunkllama_defaults(pretraining_length, seq_len):
    """``replace_with_chunkllama(pretraining_length)`` sets chunk_size = 3c/4 and
    local_window = c/8. In the paper's terms that is s = chunk_len, c' = chunk_size + 1
    (the largest query position is chunk_size, not c − 1) and w = local_window + 1 =
    c' − s; with 2s − 1 ≥ chunk_size the code's inter position is chunk_size = c' − 1."""
    code_chunk, code_window = pretraining_length * 3 // 4, pretraining_length // 8
    s = code_chunk - code_window
    assert 2 * s - 1 >= code_chunk
    ours, case = dual_chunk_distances(
        seq_len, chunk_size=s, pretraining_length=code_chunk + 1, local_window=code_window + 1
    )
    causal = case >= 0
    theirs = chunkllama_distances(seq_len, code_chunk, code_window)
    assert torch.equal(ours[causal], theirs[causal])
    assert ours[-1].tolist() == chunkllama_decode_row(seq_len, code_chunk, code_window)


def test_dual_chunk_chunkllama_differs_with_a_wide_local_window():
    """With local_window_size so wide that 2·chunk_len − 1 < chunk_size, ChunkLlama's
    inter-chunk query sits at qc_t[chunk_len − 1] = 2·chunk_len − 1, not at the
    paper's c − 1 (Eq. 5): the two differ exactly on the inter-chunk pairs."""
    code_chunk, code_window, seq_len = 24, 16, 50
    s = code_chunk - code_window
    ours, case = dual_chunk_distances(
        seq_len, chunk_size=s, pretraining_length=code_chunk + 1, local_window=code_window + 1
    )
    theirs = chunkllama_distances(seq_len, code_chunk, code_window)
    gap = ours - theirs
    assert torch.equal(gap[case == 0], torch.zeros_like(gap[case == 0]))
    assert torch.equal(gap[case == 1], torch.zeros_like(gap[case == 1]))
    inter = gap[case == 2]
    assert inter.numel() and bool((inter == code_chunk - (2 * s - 1)).all())


# --------------------------------------------------------------------------------------
# Attention: efficient path = reference; scores = the distances' RoPE scores; caches
# --------------------------------------------------------------------------------------

METHODS = {
    "self_extend": (self_extend_attention, self_extend_attention_reference, self_extend_distances, dict(group_size=3, window_size=6)),
    "self_extend_g4": (self_extend_attention, self_extend_attention_reference, self_extend_distances, dict(group_size=4, window_size=5)),
    "rerope": (rerope_attention, rerope_attention_reference, rerope_distances, dict(window=5)),
    "leaky_rerope": (rerope_attention, rerope_attention_reference, rerope_distances, dict(window=5, scaling_factor=4.0)),
    "dca": (dual_chunk_attention, dual_chunk_attention_reference, dual_chunk_distances, dict(chunk_size=6, pretraining_length=10, local_window=3)),
    "dca_default_w": (dual_chunk_attention, dual_chunk_attention_reference, dual_chunk_distances, dict(chunk_size=7, pretraining_length=12)),
}


def qkv(device, seq_len=29, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(2, 3, seq_len, 8, generator=g, dtype=dtype).to(device) for _ in range(3)]


@pytest.mark.parametrize("name", METHODS)
def test_efficient_path_equals_reference(name, device):
    fast, reference, _, kw = METHODS[name]
    q, k, v = qkv(device)
    out = fast(q, k, v, **kw)
    ref, weights = reference(q, k, v, **kw)
    assert out.shape == q.shape and out.device.type == device.type
    assert (out - ref).abs().max().item() < 1e-10
    assert torch.allclose(weights.sum(-1), torch.ones_like(weights[..., 0]))
    assert bool((weights.triu(1) == 0).all())  # causal


@pytest.mark.parametrize("name", METHODS)
def test_scores_are_those_of_the_distances(name):
    """The reference's weights equal a softmax over ⟨R_{d_ij} q_i, k_j⟩ with d from
    posenc.remap (RoPE's float32 angles bound the agreement)."""
    _, reference, distances, kw = METHODS[name]
    q, k, v = qkv("cpu")
    _, weights = reference(q, k, v, **kw)
    d = distances(q.shape[-2], **kw)[0]
    scores = relative_rope_scores(q, k, d).masked_fill(d < 0, float("-inf"))
    assert (scores.softmax(-1) - weights).abs().max().item() < 1e-5
    shifted = relative_rope_scores(q, k, torch.where(d > 0, d + 1, d))
    shifted = shifted.masked_fill(d < 0, float("-inf")).softmax(-1)
    assert (shifted - weights).abs().max().item() > 1e-3  # one position off is seen


@pytest.mark.parametrize("name", METHODS)
def test_decoding_one_query_matches_the_full_pass(name):
    """Each query's remapped positions depend on i only and each key's on j only: the
    last query against all (un-rotated) keys gives the full pass's last row, so every
    method decodes with a cache; which cache each needs is in the docstrings."""
    fast, _, _, kw = METHODS[name]
    q, k, v = qkv("cpu")
    full = fast(q, k, v, **kw)
    for t in (1, 4):
        step = fast(q[..., -t:, :], k, v, **kw)
        assert (step - full[..., -t:, :]).abs().max().item() < 1e-12


def test_self_extend_needs_more_than_keys_rotated_by_j():
    """A cache holding only keys rotated by j cannot serve grouped attention: with
    the grouped keys taken from it (rotated by j, not ⌊j/G⌋) the output changes."""
    q, k, v = qkv("cpu")
    kw = dict(group_size=3, window_size=6)
    positions = torch.arange(q.shape[-2])
    right = self_extend_attention(q, k, v, **kw)
    q_near = apply_rope(q, positions)
    k_cached = apply_rope(k, positions)
    scores_near = q_near @ k_cached.transpose(-2, -1) / math.sqrt(q.shape[-1])
    q_far = apply_rope(q, positions // 3 + 6 - 6 // 3)
    scores_far = q_far @ k_cached.transpose(-2, -1) / math.sqrt(q.shape[-1])
    distance, grouped = self_extend_distances(q.shape[-2], **kw)
    scores = torch.where(grouped, scores_far, scores_near).masked_fill(distance < 0, -math.inf)
    wrong = scores.softmax(-1) @ v
    assert (wrong - right).abs().max().item() > 1e-2


def test_dca_keys_are_rotated_once_by_their_chunk_position():
    """DCA's key positions j mod s do not depend on the queries: one rotated cache."""
    kw = dict(chunk_size=5, pretraining_length=8)
    a = dual_chunk_positions(23, query_positions=torch.arange(23), **kw).key
    b = dual_chunk_positions(23, query_positions=torch.tensor([22]), **kw).key
    assert torch.equal(a, b) and torch.equal(a, torch.arange(23) % 5)


@pytest.mark.parametrize(
    "name, kw",
    [
        ("self_extend", dict(group_size=4, window_size=29)),
        ("rerope", dict(window=29)),
        ("leaky_rerope", dict(window=29, scaling_factor=2.0)),
        ("dca", dict(chunk_size=29, pretraining_length=40)),
    ],
)
def test_short_inputs_are_ordinary_rope_attention(name, kw):
    """With T within the window (or one chunk) nothing is remapped: the result is
    ordinary causal RoPE attention (posenc.layers.attention.attention_reference)."""
    fast = METHODS[name][0]
    q, k, v = qkv("cpu")
    positions = torch.arange(q.shape[-2])
    plain, _ = attention_reference(apply_rope(q, positions), apply_rope(k, positions), v)
    # attention_reference's softmax runs in float32, hence the tolerance
    assert (fast(q, k, v, **kw) - plain).abs().max().item() < 1e-5


def test_float32_path_close_to_float64_reference():
    q, k, v = qkv("cpu")
    kw = dict(group_size=3, window_size=6)
    ref, _ = self_extend_attention_reference(q, k, v, **kw)
    out = self_extend_attention(q.float(), k.float(), v.float(), **kw)
    assert out.dtype == torch.float32 and (out.double() - ref).abs().max().item() < 1e-4


# --------------------------------------------------------------------------------------
# Bad input
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "call, error, words",
    [
        (lambda: self_extend_distances(8, group_size=0, window_size=4), ValueError, "group_size"),
        (lambda: self_extend_distances(8, group_size=2, window_size=0), ValueError, "window_size"),
        (lambda: self_extend_distances(8, group_size=2.0, window_size=4), TypeError, "group_size"),
        (lambda: self_extend_distances(torch.arange(8.0), group_size=2, window_size=4), TypeError, "integer"),
        (lambda: self_extend_distances(torch.tensor([-1, 0]), group_size=2, window_size=4), ValueError, ">= 0"),
        (lambda: self_extend_distances(torch.zeros(2, 3, dtype=torch.int64), group_size=2, window_size=4), ValueError, "1-D"),
        (lambda: self_extend_max_length(8, group_size=2, window_size=8), ValueError, "trained_length"),
        (lambda: rerope_distances(8, window=0), ValueError, "window"),
        (lambda: rerope_distances(8, window=3, scaling_factor=1.0), ValueError, "> 1"),
        (lambda: rerope_distances(8, window=3, scaling_factor=True), TypeError, "scaling_factor"),
        (lambda: dual_chunk_distances(8, chunk_size=10, pretraining_length=10), ValueError, "chunk_size"),
        (lambda: dual_chunk_distances(8, chunk_size=6, pretraining_length=10, local_window=5), ValueError, "c − s"),
        (lambda: dual_chunk_distances(8, chunk_size=0, pretraining_length=10), ValueError, "chunk_size"),
    ],
)
def test_bad_parameters_raise_naming_the_rule(call, error, words):
    with pytest.raises(error, match=words):
        call()


def test_bad_attention_input_raises():
    q, k, v = qkv("cpu")
    kw = dict(group_size=2, window_size=4)
    with pytest.raises(ValueError, match="T_q"):
        self_extend_attention(torch.cat([q, q], dim=-2), k, v, **kw)
    with pytest.raises(ValueError, match="positions"):
        self_extend_attention(q, k, v, torch.arange(5), **kw)
    with pytest.raises(TypeError, match="floating"):
        rerope_attention(q.long(), k, v, window=3)
    with pytest.raises(ValueError, match="d_h"):
        dual_chunk_attention(q, k[..., :4], v, chunk_size=4, pretraining_length=8)
    with pytest.raises(ValueError, match="distances"):
        relative_rope_scores(q, k, torch.zeros(3, 3))
    with pytest.raises(ValueError, match=r"\(T_k,\) or \(B, T_k\).*got \(3, 29\)"):
        self_extend_attention(q, k, v, torch.zeros(3, 29, dtype=torch.long), **kw)
    with pytest.raises(ValueError, match="H = 3 heads and k, v have H_kv = 2.*multiple"):
        rerope_attention(q, k[:, :2], v[:, :2], window=3)
    with pytest.raises(ValueError, match="multiple of H_kv.*num_key_value_heads"):
        relative_rope_scores(q, k[:, :2], torch.zeros(29, 29))


@pytest.mark.parametrize("name", METHODS)
def test_grouped_query_keys_are_repeated_as_transformers_repeat_kv(name):
    """k, v with H_kv = H / 3 heads: the result of repeating them with transformers'
    own repeat_kv first (query head h reads key head ⌊h / 3⌋)."""
    from transformers.models.llama.modeling_llama import repeat_kv

    fast, reference, _, kw = METHODS[name]
    g = torch.Generator().manual_seed(6)
    q = torch.randn(2, 6, 21, 8, generator=g, dtype=torch.float64)
    k, v = (torch.randn(2, 2, 21, 8, generator=g, dtype=torch.float64) for _ in range(2))
    expected = fast(q, repeat_kv(k, 3), repeat_kv(v, 3), **kw)
    assert (fast(q, k, v, **kw) - expected).abs().max().item() < 1e-12
    ref, weights = reference(q, k, v, **kw)
    assert (ref - expected).abs().max().item() < 1e-10 and weights.shape[1] == 6
    tiled = fast(q, k.repeat(1, 3, 1, 1), v.repeat(1, 3, 1, 1), **kw)  # the other order
    assert (tiled - expected).abs().max().item() > 1e-3


def test_relative_rope_scores_take_one_distance_matrix_per_sequence():
    """(B, T_q, T_k) distances: row b's scores are those of its own matrix, for B = H
    too (a (B, T_q, T_k) matched against the heads would mix the sequences)."""
    g = torch.Generator().manual_seed(7)
    q, k = (torch.randn(2, 2, 5, 8, generator=g, dtype=torch.float64) for _ in range(2))
    d = torch.randint(0, 9, (2, 5, 5), generator=g)
    got = relative_rope_scores(q, k, d)
    for b in range(2):
        alone = relative_rope_scores(q[b : b + 1], k[b : b + 1], d[b])
        assert (got[b : b + 1] - alone).abs().max().item() < 1e-12
    assert (got[:1] - relative_rope_scores(q[:1], k[:1], d[1])).abs().max().item() > 1e-3


# --------------------------------------------------------------------------------------
# A padded batch: the attention_mask drops each row's pads
# --------------------------------------------------------------------------------------

PADS = (0, 6, 15)  # left pads per row of a (3, 21) batch: 21, 15 and 6 real tokens


def padded_batch(pads=PADS, width=21, left=True, seed=8):
    """q (B, 4, T, 8) with grouped-query k, v (B, 2, T, 8), float64; the mask (B, T),
    1 on real tokens; positions from padded_positions(mask), as a server's."""
    g = torch.Generator().manual_seed(seed)
    batch = len(pads)
    q = torch.randn(batch, 4, width, 8, generator=g, dtype=torch.float64)
    k, v = (torch.randn(batch, 2, width, 8, generator=g, dtype=torch.float64) for _ in range(2))
    mask = torch.ones(batch, width, dtype=torch.long)
    for b, pad in enumerate(pads):
        if pad:
            mask[b, :pad] = 0 if left else 1
            if not left:
                mask[b, width - pad :] = 0
    return q, k, v, mask, padded_positions(mask)


def alone_without_pads(fn, q, k, v, mask, b, **kw):
    """Row b run alone on its real tokens, with the default positions 0..n−1."""
    real = mask[b].bool()
    return fn(q[b : b + 1, :, real], k[b : b + 1, :, real], v[b : b + 1, :, real], **kw)


@pytest.mark.parametrize("left", [True, False], ids=["left", "right"])
@pytest.mark.parametrize("name", METHODS)
def test_a_padded_batch_with_its_mask_gives_each_row_alone_without_its_pads(name, left):
    """For the fast path and the reference, with grouped-query keys: each row's real
    tokens get exactly (float64, 1e-12) the output of that row alone without its pads;
    the pads' rows are zeros; the reference gives the pads no weight. Without the mask
    the pads are attended as keys at position 0, and the rows differ."""
    fast, reference, _, kw = METHODS[name]
    q, k, v, mask, positions = padded_batch(left=left)
    out = fast(q, k, v, positions, attention_mask=mask, **kw)
    ref, weights = reference(q, k, v, positions, attention_mask=mask, **kw)
    for b in range(len(PADS)):
        real = mask[b].bool()
        alone = alone_without_pads(fast, q, k, v, mask, b, **kw)
        alone_ref, alone_weights = alone_without_pads(reference, q, k, v, mask, b, **kw)
        torch.testing.assert_close(out[b : b + 1, :, real], alone, rtol=0, atol=1e-12)
        torch.testing.assert_close(ref[b : b + 1, :, real], alone_ref, rtol=0, atol=1e-12)
        torch.testing.assert_close(ref[b : b + 1, :, real], alone, rtol=0, atol=1e-12)
        kept = weights[b : b + 1][:, :, real][..., real]
        torch.testing.assert_close(kept, alone_weights, rtol=0, atol=1e-12)
        assert bool((out[b][:, ~real] == 0).all()) and bool((ref[b][:, ~real] == 0).all())
        assert bool((weights[b][..., ~real] == 0).all())  # no weight on a pad key
        assert bool((weights[b][:, ~real] == 0).all())  # nor from a pad query
    unmasked = fast(q, k, v, positions, **kw)
    real = mask[1].bool()
    alone = alone_without_pads(fast, q, k, v, mask, 1, **kw)
    assert (unmasked[1:2, :, real] - alone).abs().max().item() > 1e-3


@pytest.mark.parametrize("name", METHODS)
def test_decoding_a_padded_batch_with_its_mask_gives_the_full_pass(name):
    """The last T_q queries of a left-padded batch against every key, the mask covering
    the keys (a KV cache's too): the full pass's last rows, each row's as alone."""
    fast, reference, _, kw = METHODS[name]
    q, k, v, mask, positions = padded_batch()
    full = fast(q, k, v, positions, attention_mask=mask, **kw)
    for t in (1, 4):
        step = fast(q[..., -t:, :], k, v, positions, attention_mask=mask, **kw)
        torch.testing.assert_close(step, full[..., -t:, :], rtol=0, atol=1e-12)
        ref, _ = reference(q[..., -t:, :], k, v, positions, attention_mask=mask, **kw)
        torch.testing.assert_close(ref, full[..., -t:, :], rtol=0, atol=1e-12)


def test_the_two_band_methods_keep_the_fused_path_under_a_mask(monkeypatch):
    """Each row's pads are dropped before it attends, so a left-padded prefill on
    padded_positions is a whole prefill on consecutive positions: one fused call per
    row, and no O(T²) tensor (the fused path never holds one)."""
    import posenc.layers.remapped_attention as ra

    calls = []
    fused = ra._two_bands_fused
    monkeypatch.setattr(ra, "_two_bands_fused", lambda *a: calls.append(a[0].shape) or fused(*a))
    q, k, v, mask, positions = padded_batch()
    for fn, kw in ((self_extend_attention, dict(group_size=3, window_size=6)), (rerope_attention, dict(window=5))):
        calls.clear()
        fn(q, k, v, positions, attention_mask=mask, **kw)
        assert [shape[-2] for shape in calls] == [21 - pad for pad in PADS]


def test_the_mask_matches_transformers_sdpa_on_a_left_padded_batch():
    """With windows covering the whole row, each method is ordinary RoPE attention; on a
    left-padded batch it then equals transformers 5.23's sdpa attention under the
    causal mask transformers builds from the same attention_mask (create_causal_mask),
    the pads' rows included (zeros there: every key of a left pad's row is masked)."""
    transformers = pytest.importorskip("transformers")
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.masking_utils import create_causal_mask

    q, k, v, mask, positions = padded_batch()
    config = transformers.LlamaConfig(hidden_size=32, num_attention_heads=4, num_key_value_heads=2)
    config._attn_implementation = "sdpa"
    causal = create_causal_mask(
        config=config, inputs_embeds=torch.zeros(3, 21, 32, dtype=torch.float64),
        attention_mask=mask, past_key_values=None, position_ids=positions,
    )
    module = torch.nn.Module()
    module.num_key_value_groups, module.is_causal, module.config = 2, True, config
    rotated = [apply_rope(x, positions[:, None]) for x in (q, k)]
    expected, _ = sdpa_attention_forward(module, *rotated, v, causal, scaling=8**-0.5)
    expected = expected.transpose(1, 2)  # transformers returns (B, T, H, d_h)
    assert bool((expected[1, :, :6] == 0).all())  # a left pad's row: zeros
    for fn, kw in (
        (self_extend_attention, dict(group_size=4, window_size=21)),
        (rerope_attention, dict(window=21)),
        (dual_chunk_attention, dict(chunk_size=21, pretraining_length=30)),
    ):
        got = fn(q, k, v, positions, attention_mask=mask, **kw)
        torch.testing.assert_close(got, expected, rtol=0, atol=1e-12)


def test_a_mask_of_ones_is_no_mask_and_gradients_are_the_reference_ones():
    q, k, v, mask, positions = padded_batch()
    kw = dict(group_size=3, window_size=6)
    ones = torch.ones_like(mask, dtype=torch.bool)
    assert torch.equal(self_extend_attention(q, k, v, attention_mask=ones, **kw), self_extend_attention(q, k, v, **kw))
    grads = []
    for fn in (self_extend_attention, lambda *a, **o: self_extend_attention_reference(*a, **o)[0]):
        qkv = [x.clone().requires_grad_() for x in (q, k, v)]
        (fn(*qkv, positions, attention_mask=mask, **kw) * q).sum().backward()
        grads.append(torch.cat([x.grad.flatten() for x in qkv]))
    assert bool(torch.isfinite(grads[0]).all())
    torch.testing.assert_close(grads[0], grads[1], rtol=0, atol=1e-10)


@pytest.mark.parametrize(
    "mask, error, words",
    [
        ([[1, 1]], TypeError, "attention_mask must be a tensor"),
        (torch.full((3, 21), 2), ValueError, r"0/1 or bool mask.*got 2 at index \(0, 0\)"),
        (torch.ones(3, 20), ValueError, r"\(B, T_k\) = \(3, 21\).*got mask \(3, 20\)"),
        (torch.ones(21), ValueError, r"\(B, T_k\) = \(3, 21\).*got mask \(21,\)"),
        (torch.ones(3, 21, dtype=torch.complex64), ValueError, "complex"),
    ],
)
def test_a_bad_mask_is_refused_naming_the_value_and_the_rule(mask, error, words):
    q, k, v, _, positions = padded_batch()
    for fn in (self_extend_attention, self_extend_attention_reference):
        with pytest.raises(error, match=words):
            fn(q, k, v, positions, attention_mask=mask, group_size=2, window_size=4)


# --------------------------------------------------------------------------------------
# The symbolic proofs, and their statements on every small instance
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("proof", [self_extend_bound, dual_chunk_partition, rerope_bounds])
def test_symbolic_proofs_hold(proof):
    result = proof()
    assert result.claims and all(v == True for v in result.claims.values()), {  # noqa: E712
        k: v for k, v in result.claims.items() if v != True  # noqa: E712
    }


def test_self_extend_bound_on_every_small_instance():
    """The largest distance is D(T) and the longest input with every distance ≤ L − 1
    is G(L − W + ⌊W/G⌋) — the paper's G(L − W) + W exactly when G divides W."""
    proof = self_extend_bound()
    sym = proof.symbols
    for group in range(1, 5):
        for window in range(1, 9):
            for length in range(window + 1, window + 7):
                longest = 0
                for seq_len in range(1, group * length + window + 2):
                    d, _ = self_extend_distances(seq_len, group_size=group, window_size=window)
                    top = int(d.max())
                    assert top == self_extend_max_distance(seq_len, group_size=group, window_size=window)
                    if seq_len > window:
                        formula = proof.formulas["largest distance"].subs({sym["G"]: group, sym["W"]: window, sym["T"]: seq_len})
                        assert top == int(formula)
                    if top <= length - 1:
                        longest = seq_len
                bound = self_extend_max_length(length, group_size=group, window_size=window)
                assert longest == bound
                paper = group * (length - window) + window
                assert (bound == paper) == (window % group == 0)
                assert paper - bound == window % group


def test_dual_chunk_partition_on_every_small_instance():
    """Exhaustive over T ≤ 40, s ≤ 8, c ≤ s + 6, every w: each causal pair meets exactly
    one of the paper's conditions (Eq. 8), the case returned is that one, every
    distance is in 0..c − 1, and intra and local successive distances are i − j."""
    for s in range(1, 9):
        for c in range(s + 1, s + 7):
            for w in range(0, c - s + 1):
                d, case = dual_chunk_distances(40, chunk_size=s, pretraining_length=c, local_window=w)
                i = torch.arange(40)[:, None]
                j = torch.arange(40)[None, :]
                apart = i // s - j // s
                causal = j <= i
                conditions = torch.stack([apart == 0, apart == 1, apart > 1])
                assert bool((conditions.sum(0)[causal] == 1).all())
                assert torch.equal(conditions.int().argmax(0)[causal], case[causal])
                assert bool((case[~causal] == -1).all())
                assert 0 <= int(d[causal].min()) and int(d[causal].max()) <= c - 1
                exact = (case == 0) | ((case == 1) & (i % s < w))
                assert torch.equal(d[exact & causal], (i - j).expand(40, 40)[exact & causal])


def test_rerope_statements_on_instances():
    for window in range(1, 6):
        d, _ = rerope_distances(30, window=window)
        assert float(d.max()) == min(29, window)
        leaky, _ = rerope_distances(30, window=window, scaling_factor=3.0)
        row = leaky[-1].flip(0)  # distances 0..29 in order
        assert bool((row[1:] > row[:-1]).all())
    proof = rerope_bounds()
    sym = proof.symbols
    longest = proof.formulas["leaky max length"].subs({sym["W"]: 4, sym["k"]: 3, sym["L"]: 10})
    d, _ = rerope_distances(int(longest), window=4, scaling_factor=3.0)
    assert float(d.max()) <= 9 + 1e-12
    d, _ = rerope_distances(int(longest) + 1, window=4, scaling_factor=3.0)
    assert float(d.max()) > 9
