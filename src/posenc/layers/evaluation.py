"""Scoring a trained :class:`~posenc.layers.model.TinyLM`: the loss of every token of
a text in windows (:func:`token_losses`), the validation loss at one length
(:func:`evaluate`), by position and by length. :mod:`posenc.layers.train` re-exports
these names, where they were first defined."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .._checks import check_int
from ..utils import cpu_float64
from .data import eval_windows
from .losses import batched_losses, rows_per_batch
from .model import TinyLM


@dataclass(frozen=True)
class EvalResult:
    """Validation loss (nats per byte), perplexity (e^loss) and bits per byte at one
    length."""

    seq_len: int
    loss: float
    tokens: int

    @property
    def perplexity(self) -> float:
        return math.exp(self.loss)

    @property
    def bits_per_byte(self) -> float:
        return self.loss / math.log(2)


#: Tokens per forward pass at most when scoring (:func:`token_losses`): the book's
#: small scale scores 16 windows of up to 512 bytes at once, as before; longer windows
#: go in smaller batches (the large scale's 8 × 256 = 2048 bytes, 4 at a time).
EVAL_BATCH_TOKENS = 8192


@torch.no_grad()
def token_losses(
    model: TinyLM,
    data: torch.Tensor,
    seq_len: int,
    *,
    max_tokens: int = 32768,
    batch_size: int = 16,
    batch_tokens: int = EVAL_BATCH_TOKENS,
) -> torch.Tensor:
    """Next-byte cross-entropy (nats) at every position of every evaluation window.

    The first ``max_tokens`` bytes of ``data`` are cut into non-overlapping windows of
    length ``seq_len`` (:func:`posenc.layers.data.eval_windows`) and scored in eval
    mode.

    Args:
        model: a TinyLM. data: uint8 (N,) bytes. seq_len: window length T (may exceed
        the training length). max_tokens: bytes to score. batch_size: windows per
        forward pass, at most; fewer when ``batch_size · seq_len`` would exceed
        ``batch_tokens``, so that memory stays bounded at long lengths (a score
        matrix grows with T²).

    Returns:
        float32 tensor (num_windows, seq_len) on the CPU.

    Raises:
        ValueError: if no window fits; whatever the model raises for the length (a
        learned table shorter than ``seq_len``).
    """
    batch_size = check_int("batch_size", batch_size, minimum=1)
    batch_tokens = check_int("batch_tokens", batch_tokens, minimum=1)
    x_all, y_all = eval_windows(data, seq_len, max_tokens)  # (N, T) each
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        return batched_losses(
            lambda x: model(x.to(device)).float(),  # (b, T) → (b, T, V)
            x_all,
            y_all,
            rows=rows_per_batch(seq_len, batch_tokens, batch_size),
        )
    finally:
        model.train(was_training)


def evaluate(
    model: TinyLM,
    data: torch.Tensor,
    seq_len: int,
    *,
    max_tokens: int = 32768,
    batch_size: int = 16,
) -> EvalResult:
    """Mean next-byte cross-entropy of ``model`` on windows of length ``seq_len``.

    Every position of every window counts (see :func:`token_losses`). Evaluating the
    same text at several lengths is how extrapolation is measured.

    Returns:
        An :class:`EvalResult` (loss in nats per byte, perplexity, bits per byte).

    Raises:
        As :func:`token_losses`.
    """
    losses = token_losses(
        model, data, seq_len, max_tokens=max_tokens, batch_size=batch_size
    )
    return EvalResult(seq_len, float(cpu_float64(losses).mean()), losses.numel())


def loss_by_position(
    model: TinyLM, data: torch.Tensor, seq_len: int, *, max_tokens: int = 32768
) -> torch.Tensor:
    """Mean loss (nats) at each position 0 … seq_len − 1, averaged over the evaluation
    windows:
    where in a long window a model starts to fail. float32 (seq_len,)."""
    return token_losses(model, data, seq_len, max_tokens=max_tokens).mean(dim=0)


def perplexity_by_length(
    model: TinyLM, data: torch.Tensor, lengths, *, max_tokens: int = 32768
) -> dict[int, float]:
    """``{seq_len: validation perplexity}`` for each length, all on the same first
    ``max_tokens`` bytes of ``data``."""
    return {
        int(n): evaluate(model, data, int(n), max_tokens=max_tokens).perplexity
        for n in lengths
    }
