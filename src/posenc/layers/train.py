"""Training and evaluation of the tiny LM, with trained weights cached on disk.

:func:`train` is an AdamW loop (linear warm-up, cosine decay, gradient clipping) with a
tqdm progress bar. Its result is stored under :func:`cache_dir`, keyed by a hash of the
*full* configuration — model config, training config and a fingerprint of the corpus
bytes — so that re-running a notebook, or building the site after testing it, loads the
weights instead of retraining. The device is not part of the key: weights trained on a
GPU are reused on a CPU.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import math
import os
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path

import platformdirs
import torch
import torch.nn.functional as F
from filelock import FileLock
from tqdm import TqdmWarning

with warnings.catch_warnings():
    # In a kernel without ipywidgets, tqdm.auto warns once at import and falls back to a
    # text bar, which is what we want on a build machine; Colab has ipywidgets and gets
    # the widget.
    warnings.simplefilter("ignore", TqdmWarning)
    from tqdm.auto import tqdm

from .._checks import check_int
from .data import (
    MAX_RANDOM_POSITION,
    Corpus,
    get_batch,
    load_stdlib_corpus,
    random_positions,
)
from .evaluation import (  # re-exported: scoring lived here first
    EVAL_BATCH_TOKENS,
    EvalResult,
    evaluate,
    loss_by_position,
    perplexity_by_length,
    token_losses,
)
from .model import ModelConfig, TinyLM
from ..schemes import get_scheme_class
from ..utils import get_device, seed_everything

#: When this environment variable is "1", :func:`train` loads from the cache or raises:
#: the book's build (the Makefile) sets it, so that a notebook cell never trains
#: (``python -m posenc.book.prepare`` trains every run of
#: :func:`posenc.experiments.book_runs` first).
REQUIRE_CACHED_ENV = "POSENC_REQUIRE_CACHED"

#: Bump when a change to the training code makes old cached weights wrong.
CACHE_VERSION = 3

#: Randomized positions (TrainConfig.random_positions) are drawn from a generator
#: seeded with the run's seed plus this, apart from the batches' generator.
POSITION_SEED_OFFSET = 2**31


@dataclass
class TrainConfig:
    """How to train.

    Attributes:
        seq_len: training length L_train (bytes). batch_size: sequences per step. steps:
        optimiser steps. lr: peak learning rate. warmup_steps: linear warm-up.
        weight_decay: AdamW decay of the weight matrices (embeddings, biases and norms
        are not decayed, so rows of a learned table that training never reaches stay
        exactly at their initial values). grad_clip: max gradient norm. seed: seeds
        initialisation and batch order. random_positions: None (positions 0 … T − 1),
        or the range of the randomized positions every training step draws instead
        (Ruoss et al., 2023: :func:`~posenc.layers.data.random_positions`; an int
        from ``seq_len`` to its maximum), from a generator of their own, so that the
        batches are those of the same seed without the option.

    Raises:
        TypeError / ValueError: a size that is not a positive integer, a negative
        warm-up or seed, an ``lr`` that is not finite and > 0, or ``random_positions``
        below ``seq_len``.
    """

    seq_len: int = 64
    batch_size: int = 32
    steps: int = 600
    lr: float = 3e-3
    warmup_steps: int = 50
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    seed: int = 0
    random_positions: int | None = None

    def __post_init__(self) -> None:
        for name in ("seq_len", "batch_size", "steps"):
            check_int(name, getattr(self, name), minimum=1)
        check_int("warmup_steps", self.warmup_steps, minimum=0)
        check_int("seed", self.seed, minimum=0)
        if not (self.lr > 0 and math.isfinite(self.lr)):
            raise ValueError(f"lr must be finite and > 0, got {self.lr}")
        if self.random_positions is not None:
            check_int("random_positions", self.random_positions)
            if not self.seq_len <= self.random_positions <= MAX_RANDOM_POSITION:
                raise ValueError(
                    f"random_positions must be None or lie in seq_len "
                    f"({self.seq_len}) … {MAX_RANDOM_POSITION}, got "
                    f"{self.random_positions}"
                )

    def to_dict(self) -> dict:
        """The config as a dict; without ``random_positions`` when it is None, so that
        adding the option left every cache key and stored result's key unchanged."""
        out = asdict(self)
        if out["random_positions"] is None:
            del out["random_positions"]
        return out


