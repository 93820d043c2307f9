"""The executor seam of the stored studies (posenc.experiments.executor): a tiny fake
grid computed through submitit's local executor (the real job path: a pickled
function, a job folder, ``python -m submitit.core._submit`` in a new process) gives
the records of the local pool and of this process; stored runs are not resubmitted; a
failing job names its run and its log; and the studies' command lines read the SLURM
options. Each submitit job starts a Python that imports torch: the file runs few."""

from __future__ import annotations

import argparse
import json
import os
from functools import partial
from pathlib import Path

import pytest

from posenc.experiments import executor as dispatch
from posenc.experiments import store, study, vit_study
from posenc.layers.train import REQUIRE_CACHED_ENV


def fake_run(x: int, *, fail_on: int | None = None) -> dict:
    """A run of the fake grid: its record, and what the process that ran it had."""
    import torch

    if x == fail_on:
        raise ArithmeticError(f"the fake run {x} fails on purpose")
    return {
        "x": x,
        "square": x * x,
        "torch_threads": torch.get_num_threads(),
        "may_train": REQUIRE_CACHED_ENV not in os.environ,
    }


@pytest.fixture
def jobs(tmp_path, monkeypatch):
    """A submitit-local spec writing into tmp_path; the jobs can import this file and
    inherit POSENC_REQUIRE_CACHED=1 (which a job, like a worker, must unset)."""
    here = str(Path(__file__).parent)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([here, os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv(REQUIRE_CACHED_ENV, "1")
    monkeypatch.setenv("POSENC_CACHE_DIR", str(tmp_path / "cache"))
    return dispatch.Submitit("submitit-local", folder=tmp_path / "logs", poll_s=0.2, parallelism=2)


def _submitted(folder: Path) -> int:
    return len(list(folder.glob("*_submitted.pkl")))


def test_submitit_local_gives_the_records_of_the_pool_and_of_this_process(jobs, tmp_path):
    grid = [3, 1, 2]
    here, pooled, submitted = [], [], []
    store.compute(grid, fake_run, lambda r, rec: here.append((r, rec)), workers=0)
    store.compute(grid, fake_run, lambda r, rec: pooled.append((r, rec)), workers=1)
    folder = tmp_path / "results"

    def save(run, record):  # as a study's store: one file per run, in this process
        submitted.append((run, record))
        store.write_json(folder / f"{run}.json", record)

    store.compute(grid[:2], fake_run, save, workers=1, executor=jobs)
    assert _submitted(jobs.folder) == 2
    # resume: the stored runs are not resubmitted, only the missing one is
    todo = store.missing_runs(grid, store.read_records(folder), str)
    assert todo == [2]
    store.compute(todo, fake_run, save, workers=1, executor=jobs)
    assert _submitted(jobs.folder) == 3
    store.compute(store.missing_runs(grid, store.read_records(folder), str), fake_run,
                  save, workers=1, executor=jobs)
    assert _submitted(jobs.folder) == 3 and len(submitted) == 3

    def by_run(pairs):
        return sorted(pairs, key=lambda p: p[0])

    # a job runs like a pool worker: one torch thread, allowed to train
    assert by_run(pooled) == by_run(submitted)
    assert all(rec["torch_threads"] == 1 and rec["may_train"] for _, rec in submitted)

    def result(pairs):  # without what the process was
        return [(r, {k: rec[k] for k in ("x", "square")}) for r, rec in by_run(pairs)]

    assert result(here) == result(submitted) == [(1, {"x": 1, "square": 1}),
                                                 (2, {"x": 2, "square": 4}),
                                                 (3, {"x": 3, "square": 9})]
    assert store.read_records(folder) == {str(r): rec for r, rec in by_run(submitted)}
    assert json.loads((folder / "2.json").read_text())["square"] == 4


def test_a_failing_job_names_its_run_and_log_and_the_others_are_stored(jobs):
    stored = []
    with pytest.raises(dispatch.JobFailedError) as caught:
        store.compute([5, 6], partial(fake_run, fail_on=6), lambda r, rec: stored.append(r),
                      workers=1, executor=jobs, label=lambda x: f"fake x={x}")
    message = str(caught.value)
    assert "run fake x=6 failed in submitit job" in message
    assert "the fake run 6 fails on purpose" in message
    log = message.split("(log: ")[1].split(")")[0]
    assert Path(log).parent == jobs.folder and Path(log).exists()
    assert stored == [5]


def test_the_default_log_folder_is_under_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("POSENC_CACHE_DIR", str(tmp_path))
    assert dispatch.log_folder().parent == tmp_path / "submitit"
    assert dispatch.as_executor("local") == "local"
    assert dispatch.as_executor("submitit-local") == dispatch.Submitit("submitit-local")
    for bad in ("ray", "slurm"):
        with pytest.raises(ValueError, match="executor|partition"):
            dispatch.as_executor(bad)


def test_the_slurm_spec_checks_its_values_and_configures_submitit(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="needs a partition"):
        dispatch.Submitit("slurm")
    for bad in ({"time_min": 0}, {"cpus_per_task": 0}, {"parallelism": 0}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            dispatch.Submitit("slurm", partition="cpu", **bad)
    for bad in ({"mem_gb": 0}, {"mem_gb": float("nan")}, {"poll_s": -1}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            dispatch.Submitit("slurm", partition="cpu", **bad)
    spec = dispatch.Submitit("slurm", partition="gpu-a", time_min=90, cpus_per_task=4,
                             mem_gb=16, gpus_per_node=1, parallelism=20)
    # submitit's SLURM executor wants srun on the PATH (never called here)
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "srun").write_text("#!/bin/sh\nexit 1\n")
    (fake / "srun").chmod(0o755)
    monkeypatch.setenv("PATH", os.pathsep.join([str(fake), os.environ["PATH"]]))
    parameters = spec.executor(tmp_path / "logs")._executor.parameters
    # the sbatch script of an array of 50 runs, as submitit writes it
    from submitit.slurm.slurm import _make_sbatch_string

    script = _make_sbatch_string(command="python -m submitit.core._submit",
                                 folder=tmp_path / "logs", map_count=50, **parameters)
    for line in ("--partition=gpu-a", "--time=90", "--cpus-per-task=4", "--mem=16GB",
                 "--gpus-per-node=1", "--array=0-49%20", "--job-name=posenc"):
        assert f"#SBATCH {line}\n" in script
    assert str(tmp_path / "logs") in script


def _parse(module, argv):
    parser = module._parser()
    return dispatch.from_arguments(parser.parse_args(argv), parser)


@pytest.mark.parametrize("module", [study, vit_study])
def test_the_study_commands_read_the_executor_options(module, capsys):
    assert _parse(module, []) == "local"
    assert _parse(module, ["--executor", "submitit-local"]) == dispatch.Submitit("submitit-local")
    spec = _parse(module, ["--executor", "slurm", "--partition", "cpu", "--time-min", "30",
                           "--cpus-per-task", "2", "--mem-gb", "4", "--array-parallelism", "8",
                           "--log-dir", "/scratch/logs"])
    assert spec == dispatch.Submitit("slurm", partition="cpu", time_min=30, cpus_per_task=2,
                                     mem_gb=4.0, parallelism=8, folder="/scratch/logs")
    for argv, rule in (
        (["--executor", "slurm"], "needs a partition"),
        (["--partition", "cpu"], "--partition go with --executor slurm"),
        (["--executor", "slurm", "--partition", "p", "--workers", "3"], "--workers goes with"),
        (["--executor", "slurm", "--partition", "p", "--time-min", "0"], "time_min must be >= 1"),
        (["--executor", "ray"], "invalid choice"),
    ):
        with pytest.raises(SystemExit):
            _parse(module, argv)
        assert rule in capsys.readouterr().err
    # the options every study command already had still parse
    assert isinstance(module._parser().parse_args(["--list", "--workers", "2"]), argparse.Namespace)
