"""The executor seam of the stored studies: where their runs are computed.

Each run of a stored study is a pure function from its configuration to its record
(:func:`posenc.experiments.store.compute` hands every record to the study's ``store``
in the parent process, which writes its file). Where the functions run is this
module's choice, named by ``executor``:

* ``"local"`` (the default): worker processes on this machine
  (:func:`posenc.experiments.store.worker_pool`), or this process with ``workers=0``;
* ``"slurm"``: a SLURM cluster through submitit
  (https://github.com/facebookincubator/submitit, pinned in requirements.txt), one job
  per run, submitted as one job array (:class:`Submitit` holds the partition, the time
  limit, CPUs, memory, GPUs and the array's parallelism);
* ``"submitit-local"``: submitit's local executor, the same job path (pickled function,
  a job folder, ``python -m submitit.core._submit``) with processes on this machine;
  the tests run it.

A submitted job runs like a local worker (:func:`init_worker`: training allowed,
``cpus_per_task`` torch threads), and each finished job's record is handed to ``store``
as soon as the parent sees it, so an interrupted study keeps every run that finished
and resumes with the rest. A run that raised is re-raised as :class:`JobFailedError`,
naming the run and its job's log, after the other jobs' records are stored. The jobs'
pickles and logs live under the cache folder (:func:`log_folder`), never in the
repository. The command-line options are :func:`add_arguments` and
:func:`from_arguments`.
"""

from __future__ import annotations

import argparse
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import torch

from .._checks import check_choice, check_int
from ..layers.train import REQUIRE_CACHED_ENV, cache_dir
from ..utils import usable_cpus

Run = TypeVar("Run")

#: The values of ``executor`` (and of the studies' ``--executor``).
EXECUTORS = ("local", "slurm", "submitit-local")

#: submitit's name of each submitit executor (``submitit.AutoExecutor(cluster=...)``).
CLUSTERS = {"slurm": "slurm", "submitit-local": "local"}


class JobFailedError(RuntimeError):
    """A submitted run raised, or its job ended without a result; the message names
    the run and the job's log."""


def init_worker(threads: int, then: Callable[[], Any] | None = None) -> None:
    """Prepare a process that computes runs: it may train (``POSENC_REQUIRE_CACHED``
    is unset), with ``threads`` torch threads; then call ``then`` (if given)."""
    os.environ.pop(REQUIRE_CACHED_ENV, None)  # this is the step that trains
    torch.set_num_threads(threads)
    if then is not None:
        then()


def run_job(execute: Callable[[Run], dict], threads: int, run: Run) -> dict:
    """What one submitted job runs: :func:`init_worker`, then ``execute(run)``."""
    init_worker(threads)
    return execute(run)


