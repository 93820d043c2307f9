"""One store for stored results: the study tier's files, their provenance, resume,
prune, staleness and the reproduction check.

A study whose runs take too long for every build (the length-generalization study,
the tiny-ViT digits study, the real-model study, the benchmarks) stores each run's
result as a JSON file inside the package, in ``src/posenc/results/<name>/``
(:func:`results_dir`), keyed by a hash of the run's configuration, with the
provenance of the machine that computed it (:func:`provenance`). Every such study
follows one protocol, and this module is the one place that implements it:

* **compute what is missing** (resume): :func:`read_records` reads the folder,
  :func:`missing_runs` lists the runs of the current grid that have no file, and
  :func:`compute` runs them (in worker processes from :func:`worker_pool`, in this
  one, or as submitit jobs on SLURM or submitit's local executor:
  :mod:`posenc.experiments.executor`), each file written atomically
  (:func:`write_json`) the moment its run ends, so that an interrupted study resumes
  where it stopped;
* **prune**: :func:`prune` deletes stored files that no run of the grid uses;
* **staleness**: :func:`grid_records` returns the records of the grid in its order, and
  raises :class:`StaleResultsError` (:func:`stale_error`'s message names the runs and
  the command that recomputes them) when a run has no file;
* **the reproduction check**: a study reruns a stated sample from scratch and compares
  each value with the stored one within a tolerance (:func:`compare`, reported by
  :func:`report`);
* **the command line**: ``--list``, ``--verify`` and ``--check``
  (:func:`add_arguments`, :func:`print_listing`, :func:`verify_or_check`).

What a run is, its key and its record are each study's own; nothing here imports a
study.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import subprocess
import sys
from collections.abc import Callable, Container, Iterable, Mapping
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar

import torch

from .executor import Submitit, as_executor, init_worker, submit

Run = TypeVar("Run")

#: The folder of every stored study: package data, so an installed posenc carries it.
RESULTS_ROOT = Path(__file__).parents[1] / "results"

#: Missing runs a staleness message names before it says "...".
NAMED_MISSING = 6


class StaleResultsError(RuntimeError):
    """The stored results do not cover the current grid: run ``make study``."""


def results_dir(name: str) -> Path:
    """Where the study ``name`` stores its results: ``src/posenc/results/<name>/``.

    Args:
        name: the study's folder name (e.g. ``"length_generalization"``,
            ``"vit_digits"``, ``"smollm2"``, ``"bench"``).

    Raises:
        ValueError: an empty name, or one that is not a single folder name.
    """
    if not isinstance(name, str) or not name or Path(name).name != name:
        raise ValueError(f"name must be a single folder name, got {name!r}")
    return RESULTS_ROOT / name


# --- provenance -----------------------------------------------------------------------


def _cpu_name() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return cpu


def provenance() -> dict:
    """The machine and versions a run is computed with: ``{"posenc", "torch",
    "python", "cpu", "threads", "date"}`` (versions as strings, the CPU's model name,
    torch's CPU threads now, the UTC date in ISO format to the second). A study adds
    its own fields (device, seconds, ...)."""
    import posenc

    return {
        "posenc": posenc.__version__,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cpu": _cpu_name(),
        "threads": torch.get_num_threads(),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def git_commit() -> str | None:
    """The short hash of the checkout's HEAD commit, or None outside a git checkout
    (an installed posenc) or without git."""
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=Path(__file__).parent,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


# --- files ----------------------------------------------------------------------------


def write_json(path: Path | str, record: Any, *, indent: int | None = None) -> Path:
    """Write ``record`` as JSON text (and a final newline) atomically: to a ``.tmp``
    beside ``path`` first, then renamed over it, so that an interrupted study never
    leaves a half-written record. The folder is created when missing.

    Args:
        path: the file. record: anything ``json.dumps`` takes. indent: as
            ``json.dumps``'s (None: one line).

    Returns:
        ``path``, as a Path.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=indent) + "\n")
    os.replace(tmp, path)
    return path


