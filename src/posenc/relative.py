"""Relative position encodings: Shaw et al., Transformer-XL, T5 and DeBERTa.

All four act on the attention *scores* (plug-in point 3); Shaw et al. also add a term to
the values (plug-in point 4). Conventions (DESIGN.md): ``relative_position = key − query
= n − m`` as in T5 and Hugging Face, except where a paper uses query − key
(Transformer-XL's R_{m−n}, DeBERTa's δ(i, j) = i − j); each function says which it
takes.

Memory: no function here builds a (T, T, d_h) tensor except those whose name ends in
``_naive``, which exist as references for the tests and the book.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ._checks import check_int
from .schemes import PositionalScheme, register_scheme, sequence_positions
from .sinusoidal import sinusoidal_encoding


def _pairwise(q_positions: torch.Tensor, k_positions: torch.Tensor) -> torch.Tensor:
    """``k − q`` for every (query, key) pair: (..., T_q, T_k), integer or float like the
    inputs."""
    return k_positions[..., None, :] - q_positions[..., :, None]


def _expand_index(index: torch.Tensor, batch_shape: torch.Size) -> torch.Tensor:
    """Broadcast an index (T_q, T_k) or (B, 1, T_q, T_k) to (B, H, T_q, T_k)."""
    return index.expand(*batch_shape).long()


# --------------------------------------------------------------------------------------
# Shaw et al. 2018
# --------------------------------------------------------------------------------------


def clipped_relative_position(
    q_positions: torch.Tensor, k_positions: torch.Tensor, max_relative_position: int
) -> torch.Tensor:
    """``clip(n − m, −k, k)`` for every query position m and key position n (Shaw et al.
    2018, §3.2).

    Args:
        q_positions: integer (..., T_q). k_positions: integer (..., T_k).
        max_relative_position: the clipping distance k ≥ 0.

    Returns:
        int64 (..., T_q, T_k) in ``−k … k``.

    Raises:
        ValueError: negative ``max_relative_position``. TypeError: float positions.
    """
    k = check_int("max_relative_position", max_relative_position, minimum=0)
    if q_positions.is_floating_point() or k_positions.is_floating_point():
        raise TypeError(
            "Shaw et al.'s relative positions index a table: positions must be integers"
        )
    return _pairwise(q_positions, k_positions).clamp(-k, k).long()


def shaw_key_bias_naive(
    q: torch.Tensor, a_k: torch.Tensor, rel: torch.Tensor
) -> torch.Tensor:
    """Reference: ``q_m · a^K_{clip(n−m)}`` by materialising the (T_q, T_k, d_h) tensor
    of key embeddings. q: (B, H, T_q, d_h); a_k: (2k+1, d_h); rel: clipped offsets (…,
    T_q, T_k) → (B, H, T_q, T_k)."""
    k = (a_k.shape[0] - 1) // 2
    table = a_k[rel + k]  # (..., T_q, T_k, d_h): the O(T²·d_h) tensor
    return torch.einsum("...qd,...qkd->...qk", q, table)


def shaw_key_bias(
    q: torch.Tensor, a_k: torch.Tensor, rel: torch.Tensor
) -> torch.Tensor:
    """``q_m · a^K_{clip(n−m)}`` without the (T_q, T_k, d_h) tensor: score every query
    against the 2k + 1 offset embeddings, then gather the column of each pair's offset.
    Same arguments and result as :func:`shaw_key_bias_naive`; memory O(T·k + T²) instead
    of O(T²·d_h)."""
    k = (a_k.shape[0] - 1) // 2
    per_offset = q @ a_k.transpose(0, 1)  # (B, H, T_q, 2k+1)
    index = _expand_index(rel + k, per_offset.shape[:-1] + (rel.shape[-1],))
    return per_offset.gather(-1, index)


def shaw_value_term_naive(
    weights: torch.Tensor, a_v: torch.Tensor, rel: torch.Tensor
) -> torch.Tensor:
    """Reference: ``Σ_n α_mn a^V_{clip(n−m)}`` with the (T_q, T_k, d_h) tensor. weights:
    (B, H, T_q, T_k)."""
    k = (a_v.shape[0] - 1) // 2
    return torch.einsum("...qk,...qkd->...qd", weights, a_v[rel + k])


def shaw_value_term(
    weights: torch.Tensor, a_v: torch.Tensor, rel: torch.Tensor
) -> torch.Tensor:
    """``Σ_n α_mn a^V_{clip(n−m)}`` without the (T_q, T_k, d_h) tensor: first add up,
    per query, the weights of all keys that share an offset (a scatter-add into 2k + 1
    slots), then multiply by the offset embeddings. Same result as
    :func:`shaw_value_term_naive`."""
    k = (a_v.shape[0] - 1) // 2
    index = _expand_index(rel + k, weights.shape)
    per_offset = weights.new_zeros(*weights.shape[:-1], a_v.shape[0]).scatter_add_(
        -1, index, weights
    )
    return per_offset @ a_v


@register_scheme
class ShawScheme(PositionalScheme):
    """``"shaw"``: learned relative key and value embeddings a^K, a^V for the clipped
    offsets −k … k, shared by all heads (Shaw et al. 2018, "Self-Attention with Relative
    Position Representations", Eqs. 3–4). Uses plug-in points 3 (keys) and 4 (values),
    so the attention runs on its reference path.

    Args:
        d_model, num_heads: model sizes.
        max_relative_position: clipping distance k (the paper finds k ≥ 2 enough;
            default 16).
        naive: use the O(T²·d_h) reference functions instead of the efficient ones.
    """

    name = "shaw"
    needs_attention_weights = True

    def __init__(
        self,
        *,
        d_model: int,
        num_heads: int,
        max_relative_position: int = 16,
        naive: bool = False,
    ) -> None:
        super().__init__(d_model=d_model, num_heads=num_heads)
        self.max_relative_position = check_int(
            "max_relative_position", max_relative_position, minimum=0
        )
        size = 2 * self.max_relative_position + 1
        self.a_k = nn.Parameter(torch.randn(size, self.head_dim) * 0.02)
        self.a_v = nn.Parameter(torch.randn(size, self.head_dim) * 0.02)
        self.naive = bool(naive)

    def _rel(self, q_positions, k_positions):
        return clipped_relative_position(
            q_positions, k_positions, self.max_relative_position
        )

    def score_bias(self, q, k, q_positions, k_positions):
        fn = shaw_key_bias_naive if self.naive else shaw_key_bias
        return fn(
            q, self.a_k.to(q.dtype), self._rel(q_positions, k_positions)
        ) / math.sqrt(self.head_dim)

    def value_term(self, weights, q_positions, k_positions):
        fn = shaw_value_term_naive if self.naive else shaw_value_term
        return fn(
            weights, self.a_v.to(weights.dtype), self._rel(q_positions, k_positions)
        )


# --------------------------------------------------------------------------------------
# Transformer-XL (Dai et al. 2019)
# --------------------------------------------------------------------------------------


def relative_shift(x: torch.Tensor) -> torch.Tensor:
    """Transformer-XL's relative shift ("skewing", Huang et al. 2018, §3.4.1; Dai et al.
    2019, App. B).

    ``x[..., i, c]`` holds the score of query i against the relative encoding of
    distance ``m − n = T_k − 1 − c`` (column 0 is the farthest distance, as
    Transformer-XL orders R). The shift moves each row so that ``out[..., i, j]`` is the
    score for query i and key j, using only a pad, a reshape and a slice: no gather
    index, no extra T×T×d tensor. Queries are the last T_q of the T_k keys. Entries with
    ``j > i + (T_k − T_q)`` (future keys) are meaningless and must be masked.

    Args:
        x: (..., T_q, T_k).

    Returns:
        (..., T_q, T_k).
    """
    *batch, q_len, k_len = x.shape
    padded = torch.nn.functional.pad(
        x, (1, 0)
    )  # (..., T_q, T_k + 1): a zero column in front
    padded = padded.reshape(*batch, k_len + 1, q_len)  # reinterpret the memory
    return padded[..., 1:, :].reshape(*batch, q_len, k_len)


@register_scheme
class TransformerXLScheme(PositionalScheme):
    """``"transformer_xl"``: the relative attention of Dai et al. 2019, §3.3:

        A_mn = q_mᵀ k_n  (a)  +  q_mᵀ W_R R_{m−n}  (b)  +  uᵀ k_n  (c)  +  vᵀ W_R
        R_{m−n}  (d),

    with R the sinusoidal encoding of the distance m − n (query − key, as in the paper),
    W_R a learned projection and u, v learned per-head vectors. Term (a) is the usual
    score; (b)–(d) are the score bias. The terms (b) + (d) = (q_m + v)ᵀ W_R R_{m−n} are
    computed once per distinct distance and gathered — never a (T, T, d) tensor.
    Translation invariant by construction.

    Args:
        d_model, num_heads: model sizes. base: frequency base of R.
    """

    name = "transformer_xl"

    def __init__(self, *, d_model: int, num_heads: int, base: float = 10000.0) -> None:
        super().__init__(d_model=d_model, num_heads=num_heads)
        self.base = base
        self.r_proj = nn.Linear(d_model, d_model, bias=False)  # W_R
        self.u = nn.Parameter(torch.zeros(num_heads, self.head_dim))
        self.v = nn.Parameter(torch.zeros(num_heads, self.head_dim))

    def score_bias(self, q, k, q_positions, k_positions):
        distance = -_pairwise(q_positions, k_positions)  # m − n
        lo, hi = int(distance.min()), int(distance.max())
        offsets = torch.arange(lo, hi + 1, device=q.device)
        r = sinusoidal_encoding(offsets, self.d_model, self.base, "concatenated").to(
            q.dtype
        )
        r = (
            self.r_proj(r).view(-1, self.num_heads, self.head_dim).transpose(0, 1)
        )  # (H, D, d_h)
        per_distance = (q + self.v[:, None, :].to(q.dtype)) @ r.transpose(
            -1, -2
        )  # (B, H, T_q, D)
        index = _expand_index(
            distance - lo, per_distance.shape[:-1] + (distance.shape[-1],)
        )
        bd = per_distance.gather(-1, index)
        c = (k @ self.u[:, :, None].to(k.dtype)).transpose(-1, -2)  # (B, H, 1, T_k)
        return (bd + c) / math.sqrt(self.head_dim)


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
    """

    name = "t5"

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
        """(H, T_q, T_k) for (T,) positions; (B, H, T_q, T_k) for (B, 1, T) or
        (B, T)."""
        # (T_q, T_k) or (B, T_q, T_k): no head axis yet (the table adds one)
        q_positions = sequence_positions(q_positions)
        rel = _pairwise(q_positions, sequence_positions(k_positions))
        bucket = t5_relative_position_bucket(
            rel, self.bidirectional, self.num_buckets, self.max_distance
        )
        # the table gives (..., T_q, T_k, H); the heads go in front of the position axes
        return self.bias(bucket).movedim(-1, -3).to(q.dtype)


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

    Args:
        d_model, num_heads: model sizes.
        bucket_size: position buckets (att_span); max_position: log-bucketing range.
    """

    name = "deberta"
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
