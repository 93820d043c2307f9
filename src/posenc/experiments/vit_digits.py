"""The tiny ViT on scikit-learn's 8 × 8 digits: the data, the training loop and the
experiment that tests the 2-D position schemes at a resolution never seen in training.

:func:`digits_experiment` trains a :class:`posenc.layers.vit.TinyViT` per (scheme, seed)
on
the digits and tests it at 8 × 8 and at 16 × 16 (nearest-neighbour upsampling: an
8 × 8 grid of patches, grid positions 4 … 7 unseen), with integer positions and with
positions scaled back into the training range; ``patch_size=1`` keeps every token a
single pixel at both resolutions, so that the unseen resolution changes the positions
and not what a token contains: with p ≥ 2 a 2 × 2 patch of a ×2 nearest-upsampled
image is one pixel repeated, a patch never seen in training, and even ``"none"`` falls
to chance. Each run is cached under ``cache_dir()/vit``, keyed by a hash of its
configuration (:class:`DigitsRun`); the book's runs are stored in the repository
instead (:mod:`posenc.experiments.vit_study`).

The training loop is :func:`posenc.train.fit`, the package's one loop: the classifier
is wrapped to look like a sequence model with one output token (logits (B, 1, C),
targets (B, 1)), which is all ``fit``'s cross-entropy needs.

Shapes:
    N images, C = 1 channel, 8 × 8 pixels (16 × 16 upsampled); labels int64 (N,) in
    0 … 9; logits (B, 10).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from contextlib import contextmanager
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn

from . import store
from .._checks import check_choice, check_int
from ..schemes_2d import grid_positions
from ..layers.train import REQUIRE_CACHED_ENV, TrainConfig, cache_dir, fit
from ..utils import get_device, seed_everything
from ..layers.vit import (
    CONTINUOUS_SCHEMES,
    VIT_SCHEMES,
    TinyViT,
    ViTConfig,
    check_images,
)

#: Bump when a change to the model (:mod:`posenc.layers.vit`, :mod:`posenc.schemes_2d`)
#: or to
#: this module makes cached experiment results wrong (it enters every run's key).
VIT_CACHE_VERSION = 1


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
    images = check_images(images)
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
#: training range). ``"8x8"``: the test split as trained (a 4 × 4 grid for p = 2);
#: ``"16x16"``: the test images upsampled ×2 and patched with the same p (an 8 × 8
#: grid: row and column ids 4 … 7 unseen; ``"learned"`` resizes its table);
#: ``"16x16 scaled"``: the same images with the positions multiplied by 4/8 = 0.5
#: into the training range (position interpolation, Chen et al. 2023, for images),
#: only for :data:`~posenc.layers.vit.CONTINUOUS_SCHEMES` (for ``"none"`` it would be
#: ``"16x16"`` again, and ``"learned"``'s resize already is an interpolation).
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
            "train": self.train_config.to_dict(),
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
def torch_threads(device: torch.device, num_threads: int | None):
    """torch's CPU threads set to ``num_threads`` (None: left) and restored after."""
    threads = torch.get_num_threads()
    if device.type == "cpu" and num_threads is not None:
        torch.set_num_threads(check_int("num_threads", num_threads, minimum=1))
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def train_and_score(run: DigitsRun, data, device, progress) -> list[dict]:
    """Train one run from scratch and score it at every resolution of
    :data:`RESOLUTIONS` (no cache).

    Args:
        run: the (scheme, seed) run. data: :func:`load_digits_split`'s four tensors.
        device: where to train. progress: show fit's bar.

    Returns:
        One row per evaluated resolution, as :func:`digits_experiment` returns them.
    """
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

    The resolutions are :data:`RESOLUTIONS`; why ``patch_size=1`` isolates the
    positions, see the module's docstring.

    Each run is cached on disk (:func:`posenc.layers.train.cache_dir` / ``vit``),
    keyed by its full configuration (:meth:`DigitsRun.key`), so a second call reads
    the accuracies back. The book's runs
    (:data:`posenc.experiments.vit_study.VIT_DIGITS`) are not read from this cache:
    they are stored in the repository
    (:func:`posenc.experiments.vit_study.load_digits_results`).

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
    with torch_threads(device, num_threads):
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
            "stored in the repository: read them with "
            "posenc.experiments.vit_study.load_digits_results (computed by "
            "`make study`, "
            "python -m posenc.experiments.vit_study); to train this run, "
            f"call digits_experiment without {REQUIRE_CACHED_ENV}=1"
        )
    run_rows = train_and_score(run, data, device, progress)
    if use_cache:
        store.write_json(path, run_rows, indent=1)
    return run_rows


def digits_table(rows: list[dict], confidence: float = 0.95) -> str:
    """A text table: one line per scheme, one column per resolution, each cell the
    mean accuracy (%) over seeds and its Student-t interval
    (:func:`posenc.experiments.stats.mean_ci`); "—" where a scheme has no such
    evaluation."""
    from .stats import mean_ci

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
