"""Language-modelling evaluation of the length-generalization study
(:mod:`posenc.experiments.study`): validation documents scored block by block at several
window lengths, by the sliding-window and the matched protocol.
"""

from __future__ import annotations

from collections import defaultdict

import torch

from ..layers.data import random_positions
from ..layers.losses import batched_losses, rows_per_batch
from ..layers.model import TinyLM
from ..utils import cpu_float64
from .study_grid import MULTIPLES

@torch.no_grad()
def window_losses(
    model: TinyLM,
    documents: list[torch.Tensor],
    train_length: int,
    multiples=MULTIPLES,
    *,
    block_every: int = 1,
    tokens_per_batch: int = 16384,
    drawn_positions: int | None = None,
    seed: int = 0,
) -> dict:
    """Score validation documents block by block at several window lengths.

    Each document's next-byte targets are cut into blocks of L = ``train_length``
    bytes; every ``block_every``-th block (counted over the whole split) is scored, at
    each window length E = m·L, by the window of E bytes that ends with the block
    (fewer near the start of a document: windows never cross a document boundary). Only
    the block's L bytes are scored, so each byte is predicted with between E − L + 1
    and E bytes of context: the sliding-window evaluation of Press et al. (2022, §B.1),
    here with stride L (their §B.2 uses stride 1). A block with at least (max E − L)
    bytes before it in its document (the largest E requested, also where the scheme
    cannot run it) is *matched*: it is scored with exactly E − L preceding bytes at
    every E, so comparing E's on matched blocks changes only the context, never the
    bytes scored.

    Args:
        model: a TinyLM. documents: uint8 tensors, one per file. train_length: L.
        multiples: the E / L values; lengths past the scheme's ``max_positions`` are
            skipped. block_every: score one block in this many. tokens_per_batch:
            forward-pass size.
        drawn_positions: None scores every window at positions 0 … n − 1. An int N
            gives each forward pass positions drawn as a model trained with
            ``TrainConfig.random_positions = N`` saw them (sorted, distinct, from
            0 … N − 1: :func:`~posenc.layers.data.random_positions`), as Ruoss et al.
            (2023) evaluate; the draws come from a generator seeded with ``seed``.

    Returns:
        ``{"sliding": {E: mean loss}, "matched": {E: mean loss}, "blocks": n scored,
        "matched_blocks": n matched, "bytes": bytes scored, "position": list, mean loss
        at each position of the full-length windows of the largest E}`` (nats).
    """
    limit = model.max_positions
    lengths = [m * train_length for m in multiples]
    # matched blocks are those with room for the largest *requested* window, also for a
    # scheme that cannot run it (a learned table), so that every scheme's matched set
    # is the same
    blocks = scored_blocks(documents, train_length, max(lengths), block_every)
    lengths = [e for e in lengths if limit is None or e <= limit]
    is_matched = torch.tensor([m for _, _, m in blocks])
    sliding, matched, position = {}, {}, None
    generator = torch.Generator().manual_seed(seed)
    for E in lengths:
        block_loss, position_loss = score_at_length(
            model, documents, blocks, E, train_length, tokens_per_batch,
            drawn_positions=drawn_positions, generator=generator,
        )
        sliding[E] = float(block_loss.mean())
        if is_matched.any():
            matched[E] = float(block_loss[is_matched].mean())
        if E == max(lengths) and position_loss is not None:
            position = position_loss.tolist()
    return {
        "sliding": sliding,
        "matched": matched,
        "blocks": len(blocks),
        "matched_blocks": int(sum(m for _, _, m in blocks)),
        "bytes": len(blocks) * train_length,
        "position": position,
    }


def scored_blocks(
    documents: list[torch.Tensor], train_length: int, longest: int, block_every: int
) -> list[tuple[int, int, bool]]:
    """The blocks :func:`window_losses` scores: ``(document, end of the block's
    targets, matched)`` for every ``block_every``-th block of L = ``train_length``
    targets over the whole split; matched when at least ``longest`` − L bytes precede
    the block in its document."""
    blocks, counter = [], 0
    for d, doc in enumerate(documents):
        for end in range(train_length, doc.numel(), train_length):
            if counter % block_every == 0:
                blocks.append((d, end, end - train_length >= longest - train_length))
            counter += 1
    return blocks


def score_at_length(
    model: TinyLM,
    documents: list[torch.Tensor],
    blocks: list[tuple[int, int, bool]],
    E: int,
    train_length: int,
    tokens_per_batch: int,
    *,
    drawn_positions: int | None = None,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Score every block of :func:`scored_blocks` at window length E.

    The windows are grouped by length (fewer than E bytes near a document's start), so
    that each forward pass holds windows of one length, at most ``tokens_per_batch``
    tokens; with ``drawn_positions`` each pass draws its positions (see
    :func:`window_losses`) from ``generator``.

    Returns:
        Each block's mean loss over its L = ``train_length`` bytes, float64
        (n_blocks,), scored by the window of (at most) E bytes that ends with it; and
        the mean loss at each position, float64 (E,), of the full-length windows (None
        when no window has E bytes). Nats.
    """
    device = next(model.parameters()).device
    windows = defaultdict(list)  # window length -> [(doc, start, block index)]
    for i, (d, end, _) in enumerate(blocks):
        start = max(0, end - E)
        windows[end - start].append((d, start, i))
    block_loss = torch.empty(len(blocks), dtype=torch.float64)
    position_loss = None
    for length, items in windows.items():
        seqs = torch.stack([documents[d][s : s + length + 1] for d, s, _ in items])
        seqs = seqs.long()  # (n, length + 1): inputs and the next-byte targets
        rows = rows_per_batch(length, tokens_per_batch)

        def logits_of(x, length=length):  # (b, length) → (b, length, V)
            if drawn_positions is None:
                return model(x.to(device)).float()
            drawn = random_positions(
                length, drawn_positions, generator=generator, device=device
            )
            return model(x.to(device), drawn).float()

        loss = cpu_float64(
            batched_losses(logits_of, seqs[:, :-1], seqs[:, 1:], rows=rows)
        )
        block_loss[[i for _, _, i in items]] = loss[:, -train_length:].mean(1)
        if length == E:  # summed batch by batch, as the stored results were
            position_sum = sum(batch.sum(0) for batch in loss.split(rows))
            position_loss = position_sum / loss.shape[0]
    return block_loss, position_loss
