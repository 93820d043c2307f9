"""Multi-head attention with the four plug-in points of a positional scheme.

One attention, two numerically equal paths:

* the **reference** path computes the score matrix explicitly,
  ``softmax(q kᵀ / √d_h + bias + mask) v + value_term``, and can return the attention
  weights for figures (:func:`attention_reference`);
* the **fast** path calls :func:`torch.nn.functional.scaled_dot_product_attention`,
  which picks a fused kernel where the inputs allow (:func:`attention_sdpa`).

A third, :func:`attention_flex`, computes a scheme's bias inside a FlexAttention kernel.
Tests hold them equal for every registered scheme.

:class:`MultiHeadAttention` reads like nanoGPT's: project → position → attend → merge.
Positions are checked once, at its boundary (:func:`head_positions`), and keep one
shape inside; which plug-in points a scheme uses is read from its declared
:attr:`~posenc.schemes.PositionalScheme.hooks`, which path can serve it from
:func:`check_impl`, and how a KV cache holds positions from its
``reassigns_positions``.

Shapes:
    B batch, H heads, T (= T_q) new tokens, T_k keys (cached + new), d model width,
    d_h = d / H head width, r rotated width (RoPE); B′ ∈ {1, B}, 1 when the batch
    shares the positions. Positions enter as (T,) or (B, T) ((A, T) or (A, B, T) for A
    grid axes) and are, inside the attention, always (B′, 1, T) ((B′, 1, T, A)),
    broadcasting against the heads (:func:`head_positions`).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .._checks import check_choice, check_int
from .flex import FLEX_MIN_HEAD_DIM, attention_flex, flex_block_mask  # noqa: F401
from .kv_cache import LayerKVCache
from .masks import (
    attended_keys,
    attention_mask,
    check_sink,
    check_sinks,
    check_spans,
)
from ..rope_nd import axis_positions_to_heads, check_axis_positions
from ..schemes import PositionalScheme
from ..temperature import (
    check_query_temperature,
    llama4_query_scale,
    logn_query_scale,
    ssmax_query_scale,
)

ATTENTION_IMPLS = ("auto", "reference", "sdpa", "flex")


def attention_reference(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    bias: torch.Tensor | None = None,
    causal: bool = True,
    scale: float | None = None,
    window: int | None = None,
    chunk: int | None = None,
    sinks: torch.Tensor | None = None,
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
        window, chunk: sliding-window or chunked attention (see
            :func:`attention_mask`); None for none.
        sinks: optional (H,) learned sink logits s_h (gpt-oss, OpenAI 2025): one more
            logit per head in each softmax's denominator, attached to no value, so
            that a row's weights sum to 1 − e^{s_h}/(e^{s_h} + Σ_j e^{score_j}) < 1
            (transformers 5.23's ``GptOssAttention``).

    Returns:
        ``(out, weights)``: out (B, H, T_q, d_h) in q's dtype; weights (B, H, T_q, T_k),
        the attention probabilities (each row sums to 1, or less with sinks).

    Raises:
        ValueError: sinks not of shape (H,); as :func:`attention_mask`.
    """
    check_sinks(sinks, q.shape[-3])
    scale = scale if scale is not None else 1.0 / math.sqrt(q.shape[-1])
    scores = (q @ k.transpose(-2, -1)).float() * scale
    if bias is not None:
        scores = scores + bias.float()
    if causal or window is not None or chunk is not None:
        allowed = attention_mask(
            q.shape[-2],
            k.shape[-2],
            causal=causal,
            window=window,
            chunk=chunk,
            device=q.device,
        )
        scores = scores.masked_fill(~allowed, float("-inf"))
    if sinks is None:
        weights = scores.softmax(dim=-1)
    else:
        sink = sinks.float().view(1, -1, 1, 1).expand(*scores.shape[:-1], 1)
        weights = torch.cat((scores, sink), dim=-1).softmax(dim=-1)[..., :-1]
    weights = weights.to(q.dtype)
    return weights @ v, weights


