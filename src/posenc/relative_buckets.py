"""Bucketed relative positions: T5's buckets and DeBERTa's log buckets, and the two
schemes built on them (Shaw et al. and Transformer-XL are in :mod:`posenc.relative`).

Both map the distance between a query and a key to one of a few buckets — exact for
short distances, logarithmically coarser for long ones — and learn one bias (T5) or
one relative embedding (DeBERTa) per bucket; they act on the attention *scores*
(plug-in point 3). Conventions as :mod:`posenc.relative`: T5 takes ``key − query =
n − m``, DeBERTa δ(i, j) = query − key; each function says which it takes.

Shapes: B batch, H heads, T_q / T_k query and key lengths, d_h the head width.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ._checks import check_int
from .relative import (
    _distance_lookup,
    _expand_index,
    _integer_flex_positions,
    _needs_qk,
    _pairwise,
)
from .schemes import (
    PositionalScheme,
    flex_pair,
    register_scheme,
    sequence_positions,
)


# --------------------------------------------------------------------------------------
# T5 (Raffel et al. 2020)
# --------------------------------------------------------------------------------------


def _check_t5(bidirectional: bool, num_buckets: int, max_distance: int) -> int:
    num_buckets = check_int("num_buckets", num_buckets, minimum=2)
    max_distance = check_int("max_distance", max_distance, minimum=1)
    per_direction = num_buckets // 2 if bidirectional else num_buckets
    if bidirectional and num_buckets < 4:
        raise ValueError(
            "num_buckets must be >= 4 when bidirectional (two directions × exact and "
            f"log ranges), got {num_buckets}"
        )
    max_exact = per_direction // 2
    if max_distance <= max_exact:
        raise ValueError(
            f"max_distance must be larger than the exact range max_exact={max_exact} "
            f"(num_buckets={num_buckets}, bidirectional={bidirectional}), got "
            f"{max_distance}"
        )
    return max_exact


def t5_relative_position_bucket(
    relative_position: torch.Tensor,
    bidirectional: bool = True,
    num_buckets: int = 32,
    max_distance: int = 128,
) -> torch.Tensor:
    """T5's bucket of each relative position (Raffel et al. 2020, §2.1; Mesh
    TensorFlow).

    With ``relative_position = key − query``: distances below ``max_exact`` (half the
    buckets of a direction) get a bucket each; larger ones share logarithmically wider
    buckets up to ``max_distance``; everything beyond falls in the last bucket.
    Bidirectional: half of the buckets for keys after the query (``relative_position >
    0``). Causal (``bidirectional=False``): keys after the query all map to bucket 0,
    like distance 0.

    Args:
        relative_position: integer tensor (...), key position − query position.
        bidirectional: encoder-style (True) or decoder-style (False) buckets.
        num_buckets: total number of buckets (≥ 2; ≥ 4 if bidirectional).
        max_distance: distance from which all positions share the last bucket (>
            max_exact).

    Returns:
        int64 tensor (...) in ``0 … num_buckets − 1``.

    Raises:
        ValueError: num_buckets too small, or max_distance not larger than the exact
            range.
        TypeError: float relative positions.
    """
    max_exact = _check_t5(bidirectional, num_buckets, max_distance)
    if relative_position.is_floating_point():
        raise TypeError(
            "relative_position must be an integer tensor, got "
            f"{relative_position.dtype}"
        )
    relative_position = relative_position.long()
    buckets = torch.zeros_like(relative_position)
    if bidirectional:
        num_buckets //= 2
        buckets = buckets + (relative_position > 0).long() * num_buckets
        distance = relative_position.abs()
    else:
        distance = (-relative_position).clamp(min=0)
    is_small = distance < max_exact
    # log-spaced buckets: the same float32 operations, in the same order, as Mesh
    # TensorFlow / HF
    large = (
        max_exact
        + (
            torch.log(distance.float() / max_exact)
            / math.log(max_distance / max_exact)
            * (num_buckets - max_exact)
        ).long()
    )
    large = large.clamp(max=num_buckets - 1)
    return buckets + torch.where(is_small, distance, large)


@register_scheme
class T5Scheme(PositionalScheme):
    """``"t5"``: a learned scalar bias per head and relative-position bucket, added to
    the scores (Raffel et al. 2020, §2.1). One table shared by all layers, as in T5.

    Args:
        d_model, num_heads: model sizes.
        num_buckets, max_distance: see :func:`t5_relative_position_bucket` (T5: 32 and
        128).
        bidirectional: False for decoders such as the book's LM.

    :meth:`score_mod` adds the same bias inside FlexAttention from the (num_buckets,
    H) table and a per-distance bucket lookup, with no T×T tensor.
    """

    name = "t5"
    hooks = frozenset({"score_bias", "score_mod"})

    def __init__(
        self,
        *,
        d_model: int,
        num_heads: int,
        num_buckets: int = 32,
        max_distance: int = 128,
        bidirectional: bool = False,
    ) -> None:
        super().__init__(d_model=d_model, num_heads=num_heads)
        _check_t5(bidirectional, num_buckets, max_distance)
        self.num_buckets, self.max_distance, self.bidirectional = (
            num_buckets,
            max_distance,
            bool(bidirectional),
        )
        self.bias = nn.Embedding(num_buckets, num_heads)
        nn.init.normal_(self.bias.weight, std=0.02)

    def score_bias(self, q, k, q_positions, k_positions):
        """(H, T_q, T_k) for positions the batch shares (the attention's (1, 1, T), or
        (T,) on a direct call); (B, H, T_q, T_k) for the attention's (B, 1, T)."""
        # (T_q, T_k) or (B, T_q, T_k): no head axis yet (the table adds one)
        q_positions = sequence_positions(q_positions)
        rel = _pairwise(q_positions, sequence_positions(k_positions))
        bucket = t5_relative_position_bucket(
            rel, self.bidirectional, self.num_buckets, self.max_distance
        )
        # the table gives (..., T_q, T_k, H); the heads go in front of the position axes
        return self.bias(bucket).movedim(-1, -3).to(q.dtype)

    def score_mod(self, q_positions, k_positions, *, q=None, k=None):
        """The bias of :meth:`score_bias` as a FlexAttention ``score_mod``, with no
        T×T tensor.

        The bucket of each distinct relative position ``n − m`` is computed once with
        :func:`t5_relative_position_bucket`: an int64 lookup over the distances from
        min(n) − max(m) to max(n) − min(m) (T_q + T_k − 1 of them for contiguous
        positions), padded to a multiple of 128 entries. The mod adds
        ``table[bucket[n − m], h]`` from the learned (num_buckets, H) table, exactly
        :meth:`score_bias`'s entry. No T×T tensor is stored: the mod holds that
        lookup (int64, ≥ T_q + T_k − 1 entries), the table and the positions.

        Args:
            q_positions: integer (B′, 1, T_q), the attention's (or (T_q,) on a
                direct call).
            k_positions: integer (B′, 1, T_k) (or (T_k,)).
            q: optional queries; only their dtype is used (the table is cast to it,
                as :meth:`score_bias` does). k: not used.

        Returns:
            ``mod(score, b, h, q_idx, kv_idx) → score + table[bucket[n − m], h]``.

        Raises:
            TypeError: float positions. ValueError: positions of another shape.

        Source: Raffel et al. 2020, "Exploring the Limits of Transfer Learning with a
        Unified Text-to-Text Transformer", §2.1.
        """
        qp, kp = _integer_flex_positions("T5", q_positions, k_positions)
        # every n − m of a pair (and a few more)
        lo, distances = _distance_lookup(
            kp.amin(-1) - qp.amax(-1), kp.amax(-1) - qp.amin(-1)
        )
        bucket = t5_relative_position_bucket(
            distances, self.bidirectional, self.num_buckets, self.max_distance
        )
        table = self.bias.weight  # (num_buckets, H)
        if q is not None:
            table = table.to(q.dtype)
        # (n − m) − lo = n − (m + lo): shift the query positions once, so that the
        # mod holds no Python int that a new shape would recompile for
        pair = flex_pair(qp + lo, kp)

        def mod(score, b, h, q_idx, kv_idx):
            m_shifted, n = pair(b, q_idx, kv_idx)
            return score + table[bucket[n - m_shifted], h]

        return mod


