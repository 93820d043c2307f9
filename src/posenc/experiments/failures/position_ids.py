"""Failures 7 and 9 of the chapter of failures: positions that do not start where the
text starts.

* :func:`left_padding_failure` — a left-padded batch run with ``arange(T)`` positions
  (what a transformers ``forward`` uses when it is given no ``position_ids``) against
  :func:`posenc.layers.masks.padded_positions`;
* :func:`packing_failure` — documents packed into one row, with and without positions
  that restart at every document (:func:`posenc.layers.masks.packed_positions`) and a
  mask that stops attention across documents (:func:`posenc.layers.masks.
  document_mask`);
* :func:`mrope_continuation_failure` — text generated after an image in Qwen2-VL's
  M-RoPE, continued from the token count instead of from the largest id + 1
  (:func:`posenc.rope_nd.mrope_next_positions`, transformers' ``rope_deltas``).

Models are transformers causal LMs (SmolLM2 for the chapter, tiny random ones in the
tests), called as ``model(input_ids=, attention_mask=, position_ids=)``. Shapes: B
rows, T columns, V vocabulary.
"""

from __future__ import annotations

import torch

from ...layers.losses import nll
from ...layers.masks import document_mask, padded_positions, packed_positions
from ...rope_nd import apply_mrope, mrope_next_positions, mrope_positions


def _logits(model, ids, *, mask=None, positions=None) -> torch.Tensor:
    """(B, T) ids → (B, T, V) float32 logits on the CPU."""
    device = next(model.parameters()).device
    to = (lambda t: None if t is None else t.to(device))  # noqa: E731
    out = model(input_ids=to(ids), attention_mask=to(mask), position_ids=to(positions))
    return out.logits.float().cpu()


def _check_token_rows(name: str, rows) -> list[torch.Tensor]:
    rows = list(rows)
    if len(rows) < 2 or any(
        not isinstance(r, torch.Tensor) or r.dim() != 1 or r.numel() < 2
        or r.is_floating_point()
        for r in rows
    ):
        raise ValueError(
            f"{name} must be at least two 1-D integer tensors of at least 2 token ids"
        )
    return rows


