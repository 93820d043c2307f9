"""The rows of a batch in the remapped attentions (:mod:`.remapped_attention`):
positions one row per sequence, and the padding mask that drops each row's pad keys.

A padded batch is the normal case in serving: each row holds one sequence, left- or
right-padded to the batch's width T_k, with transformers' ``attention_mask`` (B, T_k),
1 on real tokens and 0 on pads (a column per key, a KV cache's keys included), and
positions (B, T_k) that count each row's real tokens from 0
(:func:`posenc.layers.masks.padded_positions`). SelfExtend, ReRoPE and DCA pick a
pair's case from the *positions* of its query and key, so a pad key (position 0 under
``padded_positions``) would look like a real key at position 0 to every query; the mask
is what keeps it out.

Two ways to honour the mask, the same softmax:

* the fast paths drop each row's pad columns before attending (:func:`per_sequence`
  with ``compact=True``): the row's real queries against its real keys, at their
  positions — the row exactly as it runs alone without its pads, on that path's own
  kernels (a left-padded prefill on consecutive positions still takes the fused CPU
  path), with no mask tensor and no work on the pads;
* the naive references keep the full (T_q, T_k) matrices and set the pad columns to
  −inf before the softmax in every case (:func:`mask_scores`), so that their weights
  are zero there.

A query whose own column is a pad gets zeros, as transformers 5.23's ``sdpa`` path gives
a left-padded row's pads (every key of such a row is masked, and PyTorch's
``scaled_dot_product_attention`` returns zeros for a fully masked row;
tests/test_remap.py checks it against ``sdpa_attention_forward``). A right pad's row is
zeros here too, where transformers' mixes the real keys before it; a model's loss and
generation never read a pad's output.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..remap import as_index_positions
from .masks import _check_rows

__all__ = ["key_mask", "mask_scores", "masked_weights"]


def key_mask(
    attention_mask: torch.Tensor | None, q: torch.Tensor, k: torch.Tensor
) -> torch.Tensor | None:
    """An ``attention_mask`` checked and made the keys' boolean mask.

    Args:
        attention_mask: None, or (B, T_k) 0/1 or bool, 1 (True) on real tokens, 0 on
            pads, as transformers' ``attention_mask``; B = q.shape[0], T_k the keys'.
        q: (B, H, T_q, d_h). k: (B, H, T_k, d_h).

    Returns:
        None when there is no mask or it keeps every key (nothing to drop), else bool
        (B, T_k) on q's device.

    Raises:
        TypeError: a mask that is not a tensor.
        ValueError: a mask that is complex or holds a value other than 0 and 1
            (:func:`posenc.layers.masks.padded_positions`' checks, naming the value
            and its index), or not of shape (B, T_k).
    """
    if attention_mask is None:
        return None
    mask = _check_rows("attention_mask", attention_mask, integer_only=False)
    batch = q.shape[0] if q.dim() == 4 else None
    if batch is None or tuple(mask.shape) != (batch, k.shape[-2]):
        raise ValueError(
            f"attention_mask must have shape (B, T_k) = ({batch}, {k.shape[-2]}), one "
            "row per sequence and a column per key (1 on real tokens, 0 on pads, as "
            f"transformers' attention_mask), with q (B, H, T_q, d_h); got mask "
            f"{tuple(mask.shape)}, q {tuple(q.shape)}"
        )
    keep = mask.to(device=q.device, dtype=torch.bool)
    return None if bool(keep.all()) else keep


def mask_scores(scores: torch.Tensor, keep: torch.Tensor | None) -> torch.Tensor:
    """A reference's full scores (..., T_q, T_k) with the pad keys at −inf, and each
    pad query's row at 0 (finite, so that neither the softmax nor its gradient meets
    a row of −inf; :func:`masked_weights` zeroes that row after the softmax). ``keep``
    (T_k,) bool or None (no mask); the queries are its last T_q columns."""
    if keep is None:
        return scores
    real = keep[keep.shape[0] - scores.shape[-2] :, None]
    return scores.masked_fill(~keep, float("-inf")).masked_fill(~real, 0.0)


def masked_weights(weights: torch.Tensor, keep: torch.Tensor | None) -> torch.Tensor:
    """The softmax of :func:`mask_scores` with each pad query's row set to zeros."""
    if keep is None:
        return weights
    return weights.masked_fill(~keep[keep.shape[0] - weights.shape[-2] :, None], 0.0)


