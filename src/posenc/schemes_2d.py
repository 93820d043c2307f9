"""Position schemes for an image grid: 2-D positions, and the registry's ``"2d"``
namespace.

A patch of an image cut into a rows × cols grid (row-major, as ViT cuts it: see
:func:`posenc.layers.vit.patchify`) has a (row, column) position; a batch of them is a
(2, T) tensor (:func:`grid_positions`), or (2, B, T) when every image has its own.
This module holds the 2-D encodings as functions (the sin-cos table, the learned table
and its resize to another grid) and the tiny ViT's four schemes as
:class:`~posenc.schemes.PositionalScheme` subclasses registered in the ``"2d"``
namespace (``posenc.available_schemes("2d")``): they act through the same plug-in
points as the language model's schemes, with 2-D positions, and the 1-D runs (the
book's models, the study grid, the positions-contract tests), which iterate
``posenc.available_schemes()``, never meet them.

* ``"none"`` (:class:`NoPosition2D`): no position at all;
* ``"learned"`` (:class:`Learned2D`, plug-in point ``embed``): a trainable
  (rows, cols, d) table, resized by bilinear interpolation at another grid size, as
  ViT does when fine-tuning at a higher resolution (:func:`resize_learned_table`);
* ``"sinusoidal_2d"`` (:class:`Sinusoidal2D`, ``embed``): half the features encode
  the row, half the column, each a 1-D sinusoidal table
  (:func:`sinusoidal_2d_encoding`, MAE's 2-D sin-cos);
* ``"rope_2d"`` (:class:`Rope2D`, ``transform_qk``): queries and keys rotated by
  :func:`posenc.rope.apply_rope_2d` (RoPE-Axial), so that the scores depend on
  (Δrow, Δcolumn).

Shapes:
    B batch, H heads, T patches, d model width, d_h = d / H head width; positions
    (2, T) or (2, B, T), rows (row, column), at the model and ``embed``; (B′, 1, T,
    2), B′ ∈ {1, B}, at the attention's plug-in points.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ._checks import check_base, check_choice, check_int
from .frequencies import DEFAULT_BASE
from .rope import ROPE_LAYOUTS
from .rope_nd import ROPE_2D_FREQUENCIES, rope_2d_rotate
from .schemes import PositionalScheme, register_scheme
from .sinusoidal import SINUSOIDAL_LAYOUTS, sinusoidal_encoding

#: The registry namespace of these schemes (positions (2, T): row, column).
GRID_NAMESPACE = "2d"


# --------------------------------------------------------------------------------------
# Functional core: positions, 2-D encodings
# --------------------------------------------------------------------------------------


def grid_positions(
    rows: int, cols: int, *, device: torch.device | str | None = None
) -> torch.Tensor:
    """The (row, column) coordinates of a rows × cols grid of patches, row-major.

    Returns:
        int64 (2, rows·cols): ``positions[:, r·cols + c] = (r, c)``.

    Raises:
        TypeError / ValueError: rows or cols not a positive int.
    """
    rows = check_int("rows", rows, minimum=1)
    cols = check_int("cols", cols, minimum=1)
    r, c = torch.meshgrid(
        torch.arange(rows, device=device),
        torch.arange(cols, device=device),
        indexing="ij",
    )
    return torch.stack((r.reshape(-1), c.reshape(-1)))


def sinusoidal_2d_encoding(
    positions: torch.Tensor,
    dim: int,
    base: float = DEFAULT_BASE,
    layout: str = "concatenated",
    *,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """2-D sin-cos position encoding: the first dim/2 features are the 1-D sinusoidal
    encoding (:func:`posenc.sinusoidal.sinusoidal_encoding`, width dim/2) of the row,
    the last dim/2 that of the column.

    Each half has frequencies θ_i = b^(−2i/(dim/2)). With ``layout="concatenated"``
    ([sin | cos] per axis) this is MAE's ``get_2d_sincos_pos_embed`` with the two
    halves swapped: MAE's meshgrid puts the column (w) first; the order of the halves
    is a fixed permutation of the features, the same encoding for a model trained
    from it.

    Args:
        positions: (2, ...) integer or float (row, column) ids, e.g. (2, T) from
            :func:`grid_positions` or (2, B, T).
        dim: width d, a multiple of 4 (each half is a sin/cos table).
        base: frequency base b, default ``DEFAULT_BASE`` (10000). layout:
            ``"concatenated"`` or ``"interleaved"``.
        dtype: floating dtype of the result.

    Returns:
        ``dtype`` tensor (..., dim): (T, dim) for (2, T) positions.

    Raises:
        TypeError: positions not a real tensor; dtype not floating.
        ValueError: positions without a leading axis of 2; dim not a positive multiple
            of 4; base not finite and > 0; unknown layout; non-finite positions.

    Source: He et al. 2022, "Masked Autoencoders Are Scalable Vision Learners", CVPR,
    §A.1 (2-D sin-cos) and its ``util/pos_embed.py``; Beyer et al. 2022,
    arXiv:2205.01580 (``posemb_sincos_2d``); Vaswani et al. 2017, §3.5.
    """
    if not isinstance(positions, torch.Tensor):
        raise TypeError(
            f"positions must be a tensor (2, ...), got {type(positions).__name__}"
        )
    if positions.dim() < 1 or positions.shape[0] != 2:
        raise ValueError(
            "positions must have shape (2, ...), rows (row, column), got "
            f"{tuple(positions.shape)}"
        )
    dim = check_int("dim", dim, minimum=1)
    if dim % 4:
        raise ValueError(
            f"dim must be a multiple of 4 for 2-D sin-cos (a sin/cos half per axis), "
            f"got {dim}"
        )
    layout = check_choice("layout", layout, SINUSOIDAL_LAYOUTS)
    half = [
        sinusoidal_encoding(positions[axis], dim // 2, base, layout, dtype=dtype)
        for axis in range(2)
    ]
    return torch.cat(half, dim=-1)


def resize_learned_table(table: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """A learned (R, C, d) position table resized to a rows × cols grid by bilinear
    interpolation (``align_corners=False``: the table's cells are treated as areas
    covering the image, so cell centres line up with patch centres).

    At the table's own size the table itself is returned (exactly, and differentiably).
    At a larger grid, row r of the new table reads the old one at (r + ½)·R/rows − ½,
    clamped at the border: every new position falls inside the trained range.

    Args:
        table: float (R, C, d). rows, cols: the target grid.

    Returns:
        float (rows, cols, d) in the table's dtype and device.

    Raises:
        TypeError / ValueError: table not a float 3-D tensor; rows or cols not a
            positive int.

    Source: Dosovitskiy et al. 2021, ViT, §3.2 "Fine-tuning and higher resolution"
    ("we perform 2D interpolation of the pre-trained position embeddings, according
    to their location in the original image"); bilinear as in the ViT reference code
    (``scipy.ndimage.zoom(order=1)``); timm's ``resample_abs_pos_embed`` defaults to
    bicubic.
    """
    if not isinstance(table, torch.Tensor) or not table.is_floating_point():
        raise TypeError(
            f"table must be a floating tensor, got {getattr(table, 'dtype', table)}"
        )
    if table.dim() != 3:
        raise ValueError(f"table must have shape (R, C, d), got {tuple(table.shape)}")
    rows = check_int("rows", rows, minimum=1)
    cols = check_int("cols", cols, minimum=1)
    if (rows, cols) == tuple(table.shape[:2]):
        return table
    grid = table.permute(2, 0, 1)[None]  # (1, d, R, C)
    resized = F.interpolate(
        grid, size=(rows, cols), mode="bilinear", align_corners=False
    )
    return resized[0].permute(1, 2, 0)


def learned_2d_embedding(
    table: torch.Tensor, positions: torch.Tensor, grid: tuple[int, int]
) -> torch.Tensor:
    """The learned 2-D position vectors of patches on a rows × cols grid: the table
    resized to the grid (:func:`resize_learned_table`), read at (row, column).

    Args:
        table: float (R, C, d), the trained table. positions: integer (2, ...) ids in
            0 … rows−1 and 0 … cols−1. grid: (rows, cols) of the current image.

    Returns:
        float (..., d): (T, d) for (2, T) positions.

    Raises:
        TypeError: float positions (a resized table has no entry between two cells;
            position interpolation is the resize itself).
        ValueError: a position outside the grid.
    """
    if positions.is_floating_point():
        raise TypeError(
            "the learned table needs integer positions (at another grid size it is "
            f"resized, not read between cells); got dtype {positions.dtype}"
        )
    rows, cols = grid
    for axis, size, name in ((0, rows, "row"), (1, cols, "column")):
        ids = positions[axis]
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= size):
            raise ValueError(
                f"{name} positions must lie in 0..{size - 1} for a {rows}×{cols} "
                f"grid, got {int(ids.min())}..{int(ids.max())}"
            )
    return resize_learned_table(table, rows, cols)[positions[0], positions[1]]



# --------------------------------------------------------------------------------------
# The 2-D schemes: the registry's "2d" namespace
# --------------------------------------------------------------------------------------


class GridScheme(PositionalScheme):
    """Base of the ViT's schemes: a position is a (row, column) pair on the grid of
    patches: :meth:`embed` receives the model's positions, (2, T) or (2, B, T)
    (:func:`grid_positions`), and the attention's plug-in points receive them as
    (B′, 1, T, 2), B′ ∈ {1, B} (:func:`posenc.layers.attention.head_positions`). A
    scheme with ``"embed"`` also receives, as the keyword
    ``grid``, the (rows, cols) of the image the positions index (a learned table is
    resized to it). Register a subclass with
    ``@register_scheme(namespace="2d")``.

    Args / Raises: as :class:`~posenc.schemes.PositionalScheme`.
    """

    position_axes = 2


@register_scheme(namespace=GRID_NAMESPACE)
class NoPosition2D(GridScheme):
    """``"none"``: no positional information; attention over the patches is then
    permutation-equivariant, and the mean-pooled classifier sees a bag of patches."""

    name = "none"


@register_scheme(namespace=GRID_NAMESPACE)
class Learned2D(GridScheme):
    """``"learned"``: a trainable (rows, cols, d) table added to the patch embeddings
    (plug-in point 1), read at the patch's (row, column); at another grid size it is
    resized first (:func:`learned_2d_embedding`).

    Args:
        d_model, num_heads: as :class:`~posenc.schemes.PositionalScheme`.
        grid: (rows, cols) of the table, the training grid.
        init_std: standard deviation of the initial entries (normal, mean 0).

    Raises:
        TypeError / ValueError: grid not two positive ints; init_std not > 0.

    Source: Dosovitskiy et al. 2021, ViT, §3.1 (learnable position embeddings) and
    §3.2 (2-D interpolation at a higher resolution).
    """

    name = "learned"
    hooks = frozenset({"embed"})

    def __init__(
        self,
        *,
        d_model: int,
        num_heads: int,
        grid: tuple[int, int] = (4, 4),
        init_std: float = 0.02,
    ) -> None:
        super().__init__(d_model=d_model, num_heads=num_heads)
        if not isinstance(grid, (tuple, list)) or len(grid) != 2:
            raise ValueError(f"grid must be (rows, cols), got {grid!r}")
        rows = check_int("grid rows", grid[0], minimum=1)
        cols = check_int("grid cols", grid[1], minimum=1)
        if not init_std > 0:
            raise ValueError(f"init_std must be > 0, got {init_std}")
        self.grid = (rows, cols)
        self.table = nn.Parameter(torch.randn(rows, cols, d_model) * init_std)

    def embed(
        self,
        x: torch.Tensor,
        positions: torch.Tensor,
        grid: tuple[int, int] | None = None,
    ) -> torch.Tensor:
        """x (B, T, d) plus the table at integer positions (2, T) or (2, B, T) of a
        ``grid`` (default: the table's own) → (B, T, d). Raises as
        :func:`learned_2d_embedding`."""
        grid = self.grid if grid is None else grid
        return x + learned_2d_embedding(self.table, positions, grid).to(x.dtype)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, grid={self.grid}"


@register_scheme(namespace=GRID_NAMESPACE)
class Sinusoidal2D(GridScheme):
    """``"sinusoidal_2d"``: the 2-D sin-cos table (:func:`sinusoidal_2d_encoding`)
    added to the patch embeddings (plug-in point 1); fixed, so any grid and
    fractional positions work.

    Args:
        d_model, num_heads: as :class:`~posenc.schemes.PositionalScheme`; d_model a
            multiple of 4.
        base: frequency base b, default ``DEFAULT_BASE`` (10000, as MAE). layout:
            ``"concatenated"`` or ``"interleaved"`` per axis.

    Raises:
        ValueError: d_model not a multiple of 4; base not finite and > 0; unknown
            layout.

    Source: He et al. 2022, MAE, §A.1; Beyer et al. 2022, arXiv:2205.01580.
    """

    name = "sinusoidal_2d"
    hooks = frozenset({"embed"})

    def __init__(
        self,
        *,
        d_model: int,
        num_heads: int,
        base: float = DEFAULT_BASE,
        layout: str = "concatenated",
    ) -> None:
        super().__init__(d_model=d_model, num_heads=num_heads)
        if self.d_model % 4:
            raise ValueError(
                f"'sinusoidal_2d' needs d_model a multiple of 4, got {self.d_model}"
            )
        self.base = check_base(base)
        self.layout = check_choice("layout", layout, SINUSOIDAL_LAYOUTS)

    def embed(
        self,
        x: torch.Tensor,
        positions: torch.Tensor,
        grid: tuple[int, int] | None = None,
    ) -> torch.Tensor:
        """x (B, T, d) plus the encoding of positions (2, T) or (2, B, T), integer or
        float → (B, T, d); ``grid`` is not needed."""
        return x + sinusoidal_2d_encoding(
            positions, self.d_model, self.base, self.layout, dtype=x.dtype
        )


@register_scheme(namespace=GRID_NAMESPACE)
class Rope2D(GridScheme):
    """``"rope_2d"``: queries and keys rotated by :func:`posenc.rope.apply_rope_2d`
    (plug-in point 2), the first half of the rotary pairs by the row, the second by
    the column, so that the scores depend on (Δrow, Δcolumn) only.

    Args:
        d_model, num_heads: as :class:`~posenc.schemes.PositionalScheme`; head_dim a
            multiple of 4.
        base: frequency base b (100, as Heo et al.'s RoPE-Axial code: a 4 × 4 grid
            uses angles up to 3·θ, so 10000 would leave most pairs still).
        layout: ``"half"`` or ``"interleaved"``. frequencies: ``"shared"`` or
            ``"alternating"`` (:func:`posenc.rope.rope_2d_inv_freq`).

    Raises:
        ValueError: head_dim not a multiple of 4; base not finite and > 0; unknown
            layout or frequencies.

    Source: Heo et al. 2024, "Rotary Position Embedding for Vision Transformer",
    arXiv:2403.13298, §3 (RoPE-Axial).
    """

    name = "rope_2d"
    hooks = frozenset({"transform_qk"})

    def __init__(
        self,
        *,
        d_model: int,
        num_heads: int,
        base: float = 100.0,
        layout: str = "half",
        frequencies: str = "shared",
    ) -> None:
        super().__init__(d_model=d_model, num_heads=num_heads)
        if self.head_dim % 4:
            raise ValueError(
                "'rope_2d' needs head_dim = d_model / num_heads a multiple of 4, got "
                f"{self.head_dim}"
            )
        self.base = check_base(base)
        self.layout = check_choice("layout", layout, ROPE_LAYOUTS)
        self.frequencies = check_choice(
            "frequencies", frequencies, ROPE_2D_FREQUENCIES
        )

    def transform_qk(self, q, k, q_positions, k_positions):
        """q (B, H, T_q, d_h), k (B, H, T_k, d_h) rotated at their positions, the
        attention's (B′, 1, T, 2) (:func:`~posenc.rope_nd.rope_2d_rotate`) → the same
        shapes."""
        options = dict(base=self.base, layout=self.layout, frequencies=self.frequencies)
        return (
            rope_2d_rotate(q, q_positions, **options),
            rope_2d_rotate(k, k_positions, **options),
        )