def read_records(folder: Path | str, *, key_field: str | None = None) -> dict:
    """Every stored record of a folder, ``{key: record}``, in file-name order.

    Args:
        folder: a study's folder (missing: no records).
        key_field: the record's field that holds its key (a file without it is
            keyed by its name); None keys every record by its file name without
            ``.json``.
    """
    out = {}
    for path in sorted(Path(folder).glob("*.json")):
        record = json.loads(path.read_text())
        key = path.stem if key_field is None else record.get(key_field, path.stem)
        out[key] = record
    return out


def missing_runs(
    runs: Iterable[Run], stored: Container[str], key: Callable[[Run], str]
) -> list[Run]:
    """The runs whose key is not stored (resume: what is left to compute), in order."""
    return [run for run in runs if key(run) not in stored]


def prune(folder: Path | str, keep: Container[str]) -> list[str]:
    """Delete the ``*.json`` files of ``folder`` whose name is not in ``keep`` (the
    file names of the current grid's runs): results that no run uses any more.

    Returns:
        The names deleted, sorted.
    """
    folder = Path(folder)
    gone = sorted(p.name for p in folder.glob("*.json") if p.name not in keep)
    for name in gone:
        (folder / name).unlink()
    return gone


# --- staleness ------------------------------------------------------------------------


def stale_error(
    study: str,
    missing: list[str],
    total: int,
    command: str,
    where: Path | str | None = None,
) -> StaleResultsError:
    """The error that says a stored study does not cover its grid.

    Args:
        study: what the study is called after "the stored" (e.g. ``"study
            'length_generalization'"``). missing: the labels of the runs without a
            stored result (at most :data:`NAMED_MISSING` are named). total: runs in
            the grid. command: what computes them (e.g.
            ``"python -m posenc.experiments.vit_study"``).
            where: the folder, named in the message when given.

    Returns:
        A :class:`StaleResultsError` (to raise).
    """
    names = ", ".join(missing[:NAMED_MISSING])
    more = ", ..." if len(missing) > NAMED_MISSING else ""
    place = f" in {where}" if where is not None else ""
    return StaleResultsError(
        f"the stored {study} is stale: {len(missing)} of {total} runs have no stored "
        f"result for the current configuration ({names}{more}){place}; run "
        f"`make study` ({command})"
    )


def grid_records(
    runs: list[Run],
    stored: Mapping[str, dict],
    *,
    key: Callable[[Run], str],
    label: Callable[[Run], str],
    strict: bool,
    study: str,
    command: str,
    where: Path | str | None = None,
) -> list[dict]:
    """The stored record of every run of the grid, in the grid's order.

    Args:
        runs: the current grid. stored: :func:`read_records`. key, label: a run's
            key and its name in messages. strict: raise when a run is not stored;
            False returns the records of the runs that are. study, command, where:
            for the message (:func:`stale_error`).

    Raises:
        StaleResultsError: with ``strict``, a run of the grid has no stored record.
    """
    missing = missing_runs(runs, stored, key)
    if missing and strict:
        raise stale_error(study, [label(r) for r in missing], len(runs), command, where)
    return [stored[key(r)] for r in runs if key(r) in stored]


# --- computing ------------------------------------------------------------------------


def worker_pool(workers: int, threads: int = 1, then=None) -> ProcessPoolExecutor:
    """Fresh ("spawn") worker processes that may train (``POSENC_REQUIRE_CACHED`` is
    unset in them), each with ``threads`` torch threads; ``then`` (a picklable
    function) runs in each worker after that.

    Raises:
        ValueError: ``workers`` or ``threads`` below 1.
    """
    if workers < 1 or threads < 1:
        raise ValueError(
            f"workers and threads must be >= 1, got workers={workers}, "
            f"threads={threads}"
        )
    return ProcessPoolExecutor(
        max_workers=workers,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=init_worker,
        initargs=(threads, then),
    )


