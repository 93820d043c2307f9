"""Multi-head attention with the four plug-in points of a positional scheme.

One attention, two numerically equal paths:

* the **reference** path computes the score matrix explicitly,
  ``softmax(q kᵀ / √d_h + bias + mask) v + value_term``, and can return the attention
  weights for figures (:func:`attention_reference`);
* the **fast** path calls :func:`torch.nn.functional.scaled_dot_product_attention`,
  which picks a fused kernel where the inputs allow (:func:`attention_sdpa`).

Tests hold the two equal for every registered scheme.
"""

from __future__ import annotations

import functools
import math

import torch
import torch.nn.functional as F
from torch import nn

from ._checks import check_choice, check_int
from .schemes import PositionalScheme

ATTENTION_IMPLS = ("auto", "reference", "sdpa", "flex")


def causal_mask(
    q_len: int, k_len: int, *, device: torch.device | str | None = None
) -> torch.Tensor:
    """Boolean mask ``(q_len, k_len)``, True where query i may attend to key j.

    Aligned bottom-right: the queries are the last ``q_len`` of the ``k_len`` keys, so
    query i sees keys ``j ≤ i + (k_len − q_len)`` (the usual rule with a KV cache; for
    ``q_len == k_len`` it is the lower triangle).

    Raises:
        ValueError: if ``q_len > k_len`` or either is negative.
    """
    q_len = check_int("q_len", q_len, minimum=0)
    k_len = check_int("k_len", k_len, minimum=0)
    if q_len > k_len:
        raise ValueError(
            f"a causal mask needs q_len <= k_len, got q_len={q_len}, k_len={k_len}"
        )
    return torch.ones(q_len, k_len, dtype=torch.bool, device=device).tril(k_len - q_len)