@dataclass
class TrainResult:
    """What :func:`train` returns.

    Attributes:
        model: the trained TinyLM, in eval mode, on the requested device.
        losses: training loss at every step.
        seconds: wall time of the training run that produced these weights (not of a
            cache load).
        from_cache: whether the weights were loaded from disk.
        key: the cache key.
        train_config: the training configuration (its ``seq_len`` is the training
            length).
    """

    model: TinyLM
    losses: list[float] = field(default_factory=list)
    seconds: float = 0.0
    from_cache: bool = False
    key: str = ""
    train_config: TrainConfig | None = None


#: Trained weights that ship inside the package: one safetensors file per run that a
#: chapter loads at the small scale (:func:`posenc.experiments.book_runs`), named by its
#: cache key and carrying its training losses and provenance as metadata. Written by
#: ``python -m posenc.book.prepare --ship``; :func:`train` loads them when the run is
#: not in
#: :func:`cache_dir`, so that a fresh Colab runtime trains nothing.
SHIPPED_DIR = Path(__file__).parents[1] / "weights"


def shipped_path(key: str) -> Path:
    """Where the shipped weights of the run with cache key ``key`` are (or would be)."""
    return SHIPPED_DIR / f"{key}.safetensors"


def cache_dir() -> Path:
    """Where trained weights live: ``$POSENC_CACHE_DIR`` if set, else the user cache
    folder (``~/.cache/posenc`` on Linux, via platformdirs)."""
    env = os.environ.get("POSENC_CACHE_DIR")
    return Path(env) if env else Path(platformdirs.user_cache_dir("posenc"))


def scheme_arguments(model_config: ModelConfig) -> dict:
    """Every keyword argument the model's scheme is built with: its signature's
    defaults, overridden by ``scheme_options``. Part of the cache key, so that a changed
    default retrains instead of loading stale weights, and an option spelled out at its
    default value shares the cached run."""
    parameters = inspect.signature(
        get_scheme_class(model_config.scheme).__init__
    ).parameters
    defaults = {
        name: p.default
        for name, p in parameters.items()
        if p.kind is p.KEYWORD_ONLY and p.default is not p.empty
    }
    return {**defaults, **model_config.scheme_options}


def cache_key(
    model_config: ModelConfig,
    train_config: TrainConfig,
    corpus: Corpus,
    *,
    init_key: str | None = None,
) -> str:
    """A stable hash of everything that determines the trained weights: the model config
    with the scheme's resolved arguments (:func:`scheme_arguments`), the training
    config, the corpus, and for a fine-tune the key of the weights it started from."""
    model = {**model_config.to_dict(), "scheme_options": scheme_arguments(model_config)}
    payload = {
        "version": CACHE_VERSION,
        "model": model,
        "train": train_config.to_dict(),
        "corpus": [corpus.name, corpus.fingerprint],
    }
    if init_key is not None:
        payload["init"] = init_key
    text = json.dumps(payload, sort_keys=True, default=str)
    return f"{model_config.scheme}-{hashlib.sha256(text.encode()).hexdigest()[:20]}"


def _lr_at(step: int, cfg: TrainConfig) -> float:
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    progress = (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps)
    return cfg.lr * 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))