def _row(positions, b: int):
    """Row b's positions: None, the shared (T_k,), or row b (or 0) of (B or 1, T_k)."""
    if not isinstance(positions, torch.Tensor) or positions.dim() == 1:
        return positions
    return positions[b if positions.shape[0] > 1 else 0]


def _compacted(run: Callable, q, k, v, positions, keep: torch.Tensor):
    """``run`` on one row's real keys (``keep`` (T_k,)) and its real queries, at their
    own positions; zeros at the pad queries (and, for a reference's weights, at the
    pad keys). The real queries are the last of the real keys, as the queries are the
    last T_q of the keys."""
    t_q, t_k = q.shape[-2], k.shape[-2]
    key = as_index_positions(t_k if positions is None else positions).to(keep.device)
    if key.shape[0] != t_k:
        raise ValueError(f"positions must have T_k = {t_k} entries, got {key.shape[0]}")
    columns = keep.nonzero()[:, 0]
    queries = keep[t_k - t_q :].nonzero()[:, 0]
    out = q.new_zeros(*q.shape[:-1], v.shape[-1])
    if queries.numel() == 0:
        return out
    result = run(
        q[..., queries, :], k[..., columns, :], v[..., columns, :], key[columns]
    )
    out[..., queries, :] = result
    return out


def per_sequence(
    run: Callable, q, k, v, positions, attention_mask=None, *, compact: bool = True
):
    """``run(q, k, v, positions)`` with 1-D (T_k,) positions: once for (T_k,) or a
    (B, T_k) whose rows are equal, without a mask; otherwise once per sequence, row b
    of the batch with its own row of positions, the outputs (and weights)
    concatenated on the batch axis. With a padding mask (:func:`key_mask`) each row
    runs on its real keys alone (``compact``, the fast paths), or as
    ``run(q, k, v, positions, keep)`` with its keys' mask (the references, which mask
    their scores with :func:`mask_scores`). q, k, v already checked, (B, H, T, d_h)
    for (B, T_k) positions or a mask.

    Raises:
        ValueError: positions neither (T_k,) nor (B or 1, T_k); a bad mask
            (:func:`key_mask`).
    """
    keep = key_mask(attention_mask, q, k)
    per_row = isinstance(positions, torch.Tensor) and positions.dim() != 1
    if keep is None and not per_row:
        return run(q, k, v, positions)
    batch = q.shape[0] if q.dim() >= 3 else None
    if per_row and (
        positions.dim() != 2 or batch is None or positions.shape[0] not in (1, batch)
    ):
        raise ValueError(
            f"positions must have shape (T_k,) or (B, T_k) (one row per sequence, as "
            f"transformers' position_ids) with B = q.shape[0] = {batch} and "
            f"T_k = {k.shape[-2]}; got {tuple(positions.shape)}"
        )
    if keep is None and bool((positions == positions[:1]).all()):
        return run(q, k, v, positions[0])
    rows = []
    for b in range(batch):
        one = (q[b : b + 1], k[b : b + 1], v[b : b + 1], _row(positions, b))
        if keep is None:
            rows.append(run(*one))
        elif compact:
            rows.append(_compacted(run, *one, keep[b]))
        else:
            rows.append(run(*one, keep[b]))
    if isinstance(rows[0], tuple):
        return tuple(torch.cat(parts) for parts in zip(*rows, strict=True))
    return torch.cat(rows)
