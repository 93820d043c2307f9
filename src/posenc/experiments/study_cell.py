"""One cell of the length-generalization study's grid (:class:`~posenc.experiments.
study_grid.StudyRun`) trained and scored: :func:`execute` returns the record that
:mod:`posenc.experiments.study` stores."""

from __future__ import annotations

import time
from dataclasses import asdict

import torch

from . import store
from ..layers.data import Corpus
from ..layers.drope import drope
from ..layers.model import TinyLM
from ..layers.train import fit, scheme_arguments, train, train_prefix
from ..utils import get_device, seed_everything
from .lm_evaluation import window_losses
from .probes import PROBES, probe_accuracy, probe_batch
from .study_grid import MULTIPLES, StudyRun, study_corpus


def _curve(losses: list[float], every: int = 10) -> list[float]:
    """Training losses averaged over consecutive groups of ``every`` steps."""
    return [
        round(sum(losses[i : i + every]) / len(losses[i : i + every]), 4)
        for i in range(0, len(losses), every)
    ]


def _train_on_probes(model_cfg, train_cfg, device, stop_after=None):
    """A fresh model trained on the probe mixture (all of ``train_cfg``'s steps, or the
    first ``stop_after``): ``(model, losses, seconds)``."""
    generator = seed_everything(train_cfg.seed)
    model = TinyLM(model_cfg).to(device)
    tasks = sorted(PROBES)
    step = iter(range(10**9))

    def next_batch():
        task = tasks[next(step) % len(tasks)]
        x, y, _ = probe_batch(
            task, train_cfg.batch_size, train_cfg.seq_len, generator=generator
        )
        return x.to(device), y.to(device)

    losses, seconds = fit(
        model, train_cfg, next_batch, progress=False, stop_after=stop_after
    )
    return model, losses, seconds


def _probe_run(run, model_cfg, train_cfg, device, rows) -> tuple[list, float]:
    """Train a fresh model on the probes and append its accuracies to ``rows``;
    returns the training losses and seconds."""
    model, losses, train_seconds = _train_on_probes(model_cfg, train_cfg, device)
    tasks = sorted(PROBES)
    limit = model.max_positions
    sequences = run.evaluation()["sequences"]
    for m in MULTIPLES:
        E = m * run.train_length
        if limit is not None and E > limit:
            continue
        for task in tasks:
            for metric, value in probe_accuracy(
                model, task, E, sequences=sequences
            ).items():
                rows.append(_row(task, metric, E, value))
    return losses, train_seconds


def _language_modelling_run(
    run, model_cfg, train_cfg, corpus, device, rows, extra
) -> tuple[list, float]:
    """Train (or load) the run's model — for a DroPE run, its source, dropped and
    recalibrated — score it on the validation split, and append the losses to
    ``rows`` and what else the record keeps to ``extra``; returns the training losses
    and seconds."""
    result = train(model_cfg, train_cfg, corpus, device=device, progress=False)
    recal_cfg = run.recalibration_config()
    if recal_cfg is not None:
        extra["source_from_cache"] = result.from_cache
        if run.drops_encoding:
            result = drope(result, recal_cfg, corpus, device=device, progress=False)
        else:  # the control: the same steps with the encoding kept
            result = train(
                model_cfg, recal_cfg, corpus, init=result, device=device,
                progress=False,
            )
        extra["recalibration"] = recal_cfg.to_dict()
        extra["evaluated_scheme"] = result.model.config.scheme
    extra["weights_from_cache"] = result.from_cache
    spec = run.evaluation()
    scorings = {"": {}}  # metric suffix -> window_losses options
    if "drawn_positions" in spec:  # randomized positions: scored as trained, too
        scorings["_drawn"] = {
            "drawn_positions": spec["drawn_positions"],
            "seed": run.seed,
        }
    for suffix, options in scorings.items():
        scores = window_losses(
            result.model,
            corpus.val_documents(),
            run.train_length,
            spec["multiples"],
            block_every=spec["block_every"],
            **options,
        )
        for protocol in ("sliding", "matched"):
            for E, value in scores[protocol].items():
                metric = f"loss_{protocol}{suffix}"
                rows.append(_row("language_modeling", metric, E, value))
        if suffix:
            continue
        extra.update({k: scores[k] for k in ("blocks", "matched_blocks", "bytes")})
        if run.kind == "lm":
            extra["position_loss"] = [round(v, 4) for v in scores["position"]]
    return result.losses, result.seconds


def execute(run: StudyRun, corpus: Corpus | None = None, *, device=None) -> dict:
    """Train and score one cell of the grid; the record :func:`run_study` stores.

    Language-modelling runs go through :func:`posenc.layers.train.train` (their weights
    are cached like the book's); a DroPE run (:attr:`StudyRun.recalibration`) trains
    its source so, then drops its encoding and recalibrates it
    (:func:`posenc.layers.drope.drope`) and scores the recalibrated model; probe runs
    train on :func:`probe_batch` and are not cached.
    """
    corpus = corpus if corpus is not None else study_corpus()
    device = torch.device(device) if device is not None else get_device()
    model_cfg, train_cfg = run.configs()
    start = time.perf_counter()
    rows: list[dict] = []
    extra: dict = {}
    if run.kind == "probe":
        losses, train_seconds = _probe_run(run, model_cfg, train_cfg, device, rows)
    else:
        losses, train_seconds = _language_modelling_run(
            run, model_cfg, train_cfg, corpus, device, rows, extra
        )
    return {
        "key": run.key(corpus),
        "run": asdict(run),
        "model": {
            **model_cfg.to_dict(),
            "scheme_options": scheme_arguments(model_cfg),
            "head_dim": model_cfg.d_model // model_cfg.num_heads,
        },
        "train": train_cfg.to_dict(),
        "evaluation": run.evaluation(),
        "corpus": [corpus.name, corpus.fingerprint],
        "parameters": TinyLM(model_cfg).num_parameters(),
        "rows": rows,
        "train_loss": _curve(losses),
        **extra,
        "provenance": {
            **store.provenance(),
            "device": str(device),
            "train_seconds": round(train_seconds, 2),
            "wall_seconds": round(time.perf_counter() - start, 2),
        },
    }


def _row(task: str, metric: str, eval_length: int, value: float) -> dict:
    return {
        "task": task,
        "metric": metric,
        "eval_length": int(eval_length),
        "value": float(value),
    }


def training_prefix(
    run: StudyRun, steps: int, corpus: Corpus | None = None, *, device="cpu"
) -> list[float]:
    """The first ``steps`` steps of a run's training, from scratch (never cached), as
    its record keeps them: means over 10 steps (the record's ``train_loss``). A run
    too long to repeat in a test is reproduced in part this way.

    Raises:
        ValueError: a run that trains on from a source (DroPE and its control), or
            ``steps`` not a positive multiple of 10 within the run's steps.
    """
    if run.recalibration:
        raise ValueError(f"run {run.label!r} trains on from a source: no prefix")
    model_cfg, train_cfg = run.configs()
    if steps % 10 or not 10 <= steps <= train_cfg.steps:
        raise ValueError(
            f"steps must be a multiple of 10 in 10 … {train_cfg.steps}, got {steps}"
        )
    device = torch.device(device)
    if run.kind == "probe":
        _, losses, _ = _train_on_probes(model_cfg, train_cfg, device, stop_after=steps)
    else:
        corpus = corpus if corpus is not None else study_corpus()
        losses = train_prefix(model_cfg, train_cfg, corpus, steps=steps, device=device)
    return _curve(losses)