def attention_sdpa(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    bias: torch.Tensor | None = None,
    causal: bool = True,
    scale: float | None = None,
    window: int | None = None,
    chunk: int | None = None,
    sinks: torch.Tensor | None = None,
) -> torch.Tensor:
    """The same attention as :func:`attention_reference` through
    :func:`torch.nn.functional.scaled_dot_product_attention`.

    Without a bias, window, chunk or sinks and with ``T_q == T_k`` the causal case
    uses ``is_causal=True`` and never builds a T×T tensor; a window or chunk is passed
    as a boolean mask, a bias (with −inf at masked places) as a float mask. Sinks
    append one key of zeros with a zero value, whose score, 0 · scale + mask, is the
    sink logit s_h put in the mask's extra column.

    Args / Returns / Raises: as :func:`attention_reference`, without the weights.
    """
    check_sinks(sinks, q.shape[-3])
    q_len, k_len = q.shape[-2], k.shape[-2]
    plain = window is None and chunk is None and sinks is None
    if bias is None and plain:
        if not causal:
            return F.scaled_dot_product_attention(q, k, v, scale=scale)
        if q_len == k_len:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
    allowed = attention_mask(
        q_len, k_len, causal=causal, window=window, chunk=chunk, device=q.device
    )
    if bias is None and sinks is None:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, scale=scale)
    mask = torch.zeros(allowed.shape, device=q.device) if bias is None else bias
    mask = mask.to(q.dtype).masked_fill(~allowed, float("-inf"))
    if sinks is not None:
        shape = torch.broadcast_shapes(mask.shape, (*q.shape[:-1], k_len))
        sink = sinks.to(q.dtype).view(1, -1, 1, 1).expand(*shape[:-1], 1)
        mask = torch.cat((mask.expand(shape), sink), dim=-1)
        zero = q.new_zeros((*k.shape[:-2], 1, k.shape[-1]))
        k = torch.cat((k, zero), dim=-2)
        v = torch.cat((v, zero.expand(*v.shape[:-2], 1, v.shape[-1])), dim=-2)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)


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


def check_impl(
    impl: object,
    scheme: type[PositionalScheme],
    *,
    sink: bool = False,
    need_weights: bool = False,
) -> str:
    """The attention path ``impl`` (:data:`ATTENTION_IMPLS`) resolved for a scheme
    class: ``"reference"``, ``"sdpa"`` or ``"flex"`` (``"auto"`` is ``"reference"``
    when weights are needed, else ``"sdpa"``). The one place that knows which path
    can serve which scheme; it reads the scheme's declared
    :attr:`~posenc.schemes.PositionalScheme.hooks`.

    Raises:
        ValueError: unknown ``impl``; ``"sdpa"`` or ``"flex"`` with ``need_weights``
        or a scheme with a value term (it needs the weights); ``"flex"`` with sink
        logits, or with a scheme that has a score bias but neither a ``score_mod``
        nor an ``augment_qk``.
    """
    impl = check_choice("impl", impl, ATTENTION_IMPLS)
    if "attend" in scheme.hooks:
        return _check_attend_impl(impl, scheme, sink=sink, need_weights=need_weights)
    wants_weights = need_weights or scheme.needs_attention_weights
    if impl == "auto":
        return "reference" if wants_weights else "sdpa"
    if impl != "reference" and wants_weights:
        reason = (
            f"scheme {scheme.name!r} adds a value term made from them"
            + (", which no score_mod can add" if impl == "flex" else "")
            if scheme.needs_attention_weights
            else f"need_weights={need_weights}"
        )
        raise ValueError(
            f"impl={impl!r} cannot return attention weights: {reason}; use "
            "impl='reference' or 'auto'"
        )
    if impl == "flex" and sink:
        raise ValueError(
            "impl='flex' does not take sink logits here; use 'sdpa' or 'reference'"
        )
    fused = scheme.hooks & {"score_mod", "augment_qk"}
    if impl == "flex" and "score_bias" in scheme.hooks and not fused:
        raise ValueError(
            f"scheme {scheme.name!r} has a score bias but no score_mod (nor "
            "augment_qk) for impl='flex'"
        )
    return impl


def _check_attend_impl(impl, scheme, *, sink, need_weights) -> str:
    """:func:`check_impl` for an ``"attend"`` method: its naive reference (which gives
    the weights) or its fast path ("sdpa"); no FlexAttention, no sink logits."""
    if impl == "auto":
        return "reference" if need_weights else "sdpa"
    if impl == "flex" or sink:
        raise ValueError(
            f"scheme {scheme.name!r} computes the whole attention itself ('attend'): "
            f"it takes impl='reference' or 'sdpa' and no sink logits, got impl={impl!r}"
            f", sink={sink}"
        )
    if impl == "sdpa" and need_weights:
        raise ValueError("impl='sdpa' cannot return attention weights; use 'reference'")
    return impl


