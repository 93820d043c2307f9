"""A tiny vision transformer with 2-D position schemes, and a digits experiment that
tests them at an image resolution never seen in training.

An image (B, C, H, W) is cut into p × p patches, row-major, giving a grid of
``rows × cols`` = (H/p) × (W/p) tokens with explicit (row, column) positions, a
(2, T) tensor (:func:`grid_positions`). Four schemes (:data:`VIT_SCHEMES`):

* ``"none"``: no position at all — the model sees a bag of patches;
* ``"learned"``: a trainable (rows, cols, d) table added to the patch embeddings; at
  another grid size the table is resized by bilinear interpolation, as ViT does when
  fine-tuning at a higher resolution (:func:`resize_learned_table`);
* ``"sinusoidal_2d"``: half the features encode the row, half the column, each a 1-D
  sinusoidal table (:func:`sinusoidal_2d_encoding`, MAE's 2-D sin-cos);
* ``"rope_2d"``: queries and keys rotated by :func:`posenc.rope.apply_rope_2d`
  (RoPE-Axial, shared frequencies), so that the scores depend on (Δrow, Δcolumn).

There is no CLS token: the classifier reads the mean of the patch tokens. So every
token is a patch with a grid coordinate — positions are the only spatial information
(with ``"none"`` the output is exactly invariant to shuffling the patches), a learned
table is a pure grid with no extra CLS row to split off before resizing it, and RoPE
needs no rule for a token without a position. Global average pooling is what Beyer et
al. 2022 ("Better plain ViT baselines for ImageNet-1k", arXiv:2205.01580) use with
2-D sin-cos.

:func:`digits_experiment` trains the model on scikit-learn's 8 × 8 digits and tests it
at 8 × 8 and at 16 × 16 (nearest-neighbour upsampling: an 8 × 8 grid of patches, grid
positions 4 … 7 unseen), with integer positions and with positions scaled back into
the training range; ``patch_size=1`` keeps every token a single pixel at both
resolutions, so that the unseen resolution changes the positions and not what a token
contains.

The book's runs (:data:`VIT_DIGITS`: four schemes × three seeds, one pixel per token)
are the study tier (DESIGN.md): too long for every build, they are stored in the
repository, one JSON file per run in ``src/posenc/results/vit_digits/`` keyed by a hash
of its configuration, with its provenance (versions, CPU, threads, date, seconds), and

* ``python -m posenc.vit`` (``make study``) computes the runs that are missing
  (resumable) and prints the table;
* :func:`load_digits_results` returns the stored rows, and raises
  :class:`posenc.store.StaleResultsError` when they do not cover the current grid
  (``python -m posenc.vit --verify``, which ``make book`` runs);
* ``python -m posenc.vit --check`` (``make test``) retrains :data:`CHECK_RUNS` from
  scratch and requires the stored accuracies back within :data:`CHECK_TOLERANCE`.

``python -m posenc.vit --explore [--patch-size 2 ...]`` runs one's own experiment
(cached under ``cache_dir()/vit``, not stored).

The training loop is :func:`posenc.train.fit`, the package's one loop: the classifier
is wrapped to look like a sequence model with one output token (logits (B, 1, C),
targets (B, 1)), which is all ``fit``'s cross-entropy needs.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import sys
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from ..experiments import store
from .._checks import check_base, check_choice, check_int
from .attention import attention_reference, attention_sdpa
from ..rope_nd import apply_rope_2d, check_axis_positions
from ..sinusoidal import SINUSOIDAL_LAYOUTS, sinusoidal_encoding
from ..experiments.store import results_dir
from .train import REQUIRE_CACHED_ENV, TrainConfig, cache_dir, fit, tqdm
from ..utils import get_device, seed_everything, usable_cpus

#: The position schemes of the tiny ViT, by name.
VIT_SCHEMES = ("none", "learned", "sinusoidal_2d", "rope_2d")
#: Schemes whose positions may be fractional (scaled into the training range).
CONTINUOUS_SCHEMES = ("sinusoidal_2d", "rope_2d")
#: Bump when a change to this module makes cached experiment results wrong.
VIT_CACHE_VERSION = 1


# --------------------------------------------------------------------------------------
# Functional core: patches, positions, 2-D encodings
# --------------------------------------------------------------------------------------


def _check_images(images: object) -> torch.Tensor:
    if not isinstance(images, torch.Tensor) or not images.is_floating_point():
        raise TypeError(
            "images must be a floating tensor (B, C, H, W) or (B, H, W), got "
            f"{getattr(images, 'dtype', type(images))}"
        )
    if images.dim() == 3:
        images = images[:, None]
    if images.dim() != 4:
        raise ValueError(
            f"images must have shape (B, C, H, W) or (B, H, W), got "
            f"{tuple(images.shape)}"
        )
    return images


def patchify(
    images: torch.Tensor, patch_size: int
) -> tuple[torch.Tensor, tuple[int, int]]:
    """Cut images into non-overlapping p × p patches, row-major (ViT's patching).

    Patch t = r·cols + c covers pixels [r·p, (r+1)·p) × [c·p, (c+1)·p); its features
    are the C·p·p pixel values in (channel, row, column) order.

    Args:
        images: float (B, C, H, W), or (B, H, W) for one channel.
        patch_size: p, dividing both H and W.

    Returns:
        ``(patches, (rows, cols))``: patches (B, T, C·p·p) in the images' dtype, with
        T = rows·cols, rows = H/p, cols = W/p.

    Raises:
        TypeError: images not a floating tensor; p not an int.
        ValueError: images not 3-D or 4-D; p < 1 or not dividing H and W.

    Source: Dosovitskiy et al. 2021, "An Image is Worth 16x16 Words", ICLR, §3.1
    (Eq. 1).
    """
    images = _check_images(images)
    p = check_int("patch_size", patch_size, minimum=1)
    batch, channels, height, width = images.shape
    if height % p or width % p:
        raise ValueError(
            f"image size {height}×{width} must be divisible by patch_size={p}"
        )
    rows, cols = height // p, width // p
    patches = images.reshape(batch, channels, rows, p, cols, p)
    patches = patches.permute(0, 2, 4, 1, 3, 5).reshape(batch, rows * cols, -1)
    return patches, (rows, cols)


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
    base: float = 10000.0,
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
        base: frequency base b. layout: ``"concatenated"`` or ``"interleaved"``.
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
# The model
# --------------------------------------------------------------------------------------


@dataclass
class ViTConfig:
    """Everything that defines a :class:`TinyViT`.

    Attributes:
        scheme: one of :data:`VIT_SCHEMES`.
        image_size: training image side (square); with ``patch_size`` it fixes the
            learned table's grid, image_size/patch_size on each side.
        patch_size: p. in_channels: C. num_classes: classifier outputs.
        d_model: width d. num_heads: H. num_layers: blocks. mlp_ratio: MLP width / d.
        rope_base: b of ``"rope_2d"`` (100, as Heo et al.'s RoPE-Axial code; a 4 × 4
            grid uses angles up to 3·θ, so 10000 would leave most pairs still).
        sincos_base: b of ``"sinusoidal_2d"`` (10000, as MAE).
        learned_init_std: standard deviation of the learned table's initial entries.

    Raises:
        ValueError / TypeError: unknown scheme; sizes not positive ints; image_size
            not divisible by patch_size; d_model not divisible by num_heads; d_model
            not a multiple of 4 for ``"sinusoidal_2d"``; head_dim not a multiple of 4
            for ``"rope_2d"``; a base not finite and > 0.
    """

    scheme: str = "rope_2d"
    image_size: int = 8
    patch_size: int = 2
    in_channels: int = 1
    num_classes: int = 10
    d_model: int = 64
    num_heads: int = 4
    num_layers: int = 2
    mlp_ratio: int = 4
    rope_base: float = 100.0
    sincos_base: float = 10000.0
    learned_init_std: float = 0.02

    def __post_init__(self) -> None:
        check_choice("scheme", self.scheme, VIT_SCHEMES)
        for name in (
            "image_size",
            "patch_size",
            "in_channels",
            "num_classes",
            "d_model",
            "num_heads",
            "num_layers",
            "mlp_ratio",
        ):
            check_int(name, getattr(self, name), minimum=1)
        if self.image_size % self.patch_size:
            raise ValueError(
                f"image_size={self.image_size} must be divisible by "
                f"patch_size={self.patch_size}"
            )
        if self.d_model % self.num_heads:
            raise ValueError(
                f"d_model must be divisible by num_heads, got d_model={self.d_model}, "
                f"num_heads={self.num_heads}"
            )
        if self.scheme == "sinusoidal_2d" and self.d_model % 4:
            raise ValueError(
                f"'sinusoidal_2d' needs d_model a multiple of 4, got {self.d_model}"
            )
        if self.scheme == "rope_2d" and (self.d_model // self.num_heads) % 4:
            raise ValueError(
                "'rope_2d' needs head_dim = d_model / num_heads a multiple of 4, got "
                f"{self.d_model // self.num_heads}"
            )
        check_base(self.rope_base)
        check_base(self.sincos_base)

    @property
    def grid(self) -> tuple[int, int]:
        """The training grid (rows, cols)."""
        side = self.image_size // self.patch_size
        return side, side


class ViTAttention(nn.Module):
    """Bidirectional multi-head self-attention over patches; with ``rope=True`` the
    queries and keys are rotated by :func:`posenc.rope.apply_rope_2d` first.

    The attention itself is :func:`posenc.attention.attention_sdpa` (or
    :func:`~posenc.attention.attention_reference` when the weights are asked for),
    with ``causal=False``.

    Shape:
        ``forward(x, positions)``: x (B, T, d); positions (2, T) or (2, B, T) →
        (B, T, d), and the weights (B, H, T, T) with ``need_weights=True``, else None.
    """

    def __init__(
        self, d_model: int, num_heads: int, *, rope: bool, base: float = 100.0
    ) -> None:
        super().__init__()
        self.num_heads, self.head_dim = num_heads, d_model // num_heads
        self.rope, self.base = rope, base
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.proj = nn.Linear(d_model, d_model, bias=False)

    def _qkv(self, x, positions):
        batch, seq_len, _ = x.shape
        qkv = self.qkv(x).view(batch, seq_len, 3, self.num_heads, self.head_dim)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)  # each (B, H, T, d_h)
        if self.rope:
            q = apply_rope_2d(q, positions, base=self.base, frequencies="shared")
            k = apply_rope_2d(k, positions, base=self.base, frequencies="shared")
        return q, k, v

    def scores(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """The attention logits q·kᵀ/√d_h before the softmax: float32 (B, H, T, T)."""
        q, k, _ = self._qkv(x, positions)
        return (q @ k.transpose(-2, -1)).float() / math.sqrt(self.head_dim)

    def forward(self, x, positions, *, need_weights: bool = False):
        batch, seq_len, d_model = x.shape
        q, k, v = self._qkv(x, positions)
        weights = None
        if need_weights:
            out, weights = attention_reference(q, k, v, causal=False)
        else:
            out = attention_sdpa(q, k, v, causal=False)
        out = out.transpose(1, 2).reshape(batch, seq_len, d_model)
        return self.proj(out), weights


class ViTBlock(nn.Module):
    """One pre-norm encoder block: LayerNorm → attention → residual; LayerNorm → GELU
    MLP → residual."""

    def __init__(self, config: ViTConfig) -> None:
        super().__init__()
        d = config.d_model
        self.ln1 = nn.LayerNorm(d)
        self.attn = ViTAttention(
            d,
            config.num_heads,
            rope=config.scheme == "rope_2d",
            base=config.rope_base,
        )
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(
            nn.Linear(d, config.mlp_ratio * d),
            nn.GELU(),
            nn.Linear(config.mlp_ratio * d, d),
        )

    def forward(self, x, positions, *, need_weights: bool = False):
        a, weights = self.attn(self.ln1(x), positions, need_weights=need_weights)
        x = x + a
        return x + self.mlp(self.ln2(x)), weights


class TinyViT(nn.Module):
    """A tiny vision transformer: patches → linear embedding (+ a 2-D position
    embedding for ``"learned"`` and ``"sinusoidal_2d"``) → ``num_layers`` pre-norm
    bidirectional blocks (``"rope_2d"`` rotates q and k in each) → LayerNorm → mean
    over the patch tokens (no CLS token) → linear classifier.

    Shape:
        ``forward(images, positions=None)``: images float (B, C, H, W) or (B, H, W)
        with H and W divisible by p; positions (2, T) or (2, B, T) (row, column) ids
        of the T = (H/p)·(W/p) patches, default :func:`grid_positions` → logits
        (B, num_classes); with ``need_weights=True`` also the per-layer attention
        weights (B, H, T, T). Positions may be floats (scaled into the training
        range) for ``"sinusoidal_2d"`` and ``"rope_2d"``; ``"learned"`` needs
        integers, and at a grid other than the training one it resizes its table
        (:func:`resize_learned_table`); ``"none"`` checks and ignores them.

    Raises:
        TypeError: images not floating; positions not a real tensor; float positions
            with ``"learned"``.
        ValueError: images whose size is not divisible by p or whose channels are not
            C; positions not (2, T) or (2, B, T); learned positions outside the grid.
    """

    def __init__(self, config: ViTConfig) -> None:
        super().__init__()
        self.config = config
        p, d = config.patch_size, config.d_model
        self.patch_embed = nn.Linear(config.in_channels * p * p, d)
        if config.scheme == "learned":
            rows, cols = config.grid
            self.pos_table = nn.Parameter(
                torch.randn(rows, cols, d) * config.learned_init_std
            )
        self.blocks = nn.ModuleList(ViTBlock(config) for _ in range(config.num_layers))
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, config.num_classes)

    def embed(self, patches, positions, grid):
        """Patch embeddings plus the scheme's position vectors: (B, T, d)."""
        x = self.patch_embed(patches)
        scheme = self.config.scheme
        if scheme == "learned":
            x = x + learned_2d_embedding(self.pos_table, positions, grid).to(x.dtype)
        elif scheme == "sinusoidal_2d":
            x = x + sinusoidal_2d_encoding(
                positions, self.config.d_model, self.config.sincos_base, dtype=x.dtype
            )
        return x

    def forward_patches(
        self,
        patches: torch.Tensor,
        positions: torch.Tensor,
        grid: tuple[int, int],
        *,
        need_weights: bool = False,
    ):
        """The model on patches already cut: patches (B, T, C·p·p), positions (2, T)
        or (2, B, T), grid (rows, cols) of the image they came from → logits
        (B, num_classes) (and the weights with ``need_weights``). Shuffling the
        patches and their positions together leaves the logits unchanged."""
        expected = self.config.in_channels * self.config.patch_size**2
        if patches.dim() != 3 or patches.shape[-1] != expected:
            raise ValueError(
                f"patches must have shape (B, T, {expected}), got "
                f"{tuple(patches.shape)}"
            )
        positions = check_axis_positions(
            positions, 2, patches.shape[1], patches.shape[0], "row, column"
        )
        positions = positions.to(patches.device)
        x = self.embed(patches, positions, grid)
        all_weights = []
        for block in self.blocks:
            x, w = block(x, positions, need_weights=need_weights)
            all_weights.append(w)
        logits = self.head(self.ln_f(x).mean(dim=1))
        return (logits, all_weights) if need_weights else logits

    def forward(
        self,
        images: torch.Tensor,
        positions: torch.Tensor | None = None,
        *,
        need_weights: bool = False,
    ):
        images = _check_images(images)
        if images.shape[1] != self.config.in_channels:
            raise ValueError(
                f"images must have {self.config.in_channels} channel(s), got "
                f"{images.shape[1]} in shape {tuple(images.shape)}"
            )
        patches, grid = patchify(images, self.config.patch_size)
        if positions is None:
            positions = grid_positions(*grid, device=images.device)
        return self.forward_patches(patches, positions, grid, need_weights=need_weights)


# --------------------------------------------------------------------------------------
# Data, training, evaluation
# --------------------------------------------------------------------------------------


def load_digits_split(
    test_fraction: float = 0.2, split_seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """scikit-learn's 8 × 8 handwritten digits (1797 images, pixel values 0 … 16,
    shipped with the package: no download), split once into train and test.

    The split is stratified by class and fixed by ``split_seed``, independent of the
    training seed, so every run of an experiment is tested on the same images.

    Returns:
        ``(x_train, y_train, x_test, y_test)``: x float32 (N, 1, 8, 8) scaled to
        [0, 1]; y int64 (N,) in 0 … 9. 360 test images at the default 0.2.

    Raises:
        ValueError: test_fraction not in (0, 1).

    Source: Alpaydin & Kaynak 1998, UCI "Optical Recognition of Handwritten Digits"
    (scikit-learn's ``load_digits``).
    """
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must lie in (0, 1), got {test_fraction}")
    split_seed = check_int("split_seed", split_seed, minimum=0)
    digits = load_digits()
    x = torch.tensor(digits.images, dtype=torch.float32)[:, None] / 16.0
    y = torch.tensor(digits.target, dtype=torch.int64)
    train_idx, test_idx = train_test_split(
        list(range(len(y))),
        test_size=test_fraction,
        random_state=split_seed,
        stratify=digits.target,
    )
    train_idx, test_idx = torch.tensor(train_idx), torch.tensor(test_idx)
    return x[train_idx], y[train_idx], x[test_idx], y[test_idx]


def upsample(images: torch.Tensor, factor: int = 2, mode: str = "nearest"):
    """Images at ``factor`` times the resolution: (B, C, H, W) → (B, C, fH, fW).

    ``"nearest"`` repeats each pixel in an f × f block (no new pixel values: the
    same digit, drawn with more pixels); ``"bilinear"`` (``align_corners=False``)
    smooths between them.

    Raises:
        TypeError / ValueError: bad images; factor not a positive int; unknown mode.
    """
    images = _check_images(images)
    factor = check_int("factor", factor, minimum=1)
    mode = check_choice("mode", mode, ("nearest", "bilinear"))
    extra = {} if mode == "nearest" else {"align_corners": False}
    return F.interpolate(images, scale_factor=factor, mode=mode, **extra)


class _OneTokenLogits(nn.Module):
    """A classifier seen as a sequence model with one output token: logits (B, 1, C),
    so that :func:`posenc.train.fit`'s ``cross_entropy(model(x).flatten(0, 1),
    y.flatten())`` is the classification loss when the targets are (B, 1)."""

    def __init__(self, model: TinyViT) -> None:
        super().__init__()
        self.model = model

    def forward(self, images):
        return self.model(images)[:, None, :]


def train_vit(
    config: ViTConfig,
    train_config: TrainConfig,
    x_train: torch.Tensor,
    y_train: torch.Tensor,
    *,
    device: torch.device | str | None = None,
    progress: bool = False,
) -> tuple[TinyViT, list[float], float]:
    """Train a :class:`TinyViT` with :func:`posenc.train.fit` (AdamW, warm-up and
    cosine decay, clipping), on shuffled mini-batches: an epoch is a permutation of
    the training images drawn from the seed's generator.

    Deterministic on the CPU for a given ``train_config.seed``
    (:func:`posenc.seed_everything` fixes the initialisation and the batch order).

    Args:
        config: the model. train_config: steps, batch_size, lr, … and seed
            (``seq_len`` is unused).
        x_train: float (N, C, H, W). y_train: int64 (N,).
        device: default :func:`posenc.get_device`. progress: show fit's bar.

    Returns:
        ``(model in eval mode, loss at every step, wall seconds)``.

    Raises:
        ValueError: x_train and y_train of different lengths, or empty.
    """
    if x_train.shape[0] != y_train.shape[0] or x_train.shape[0] == 0:
        raise ValueError(
            f"x_train and y_train must hold the same number (> 0) of examples, got "
            f"{x_train.shape[0]} and {y_train.shape[0]}"
        )
    device = torch.device(device) if device is not None else get_device()
    generator = seed_everything(train_config.seed)
    model = TinyViT(config).to(device)
    x_train, y_train = x_train.to(device), y_train.to(device)
    n, batch_size = x_train.shape[0], min(train_config.batch_size, x_train.shape[0])
    order, cursor = torch.randperm(n, generator=generator), 0

    def next_batch():
        nonlocal order, cursor
        if cursor + batch_size > n:
            order, cursor = torch.randperm(n, generator=generator), 0
        idx = order[cursor : cursor + batch_size].to(device)
        cursor += batch_size
        return x_train[idx], y_train[idx][:, None]

    losses, seconds = fit(
        _OneTokenLogits(model),
        train_config,
        next_batch,
        progress=progress,
        desc=f"vit {config.scheme}",
    )
    return model.eval(), losses, seconds


@torch.no_grad()
def accuracy(
    model: TinyViT,
    images: torch.Tensor,
    labels: torch.Tensor,
    positions: torch.Tensor | None = None,
    *,
    batch_size: int = 512,
) -> float:
    """Fraction of ``images`` (B, C, H, W) classified as ``labels`` (B,), with the
    patch ``positions`` (2, T) (default: the integer grid), in eval mode."""
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    correct = 0
    try:
        for i in range(0, images.shape[0], batch_size):
            x = images[i : i + batch_size].to(device)
            pred = model(x, positions).argmax(dim=-1).cpu()
            correct += int((pred == labels[i : i + batch_size]).sum())
    finally:
        model.train(was_training)
    return correct / images.shape[0]


# --------------------------------------------------------------------------------------
# The experiment
# --------------------------------------------------------------------------------------

#: The evaluation settings: (name, upsampling factor, positions scaled to the
#: training range).
RESOLUTIONS = (
    ("8x8", 1, False),
    ("16x16", 2, False),
    ("16x16 scaled", 2, True),
)
#: The side of scikit-learn's digits, the training images (8 × 8 pixels).
DIGITS_SIZE = 8


def _run_key(payload: dict) -> str:
    text = json.dumps(payload, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:20]


@dataclass
class DigitsRun:
    """One (scheme, seed) run of :func:`digits_experiment`: everything its results
    depend on.

    Attributes:
        config: the model. train_config: its training, the seed included.
        test_fraction: the held-out share of the digits. upsample_mode: how the test
            images are enlarged.
    """

    config: ViTConfig
    train_config: TrainConfig
    test_fraction: float = 0.2
    upsample_mode: str = "nearest"

    def payload(self) -> dict:
        """What the run's key hashes; stored with the study's results."""
        return {
            "version": VIT_CACHE_VERSION,
            "model": asdict(self.config),
            "train": asdict(self.train_config),
            "data": ["sklearn-digits", self.test_fraction, self.upsample_mode],
            "resolutions": RESOLUTIONS,
        }

    def key(self) -> str:
        """A stable hash of :meth:`payload` (20 hex digits)."""
        return _run_key(self.payload())

    @property
    def label(self) -> str:
        return f"{self.config.scheme} seed {self.train_config.seed}"


def digits_runs(
    schemes=VIT_SCHEMES,
    seeds=(0, 1, 2),
    *,
    steps: int = 400,
    batch_size: int = 64,
    lr: float = 3e-3,
    patch_size: int = 2,
    d_model: int = 64,
    num_heads: int = 4,
    num_layers: int = 2,
    upsample_mode: str = "nearest",
    test_fraction: float = 0.2,
) -> list[DigitsRun]:
    """The runs :func:`digits_experiment` makes with these arguments (the same
    meaning), scheme by scheme and then seed by seed.

    Raises:
        ValueError / TypeError: unknown scheme or upsample_mode; bad sizes or seeds.
    """
    schemes = [check_choice("scheme", s, VIT_SCHEMES) for s in schemes]
    seeds = [check_int("seed", s, minimum=0) for s in seeds]
    upsample_mode = check_choice(
        "upsample_mode", upsample_mode, ("nearest", "bilinear")
    )
    runs = []
    for scheme in schemes:
        config = ViTConfig(
            scheme=scheme,
            image_size=DIGITS_SIZE,
            patch_size=patch_size,
            d_model=d_model,
            num_heads=num_heads,
            num_layers=num_layers,
        )
        for seed in seeds:
            train_config = TrainConfig(
                seq_len=config.grid[0] * config.grid[1],
                batch_size=batch_size,
                steps=steps,
                lr=lr,
                warmup_steps=max(1, steps // 10),
                seed=seed,
            )
            runs.append(DigitsRun(config, train_config, test_fraction, upsample_mode))
    return runs


@contextmanager
def _torch_threads(device: torch.device, num_threads: int | None):
    """torch's CPU threads set to ``num_threads`` (None: left) and restored after."""
    threads = torch.get_num_threads()
    if device.type == "cpu" and num_threads is not None:
        torch.set_num_threads(check_int("num_threads", num_threads, minimum=1))
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _run_one(run: DigitsRun, data, device, progress) -> list[dict]:
    config, train_config = run.config, run.train_config
    x_train, y_train, x_test, y_test = data
    model, losses, seconds = train_vit(
        config, train_config, x_train, y_train, device=device, progress=progress
    )
    rows = []
    for name, factor, scaled in RESOLUTIONS:
        if scaled and config.scheme not in CONTINUOUS_SCHEMES:
            continue  # "none" has no positions; "learned" is already resized in (b)
        images = upsample(x_test, factor, run.upsample_mode) if factor > 1 else x_test
        grid = images.shape[-1] // config.patch_size
        positions = grid_positions(grid, grid)
        if scaled:
            positions = positions * (config.grid[0] / grid)
        rows.append(
            {
                "scheme": config.scheme,
                "seed": train_config.seed,
                "resolution": name,
                "image_size": images.shape[-1],
                "grid": grid,
                "position_scale": config.grid[0] / grid if scaled else 1.0,
                "accuracy": accuracy(model, images, y_test, positions),
                "n_test": int(y_test.shape[0]),
                "final_loss": float(sum(losses[-20:]) / len(losses[-20:])),
                "train_seconds": seconds,
            }
        )
    return rows


def digits_experiment(
    schemes=VIT_SCHEMES,
    seeds=(0, 1, 2),
    *,
    steps: int = 400,
    batch_size: int = 64,
    lr: float = 3e-3,
    patch_size: int = 2,
    d_model: int = 64,
    num_heads: int = 4,
    num_layers: int = 2,
    upsample_mode: str = "nearest",
    test_fraction: float = 0.2,
    device: torch.device | str | None = None,
    use_cache: bool = True,
    progress: bool = False,
    num_threads: int | None = 1,
    require_cached: bool | None = None,
) -> list[dict]:
    """Train a :class:`TinyViT` per (scheme, seed) on the 8 × 8 digits and measure
    its test accuracy at the training resolution and at one never seen in training.

    Resolutions (:data:`RESOLUTIONS`): ``"8x8"``, the test split as trained (a 4 × 4
    grid for p = 2); ``"16x16"``, the test images upsampled ×2 (``upsample_mode``)
    and patched with the same p (an 8 × 8 grid: row and column ids 4 … 7 unseen;
    ``"learned"`` resizes its table); ``"16x16 scaled"``, the same images with the
    positions multiplied by 4/8 = 0.5 into the training range (position
    interpolation, Chen et al. 2023, for images), only for the schemes with
    continuous positions (:data:`CONTINUOUS_SCHEMES`: for ``"none"`` it would be
    ``"16x16"`` again, and ``"learned"``'s resize already is an interpolation).

    With p ≥ 2 the upsampled test images change what a patch *contains*, not only
    where it is: a 2 × 2 patch of a ×2 nearest-upsampled image is one pixel repeated,
    a patch never seen in training, and even ``"none"`` falls to chance. With
    ``patch_size=1`` each token is one pixel at both resolutions, so the
    ``"16x16"`` columns isolate the positions (an 8 × 8 grid trained, 16 × 16 tested).

    Each run is cached on disk (:func:`posenc.train.cache_dir` / ``vit``), keyed by
    its full configuration (:meth:`DigitsRun.key`), so a second call reads the
    accuracies back. The book's runs (:data:`VIT_DIGITS`) are not read from this
    cache: they are stored in the repository (:func:`load_digits_results`).

    Args:
        schemes: names from :data:`VIT_SCHEMES`. seeds: training seeds (≥ 0).
        steps, batch_size, lr: the :class:`posenc.train.TrainConfig` (warm-up 10 %
            of the steps). patch_size, d_model, num_heads, num_layers: the model.
        upsample_mode: ``"nearest"`` or ``"bilinear"``. test_fraction: held out.
        device: default :func:`posenc.get_device`. use_cache: read/write the cache.
        progress: show a progress bar per run.
        num_threads: torch's CPU threads while the experiment runs (restored after);
            None leaves them. The default 1 is fastest for a model this small: with
            2 threads a step took 4–20× longer on a loaded 2-core machine.
        require_cached: refuse to train a run that is not cached (raise
            :class:`NotCachedError`); default: ``POSENC_REQUIRE_CACHED=1`` in the
            environment, as :func:`posenc.train.train` (the book build sets it).

    Returns:
        One dict per (scheme, seed, resolution): scheme, seed, resolution,
        image_size, grid, position_scale, accuracy, n_test, final_loss (mean of the
        last 20 steps), train_seconds.

    Raises:
        ValueError / TypeError: unknown scheme or upsample_mode; bad sizes.
        NotCachedError: a run is not cached and ``require_cached``.
    """
    if require_cached is None:
        require_cached = os.environ.get(REQUIRE_CACHED_ENV) == "1"
    runs = digits_runs(
        schemes,
        seeds,
        steps=steps,
        batch_size=batch_size,
        lr=lr,
        patch_size=patch_size,
        d_model=d_model,
        num_heads=num_heads,
        num_layers=num_layers,
        upsample_mode=upsample_mode,
        test_fraction=test_fraction,
    )
    device = torch.device(device) if device is not None else get_device()
    data = load_digits_split(test_fraction)
    rows: list[dict] = []
    with _torch_threads(device, num_threads):
        for run in runs:
            rows.extend(
                _cached_run(run, data, device, use_cache, progress, require_cached)
            )
    return rows


class NotCachedError(RuntimeError):
    """A run of :func:`digits_experiment` is not cached and training is refused."""


def _cached_run(run, data, device, use_cache, progress, require_cached):
    """One (scheme, seed) run's rows, from ``cache_dir()/vit`` when stored."""
    path = cache_dir() / "vit" / f"{run.config.scheme}-{run.key()}.json"
    if use_cache and path.exists():
        return json.loads(path.read_text())
    if require_cached:
        raise NotCachedError(
            f"{REQUIRE_CACHED_ENV}=1 and the tiny ViT run ({run.label}) is not in "
            f"{path.parent}: a notebook cell must not train. The book's runs are "
            "stored in the repository: read them with posenc.vit.load_digits_results "
            "(computed by `make study`, python -m posenc.vit); to train this run, "
            f"call digits_experiment without {REQUIRE_CACHED_ENV}=1"
        )
    run_rows = _run_one(run, data, device, progress)
    if use_cache:
        store.write_json(path, run_rows, indent=1)
    return run_rows


def results_table(rows: list[dict], confidence: float = 0.95) -> str:
    """A text table: one line per scheme, one column per resolution, each cell the
    mean accuracy (%) over seeds and its Student-t interval
    (:func:`posenc.stats.mean_ci`); "—" where a scheme has no such evaluation."""
    from ..experiments.stats import mean_ci

    schemes = list(dict.fromkeys(r["scheme"] for r in rows))
    names = [name for name, _, _ in RESOLUTIONS]
    width = 22
    lines = [f"{'scheme':<14}" + "".join(f"{n:>{width}}" for n in names)]
    for scheme in schemes:
        cells = []
        for name in names:
            values = [
                100 * r["accuracy"]
                for r in rows
                if r["scheme"] == scheme and r["resolution"] == name
            ]
            if not values:
                cells.append(f"{'—':>{width}}")
                continue
            mean, lo, hi = mean_ci(values, confidence)
            text = f"{mean:.1f}" + ("" if math.isnan(lo) else f" [{lo:.1f}, {hi:.1f}]")
            cells.append(f"{text:>{width}}")
        lines.append(f"{scheme:<14}" + "".join(cells))
    return "\n".join(lines)


# --------------------------------------------------------------------------------------
# The stored study (the study tier)
# --------------------------------------------------------------------------------------

VIT_DIGITS = {"schemes": VIT_SCHEMES, "seeds": (0, 1, 2), "patch_size": 1}
"""The book's runs, ``digits_experiment(**VIT_DIGITS)`` (book/rope_2d.ipynb):
every 2-D scheme, three seeds, one pixel per token, so that the 16 × 16 test images
change the positions and not what a token holds. Twelve runs of about 30 s each on
one core: too long for every build, so they are stored in the repository
(:func:`run_digits_study`) and the chapter reads them (:func:`load_digits_results`)."""

#: The stored study's folder under ``src/posenc/results/``.
DIGITS_STUDY = "vit_digits"

#: What ``--check`` retrains from scratch: one run, (scheme, seed). ``rope_2d`` costs
#: what ``"none"`` costs (28 s on one core) and is the robust one (see below).
CHECK_RUNS = (("rope_2d", 0),)

#: How far a retrained run's accuracies (proportions of the 360 test digits) may lie
#: from the stored ones. On one CPU and one torch build, on one thread, training is
#: deterministic and reproduces exactly (measured: difference 0, final loss equal, for
#: ``"none"`` seeds 0 and 1 and ``"rope_2d"`` seed 0). Another CPU's kernels sum in
#: another order; two torch threads instead of one do the same, and moved no accuracy
#: of ``rope_2d`` (seeds 0, 1, 2), ``sinusoidal_2d`` or ``learned`` (seed 0), their
#: final losses by at most 2e-4, but ``"none"``'s seed 0 by 0.022 (8 digits): without
#: positions the model is barely trained (23 % accuracy) and sits on a knife edge, so
#: the check retrains ``rope_2d``. 0.02 is 7 test digits.
CHECK_TOLERANCE = 0.02


def digits_results_dir() -> Path:
    """Where the stored study lives: ``src/posenc/results/vit_digits/`` (package data,
    so an installed posenc carries it)."""
    return results_dir(DIGITS_STUDY)


def digits_study_runs() -> list[DigitsRun]:
    """Every run of the stored study: :func:`digits_runs` of :data:`VIT_DIGITS`."""
    return digits_runs(**VIT_DIGITS)


def _file_name(run: DigitsRun) -> str:
    return f"{run.config.scheme}-s{run.train_config.seed}-{run.key()}.json"


def _stored_digits() -> dict[str, dict]:
    """``{key: record}`` of every file in :func:`digits_results_dir`."""
    return store.read_records(digits_results_dir(), key_field="key")


def execute_digits_run(
    run: DigitsRun, *, device: torch.device | str = "cpu", num_threads: int | None = 1
) -> dict:
    """Train and score one run from scratch (no cache): the record the study stores.

    Returns:
        ``{"key", "run": {"scheme", "seed"}, "config": run.payload(), "rows":
        digits_experiment's rows, "provenance": versions, CPU, threads, date, device,
        train_seconds, wall_seconds}``.
    """
    device = torch.device(device)
    start = time.perf_counter()
    data = load_digits_split(run.test_fraction)
    with _torch_threads(device, num_threads):
        rows = _run_one(run, data, device, progress=False)
        provenance = store.provenance()  # inside: it records the threads used
    return {
        "key": run.key(),
        "run": {"scheme": run.config.scheme, "seed": run.train_config.seed},
        "config": run.payload(),
        "rows": rows,
        "provenance": {
            **provenance,
            "device": str(device),
            "train_seconds": round(rows[0]["train_seconds"], 2),
            "wall_seconds": round(time.perf_counter() - start, 2),
        },
    }


def _execute_in_worker(run: DigitsRun, device: str) -> dict:
    return execute_digits_run(run, device=device)


def run_digits_study(
    *, workers: int | None = None, device: str = "cpu", progress: bool = True
) -> dict:
    """Compute the runs of the study that are not stored (resumable: one file per
    run, written when the run ends), then delete stored files that left the grid.

    Args:
        workers: processes, one torch thread each (default: usable cores, at most
            one per missing run; 1 on a GPU; 0 runs every run in this process).
        device: where to train. progress: a tqdm bar over the runs.

    Returns:
        ``{"runs": runs in the grid, "computed": runs computed now, "wall_seconds":
        for those}``.
    """
    folder = digits_results_dir()
    runs = digits_study_runs()
    todo = store.missing_runs(runs, _stored_digits(), DigitsRun.key)
    start = time.perf_counter()
    if todo:
        if workers is None:
            workers = 1 if device != "cpu" else usable_cpus()
            workers = min(workers, len(todo))
        bar = tqdm(
            total=len(todo),
            desc="tiny ViT on digits",
            unit="run",
            file=sys.stdout,
            disable=not progress,
        )

        def save(run: DigitsRun, record: dict) -> None:
            store.write_json(folder / _file_name(run), record, indent=1)
            bar.update(1)
            bar.set_postfix_str(
                f"{run.label}: {record['provenance']['wall_seconds']:.0f} s"
            )

        store.compute(
            todo, partial(_execute_in_worker, device=device), save, workers=workers
        )
        bar.close()
    if folder.exists():
        store.prune(folder, {_file_name(r) for r in runs})
    return {
        "runs": len(runs),
        "computed": len(todo),
        "wall_seconds": time.perf_counter() - start if todo else 0.0,
    }


def load_digits_records(*, strict: bool = True) -> list[dict]:
    """The stored record of every run of the study (:func:`execute_digits_run`), in
    the order of :func:`digits_study_runs`.

    Args:
        strict: raise when a run of the grid is not stored; False returns those
            that are.

    Raises:
        posenc.store.StaleResultsError: a run of the grid has no stored result for
            the current configuration (:data:`VIT_DIGITS`, a default of
            :func:`digits_experiment`, :data:`VIT_CACHE_VERSION` or
            :data:`RESOLUTIONS` changed); the message names the runs and the command
            that computes them.
    """
    return store.grid_records(
        digits_study_runs(),
        _stored_digits(),
        key=DigitsRun.key,
        label=lambda r: r.label,
        strict=strict,
        study="tiny-ViT digits study",
        command="python -m posenc.vit",
        where=digits_results_dir(),
    )


def load_digits_results(*, strict: bool = True) -> list[dict]:
    """The stored rows of ``digits_experiment(**VIT_DIGITS)``, as it would return
    them (one dict per scheme, seed and resolution), without training or a cache:
    what the chapter "Positions with several coordinates" (book/rope_2d) reads.

    Raises:
        posenc.store.StaleResultsError: as :func:`load_digits_records`.
    """
    return [
        row for record in load_digits_records(strict=strict) for row in record["rows"]
    ]


def reproduce_digits(
    *, sample=None, device: str = "cpu", threads: int = 1
) -> list[dict]:
    """Retrain the runs of ``sample`` ((scheme, seed) pairs; default
    :data:`CHECK_RUNS`) from scratch and compare every accuracy with the stored one.

    ``threads`` > 1 changes the order of floating-point reductions, as another CPU's
    kernels do: how :data:`CHECK_TOLERANCE` was measured.

    Returns:
        One dict per compared accuracy: run, resolution, stored, recomputed,
        difference, tolerance, ok, and the run's final_loss_difference.

    Raises:
        posenc.store.StaleResultsError: the stored study does not cover the grid.
        ValueError: a pair of ``sample`` is not a run of the grid.
    """
    records = {r["key"]: r for r in load_digits_records()}
    runs = {(r.config.scheme, r.train_config.seed): r for r in digits_study_runs()}
    out = []
    for pair in CHECK_RUNS if sample is None else sample:
        if tuple(pair) not in runs:
            raise ValueError(f"{pair} is not a (scheme, seed) run of the study")
        run = runs[tuple(pair)]
        stored = {r["resolution"]: r for r in records[run.key()]["rows"]}
        fresh = execute_digits_run(run, device=device, num_threads=threads)
        for row in fresh["rows"]:
            old = stored[row["resolution"]]
            compared = store.compare(
                old["accuracy"],
                row["accuracy"],
                CHECK_TOLERANCE,
                run=run.label,
                resolution=row["resolution"],
            )
            loss = row["final_loss"] - old["final_loss"]
            out.append({**compared, "final_loss_difference": loss})
    return out


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m posenc.vit",
        description="Tiny ViT on 8×8 digits: 2-D position schemes at an unseen "
        "resolution. Without options: compute the stored study's missing runs "
        "(src/posenc/results/vit_digits/, make study) and print its table.",
    )
    store.add_arguments(parser, check="CHECK_RUNS")
    parser.add_argument(
        "--workers", type=int, default=None, help="processes (default: usable cores)"
    )
    parser.add_argument(
        "--threads", type=int, default=1, help="torch threads of --check (default 1)"
    )
    parser.add_argument("--device", default=None)
    explore = parser.add_argument_group(
        "exploring",
        "--explore: run digits_experiment with these arguments (cached "
        "in cache_dir()/vit, not stored) and print its table",
    )
    explore.add_argument("--explore", action="store_true")
    explore.add_argument("--schemes", nargs="+", default=list(VIT_SCHEMES))
    explore.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    explore.add_argument("--steps", type=int, default=400)
    explore.add_argument("--patch-size", type=int, default=2)
    explore.add_argument(
        "--upsample", choices=("nearest", "bilinear"), default="nearest"
    )
    explore.add_argument("--no-cache", action="store_true")
    return parser


def _explore(args: argparse.Namespace) -> int:
    start = time.perf_counter()
    rows = digits_experiment(
        args.schemes,
        args.seeds,
        steps=args.steps,
        patch_size=args.patch_size,
        upsample_mode=args.upsample,
        device=args.device,
        use_cache=not args.no_cache,
    )
    print(
        f"test accuracy (%), mean [95% t-interval] over seeds {args.seeds}; "
        f"trained on 8×8 images, patch size {args.patch_size}; 16×16 = "
        f"{args.upsample} upsampling of the test images"
    )
    print(results_table(rows))
    print(f"wall time {time.perf_counter() - start:.1f} s")
    return 0


def _check(device: str, threads: int, start: float) -> int:
    rows = reproduce_digits(device=device, threads=threads)
    worst = max(abs(r["difference"]) for r in rows)
    loss = max(abs(r["final_loss_difference"]) for r in rows)
    return store.report(
        rows,
        f"retrained {', '.join(dict.fromkeys(r['run'] for r in rows))} in "
        f"{time.perf_counter() - start:.0f} s: {len(rows)} stored accuracies, "
        f"largest difference {worst:.3g} (tolerance {CHECK_TOLERANCE}); final "
        f"training loss off by {loss:.2g}",
    )


def main(argv: list[str] | None = None) -> int:
    """``python -m posenc.vit``: the stored study (compute, ``--verify``,
    ``--check``, ``--list``), or ``--explore`` one's own digits experiment."""
    parser = _parser()
    args = parser.parse_args(argv)
    explored = ("schemes", "seeds", "steps", "patch_size", "upsample", "no_cache")
    if not args.explore and any(
        getattr(args, k) != parser.get_default(k) for k in explored
    ):
        parser.error(
            "--schemes, --seeds, --steps, --patch-size, --upsample and "
            "--no-cache go with --explore (the stored study is VIT_DIGITS)"
        )
    start = time.perf_counter()
    if args.explore:
        return _explore(args)
    if args.list:
        runs = digits_study_runs()
        store.print_listing(runs, _stored_digits(), DigitsRun.key, lambda r: r.label)
        return 0
    device = args.device or "cpu"
    status = store.verify_or_check(
        args,
        load_digits_records,
        lambda records: (
            f"the stored tiny-ViT digits study covers its grid: {len(records)} runs, "
            f"{sum(r['rows'][0]['train_seconds'] for r in records):.0f} s of training "
            "when computed"
        ),
        lambda: _check(device, args.threads, start),
    )
    if status is not None:
        return status
    summary = run_digits_study(workers=args.workers, device=device)
    print(
        f"tiny-ViT digits study: {summary['runs']} runs in the grid, "
        f"{summary['computed']} computed now in {summary['wall_seconds']:.0f} s; "
        f"results in {digits_results_dir()}"
    )
    print(results_table(load_digits_results()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
