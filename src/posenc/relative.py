"""Relative position encodings: Shaw et al. and Transformer-XL, and the helpers that
every relative scheme shares (T5's and DeBERTa's bucketed schemes are in
:mod:`posenc.relative_buckets`).

Both act on the attention *scores* (plug-in point 3); Shaw et al. also add a term to
the values (plug-in point 4). Conventions (book/design.md): ``relative_position = key −
query = n − m`` as in T5 and Hugging Face, except where a paper uses query − key
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
from .frequencies import DEFAULT_BASE
from .schemes import (
    PositionalScheme,
    flex_pair,
    flex_positions,
    register_scheme,
)
from .sinusoidal import sinusoidal_encoding


def _pairwise(q_positions: torch.Tensor, k_positions: torch.Tensor) -> torch.Tensor:
    """``k − q`` for every (query, key) pair: (..., T_q, T_k), integer or float like the
    inputs."""
    return k_positions[..., None, :] - q_positions[..., :, None]


def _expand_index(index: torch.Tensor, batch_shape: torch.Size) -> torch.Tensor:
    """Broadcast an index (T_q, T_k) or (B, 1, T_q, T_k) to (B, H, T_q, T_k)."""
    return index.expand(*batch_shape).long()


def _needs_qk(scheme: str, q, k, *, need_q: bool = True, need_k: bool = False) -> None:
    """A ``score_mod`` whose bias depends on the content needs the queries or keys.

    Raises:
        ValueError: naming the scheme and what is missing.
    """
    wanted = (("q", q, need_q), ("k", k, need_k))
    missing = [name for name, t, need in wanted if need and t is None]
    if missing:
        raise ValueError(
            f"the {scheme} score_mod depends on the content: pass "
            + " and ".join(f"{n}=" for n in missing)
            + " (the queries/keys after transform_qk, (B, H, T, d_h))"
        )


def _integer_flex_positions(scheme: str, q_positions, k_positions):
    """:func:`posenc.schemes.flex_positions`, refusing float positions (they index a
    table).

    Raises:
        TypeError: float positions, naming the scheme.
    """
    if q_positions.is_floating_point() or k_positions.is_floating_point():
        raise TypeError(
            f"{scheme}'s relative positions index a table: positions must be integers, "
            f"got {q_positions.dtype} and {k_positions.dtype}"
        )
    return flex_positions(q_positions, k_positions)


def _distance_lookup(
    low: torch.Tensor, high: torch.Tensor
) -> tuple[int, torch.Tensor]:
    """The distances that a ``score_mod``'s 1-D lookup covers.

    Args:
        low, high: per-row bounds of the pairs' distances, (B,) or ().

    Returns:
        ``(lo, distances)``: lo = min(low) as an int; distances the int64 ``lo, lo + 1,
        …`` through max(high) (T_q + T_k − 1 values for contiguous positions), padded
        at the top (with entries no pair reads) to a multiple of 128, so that position
        sets of the same shapes but another spread (a strided row) reuse a compiled
        kernel instead of compiling one more.
    """
    lo, hi = int(low.min()), int(high.max())
    size = -(-(hi - lo + 1) // 128) * 128
    return lo, torch.arange(lo, lo + size, device=low.device)


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


def shaw_key_score_mod(
    q: torch.Tensor,
    a_k: torch.Tensor,
    q_positions: torch.Tensor,
    k_positions: torch.Tensor,
):
    """Shaw et al.'s key term ``q_m · a^K_{clip(n−m)} / √d_h`` as a FlexAttention
    ``score_mod``: :func:`shaw_key_bias` divided by √d_h (as
    :meth:`ShawScheme.score_bias`), without any (T_q, T_k) tensor.

    Every query is scored once against the 2k + 1 offset embeddings, a table
    ``q @ a_kᵀ / √d_h`` of shape (B, H, T_q, 2k + 1); the mod adds entry
    ``clip(n − m, −k, k) + k`` of query m's row to the score of the pair (m, n). Memory
    O(B·H·T_q·k) for the table and O(T) for the positions; no T×T tensor is stored.

    Args:
        q: (B, H, T_q, d_h) float, the queries after the scheme's transform.
        a_k: (2k + 1, d_h) offset embeddings a^K_{−k} … a^K_k, q's dtype.
        q_positions: integer (T_q,), (B, T_q) or (B, 1, T_q).
        k_positions: integer (T_k,), (B, T_k) or (B, 1, T_k).

    Returns:
        ``mod(score, b, h, q_idx, kv_idx) → score + q_m · a^K_{clip(n−m)} / √d_h``.

    Raises:
        TypeError: float positions (they index a table).
        ValueError: positions of another shape; a_k with an even number of rows or
            another width than q.

    Source: Shaw et al. 2018, "Self-Attention with Relative Position
    Representations", §3.1, Eq. 4 (the key term of e_ij); clipping §3.2.
    """
    if a_k.dim() != 2 or a_k.shape[0] % 2 == 0 or a_k.shape[1] != q.shape[-1]:
        raise ValueError(
            "a_k must have shape (2k + 1, d_h) with d_h = q.shape[-1] = "
            f"{q.shape[-1]}, got {tuple(a_k.shape)}"
        )
    qp, kp = _integer_flex_positions("Shaw et al.", q_positions, k_positions)
    clip = (a_k.shape[0] - 1) // 2
    table = (q @ a_k.transpose(0, 1)) / math.sqrt(q.shape[-1])  # (B, H, T_q, 2k+1)
    pair = flex_pair(qp, kp)

    def mod(score, b, h, q_idx, kv_idx):
        m, n = pair(b, q_idx, kv_idx)
        return score + table[b, h, q_idx, (n - m).clamp(-clip, clip) + clip]

    return mod


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
    hooks = frozenset({"score_bias", "score_mod", "value_term"})

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

    def score_mod(self, q_positions, k_positions, *, q=None, k=None):
        """The key term, :meth:`score_bias`, as a FlexAttention ``score_mod``
        (:func:`shaw_key_score_mod`): a (B, H, T_q, 2k + 1) table of
        ``q · a^K / √d_h`` looked up at clip(n − m) + k; no T×T tensor is stored.

        The value term cannot be a ``score_mod`` (it changes the output, not the
        scores), so :class:`~posenc.layers.attention.MultiHeadAttention` still refuses
        ``impl="flex"`` for this scheme (``needs_attention_weights``); the mod serves
        :func:`~posenc.layers.attention.attention_flex` called directly.

        Args:
            q_positions: integer (B′, 1, T_q), the attention's (or (T_q,) on a
                direct call). k_positions: integer (B′, 1, T_k) (or (T_k,)).
            q: (B, H, T_q, d_h) queries (required). k: not used.

        Returns:
            ``mod(score, b, h, q_idx, kv_idx) → score + q_m · a^K_{clip(n−m)} / √d_h``.

        Raises:
            ValueError: ``q`` missing. TypeError: float positions.

        Source: Shaw et al. 2018, §3.1, Eq. 4 (key term only).
        """
        _needs_qk("shaw", q, k)
        return shaw_key_score_mod(q, self.a_k.to(q.dtype), q_positions, k_positions)

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
    Translation invariant by construction. For fused kernels, :meth:`augment_qk`
    folds the whole bias into q and k, with no T×T tensor at all.

    Args:
        d_model, num_heads: model sizes. base: frequency base of R, default
            ``DEFAULT_BASE`` (10000).
    """

    name = "transformer_xl"
    hooks = frozenset({"score_bias", "augment_qk"})

    def __init__(
        self, *, d_model: int, num_heads: int, base: float = DEFAULT_BASE
    ) -> None:
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

    def augment_qk(self, q, k, q_positions, k_positions):
        """Terms (a)–(d) as one dot product: ``q_aug[m] · k_aug[n] = q_m·k_n + √d_h ·``
        :meth:`score_bias` ``[m, n]``, so that any attention kernel given
        ``scale=1/√d_h`` adds the bias with no T×T tensor and no (T_q, T_q + T_k) table
        of distances.

        With ``a = W_R,hᵀ (q_m + v_h)`` (W_R,h: head h's d_h rows of W_R; a ∈ R^d) split
        into its sine half a_s and cosine half a_c (R is ``[sin | cos]``), the
        angle-difference identities turn terms (b) + (d) into a sum over f of

            a_s,f sin((m−n)ω_f) + a_c,f cos((m−n)ω_f)
              = cos(nω_f)·[a_s,f sin(mω_f) + a_c,f cos(mω_f)]
              + sin(nω_f)·[a_c,f sin(mω_f) − a_s,f cos(mω_f)],

        a product of a query-side and a key-side vector; term (c) joins (a) as
        (q_m + u_h)·k_n. Hence

            q_aug = [q_m + u_h | a_s∘sin(mω) + a_c∘cos(mω) | a_c∘sin(mω) − a_s∘cos(mω)],
            k_aug = [k_n | cos(nω) | sin(nω)],

        of head dim d_h + d. The sines and cosines of the absolute positions come from
        :func:`~posenc.sinusoidal.sinusoidal_encoding` (float64, rounded once).
        Memory O(B·H·T·(d_h + d)); no T×T tensor is stored. Equal to
        :meth:`score_bias` up to float rounding (the fold sums other products); float
        positions give the exact sinusoid of m − n, where :meth:`score_bias` takes
        integers.

        Args:
            q: (B, H, T_q, d_h) float queries after transform_qk.
            k: (B, H, T_k, d_h) keys, q's dtype.
            q_positions: (B′, 1, T_q) positions m, the attention's (or (T_q,) on a
                direct call).
            k_positions: (B′, 1, T_k) positions n (or (T_k,)).

        Returns:
            ``(q_aug, k_aug)``: (B, H, T_q, d_h + d) and (B, H, T_k, d_h + d), q's
            dtype. The values keep d_h.

        Raises:
            ValueError: positions of another shape.

        Source: Dai et al. 2019, "Transformer-XL", §3.3 (terms (a)–(d)) and App. B
        (computing term (b) efficiently); the fold is the angle-difference identity.
        """
        half, heads = self.d_model // 2, self.num_heads
        # (B′, 1, T) → (B′, 1, T, d), broadcasting over the heads ((T,) → (T, d))
        table = dict(dim=self.d_model, base=self.base, layout="concatenated")
        enc_q = sinusoidal_encoding(q_positions, **table).to(q.dtype)
        enc_k = sinusoidal_encoding(k_positions, **table).to(k.dtype)
        sin_m, cos_m = enc_q[..., :half], enc_q[..., half:]
        # a = W_R,hᵀ (q_m + v_h): W_R's rows h·d_h … (h+1)·d_h − 1 are head h's output
        w_r = self.r_proj.weight.to(q.dtype).view(heads, self.head_dim, self.d_model)
        a = (q + self.v[:, None, :].to(q.dtype)) @ w_r  # (B, H, T_q, d)
        a_s, a_c = a[..., :half], a[..., half:]
        q_aug = torch.cat(
            (
                q + self.u[:, None, :].to(q.dtype),
                a_s * sin_m + a_c * cos_m,  # multiplies cos(nω)
                a_c * sin_m - a_s * cos_m,  # multiplies sin(nω)
            ),
            dim=-1,
        )
        shape = (*k.shape[:-1], half)
        k_aug = torch.cat(
            (k, enc_k[..., half:].expand(shape), enc_k[..., :half].expand(shape)),
            dim=-1,
        )
        return q_aug, k_aug
