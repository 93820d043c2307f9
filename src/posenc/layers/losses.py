"""The loss of each token given its context: the one core that every evaluation of the
package scores with, whatever the model (the tiny LM, a transformers model).

A model enters only as a callable that maps a batch of inputs to logits, so the same
three ways of scoring serve :mod:`posenc.layers.train`, :mod:`posenc.layers.streaming`,
:mod:`posenc.experiments.lm_evaluation` and :mod:`posenc.layers.pretrained`:

* :func:`batched_losses` — rows (windows, or positions of one sequence) scored a batch
  at a time, the batch bounded in tokens (:func:`rows_per_batch`) so that memory stays
  bounded at long lengths;
* :func:`stream_losses` — a stream read through a cache: the first ``first`` tokens in
  one call, then one token per step (StreamingLLM, Xiao et al. 2024, §3.2);
* :func:`window_recompute_losses` — each token predicted from its last W tokens encoded
  afresh (the sliding window with re-computation, Xiao et al. 2024, Fig. 1c).

Shapes: B rows, T positions, V the vocabulary. Losses are in nats.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

#: A model as this module sees it: token ids (or hidden states) in, logits out, the
#: vocabulary on the last dimension.
Logits = Callable[[torch.Tensor], torch.Tensor]


def nll(
    logits: torch.Tensor, targets: torch.Tensor, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """−log p(target) of every position, on the logits' device, returned on the CPU.

    Args:
        logits: (N, V) or (B, T, V). targets: int64 (N,) or (B, T), any device.
        dtype: the precision of the softmax (float64 for exact statistics on the CPU).

    Returns:
        ``dtype`` tensor (N,) or (B, T) on the CPU.
    """
    scores = logits.to(dtype).movedim(-1, 1)  # classes on dim 1, as F.cross_entropy
    return F.cross_entropy(
        scores, targets.to(logits.device), reduction="none"
    ).cpu()


def rows_per_batch(
    row_tokens: int, batch_tokens: int, max_rows: int | None = None
) -> int:
    """Rows of ``row_tokens`` tokens per forward pass: as many as fit in
    ``batch_tokens`` tokens, at most ``max_rows``, at least one."""
    rows = batch_tokens // row_tokens
    if max_rows is not None:
        rows = min(max_rows, rows)
    return max(1, rows)


def batched_losses(
    logits_of: Logits,
    inputs: torch.Tensor,
    targets: torch.Tensor,
    *,
    rows: int,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """The losses of ``targets`` given ``inputs``, scored ``rows`` rows at a time.

    Args:
        logits_of: maps a slice ``inputs[i : i + rows]`` to its logits, (b, V) per
            row of ``targets`` shape (b,), or (b, T, V) for targets (b, T).
        inputs: (N, ...) on any device (``logits_of`` moves it). targets: (N,) or
            (N, T) int64. rows: ≥ 1. dtype: as :func:`nll`.

    Returns:
        ``dtype`` (N,) or (N, T) on the CPU.
    """
    return torch.cat(
        [
            nll(logits_of(inputs[i : i + rows]), targets[i : i + rows], dtype)
            for i in range(0, inputs.shape[0], rows)
        ]
    )


def stream_losses(
    step: Logits,
    inputs: torch.Tensor,
    targets: torch.Tensor,
    *,
    first: int,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """The losses of a stream read through a cache: ``inputs[:first]`` in one call
    (nothing is evicted yet), then one token per step, as a decoder reads.

    Args:
        step: maps the next (t,) token ids to their (t, V) logits, updating the
            model's cache. inputs: int64 (T,). targets: int64 (T,). first: ≥ 1 (the
            cache's capacity, at most T). dtype: as :func:`nll`.

    Returns:
        ``dtype`` (T,) on the CPU.
    """
    steps = [(0, first)] + [(t, t + 1) for t in range(first, inputs.numel())]
    logits = torch.cat([step(inputs[start:stop]) for start, stop in steps])
    return nll(logits, targets, dtype)


def window_recompute_losses(
    prefix_losses: Callable[[int], torch.Tensor],
    last_logits: Logits,
    inputs: torch.Tensor,
    targets: torch.Tensor,
    *,
    window: int,
    batch_size: int,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """The losses when token t + 1 is predicted from tokens ``max(0, t − W + 1) … t``
    encoded afresh at positions 0 … (at most W − 1).

    Args:
        prefix_losses: ``prefix_losses(n)`` gives the (n,) losses of the first n
            targets, each seeing its whole prefix (one forward pass: n ≤ W).
        last_logits: maps (b, W) windows to the (b, V) logits of their last position.
        inputs, targets: int64 (T,). window: W ≥ 1. batch_size: windows per pass.
        dtype: as :func:`nll`.

    Returns:
        (T,) on the CPU.
    """
    head = min(window, inputs.numel())
    losses = [prefix_losses(head)]
    if inputs.numel() > head:
        windows = inputs.unfold(0, window, 1)[1:]  # (T − W, W): ends at t = W … T − 1
        losses.append(
            batched_losses(
                last_logits, windows, targets[head:], rows=batch_size, dtype=dtype
            )
        )
    return torch.cat(losses)


__all__ = [
    "batched_losses",
    "nll",
    "rows_per_batch",
    "stream_losses",
    "window_recompute_losses",
]
