"""The tiny-ViT digits study: the book's runs of
:func:`posenc.experiments.vit_digits.digits_experiment`, stored in the repository.

The book's runs (:data:`VIT_DIGITS`: four schemes × three seeds, one pixel per token)
are the study tier: too long for every build, they are stored in the repository, one
JSON file per run in ``src/posenc/results/vit_digits/`` keyed by a hash of its
configuration (:meth:`posenc.experiments.vit_digits.DigitsRun.key`), with its provenance
(versions, CPU, threads, date, seconds), through :mod:`posenc.experiments.store`:

* ``python -m posenc.experiments.vit_study`` (``make study``) computes the runs that are
  missing
  (resumable) and prints the table;
* :func:`load_digits_results` returns the stored rows, and raises
  :class:`posenc.experiments.store.StaleResultsError` when they do not cover the current
  grid
  (``python -m posenc.experiments.vit_study --verify``, which ``make book`` runs);
* ``python -m posenc.experiments.vit_study --check`` (``make test``) retrains
  :data:`CHECK_RUNS`
  from scratch and requires the stored accuracies back within :data:`CHECK_TOLERANCE`.

``python -m posenc.experiments.vit_study --explore [--patch-size 2 ...]`` runs one's own
experiment (cached under ``cache_dir()/vit``, not stored).
"""

from __future__ import annotations

import argparse
import sys
import time
from functools import partial
from pathlib import Path

import torch

from . import executor as dispatch
from . import store
from .store import results_dir
from ..layers.train import tqdm
from ..utils import usable_cpus
from ..layers.vit import VIT_SCHEMES
from .vit_digits import (
    DigitsRun,
    digits_experiment,
    digits_runs,
    digits_table,
    load_digits_split,
    torch_threads,
    train_and_score,
)

VIT_DIGITS = {"schemes": VIT_SCHEMES, "seeds": (0, 1, 2), "patch_size": 1}
"""The book's runs, ``digits_experiment(**VIT_DIGITS)`` (book/rope_2d.ipynb):
every 2-D scheme, three seeds, one pixel per token, so that the 16 × 16 test images
change the positions and not what a token holds. Twelve runs of about 30 s each on
one core: too long for every build, so they are stored in the repository
(:func:`run_digits_study`) and the chapter reads them (:func:`load_digits_results`)."""

#: The study's command, named by the staleness messages.
COMMAND = "python -m posenc.experiments.vit_study"

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
    with torch_threads(device, num_threads):
        rows = train_and_score(run, data, device, progress=False)
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
    *,
    workers: int | None = None,
    device: str = "cpu",
    progress: bool = True,
    executor: str | dispatch.Submitit = "local",
) -> dict:
    """Compute the runs of the study that are not stored (resumable: one file per
    run, written when the run ends), then delete stored files that left the grid.

    Args:
        workers: processes, one torch thread each (default: usable cores, at most
            one per missing run; 1 on a GPU; 0 runs every run in this process).
        device: where to train. progress: a tqdm bar over the runs.
        executor: ``"local"`` (``workers`` processes here), or SLURM or submitit's
            local executor (:mod:`posenc.experiments.executor`).

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
            todo,
            partial(_execute_in_worker, device=device),
            save,
            workers=workers,
            executor=executor,
            label=lambda run: run.label,
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
        posenc.experiments.store.StaleResultsError: a run of the grid has no stored
        result for
            the current configuration (:data:`VIT_DIGITS`, a default of
            :func:`digits_experiment`,
            :data:`~posenc.experiments.vit_digits.VIT_CACHE_VERSION` or
            :data:`~posenc.experiments.vit_digits.RESOLUTIONS` changed); the message
            names the
            runs and the command that computes them.
    """
    return store.grid_records(
        digits_study_runs(),
        _stored_digits(),
        key=DigitsRun.key,
        label=lambda r: r.label,
        strict=strict,
        study="tiny-ViT digits study",
        command=COMMAND,
        where=digits_results_dir(),
    )


def load_digits_results(*, strict: bool = True) -> list[dict]:
    """The stored rows of ``digits_experiment(**VIT_DIGITS)``, as it would return
    them (one dict per scheme, seed and resolution), without training or a cache:
    what the chapter "Positions with several coordinates" (book/rope_2d) reads.

    Raises:
        posenc.experiments.store.StaleResultsError: as :func:`load_digits_records`.
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
        posenc.experiments.store.StaleResultsError: the stored study does not cover the
        grid.
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
        prog=COMMAND,
        description="Tiny ViT on 8×8 digits: 2-D position schemes at an unseen "
        "resolution. Without options: compute the stored study's missing runs "
        "(src/posenc/results/vit_digits/, make study) and print its table.",
    )
    store.add_arguments(parser, check="rope_2d seed 0")
    parser.add_argument(
        "--workers", type=int, default=None, help="processes (default: usable cores)"
    )
    parser.add_argument(
        "--threads", type=int, default=1, help="torch threads of --check (default 1)"
    )
    parser.add_argument(
        "--device", default=None, help="where to train (default: cpu)"
    )
    dispatch.add_arguments(parser)
    explore = parser.add_argument_group(
        "exploring",
        "--explore: run digits_experiment with these arguments (cached "
        "under $POSENC_CACHE_DIR/vit, not stored) and print its table",
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
    print(digits_table(rows))
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
    """``python -m posenc.experiments.vit_study``: the stored study (compute,
    ``--verify``, ``--check``, ``--list``), or ``--explore`` one's own digits
    experiment."""
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
    executor = dispatch.from_arguments(args, parser)
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
    summary = run_digits_study(
        workers=args.workers,
        device=device,
        executor=executor,
    )
    print(
        f"tiny-ViT digits study: {summary['runs']} runs in the grid, "
        f"{summary['computed']} computed now in {summary['wall_seconds']:.0f} s; "
        f"results in {digits_results_dir()}"
    )
    print(digits_table(load_digits_results()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
