"""Attention with remapped RoPE positions: SelfExtend, ReRoPE (and leaky ReRoPE) and
Dual Chunk Attention (the positions and their sources: :mod:`posenc.remap`).

Each method scores a pair (i, j) in one of a few *cases* (neighbour/grouped, near/far,
intra/successive/inter chunk), each case with its own rotation of the query and key by
:func:`posenc.rope.apply_rope`. Two paths compute the same thing:

* ``*_attention_reference``: the naive reference, written out on purpose: one full
  (T_q, T_k) score matrix per case, the case of each pair picked with ``torch.where``,
  a causal softmax; returns the weights too. O(C·T²) memory for C cases.
* ``*_attention``: the fast path, exact and memory-bounded: the queries in blocks of
  at most :data:`BLOCK_ENTRIES` / T_k rows; in a block, each case's scores are
  computed only over the key columns some row of the block takes in that case (the
  neighbour band of W keys, the earlier keys for the groups, one chunk or the chunks
  before for DCA), written into the block's score rows, then one softmax and one
  product with v. Each pair is scored once in its one case, so the work is close to
  one causal attention's (plus the band), and the memory is O(BLOCK_ENTRIES) scores
  per (batch, head) whatever T. (A single SDPA call over the cases concatenated in the
  features — each query with its C rotations side by side, the keys repeated C times
  — is exact too, but its C-times-wider scores over C-times-more keys cost C² times
  the products and ran 20 times slower than a causal SDPA at T = 4096 on a CPU.)
* SelfExtend and ReRoPE, on a CPU, for a whole prefill (T_q = T_k, consecutive
  positions): two fused attentions of PyTorch's CPU flash kernel, which also returns
  each row's log-sum-exp: the neighbour band in query blocks, and the far pairs as one
  causal attention of queries W.. against keys ..T − W; merged by their log-sum-exps
  into the same softmax over both cases. Measured once (9 heads, d_h = 64, G = 8,
  W = 2048, one thread, a loaded machine): 4.1 s against the blocked path's 16.2 s
  at T = 8192; SmolLM2's 32K pass took 17 minutes where the blocked one was on course
  for about 2 hours. Elsewhere (decoding, a GPU, gaps in the positions, gradients)
  the blocked path runs.

Shapes: q (B, H, T_q, d_h), k and v (B, H_kv, T_k, d_h), T_q ≤ T_k. With fewer key
heads than query heads (grouped-query attention) each key head serves H / H_kv query
heads: k and v are repeated as transformers' ``repeat_kv`` repeats them (H a multiple
of H_kv, else a ValueError). ``positions`` are the keys' absolute positions, int64:
(T_k,) for every sequence alike (default 0..T_k−1), or (B, T_k), one row per sequence
as transformers' ``position_ids`` (a padded batch: each row is computed as if it ran
alone, with its own positions); the queries sit at the last T_q of them, as in a
decoding step with a KV cache. Queries and keys are passed *un-rotated*. An optional
``attention_mask`` (B, T_k), 0/1 or bool, 1 on real tokens (transformers'), drops each
row's pad keys in every case, and a pad query's row is zeros, as transformers' sdpa
path gives it (:mod:`.remapped_batch`): with ``padded_positions(mask)`` each row's
real tokens get exactly what the row alone without its pads gets.

KV caches: a query's remapped positions depend on i only and a key's on j only, so
every method decodes token by token; what it cannot use is the *ordinary* cache of
keys rotated once by j. SelfExtend needs keys at j and at ⌊j/G⌋, ReRoPE at j and
un-rotated, leaky ReRoPE at j and at j/k: two rotated copies or one un-rotated cache
(the authors' choice, rotating at every step). DCA rotates every key once, by j mod s:
a single rotated cache works, but not one filled by an ordinary RoPE model.
"""

from __future__ import annotations

import math

import torch

from ..frequencies import DEFAULT_BASE
from ..remap import (
    as_index_positions,
    dual_chunk_positions,
    rerope_positions,
    self_extend_positions,
)
from ..rope import apply_rope
from .remapped_batch import mask_scores, masked_weights, per_sequence