# --------------------------------------------------------------------------------------
# DeBERTa (He et al. 2021)
# --------------------------------------------------------------------------------------


def _check_deberta(bucket_size: int, max_position: int) -> int:
    bucket_size = check_int("bucket_size", bucket_size, minimum=2)
    max_position = check_int("max_position", max_position, minimum=1)
    mid = bucket_size // 2
    if max_position - 1 <= mid:
        raise ValueError(
            f"max_position must be larger than bucket_size // 2 + 1 = {mid + 1}, got "
            f"{max_position}"
        )
    return mid


def deberta_log_bucket_position(
    relative_position: torch.Tensor, bucket_size: int, max_position: int
) -> torch.Tensor:
    """DeBERTa's log-bucketed relative position (He et al. 2021; DeBERTa-v2 code,
    ``make_log_bucket_position``).

    **Sign convention: DeBERTa's own, query − key** (δ(i, j) = i − j), the opposite of
    T5's. Offsets with ``|δ| ≤ bucket_size // 2`` are kept exactly; larger ones are
    compressed logarithmically so that ``max_position`` maps to about ``bucket_size``.
    The mapping is odd: f(−δ) = −f(δ).

    Args:
        relative_position: integer tensor (...), query position − key position.
        bucket_size: number of buckets per direction scale (DeBERTa-v3: 256).
        max_position: the largest distance the log range is scaled to (DeBERTa-v3: 512).

    Returns:
        int64 tensor (...), bucketed signed positions.

    Raises:
        ValueError: bucket_size < 2 or max_position ≤ bucket_size // 2 + 1. TypeError:
            float input.
    """
    mid = _check_deberta(bucket_size, max_position)
    if relative_position.is_floating_point():
        raise TypeError(
            "relative_position must be an integer tensor, got "
            f"{relative_position.dtype}"
        )
    sign = torch.sign(relative_position)
    abs_pos = torch.where(
        (relative_position < mid) & (relative_position > -mid),
        torch.full_like(relative_position, mid - 1),
        relative_position.abs(),
    )
    log_pos = (
        torch.ceil(
            torch.log(abs_pos / mid)
            / torch.log(torch.tensor((max_position - 1) / mid))
            * (mid - 1)
        )
        + mid
    )
    return torch.where(
        abs_pos <= mid, relative_position.to(log_pos.dtype), log_pos * sign
    ).long()


