"""Model surgery on a trained :class:`posenc.layers.model.TinyLM`: the same model with
another RoPE layout, its logits unchanged (:func:`convert_rope_layout`).

Shapes: H heads, d_h head width, r rotated width, d model width.
"""

from __future__ import annotations

import torch

from .._checks import check_choice
from ..layout import pair_permutation
from ..rope import ROPE_LAYOUTS


def convert_rope_layout(model, layout: str):
    """The same trained model for the other RoPE layout: a copy whose scheme uses
    ``layout`` and whose query and key projections have their output rows permuted
    within every head, so that the logits are unchanged
    (:func:`posenc.layout.pair_permutation`: R_half = P R_interleaved Pᵀ).

    Args:
        model: a :class:`posenc.layers.model.TinyLM` with the "rope" scheme.
        layout: ``"half"`` or ``"interleaved"``.

    Returns:
        A new TinyLM in eval mode on the model's device.

    Raises:
        ValueError: if the model's scheme is not "rope", or ``layout`` is unknown.
    """
    layout = check_choice("layout", layout, ROPE_LAYOUTS)
    scheme = model.scheme
    if scheme.name != "rope":
        raise ValueError(
            "convert_rope_layout needs a model with the 'rope' scheme, got "
            f"{scheme.name!r}"
        )
    converted = model.with_scheme_options(layout=layout)
    if layout == scheme.layout:
        return converted
    perm = pair_permutation(scheme.rotary_dim)
    # interleaved → half takes feature perm[i] to place i; half → interleaved is the
    # inverse
    order = perm if layout == "half" else torch.argsort(perm)
    order = torch.cat(
        (order, torch.arange(scheme.rotary_dim, scheme.head_dim))
    )  # unrotated features stay
    heads, d_model = converted.config.num_heads, converted.config.d_model
    with torch.no_grad():
        for block in converted.blocks:
            # (3·d, d) → (3, H, d_h, d): q, k, v rows per head
            weight = block.attn.qkv.weight.view(3, heads, scheme.head_dim, d_model)
            weight[:2] = weight[
                :2, :, order.to(weight.device)
            ]  # queries and keys; values are not rotated
    return converted
