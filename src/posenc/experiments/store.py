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

:class:`RealModelStudy` puts the whole protocol together for a study of a pretrained
model run by run in this process (:mod:`posenc.experiments.pretrained_study`,
:mod:`posenc.experiments.remap_study`): compute, records, the check and the command.

What a run is, its key and its record are each study's own; nothing here imports a
study.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Container, Iterable, Mapping
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from datetime import datetime, timezone
from operator import attrgetter
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
    target: str = "make study",
) -> StaleResultsError:
    """The error that says a stored study does not cover its grid.

    Args:
        study: what the study is called after "the stored" (e.g. ``"study
            'length_generalization'"``). missing: the labels of the runs without a
            stored result (at most :data:`NAMED_MISSING` are named). total: runs in
            the grid. command: what computes them (e.g.
            ``"python -m posenc.experiments.vit_study"``).
            where: the folder, named in the message when given. target: the make
            target that computes them (``make engines`` for the engines tier).

    Returns:
        A :class:`StaleResultsError` (to raise).
    """
    names = ", ".join(missing[:NAMED_MISSING])
    more = ", ..." if len(missing) > NAMED_MISSING else ""
    place = f" in {where}" if where is not None else ""
    return StaleResultsError(
        f"the stored {study} is stale: {len(missing)} of {total} runs have no stored "
        f"result for the current configuration ({names}{more}){place}; run "
        f"`{target}` ({command})"
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
    target: str = "make study",
) -> list[dict]:
    """The stored record of every run of the grid, in the grid's order.

    Args:
        runs: the current grid. stored: :func:`read_records`. key, label: a run's
            key and its name in messages. strict: raise when a run is not stored;
            False returns the records of the runs that are. study, command, where,
            target: for the message (:func:`stale_error`).

    Raises:
        StaleResultsError: with ``strict``, a run of the grid has no stored record.
    """
    missing = missing_runs(runs, stored, key)
    if missing and strict:
        raise stale_error(study, [label(r) for r in missing], len(runs), command, where,
                          target)
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
    and its label; then how many are stored and, where ``stored`` maps keys to
    records, the seconds they took when computed (their ``provenance`` 's
    ``wall_seconds``: one process each, so process time)."""
    runs = list(runs)
    have = [run for run in runs if key(run) in stored]
    for run in runs:
        state = "stored " if key(run) in stored else "missing"
        print(f"{state} {key(run)}  {label(run)}")
    line = f"{len(have)} of {len(runs)} runs stored"
    if isinstance(stored, Mapping) and have:
        seconds = sum(
            stored[key(run)].get("provenance", {}).get("wall_seconds", 0)
            for run in have
        )
        line += f", {seconds:,.0f} s when computed ({seconds / len(have):,.0f} s each)"
    print(line)


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


# --- a stored real-model study --------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class RealModelStudy:
    """A stored study of a pretrained model, one forward pass a run computed in this
    process, one JSON file a run in :func:`results_dir` ``(name)``: the protocol above
    put together (resume and prune, staleness, the check, the command line).

    Attributes:
        name: the study's folder name. grid: () -> the current runs, in order.
        key: run -> its key (its file's name without ``.json``).
        execute: ``(run, model, tokenizer, cache=None)`` -> its record (``results``
            with ``bucket_loss`` for a check run; ``provenance`` with ``seconds``
            and ``tokens_fingerprint``).
        load_model: ``(device=None)`` -> ``(model, tokenizer)`` (None: the CPU).
        check_runs: the runs ``--check`` recomputes. tolerance: nats, on every
            bucket mean of a check run. command: what computes the study.
        study: its name in the staleness message. title: its name in ``--verify``'s
            summary ("" for ``study``). label: run -> its name in messages.
        progress: record -> what a progress line says after the run's label.
        compare_tokens: a check run measured on other tokens (another
            ``tokens_fingerprint``) is reported, not compared.
    """

    name: str
    grid: Callable[[], list]
    key: Callable[[Any], str]
    execute: Callable[..., dict]
    load_model: Callable[..., tuple]
    check_runs: tuple
    tolerance: float
    command: str
    study: str
    title: str = ""
    label: Callable[[Any], str] = attrgetter("label")
    progress: Callable[[dict], str] = lambda record: ""
    compare_tokens: bool = False

    @property
    def folder(self) -> Path:
        """The study's folder (:func:`results_dir`)."""
        return results_dir(self.name)

    def stored(self) -> dict[str, dict]:
        """Every stored record, ``{key: record}`` (:func:`read_records`)."""
        return read_records(self.folder)

    def compute_missing(
        self,
        *,
        threads: int | None = None,
        limit: int | None = None,
        device: str | None = None,
    ) -> int:
        """Compute the missing runs in grid order (resumable: one file each, written
        as its run ends) after deleting the files that left the grid.

        Args:
            threads: torch threads (None: leave torch's setting). limit: at most
                this many runs (None: all). device: where the model runs (None:
                the CPU).

        Returns:
            How many runs were computed.
        """
        if threads:
            torch.set_num_threads(threads)
        folder = self.folder
        runs = self.grid()
        if folder.exists():
            prune(folder, {f"{self.key(r)}.json" for r in runs})
        missing = missing_runs(runs, self.stored(), self.key)
        missing = missing[:limit] if limit is not None else missing
        if not missing:
            return 0
        model, tokenizer = self.load_model(device=device)
        cache: dict = {}
        for i, run in enumerate(missing, 1):
            record = self.execute(run, model, tokenizer, cache)
            write_json(folder / f"{self.key(run)}.json", record, indent=1)
            print(
                f"[{i}/{len(missing)}] {self.label(run)}{self.progress(record)} in "
                f"{record['provenance']['seconds']:.0f} s",
                flush=True,
            )
        return len(missing)

    def records(self, *, strict: bool = True) -> list[dict]:
        """The stored records of the current grid, in its order (:func:`grid_records`).

        Raises:
            StaleResultsError: with ``strict``, a run of the grid has no stored file;
                the message names the runs and the command.
        """
        return grid_records(
            self.grid(),
            self.stored(),
            key=self.key,
            label=self.label,
            strict=strict,
            study=self.study,
            command=self.command,
            where=self.folder,
        )

    def reproduce(
        self, model=None, tokenizer=None, *, threads: int | None = None
    ) -> list[dict]:
        """Rerun the check runs from scratch and compare every bucket mean with the
        stored one.

        Args:
            model, tokenizer: as ``load_model`` returns them (loaded on the CPU
                when None). threads: torch threads (None: leave torch's setting).

        Returns:
            One dict per run: ``run`` (its label), with ``compare_tokens``
            ``same_tokens``, then ``difference`` (the largest absolute difference
            of a bucket mean, nats) and ``ok`` (within ``tolerance``, or measured
            on other tokens).

        Raises:
            KeyError: a check run has no stored record.
        """
        if threads:
            torch.set_num_threads(threads)
        stored = self.stored()
        if model is None:
            model, tokenizer = self.load_model()
        rows = []
        for run in self.check_runs:
            record = stored[self.key(run)]
            fresh = self.execute(run, model, tokenizer)
            diff = max(
                abs(a - b)
                for a, b in zip(
                    fresh["results"]["bucket_loss"],
                    record["results"]["bucket_loss"],
                    strict=True,
                )
            )
            row: dict = {"run": self.label(run)}
            ok = diff <= self.tolerance
            if self.compare_tokens:
                row["same_tokens"] = (
                    fresh["provenance"]["tokens_fingerprint"]
                    == record["provenance"]["tokens_fingerprint"]
                )
                ok = (not row["same_tokens"]) or ok
            rows.append({**row, "difference": diff, "ok": ok})
        return rows

    def check(self, *, threads: int | None = None) -> int:
        """``--check``'s rerun: print a line per check run (``reproduced`` or ``NOT
        REPRODUCED``, its largest difference) and the seconds taken.

        Returns:
            The exit status: 0 when every run is reproduced, else 1.
        """
        start = time.perf_counter()
        rows = self.reproduce(threads=threads)
        for r in rows:
            other = not r.get("same_tokens", True)
            print(
                f"{'reproduced' if r['ok'] else 'NOT REPRODUCED'}: {r['run']}, largest "
                f"difference {r['difference']:.2e} nats"
                + (" (other tokens: not compared)" if other else "")
            )
        print(f"checked in {time.perf_counter() - start:.0f} s")
        return 0 if all(r["ok"] for r in rows) else 1

    def main(
        self,
        argv: list[str] | None,
        *,
        description: str,
        check: str,
        options: Iterable[tuple[str, dict]] = (),
    ) -> int:
        """The study's command: ``--list``, ``--verify`` or ``--check`` it, or
        compute its missing runs (:meth:`compute_missing`).

        Args:
            argv: the arguments (None: ``sys.argv``'s). description: the help's.
            check: what ``--check`` reruns, for its help. options: the command's own
                options after the common ones, ``(flag, add_argument's keywords)``;
                ``--threads``, ``--limit`` and ``--device`` reach the computation
                (``--threads`` also the check).

        Returns:
            The exit status.
        """
        parser = argparse.ArgumentParser(prog=self.command, description=description)
        add_arguments(parser, check=check)
        for flag, settings in options:
            parser.add_argument(flag, **settings)
        args = parser.parse_args(argv)
        if args.list:
            print_listing(self.grid(), self.stored(), self.key, self.label)
            return 0
        threads = getattr(args, "threads", None)
        if threads:
            torch.set_num_threads(threads)
        status = verify_or_check(
            args,
            self.records,
            lambda records: (
                f"the stored {self.title or self.study} covers its grid: "
                f"{len(records)} runs, "
                f"{sum(r['provenance']['seconds'] for r in records):.0f} s "
                "when computed"
            ),
            lambda: self.check(threads=threads),
        )
        if status is not None:
            return status
        computed = self.compute_missing(
            threads=threads,
            limit=getattr(args, "limit", None),
            device=getattr(args, "device", None),
        )
        print(f"computed {computed} run(s); results in {self.folder}")
        return 0