def _optimizer(model: TinyLM, cfg: TrainConfig) -> torch.optim.AdamW:
    decay, no_decay = [], []
    for module in model.modules():
        for name, p in module.named_parameters(recurse=False):
            is_matrix_weight = isinstance(module, torch.nn.Linear) and name == "weight"
            (decay if is_matrix_weight else no_decay).append(p)
    groups = [
        {"params": decay, "weight_decay": cfg.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(0.9, 0.95))


def train(
    model_config: ModelConfig,
    train_config: TrainConfig,
    corpus: Corpus | None = None,
    *,
    device: torch.device | str | None = None,
    use_cache: bool = True,
    use_shipped: bool = True,
    progress: bool = True,
    init: TrainResult | None = None,
) -> TrainResult:
    """Train a :class:`TinyLM` on ``corpus`` (default: the stdlib corpus), or load it
    from the cache.

    Deterministic on the CPU for a given ``train_config.seed``: the seed fixes the
    initialisation and, through its own generator, the batch order.

    Args:
        model_config, train_config: the full configuration (and the cache key).
        corpus: training data; default :func:`posenc.layers.data.load_stdlib_corpus`.
        device: default :func:`posenc.get_device`.
        use_cache: load from / save to :func:`cache_dir`.
        use_shipped: with ``use_cache``, load the weights that ship with posenc
            (:data:`SHIPPED_DIR`) when the run is not in :func:`cache_dir`.
        progress: show a tqdm progress bar (and say that training starts).
        init: start from this trained model's weights (fine-tuning) instead of a fresh
            initialisation; its cache key becomes part of this one. The model configs
            may differ in scheme options that hold no weights (a RoPE ``scaling``).

    Returns:
        A :class:`TrainResult` whose model is in eval mode.

    Raises:
        RuntimeError: the run is not cached while ``POSENC_REQUIRE_CACHED=1``.
        ValueError: ``random_positions`` beyond the positions the model can take (a
            learned table's ``max_len``).
    """
    corpus = corpus if corpus is not None else load_stdlib_corpus()
    if train_config.random_positions is not None:
        limit = TinyLM(model_config).max_positions
        if limit is not None and train_config.random_positions > limit:
            raise ValueError(
                f"random_positions ({train_config.random_positions}) exceeds the "
                f"{limit} positions scheme {model_config.scheme!r} can take"
            )
    device = torch.device(device) if device is not None else get_device()
    key = cache_key(
        model_config, train_config, corpus, init_key=None if init is None else init.key
    )
    path = cache_dir() / f"{key}.pt"
    if use_cache:
        if use_shipped and shipped_path(key).exists() and not path.exists():
            return load_shipped(key, model_config, train_config, device)
        path.parent.mkdir(parents=True, exist_ok=True)
        # two processes asking for one config train it once
        with FileLock(str(path) + ".lock"):
            if path.exists():
                return _load(path, model_config, train_config, key, device)
            _check_may_train(key, model_config, train_config)
            if progress:
                print(
                    f"training {model_config.scheme} ({train_config.steps} steps of "
                    f"{train_config.batch_size} × {train_config.seq_len} bytes): "
                    f"not in {cache_dir()} nor among the shipped weights",
                    flush=True,
                )
            result = _train(
                model_config, train_config, corpus, device, key, progress, init
            )
            _save(path, result)
            return result
    return _train(model_config, train_config, corpus, device, key, progress, init)


def load_shipped(
    key: str,
    model_config: ModelConfig,
    train_config: TrainConfig,
    device: torch.device | str = "cpu",
) -> TrainResult:
    """The shipped weights of run ``key`` (:data:`SHIPPED_DIR`) as a
    :class:`TrainResult` (``from_cache`` True), on ``device``, in eval mode.

    Raises:
        FileNotFoundError: no weights ship for ``key``.
    """
    from safetensors import safe_open
    from safetensors.torch import load_file

    path = shipped_path(key)
    if not path.exists():
        raise FileNotFoundError(f"no shipped weights for run {key} in {SHIPPED_DIR}")
    with safe_open(str(path), "pt") as handle:
        meta = handle.metadata()
    state = load_file(str(path))
    for name, original in json.loads(meta.get("aliases", "{}")).items():
        state[name] = state[original]
    model = TinyLM(model_config)
    model.load_state_dict(state)
    return TrainResult(
        model.to(device).eval(),
        json.loads(meta["losses"]),
        float(meta["seconds"]),
        True,
        key,
        train_config,
    )


def ship(key: str, provenance: dict | None = None) -> Path:
    """Write the cached run ``key`` (``cache_dir()/key.pt``) as shipped weights:
    safetensors with the losses, training seconds, configuration and ``provenance``
    as metadata.

    Returns:
        The path written.

    Raises:
        FileNotFoundError: the run is not in the cache.
    """
    from safetensors.torch import save_file

    blob = torch.load(cache_dir() / f"{key}.pt", map_location="cpu", weights_only=True)
    metadata = {
        "key": key,
        "losses": json.dumps([round(float(x), 6) for x in blob["losses"]]),
        "seconds": f"{float(blob['seconds']):.3f}",
        "provenance": json.dumps(provenance or {}, sort_keys=True),
    }
    SHIPPED_DIR.mkdir(parents=True, exist_ok=True)
    path = shipped_path(key)
    # a table shared by the blocks (one storage under several names) is stored once;
    # the other names are recorded as aliases of the first
    state, aliases, first_name = {}, {}, {}
    for name, tensor in blob["state_dict"].items():
        storage = (tensor.untyped_storage().data_ptr(), tensor.storage_offset())
        if storage in first_name:
            aliases[name] = first_name[storage]
        else:
            first_name[storage] = name
            state[name] = tensor.contiguous()
    metadata["aliases"] = json.dumps(aliases, sort_keys=True)
    save_file(state, str(path), metadata=metadata)
    return path


def _check_may_train(
    key: str, model_config: ModelConfig, train_config: TrainConfig
) -> None:
    """Raise the RuntimeError of :func:`train` when run ``key`` would be trained while
    ``POSENC_REQUIRE_CACHED=1`` (the book build trains every model first)."""
    if os.environ.get(REQUIRE_CACHED_ENV) == "1":
        raise RuntimeError(
            f"{REQUIRE_CACHED_ENV}=1 and run {key} (scheme {model_config.scheme!r}, "
            f"options {model_config.scheme_options}, seq_len {train_config.seq_len}) "
            f"is not in {cache_dir()}: the build trains every model before the "
            "notebooks run; add this run to posenc.experiments.book_runs() and run "
            "`python -m posenc.book.prepare`"
        )


def _save(path: Path, result: TrainResult) -> None:
    """Write a trained run to the cache file ``path`` (read back by :func:`_load`):
    the CPU state dict, the losses and the training seconds, atomically (a temporary
    file renamed into place, so a reader never sees half a file)."""
    tmp = path.with_suffix(".tmp")
    state = {k: v.cpu() for k, v in result.model.state_dict().items()}
    blob = {"state_dict": state, "losses": result.losses, "seconds": result.seconds}
    torch.save(blob, tmp)
    os.replace(tmp, path)


def _load(
    path: Path,
    model_config: ModelConfig,
    train_config: TrainConfig,
    key: str,
    device: torch.device,
) -> TrainResult:
    blob = torch.load(path, map_location="cpu", weights_only=True)
    model = TinyLM(model_config)
    model.load_state_dict(blob["state_dict"])
    return TrainResult(
        model.to(device).eval(),
        list(blob["losses"]),
        float(blob["seconds"]),
        True,
        key,
        train_config,
    )


def fit(
    model: torch.nn.Module,
    cfg: TrainConfig,
    next_batch,
    *,
    progress: bool = True,
    desc: str = "train",
    stop_after: int | None = None,
) -> tuple[list[float], float]:
    """The optimisation loop every training run shares: AdamW (decay on the weight
    matrices only), linear warm-up then cosine decay (:func:`_lr_at`), gradient
    clipping at ``cfg.grad_clip``, a tqdm bar.

    Args:
        model: any module mapping the inputs x to logits (B, T, C) (a TinyLM; the
            tiny ViT of :mod:`posenc.experiments.vit_digits` returns (B, 1, classes)),
            left in
            train mode while it runs.
        cfg: steps, learning rate and its schedule, weight decay, clipping.
        next_batch: ``next_batch() -> (x, y)``: inputs of any dtype and int64 (B, T)
            targets on the model's device; a target of −100 is not scored (a probe's
            prompt). It must return ``(x, y, positions)`` instead when
            ``cfg.random_positions`` is set: the model is then called as
            ``model(x, positions)``.
        progress: show the bar. desc: its label.
        stop_after: run only the first this many steps of ``cfg``'s schedule (a
            partial reproduction, :func:`train_prefix`); None runs them all.

    Returns:
        ``(loss at every step, wall seconds)``.
    """
    opt = _optimizer(model, cfg)
    losses: list[float] = []
    start = time.perf_counter()
    model.train()
    steps = cfg.steps if stop_after is None else min(cfg.steps, stop_after)
    bar = tqdm(range(steps), desc=desc, disable=not progress, mininterval=1.0)
    for step in bar:
        for group in opt.param_groups:
            group["lr"] = _lr_at(step, cfg)
        x, y, *positions = next_batch()
        if cfg.random_positions is not None and not positions:
            raise ValueError(
                f"random_positions={cfg.random_positions} is set but next_batch "
                "returned no positions: this training loop does not draw them"
            )
        logits = model(x, *positions)
        loss = F.cross_entropy(logits.flatten(0, 1), y.flatten(), ignore_index=-100)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        losses.append(loss.item())
        if step % 50 == 0:
            bar.set_postfix(loss=f"{losses[-1]:.3f}")
    bar.close()
    model.eval()
    return losses, time.perf_counter() - start


def train_prefix(
    model_config: ModelConfig,
    train_config: TrainConfig,
    corpus: Corpus | None = None,
    *,
    steps: int,
    device: torch.device | str | None = None,
) -> list[float]:
    """The training losses of the first ``steps`` steps of :func:`train` with these
    configurations, computed from scratch and never cached: the same initialisation,
    batches and learning-rate schedule, stopped early. A run too long to repeat in a
    test is reproduced in part this way (``python -m posenc.experiments.study --check
    --preset cpu2``).

    Returns:
        ``steps`` losses (nats per byte), as :attr:`TrainResult.losses` begins.

    Raises:
        ValueError: ``steps`` not an integer in 1 … ``train_config.steps``.
    """
    check_int("steps", steps)
    if not 1 <= steps <= train_config.steps:
        raise ValueError(
            f"steps must lie in 1 … train_config.steps ({train_config.steps}), got "
            f"{steps}"
        )
    corpus = corpus if corpus is not None else load_stdlib_corpus()
    device = torch.device(device) if device is not None else get_device()
    return _train(
        model_config, train_config, corpus, device, "", False, stop_after=steps
    ).losses


def _train(
    model_config,
    cfg: TrainConfig,
    corpus: Corpus,
    device,
    key,
    progress,
    init=None,
    stop_after=None,
) -> TrainResult:
    generator = seed_everything(cfg.seed)
    # a stream of their own: drawing positions does not change the batches
    drawing = torch.Generator().manual_seed(cfg.seed + POSITION_SEED_OFFSET)
    model = TinyLM(model_config)
    if init is not None:
        model.load_state_dict(init.model.state_dict())
    model = model.to(device)

    def next_batch():
        x, y = get_batch(
            corpus.train,
            cfg.batch_size,
            cfg.seq_len,
            generator=generator,
            device=device,
        )
        if cfg.random_positions is None:
            return x, y
        drawn = random_positions(
            cfg.seq_len, cfg.random_positions, generator=drawing, device=device
        )
        return x, y, drawn

    losses, seconds = fit(
        model,
        cfg,
        next_batch,
        progress=progress,
        desc=f"train {model_config.scheme}",
        stop_after=stop_after,
    )
    return TrainResult(model, losses, seconds, False, key, cfg)
