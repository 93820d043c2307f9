"""A controlled, multi-seed study of length generalization (the study tier).

Every registered scheme is trained on the recursive standard-library corpus at a
training length L with several seeds, a learning rate chosen per scheme by a small
sweep, and the same data order per seed for every scheme (a paired design); then scored
at 1×, 2×, 4× and 8× L by two protocols and by three synthetic probes. Each run's result
is a small JSON file in the repository (``src/posenc/results/<study>/``), keyed by a
hash of its configuration and stored with its provenance, so that

* ``python -m posenc.experiments.study`` (``make study``) runs what is missing and
  resumes where an interrupted study stopped; a changed scheme changes its keys, so
  only its own runs rerun;
* :func:`load_results` returns a pandas DataFrame of the whole grid and raises when the
  stored files do not cover it (stale);
* ``python -m posenc.experiments.study --check`` (in ``make test``) reruns a stated
  sample and requires the stored values back within :data:`CHECK_TOLERANCE`.

The study's parts each have a module: the grid (:mod:`posenc.experiments.study_grid`),
the probes (:mod:`posenc.experiments.probes`), the language-modelling evaluation
(:mod:`posenc.experiments.lm_evaluation`), the statistics
(:mod:`posenc.experiments.stats`) and the prose quotes (:mod:`posenc.book.quotes`); the
stored-results protocol is :mod:`posenc.experiments.store`'s, and one cell is trained
and scored by :mod:`posenc.experiments.study_cell`. This module runs the grid and the
check, and loads the stored study (:func:`load_records`, :func:`load_results`); a
chapter imports each part's names from its own module.

The design, the protocols and the statistics are explained in the chapter "Length
generalization: a controlled study". Usage::

    python -m posenc.experiments.study [--preset cpu|cpu2|gpu] [--workers N] [--list]
    python -m posenc.experiments.study --executor slurm --partition NAME [--time-min M]
    python -m posenc.experiments.study --check [--preset cpu|gpu]

The preset is ``cpu`` unless named: the book reads the cpu study on every machine.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from functools import partial
from pathlib import Path

import torch

from . import executor as dispatch
from . import store
from ..layers.train import tqdm
from ..utils import usable_cpus
from .store import StaleResultsError, results_dir
from .study_cell import execute, training_prefix
from .study_cost import print_tally
from .study_grid import (
    PRESETS,
    StudyRun,
    best_probe_rates,
    edition,
    planned_runs,
    stored_corpus,
    study_corpus,
    sweep_runs,
)

#: The study's command, named by the staleness messages.
COMMAND = "python -m posenc.experiments.study"

#: Stored and recomputed values must agree this closely: nats per byte for losses,
#: proportion for a probe's accuracy over all its sequences. On one CPU and one torch
#: build the runs are deterministic and reproduce exactly (measured: difference 0).
#: Another CPU's kernels sum in another order; two torch threads instead of one do the
#: same, and moved the recomputed losses by up to 0.003 nats (RoPE; ALiBi: 0). The
#: probes are fragile: the same perturbation moved ALiBi's half-learned probes by up to
#: 0.077, and turned DeBERTa's associative recall from 0.77 into 1.0 (a phase change),
#: while DeBERTa's learned copy and passkey probes moved by at most 0.017. So the
#: sample's probe is DeBERTa's, compared on :data:`CHECK_PROBE_TASKS`.
CHECK_TOLERANCE = {"loss": 0.02, "accuracy": 0.05}
#: The probes whose accuracy the reproduction check compares (see above).
CHECK_PROBE_TASKS = ("copy", "passkey")


# --- the stored study -----------------------------------------------------------------


def _folder(name: str, preset: str) -> Path:
    return results_dir(name if preset == "cpu" else f"{name}-{preset}")


#: Fields of a record's ``model`` renamed since the study was stored: ``{old: new}``.
#: A record's key is its run's (:meth:`StudyRun.key`), which no record field enters,
#: so a record stored under the old name keeps its key and file name.
RENAMED_MODEL_FIELDS = {"d_head": "head_dim"}


def upgrade_record(record: dict) -> dict:
    """A stored record with the names of today: each field of its ``model`` section
    named in :data:`RENAMED_MODEL_FIELDS` renamed (``d_head`` → ``head_dim``, the
    per-head width d_model / num_heads). Returns a new dict; ``record`` is unchanged.

    Raises:
        ValueError: the record has both the old and the new name of a field.
    """
    if "model" not in record:
        return dict(record)
    model = dict(record["model"])
    for old, new in RENAMED_MODEL_FIELDS.items():
        if old in model:
            if new in model:
                raise ValueError(
                    f"record {record.get('key')!r} has both {old!r} and {new!r}"
                )
            model[new] = model.pop(old)
    return {**record, "model": model}


def _stored(name: str, preset: str) -> dict[str, dict]:
    records = store.read_records(_folder(name, preset))
    return {key: upgrade_record(rec) for key, rec in records.items()}


def _run_cell(run: StudyRun, device: str) -> dict:
    return execute(run, study_corpus(), device=device)


def _key_of(corpus):
    return lambda run: run.key(corpus)


def _execute_all(runs, folder: Path, corpus, workers, device, desc, executor):
    todo = store.missing_runs(runs, store.read_records(folder), _key_of(corpus))
    if not todo:
        return 0.0
    start = time.perf_counter()
    bar = tqdm(total=len(todo), desc=desc, unit="run", file=sys.stdout)
    # the slowest cells first, so that the processes finish together; runs that train
    # on from a source last (train()'s file lock makes one wait for a source another
    # process is training, rather than train it twice)
    todo.sort(key=lambda r: (bool(r.recalibration), r.kind != "lm", -r.train_length))

    def save(run: StudyRun, record: dict) -> None:
        store.write_json(folder / f"{record['key']}.json", record)
        bar.update(1)
        bar.set_postfix_str(
            f"{run.kind} {run.label} s{run.seed}: "
            f"{record['provenance']['wall_seconds']:.0f} s"
        )

    store.compute(
        todo,
        partial(_run_cell, device=device),
        save,
        workers=workers,
        here=partial(execute, corpus=corpus, device=device),
        executor=executor,
        label=lambda run: f"{run.kind} {run.label} seed {run.seed}",
    )
    bar.close()
    return time.perf_counter() - start


def run_study(
    name: str = "length_generalization",
    *,
    preset: str = "cpu",
    workers: int | None = None,
    device: str = "cpu",
    kinds=("sweep", "lm", "probe"),
    prune: bool = True,
    executor: str | dispatch.Submitit = "local",
) -> dict:
    """Run every missing cell of the grid (resumable), then, when every kind was run,
    drop stored files that no longer belong to it. Returns ``{"wall_seconds": ...,
    "runs": n}``.

    Args:
        name: the study's folder under :func:`results_dir`. preset: a key of
            :data:`PRESETS`. workers: processes (default: usable cores; 1 on a GPU;
            0 runs every cell in this process).
        device: where to run. kinds: run only these kinds of cells (the sweep always
            runs first: the main runs depend on it). prune: drop stale files.
        executor: ``"local"`` (``workers`` processes here), or SLURM or submitit's
            local executor (:mod:`posenc.experiments.executor`).

    Raises:
        ValueError: unknown preset.
    """
    if preset not in PRESETS:
        raise ValueError(f"preset must be one of {sorted(PRESETS)}, got {preset!r}")
    if workers is None:
        workers = 1 if device != "cpu" else usable_cpus()
    folder = _folder(name, preset)
    corpus = study_corpus()
    wall = _execute_all(
        sweep_runs(preset),
        folder,
        corpus,
        workers,
        device,
        "learning-rate sweep",
        executor,
    )
    runs = planned_runs(_stored(name, preset), preset, corpus)
    chosen = [r for r in runs if r.kind in kinds]
    wall += _execute_all(
        chosen, folder, corpus, workers, device, "study", executor
    )
    if prune and set(kinds) >= {"sweep", "lm", "probe"}:
        store.prune(folder, {f"{r.key(corpus)}.json" for r in runs})
    return {"wall_seconds": wall, "runs": len(runs)}


def grid(preset: str = "cpu", name: str = "length_generalization") -> list[StudyRun]:
    """Every run of the grid, with the learning rates read from the stored sweep."""
    records = _stored(name, preset)
    return planned_runs(records, preset, stored_corpus(records))


def load_records(
    name: str = "length_generalization", *, preset: str = "cpu", strict: bool = True
) -> list[dict]:
    """The stored record of every run of the current grid (see :func:`execute`).

    With ``strict=False`` the runs of the grid that are stored so far (a study still
    running, or interrupted) are returned instead of raising.

    Raises:
        StaleResultsError: a run of the grid has no stored result (its configuration,
        a scheme's defaults, the corpus or the study's code changed, or a scheme was
        added): the message names the runs and the command that recomputes them.
    """
    records = _stored(name, preset)
    corpus = stored_corpus(records)
    try:
        runs = planned_runs(records, preset, corpus)
    except KeyError as err:
        if not strict:
            keys = {r.key(corpus) for r in sweep_runs(preset)}
            return [rec for key, rec in records.items() if key in keys]
        raise StaleResultsError(
            f"the stored study {name!r} is stale: {err.args[0]}; run `make study` "
            f"({COMMAND})"
        ) from None
    return store.grid_records(
        runs,
        records,
        key=_key_of(corpus),
        label=lambda r: f"{r.kind} {r.label} seed {r.seed}",
        strict=strict,
        study=f"study {name!r}",
        command=COMMAND,
    )
def load_results(
    name: str = "length_generalization", *, preset: str = "cpu", strict: bool = True
):
    """The study's results as a long pandas DataFrame, one row per measured value.

    Columns: ``scheme`` (the label: a registered scheme, or a bucket variant such as
    "t5, max_distance = L"), ``seed``, ``train_length``, ``eval_length`` (bytes),
    ``task`` ("language_modeling" or a probe of :data:`PROBES`), ``metric``
    (``loss_sliding`` and ``loss_matched`` in nats per byte, ``accuracy`` and
    ``accuracy_depth_*`` as proportions), ``value``, and ``kind`` ("sweep", "lm",
    "probe", or in the second edition "probe_sweep" for a probed label's seed-0 run at
    the rate not chosen), ``lr``, ``parameters``, ``key``.

    Args:
        name: the study. preset: ``"cpu"`` (the stored study the book reads), ``"gpu"``
            or ``"cpu2"`` (the second edition).
        strict: raise when the grid is not fully stored; False returns what is.

    Raises:
        StaleResultsError: as :func:`load_records`.
    """
    import pandas as pd

    records = load_records(name, preset=preset, strict=strict)
    by_key = {rec["key"]: rec for rec in records}  # read once, not again
    try:
        probe_lrs = best_probe_rates(by_key, preset, stored_corpus(by_key))
    except KeyError:  # a second edition whose probe sweep is not all stored yet
        probe_lrs = {}
    rows = []
    for rec in records:
        run = rec["run"]
        kind = run["kind"]
        if kind == "probe" and probe_lrs.get(run["label"], run["lr"]) != run["lr"]:
            kind = "probe_sweep"
        for row in rec["rows"]:
            if run["kind"] == "sweep" and row["metric"] != "loss_sliding":
                continue  # at E = L every block is "matched": the same number again
            rows.append(
                {
                    "scheme": run["label"],
                    "seed": run["seed"],
                    "train_length": run["train_length"],
                    **row,
                    "kind": kind,
                    "lr": run["lr"],
                    "parameters": rec["parameters"],
                    "key": rec["key"],
                }
            )
    columns = [
        "scheme",
        "seed",
        "train_length",
        "eval_length",
        "task",
        "metric",
        "value",
        "kind",
        "lr",
        "parameters",
        "key",
    ]
    return pd.DataFrame(rows, columns=columns)



# --- reproduction ---------------------------------------------------------------------


#: What ``--check`` reruns: seed 0 of RoPE's language modelling and of DeBERTa's
#: probes, one run per worker of a 2-core machine. ALiBi's language modelling, part of
#: the sample until it made ``make test`` the longest of its steps, is retrained from
#: scratch by ``python -m posenc.book.prepare --check`` (the book's shipped weights),
#: also in ``make test``.
CHECK_RUNS = (("lm", "rope", 0), ("probe", "deberta", 0))


def _compared(run: StudyRun, stored: dict, fresh: dict) -> list[dict]:
    """The values of one rerun cell that the check compares with the stored ones."""
    old = {(r["task"], r["metric"], r["eval_length"]): r["value"] for r in stored}
    out = []
    for r in fresh:
        if r["metric"].startswith("accuracy_depth") or (
            run.kind == "probe" and r["task"] not in CHECK_PROBE_TASKS
        ):
            continue  # small samples; a probe on a phase change (see above)
        tol = CHECK_TOLERANCE["loss" if "loss" in r["metric"] else "accuracy"]
        out.append(
            store.compare(
                old[(r["task"], r["metric"], r["eval_length"])],
                r["value"],
                tol,
                kind=run.kind,
                label=run.label,
                task=r["task"],
                metric=r["metric"],
                eval_length=r["eval_length"],
            )
        )
    return out


def _reproducible(name: str, records: dict[str, dict]):
    """This Python's study corpus, after checking that the stored records were
    computed on it; raises StaleResultsError naming both corpora otherwise."""
    corpus = study_corpus()
    if stored_corpus(records).fingerprint != corpus.fingerprint:
        raise StaleResultsError(
            f"the stored study {name!r} was computed on the corpus "
            f"{stored_corpus(records)} (Python "
            f"{next(iter(records.values()))['provenance']['python']}); this Python's "
            f"standard library gives {corpus.name} {corpus.fingerprint}: the results "
            "cannot be reproduced here (run `make study` to recompute them)"
        )
    return corpus


def reproduce(
    name: str = "length_generalization",
    *,
    sample=CHECK_RUNS,
    workers: int | None = None,
    device: str = "cpu",
    threads: int = 1,
) -> list[dict]:
    """Rerun :data:`CHECK_RUNS` from scratch (no cached weights) and compare
    every value with the stored one.

    ``threads`` > 1 changes the order of floating-point reductions, as another CPU's
    kernels do: how :data:`CHECK_TOLERANCE` was measured.

    Returns:
        One dict per compared value: kind, label, task, metric, eval_length, stored,
        recomputed, difference, tolerance, ok
        (:func:`posenc.experiments.store.compare`).

    Raises:
        StaleResultsError: the stored results do not cover the grid, or were computed
            on another corpus (another Python's standard library).
    """
    records = {r["key"]: r for r in load_records(name)}
    corpus = _reproducible(name, records)
    wanted = []
    for rec in records.values():
        run = StudyRun(**rec["run"])
        if (run.kind, run.label, run.seed) in sample and run.train_length == PRESETS[
            run.preset
        ]["train"]["seq_len"]:
            wanted.append(run)
    workers = workers or min(len(wanted), usable_cpus())
    with store.worker_pool(workers, threads, then=_private_weight_cache) as pool:
        fresh = list(pool.map(_run_cell, wanted, [device] * len(wanted)))
    out = []
    for run, new in zip(wanted, fresh, strict=True):
        out += _compared(run, records[run.key(corpus)]["rows"], new["rows"])
    return out


#: The second edition's sample (``--check --preset cpu2``). One of its runs takes about
#: 9 minutes of process time, longer than the whole check may, so the check reruns the
#: first ``steps`` steps of each listed run (kind, label, seed; a probe at its chosen
#: rate) from scratch and requires its stored training curve (means over 10 steps)
#: back within ``CHECK_TOLERANCE["loss"]``: the same initialisation, data order and
#: schedule, reproduced in part (:func:`posenc.experiments.study_cell.training_prefix`).
CHECK_PREFIX = {
    "cpu2": {"runs": (("lm", "rope", 0), ("probe", "rope", 0)), "steps": 100},
}


def _prefix_cell(run: StudyRun, steps: int, device: str) -> list[float]:
    return training_prefix(run, steps, study_corpus(), device=device)


def reproduce_prefix(
    name: str = "length_generalization",
    *,
    preset: str = "cpu2",
    workers: int | None = None,
    device: str = "cpu",
    threads: int = 1,
) -> list[dict]:
    """Rerun the first steps of :data:`CHECK_PREFIX`'s runs of ``preset`` from scratch
    and compare their training curve with the stored one: in ``workers`` fresh
    processes (default: one per run, at most the usable cores), or in this one (0).

    Returns:
        One dict per compared 10-step mean (:func:`posenc.experiments.store.compare`).

    Raises:
        KeyError: a preset without a prefix sample. StaleResultsError: as
            :func:`reproduce`.
    """
    spec = CHECK_PREFIX[preset]
    records = {r["key"]: r for r in load_records(name, preset=preset)}
    _reproducible(name, records)
    probe_lrs = best_probe_rates(records, preset, stored_corpus(records))
    wanted = []
    for rec in records.values():
        run = StudyRun(**rec["run"])
        chosen = run.kind != "probe" or probe_lrs.get(run.label, run.lr) == run.lr
        if (run.kind, run.label, run.seed) in spec["runs"] and chosen:
            wanted.append((run, rec["train_loss"]))
    steps, n = spec["steps"], len(wanted)
    cells = ([r for r, _ in wanted], [steps] * n, [device] * n)
    if workers == 0:
        fresh = list(map(_prefix_cell, *cells))
    else:
        workers = workers or max(1, min(n, usable_cpus()))
        with store.worker_pool(workers, threads) as pool:
            fresh = list(pool.map(_prefix_cell, *cells))
    out = []
    for (run, curve), new in zip(wanted, fresh, strict=True):
        for i, value in enumerate(new):
            out.append(
                store.compare(
                    curve[i], value, CHECK_TOLERANCE["loss"], kind=run.kind,
                    label=run.label, task="training", metric="train_loss",
                    eval_length=f"steps {10 * i + 1}-{10 * i + 10}",
                )
            )
    return out


def _private_weight_cache() -> None:
    # train from scratch: a private, empty weight cache
    import tempfile

    os.environ["POSENC_CACHE_DIR"] = tempfile.mkdtemp(prefix="posenc-reproduce-")


# --- the command ----------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=COMMAND,
        description=__doc__.split("\n\n")[0]
        + " Without options: compute the stored study's missing runs "
        "(src/posenc/results/length_generalization/, make study).",
    )
    parser.add_argument(
        "--name",
        default="length_generalization",
        help="the study's folder under src/posenc/results/ (default: "
        "length_generalization; a gpu preset adds -gpu)",
    )
    parser.add_argument(
        "--preset",
        default="cpu",
        choices=sorted(PRESETS),
        help="which stored study (default: cpu, the one the book reads; gpu is an "
        "explicit choice, never made by the hardware alone)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        help="processes (default: usable cores on a CPU, 1 on a GPU; 0: this one)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads per process of --check (default 1)",
    )
    store.add_arguments(
        parser, check="the reproduction sample (rope, deberta's probes; seed 0)"
    )
    parser.add_argument(
        "--kinds",
        default="sweep,lm,probe",
        help="comma-separated kinds of cells to run (default: all)",
    )
    dispatch.add_arguments(parser)
    return parser


def _list(name: str, preset: str) -> int:
    corpus = study_corpus()
    try:
        runs = grid(preset, name)
    except KeyError:
        runs = sweep_runs(preset)
        print("(the sweep is incomplete: the main runs depend on its result)")
    stored = _stored(name, preset)
    store.print_listing(runs, stored, _key_of(corpus), lambda r: r.label)
    if edition(preset) >= 2:
        print_tally(runs, stored, corpus)
    return 0


def _check(name: str, preset: str, device: str, threads: int) -> int:
    start = time.perf_counter()
    if preset in CHECK_PREFIX:
        rows = reproduce_prefix(name, preset=preset, device=device, threads=threads)
        sample = f"the first {CHECK_PREFIX[preset]['steps']} steps of " + ", ".join(
            " ".join(map(str, r)) for r in CHECK_PREFIX[preset]["runs"]
        )
    elif preset == "cpu":
        rows = reproduce(name, device=device, threads=threads)
        sample = f"{len(CHECK_RUNS)} runs"
    else:
        raise ValueError(f"--check has no sample for preset {preset!r}")
    worst = max(abs(r["difference"]) for r in rows)
    return store.report(
        rows,
        f"reproduced {len(rows)} stored values of {sample} in "
        f"{time.perf_counter() - start:.0f} s; largest difference {worst:.2e}",
    )


def _run_device(preset: str, device: str, executor) -> str:
    # jobs given GPUs train there, though this machine (a login node) has none
    gpus = not isinstance(executor, str) and executor.gpus_per_node > 0
    return "cuda" if preset == "gpu" and gpus else device


def main(argv: list[str] | None = None) -> int:
    """``python -m posenc.experiments.study``: compute the stored study's missing cells,
    or ``--list``, ``--verify`` or ``--check`` it (:mod:`posenc.experiments.store`)."""
    parser = _parser()
    args = parser.parse_args(argv)
    executor = dispatch.from_arguments(args, parser)
    preset = args.preset
    device = "cuda" if preset == "gpu" and torch.cuda.is_available() else "cpu"
    if args.list:
        return _list(args.name, preset)
    status = store.verify_or_check(
        args,
        lambda: load_records(args.name, preset=preset),
        lambda records: (
            f"the stored study {_folder(args.name, preset).name!r} covers its grid: "
            f"{len(records)} runs, "
            f"{sum(r['provenance']['wall_seconds'] for r in records):.0f} s of "
            "process time when computed"
        ),
        lambda: _check(args.name, preset, device, args.threads),
    )
    if status is not None:
        return status
    summary = run_study(
        args.name,
        preset=preset,
        workers=args.workers,
        device=_run_device(preset, device, executor),
        kinds=tuple(args.kinds.split(",")),
        executor=executor,
    )
    print(
        f"study {args.name!r} ({preset}): {summary['runs']} runs in the grid; "
        f"{summary['wall_seconds']:.0f} s wall for the runs computed now; results in "
        f"{_folder(args.name, preset)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
