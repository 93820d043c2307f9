"""What attention may see and how hard it looks: the causal, sliding-window and chunked
masks (:func:`attention_mask`), attention sinks' checks, and the query temperature of
Llama 4's NoPE layers (:func:`query_temperature_scale`). Used by
:mod:`posenc.layers.attention`.

Shapes:
    B batch, H heads, T_q queries, T_k keys; masks are boolean (T_q, T_k), True where a
    query may attend.
"""

from __future__ import annotations

import math

import torch

from .._checks import check_int


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


def check_window(name: str, value: object) -> int | None:
    """A sliding window or chunk size: None (no limit) or an integer ≥ 1.

    Raises:
        TypeError / ValueError: naming ``name``, the value and the rule.
    """
    return None if value is None else check_int(name, value, minimum=1)


def check_spans(causal: bool, window: object, chunk: object) -> tuple:
    """``(window, chunk)`` checked (:func:`check_window`), and only with causal
    attention (both are defined for decoders here).

    Raises:
        TypeError / ValueError: a bad size; a window or chunk with ``causal=False``.
    """
    window, chunk = check_window("window", window), check_window("chunk", chunk)
    if not causal and (window is not None or chunk is not None):
        raise ValueError(
            "a sliding window or chunk needs causal attention, got "
            f"causal=False with window={window}, chunk={chunk}"
        )
    return window, chunk


def attention_mask(
    q_len: int,
    k_len: int,
    *,
    causal: bool = True,
    window: int | None = None,
    chunk: int | None = None,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Boolean mask ``(q_len, k_len)``, True where query i may attend to key j, for
    causal, sliding-window and chunked attention.

    The queries are the last ``q_len`` of the ``k_len`` keys (bottom-right aligned, as
    in :func:`causal_mask`): query i sits at index ``i′ = i + k_len − q_len``. Then

    * causal: ``j ≤ i′``;
    * ``window`` W (sliding-window attention, Beltagy et al. 2020; Gemma 3's local
      layers): also ``i′ − j < W``, the query and the W − 1 keys before it;
    * ``chunk`` C (Llama 4's chunked attention): also ``⌊i′/C⌋ = ⌊j/C⌋``, keys of
      the query's own chunk of C indices.

    The rules are transformers 5.23's ``sliding_window_overlay`` and
    ``chunked_overlay`` (``masking_utils``), indices counted from the first key.

    Raises:
        ValueError: ``q_len > k_len``; window or chunk not None or ≥ 1; a window or
        chunk without ``causal`` (both are defined for decoders here).
    """
    window, chunk = check_spans(causal, window, chunk)
    if not causal:
        q_len = check_int("q_len", q_len, minimum=0)
        k_len = check_int("k_len", k_len, minimum=0)
        return torch.ones(q_len, k_len, dtype=torch.bool, device=device)
    allowed = causal_mask(q_len, k_len, device=device)
    if window is None and chunk is None:
        return allowed
    query = torch.arange(k_len - q_len, k_len, device=device)[:, None]
    key = torch.arange(k_len, device=device)[None, :]
    if window is not None:
        allowed = allowed & (query - key < window)
    if chunk is not None:
        allowed = allowed & (query // chunk == key // chunk)
    return allowed


def check_sinks(sinks: torch.Tensor | None, num_heads: int) -> None:
    if sinks is not None and (sinks.dim() != 1 or sinks.shape[0] != num_heads):
        raise ValueError(
            f"sinks must have shape (H,) = ({num_heads},), got {tuple(sinks.shape)}"
        )


def query_temperature_scale(
    positions: torch.Tensor, *, floor_scale: float, attn_scale: float
) -> torch.Tensor:
    """Llama 4's attention temperature for its NoPE layers: queries are multiplied by

        τ(p) = 1 + attn_scale · log(1 + ⌊(p + 1) / floor_scale⌋),

    which is 1 for p < floor_scale − 1 and grows like log p after, so that the scores of
    a layer without positions stay sharp when the context grows (transformers 5.23,
    ``Llama4TextAttention.forward``; Llama 4 uses floor_scale 8192, attn_scale 0.1).

    Args:
        positions: integer or float positions, any shape. floor_scale: > 0.
        attn_scale: ≥ 0.

    Returns:
        float32 τ of the positions' shape.
    """
    return (
        torch.log1p(torch.floor((positions.float() + 1.0) / floor_scale)) * attn_scale
        + 1.0
    )


def check_query_temperature(value: object) -> dict | None:
    """None, or a dict with exactly ``floor_scale`` (> 0) and ``attn_scale`` (≥ 0).

    Raises:
        TypeError / ValueError: naming the value and the rule.
    """
    if value is None:
        return None
    if not isinstance(value, dict) or set(value) != {"floor_scale", "attn_scale"}:
        raise ValueError(
            "query_temperature must be None or a dict with the keys 'floor_scale' and "
            f"'attn_scale', got {value!r}"
        )
    floor_scale, attn_scale = value["floor_scale"], value["attn_scale"]
    for name, v in (("floor_scale", floor_scale), ("attn_scale", attn_scale)):
        real = isinstance(v, (int, float)) and not isinstance(v, bool)
        if not real or not math.isfinite(v):
            raise TypeError(
                f"query_temperature[{name!r}] must be a finite real number, got {v!r}"
            )
    if floor_scale <= 0 or attn_scale < 0:
        raise ValueError(
            "query_temperature needs floor_scale > 0 and attn_scale >= 0, got "
            f"floor_scale={floor_scale}, attn_scale={attn_scale}"
        )
    return {"floor_scale": float(floor_scale), "attn_scale": float(attn_scale)}


def check_sink(name: str, value: object) -> bool:
    """A layer's ``sink`` flag: a bool.

    Raises:
        TypeError: naming ``name`` and the value.
    """
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {value!r}")
    return value