def attention_reference(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    bias: torch.Tensor | None = None,
    causal: bool = True,
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Scaled dot-product attention with explicit scores (Vaswani et al. 2017, §3.2.1,
    Eq. 1).

    Args:
        q: (B, H, T_q, d_h). k, v: (B, H, T_k, d_h). Any float dtype; the softmax runs
            in float32.
        bias: optional score bias broadcastable to (B, H, T_q, T_k), added after the
            1/√d_h scaling.
        causal: mask future keys (see :func:`causal_mask`).
        scale: score scale; default 1/√d_h.

    Returns:
        ``(out, weights)``: out (B, H, T_q, d_h) in q's dtype; weights (B, H, T_q, T_k),
        the attention probabilities (each row sums to 1).
    """
    scale = scale if scale is not None else 1.0 / math.sqrt(q.shape[-1])
    scores = (q @ k.transpose(-2, -1)).float() * scale
    if bias is not None:
        scores = scores + bias.float()
    if causal:
        allowed = causal_mask(q.shape[-2], k.shape[-2], device=q.device)
        scores = scores.masked_fill(~allowed, float("-inf"))
    weights = scores.softmax(dim=-1).to(q.dtype)
    return weights @ v, weights


def attention_sdpa(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    bias: torch.Tensor | None = None,
    causal: bool = True,
    scale: float | None = None,
) -> torch.Tensor:
    """The same attention as :func:`attention_reference` through
    :func:`torch.nn.functional.scaled_dot_product_attention`.

    Without a bias and with ``T_q == T_k`` the causal case uses ``is_causal=True`` and
    never builds a T×T tensor; with a bias, the bias (with −inf at masked places) is
    passed as a float mask.

    Args / Returns: as :func:`attention_reference`, without the weights.
    """
    q_len, k_len = q.shape[-2], k.shape[-2]
    if bias is None:
        if not causal:
            return F.scaled_dot_product_attention(q, k, v, scale=scale)
        if q_len == k_len:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
        return F.scaled_dot_product_attention(
            q, k, v, attn_mask=causal_mask(q_len, k_len, device=q.device), scale=scale
        )
    mask = bias.to(q.dtype)
    if causal:
        allowed = causal_mask(q_len, k_len, device=q.device)
        mask = mask.masked_fill(~allowed, float("-inf"))
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)


@functools.lru_cache(maxsize=None)
def _compiled_flex_functions():
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    # dynamic=False: one kernel per shape. torch 2.13's CPU template miscompiles the
    # dynamic-shape kernel that a second shape would otherwise trigger (an undeclared
    # variable in the C++).
    return torch.compile(flex_attention, dynamic=False), torch.compile(
        create_block_mask, dynamic=False
    )


@functools.lru_cache(maxsize=32)
def flex_block_mask(q_len: int, k_len: int, causal: bool, device: str):
    """The FlexAttention ``BlockMask`` of a (bottom-right aligned) causal or full
    attention, built by a compiled ``create_block_mask`` (the eager one evaluates the
    mask on a dense ``q_len × k_len`` grid) and cached per shape.

    Without a block mask, torch 2.13's CPU kernel stores a ``T × T`` buffer; with one it
    does not, and on every device it skips the blocks above the diagonal.
    """
    offset = k_len - q_len

    def causal_mask_mod(b, h, q_idx, kv_idx):
        return q_idx + offset >= kv_idx

    def full_mask_mod(b, h, q_idx, kv_idx):
        return q_idx >= 0

    _, create_block_mask = _compiled_flex_functions()
    mask_mod = causal_mask_mod if causal else full_mask_mod
    return create_block_mask(mask_mod, None, None, q_len, k_len, device=device)


def attention_flex(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    score_mod=None,
    causal: bool = True,
    scale: float | None = None,
) -> torch.Tensor:
    """The same attention through FlexAttention (``torch.nn.attention.flex_attention``),
    compiled once per process: the bias comes from ``score_mod`` and is applied inside
    the kernel, and the causal mask is a block mask (:func:`flex_block_mask`), so no T×T
    score, bias or mask tensor is stored.

    Args:
        q, k, v: as :func:`attention_reference`. score_mod: ``(score, b, h, q_idx,
        kv_idx) → score`` or None. causal: mask future keys (bottom-right aligned).
        scale: default 1/√d_h.

    Returns:
        (B, H, T_q, d_h). The first call compiles (tens of seconds on a CPU). On the
        CPU, torch 2.13's FlexAttention has no backward pass: use it there for
        inference, and train on SDPA or a GPU.
    """
    flex_attention, _ = _compiled_flex_functions()
    block_mask = flex_block_mask(q.shape[-2], k.shape[-2], causal, str(q.device))
    return flex_attention(
        q, k, v, score_mod=score_mod, block_mask=block_mask, scale=scale
    )


def _check_bias(bias: torch.Tensor, scores_shape: torch.Size, scheme: str) -> None:
    """A scheme's score bias must broadcast to the scores (B, H, T_q, T_k) without
    growing them: a 5-D bias would silently turn the scores into a 5-D tensor.

    Raises:
        ValueError: naming the scheme, the bias's shape and the scores' shape.
    """
    try:
        fits = torch.broadcast_shapes(bias.shape, scores_shape) == scores_shape
    except RuntimeError:
        fits = False
    if not fits:
        raise ValueError(
            f"scheme {scheme!r} returned a score bias of shape {tuple(bias.shape)}, "
            f"which does not broadcast to the scores (B, H, T_q, T_k) = "
            f"{tuple(scores_shape)}"
        )


class LayerKVCache:
    """The keys and values that one attention layer has seen, with their positions.

    Keys are stored *after* the scheme's query/key transform (rotated, for RoPE), so a
    decoding step transforms only its own new keys. Grows by concatenation; for teaching
    and tests, not for serving (no preallocation, no paging).
    """

    def __init__(self) -> None:
        self.k: torch.Tensor | None = None
        self.v: torch.Tensor | None = None
        self.positions: torch.Tensor | None = None

    def __len__(self) -> int:
        return 0 if self.k is None else self.k.shape[-2]

    def append(self, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor):
        """Add new keys/values (B, H, T_new, d_h) at ``positions`` ((T_new,) or (B, 1,
        T_new)) and return all of them: ``(k, v, positions)`` with T_k = cached +
        new."""
        if self.k is None:
            self.k, self.v, self.positions = k, v, positions
        else:
            if self.positions.dim() != positions.dim():
                raise ValueError(
                    "positions of a cached step must keep their shape kind: cached "
                    f"{tuple(self.positions.shape)}, "
                    f"new {tuple(positions.shape)}"
                )
            self.k = torch.cat((self.k, k), dim=-2)
            self.v = torch.cat((self.v, v), dim=-2)
            self.positions = torch.cat((self.positions, positions), dim=-1)
        return self.k, self.v, self.positions


class KVCache:
    """One :class:`LayerKVCache` per layer of a model, for incremental decoding.

    ``len(cache)`` is the number of tokens seen; :meth:`next_positions` gives the
    default positions of the next ``T`` tokens, ``len(cache) … len(cache) + T − 1``:
    positions are explicit offsets.
    """

    def __init__(self, num_layers: int) -> None:
        self.layers = [
            LayerKVCache()
            for _ in range(check_int("num_layers", num_layers, minimum=1))
        ]

    def __len__(self) -> int:
        return len(self.layers[0])

    def next_positions(
        self, seq_len: int, *, device: torch.device | str | None = None
    ) -> torch.Tensor:
        start = len(self)
        return torch.arange(start, start + seq_len, device=device)


class MultiHeadAttention(nn.Module):
    """Multi-head self-attention whose positional behaviour comes from a
    :class:`PositionalScheme`.

    The scheme acts at plug-in points 2–4 here (q/k transform, score bias, value term);
    point 1 (embedding) is applied once by the model, before the first block.

    Args:
        d_model: model width d. num_heads: heads H (d must be divisible by H).
        scheme: the positional scheme (may be shared between layers).
        causal: mask future positions (decoder) or not (encoder).

    Shape:
        ``forward(x, positions)``: x (B, T, d); positions (T,) or (B, T) → (B, T, d),
        plus the attention weights (B, H, T, T) when ``need_weights=True``, else None.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        scheme: PositionalScheme,
        *,
        causal: bool = True,
    ) -> None:
        super().__init__()
        self.d_model = check_int("d_model", d_model, minimum=1)
        self.num_heads = check_int("num_heads", num_heads, minimum=1)
        if d_model % num_heads:
            raise ValueError(
                f"d_model must be divisible by num_heads, got {d_model} and {num_heads}"
            )
        self.head_dim = d_model // num_heads
        self.scheme = scheme
        self.causal = causal
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.proj = nn.Linear(d_model, d_model, bias=False)

    def forward(
        self,
        x: torch.Tensor,
        positions: torch.Tensor,
        *,
        impl: str = "auto",
        need_weights: bool = False,
        cache: LayerKVCache | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Attend.

        Args:
            x: (B, T, d) float.
            positions: (T,) or (B, T) integer or float positions of the tokens.
            impl: ``"reference"``, ``"sdpa"``, ``"flex"`` (needs a scheme with a
                ``score_mod`` or without a score bias), or ``"auto"`` (sdpa unless
                weights are needed).
            need_weights: also return the attention weights (reference path only).
            cache: keys and values of earlier tokens (:class:`LayerKVCache`); the new
                ones are appended and attended to with the old. The queries are then the
                last T of the T_k keys (bottom-right causal mask).

        Raises:
            ValueError: unknown ``impl``; ``impl="sdpa"`` or ``"flex"`` together with
                ``need_weights`` or with a scheme that needs the weights;
                ``impl="flex"`` with a scheme that has a score bias but no
                ``score_mod``; positions whose last dimension is not T or whose batch
                is neither 1 nor B; a scheme whose score bias does not broadcast to
                (B, H, T_q, T_k).
        """
        impl = check_choice("impl", impl, ATTENTION_IMPLS)
        batch, seq_len, _ = x.shape
        if positions.shape[-1] != seq_len or positions.dim() not in (1, 2):
            raise ValueError(
                f"positions must have shape (T,) or (B, T) with T={seq_len}, "
                f"got {tuple(positions.shape)}"
            )
        if positions.dim() == 2 and positions.shape[0] not in (1, batch):
            raise ValueError(
                f"positions of shape (B, T) need B = 1 or the batch size {batch}, "
                f"got {tuple(positions.shape)}"
            )
        wants_weights = need_weights or self.scheme.needs_attention_weights
        if impl == "sdpa" and wants_weights:
            raise ValueError(
                "impl='sdpa' cannot return attention weights; use impl='reference' or "
                f"'auto' (need_weights={need_weights}, scheme {self.scheme.name!r} "
                f"needs weights: {self.scheme.needs_attention_weights})"
            )
        if impl == "flex" and wants_weights:
            raise ValueError(
                f"impl='flex' cannot return attention weights (scheme "
                f"{self.scheme.name!r}, need_weights={need_weights})"
            )
        use_reference = impl == "reference" or (impl == "auto" and wants_weights)
        scale = 1.0 / math.sqrt(self.scheme.score_scale_factor * self.head_dim)

        qkv = self.qkv(x).view(batch, seq_len, 3, self.num_heads, self.head_dim)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
        # positions broadcast over the heads: (T,) stays, (B, T) becomes (B, 1, T)
        pos = positions if positions.dim() == 1 else positions[:, None, :]
        q, k = self.scheme.transform_qk(q, k, pos, pos)
        k_pos = pos
        if cache is not None:
            k, v, k_pos = cache.append(k, v, pos)
        weights = None
        if impl == "flex":
            bias = None
            score_mod = self.scheme.score_mod(pos, k_pos)
            has_bias = type(self.scheme).score_bias is not PositionalScheme.score_bias
            if score_mod is None and has_bias:
                raise ValueError(
                    f"scheme {self.scheme.name!r} has a score bias but no "
                    "score_mod for impl='flex'"
                )
            out = attention_flex(
                q, k, v, score_mod=score_mod, causal=self.causal, scale=scale
            )
        else:
            bias = self.scheme.score_bias(q, k, pos, k_pos)
            if bias is not None:
                shape = torch.Size((batch, self.num_heads, q.shape[-2], k.shape[-2]))
                _check_bias(bias, shape, self.scheme.name)
        if use_reference:
            out, weights = attention_reference(
                q, k, v, bias=bias, causal=self.causal, scale=scale
            )
            term = self.scheme.value_term(weights, pos, k_pos)
            if term is not None:
                out = out + term
        elif impl != "flex":
            out = attention_sdpa(q, k, v, bias=bias, causal=self.causal, scale=scale)
        out = out.transpose(1, 2).reshape(batch, seq_len, self.d_model)
        return self.proj(out), (weights if need_weights else None)