def log_folder() -> Path:
    """A new folder for one dispatch's jobs (pickles, stdout and stderr):
    ``cache_dir()/submitit/<UTC date and time>-<process id>``, under
    ``$POSENC_CACHE_DIR`` when set (:func:`posenc.layers.train.cache_dir`)."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S")
    return cache_dir() / "submitit" / f"{stamp}-{os.getpid()}"


@dataclass(frozen=True)
class Submitit:
    """Runs dispatched through submitit: ``cluster`` ``"slurm"`` or
    ``"submitit-local"``.

    Attributes:
        cluster: ``"slurm"`` (``submitit.AutoExecutor(cluster="slurm")``) or
            ``"submitit-local"`` (its local executor, on this machine).
        partition: the SLURM partition (``sbatch --partition``); required for
            ``"slurm"``, ignored locally.
        time_min: each job's time limit, minutes (default 240).
        cpus_per_task: CPU cores per job, and the torch threads its run uses
            (default 1, as a local worker: the same results as ``"local"``).
        mem_gb: memory per job, GB (default 8; SLURM only).
        gpus_per_node: GPUs per job (default 0).
        parallelism: at most this many jobs at once: the SLURM array's ``%N``
            (default: all of them), or the local executor's processes (default:
            the usable cores).
        folder: the jobs' pickles and logs (default :func:`log_folder`).
        poll_s: seconds between looks for finished jobs.

    Raises:
        ValueError: an unknown cluster; ``"slurm"`` without a partition; a count
            below its minimum; ``mem_gb`` or ``poll_s`` not > 0.
        TypeError: a count that is not an integer.
    """

    cluster: str
    partition: str | None = None
    time_min: int = 240
    cpus_per_task: int = 1
    mem_gb: float = 8.0
    gpus_per_node: int = 0
    parallelism: int | None = None
    folder: str | Path | None = None
    poll_s: float = 1.0

    def __post_init__(self) -> None:
        check_choice("cluster", self.cluster, tuple(CLUSTERS))
        if self.cluster == "slurm" and not self.partition:
            raise ValueError(
                f"executor 'slurm' needs a partition (--partition NAME), got "
                f"{self.partition!r}: SLURM jobs are submitted to a named partition"
            )
        check_int("time_min", self.time_min, minimum=1)
        check_int("cpus_per_task", self.cpus_per_task, minimum=1)
        check_int("gpus_per_node", self.gpus_per_node, minimum=0)
        if self.parallelism is not None:
            check_int("parallelism", self.parallelism, minimum=1)
        for name in ("mem_gb", "poll_s"):
            value = getattr(self, name)
            number = isinstance(value, (int, float)) and not isinstance(value, bool)
            if not (number and math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a finite number > 0, got {value!r}")

    def executor(self, folder: Path):
        """The configured ``submitit.AutoExecutor`` writing into ``folder``.

        Raises:
            ImportError: submitit is not installed (``pip install submitit``).
        """
        try:
            import submitit
        except ImportError as err:  # pragma: no cover - a pinned requirement
            raise ImportError(
                f"executor {self.cluster!r} needs submitit: pip install submitit "
                "(the version pinned in requirements.txt)"
            ) from err
        executor = submitit.AutoExecutor(folder=folder, cluster=CLUSTERS[self.cluster])
        parameters = {
            "name": "posenc",
            "timeout_min": self.time_min,
            "cpus_per_task": self.cpus_per_task,
            "mem_gb": self.mem_gb,
        }
        if self.gpus_per_node:
            parameters["gpus_per_node"] = self.gpus_per_node
        if self.cluster == "slurm":
            parameters["slurm_partition"] = self.partition
            if self.parallelism is not None:
                parameters["slurm_array_parallelism"] = self.parallelism
        executor.update_parameters(**parameters)
        return executor


def as_executor(executor: str | Submitit) -> str | Submitit:
    """``"local"``, or the :class:`Submitit` that ``executor`` names (the string
    ``"submitit-local"`` takes every default; ``"slurm"`` needs a :class:`Submitit`
    with its partition).

    Raises:
        ValueError: an unknown name, or ``"slurm"`` given as a bare string.
    """
    if isinstance(executor, Submitit):
        return executor
    check_choice("executor", executor, EXECUTORS)
    return executor if executor == "local" else Submitit(executor)


def _result(job, run: Run, label: Callable[[Run], str]) -> dict:
    try:
        return job.result()
    except Exception as err:  # submitit's FailedJobError or UncompletedJobError
        raise JobFailedError(
            f"run {label(run)} failed in submitit job {job.job_id} (log: "
            f"{job.paths.stderr}):\n{err}"
        ) from err


def submit(
    todo: list[Run],
    execute: Callable[[Run], dict],
    store: Callable[[Run, dict], None],
    spec: Submitit,
    *,
    label: Callable[[Run], str] = repr,
) -> None:
    """Compute each run of ``todo`` as a submitit job and hand its record to
    ``store`` (in this process) as each job ends.

    On SLURM every run is submitted at once, as one job array (throttled by
    ``spec.parallelism``); locally at most ``spec.parallelism`` jobs run at once.

    Args:
        todo: the runs. execute: run -> record, picklable by cloudpickle (a
            module-level function or a ``functools.partial`` of one; the job imports
            its module). store: called with each run and its record. spec: where
            and how (:class:`Submitit`). label: a run's name in error messages.

    Raises:
        JobFailedError: a run raised (the first failure, after every other job
            ended and the records of those that finished were stored).
    """
    if not todo:
        return
    folder = Path(spec.folder) if spec.folder is not None else log_folder()
    executor = spec.executor(folder)
    job_of = partial(run_job, execute, spec.cpus_per_task)
    local_window = spec.parallelism or usable_cpus()
    window = len(todo) if spec.cluster == "slurm" else local_window
    waiting, running, failures = list(todo), [], []
    try:
        while waiting or running:
            if waiting and len(running) < window:
                batch = waiting[: window - len(running)]
                waiting = waiting[len(batch) :]
                running += zip(executor.map_array(job_of, batch), batch)
            ended = [(job, run) for job, run in running if job.done()]
            for job, run in ended:
                running.remove((job, run))
                try:
                    store(run, _result(job, run, label))
                except JobFailedError as err:
                    failures.append(err)
            if not ended:
                time.sleep(spec.poll_s)
    except BaseException:  # interrupted: nobody would store what is still running
        for job, _ in running:
            job.cancel(check=False)
        raise
    if failures:
        raise failures[0]


# --- the command line -----------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add a study command's executor options: ``--executor``, ``--partition``,
    ``--time-min``, ``--cpus-per-task``, ``--mem-gb``, ``--gpus-per-node``,
    ``--array-parallelism`` and ``--log-dir`` (read back by :func:`from_arguments`)."""
    group = parser.add_argument_group("where the runs are computed")
    group.add_argument(
        "--executor",
        default="local",
        choices=EXECUTORS,
        help="local: processes here (--workers; default); slurm: one SLURM job per "
        "run through submitit (needs --partition); submitit-local: submitit's "
        "local executor, the same job path on this machine",
    )
    group.add_argument("--partition", help="the SLURM partition (--executor slurm)")
    group.add_argument(
        "--time-min", type=int, default=240, help="each job's time limit, minutes"
    )
    group.add_argument(
        "--cpus-per-task",
        type=int,
        default=1,
        help="cores per job, and its torch threads (default 1: a local worker's)",
    )
    group.add_argument("--mem-gb", type=float, default=8.0, help="memory per job, GB")
    group.add_argument("--gpus-per-node", type=int, default=0, help="GPUs per job")
    group.add_argument(
        "--array-parallelism",
        type=int,
        default=None,
        help="at most this many jobs at once (default: SLURM all; local the cores)",
    )
    group.add_argument(
        "--log-dir",
        default=None,
        help="the jobs' pickles and logs (default $POSENC_CACHE_DIR/submitit/<time>)",
    )


