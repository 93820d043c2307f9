"""Failure 2 of the chapter of failures: query and key rows in Meta's interleaved
order (pairs (2i, 2i + 1), as Meta's Llama checkpoints and GGUF files store them)
loaded into a model that rotates half pairs (i, i + d_h/2), transformers' Llama.

The wrong way, :func:`wrong_load_rows_as_stored`, copies the rows as they are; the
fix permutes them within every head with :func:`posenc.layout.pair_permutation`
(:func:`posenc.layers.pretrained.permute_qk_rows` on a transformers model,
:func:`posenc.layers.surgery.convert_rope_layout` on the book's TinyLM), as
transformers' converter and GGUF loader do.

Shapes: H (query) heads, H_kv key heads, d_h ``head_dim``, d the model width; a
projection is (heads·d_h, d); T tokens, V the vocabulary.
"""

from __future__ import annotations

import math

import torch

from ...layers.pretrained import gguf_tensor, permute_qk_rows
from ...layout import pair_permutation
from ...utils import cpu_float64


def wrong_load_rows_as_stored(model, rows: dict[tuple[int, str], torch.Tensor]) -> None:
    """THE WRONG WAY: copy query and key weights stored in the interleaved row order
    into a half-layout transformers model as they are, in place.

    Args:
        model: a Llama-style transformers model.
        rows: ``(layer, "q" | "k")`` → weight (heads·d_h, d), e.g. from
            :func:`gguf_rows`.
    """
    layers = model.model.layers
    with torch.no_grad():
        for (layer, kind), weight in rows.items():
            proj = getattr(layers[layer].self_attn, f"{kind}_proj")
            proj.weight.copy_(weight.to(proj.weight))


def gguf_rows(name: str, num_layers: int) -> dict[tuple[int, str], torch.Tensor]:
    """The query and key weights of every layer exactly as the GGUF file stores
    them (llama.cpp's interleaved row order), dequantized to float32:
    ``(layer, "q" | "k")`` → (heads·d_h, d)."""
    return {
        (i, kind): gguf_tensor(name, f"blk.{i}.attn_{kind}.weight")
        for i in range(num_layers)
        for kind in ("q", "k")
    }


def _losses_and_predictions(model, ids: torch.Tensor):
    """Next-token losses (T − 1,) in nats and the predicted tokens (T − 1,) of one
    sequence (T,)."""
    with torch.no_grad():
        logits = model(ids[None].to(next(model.parameters()).device)).logits[0, :-1]
    logits = logits.float().cpu()
    losses = torch.nn.functional.cross_entropy(logits, ids[1:], reduction="none")
    return losses, logits.argmax(-1)


def gguf_rows_without_permutation(model, ids: torch.Tensor, name: str = "smollm2"):
    """Failure 2 on a real model: the GGUF file's query and key rows loaded into
    transformers' half-layout model as stored (the wrong way), then permuted with
    :func:`posenc.layers.pretrained.permute_qk_rows` and
    :func:`posenc.layout.pair_permutation` (the fix). The model's weights are
    restored on return.

    Args:
        model: the model ``name`` as :func:`posenc.layers.pretrained.load` loads it.
        ids: int64 (T,) token ids, T ≥ 2 (a few hundred: one forward pass each).
        name: a model with a GGUF file.

    Returns:
        pandas DataFrame, two rows (``"rows as stored"``, ``"rows permuted"``):
        ``perplexity`` on ``ids``, ``agreement`` (the share of positions whose
        predicted next token is the loaded model's) and ``weights equal``
        (whether every q and k projection equals the loaded one).

    Raises:
        ValueError: from :func:`posenc.layers.pretrained.gguf_tensor` for a model
            without a GGUF file.
    """
    import pandas as pd

    attn = [layer.self_attn for layer in model.model.layers]
    loaded = {
        (i, kind): getattr(a, f"{kind}_proj").weight.detach().clone()
        for i, a in enumerate(attn)
        for kind in ("q", "k")
    }
    rows = gguf_rows(name, len(attn))
    rows_out = []
    try:
        wrong_load_rows_as_stored(model, rows)
        for label in ("rows as stored", "rows permuted"):
            if label == "rows permuted":  # the fix: half = interleaved[perm]
                permute_qk_rows(model, pair_permutation(attn[0].head_dim))
            equal = all(
                torch.equal(getattr(attn[i], f"{kind}_proj").weight, w)
                for (i, kind), w in loaded.items()
            )
            losses, predicted = _losses_and_predictions(model, ids)
            rows_out.append((label, losses, predicted, equal))
    finally:
        wrong_load_rows_as_stored(model, loaded)  # back to the loaded weights
    _, _, reference, _ = rows_out[-1]
    return pd.DataFrame(
        [
            {
                "weights": label,
                "perplexity": math.exp(float(cpu_float64(losses).mean())),
                "agreement": float(cpu_float64(predicted == reference).mean()),
                "weights equal": equal,
            }
            for label, losses, predicted, equal in rows_out
        ]
    )
