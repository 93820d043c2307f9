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


# --------------------------------------------------------------------------------------
# Positions and masks of a padded or packed batch
# --------------------------------------------------------------------------------------


def _check_rows(name: str, value: object, *, integer_only: bool) -> torch.Tensor:
    """A (T,) or (B, T) tensor: a 0/1 or bool mask, or integer ids if integer_only.
    Each rule has its own message: the shape, the dtype, and for a mask the first
    value that is neither 0 nor 1."""
    kind = "integer document ids" if integer_only else "a 0/1 or bool mask"
    if not isinstance(value, torch.Tensor):
        raise TypeError(
            f"{name} must be a tensor of {kind}, got {type(value).__name__}"
        )
    if value.dim() not in (1, 2):
        raise ValueError(
            f"{name} must have shape (T,) or (B, T), got {tuple(value.shape)}"
        )
    if value.is_complex() or (integer_only and value.is_floating_point()):
        raise ValueError(f"{name} must hold {kind}, got dtype {value.dtype}")
    if not integer_only and value.dtype != torch.bool:
        bad = (value != 0) & (value != 1)
        if bool(bad.any()):
            where = tuple(int(i) for i in bad.nonzero()[0])
            raise ValueError(
                f"{name} must be a 0/1 or bool mask (1 on real tokens, 0 on pads): "
                f"got {value[where].item()!r} at index {where}"
            )
    return value


def padded_positions(attention_mask: torch.Tensor) -> torch.Tensor:
    """Positions of a padded batch: each row counts from 0 at its first real token.

    ``cumsum(attention_mask) − 1`` on the real tokens, 0 on the pads (which the mask
    hides). With left padding a row of n real tokens in a batch of width T starts at
    column T − n, so ``arange(T)`` would put its first token at position T − n; this
    gives it position 0, the position it has when run alone. transformers' ``generate``
    does the same (5.23, ``GenerationMixin._prepare_position_ids_for_generation``);
    ``forward`` does not: called on a left-padded batch without ``position_ids`` it
    uses ``arange(T)``.

    Args:
        attention_mask: (B, T) or (T,), 1 (or True) on real tokens, 0 on pads;
            padding may be on either side.

    Returns:
        int64 positions of the mask's shape.

    Raises:
        TypeError: a mask that is not a tensor.
        ValueError: a mask that is not 1-D/2-D, is complex, or holds a value other
            than 0 and 1 (the message names the first such value and its index).
    """
    mask = _check_rows("attention_mask", attention_mask, integer_only=False).long()
    return (mask.cumsum(-1) - 1).masked_fill(mask == 0, 0)


def packed_positions(document_ids: torch.Tensor) -> torch.Tensor:
    """Positions of packed sequences: 0, 1, 2, … restarting at every document.

    Several documents concatenated into one row (packing) each start at position 0,
    as when they are run alone (transformers' ``DataCollatorWithFlattening`` writes
    the same ``position_ids``). Positions alone do not separate the documents:
    attention must also be cut at their boundaries (:func:`document_mask`).

    Args:
        document_ids: (T,) or (B, T) integer ids, equal within a document and
            changing at each document start (e.g. ``[0, 0, 0, 1, 1, 2]``).

    Returns:
        int64 positions of the ids' shape.

    Raises:
        TypeError: ids that are not a tensor.
        ValueError: ids that are not 1-D/2-D integers.
    """
    ids = _check_rows("document_ids", document_ids, integer_only=True)
    index = torch.arange(ids.shape[-1], device=ids.device).expand_as(ids)
    start = torch.ones_like(ids, dtype=torch.bool)
    start[..., 1:] = ids[..., 1:] != ids[..., :-1]
    # the index of each token's document start, carried forward by a running max
    first = torch.where(start, index, torch.zeros_like(index)).cummax(-1).values
    return index - first


def document_mask(document_ids: torch.Tensor) -> torch.Tensor:
    """Causal attention within each packed document: query i may attend to key j iff
    j ≤ i and both belong to the same document (a block-diagonal causal mask, as
    transformers builds from packed ``position_ids``: 5.23, ``masking_utils.
    find_packed_sequence_indices`` and ``packed_sequence_mask_function``).

    Args:
        document_ids: (T,) or (B, T) integer ids, as :func:`packed_positions`.

    Returns:
        bool (T, T) or (B, T, T), True where a query may attend.

    Raises:
        TypeError: ids that are not a tensor.
        ValueError: ids that are not 1-D/2-D integers.
    """
    ids = _check_rows("document_ids", document_ids, integer_only=True)
    same = ids[..., :, None] == ids[..., None, :]
    return same & causal_mask(ids.shape[-1], ids.shape[-1], device=ids.device)