#: The options that go with a submitit executor only.
SUBMITIT_OPTIONS = (
    "partition",
    "time_min",
    "cpus_per_task",
    "mem_gb",
    "gpus_per_node",
    "array_parallelism",
    "log_dir",
)


def from_arguments(
    args: argparse.Namespace, parser: argparse.ArgumentParser
) -> str | Submitit:
    """The executor the options of :func:`add_arguments` name: ``"local"`` or a
    :class:`Submitit`. A bad combination (``--executor slurm`` without
    ``--partition``, a submitit option with ``--executor local``, a bad count) exits
    through ``parser.error`` with the rule."""
    if args.executor == "local":
        given = [
            "--" + name.replace("_", "-")
            for name in SUBMITIT_OPTIONS
            if getattr(args, name) != parser.get_default(name)
        ]
        if given:
            parser.error(
                f"{', '.join(given)} go with --executor slurm or submitit-local "
                "(--executor local runs processes here: --workers)"
            )
        return "local"
    if getattr(args, "workers", None) not in (None, parser.get_default("workers")):
        parser.error(
            f"--workers goes with --executor local; --executor {args.executor} runs "
            "one job per run (at most --array-parallelism at once)"
        )
    try:
        return Submitit(
            args.executor,
            partition=args.partition,
            time_min=args.time_min,
            cpus_per_task=args.cpus_per_task,
            mem_gb=args.mem_gb,
            gpus_per_node=args.gpus_per_node,
            parallelism=args.array_parallelism,
            folder=args.log_dir,
        )
    except (TypeError, ValueError) as err:
        parser.error(str(err))
