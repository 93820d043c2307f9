"""The statistics of a multi-seed study: the mean over seeds with its Student-t
confidence interval, paired differences seed by seed, and the quotes and tables the
chapters print from them (over :func:`posenc.experiments.study.load_results`'
DataFrame).
"""

from __future__ import annotations

import math

from .study_grid import MULTIPLES

def mean_ci(values, confidence: float = 0.95) -> tuple[float, float, float]:
    """``(mean, lower, upper)``: the Student-t confidence interval of the mean over
    seeds (scipy.stats.t); with one value the interval is (nan, nan)."""
    import numpy as np
    from scipy import stats

    v = np.asarray(values, dtype=float)
    mean = float(v.mean())
    if v.size < 2:
        return mean, math.nan, math.nan
    half = float(stats.t.ppf(0.5 + confidence / 2, v.size - 1) * stats.sem(v))
    return mean, mean - half, mean + half


def _main_rows(df):
    """The rows of the main runs: a sweep run at the chosen rate is seed 0 again (its
    weights are the same), and at the other rates it is another model."""
    return df[df["kind"] != "sweep"] if "kind" in df.columns else df


def summarize(df, *, confidence: float = 0.95):
    """Mean and confidence interval over seeds of every (scheme, train_length,
    eval_length, task, metric) of the main runs (the sweep's rows are left out): a
    DataFrame with columns ``mean, lower, upper, n``."""
    import pandas as pd

    df = _main_rows(df)
    keys = ["scheme", "train_length", "eval_length", "task", "metric"]
    out = []
    for values, group in df.groupby(keys, sort=False):
        mean, lo, hi = mean_ci(group["value"], confidence)
        out.append((*values, mean, lo, hi, len(group)))
    return pd.DataFrame(out, columns=keys + ["mean", "lower", "upper", "n"])


def paired_difference(df, a: str, b: str, *, confidence: float = 0.95, **where) -> dict:
    """Scheme ``a`` minus scheme ``b``, seed by seed (the paired design: the same data
    order per seed), over the main runs' rows (not the sweep's) selected by ``where``
    (e.g. ``eval_length=512,
    metric="loss_sliding", train_length=64``).

    Returns:
        ``{"mean", "lower", "upper", "n", "resolved"}``; ``resolved`` is True when the
        interval excludes 0.

    Raises:
        ValueError: if the two schemes share no seed under ``where``.
    """
    ta, tb = seed_values(df, a, **where), seed_values(df, b, **where)
    seeds = sorted(set(ta.index) & set(tb.index))
    if not seeds:
        raise ValueError(f"schemes {a!r} and {b!r} share no seed under {where}")
    return difference_interval([float(ta[s] - tb[s]) for s in seeds], confidence)


def difference_interval(differences, confidence: float = 0.95) -> dict:
    """The mean of per-seed differences with its Student-t interval
    (:func:`mean_ci`): ``{"mean", "lower", "upper", "n", "resolved"}``; ``resolved``
    is True when the interval excludes 0 (never with one seed)."""
    mean, lo, hi = mean_ci(differences, confidence)
    resolved = bool(not math.isnan(lo) and (lo > 0 or hi < 0))
    return {"mean": mean, "lower": lo, "upper": hi, "n": len(differences),
            "resolved": resolved}


def seed_values(df, scheme: str, **where):
    """One scheme's per-seed values over the main runs' rows selected by ``where``
    (e.g. ``eval_length=512, metric="loss_sliding", train_length=64``): a pandas
    Series indexed by seed, sorted; empty when nothing matches.

    Raises:
        ValueError: if ``where`` leaves more than one value per seed (a selection
            that mixes metrics, lengths or tasks).
    """
    sel = _main_rows(df)
    sel = sel[sel["scheme"] == scheme]
    for column, value in where.items():
        sel = sel[sel[column] == value]
    if sel["seed"].duplicated().any():
        raise ValueError(
            f"{scheme!r} under {where} has several values per seed: name the "
            "eval_length, metric, task and train_length"
        )
    return sel.set_index("seed")["value"].sort_index()


def change(
    df, scheme: str, from_length: int, to_length: int, *, confidence: float = 0.95,
    **where,
) -> dict | None:
    """One scheme's value at ``eval_length=to_length`` minus at ``from_length``, seed
    by seed, with its Student-t interval (a rise past L when ``from_length`` is L).

    Returns:
        ``{"mean", "lower", "upper", "n", "resolved"}`` as :func:`paired_difference`;
        None when no seed has both values (a learned table cannot run the length).
    """
    after = seed_values(df, scheme, eval_length=to_length, **where)
    before = seed_values(df, scheme, eval_length=from_length, **where)
    seeds = sorted(set(after.index) & set(before.index))
    if not seeds:
        return None
    return difference_interval([float(after[s] - before[s]) for s in seeds], confidence)


def quote(df, scheme: str, *, digits: int = 2, **where) -> str:
    """``"mean [lower, upper]"`` over seeds of one scheme's rows under ``where`` (e.g.
    ``eval_length=512, metric="loss_sliding", train_length=64``): how the chapters
    quote the study.

    Raises:
        ValueError: if no row matches.
    """
    sel = _main_rows(df)
    sel = sel[sel["scheme"] == scheme]
    for column, value in where.items():
        sel = sel[sel[column] == value]
    if sel.empty:
        raise ValueError(f"no stored value for scheme {scheme!r} under {where}")
    mean, lo, hi = mean_ci(sel["value"])
    if math.isnan(lo):
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]"


def results_table(
    df,
    *,
    schemes=None,
    train_length: int = 64,
    multiples=MULTIPLES,
    task: str = "language_modeling",
    metric: str = "loss_sliding",
    digits: int = 2,
) -> str:
    """A Markdown table, one row per scheme and one column per multiple of L, of
    ``mean [95 % CI]`` over seeds (:func:`quote`); "cannot run" where a scheme cannot
    process the length (a learned table past its end).

    Args:
        df: :func:`posenc.experiments.study.load_results`. schemes: labels to show,
            in order (default: all of ``df``'s at this training length).
            train_length: L. multiples: columns.
        task, metric: which values. digits: decimals.
    """
    sel = _main_rows(df)
    sel = sel[(sel["train_length"] == train_length) & (sel["task"] == task)]
    sel = sel[sel["metric"] == metric]
    schemes = (
        list(schemes) if schemes is not None else list(dict.fromkeys(sel["scheme"]))
    )
    heads = [f"{m}× L = {m * train_length}" for m in multiples]
    lines = ["| scheme | " + " | ".join(heads) + " |", "|---" * (len(heads) + 1) + "|"]
    for scheme in schemes:
        cells = []
        for m in multiples:
            try:
                cells.append(
                    quote(sel, scheme, digits=digits, eval_length=m * train_length)
                )
            except ValueError:
                cells.append("cannot run")
        lines.append(f"| {scheme} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
