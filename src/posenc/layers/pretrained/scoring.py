"""Scoring text with a transformers causal LM: the loss of each token, in one pass,
through a StreamingLLM cache, or with the window re-computed (the cores are
:mod:`posenc.layers.losses`).

Shapes:
    T tokens of one sequence: input_ids (T,) → the loss at every position (T − 1,) in
    nats (the first token has no prediction).
"""

from __future__ import annotations

import torch

from ..._checks import check_int
from ..kv_cache import StreamingKVCache
from ..losses import batched_losses, stream_losses, window_recompute_losses
from .swap import _attention_layers, swap_rope


@torch.no_grad()
def token_losses(
    model: torch.nn.Module, input_ids: torch.Tensor, *, chunk: int = 2048
) -> torch.Tensor:
    """The next-token loss at every position of one sequence, in nats, without the (T,
    vocabulary) logits in memory at once.

    Args:
        model: a causal language model with ``.model`` (the decoder) and ``.lm_head``.
        input_ids: int64 (T,) or (1, T) token ids.
        chunk: positions per slice of the output layer.

    Returns:
        float32 tensor (T − 1,): entry t is −log p(token t+1 | tokens 0 … t).

    Raises:
        ValueError: fewer than 2 tokens, a batch of more than one sequence, or chunk <
            1.
    """
    ids = input_ids.reshape(1, -1) if input_ids.dim() == 1 else input_ids  # (1, T)
    if ids.dim() != 2 or ids.shape[0] != 1 or ids.shape[1] < 2:
        raise ValueError(
            "input_ids must be one sequence of at least 2 tokens, shape (T,) or "
            f"(1, T), got {tuple(input_ids.shape)}"
        )
    chunk = check_int("chunk", chunk, minimum=1)
    ids = ids.to(next(model.parameters()).device)
    hidden = model.model(ids).last_hidden_state[0, :-1]  # (T − 1, d)
    # the output layer slice by slice: (chunk, d) → (chunk, V)
    return batched_losses(
        lambda h: model.lm_head(h).float(), hidden, ids[0, 1:], rows=chunk
    )


@torch.no_grad()
def streaming_token_losses(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    *,
    sink_tokens: int,
    window: int,
    inv_freq: torch.Tensor | None = None,
    cache: StreamingKVCache | None = None,
) -> torch.Tensor:
    """The next-token loss at every position when the model reads ``input_ids``
    through a StreamingLLM cache (Xiao et al. 2024): the first ``sink_tokens`` and the
    last ``window`` tokens' keys kept, rotated at their slots in the cache.

    The first ``sink_tokens + window`` tokens go in one call, then one token per step.

    Args:
        model: a Llama-style causal LM (SmolLM2). input_ids: int64 (T,), T ≥ 2.
        sink_tokens: S ≥ 0 (0: window attention). window: W ≥ 1.
        inv_freq: as :func:`swap_rope` (default: the model's own frequencies).
        cache: an empty :class:`~posenc.layers.kv_cache.StreamingKVCache` to read
            through instead of a new one with ``sink_tokens`` and ``window`` (e.g. a
            cache with other layers, to compare caches); it must have one layer per
            attention layer.

    Returns:
        float32 (T − 1,) as :func:`token_losses`; the same values while T ≤ S + W.

    Raises:
        ValueError: input_ids not one sequence of ≥ 2 tokens; bad S or W; a cache
        that is not empty.
    """
    ids = input_ids.reshape(-1)
    if input_ids.dim() > 2 or ids.numel() < 2:
        raise ValueError(
            f"input_ids must be one sequence of at least 2 tokens, got shape "
            f"{tuple(input_ids.shape)}"
        )
    if cache is None:
        cache = StreamingKVCache(
            len(_attention_layers(model)), sink_tokens=sink_tokens, window=window
        )
    elif len(cache):
        raise ValueError(f"cache must be empty, it has seen {len(cache)} tokens")
    device = next(model.parameters()).device

    def step(ids_step: torch.Tensor) -> torch.Tensor:  # (t,) → (t, V)
        slots = cache.next_positions(ids_step.numel(), device=device)
        hidden = model.model(
            input_ids=ids_step[None], position_ids=slots[None], use_cache=False
        ).last_hidden_state[0]
        return model.lm_head(hidden).float()

    inputs = ids[:-1].to(device)
    first = min(cache.layers[0].capacity, inputs.numel())
    with swap_rope(model, inv_freq=inv_freq, streaming=cache):
        return stream_losses(step, inputs, ids[1:], first=first)


@torch.no_grad()
def window_recompute_token_losses(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    *,
    window: int,
    batch_size: int = 16,
) -> torch.Tensor:
    """The next-token loss at every position when each token is predicted from its
    last ``window`` tokens encoded afresh at positions 0 … W − 1 (the sliding window
    with re-computation, Xiao et al. 2024, Fig. 1c).

    Args:
        model: a causal LM with ``.model`` and ``.lm_head``. input_ids: int64 (T,).
        window: W ≥ 1. batch_size: windows per forward pass.

    Returns:
        float32 (T − 1,) as :func:`token_losses`.
    """
    window = check_int("window", window, minimum=1)
    batch_size = check_int("batch_size", batch_size, minimum=1)
    ids = input_ids.reshape(-1)
    device = next(model.parameters()).device

    def last_logits(windows: torch.Tensor) -> torch.Tensor:  # (b, W) → (b, V)
        hidden = model.model(input_ids=windows.to(device)).last_hidden_state[:, -1]
        return model.lm_head(hidden).float()

    return window_recompute_losses(
        lambda n: token_losses(model, ids[: n + 1]),  # the first n: one pass
        last_logits,
        ids[:-1],
        ids[1:],
        window=window,
        batch_size=batch_size,
    )
