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


def print_tally(runs: list[StudyRun], stored: dict[str, dict], corpus) -> None:
    """design.md's tally of the second edition: per part (:func:`run_part`), its
    runs, how many are stored, their process seconds when computed (and their mean)
    and, for the runs still missing, an estimate: each at the mean of the stored runs
    of its sort (the same part, kind, training length and recalibration or not). A
    missing run of a sort with none stored has no estimate: its part and the total
    are then marked "≥"."""
    def sort(run):
        return run_part(run), run.kind, run.train_length, bool(run.recalibration)

    seconds = {run: (stored[run.key(corpus)]["provenance"]["wall_seconds"]
                     if run.key(corpus) in stored else None) for run in runs}
    by_sort: dict[tuple, list] = {}
    for run, value in seconds.items():
        if value is not None:
            by_sort.setdefault(sort(run), []).append(value)
    print("| part | runs | stored | process seconds stored | each | to go, estimated |")
    print("|---|---|---|---|---|---|")
    total, unknown_total = [0, 0, 0.0, 0.0], False
    for part in dict.fromkeys(run_part(run) for run in runs):
        mine = [run for run in runs if run_part(run) == part]
        have = [seconds[run] for run in mine if seconds[run] is not None]
        missing = [run for run in mine if seconds[run] is None]
        known = [by_sort[sort(run)] for run in missing if sort(run) in by_sort]
        left = sum(sum(v) / len(v) for v in known)
        unknown = len(known) < len(missing)
        unknown_total |= unknown
        each = f"{sum(have) / len(have):,.0f}" if have else "—"
        print(f"| {part} | {len(mine)} | {len(have)} | {sum(have):,.0f} | {each} | "
              f"{'≥ ' if unknown else ''}{left:,.0f} |")
        total = [t + v for t, v in zip(total, (len(mine), len(have), sum(have), left))]
    print(f"| total | {total[0]} | {total[1]} | {total[2]:,.0f} | | "
          f"{'≥ ' if unknown_total else ''}{total[3]:,.0f} |")
