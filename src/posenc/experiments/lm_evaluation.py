"""Language-modelling evaluation of the length-generalization study
(:mod:`posenc.experiments.study`): validation documents scored block by block at several
window lengths, by the sliding-window and the matched protocol.
"""

from __future__ import annotations

from collections import defaultdict

import torch
import torch.nn.functional as F

from ..layers.model import TinyLM
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
    threshold = max(lengths) - train_length
    lengths = [e for e in lengths if limit is None or e <= limit]
    longest = max(lengths)
    device = next(model.parameters()).device
    blocks = []  # (document, end of the block's targets, matched)
    counter = 0
    for d, doc in enumerate(documents):
        targets = doc.numel() - 1
        for end in range(train_length, targets + 1, train_length):
            if counter % block_every == 0:
                blocks.append((d, end, end - train_length >= threshold))
            counter += 1
    sliding, matched, position = {}, {}, None
    for E in lengths:
        windows = defaultdict(list)  # window length -> [(doc, start, block index)]
        for i, (d, end, _) in enumerate(blocks):
            start = max(0, end - E)
            windows[end - start].append((d, start, i))
        block_loss = torch.empty(len(blocks), dtype=torch.float64)
        pos_sum, pos_n = None, 0
        for length, items in windows.items():
            per = max(1, tokens_per_batch // length)
            for j in range(0, len(items), per):
                chunk = items[j : j + per]
                seqs = torch.stack(
                    [documents[d][s : s + length + 1] for d, s, _ in chunk]
                ).long()
                x, y = seqs[:, :-1].to(device), seqs[:, 1:].to(device)
                loss = (
                    F.cross_entropy(
                        model(x).float().transpose(1, 2), y, reduction="none"
                    )
                    .cpu()
                    .double()
                )
                idx = torch.tensor([i for _, _, i in chunk])
                block_loss[idx] = loss[:, -train_length:].mean(1)
                if E == longest and length == E:
                    pos_sum = loss.sum(0) if pos_sum is None else pos_sum + loss.sum(0)
                    pos_n += loss.shape[0]
        is_matched = torch.tensor([m for _, _, m in blocks])
        sliding[E] = float(block_loss.mean())
        if is_matched.any():
            matched[E] = float(block_loss[is_matched].mean())
        if pos_sum is not None:
            position = (pos_sum / pos_n).tolist()
    return {
        "sliding": sliding,
        "matched": matched,
        "blocks": len(blocks),
        "matched_blocks": int(sum(m for _, _, m in blocks)),
        "bytes": len(blocks) * train_length,
        "position": position,
    }
