"""Learned absolute position embeddings (Gehring et al. 2017, "Convolutional Sequence to
Sequence Learning", §3.1; GPT, BERT): one trainable vector per position, up to a hard
maximum.

Shapes:
    T positions, d model width (``dim``): the table's weight is (max_len, d), a lookup
    of positions (...) gives (..., d), and the scheme's embedding term adds it to x
    (B, T, d).
"""

from __future__ import annotations

import torch
from torch import nn

from ._checks import as_positions, check_int
from .schemes import PositionalScheme, register_scheme


class LearnedPositionalEmbedding(nn.Module):
    """A table of ``max_len`` trainable position vectors of width ``dim``.

    It holds ``max_len · dim`` parameters and has no answer for a position ≥
    ``max_len``: asking for one raises a ValueError that names the position and the
    limit.

    Args:
        max_len: number of positions the table covers (positions 0 … max_len − 1).
        dim: width of each vector.
        init_std: standard deviation of the normal initialisation; 0.02 is the
            ``initializer_range`` of Hugging Face's GPT-2. ``nn.Embedding``'s 1.0 leaves
            the random initialisation dominant after short training runs, hiding what
            the table learned.

    Shape:
        ``forward(positions)``: an int ``T`` or an integer tensor ``(...)`` → float32
        ``(..., dim)`` (``(T, dim)`` for an int) on the table's device.

    Raises:
        TypeError: non-integer sizes, or float positions (a table cannot be
            interpolated).
        ValueError: non-positive sizes, or a position outside ``0 … max_len − 1``.

    Source: Gehring et al. 2017, §3.1; Devlin et al. 2019 (BERT), §3; Radford et al.
        2018 (GPT).
    """

    def __init__(self, max_len: int, dim: int, *, init_std: float = 0.02) -> None:
        super().__init__()
        self.max_len = check_int("max_len", max_len, minimum=1)
        self.dim = check_int("dim", dim, minimum=1)
        self.weight = nn.Parameter(torch.randn(self.max_len, self.dim) * init_std)

    def forward(self, positions: int | torch.Tensor) -> torch.Tensor:
        positions = as_positions(positions, device=self.weight.device)
        if positions.is_floating_point():
            raise TypeError(
                "LearnedPositionalEmbedding needs integer positions (a table has no "
                "row between two "
                f"integers); got dtype {positions.dtype}"
            )
        if positions.numel():
            lo, hi = int(positions.min()), int(positions.max())
            if lo < 0 or hi >= self.max_len:
                bad = lo if lo < 0 else hi
                raise ValueError(
                    f"position {bad} is outside the learned table: positions must lie "
                    "in "
                    f"0..{self.max_len - 1} (max_len={self.max_len})"
                )
        return self.weight[positions]

    def extra_repr(self) -> str:
        return f"max_len={self.max_len}, dim={self.dim}"


@register_scheme
class LearnedScheme(PositionalScheme):
    """``"learned"``: add a :class:`LearnedPositionalEmbedding` to the token embeddings
    (plug-in point 1).

    Args:
        d_model, num_heads: model sizes (see :class:`posenc.schemes.PositionalScheme`).
        max_len: the table size; sequences longer than this raise ValueError.
        init_std: standard deviation of the initial rows (see
            :class:`LearnedPositionalEmbedding`).
    """

    name = "learned"
    hooks = frozenset({"embed"})

    def __init__(
        self,
        *,
        d_model: int,
        num_heads: int,
        max_len: int = 1024,
        init_std: float = 0.02,
    ) -> None:
        super().__init__(d_model=d_model, num_heads=num_heads)
        self.table = LearnedPositionalEmbedding(max_len, d_model, init_std=init_std)
        self.max_positions = self.table.max_len

    def embed(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        return x + self.table(positions).to(x.dtype)
