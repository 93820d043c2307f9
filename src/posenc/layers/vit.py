"""A tiny vision transformer whose 2-D position scheme is chosen by name.

An image (B, C, H, W) is cut into p × p patches, row-major (:func:`patchify`), giving
a grid of ``rows × cols`` = (H/p) × (W/p) tokens with explicit (row, column)
positions, a (2, T) tensor (:func:`posenc.schemes_2d.grid_positions`). The scheme
(:data:`VIT_SCHEMES`: ``"none"``, ``"learned"``, ``"sinusoidal_2d"``, ``"rope_2d"``)
is built by name from the registry's ``"2d"`` namespace (:mod:`posenc.schemes_2d`)
and acts through the same plug-in points as the language model's: ``embed`` on the
patch embeddings, ``transform_qk`` inside the package's attention.

:class:`TinyViT` reads like :class:`posenc.model.TinyLM`: patches → linear embedding
→ the scheme's ``embed`` → :class:`posenc.model.Block` s (LayerNorm →
:class:`~posenc.attention.MultiHeadAttention` with ``causal=False`` → residual;
LayerNorm → GELU MLP → residual) → LayerNorm → mean over the patches → linear
classifier. There is no CLS token: the classifier reads the mean of the patch tokens.
So every token is a patch with a grid coordinate — positions are the only spatial
information (with ``"none"`` the output is exactly invariant to shuffling the
patches), a learned table is a pure grid with no extra CLS row to split off before
resizing it, and RoPE needs no rule for a token without a position. Global average
pooling is what Beyer et al. 2022 ("Better plain ViT baselines for ImageNet-1k",
arXiv:2205.01580) use with 2-D sin-cos.

The digits experiment that trains it (8 × 8 training images, tested at 16 × 16) is
:mod:`posenc.experiments.vit_digits`; its stored runs, the book's, are
:mod:`posenc.experiments.vit_study`.

Shapes:
    B batch, C channels, H × W pixels, p patch side, T = rows·cols patches, d model
    width; positions (2, T) or (2, B, T), rows (row, column).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from .._checks import check_base, check_choice, check_int
from .model import Block
from ..rope_nd import check_axis_positions
from ..schemes import build_scheme
from ..schemes_2d import GRID_NAMESPACE, grid_positions

#: The position schemes of the tiny ViT, by name, in the order of the book's runs:
#: the schemes of the registry's ``"2d"`` namespace (:mod:`posenc.schemes_2d`).
VIT_SCHEMES = ("none", "learned", "sinusoidal_2d", "rope_2d")
#: Schemes whose positions may be fractional (scaled into the training range).
CONTINUOUS_SCHEMES = ("sinusoidal_2d", "rope_2d")


# --------------------------------------------------------------------------------------
# Patches
# --------------------------------------------------------------------------------------


def check_images(images: object) -> torch.Tensor:
    """Images as float (B, C, H, W); (B, H, W) gets a channel axis of one.

    Raises:
        TypeError: images not a floating tensor.
        ValueError: images neither 3-D nor 4-D (the message gives the shape).
    """
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
    images = check_images(images)
    p = check_int("patch_size", patch_size, minimum=1)
    batch, channels, height, width = images.shape
    if height % p or width % p:
        raise ValueError(
            f"image size {height}×{width} must be divisible by patch_size={p}"
        )
    rows, cols = height // p, width // p
    # (B, C, rows·p, cols·p) → (B, C, rows, p, cols, p)
    patches = images.reshape(batch, channels, rows, p, cols, p)
    patches = patches.permute(0, 2, 4, 1, 3, 5)  # (B, rows, cols, C, p, p)
    patches = patches.reshape(batch, rows * cols, -1)  # (B, rows·cols, C·p·p)
    return patches, (rows, cols)


# --------------------------------------------------------------------------------------
# The model
# --------------------------------------------------------------------------------------


@dataclass
class ViTConfig:
    """Everything that defines a :class:`TinyViT`.

    Attributes:
        scheme: one of :data:`VIT_SCHEMES`, a scheme of the registry's ``"2d"``
            namespace, built with :attr:`scheme_options`.
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

    @property
    def scheme_options(self) -> dict:
        """The keyword options this config gives its scheme's class
        (:func:`posenc.schemes.build_scheme`)."""
        return {
            "none": {},
            "learned": {"grid": self.grid, "init_std": self.learned_init_std},
            "sinusoidal_2d": {"base": self.sincos_base},
            "rope_2d": {"base": self.rope_base},
        }[self.scheme]


def _rename_old_table(module, state_dict, prefix, *args) -> None:
    """Load a state_dict saved before the schemes moved into the registry: the
    learned table was TinyViT's ``pos_table``; it is now ``scheme.table`` (and, the
    scheme being shared, ``blocks.<i>.attn.scheme.table``)."""
    old = state_dict.pop(prefix + "pos_table", None)
    if old is not None and "table" in module.scheme.state_dict():
        for name, _ in module.named_parameters(remove_duplicate=False):
            if name == "scheme.table" or name.endswith(".scheme.table"):
                state_dict[prefix + name] = old


class TinyViT(nn.Module):
    """A tiny vision transformer: patches → linear embedding → the scheme's
    ``embed`` (``"learned"``, ``"sinusoidal_2d"``) → ``num_layers`` pre-norm
    :class:`posenc.model.Block` s, bidirectional (the package's
    :class:`~posenc.attention.MultiHeadAttention` with ``causal=False``; ``"rope_2d"``
    rotates q and k in each through ``transform_qk``) → LayerNorm → mean over the
    patch tokens (no CLS token) → linear classifier.

    The scheme is built by name from the ``"2d"`` namespace of the registry
    (``self.scheme``, shared by the blocks). A state_dict saved when the learned
    table was ``pos_table`` still loads.

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
        patch_embed = nn.Linear(config.in_channels * p * p, d)
        # the stored runs' order: the table drawn after the patch embedding, but
        # listed first among the parameters (it was the model's own pos_table)
        self.scheme = build_scheme(
            config.scheme,
            namespace=GRID_NAMESPACE,
            d_model=d,
            num_heads=config.num_heads,
            **config.scheme_options,
        )
        self.patch_embed = patch_embed
        self.blocks = nn.ModuleList(
            Block(config, self.scheme, causal=False) for _ in range(config.num_layers)
        )
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, config.num_classes)
        self.register_load_state_dict_pre_hook(_rename_old_table)

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
        x = self.patch_embed(patches)  # (B, T, d)
        if "embed" in self.scheme.hooks:
            x = self.scheme.embed(x, positions, grid)
        all_weights = []
        for block in self.blocks:
            x, w = block(x, positions, need_weights=need_weights)
            all_weights.append(w)
        logits = self.head(self.ln_f(x).mean(dim=1))  # mean over the T patches
        return (logits, all_weights) if need_weights else logits

    def forward(
        self,
        images: torch.Tensor,
        positions: torch.Tensor | None = None,
        *,
        need_weights: bool = False,
    ):
        images = check_images(images)
        if images.shape[1] != self.config.in_channels:
            raise ValueError(
                f"images must have {self.config.in_channels} channel(s), got "
                f"{images.shape[1]} in shape {tuple(images.shape)}"
            )
        patches, grid = patchify(images, self.config.patch_size)
        if positions is None:
            positions = grid_positions(*grid, device=images.device)
        return self.forward_patches(patches, positions, grid, need_weights=need_weights)