def compute(
    todo: list[Run],
    execute: Callable[[Run], dict],
    store: Callable[[Run, dict], None],
    *,
    workers: int,
    here: Callable[[Run], dict] | None = None,
    executor: str | Submitit = "local",
    label: Callable[[Run], str] = repr,
) -> None:
    """Compute each run of ``todo`` and hand its record to ``store`` as it ends.

    Args:
        todo: the runs (:func:`missing_runs`). execute: run -> record, picklable (a
            module-level function, or a ``functools.partial`` of one) when
            ``workers`` ≥ 1 or ``executor`` is submitit's. store: called in this
            process with each run and its record, in the order they end.
            workers: with ``executor="local"``, processes of :func:`worker_pool`
            (one torch thread each); 0 runs every run here, one after another.
            here: what runs a run in this process (default ``execute``), e.g. with
            a corpus already loaded. executor: ``"local"`` (the above), or
            ``"submitit-local"`` or a :class:`posenc.experiments.executor.Submitit`
            (SLURM or submitit's local executor: one job per run, ``workers`` and
            ``here`` unused; :func:`posenc.experiments.executor.submit`).
            label: a run's name in the error of a failed submitit job.

    Raises:
        posenc.experiments.executor.JobFailedError: a submitted run failed.
        ValueError: an unknown ``executor``.
    """
    executor = as_executor(executor)
    if executor != "local":
        submit(todo, execute, store, executor, label=label)
        return
    if workers == 0:
        for run in todo:
            store(run, (here or execute)(run))
        return
    with worker_pool(workers) as pool:
        futures = {pool.submit(execute, run): run for run in todo}
        while futures:
            done, _ = wait(futures, return_when=FIRST_COMPLETED)
            for future in done:
                store(futures.pop(future), future.result())


# --- the reproduction check -----------------------------------------------------------


def compare(stored: float, recomputed: float, tolerance: float, **about) -> dict:
    """One value of the reproduction check: ``{**about, "stored", "recomputed",
    "difference" (recomputed − stored), "tolerance", "ok" (|difference| ≤
    tolerance)}``."""
    difference = recomputed - stored
    return {
        **about,
        "stored": stored,
        "recomputed": recomputed,
        "difference": difference,
        "tolerance": tolerance,
        "ok": abs(difference) <= tolerance,
    }


def report(rows: list[dict], headline: str) -> int:
    """Print the check's ``headline``, then ``NOT REPRODUCED: <row>`` for each row
    that is not ``ok``; return the command's exit status (1 when one is not)."""
    print(headline)
    bad = [r for r in rows if not r["ok"]]
    for r in bad:
        print(f"NOT REPRODUCED: {r}")
    return 1 if bad else 0


# --- the command line -----------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser, *, check: str) -> None:
    """Add the stored-results options every study's command has: ``--list``,
    ``--verify`` and ``--check`` (``check``: what the check reruns, for its help)."""
    parser.add_argument(
        "--list", action="store_true", help="list the grid and which runs are stored"
    )
    parser.add_argument(
        "--verify",
        action="store_true",
        help="fail if the stored results do not cover the current grid (stale), "
        "and exit",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help=f"--verify, then rerun {check} from scratch and compare",
    )


def print_listing(
    runs: Iterable[Run],
    stored: Container[str],
    key: Callable[[Run], str],
    label: Callable[[Run], str],
) -> None:
    """``--list``: one line per run of the grid, ``stored`` or ``missing``, its key
    and its label."""
    for run in runs:
        state = "stored " if key(run) in stored else "missing"
        print(f"{state} {key(run)}  {label(run)}")


def verify_or_check(
    args: argparse.Namespace,
    load: Callable[[], list[dict]],
    summary: Callable[[list[dict]], str],
    check: Callable[[], int],
) -> int | None:
    """``--verify`` and ``--check``: load the stored records of the grid (``load``,
    strict); when they are stale print the error to stderr and return 1; else print
    ``summary(records)``, then with ``--check`` return ``check()``'s status, with
    ``--verify`` 0. Returns None when neither option was given (compute instead)."""
    if not (args.verify or args.check):
        return None
    try:
        records = load()
    except StaleResultsError as err:
        print(err, file=sys.stderr)
        return 1
    print(summary(records))
    return check() if args.check else 0
