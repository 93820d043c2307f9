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

Shapes:
    d feature width (even): a table (..., d) keeps its shape; only the order of its last
    axis changes (:func:`pair_permutation` is a (d,) index).
"""

from __future__ import annotations

import torch

from ._checks import check_even_dim


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