def _check_tensors(q, k, v):
    """q, k, v floating tensors (..., T, d_h) whose leading dimensions agree once
    grouped-query keys are repeated (:func:`repeat_kv_heads`); returns (q, k, v)."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, torch.Tensor) or not x.is_floating_point():
            raise TypeError(f"{name} must be a floating tensor, got {type(x).__name__}")
        if x.dim() < 2:
            raise ValueError(f"{name} must be (..., T, d_h), got {tuple(x.shape)}")
    if k.shape != v.shape[:-1] + k.shape[-1:] or q.shape[-1] != k.shape[-1]:
        raise ValueError(
            "k must be (..., T_k, d_h) like v and q (..., T_q, d_h); got q "
            f"{tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}"
        )
    k, v = repeat_kv_heads(q, k, v)
    if q.shape[:-2] != k.shape[:-2]:
        raise ValueError(
            "q and k must share their leading dimensions (B, H); got q "
            f"{tuple(q.shape)}, k {tuple(k.shape)}"
        )
    return q, k, v


def repeat_kv_heads(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Keys and values with H_kv < H heads (grouped-query attention) repeated to H,
    each key head serving the H / H_kv query heads of its group, as transformers'
    ``repeat_kv`` does (query head h reads key head ⌊h / (H / H_kv)⌋).

    Args:
        q: (B, H, T_q, d_h). k, v: (B, H_kv, T_k, d_h) (v may have its own width).

    Returns:
        ``(k, v)`` with H heads; unchanged when H_kv = H or the tensors are not 4-D.

    Raises:
        ValueError: H not a multiple of H_kv (the message gives both).

    Source: transformers 5.23, ``models/llama/modeling_llama.py``, ``repeat_kv``
    (Ainslie et al. 2023, "GQA", §2).
    """
    if q.dim() != 4 or k.dim() != 4 or q.shape[1] == k.shape[1]:
        return k, v
    heads, kv_heads = q.shape[1], k.shape[1]
    if heads % kv_heads:
        raise ValueError(
            f"q has H = {heads} heads and k, v have H_kv = {kv_heads}: grouped-query "
            "attention needs H to be a multiple of H_kv (each key head serves H / "
            "H_kv query heads). For a transformers model, H_kv is the config's "
            "num_key_value_heads: pass k and v as (B, num_key_value_heads, T, "
            "head_dim), the shape its k_proj and v_proj give"
        )
    groups = heads // kv_heads
    return k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)


def _check_qkv(q, k, v, positions):
    if q.shape[-2] > k.shape[-2]:
        raise ValueError(
            f"T_q = {q.shape[-2]} must be <= T_k = {k.shape[-2]} (queries are the last "
            "T_q of the keys' positions)"
        )
    key = as_index_positions(k.shape[-2] if positions is None else positions)
    if key.shape[0] != k.shape[-2]:
        raise ValueError(
            f"positions must have T_k = {k.shape[-2]} entries, got {key.shape[0]}"
        )
    key = key.to(q.device)
    return key[-q.shape[-2] :], key


def _per_sequence(run, q, k, v, positions, attention_mask=None, *, compact=True):
    """q, k, v checked (grouped-query keys repeated, :func:`repeat_kv_heads`), then
    ``run`` per sequence with its positions and padding mask
    (:func:`.remapped_batch.per_sequence`)."""
    q, k, v = _check_tensors(q, k, v)
    return per_sequence(run, q, k, v, positions, attention_mask, compact=compact)


def _rotate(x, positions, rope):
    if positions.is_floating_point():  # apply_rope forms float32 angles anyway
        positions = positions.float()
    return apply_rope(x, positions.to(x.device), **rope)


