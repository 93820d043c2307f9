"""One matplotlib style for the whole book.

Colours are the Okabe–Ito palette (safe for the common colour-vision deficiencies);
sequential maps are ``viridis``, diverging maps ``RdBu_r`` centred on zero. Call
:func:`use_style` once per notebook (the chapters do it in their first cell).
"""

from __future__ import annotations

import matplotlib as mpl
import numpy as np
from cycler import cycler

#: Okabe & Ito (2008), "Color Universal Design"; black before yellow, which is faint on
#: white.
OKABE_ITO = (
    "#0072B2",
    "#E69F00",
    "#009E73",
    "#D55E00",
    "#CC79A7",
    "#56B4E9",
    "#000000",
    "#F0E442",
)
SEQUENTIAL_CMAP = "viridis"
DIVERGING_CMAP = "RdBu_r"

STYLE = {
    "axes.prop_cycle": cycler(color=OKABE_ITO),
    "figure.figsize": (7.0, 3.6),
    "figure.dpi": 110,
    "savefig.dpi": 150,
    "savefig.bbox": "tight",
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.titlesize": 11,
    "axes.labelsize": 10,
    "legend.fontsize": 9,
    "legend.frameon": False,
    "image.cmap": SEQUENTIAL_CMAP,
    "figure.constrained_layout.use": True,
}


def use_style() -> None:
    """Apply the book's style to matplotlib's global settings."""
    mpl.rcParams.update(STYLE)


def heatmap(
    ax,
    matrix,
    *,
    xlabel: str,
    ylabel: str,
    title: str = "",
    diverging: bool = False,
    colorbar_label: str = "",
    extent=None,
):
    """Draw ``matrix`` (rows on the y axis, from the top) with a labelled colour bar.

    Args:
        ax: the matplotlib Axes. matrix: 2-D array or tensor. xlabel, ylabel, title:
            text.
        diverging: use the diverging map, symmetric about zero.
        colorbar_label: the colour bar's label (with units). extent: passed to
            ``imshow``.

    Returns:
        The AxesImage.
    """
    data = np.asarray(
        matrix.detach().cpu() if hasattr(matrix, "detach") else matrix, dtype=float
    )
    kwargs = {
        "cmap": DIVERGING_CMAP if diverging else SEQUENTIAL_CMAP,
        "aspect": "auto",
        "interpolation": "nearest",
    }
    if diverging:
        bound = float(np.nanmax(np.abs(data))) or 1.0
        kwargs.update(vmin=-bound, vmax=bound)
    image = ax.imshow(data, extent=extent, **kwargs)
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
    ax.grid(False)
    bar = ax.figure.colorbar(image, ax=ax)
    bar.set_label(colorbar_label)
    return image


def perplexity_plot(
    ax, results: dict[str, dict[int, float]], *, train_len: int, title: str = ""
):
    """Validation perplexity against evaluation length, one line per scheme.

    Args:
        ax: the Axes. results: ``{scheme name: {length: perplexity}}``.
        train_len: the training length, marked with a vertical line.
    """
    for name, by_len in results.items():
        lengths = sorted(by_len)
        ax.plot(lengths, [by_len[n] for n in lengths], marker="o", label=name)
    ax.axvline(train_len, color="0.4", linestyle="--", linewidth=1)
    ax.text(
        train_len,
        ax.get_ylim()[1],
        " training length",
        va="top",
        ha="left",
        fontsize=8,
        color="0.3",
    )
    _length_axis(ax, sorted({n for by_len in results.values() for n in by_len}))
    ax.set(
        xlabel="evaluation length T (bytes)",
        ylabel="validation perplexity (per byte)",
        title=title,
    )
    ax.legend(
        loc="upper left", bbox_to_anchor=(1.01, 1.0)
    )  # outside: never covers a curve
    return ax


def _length_axis(ax, lengths) -> None:
    """A log₂ x axis whose ticks are the sequence lengths themselves (64, 128, … rather
    than 2⁶ …)."""
    ax.set_xscale("log", base=2)
    ax.set_xticks(lengths, [str(n) for n in lengths])
    ax.minorticks_off()


def memory_plot(
    ax,
    lengths,
    curves: dict[str, list[float]],
    *,
    title: str = "",
    floor_mib: float = 2**-10,
):
    """Peak memory against sequence length on log–log axes, one line per computation
    path.

    Args:
        ax: the Axes. lengths: the sequence lengths T. curves: ``{path name: [MiB at
            each length]}``.
        floor_mib: values below it (a measure's noise floor, or 0) are drawn at it,
            since a log axis cannot show 0; default 1 KiB.
    """
    for name, values in curves.items():
        ax.plot(lengths, [max(v, floor_mib) for v in values], marker="o", label=name)
    ax.set_yscale("log")
    _length_axis(ax, list(lengths))
    ax.set(xlabel="sequence length T", ylabel="peak memory (MiB)", title=title)
    ax.legend(fontsize=8)
    return ax


def interval_plot(
    ax,
    summary,
    *,
    schemes=None,
    train_length: int = 64,
    task: str = "language_modeling",
    metric: str = "loss_sliding",
    ylabel: str = "validation loss (nats per byte)",
    title: str = "",
    styles: dict | None = None,
):
    """Mean over seeds with its 95 % confidence interval (error bars) against
    evaluation length, one line per scheme, from :func:`posenc.study.summarize`.

    Args:
        ax: the Axes. summary: the DataFrame of :func:`posenc.study.summarize`.
        schemes: labels to draw, in order (default: every label in ``summary``).
        train_length: which training length's rows; marked with a dashed line.
        task, metric: which values. ylabel, title: text.
        styles: optional ``{scheme: matplotlib keyword arguments}`` (e.g. a grey
            ``none``), merged over the defaults.
    """
    sel = summary[
        (summary["train_length"] == train_length)
        & (summary["task"] == task)
        & (summary["metric"] == metric)
    ]
    schemes = (
        list(schemes) if schemes is not None else list(dict.fromkeys(sel["scheme"]))
    )
    styles = styles or {}
    for i, scheme in enumerate(schemes):
        rows = sel[sel["scheme"] == scheme].sort_values("eval_length")
        if rows.empty:
            continue
        x, y = rows["eval_length"].to_numpy(), rows["mean"].to_numpy()
        err = np.vstack([y - rows["lower"].to_numpy(), rows["upper"].to_numpy() - y])
        kwargs = {
            "marker": "o",
            "capsize": 3,
            "label": scheme,
            "color": OKABE_ITO[i % len(OKABE_ITO)],
            "linestyle": "-" if i < len(OKABE_ITO) else "--",
            **styles.get(scheme, {}),
        }
        ax.errorbar(x, y, yerr=np.nan_to_num(err), **kwargs)
    ax.axvline(train_length, color="0.4", linestyle="--", linewidth=1)
    _length_axis(ax, sorted(sel["eval_length"].unique()))
    ax.set(xlabel="evaluation length T (bytes)", ylabel=ylabel, title=title)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return ax