def head_positions(
    positions: object, batch: int, seq_len: int, axes: int = 1
) -> torch.Tensor:
    """Positions checked and put in the one shape the attention uses inside.

    A sequence's positions, (T,) or (B, T), become (B′, 1, T), B′ = 1 when the batch
    shares them ((T,) or (1, T)) and B′ = B otherwise: the singleton axis broadcasts
    against the heads of q and k (B, H, T, d_h), and a shared row is never expanded to
    the batch. Grid positions of ``axes`` = A > 1 coordinates (a scheme's
    :attr:`~posenc.schemes.PositionalScheme.position_axes`: the ViT's (row, column)),
    (A, T) or (A, B, T), become (B′, 1, T, A) likewise, one coordinate per entry of
    the last axis. In both, T is axis 2 (where a KV cache appends). Values and dtype
    are kept (float positions are allowed); the result is a view, no copy.

    Raises:
        TypeError: positions not a tensor (for ``axes`` > 1: not an integer or
        float tensor).
        ValueError: positions not (T,) or (B, T) with this T, or a batch that is
        neither 1 nor ``batch``; for ``axes`` > 1, as
        :func:`posenc.rope_nd.check_axis_positions`.
    """
    if axes > 1:
        positions = check_axis_positions(positions, axes, seq_len, batch, "coordinates")
        return axis_positions_to_heads(positions)  # (B′, 1, T, A)
    if not isinstance(positions, torch.Tensor):
        raise TypeError(
            f"positions must be a tensor (T,) or (B, T), got {type(positions).__name__}"
        )
    if positions.dim() not in (1, 2) or positions.shape[-1] != seq_len:
        raise ValueError(
            f"positions must have shape (T,) or (B, T) with T={seq_len}, "
            f"got {tuple(positions.shape)}"
        )
    if positions.dim() == 2 and positions.shape[0] not in (1, batch):
        raise ValueError(
            f"positions of shape (B, T) need B = 1 or the batch size {batch}, "
            f"got {tuple(positions.shape)}"
        )
    return positions.view(-1, 1, seq_len)  # (T,) → (1, 1, T); (B, T) → (B, 1, T)


