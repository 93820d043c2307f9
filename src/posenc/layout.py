"""Feature layouts of paired encodings.

Sinusoidal encodings and RoPE both work on *pairs* of features. Two memory layouts are
in use:

* ``"interleaved"``: pair i lives at features (2i, 2i + 1) — Vaswani et al.
  (sinusoidal), RoFormer, GPT-J and Meta's Llama (RoPE);
* ``"concatenated"`` / ``"half"``: pair i lives at features (i, i + d/2) — ``[sin |
  cos]`` tables (Hugging Face's MarianMT port; tensor2tensor, fairseq and the Marian
  toolkit, with other frequencies) and GPT-NeoX / Hugging Face Llama (RoPE).

With the same frequencies they hold the same numbers in a different order;
:func:`pair_permutation` is that order: it converts between the paper's sinusoidal
table and Hugging Face MarianMT's. (tensor2tensor, fairseq and the Marian toolkit use
the frequencies b^(−i/(d/2−1)) instead of the paper's b^(−2i/d): no permutation
converts their tables.)

The same two layouts order the rows of a RoPE model's query and key projections:
Meta's original Llama checkpoints and GGUF files keep each head's rows interleaved,
transformers' Llama keeps them in halves. :func:`convert_qk_layout` converts such a
weight or bias between the two.

Shapes:
    d feature width (even): a table (..., d) keeps its shape; only the order of its last
    axis changes (:func:`pair_permutation` is a (d,) index). A projection's weight
    (H·d_h, d_model) or bias (H·d_h,) keeps its shape; only the order of the rows within
    each of its H heads changes.
"""

from __future__ import annotations

import torch

from ._checks import check_choice, check_even_dim, check_int

#: The two ways RoPE pairs features: ``"half"`` (i, i + r/2) and ``"interleaved"``
#: (2i, 2i + 1). Kept here, not in :mod:`posenc.rope` (which re-exports it), so that
#: importing this module does not import rope: the registry lists schemes in the order
#: their modules are imported (``posenc/__init__.py``), which the chapters' tables
#: follow.
ROPE_LAYOUTS = ("half", "interleaved")


def pair_permutation(dim: int, *, device: torch.device | None = None) -> torch.Tensor:
    """Indices that take the interleaved layout to the half (concatenated) layout.

    ``half = interleaved[..., pair_permutation(dim)]``; the inverse permutation is
    ``torch.argsort(pair_permutation(dim))``.

    Args:
        dim: the (even) number of features.
        device: where to put the index tensor.

    Returns:
        int64 tensor ``(dim,)``: ``[0, 2, 4, ..., dim-2, 1, 3, ..., dim-1]``.

    Raises:
        ValueError: if ``dim`` is not a positive even integer.
    """
    dim = check_even_dim("dim", dim)
    idx = torch.arange(dim, device=device)
    return torch.cat([idx[0::2], idx[1::2]])


def convert_qk_layout(
    weight: torch.Tensor,
    *,
    num_heads: int,
    head_dim: int,
    rotary_dim: int | None = None,
    source: str,
    target: str,
) -> torch.Tensor:
    """A query or key projection's weight or bias, its rows moved from the ``source``
    RoPE layout to the ``target`` one, so that a model rotating in ``target`` gives
    the scores the checkpoint gave in ``source``.

    Within each head, ``"interleaved"`` rotates the feature pairs (2i, 2i + 1) (Meta's
    original Llama checkpoints, GPT-J, GGUF files) and ``"half"`` the pairs (i, i +
    r/2) (transformers' Llama, GPT-NeoX: ``rotate_half``). Interleaved → half takes
    row ``pair_permutation(r)[j]`` of each head to row j (:func:`pair_permutation`);
    half → interleaved is the inverse. Only the first ``rotary_dim`` rows of each head
    rotate (partial rotary), so only they move. The values (``v_proj``) are never
    rotated and need no conversion.

    Interleaved → half is the permutation of transformers' ``permute`` in
    ``models/llama/convert_llama_weights_to_hf.py`` (Meta → transformers) and of
    ``_reverse_permute_weights`` in ``modeling_gguf_pytorch_utils.py`` (GGUF →
    transformers), transformers 5.23; half → interleaved is llama.cpp's ``permute``
    in ``convert_hf_to_gguf.py``.

    Args:
        weight: float tensor, a ``q_proj`` or ``k_proj`` weight (num_heads·head_dim,
            d_model) or its bias (num_heads·head_dim,).
        num_heads: the heads the projection produces: ``num_attention_heads`` for
            ``q_proj``, ``num_key_value_heads`` for ``k_proj`` with grouped-query
            attention.
        head_dim: d_h, the width of one head.
        rotary_dim: r ≤ d_h, the rotated width (even); default d_h. With
            ``partial_rotary_factor`` p it is ``int(head_dim * p)``.
        source: the checkpoint's layout, ``"interleaved"`` or ``"half"``.
        target: the layout of the code that will run it.

    Returns:
        A new tensor of the weight's shape, dtype and device (a copy when source and
        target agree).

    Raises:
        TypeError: weight not a floating-point tensor; a size not an integer.
        ValueError: an unknown layout; weight not 1-D or 2-D; its rows not
            num_heads·head_dim; head_dim or rotary_dim odd; rotary_dim > head_dim.
    """
    source = check_choice("source", source, ROPE_LAYOUTS)
    target = check_choice("target", target, ROPE_LAYOUTS)
    num_heads = check_int("num_heads", num_heads, minimum=1)
    head_dim = check_even_dim("head_dim", head_dim)
    rotary_dim = head_dim if rotary_dim is None else rotary_dim
    rotary_dim = check_even_dim("rotary_dim", rotary_dim)
    if rotary_dim > head_dim:
        raise ValueError(
            f"rotary_dim must be <= head_dim = {head_dim}, got {rotary_dim}"
        )
    _check_projection(weight, num_heads, head_dim)
    if source == target:
        return weight.clone()
    perm = pair_permutation(rotary_dim)
    # interleaved → half: row perm[j] goes to row j; half → interleaved: the inverse
    order = perm if target == "half" else torch.argsort(perm)
    order = torch.cat((order, torch.arange(rotary_dim, head_dim)))  # unrotated stay
    rows = weight.reshape(num_heads, head_dim, *weight.shape[1:])
    return rows[:, order.to(weight.device)].reshape(weight.shape)


def _check_projection(weight: object, num_heads: int, head_dim: int) -> None:
    """A (num_heads·head_dim, d_model) weight or (num_heads·head_dim,) bias."""
    if not isinstance(weight, torch.Tensor) or not weight.is_floating_point():
        raise TypeError(
            "weight must be a floating-point tensor (a q_proj or k_proj weight or "
            f"bias), got {getattr(weight, 'dtype', type(weight).__name__)}"
        )
    if weight.dim() not in (1, 2):
        raise ValueError(
            "weight must be a projection's weight (num_heads·head_dim, d_model) or its "
            f"bias (num_heads·head_dim,), got shape {tuple(weight.shape)}"
        )
    rows = weight.shape[0]
    if rows != num_heads * head_dim:
        hint = ""
        if rows % head_dim == 0:
            hint = (
                f"; it holds {rows // head_dim} heads of {head_dim}: for a k_proj "
                "with grouped-query attention pass num_heads=num_key_value_heads"
            )
        raise ValueError(
            f"weight has {rows} rows, but num_heads·head_dim = {num_heads}·{head_dim} "
            f"= {num_heads * head_dim}{hint}"
        )