def _cases_reference(q, k, v, cases, scale, keep=None):
    """cases: [(q_rot, k_rot, allowed)], ``allowed(rows)`` the (rows, T_k) bool mask of
    the case's pairs, the masks disjoint. The full score matrix, one case at a time;
    ``keep`` (T_k,) the padding mask (pad keys −inf, pad queries' rows zero)."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = torch.full(
        (*q.shape[:-1], k.shape[-2]), float("-inf"), dtype=q.dtype, device=q.device
    )
    everything = slice(None)
    for q_rot, k_rot, allowed in cases:
        scores = torch.where(
            allowed(everything), q_rot @ k_rot.transpose(-2, -1) * scale, scores
        )
    weights = masked_weights(mask_scores(scores, keep).softmax(dim=-1), keep)
    return weights @ v, weights


#: Score entries (rows × keys) the fast path holds at once per (batch, head).
BLOCK_ENTRIES = 1 << 22


def _cases_blocked(q, k, v, cases, scale):
    """The fast path: query blocks of at most :data:`BLOCK_ENTRIES` / T_k rows; in each,
    a case's scores are computed only over the key columns where one of the block's
    rows takes that case (a band for the neighbours, the earlier keys for the groups),
    merged into the block's scores, one softmax (see the module docstring)."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    t_q, t_k = q.shape[-2], k.shape[-2]
    step = max(1, min(t_q, BLOCK_ENTRIES // max(t_k, 1)))
    out = q.new_empty(*q.shape[:-1], v.shape[-1])
    for start in range(0, t_q, step):
        rows = slice(start, min(start + step, t_q))
        scores = q.new_full((*q.shape[:-2], rows.stop - start, t_k), float("-inf"))
        end = 0
        for q_rot, k_rot, allowed in cases:
            mask = allowed(rows)  # (rows, T_k)
            columns = mask.any(0).nonzero()
            if columns.numel() == 0:
                continue
            lo, hi = int(columns[0]), int(columns[-1]) + 1
            part = q_rot[..., rows, :] @ k_rot[..., lo:hi, :].transpose(-2, -1)
            scores[..., lo:hi] = torch.where(
                mask[:, lo:hi], part * scale, scores[..., lo:hi]
            )
            end = max(end, hi)
        weights = scores[..., :end].softmax(dim=-1)
        out[..., rows, :] = weights @ v[..., :end, :]
    return out


#: PyTorch's fused CPU attention, which also returns each row's log-sum-exp of scores
#: (the kernel behind ``scaled_dot_product_attention`` on a CPU); None where absent.
_CPU_FLASH = getattr(
    torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None
)


def _two_band_flash_applies(q, k, positions, v=None) -> bool:
    """The fused path needs a CPU; q, k and v of one dtype and one (B, H, T, d_h) shape
    (a whole prefill, T_q = T_k); consecutive positions, so that a pair's distance is
    its index difference; and no gradient (:func:`_two_bands`)."""
    v = k if v is None else v
    if _CPU_FLASH is None or q.device.type != "cpu":
        return False
    if not q.dim() == k.dim() == v.dim() == 4 or not q.shape == k.shape == v.shape:
        return False
    floats = (torch.float32, torch.float64)
    if not q.dtype == k.dtype == v.dtype or q.dtype not in floats:
        return False
    if q.shape[-2] == 0:
        return False
    if positions is None:
        return True
    key = as_index_positions(positions)
    return bool(torch.equal(key - key[0], torch.arange(len(key), device=key.device)))


#: Query rows per block of the fused path's neighbour band (at least W).
FUSED_BAND_ROWS = 512


def _two_bands_fused(q, k, v, cases, window, scale):
    """A two-band method (neighbours at i − j < W, the rest at i − j ≥ W) as two fused
    attentions merged by their log-sum-exps: the band in query blocks, each against the
    W − 1 keys before it and its own, under an additive mask; the far pairs as one
    causal attention of queries W.. against keys ..T − W (query i sees key j ≤ i − W).
    The same softmax as one pass over both cases (each pair in exactly one), without
    ever holding a (T, T) score matrix."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    (q_near, k_near, _), (q_far, k_far, _) = cases
    t = q.shape[-2]
    out = q.new_empty(q.shape[:-1] + v.shape[-1:])
    lse = q.new_empty(q.shape[:-1])
    step = max(window, FUSED_BAND_ROWS)
    for start in range(0, t, step):
        stop = min(start + step, t)
        lo = max(0, start - window + 1)
        offset = torch.arange(start, stop)[:, None] - torch.arange(lo, stop)[None, :]
        mask = torch.zeros(offset.shape, dtype=q.dtype).masked_fill(
            (offset < 0) | (offset >= window), float("-inf")
        )
        o, m = _CPU_FLASH(
            q_near[..., start:stop, :], k_near[..., lo:stop, :], v[..., lo:stop, :],
            attn_mask=mask, scale=scale,
        )  # fmt: skip
        out[..., start:stop, :], lse[..., start:stop] = o, m
    if t > window:
        before = slice(0, t - window)
        far, far_lse = _CPU_FLASH(
            q_far[..., window:, :], k_far[..., before, :], v[..., before, :],
            is_causal=True, scale=scale,
        )  # fmt: skip
        near, near_lse = out[..., window:, :], lse[..., window:]
        top = torch.maximum(near_lse, far_lse)
        w_near, w_far = (near_lse - top).exp(), (far_lse - top).exp()
        out[..., window:, :] = (near * w_near[..., None] + far * w_far[..., None]) / (
            w_near + w_far
        )[..., None]
    return out


def _two_bands(q, k, v, positions, cases, window, scale):
    """The fused path where it applies and no gradient flows: its kernel's backward
    ignores the log-sum-exp output that the merge differentiates through, which would
    give wrong gradients silently. Otherwise the blocked path."""
    rotated = [x for q_rot, k_rot, _ in cases for x in (q_rot, k_rot)]
    grad = torch.is_grad_enabled() and any(x.requires_grad for x in (*rotated, v))
    if not grad and _two_band_flash_applies(q, k, positions, v):
        return _two_bands_fused(q, k, v, cases, window, scale)
    return _cases_blocked(q, k, v, cases, scale)


def _two_band_cases(q, k, pos, window, query, key, rope):
    def near(rows):
        offset = query[rows, None] - key[None, :]
        return (offset >= 0) & (offset < window)

    def far(rows):
        return query[rows, None] - key[None, :] >= window

    return [
        (_rotate(q, pos.near_query, rope), _rotate(k, pos.near_key, rope), near),
        (_rotate(q, pos.far_query, rope), _rotate(k, pos.far_key, rope), far),
    ]


def _self_extend_cases(q, k, v, positions, group_size, window_size, rope):
    query, key = _check_qkv(q, k, v, positions)
    pos = self_extend_positions(
        key, group_size=group_size, window_size=window_size, query_positions=query
    )
    return _two_band_cases(q, k, pos, window_size, query, key, rope)


def self_extend_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    positions: torch.Tensor | None = None,
    *,
    group_size: int,
    window_size: int,
    inv_freq: torch.Tensor | None = None,
    base: float = DEFAULT_BASE,
    layout: str = "half",
    scale: float | None = None,
    attention_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """SelfExtend attention (Jin et al., ICML 2024, §3, Alg. 1; github
    datamllab/LongLM ``self_extend_patch/Llama.py``, ``self_extend_forward``), causal.

    Neighbour attention (i − j < W) with the ordinary RoPE positions; grouped attention
    (i − j ≥ W) with the query at ⌊i/G⌋ + W − ⌊W/G⌋ and the key at ⌊j/G⌋
    (:func:`posenc.remap.self_extend_positions`); one softmax over both. Computed in
    query blocks, each case over its own key columns (module docstring).

    KV cache: the grouped key position ⌊j/G⌋ and the neighbour one j are fixed per key,
    but a key moves from the neighbour band to the grouped one as i grows, so each
    decoding step needs it at both rotations: a cache of keys rotated once by j does
    not suffice; two rotated copies, or un-rotated keys rotated at every step (the
    authors' code), do. tests/test_remap.py checks that decoding the last query alone
    against the full key set gives the full pass's last row.

    Args:
        q: (B, H, T_q, d_h) un-rotated queries. k, v: (B, H_kv, T_k, d_h), k
            un-rotated; H_kv < H (grouped-query attention) is repeated to H as
            transformers' ``repeat_kv`` does (:func:`repeat_kv_heads`).
        positions: keys' positions, int64: (T_k,), default 0..T_k−1, for every
            sequence alike; or (B, T_k), one row per sequence (transformers'
            ``position_ids``; a padded batch), each row computed as that sequence
            alone. The queries are at the last T_q of them.
        attention_mask: None, or (B, T_k) 0/1 or bool (any int or float dtype),
            1 on real tokens and 0 on pads, as transformers' ``attention_mask``
            (left or right padding; a KV cache's keys included). Pad keys get no
            weight; a pad query's output is zeros (transformers 5.23's sdpa path
            gives zeros for a left pad's fully masked row). Pair it with
            ``posenc.tools.padded_positions(attention_mask)`` to run each row as it
            runs alone without its pads. Each row's pad columns are dropped before
            it attends (:mod:`.remapped_batch`), so a left-padded prefill on
            consecutive positions keeps the fused CPU path, row by row.
        group_size: G ≥ 1. window_size: W ≥ 1.
        inv_freq, base, layout: RoPE's settings, as :func:`posenc.rope.apply_rope`.
        scale: score scale, default 1/√d_h.

    Returns:
        (B, H, T_q, d_h), q's dtype.

    Raises:
        TypeError, ValueError: non-float tensors, mismatched shapes, H not a multiple
            of H_kv, T_q > T_k, positions not (T_k,) or (B, T_k) non-negative
            integers, an attention_mask not a (B, T_k) 0/1 or bool tensor (the
            message names the first bad value and its index), or bad G, W
            (:func:`posenc.remap.check_self_extend`).
    """
    rope = dict(inv_freq=inv_freq, base=base, layout=layout)

    def run(q, k, v, positions):
        cases = _self_extend_cases(q, k, v, positions, group_size, window_size, rope)
        return _two_bands(q, k, v, positions, cases, window_size, scale)

    return _per_sequence(run, q, k, v, positions, attention_mask)


def self_extend_attention_reference(
    q, k, v, positions=None, *, group_size, window_size, inv_freq=None,
    base=DEFAULT_BASE, layout="half", scale=None, attention_mask=None,
) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """:func:`self_extend_attention` with the full neighbour and grouped score matrices
    merged by ``torch.where`` before the softmax, as the authors'
    ``self_extend_forward`` does. Takes and checks what :func:`self_extend_attention`
    does ((B, T_k) positions one row per sequence, grouped-query keys repeated, the
    ``attention_mask``); the mask is applied literally here: pad keys at −inf in the
    full matrices before the softmax, a pad query's row of weights zero.
    Returns ``(out, weights)``, weights (B, H, T_q, T_k)."""
    rope = dict(inv_freq=inv_freq, base=base, layout=layout)

    def run(q, k, v, positions, keep=None):
        cases = _self_extend_cases(q, k, v, positions, group_size, window_size, rope)
        return _cases_reference(q, k, v, cases, scale, keep)

    return _per_sequence(run, q, k, v, positions, attention_mask, compact=False)


def _rerope_cases(q, k, v, positions, window, scaling_factor, rope):
    query, key = _check_qkv(q, k, v, positions)
    pos = rerope_positions(
        key, window=window, scaling_factor=scaling_factor, query_positions=query
    )
    return _two_band_cases(q, k, pos, window, query, key, rope)


def rerope_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    positions: torch.Tensor | None = None,
    *,
    window: int,
    scaling_factor: float | None = None,
    inv_freq: torch.Tensor | None = None,
    base: float = DEFAULT_BASE,
    layout: str = "half",
    scale: float | None = None,
    attention_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """ReRoPE attention (Su 2023, kexue.fm/archives/9708; github bojone/rerope
    ``rerope_patch.py``), or leaky ReRoPE with ``scaling_factor`` k
    (``leaky_rerope_patch.py``), causal: distance i − j inside the window, W (or W +
    (i − j − W)/k) beyond (:func:`posenc.remap.rerope_positions`).

    Not included: bojone's patches also multiply every query by max(1, log(i + 1) /
    log(training_length)) (log-n attention temperature); that belongs to attention
    temperature, not to the remapping.

    KV cache: near scores need keys rotated by j, far ones un-rotated keys (ReRoPE) or
    keys at j/k (leaky): an ordinary cache of keys rotated by j does not suffice; two
    copies, or un-rotated keys (bojone's decoding path) do.

    Args: as :func:`self_extend_attention`, with ``window`` W ≥ 1 and
    ``scaling_factor`` k > 1 or None. Returns (B, H, T_q, d_h). Raises: as there, and
    :func:`posenc.remap.check_rerope`.
    """
    rope = dict(inv_freq=inv_freq, base=base, layout=layout)

    def run(q, k, v, positions):
        cases = _rerope_cases(q, k, v, positions, window, scaling_factor, rope)
        return _two_bands(q, k, v, positions, cases, window, scale)

    return _per_sequence(run, q, k, v, positions, attention_mask)


def rerope_attention_reference(
    q, k, v, positions=None, *, window, scaling_factor=None, inv_freq=None,
    base=DEFAULT_BASE, layout="half", scale=None, attention_mask=None,
) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """:func:`rerope_attention` with the two full score matrices merged by
    ``torch.where`` (bojone's ``rectified_mask``). Takes and checks what
    :func:`rerope_attention` does, the ``attention_mask`` applied as in
    :func:`self_extend_attention_reference`. Returns ``(out, weights)``."""
    rope = dict(inv_freq=inv_freq, base=base, layout=layout)

    def run(q, k, v, positions, keep=None):
        cases = _rerope_cases(q, k, v, positions, window, scaling_factor, rope)
        return _cases_reference(q, k, v, cases, scale, keep)

    return _per_sequence(run, q, k, v, positions, attention_mask, compact=False)


def _dual_chunk_cases(q, k, v, positions, settings, rope):
    query, key = _check_qkv(q, k, v, positions)
    pos = dual_chunk_positions(key, query_positions=query, **settings)
    s = settings["chunk_size"]
    k_rot = _rotate(k, pos.key, rope)

    def chunks_apart(test):
        def allowed(rows):
            causal = query[rows, None] >= key[None, :]
            return causal & test(query[rows, None] // s - key[None, :] // s)

        return allowed

    return [
        (_rotate(q, pos.intra_query, rope), k_rot, chunks_apart(lambda a: a == 0)),
        (_rotate(q, pos.successive_query, rope), k_rot, chunks_apart(lambda a: a == 1)),
        (_rotate(q, pos.inter_query, rope), k_rot, chunks_apart(lambda a: a > 1)),
    ]


def dual_chunk_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    positions: torch.Tensor | None = None,
    *,
    chunk_size: int,
    pretraining_length: int,
    local_window: int | None = None,
    inv_freq: torch.Tensor | None = None,
    base: float = DEFAULT_BASE,
    layout: str = "half",
    scale: float | None = None,
    attention_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Dual Chunk Attention (An et al., ICML 2024, §3, Eq. 8 and the normalisation of
    §3.4; github HKUNLP/ChunkLlama ``chunkllama_attn_replace.py``), causal: keys at j
    mod s, queries at their intra, successive or inter position by the chunk distance
    ⌊i/s⌋ − ⌊j/s⌋ = 0, 1 or > 1 (:func:`posenc.remap.dual_chunk_positions`), one
    softmax over all keys.

    KV cache: works with a cache of keys rotated once, by j mod s (ChunkLlama caches
    them so); a cache filled with ordinary RoPE keys (rotated by j) cannot be reused.

    Args: as :func:`self_extend_attention`, with ``chunk_size`` s,
    ``pretraining_length`` c and ``local_window`` w (default c − s). Returns (B, H,
    T_q, d_h). Raises: as there, and :func:`posenc.remap.check_dual_chunk`.
    """
    rope = dict(inv_freq=inv_freq, base=base, layout=layout)
    settings = dict(
        chunk_size=chunk_size,
        pretraining_length=pretraining_length,
        local_window=local_window,
    )

    def run(q, k, v, positions):
        cases = _dual_chunk_cases(q, k, v, positions, settings, rope)
        return _cases_blocked(q, k, v, cases, scale)

    return _per_sequence(run, q, k, v, positions, attention_mask)


def dual_chunk_attention_reference(
    q, k, v, positions=None, *, chunk_size, pretraining_length, local_window=None,
    inv_freq=None, base=DEFAULT_BASE, layout="half", scale=None, attention_mask=None,
) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """:func:`dual_chunk_attention` with the three full score matrices merged by
    ``torch.where`` before one softmax. Takes and checks what
    :func:`dual_chunk_attention` does, the ``attention_mask`` applied as in
    :func:`self_extend_attention_reference`. Returns ``(out, weights)``."""
    rope = dict(inv_freq=inv_freq, base=base, layout=layout)
    settings = dict(
        chunk_size=chunk_size,
        pretraining_length=pretraining_length,
        local_window=local_window,
    )

    def run(q, k, v, positions, keep=None):
        cases = _dual_chunk_cases(q, k, v, positions, settings, rope)
        return _cases_reference(q, k, v, cases, scale, keep)

    return _per_sequence(run, q, k, v, positions, attention_mask, compact=False)


def relative_rope_scores(
    q: torch.Tensor,
    k: torch.Tensor,
    distances: torch.Tensor,
    *,
    inv_freq: torch.Tensor | None = None,
    base: float = DEFAULT_BASE,
    layout: str = "half",
    scale: float | None = None,
) -> torch.Tensor:
    """The scores ⟨R_{d_ij} q_i, k_j⟩·scale for a given (T_q, T_k) distance matrix d
    (RoFormer Eq. 16: ⟨R_m q, R_n k⟩ = ⟨R_{m−n} q, k⟩), by rotating a copy of q per
    pair: O(T_q·T_k·d_h) memory, a check that a method's scores are those of its
    distances (:mod:`posenc.remap`), not a way to run it.

    Args:
        q: (..., T_q, d_h), e.g. (B, H, T_q, d_h). k: (..., T_k, d_h) with q's leading
            dimensions, or (B, H_kv, T_k, d_h) with fewer heads, repeated as
            transformers' ``repeat_kv`` (:func:`repeat_kv_heads`).
        distances: (T_q, T_k) for every sequence alike, or (B, T_q, T_k), one matrix
            per sequence (B = q.shape[0]; never broadcast over the heads); int or
            float.
        inv_freq, base, layout: as :func:`posenc.rope.apply_rope`. scale: default
            1/√d_h.

    Returns:
        (..., T_q, T_k) in q's dtype; RoPE's angles are float32 (apply_rope), so it
        matches a method's own scores to float32 accuracy of the angles.

    Raises:
        ValueError: distances neither (T_q, T_k) nor (B, T_q, T_k); q and k whose
            leading dimensions differ otherwise than by grouped-query heads, or H not
            a multiple of H_kv.
    """
    k, _ = repeat_kv_heads(q, k, k)
    shape = (q.shape[-2], k.shape[-2])
    batch, given = (q.shape[0] if q.dim() >= 3 else None), tuple(distances.shape)
    if given == shape:  # shared: (1, …, 1, T_q, T_k)
        distances = distances.reshape(*([1] * (q.dim() - 2)), *shape)
    elif distances.dim() == 3 and batch is not None and distances.shape[0] == batch:
        if tuple(distances.shape[1:]) != shape:
            distances = None
        else:  # one per sequence: (B, 1, …, T_q, T_k)
            distances = distances.reshape(batch, *([1] * (q.dim() - 3)), *shape)
    else:
        distances = None
    if distances is None or q.shape[:-2] != k.shape[:-2]:
        raise ValueError(
            f"distances must be (T_q, T_k) = {shape} or (B, T_q, T_k) with B = "
            f"q.shape[0] = {batch}, and q and k must share their leading dimensions; "
            f"got distances {given}, q "
            f"{tuple(q.shape)}, k {tuple(k.shape)}"
        )
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    pairs = q.unsqueeze(-2).expand(*q.shape[:-1], shape[1], q.shape[-1])
    if distances.is_floating_point():  # apply_rope forms float32 angles anyway
        distances = distances.float()
    rotated = apply_rope(
        pairs, distances.to(q.device), inv_freq=inv_freq, base=base, layout=layout
    )  # (..., T_q, T_k, d_h): q_i rotated by d_ij
    return (rotated * k.unsqueeze(-3)).sum(-1) * scale
