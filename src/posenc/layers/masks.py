"""What attention may see and how hard it looks: the causal, sliding-window and chunked
masks (:func:`attention_mask`), how many keys each query attends
(:func:`attended_keys`, the n of Scalable-Softmax) and attention sinks' checks; the
query temperatures themselves are in :mod:`posenc.temperature` (re-exported here:
``query_temperature_scale`` is Llama 4's). Used by :mod:`posenc.layers.attention`.

Shapes:
    B batch, H heads, T_q queries, T_k keys; masks are boolean (T_q, T_k), True where a
    query may attend.
"""

from __future__ import annotations

import torch

from .._checks import check_int
from ..temperature import check_query_temperature
from ..temperature import llama4_query_scale as query_temperature_scale

__all__ = [
    "attended_keys",
    "attention_mask",
    "causal_mask",
    "check_query_temperature",
    "check_sink",
    "check_sinks",
    "check_spans",
    "check_window",
    "query_temperature_scale",
]


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


def attended_keys(
    q_len: int,
    k_len: int,
    *,
    causal: bool = True,
    window: int | None = None,
    chunk: int | None = None,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """How many keys each query attends: the row sums of :func:`attention_mask`,
    computed in closed form without the (q_len, k_len) mask.

    With the query at index i′ = i + k_len − q_len of the keys: causal, i′ + 1; with a
    window W, min(i′ + 1, W); with a chunk C, (i′ mod C) + 1 (chunked and windowed:
    the smaller); not causal, k_len.

    Returns:
        int64 (q_len,).

    Raises:
        ValueError: as :func:`attention_mask`.
    """
    window, chunk = check_spans(causal, window, chunk)
    q_len = check_int("q_len", q_len, minimum=0)
    k_len = check_int("k_len", k_len, minimum=0)
    if not causal:
        return torch.full((q_len,), k_len, dtype=torch.long, device=device)
    if q_len > k_len:
        raise ValueError(
            f"a causal mask needs q_len <= k_len, got q_len={q_len}, k_len={k_len}"
        )
    query = torch.arange(k_len - q_len, k_len, device=device)
    count = query + 1
    if window is not None:
        count = count.clamp(max=window)
    if chunk is not None:
        count = torch.minimum(count, query % chunk + 1)
    return count


def check_sinks(sinks: torch.Tensor | None, num_heads: int) -> None:
    if sinks is not None and (sinks.dim() != 1 or sinks.shape[0] != num_heads):
        raise ValueError(
            f"sinks must have shape (H,) = ({num_heads},), got {tuple(sinks.shape)}"
        )


def check_sink(name: str, value: object) -> bool:
    """A layer's ``sink`` flag: a bool.

    Raises:
        TypeError: naming ``name`` and the value.
    """
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {value!r}")
    return value
