"""Streaming past the training length: window attention, attention sinks and
re-positioned keys (StreamingLLM, Xiao et al. 2024, "Efficient Streaming Language
Models with Attention Sinks", ICLR 2024).

A model that reads an endless stream cannot keep every key: the cache would grow
without bound and, for RoPE, the distances would pass every length seen in training.
Four ways to score a long stream token by token, each a function here:

* :func:`dense_losses` — one forward pass over the whole stream (the keys of every
  earlier token; positions past the training length);
* :func:`streaming_losses` with ``sink_tokens=0`` — *window attention*: a cache of the
  last W tokens, positions re-assigned to cache slots (Xiao et al., Fig. 1b);
* :func:`streaming_losses` with ``sink_tokens=4`` — StreamingLLM: the same window
  plus the first 4 tokens kept for good (Fig. 1d, §3.2);
* :func:`window_recompute_losses` — the sliding window *with re-computation*: each
  token is predicted from its W − 1 predecessors encoded afresh at positions 0 … W−1
  (Fig. 1c; W forward positions per token, the quality baseline).

The cache is :class:`posenc.layers.kv_cache.StreamingKVCache`; keys are stored before
the scheme's transform and re-positioned at every step, so every scheme that acts inside
attention streams (RoPE, ALiBi, T5, ...). A model trained with a learned sink logit
per head (gpt-oss; ``ModelConfig.layers`` with ``"sink": True``) is the alternative to
keeping sink tokens: it streams with ``sink_tokens=0``.
"""

from __future__ import annotations

import torch

from .._checks import check_int
from . import losses
from .losses import nll, stream_losses
from .model import TinyLM


def _check_tokens(tokens: object) -> torch.Tensor:
    if (
        not isinstance(tokens, torch.Tensor)
        or tokens.is_floating_point()
        or tokens.is_complex()
        or tokens.dim() != 1
        or tokens.numel() < 2
    ):
        raise ValueError(
            "tokens must be a 1-D integer tensor of at least 2 token ids, got "
            f"{getattr(tokens, 'dtype', type(tokens))} of shape "
            f"{tuple(getattr(tokens, 'shape', ()))}"
        )
    return tokens


def _device(model: TinyLM) -> torch.device:
    return next(model.parameters()).device


@torch.no_grad()
def dense_losses(model: TinyLM, tokens: torch.Tensor) -> torch.Tensor:
    """Per-token loss of one causal forward pass over the whole stream.

    Args:
        model: a :class:`~posenc.layers.model.TinyLM`. tokens: int64 (T,), T ≥ 2.

    Returns:
        float64 (T − 1,): loss (nats) of token t + 1 given tokens 0 … t.

    Raises:
        ValueError: tokens not a 1-D integer tensor of length ≥ 2; what the model
        raises (a learned table shorter than T).
    """
    tokens = _check_tokens(tokens)
    logits = model(tokens[None, :-1].to(_device(model)))[0]
    return nll(logits.cpu(), tokens[1:], torch.float64)


@torch.no_grad()
def streaming_losses(
    model: TinyLM, tokens: torch.Tensor, *, sink_tokens: int, window: int
) -> torch.Tensor:
    """Per-token loss when the stream is read through a StreamingLLM cache: the first
    ``sink_tokens`` and the last ``window`` tokens kept, positions = cache slots.

    The first ``sink_tokens + window`` tokens are fed in one call (nothing is evicted
    yet), then one token per step, as a decoder reads a stream.

    Args:
        model: a TinyLM whose scheme acts inside attention (not sinusoidal or
            learned). tokens: int64 (T,), T ≥ 2.
        sink_tokens: S ≥ 0 (0 is window attention). window: W ≥ 1.

    Returns:
        float64 (T − 1,) as :func:`dense_losses`; equal to it while T ≤ S + W.

    Raises:
        ValueError: bad tokens or sizes; a scheme that adds to the embeddings.
    """
    tokens = _check_tokens(tokens)
    cache = model.new_streaming_cache(sink_tokens=sink_tokens, window=window)
    inputs = tokens[:-1].to(_device(model))
    return stream_losses(
        lambda ids: model(ids[None], cache=cache)[0].cpu(),  # (t,) → (t, V)
        inputs,
        tokens[1:],
        first=min(cache.layers[0].capacity, inputs.numel()),
        dtype=torch.float64,
    )


@torch.no_grad()
def window_recompute_losses(
    model: TinyLM, tokens: torch.Tensor, *, window: int, batch_size: int = 256
) -> torch.Tensor:
    """Per-token loss of the sliding window with re-computation: token t + 1 is
    predicted from tokens ``max(0, t − W + 1) … t``, encoded afresh at positions
    0 … (at most W − 1), so that no position ever exceeds the window.

    Args:
        model: any TinyLM. tokens: int64 (T,), T ≥ 2. window: W ≥ 1.
        batch_size: windows per forward pass.

    Returns:
        float64 (T − 1,) as :func:`dense_losses`.

    Raises:
        ValueError: bad tokens or window.
    """
    tokens = _check_tokens(tokens)
    window = check_int("window", window, minimum=1)
    batch_size = check_int("batch_size", batch_size, minimum=1)
    device = _device(model)
    inputs, targets = tokens[:-1], tokens[1:]

    def prefix_losses(n: int) -> torch.Tensor:  # the first n see their whole prefix
        logits = model(inputs[None, :n].to(device))[0]
        return nll(logits.cpu(), targets[:n], torch.float64)

    return losses.window_recompute_losses(
        prefix_losses,
        lambda windows: model(windows.to(device))[:, -1].cpu(),  # (b, W) → (b, V)
        inputs,
        targets,
        window=window,
        batch_size=batch_size,
        dtype=torch.float64,
    )
