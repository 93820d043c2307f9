"""Train every model the book's chapters load, before the notebooks run.

``python -m posenc.book.prepare`` (run first by ``make book`` and ``make test``) trains
each run of :func:`posenc.experiments.book_runs` that is not yet in the cache, one
process per run and as many processes as there are cores, each with a fixed number of
torch threads, and shows one progress bar over the runs. Training thus never happens
inside a notebook cell, where a cell timeout or a busy machine could decide whether the
book builds; the chapters load the cached weights. Multi-seed experiments are not
trained here: they are the study tier (book/design.md), stored in the repository and
computed
by ``make study`` (:mod:`posenc.experiments.study`,
:mod:`posenc.experiments.pretrained_study`, and the tiny-ViT digits runs of
:mod:`posenc.experiments.vit_study`, which this step trained until it moved there).

Why one thread per process: torch's intra-op threads (OpenMP) spin-wait on each other,
and slow down many times over as soon as another program takes a core. Measured with
``python -m posenc.book.prepare --compare-threads 400`` (two of the book's runs, 400
steps each, on the 2-core machine; wall seconds, idle / beside one busy process): 2
processes × 1 thread 28 / 34; 1 × 2 threads 30 / 92; 2 × 2 87 / 128; 1 × 1 41 / 42.

Usage::

    python -m posenc.book.prepare [--scale small|large] [--workers N] [--threads T]
    [--list] python -m posenc.book.prepare --compare-threads STEPS
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import FIRST_COMPLETED, wait
from dataclasses import replace

import torch

from ..experiments import store
from ..experiments.runs import (
    SCALES,
    BookRun,
    book_runs,
    experiment_config,
    untrained_runs,
    run_key,
)
from ..layers.train import cache_dir, load_shipped, ship, shipped_path, tqdm
from ..experiments.store import worker_pool
from ..utils import usable_cpus

#: The runs ``python -m posenc.book.prepare --check`` retrains from scratch, and how
#: close
#: their losses must come back to the shipped weights': the mean training loss over the
#: last :data:`CHECK_LAST` steps and the validation loss at the training length, in nats
#: per byte. On one CPU, one torch thread and one torch build the runs are
#: deterministic and come back exactly; another CPU's kernels sum in another order.
CHECK_RUNS = ("rope", "alibi")
CHECK_TOLERANCE = 0.02
CHECK_LAST = 50


def ship_all(scale: str = "small") -> list[str]:
    """Write the shipped weights (:func:`posenc.layers.train.ship`) of every book run
    from the cache, with their provenance, and delete shipped files no book run uses.

    Returns:
        The keys written.

    Raises:
        FileNotFoundError: a run is not in the cache (run ``python -m
            posenc.book.prepare`` first).
    """
    from ..layers.data import load_stdlib_corpus, snapshot_provenance

    corpus = load_stdlib_corpus()
    provenance = {**store.provenance(), "corpus": [corpus.name, corpus.fingerprint]}
    provenance["corpus_python"] = snapshot_provenance()["python"]
    keys = [run_key(r, corpus, scale) for r in book_runs(scale)]
    for key in keys:
        ship(key, provenance)
    for path in shipped_path("x").parent.glob("*.safetensors"):
        if path.stem not in keys:
            path.unlink()
    return keys


def check_shipped(sample=CHECK_RUNS, workers: int | None = None) -> list[str]:
    """Retrain the book runs of ``sample`` (scheme names) from scratch, ignoring cache
    and shipped weights, and compare their losses with the shipped weights'.

    Returns:
        One line per run with both values and the difference.

    Raises:
        AssertionError: a loss differs by more than :data:`CHECK_TOLERANCE`.
    """
    runs = [r for r in book_runs() if r.label in sample]
    workers = _workers(workers, "cpu")
    with worker_pool(min(workers, len(runs))) as pool:
        results = list(pool.map(_check_one, runs))
    problems = [line for line, ok in results if not ok]
    if problems:
        raise AssertionError(
            "the shipped weights do not reproduce:\n" + "\n".join(problems)
        )
    return [line for line, _ in results]


def _check_one(run: BookRun) -> tuple[str, bool]:
    from ..layers.data import load_stdlib_corpus
    from ..layers.train import evaluate, train

    corpus = load_stdlib_corpus()
    (model_cfg, train_cfg), _ = run.configs()
    key = run_key(run, corpus, "small")
    shipped = load_shipped(key, model_cfg, train_cfg)
    fresh = train(model_cfg, train_cfg, corpus, device="cpu", use_cache=False,
                  progress=False)
    val = corpus.val[:32768]
    pairs = {
        "training loss (last steps)": (
            sum(shipped.losses[-CHECK_LAST:]) / CHECK_LAST,
            sum(fresh.losses[-CHECK_LAST:]) / CHECK_LAST,
        ),
        "validation loss": (
            evaluate(shipped.model, val, train_cfg.seq_len).loss,
            evaluate(fresh.model, val, train_cfg.seq_len).loss,
        ),
    }
    ok = all(abs(a - b) <= CHECK_TOLERANCE for a, b in pairs.values())
    line = f"{run.label}: " + "; ".join(
        f"{name} shipped {a:.4f}, retrained {b:.4f} (difference {b - a:+.1e})"
        for name, (a, b) in pairs.items()
    )
    return line, ok


def _train_one(run: BookRun, scale: str, device: str) -> tuple[str, float]:
    from ..layers.data import load_stdlib_corpus

    start = time.perf_counter()
    run.run(load_stdlib_corpus(), scale=scale, device=device, progress=False)
    return run.label, time.perf_counter() - start


def _workers(workers: int | None, device: str) -> int:
    """Processes for a training step: default one per usable core on the CPU, one on
    a GPU.

    Raises:
        ValueError: workers < 1.
    """
    if workers is None:
        return 1 if device != "cpu" else usable_cpus()
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    return workers


def _progress_bar(total: int, desc: str, progress: bool):
    return tqdm(
        total=total, desc=desc, disable=not progress, unit="run", file=sys.stdout
    )


def prepare(
    *,
    scale: str = "small",
    workers: int | None = None,
    threads: int = 1,
    device: str = "cpu",
    progress: bool = True,
) -> dict[str, float]:
    """Train the missing runs of :func:`~posenc.experiments.book_runs` in parallel
    processes.

    Fine-tunes wait for the run they start from. Each process trains whole runs, so the
    results are exactly those of training the runs one by one (training is deterministic
    on the CPU).

    Args:
        scale: experiment scale (``"small"`` on a CPU, ``"large"`` on a GPU).
        workers: processes; default the number of usable cores (1 on a GPU device).
        threads: torch threads per process.
        device: where to train.
        progress: one tqdm bar over the runs.

    Returns:
        ``{run label: wall seconds}`` for the runs trained now (empty when everything
        was cached).

    Raises:
        ValueError: unknown scale; workers or threads < 1.
    """
    from ..layers.data import load_stdlib_corpus

    if scale not in SCALES:
        raise ValueError(
            f"scale must be one of {', '.join(map(repr, SCALES))}; got {scale!r}"
        )
    workers = _workers(workers, device)
    if threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    corpus = load_stdlib_corpus()
    todo = untrained_runs(book_runs(scale), corpus, scale)
    # a fine-tune's base run is trained first when it is missing (it is a book run of
    # its own too)
    todo += [
        b
        for b in untrained_runs(
            {r.base for r in todo if r.fine_tune_multiple}, corpus, scale
        )
        if b not in todo
    ]
    if not todo:
        return {}

    def is_ready(run: BookRun) -> bool:  # a fine-tune waits for its base
        base = [run.base] if run.fine_tune_multiple else []
        return not untrained_runs(base, corpus, scale)

    waiting = [r for r in todo if not is_ready(r)]
    seconds: dict[str, float] = {}
    bar = _progress_bar(len(todo), "training the book's models", progress)
    with worker_pool(workers, threads) as pool:
        futures = {
            pool.submit(_train_one, r, scale, device): r
            for r in todo
            if r not in waiting
        }
        while futures:
            done, _ = wait(futures, return_when=FIRST_COMPLETED)
            for future in done:
                del futures[future]
                label, secs = (
                    future.result()
                )  # a failed run raises here, and the step fails
                seconds[label] = secs
                bar.update(1)
                bar.set_postfix_str(f"{label}: {secs:.0f} s")
            for run in [w for w in waiting if is_ready(w)]:
                waiting.remove(run)
                futures[pool.submit(_train_one, run, scale, device)] = run
    bar.close()
    return seconds


def _time_steps(args: tuple[str, int, int]) -> float:
    from ..layers.data import load_stdlib_corpus
    from ..layers.train import train

    scheme, steps, threads = args
    torch.set_num_threads(threads)
    model_cfg, train_cfg = experiment_config(scheme)
    start = time.perf_counter()
    train(
        model_cfg,
        replace(train_cfg, steps=steps),
        load_stdlib_corpus(),
        device="cpu",
        use_cache=False,
        progress=False,
    )
    return time.perf_counter() - start


def compare_threads(
    steps: int, schemes=("rope", "shaw")
) -> dict[tuple[int, int], float]:
    """Wall seconds to train ``schemes`` (``steps`` steps each, not cached) with W
    worker processes × T torch threads, for (W, T) in (2, 1), (1, 2), (2, 2), (1, 1):
    how the thread count of :func:`prepare` was chosen. Process start-up is included."""
    seconds = {}
    for workers, threads in ((2, 1), (1, 2), (2, 2), (1, 1)):
        start = time.perf_counter()
        with worker_pool(workers, threads) as pool:
            list(pool.map(_time_steps, [(s, steps, threads) for s in schemes]))
        seconds[workers, threads] = time.perf_counter() - start
    return seconds


def _parser() -> argparse.ArgumentParser:
    """The command line of ``python -m posenc.book.prepare``: the scale, workers,
    threads and device of the training step, and the modes that only report or
    check (``--list``, ``--ship``, ``--check``, ``--compare-threads``)."""
    parser = argparse.ArgumentParser(
        prog="python -m posenc.book.prepare", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--scale", default="small", choices=sorted(SCALES))
    parser.add_argument(
        "--workers", type=int, default=None, help="processes (default: usable cores)"
    )
    parser.add_argument(
        "--threads", type=int, default=1, help="torch threads per process (default 1)"
    )
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--list", action="store_true", help="list the runs and whether each is cached"
    )
    parser.add_argument(
        "--ship",
        action="store_true",
        help="write the shipped weights (src/posenc/weights) of every book run from "
        "the cache, and exit",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help=f"retrain {', '.join(CHECK_RUNS)} from scratch and compare with the "
        "shipped weights, and exit",
    )
    parser.add_argument(
        "--compare-threads",
        type=int,
        metavar="STEPS",
        help="time two runs of STEPS steps with 1 or 2 processes × 1 or 2 "
        "threads, and exit",
    )
    return parser


def _list_runs(scale: str) -> None:
    """Print each book run at ``scale`` with its cache key and where its weights
    are: shipped with posenc, in the cache only, or missing (to be trained)."""
    from ..layers.data import load_stdlib_corpus

    corpus = load_stdlib_corpus()
    missing = set(untrained_runs(book_runs(scale), corpus, scale))
    for run in book_runs(scale):
        key = run_key(run, corpus, scale)
        state = (
            "missing" if run in missing
            else "shipped" if shipped_path(key).exists() else "cached"
        )
        print(f"{state:8} {key}  {run.label}")


def main(argv: list[str] | None = None) -> int:
    """``python -m posenc.book.prepare``: train the book's missing runs (the default),
    or one of the modes of :func:`_parser`. Returns the exit status, 0."""
    args = _parser().parse_args(argv)
    if args.ship:
        keys = ship_all(args.scale)
        size = sum(shipped_path(k).stat().st_size for k in keys)
        print(f"shipped {len(keys)} runs, {size / 2**20:.1f} MiB, in "
              f"{shipped_path('x').parent}")
        return 0
    if args.check:
        start = time.perf_counter()
        for line in check_shipped(workers=args.workers):
            print(line)
        print(f"the shipped weights reproduce within {CHECK_TOLERANCE} nats per byte "
              f"({time.perf_counter() - start:.0f} s)")
        return 0
    if args.compare_threads:
        for (workers, threads), secs in compare_threads(args.compare_threads).items():
            print(f"{workers} process(es) × {threads} thread(s): {secs:.1f} s")
        return 0
    if args.list:
        _list_runs(args.scale)
        return 0
    start = time.perf_counter()
    seconds = prepare(
        scale=args.scale, workers=args.workers, threads=args.threads, device=args.device
    )
    total = time.perf_counter() - start
    if seconds:
        print(
            f"trained {len(seconds)} runs in {total:.0f} s wall "
            f"({sum(seconds.values()):.0f} s of process time "
            f"over {args.workers or usable_cpus()} workers × "
            f"{args.threads} threads); "
            f"weights in {cache_dir()}"
        )
    else:
        print(f"every run of the book is cached in {cache_dir()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
