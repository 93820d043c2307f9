"""Sinusoidal absolute position encodings (Vaswani et al. 2017, "Attention Is All You
Need", §3.5).

PE(pos, 2i)     = sin(pos · θ_i)
PE(pos, 2i + 1) = cos(pos · θ_i),       θ_i = b^(−2i/d),  i = 0 … d/2 − 1.

Shapes:
    T positions, d model width (``dim``, even): positions (...) → encoding (..., d);
    the scheme's embedding term adds it to x (B, T, d).
"""

from __future__ import annotations

import torch

from ._checks import as_positions, check_base, check_choice, check_even_dim
from .frequencies import DEFAULT_BASE, compute_inv_freq
from .schemes import PositionalScheme, register_scheme

SINUSOIDAL_LAYOUTS = ("interleaved", "concatenated")


def sinusoidal_encoding(
    positions: int | torch.Tensor,
    dim: int,
    base: float = DEFAULT_BASE,
    layout: str = "interleaved",
    *,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """The sinusoidal position encoding of each position.

    The frequencies, angles, sines and cosines are computed in float64 and the finished
    table is rounded once to ``dtype``, so that every entry is the ``dtype`` number
    nearest the exact value (a float32 angle pos·θ_i is off by up to pos·2⁻²⁴ rad:
    6·10⁻⁵ at position 1000). On MPS, which has no float64, they are computed in
    float32.

    Args:
        positions: an int ``T`` (meaning positions 0 … T−1), or a tensor of integer or
            float positions of any shape ``(...)``, e.g. ``(T,)`` or ``(B, T)``.
        dim: even encoding width d.
        base: the frequency base b, finite and > 0; default ``DEFAULT_BASE`` (10000,
            as in the paper).
        layout: ``"interleaved"`` — sin on even and cos on odd features, as in the
            paper — or ``"concatenated"`` — ``[sin | cos]``, as in Hugging Face's
            MarianMT port. The two differ by :func:`posenc.layout.pair_permutation`;
            ``"concatenated"`` is the order RoPE calls ``"half"`` (pairs (i, i +
            d/2), :mod:`posenc.rope`): one permutation under two names.
            (tensor2tensor, fairseq and the Marian toolkit concatenate too, but with
            frequencies b^(−i/(d/2−1)).)
        dtype: floating dtype of the result (float32 by default).

    Returns:
        ``dtype`` tensor ``(..., dim)`` (``(T, dim)`` for an int ``T``) on the
        positions' device.

    Raises:
        TypeError: if ``positions`` is neither an int nor a real tensor, or ``dtype`` is
            not a floating torch dtype.
        ValueError: for a negative T, non-finite positions, an odd or non-positive
            ``dim``, a base that is not finite and > 0, or an unknown ``layout``.

    Source: Vaswani et al. 2017, "Attention Is All You Need", §3.5; float64 tables as
    XLM's ``create_sinusoidal_embeddings`` (Lample & Conneau 2019).
    """
    positions = as_positions(positions)
    layout = check_choice("layout", layout, SINUSOIDAL_LAYOUTS)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating torch.dtype, got {dtype!r}")
    work = torch.float32 if positions.device.type == "mps" else torch.float64
    inv_freq = compute_inv_freq(dim, base, device=positions.device, dtype=work)
    angles = positions.to(work)[..., None] * inv_freq  # (..., dim/2)
    if layout == "interleaved":
        # (..., d/2, 2) → (..., d): sin, cos of pair i at features 2i, 2i + 1
        table = torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(-2)
    else:
        table = torch.cat((angles.sin(), angles.cos()), dim=-1)
    return table.to(dtype)


@register_scheme
class SinusoidalScheme(PositionalScheme):
    """``"sinusoidal"``: add :func:`sinusoidal_encoding` to the token embeddings
    (plug-in point 1).

    No parameters; any length, including lengths never seen in training.

    Args:
        d_model, num_heads: model sizes (see :class:`posenc.schemes.PositionalScheme`).
        base: frequency base b, default ``DEFAULT_BASE`` (10000). layout:
            ``"interleaved"`` or ``"concatenated"``.
    """

    name = "sinusoidal"
    hooks = frozenset({"embed"})

    def __init__(
        self,
        *,
        d_model: int,
        num_heads: int,
        base: float = DEFAULT_BASE,
        layout: str = "interleaved",
    ) -> None:
        super().__init__(d_model=d_model, num_heads=num_heads)
        check_even_dim("d_model", d_model)
        self.base = check_base(base)
        self.layout = check_choice("layout", layout, SINUSOIDAL_LAYOUTS)

    def embed(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        return x + sinusoidal_encoding(
            positions, self.d_model, self.base, self.layout, dtype=x.dtype
        )