@torch.no_grad()
def left_padding_failure(model, rows, *, pad_id: int = 0):
    """Failure 7a: a left-padded batch with the wrong positions.

    Every row is scored three ways: alone (the reference), in a left-padded batch with
    ``arange(T)`` positions (the wrong way: each row starts at its number of pads) and
    in the same batch with :func:`~posenc.layers.masks.padded_positions` (the fix).
    The padding mask is right in both batches; only the positions differ.

    Args:
        model: a transformers causal LM. rows: ≥ 2 int64 (n_b,) token ids of
            different lengths. pad_id: the id written on the pads (the mask hides it).

    Returns:
        A DataFrame, one row per text: ``tokens``, ``pads``, the mean next-token loss
        (nats) ``alone``, ``arange`` and ``padded_positions``, and the largest
        |Δ logit| of each batch way against the row alone (``arange_max_dlogit``,
        ``fix_max_dlogit``).

    Raises:
        ValueError: fewer than two rows, or a row not 1-D integer of ≥ 2 tokens.
    """
    import pandas as pd

    rows = _check_token_rows("rows", rows)
    width = max(r.numel() for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for b, r in enumerate(rows):
        ids[b, width - r.numel() :], mask[b, width - r.numel() :] = r, 1
    # the wrong way: transformers' default, positions 0 … T − 1 for every row
    wrong = _logits(model, ids, mask=mask, positions=torch.arange(width)[None])
    right = _logits(model, ids, mask=mask, positions=padded_positions(mask))
    table = []
    for b, r in enumerate(rows):
        alone = _logits(model, r[None])[0]  # (n_b, V)
        cols = slice(width - r.numel(), width)
        losses = {
            name: float(nll(x[:-1], r[1:], torch.float64).mean())
            for name, x in (("alone", alone), ("arange", wrong[b, cols]),
                            ("padded_positions", right[b, cols]))
        }
        table.append({
            "tokens": r.numel(), "pads": width - r.numel(), **losses,
            "arange_max_dlogit": float((wrong[b, cols] - alone).abs().max()),
            "fix_max_dlogit": float((right[b, cols] - alone).abs().max()),
        })
    return pd.DataFrame(table)


#: The four ways :func:`packing_failure` packs documents: (positions, mask).
PACKING_WAYS = {
    "continuous positions, causal mask": ("continuous", "causal"),
    "reset positions, causal mask": ("reset", "causal"),
    "continuous positions, document mask": ("continuous", "document"),
    "reset positions, document mask (fix)": ("reset", "document"),
}


def _additive(allowed: torch.Tensor) -> torch.Tensor:
    """A bool (T, T) mask as the (1, 1, T, T) float mask transformers adds to the
    scores (0 where allowed, the dtype's minimum elsewhere)."""
    blocked = torch.finfo(torch.float32).min
    return torch.zeros(allowed.shape).masked_fill(~allowed, blocked)[None, None]


@torch.no_grad()
def packing_failure(model, documents):
    """Failure 7b: documents packed into one row without restarting positions or
    without cutting attention at their boundaries.

    The documents are concatenated into one row and scored four ways
    (:data:`PACKING_WAYS`): positions continuous or restarted at each document
    (:func:`~posenc.layers.masks.packed_positions`), attention causal over the whole
    row or within each document (:func:`~posenc.layers.masks.document_mask`). The
    reference is each document run alone. The causal ways pass an explicit all-ones
    padding mask: given ``position_ids`` that restart and no mask, transformers 5.23
    would detect the packing and build the document mask itself.

    Args:
        model: a transformers causal LM. documents: ≥ 2 int64 (n_k,) token ids.

    Returns:
        A DataFrame, one row per way: ``loss`` the mean next-token loss (nats) over
        the documents after the first (inside each document: its first token is not
        predicted), ``alone`` the same for the documents run alone, and
        ``max_dloss`` the largest |Δ loss| of a token against its document alone.

    Raises:
        ValueError: fewer than two documents, or one not 1-D integer of ≥ 2 tokens.
    """
    import pandas as pd

    documents = _check_token_rows("documents", documents)
    row = torch.cat(documents)[None]  # (1, T)
    doc_ids = torch.cat([torch.full((d.numel(),), k) for k, d in enumerate(documents)])
    alone = torch.cat(
        [nll(_logits(model, d[None])[0, :-1], d[1:], torch.float64)
         for d in documents[1:]]
    )
    # the predictions inside documents 1, 2, …: not the first token of each
    inside = torch.cat(
        [(doc_ids == k).nonzero()[:-1, 0] for k in range(1, len(documents))]
    )
    positions = {"continuous": torch.arange(row.shape[1])[None],
                 "reset": packed_positions(doc_ids)[None]}
    masks = {"causal": torch.ones_like(row),
             "document": _additive(document_mask(doc_ids))}
    table = []
    for way, (pos, mask) in PACKING_WAYS.items():
        logits = _logits(model, row, mask=masks[mask], positions=positions[pos])[0]
        losses = nll(logits[inside], row[0, inside + 1], torch.float64)
        table.append({"way": way, "loss": float(losses.mean()),
                      "alone": float(alone.mean()),
                      "max_dloss": float((losses - alone).abs().max())})
    return pd.DataFrame(table).set_index("way")


def mrope_continuation_failure(
    segments,
    num_new: int = 4,
    *,
    mrope_section=(16, 24, 24),
    base: float = 1_000_000.0,
    seed: int = 0,
) -> dict:
    """Failure 9: text generated after an image, positioned by the token count.

    The prompt's M-RoPE ids come from :func:`~posenc.rope_nd.mrope_positions`. The
    wrong way gives the k-th new token the id T + k on every axis (the token count, as
    a decoder with a 1-D position counter does); the right way continues from the
    largest id + 1 (:func:`~posenc.rope_nd.mrope_next_positions`, which transformers
    reaches as T + k + ``rope_deltas``). Random queries and keys show what the gap
    does to the scores of the new tokens against the prompt.

    Args:
        segments: the prompt, as :func:`~posenc.rope_nd.mrope_positions` takes it
            (text runs and (t, h, w) grids). num_new: new text tokens, ≥ 1.
        mrope_section, base: Qwen2-VL's (16, 24, 24) and 1e6 (d_h = 128).
        seed: for the random q and k (one head, unit-variance entries).

    Returns:
        A dict: ``tokens`` T; ``rope_deltas`` (largest id + 1 − T);
        ``wrong_ids``, ``right_ids`` (lists of the new tokens' temporal ids);
        ``max_score_error`` the largest |score_wrong − score_right| of a new
        token's query against a prompt key, and ``score_scale`` the largest
        |score_right| (scores q·k/√d_h).

    Raises:
        ValueError: bad segments (as :func:`mrope_positions`), num_new < 1.
    """
    prompt = mrope_positions(segments)  # (3, T)
    tokens = prompt.shape[1]
    right = mrope_next_positions(prompt, num_new)  # (3, num_new)
    wrong = torch.arange(tokens, tokens + num_new).expand(3, -1)  # the token count
    head_dim = 2 * sum(mrope_section)
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(1, 1, num_new, head_dim, generator=g)
    k = apply_mrope(torch.randn(1, 1, tokens, head_dim, generator=g), prompt,
                    mrope_section, base=base)

    def scores(ids: torch.Tensor) -> torch.Tensor:  # (num_new, T)
        rotated = apply_mrope(q, ids, mrope_section, base=base)
        return (rotated @ k.transpose(-1, -2))[0, 0] / head_dim**0.5

    right_scores = scores(right)
    return {
        "tokens": tokens,
        "rope_deltas": int(prompt.max()) + 1 - tokens,
        "wrong_ids": wrong[0].tolist(),
        "right_ids": right[0].tolist(),
        "max_score_error": float((scores(wrong) - right_scores).abs().max()),
        "score_scale": float(right_scores.abs().max()),
    }
