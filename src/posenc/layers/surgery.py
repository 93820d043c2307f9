"""Model surgery: the same model with another RoPE layout (:func:`convert_rope_layout`),
for the book's :class:`posenc.layers.model.TinyLM` and for a Llama-family transformers
model. Raw checkpoint tensors are converted by :func:`posenc.layout.convert_qk_layout`,
which both paths use.

Shapes: H heads, d_h head width, r rotated width, d model width.
"""

from __future__ import annotations

import copy

import torch

from .._checks import check_choice
from ..layout import convert_qk_layout
from ..rope import ROPE_LAYOUTS


def convert_rope_layout(model, layout: str, *, source: str | None = None):
    """The same model for the other RoPE layout: a copy whose query and key
    projections have their output rows permuted within every head
    (:func:`posenc.layout.convert_qk_layout`: R_half = P R_interleaved Pᵀ), so that
    code rotating in ``layout`` gives the scores the model gave in ``source``.

    Two kinds of model:

    * the book's :class:`~posenc.layers.model.TinyLM` with the "rope" scheme: the
      copy's scheme rotates in ``layout``, so its logits are the model's. ``source``
      is the scheme's layout (passing another one is an error).
    * a Llama-family transformers model (``model.model.layers[i].self_attn`` with
      ``q_proj``, ``k_proj`` and ``head_dim``: Llama, Mistral, Qwen2/3, OLMo 2, ...):
      transformers' code always rotates in ``"half"``, so ``source`` (default
      ``"half"``) says which order the loaded rows are in. A checkpoint in Meta's
      original or GGUF order loaded as it is: ``convert_rope_layout(model, "half",
      source="interleaved")``. To ``"interleaved"``, the copy gives the model's logits
      under :func:`posenc.layers.pretrained.swap_rope` with ``layout="interleaved"``.
      A per-head ``q_norm``/``k_norm`` (Qwen3, OLMo 2) has its weight permuted with
      the rows (its mean of squares does not depend on the order). Only the first
      ``rotary_dim`` rows of each head move (``partial_rotary_factor``).

    The copy doubles the model's memory;
    :func:`posenc.layers.pretrained.permute_qk_rows` permutes a transformers model in
    place.

    Args:
        model: a TinyLM with the "rope" scheme, or a Llama-family transformers model.
        layout: the target layout, ``"half"`` or ``"interleaved"``.
        source: the layout the model's rows are in now (see above).

    Returns:
        A new model in eval mode on the model's device.

    Raises:
        TypeError: a model of another kind (the message names the two it takes and
            points to :func:`posenc.layout.convert_qk_layout` for raw tensors).
        ValueError: a TinyLM whose scheme is not "rope", or a ``source`` other than
            its scheme's layout; an unknown layout; a q_norm/k_norm of another width.
    """
    layout = check_choice("layout", layout, ROPE_LAYOUTS)
    if source is not None:
        source = check_choice("source", source, ROPE_LAYOUTS)
    if hasattr(model, "scheme") and hasattr(model, "with_scheme_options"):
        return _convert_tiny_lm(model, layout, source)
    layers = _llama_attention_layers(model)
    if layers is None:
        raise TypeError(
            "convert_rope_layout takes the book's TinyLM with the 'rope' scheme or a "
            "Llama-family transformers model (model.model.layers[i].self_attn with "
            f"q_proj, k_proj and head_dim); got {type(model).__name__}. For the raw "
            "tensors of a checkpoint use posenc.tools.convert_qk_layout"
        )
    return _convert_transformers(model, layout, source or "half")


def _convert_tiny_lm(model, layout: str, source: str | None):
    scheme = model.scheme
    if scheme.name != "rope":
        raise ValueError(
            "convert_rope_layout needs a model with the 'rope' scheme, got "
            f"{scheme.name!r}"
        )
    if source is not None and source != scheme.layout:
        raise ValueError(
            f"this TinyLM rotates in {scheme.layout!r}; source must be None or "
            f"{scheme.layout!r}, got {source!r}"
        )
    converted = model.with_scheme_options(layout=layout)
    heads, d_model = converted.config.num_heads, converted.config.d_model
    with torch.no_grad():
        for block in converted.blocks:
            # (3·d, d): the rows of q, k and v; values are not rotated
            q_k = block.attn.qkv.weight[: 2 * d_model]
            q_k.copy_(
                convert_qk_layout(
                    q_k,
                    num_heads=2 * heads,
                    head_dim=scheme.head_dim,
                    rotary_dim=scheme.rotary_dim,
                    source=scheme.layout,
                    target=layout,
                )
            )
    return converted


def _llama_attention_layers(model) -> list | None:
    """The self-attention modules of a Llama-family model, or None."""
    layers = getattr(getattr(model, "model", model), "layers", None)
    if layers is None or not hasattr(model, "config"):
        return None
    attentions = [getattr(layer, "self_attn", None) for layer in layers]
    keys = ("q_proj", "k_proj", "head_dim")
    if not attentions or not all(
        a is not None and all(hasattr(a, key) for key in keys) for a in attentions
    ):
        return None
    return attentions


def _convert_transformers(model, layout: str, source: str):
    # here, not at the top: the pretrained package also holds the wheel fetcher, whose
    # imports a lean install (torch and numpy alone) does not have
    from .pretrained.swap import rope_config

    converted = copy.deepcopy(model).eval()
    rotary_dim = rope_config(model)["rotary_dim"]
    with torch.no_grad():
        for attn in _llama_attention_layers(converted):
            for proj, norm in ((attn.q_proj, "q_norm"), (attn.k_proj, "k_norm")):
                tensors = [proj.weight, proj.bias]
                norm_weight = getattr(getattr(attn, norm, None), "weight", None)
                if norm_weight is not None:
                    _check_norm(norm, norm_weight, proj.weight.shape[0], attn.head_dim)
                    tensors.append(norm_weight)
                for tensor in (t for t in tensors if t is not None):
                    moved = convert_qk_layout(
                        tensor,
                        num_heads=tensor.shape[0] // attn.head_dim,  # a norm: 1 head
                        head_dim=attn.head_dim,
                        rotary_dim=rotary_dim,
                        source=source,
                        target=layout,
                    )
                    tensor.copy_(moved)
    return converted


def _check_norm(name: str, weight: torch.Tensor, rows: int, head_dim: int) -> None:
    """A q_norm/k_norm over one head (Qwen3) or over all of the projection's rows
    (OLMo 2); another width would not follow the rows."""
    if weight.dim() != 1 or weight.shape[0] not in (head_dim, rows):
        raise ValueError(
            f"{name}.weight has shape {tuple(weight.shape)}; convert_rope_layout "
            f"permutes a norm over one head ({head_dim},) or over the projection's "
            f"rows ({rows},) only"
        )