class MultiHeadAttention(nn.Module):
    """Multi-head self-attention whose positional behaviour comes from a
    :class:`PositionalScheme`.

    The scheme acts at plug-in points 2–4 here (q/k transform, score bias, value term);
    point 1 (embedding) is applied once by the model, before the first block.

    Args:
        d_model: model width d. num_heads: heads H (d must be divisible by H).
        scheme: the positional scheme (may be shared between layers).
        causal: mask future positions (decoder) or not (encoder).
        window: sliding-window attention over the last ``window`` keys (Gemma 3's
            local layers), or None. chunk: chunked attention (Llama 4's RoPE layers),
            or None. See :func:`attention_mask`.
        query_temperature: None or a dict of :func:`posenc.temperature.
            check_query_temperature`: each query multiplied, after the scheme's
            transform, by Llama 4's τ of its position (``{"floor_scale",
            "attn_scale"}``: Llama 4 uses it on its NoPE layers only), Qwen-1's log-n
            (``{"type": "logn", "train_length"}``) or Scalable-Softmax's s_h · ln n
            (``{"type": "ssmax", "init", "bias"}``, n the keys it attends: the
            parameters ``ssmax_scale`` (H,), initialised to ``init``, and with
            ``bias`` ``ssmax_bias`` (H,), initialised to 0, trained with the rest).
        sink: a learned sink logit per head (gpt-oss), the parameter ``sinks`` (H,),
            initialised to 0.

    Raises:
        TypeError / ValueError: sizes not positive integers, d not divisible by H; as
        :func:`check_spans`, :func:`check_query_temperature`, :func:`check_sink`; a
        temperature of positions (Llama 4's, log-n) with a scheme of grid positions
        (``position_axes`` > 1).

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
        window: int | None = None,
        chunk: int | None = None,
        query_temperature: dict | None = None,
        sink: bool = False,
    ) -> None:
        super().__init__()
        self.window, self.chunk = check_spans(causal, window, chunk)
        self.query_temperature = check_query_temperature(query_temperature)
        sink = check_sink("sink", sink)
        self.d_model = check_int("d_model", d_model, minimum=1)
        self.num_heads = check_int("num_heads", num_heads, minimum=1)
        if d_model % num_heads:
            raise ValueError(
                f"d_model must be divisible by num_heads, got {d_model} and {num_heads}"
            )
        self.head_dim = d_model // num_heads
        kind = (self.query_temperature or {}).get("type")
        if kind in ("llama4", "logn") and scheme.position_axes > 1:
            raise ValueError(
                "query_temperature scales queries by their sequence position; scheme "
                f"{scheme.name!r} has {scheme.position_axes}-axis positions"
            )
        if "attend" in scheme.hooks and (not causal or window or chunk or sink):
            raise ValueError(
                f"scheme {scheme.name!r} computes its own causal attention: it takes "
                f"no window, chunk, sink or causal=False, got causal={causal}, "
                f"window={window}, chunk={chunk}, sink={sink}"
            )
        self.scheme = scheme
        self.causal = causal
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.proj = nn.Linear(d_model, d_model, bias=False)
        self.sinks = nn.Parameter(torch.zeros(num_heads)) if sink else None
        if kind == "ssmax":
            init = self.query_temperature["init"]
            self.ssmax_scale = nn.Parameter(torch.full((num_heads,), init))
            bias = self.query_temperature["bias"]
            self.ssmax_bias = nn.Parameter(torch.zeros(num_heads)) if bias else None

    def forward(
        self,
        x: torch.Tensor,
        positions: torch.Tensor,
        *,
        impl: str = "auto",
        need_weights: bool = False,
        cache: LayerKVCache | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Attend: project → position → attend → merge.

        Args:
            x: (B, T, d) float.
            positions: (T,) or (B, T) integer or float positions of the tokens;
                (2, T) or (2, B, T) (row, column) for a scheme of the ``"2d"``
                namespace.
            impl: ``"reference"``, ``"sdpa"``, ``"flex"`` (needs a scheme without a
                score bias or with a ``score_mod`` or ``augment_qk``: then no T×T
                tensor is stored), or ``"auto"`` (sdpa unless weights are needed).
            need_weights: also return the attention weights (reference path only).
            cache: keys and values of earlier tokens (:class:`LayerKVCache`); the new
                ones are appended and attended to with the old. The queries are then the
                last T of the T_k keys (bottom-right causal mask).

        Raises:
            ValueError: as :func:`check_impl` and :func:`head_positions`; a scheme
                whose score bias does not broadcast to (B, H, T_q, T_k).
            TypeError: a cache that is not a :class:`LayerKVCache`.
        """
        impl = check_impl(
            impl, type(self.scheme), sink=self.sinks is not None,
            need_weights=need_weights,
        )
        if cache is not None and not isinstance(cache, LayerKVCache):
            raise TypeError(f"cache must be a LayerKVCache, got {type(cache).__name__}")
        axes = self.scheme.position_axes
        pos = head_positions(positions, *x.shape[:2], axes)  # (B′, 1, T[, A])
        q, k, v = self._project(x)  # (B, H, T, d_h) each
        q, k, v, k_pos = self._position(q, k, v, pos, cache)  # k, v: (B, H, T_k, d_h)
        if "attend" in self.scheme.hooks:  # an attention-level method
            out, weights = self.scheme.attend(
                q, k, v, pos, k_pos, scale=self._attention_options["scale"],
                need_weights=impl == "reference",
            )
        elif impl == "reference":
            out, weights = self._attend_reference(q, k, v, pos, k_pos)
        elif impl == "sdpa":
            out, weights = self._attend_sdpa(q, k, v, pos, k_pos), None
        else:
            out, weights = self._attend_flex(q, k, v, pos, k_pos), None
        return self._merge(out), (weights if need_weights else None)

    def _project(self, x: torch.Tensor) -> torch.Tensor:
        """x (B, T, d) → q, k, v stacked: (3, B, H, T, d_h)."""
        batch, seq_len, _ = x.shape
        qkv = self.qkv(x).view(batch, seq_len, 3, self.num_heads, self.head_dim)
        return qkv.permute(2, 0, 3, 1, 4)  # (B, T, 3, H, d_h) → (3, B, H, T, d_h)

    def _position(self, q, k, v, pos, cache):
        """Plug-in point 2 and the KV cache; then the query temperature.

        A :class:`LayerKVCache` stores keys after the transform, so only the new ones
        are transformed; a cache that ``reassigns_positions`` (StreamingLLM) stores
        them before it and all of them are transformed again at their slots.

        Args:
            pos: the queries' positions, (B′, 1, T) or (B′, 1, T, A).

        Returns:
            ``(q, k, v, k_pos)``: q (B, H, T, d_h); k, v (B, H, T_k, d_h); k_pos the
            keys' positions, (B′, 1, T_k) or (B′, 1, T_k, A).
        """
        if cache is not None and cache.reassigns_positions:  # StreamingLLM
            k, v, k_pos = cache.append(k, v, pos)  # every kept key, untransformed
            q, k = self._transform_qk(q, k, pos, k_pos)
        else:
            q, k = self._transform_qk(q, k, pos, pos)
            k_pos = pos
            if cache is not None:
                k, v, k_pos = cache.append(k, v, pos)  # earlier keys + these
        if self.query_temperature is not None:
            tau = self._query_temperature(pos, q.shape[-2], k.shape[-2])
            q = (q * tau[..., None].to(q.device)).to(q.dtype)
        return q, k, v, k_pos

    def _query_temperature(self, pos, q_len: int, k_len: int) -> torch.Tensor:
        """τ of each query (:mod:`posenc.temperature`), broadcastable to q without
        its last axis: (B′, 1, T) from the positions (Llama 4, log-n) or (1, H, T)
        from the keys each query attends (SSMax)."""
        qt = self.query_temperature
        if qt["type"] == "llama4":
            return llama4_query_scale(
                pos, floor_scale=qt["floor_scale"], attn_scale=qt["attn_scale"]
            )
        if qt["type"] == "logn":
            return logn_query_scale(pos, train_length=qt["train_length"])
        n = attended_keys(
            q_len, k_len, causal=self.causal, window=self.window, chunk=self.chunk
        )
        return ssmax_query_scale(n, self.ssmax_scale, self.ssmax_bias)[None]

    def _transform_qk(self, q, k, q_pos, k_pos):
        """Plug-in point 2, where the scheme declares it; shapes kept."""
        if "transform_qk" not in self.scheme.hooks:
            return q, k
        return self.scheme.transform_qk(q, k, q_pos, k_pos)

    @property
    def _attention_options(self) -> dict:
        """The keyword arguments every backend takes: mask and score scale."""
        scale = 1.0 / math.sqrt(self.scheme.score_scale_factor * self.head_dim)
        return dict(
            causal=self.causal, scale=scale, window=self.window, chunk=self.chunk
        )

    def _score_bias(self, q, k, pos, k_pos) -> torch.Tensor | None:
        """Plug-in point 3 as a tensor broadcastable to (B, H, T_q, T_k), or None."""
        if "score_bias" not in self.scheme.hooks:
            return None
        bias = self.scheme.score_bias(q, k, pos, k_pos)
        if bias is not None:
            shape = torch.Size((*q.shape[:2], q.shape[-2], k.shape[-2]))
            _check_bias(bias, shape, self.scheme.name)
        return bias

    def _attend_reference(self, q, k, v, pos, k_pos):
        """Explicit scores, then plug-in point 4 → (out (B, H, T, d_h), weights)."""
        bias = self._score_bias(q, k, pos, k_pos)
        out, weights = attention_reference(
            q, k, v, bias=bias, sinks=self.sinks, **self._attention_options
        )
        if "value_term" in self.scheme.hooks:
            term = self.scheme.value_term(weights, pos, k_pos)
            if term is not None:
                out = out + term
        return out, weights

    def _attend_sdpa(self, q, k, v, pos, k_pos) -> torch.Tensor:
        """PyTorch's fused attention, the bias as a float mask → (B, H, T, d_h)."""
        bias = self._score_bias(q, k, pos, k_pos)
        return attention_sdpa(
            q, k, v, bias=bias, sinks=self.sinks, **self._attention_options
        )

    def _attend_flex(self, q, k, v, pos, k_pos) -> torch.Tensor:
        """FlexAttention: the bias inside the kernel, with no T×T tensor → (B, H, T,
        d_h). It is folded into q and k (``augment_qk``: Transformer-XL; the values
        keep d_h, the scale stays 1/√d_h) or looked up by a ``score_mod`` from
        O(T)-sized tables. (The sdpa path keeps the bias tensor: torch 2.13's CPU SDPA
        has no fused kernel for a q/k head dim other than v's and would build the T×T
        scores anyway.)"""
        hooks, score_mod = self.scheme.hooks, None
        if "augment_qk" in hooks:
            q, k = self.scheme.augment_qk(q, k, pos, k_pos)  # (B, H, T, d_aug)
        elif "score_mod" in hooks:
            score_mod = self.scheme.score_mod(pos, k_pos, q=q, k=k)
        return attention_flex(q, k, v, score_mod=score_mod, **self._attention_options)

    def _merge(self, out: torch.Tensor) -> torch.Tensor:
        """Heads (B, H, T, d_h) → (B, T, d), then the output projection."""
        batch, _, seq_len, _ = out.shape
        out = out.transpose(1, 2).reshape(batch, seq_len, self.d_model)
        return self.proj(out)
