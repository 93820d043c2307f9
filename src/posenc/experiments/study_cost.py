"""What the second edition of the study costs: the part of the study each run belongs
to (:func:`run_part`) and the tally of process seconds by part that ``python -m
posenc.experiments.study --list --preset cpu2`` prints (:func:`print_tally`; the
tally of book/design.md)."""

from __future__ import annotations

from .study_grid import StudyRun


def run_part(run: StudyRun) -> str:
    """The part of the second edition a run belongs to, as design.md's tally names
    it (the sweeps are seed 0's runs at each rate; a main run at seed 0 scores the
    sweep's trained model)."""
    if run.label.startswith("rope, base"):
        return "base sweep"
    if run.train_options or run.recalibration:
        return "randomized positions, DroPE and its control"
    if run.kind == "sweep":
        return "learning-rate sweep"
    if run.kind == "probe":
        return "probe-rate sweep" if run.seed == 0 else "probes, seeds 1 and 2"
    if run.seed == 0:
        return "language modelling, seed 0 (scoring only)"
    return "language modelling, seeds 1 and 2"


#: The part whose runs only score a model the sweep trained: cheaper than a training
#: run, so neither estimates the other.
SCORING_ONLY = "language modelling, seed 0 (scoring only)"


def _sorts(run: StudyRun) -> tuple[tuple, tuple | None]:
    """A run's sort (its part, kind, training length and recalibration or not), and
    the wider sort it falls back to when its own has no stored run (the same but for
    the part; None for a scoring-only run)."""
    wide = (run.kind, run.train_length, bool(run.recalibration))
    part = run_part(run)
    return (part, *wide), (None if part == SCORING_ONLY else wide)


def print_tally(runs: list[StudyRun], stored: dict[str, dict], corpus) -> None:
    """design.md's tally of the second edition: per part (:func:`run_part`), its
    runs, how many are stored, their process seconds when computed (and their mean)
    and, for the runs still missing, an estimate: each at the mean of the stored runs
    of its sort (the same part, kind, training length and recalibration or not), or
    failing that of its wider sort (the same but for the part; never across the
    scoring-only part). A missing run with neither has no estimate: its part and the
    total are then marked "≥"."""
    seconds = {run: (stored[run.key(corpus)]["provenance"]["wall_seconds"]
                     if run.key(corpus) in stored else None) for run in runs}
    pools: dict[tuple, list] = {}
    for run, value in seconds.items():
        if value is not None:
            for key in _sorts(run):
                if key is not None:
                    pools.setdefault(key, []).append(value)

    def estimate(run):
        pool = next((pools[k] for k in _sorts(run) if k in pools), None)
        return None if pool is None else sum(pool) / len(pool)

    print("| part | runs | stored | process seconds stored | each | to go, estimated |")
    print("|---|---|---|---|---|---|")
    total, unknown_total = [0, 0, 0.0, 0.0], False
    for part in dict.fromkeys(run_part(run) for run in runs):
        mine = [run for run in runs if run_part(run) == part]
        have = [seconds[run] for run in mine if seconds[run] is not None]
        guesses = [estimate(run) for run in mine if seconds[run] is None]
        left = sum(g for g in guesses if g is not None)
        unknown = None in guesses
        unknown_total |= unknown
        each = f"{sum(have) / len(have):,.0f}" if have else "—"
        print(f"| {part} | {len(mine)} | {len(have)} | {sum(have):,.0f} | {each} | "
              f"{'≥ ' if unknown else ''}{left:,.0f} |")
        total = [t + v for t, v in zip(total, (len(mine), len(have), sum(have), left))]
    print(f"| total | {total[0]} | {total[1]} | {total[2]:,.0f} | | "
          f"{'≥ ' if unknown_total else ''}{total[3]:,.0f} |")