@register_scheme
class DebertaScheme(PositionalScheme):
    """``"deberta"``: disentangled attention (He et al. 2021, "DeBERTa", §3.1,
    Eqs. 2–4):

        A_ij = Q^c_i·K^c_j (content→content) + Q^c_i·K^r_{δ(i,j)} (content→position)
               + K^c_j·Q^r_{δ(i,j)} (position→content),   all divided by √(3·d_h),

    with δ the log-bucketed, clipped relative position in DeBERTa's query − key
    convention and K^r, Q^r projections of a shared table of 2·bucket_size relative
    embeddings. The scheme sets ``score_scale_factor = 3`` so that the attention scales
    the content term by 1/√(3·d_h) too.

    The position→content term is indexed as in DeBERTa's code and transformers'
    DeBERTa-v2, with the same δ(i, j) as content→position; the paper's Eq. 4 and
    Algorithm 1 write δ(j, i).

    Against transformers' ``DisentangledSelfAttention`` (v2; equal to float32 rounding
    in tests/test_relative.py): no biases in the projections; separate W_{k,r}, W_{q,r}
    (``share_att_key=False``; the released v2/v3 checkpoints share W_k, W_q), one pair
    for all layers; no LayerNorm of the relative embeddings; c2p and p2c always both
    on; causal or not as the attention is; explicit positions; T_q ≠ T_k (a KV cache).

    :meth:`score_mod` adds c2p + p2c inside FlexAttention from per-bucket tables
    (B, H, T, 2·bucket_size), with no T×T tensor.

    Args:
        d_model, num_heads: model sizes.
        bucket_size: position buckets (att_span); max_position: log-bucketing range.
    """

    name = "deberta"
    hooks = frozenset({"score_bias", "score_mod"})
    score_scale_factor = 3.0

    def __init__(
        self,
        *,
        d_model: int,
        num_heads: int,
        bucket_size: int = 32,
        max_position: int = 128,
    ) -> None:
        super().__init__(d_model=d_model, num_heads=num_heads)
        _check_deberta(bucket_size, max_position)
        self.bucket_size, self.max_position = bucket_size, max_position
        self.rel_embeddings = nn.Parameter(torch.randn(2 * bucket_size, d_model) * 0.02)
        self.pos_key_proj = nn.Linear(d_model, d_model, bias=False)
        self.pos_query_proj = nn.Linear(d_model, d_model, bias=False)

    def _heads(self, x):  # (2·span, d) -> (H, 2·span, d_h)
        return x.view(-1, self.num_heads, self.head_dim).transpose(0, 1)

    def score_bias(self, q, k, q_positions, k_positions):
        span = self.bucket_size
        delta = -_pairwise(q_positions, k_positions).long()  # query − key, as DeBERTa
        bucket = deberta_log_bucket_position(delta, span, self.max_position)
        index = (bucket + span).clamp(0, 2 * span - 1)  # a row of the 2·span table
        emb = self.rel_embeddings.to(q.dtype)
        k_r = self._heads(self.pos_key_proj(emb))  # (H, 2·span, d_h)
        q_r = self._heads(self.pos_query_proj(emb))
        c2p_all = q @ k_r.transpose(-1, -2)  # (B, H, T_q, 2·span)
        shape = c2p_all.shape[:-1] + (index.shape[-1],)
        c2p = c2p_all.gather(-1, _expand_index(index, shape))  # Q^c_i · K^r[δ(i, j)]
        p2c_all = k @ q_r.transpose(-1, -2)  # (B, H, T_k, 2·span)
        # gather each key's row along the transposed index, then transpose back:
        # p2c[i, j] = K_j · Q^r[δ(i, j)], as in DeBERTa's code
        index_t = index.transpose(-1, -2)
        shape_t = p2c_all.shape[:-1] + (index_t.shape[-1],)
        p2c = p2c_all.gather(-1, _expand_index(index_t, shape_t)).transpose(-1, -2)
        return (c2p + p2c) / math.sqrt(self.score_scale_factor * self.head_dim)

    def score_mod(self, q_positions, k_positions, *, q=None, k=None):
        """The bias of :meth:`score_bias` as a FlexAttention ``score_mod``, with no
        T×T tensor.

        Tables: c2p = Q^c K_rᵀ, (B, H, T_q, 2·bucket_size), and p2c = K^c Q_rᵀ,
        (B, H, T_k, 2·bucket_size); and the row of each distinct distance
        δ = m − n (query − key, DeBERTa's convention), ``clamp(``
        :func:`deberta_log_bucket_position` ``(δ) + span, 0, 2·span − 1)``, an int64
        lookup over the distances from min(m) − max(n) to max(m) − min(n)
        (T_q + T_k − 1 of them for contiguous positions), padded to a multiple of 128
        entries. The mod adds ``(c2p[b, h, m, row(δ)] + p2c[b, h, n, row(δ)]) /
        √(3·d_h)``, exactly :meth:`score_bias`'s entry. No T×T tensor is stored:
        memory O(B·H·(T_q + T_k)·bucket_size) for the tables.

        Args:
            q_positions: integer (B′, 1, T_q), the attention's (or (T_q,) on a
                direct call).
            k_positions: integer (B′, 1, T_k) (or (T_k,)).
            q: (B, H, T_q, d_h) queries after transform_qk (required).
            k: (B, H, T_k, d_h) keys after transform_qk (required).

        Returns:
            ``mod(score, b, h, q_idx, kv_idx) → score + bias``.

        Raises:
            ValueError: ``q`` or ``k`` missing; positions of another shape.
            TypeError: float positions (:meth:`score_bias` truncates them; a table
                index must be an integer).

        Source: He et al. 2021, "DeBERTa: Decoding-enhanced BERT with Disentangled
        Attention", §3.1, Eqs. 2–4 (the c2p and p2c terms, scaled by 1/√(3d)).
        """
        _needs_qk("deberta", q, k, need_k=True)
        qp, kp = _integer_flex_positions("DeBERTa", q_positions, k_positions)
        span = self.bucket_size
        # every m − n of a pair (and a few more)
        lo, delta = _distance_lookup(
            qp.amin(-1) - kp.amax(-1), qp.amax(-1) - kp.amin(-1)
        )
        bucket = deberta_log_bucket_position(delta, span, self.max_position)
        row = (bucket + span).clamp(0, 2 * span - 1)  # a row of the 2·span table
        emb = self.rel_embeddings.to(q.dtype)
        c2p = q @ self._heads(self.pos_key_proj(emb)).transpose(-1, -2)
        p2c = k @ self._heads(self.pos_query_proj(emb)).transpose(-1, -2)
        denominator = math.sqrt(self.score_scale_factor * self.head_dim)
        # (m − n) − lo = m − (n + lo): shift the key positions once (no Python int in
        # the mod, which a new shape would recompile for)
        pair = flex_pair(qp, kp + lo)

        def mod(score, b, h, q_idx, kv_idx):
            m, n_shifted = pair(b, q_idx, kv_idx)
            r = row[m - n_shifted]
            return score + (c2p[b, h, q_idx, r] + p2c[b, h, kv_idx, r]) / denominator

        return mod
