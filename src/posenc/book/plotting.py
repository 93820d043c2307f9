"""One matplotlib style for the whole book, sized for the page it is shown on.

Colours are the Okabe–Ito palette (safe for the common colour-vision deficiencies);
sequential maps are ``viridis``, diverging maps ``RdBu_r`` centred on zero. Call
:func:`use_style` once per notebook (the chapters do it in their first cell).

Legibility is set here, once, rather than per figure. The book's text column is
:data:`COLUMN_PX` (690 CSS px) wide on a desktop, and a figure wider than that is scaled
down to it, so what decides how large its text looks is the figure's width in inches,
not its dpi: text of ``s`` points in a figure ``w`` inches wide is shown at
``s · 690 / (72 · w)`` px. Figures are :data:`FIGURE_WIDTH` inches wide (the
default ``figure.figsize``, and :func:`figure`) and no text is smaller than
:data:`MIN_FONT_PT`, so the smallest text is about 14 px on a desktop. A phone's
column is :data:`PHONE_COLUMN_PX` (382 CSS px on a 414-px screen), where the same
figure's text would shrink to about 8 px; so every figure is drawn twice, the second
time :data:`NARROW_WIDTH` inches wide with text of the same size in points, and the
page shows that narrow drawing to screens up to :data:`NARROW_MEDIA`
(:func:`figure_html`, an HTML ``<picture>``): its smallest text is then about 12 px
on the phone. Inside IPython, :func:`use_style` makes every figure display as that
picture and as a PNG (the decks and other front ends take the PNG), each PNG
carrying its smallest font size, dpi and width (:func:`figure_png`, read back by
:func:`png_text_metadata`), so that the browser tests can check the text size as
displayed on every page, at both widths.
"""

from __future__ import annotations

import io

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
#: One marker per colour of :data:`OKABE_ITO`, so that series differ in shape too.
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
#: One colour and marker per scheme of the study, and per context-extension, remapping
#: and temperature method, the same in every chapter that draws them
#: (``ax.plot(..., **SCHEME_STYLES[key])``): no two share both. A colour returns only
#: for methods that no figure of the book draws together (tests/test_plotting.py lists
#: which are). The frequency methods are keyed by their ``rope_type``
#: (:mod:`posenc.scaling`: the names of transformers' ``modeling_rope_utils``, the
#: static ``"ntk"`` the book's own; ``"default"`` is RoPE unscaled, grey as a
#: baseline), the remapping methods by their ``"attention"`` scheme name
#: (:mod:`posenc.layers.remapped_schemes`), the temperatures by their ``"type"``
#: (:data:`posenc.temperature.TEMPERATURE_TYPES`). The nine the remapping chapter
#: compares (unscaled, five frequency and three remapping methods) take nine colours,
#: ReRoPE the faint yellow; LongRoPE is drawn beside PI and NTK-aware only, the
#: temperatures beside YaRN only. RoPE is blue, not orange, because the tour draws it
#: beside Transformer-XL.
SCHEME_STYLES = {
    "alibi": {"color": OKABE_ITO[6], "marker": "o"},
    "shaw": {"color": OKABE_ITO[0], "marker": "s"},
    "transformer_xl": {"color": OKABE_ITO[1], "marker": "^"},
    "t5": {"color": OKABE_ITO[3], "marker": "D"},
    "deberta": {"color": OKABE_ITO[2], "marker": "v"},
    "sinusoidal": {"color": OKABE_ITO[4], "marker": "P"},
    "learned": {"color": OKABE_ITO[5], "marker": "X"},
    "none": {"color": "0.55", "marker": "*"},
    "rope": {"color": OKABE_ITO[0], "marker": "p"},
    "xpos": {"color": OKABE_ITO[3], "marker": "d"},
    "kerple, log": {"color": OKABE_ITO[4], "marker": "h"},
    "fire": {"color": OKABE_ITO[5], "marker": "H"},
    "default": {"color": "0.4", "marker": "o"},
    "linear": {"color": OKABE_ITO[0], "marker": "^"},
    "ntk": {"color": OKABE_ITO[1], "marker": "s"},
    "dynamic": {"color": OKABE_ITO[2], "marker": "D"},
    "yarn": {"color": OKABE_ITO[3], "marker": "v"},
    "llama3": {"color": OKABE_ITO[4], "marker": "X"},
    "longrope": {"color": OKABE_ITO[5], "marker": "p"},
    "self_extend": {"color": OKABE_ITO[6], "marker": "P"},
    "dual_chunk": {"color": OKABE_ITO[5], "marker": "d"},
    "rerope": {"color": OKABE_ITO[7], "marker": "h"},
    "logn": {"color": OKABE_ITO[6], "marker": "s"},
    "llama4": {"color": OKABE_ITO[5], "marker": "^"},
    "ssmax": {"color": OKABE_ITO[4], "marker": "o"},
}
#: How a figure's legend or a sentence names each scheme of :data:`SCHEME_STYLES`.
SCHEME_NAMES = {
    "alibi": "ALiBi", "shaw": "Shaw et al.", "transformer_xl": "Transformer-XL",
    "t5": "T5", "deberta": "DeBERTa", "sinusoidal": "sinusoidal", "learned": "learned",
    "none": "none (NoPE)", "rope": "RoPE", "xpos": "xPos",
    "kerple, log": "Kerple (log)", "fire": "FIRE",
    "default": "plain RoPE", "linear": "linear (PI)", "ntk": "NTK-aware",
    "dynamic": "dynamic NTK", "yarn": "YaRN", "llama3": "Llama 3",
    "longrope": "LongRoPE",
    "self_extend": "SelfExtend", "dual_chunk": "DCA", "rerope": "ReRoPE",
    "logn": "log-n", "llama4": "Llama 4", "ssmax": "Scalable-Softmax",
}
SEQUENTIAL_CMAP = "viridis"
DIVERGING_CMAP = "RdBu_r"

#: Width of the book's text column on a desktop (jupyter-book 1's theme), in CSS px.
COLUMN_PX = 690
#: Width of every figure, in inches: 10-pt text is then shown at about 16 px in the
#: column, and the smallest text (:data:`MIN_FONT_PT`) at about 14 px.
FIGURE_WIDTH = 6.0
#: Default height of one row of panels, in inches.
PANEL_HEIGHT = 3.2
#: The smallest font size any text of a figure may have, in points.
MIN_FONT_PT = 9.0
#: The smallest text as displayed that the book accepts, in CSS px (tests/test_site.py).
MIN_TEXT_PX = 10.0
#: Width of the text column on a 414-px phone (jupyter-book 1's theme), in CSS px.
PHONE_COLUMN_PX = 382
#: Width in inches of a figure's narrow drawing (:func:`figure_html`): the smallest text
#: (:data:`MIN_FONT_PT`) is then shown at about 12 px in a phone's column.
NARROW_WIDTH = 4.0
#: The screens that get the narrow drawing: a phone, or a window as narrow as one.
#: Above it the theme's column is wider than the narrow drawing's 600 px.
NARROW_MEDIA = "(max-width: 640px)"

STYLE = {
    "axes.prop_cycle": cycler(color=OKABE_ITO),
    "lines.markersize": 5,
    "figure.figsize": (FIGURE_WIDTH, PANEL_HEIGHT),
    "figure.dpi": 110,
    "savefig.dpi": 150,
    "savefig.bbox": "tight",
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "font.size": 10,
    "axes.titlesize": 11,
    "axes.labelsize": 10,
    "xtick.labelsize": MIN_FONT_PT,
    "ytick.labelsize": MIN_FONT_PT,
    "legend.fontsize": MIN_FONT_PT,
    "legend.title_fontsize": MIN_FONT_PT,
    "figure.titlesize": 11,
    "legend.frameon": False,
    "image.cmap": SEQUENTIAL_CMAP,
    "figure.constrained_layout.use": True,
}


def use_style() -> None:
    """Apply the book's style to matplotlib's global settings and, inside IPython, show
    every figure as a PNG that records its text size (:func:`figure_png`)."""
    mpl.rcParams.update(STYLE)
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - IPython is a dependency of the book only
        return
    shell = get_ipython()
    if shell is not None:
        import matplotlib.pyplot as plt
        from matplotlib.figure import Figure

        # the inline backend registers its own PNG formatter when it is first loaded,
        # which is when the first figure is made: load it now, then replace it
        plt.close(plt.figure())
        shell.display_formatter.formatters["image/png"].for_type(Figure, figure_png)
        shell.display_formatter.formatters["text/html"].for_type(Figure, figure_html)


def figure(nrows: int = 1, ncols: int = 1, *, height: float | None = None, **kwargs):
    """A figure of the book's width (:data:`FIGURE_WIDTH`) and its axes.

    Args:
        nrows, ncols: the grid of panels; two panels side by side is the most a phone
            shows legibly, so more than two columns raise.
        height: total height in inches (default :data:`PANEL_HEIGHT` per row).
        **kwargs: passed to ``plt.subplots`` (``sharex``, ``sharey``, ...).

    Returns:
        ``(fig, axes)`` as ``plt.subplots`` returns them.

    Raises:
        ValueError: if ``ncols`` is more than 2.
    """
    import matplotlib.pyplot as plt

    if ncols > 2:
        raise ValueError(
            f"ncols={ncols}: at most 2 panels side by side (one idea per figure, "
            "legible on a phone); split the figure"
        )
    size = (FIGURE_WIDTH, height or PANEL_HEIGHT * nrows)
    return plt.subplots(nrows, ncols, figsize=size, **kwargs)


def smallest_font_pt(fig) -> float:
    """The size in points of the smallest non-empty, visible text of ``fig`` (titles,
    labels, tick labels, legends, annotations); ``nan`` for a figure without text."""
    from matplotlib.text import Text

    fig.canvas.draw_idle()
    sizes = [
        t.get_fontsize()
        for t in fig.findobj(Text)
        if t.get_visible() and t.get_text().strip() and _drawn(t)
    ]
    return min(sizes) if sizes else float("nan")


def _drawn(text) -> bool:
    """Whether a Text is part of what is drawn: every ancestor artist visible (a tick
    label of a hidden axis is not)."""
    axes = text.axes
    return axes is None or axes.get_visible()


def figure_png(fig, dpi: float | None = None, *, extra_artists=()) -> bytes:
    """``fig`` as PNG bytes (``savefig.bbox`` tight) that carry, as text chunks,
    ``posenc:font_pt_min`` (:func:`smallest_font_pt`) and ``posenc:dpi``.

    Args:
        fig: a matplotlib Figure. dpi: default ``savefig.dpi``.
        extra_artists: artists outside the layout that the tight box must still hold.

    Returns:
        The PNG file's bytes.
    """
    dpi = float(dpi or mpl.rcParams["savefig.dpi"])
    buffer = io.BytesIO()
    metadata = {
        "posenc:font_pt_min": f"{smallest_font_pt(fig):g}",
        "posenc:dpi": f"{dpi:g}",
    }
    fig.savefig(
        buffer,
        format="png",
        dpi=dpi,
        bbox_inches="tight",
        bbox_extra_artists=list(extra_artists) or None,
        metadata=metadata,
    )
    return buffer.getvalue()


def figure_html(fig) -> str:
    """``fig`` as an HTML ``<picture>`` of class ``posenc-figure``: the figure at the
    book's width (:func:`figure_png`) for wide screens, and drawn again at
    :data:`NARROW_WIDTH` inches (:func:`posenc.book.phone.narrow_png`) for screens up
    to :data:`NARROW_MEDIA`, both as ``data:`` URIs, with the figure's titles as the
    image's alternative text. The decks show the figure's PNG instead
    (``book/_slides/posenc_slides.py``)."""
    import base64
    import html

    from .phone import narrow_png

    def uri(png: bytes) -> str:
        return "data:image/png;base64," + base64.b64encode(png).decode()

    titles = [fig.get_suptitle()]
    titles += [ax.get_title() for ax in fig.axes if ax.get_visible()]
    alt = html.escape("; ".join(t for t in titles if t.strip()) or "figure", quote=True)
    wide = uri(figure_png(fig))
    narrow = uri(narrow_png(fig))
    return (
        f'<picture class="posenc-figure">'
        f'<source media="{NARROW_MEDIA}" srcset="{narrow}"/>'
        f'<img src="{wide}" alt="{alt}"/></picture>'
    )


#: The MIME type under which :func:`glue_figure` stores a figure's slide drawing
#: (:func:`posenc.book.slide_figure.slide_png`, base64 PNG). The page does not show it
#: (myst-nb renders the output's text/html); the lecture decks do.
SLIDE_MIME = "application/vnd.posenc.slide-png+base64"


def _check_label(name: object, who: str) -> str:
    import re

    if not isinstance(name, str) or not re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", name):
        raise ValueError(
            f"{who}: label {name!r} is not kebab-case; use lowercase letters, "
            "digits and hyphens, prefixed by the chapter's stem "
            "(e.g. 'rope-wavelengths')"
        )
    return name


def glue_value(name: str, value) -> None:
    """Label ``value`` in a chapter cell for a lecture's ``{value}``
    (:mod:`posenc.book.lecture`) without showing it on the page: the output
    ``myst_nb.glue(name, value, display=False)`` writes (IPython's display data of
    ``value`` under the ``application/papermill.record/`` prefix, with metadata
    ``{"scrapbook": {"name": name, "mime_prefix": …}}``), written with IPython alone so
    that a chapter runs where myst-nb is not installed (Colab).

    Args:
        name: the label, kebab-case and prefixed by the chapter's stem.
        value: any object; the lecture shows its ``text/plain`` (a string unquoted).

    Raises:
        ValueError: if ``name`` is not kebab-case.

    Source: myst-nb 1.4, ``myst_nb/ext/glue/__init__.py`` (``glue``).
    """
    from IPython.core.formatters import format_display_data
    from IPython.display import display

    _check_label(name, "glue_value")
    bundle, metadata = format_display_data(value)
    prefix = "application/papermill.record/"
    display({prefix + k: v for k, v in bundle.items()}, raw=True,
            metadata={**metadata, "scrapbook": {"name": name, "mime_prefix": prefix}})


def glue_figure(name: str, fig) -> None:
    """Display ``fig`` in a chapter cell as the book displays every figure (its
    :func:`figure_html` picture, its :func:`figure_png` PNG and matplotlib's text),
    labelled ``name`` for myst-nb's glue (output metadata ``{"scrapbook": {"name":
    name, "mime_prefix": ""}}``, what ``myst_nb.glue(name, fig)`` writes), with the
    figure's slide drawing (:func:`posenc.book.slide_figure.slide_png`) in the same
    output under :data:`SLIDE_MIME`, for a lecture's ``{figure}``
    (:mod:`posenc.book.lecture`). The figure is then closed, so that the inline backend
    does not show it a second time.

    Args:
        name: the label, kebab-case and prefixed by the chapter's stem
            (``"rope-wavelengths"``).
        fig: a matplotlib Figure.

    Raises:
        ValueError: if ``name`` is not kebab-case (lowercase letters, digits, hyphens).

    Source: myst-nb 1.4, ``myst_nb/ext/glue/__init__.py`` (``glue``, the metadata).
    """
    import base64

    import matplotlib.pyplot as plt
    from IPython.display import display

    from .slide_figure import slide_png

    _check_label(name, "glue_figure")

    def b64(png: bytes) -> str:
        return base64.b64encode(png).decode()

    bundle = {
        "text/plain": repr(fig),
        "text/html": figure_html(fig),
        "image/png": b64(figure_png(fig)),
        SLIDE_MIME: b64(slide_png(fig)),
    }
    metadata = {"scrapbook": {"name": name, "mime_prefix": ""}}
    display(bundle, raw=True, metadata=metadata)
    plt.close(fig)


def png_text_metadata(path_or_bytes) -> dict[str, float] | None:
    """The ``posenc:`` text chunks of a PNG written by :func:`figure_png`, as numbers
    (``font_pt_min``, ``dpi``), with the image's width in pixels (``natural_px``);
    ``None`` for a PNG without them."""
    from PIL import Image

    if isinstance(path_or_bytes, bytes):
        path_or_bytes = io.BytesIO(path_or_bytes)
    with Image.open(path_or_bytes) as image:
        info = {
            key.removeprefix("posenc:"): float(value)
            for key, value in image.text.items()
            if key.startswith("posenc:")
        }
        info["natural_px"] = float(image.size[0])
    return info if "font_pt_min" in info else None


def displayed_text_px(
    font_pt: float, dpi: float, natural_px: float, shown_px: float
) -> float:
    """Size in CSS px at which text of ``font_pt`` points is shown, in a PNG rendered at
    ``dpi`` whose ``natural_px`` pixels of width are shown ``shown_px`` CSS px wide."""
    return font_pt * dpi / 72.0 * shown_px / natural_px


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
    ax,
    results: dict[str, dict[int, float]],
    *,
    train_len: int,
    title: str = "",
    styles: dict | None = None,
):
    """Validation perplexity against evaluation length, one line per scheme, each with
    its own colour and marker.

    Args:
        ax: the Axes. results: ``{scheme name: {length: perplexity}}``.
        train_len: the training length, marked with a vertical line.
        styles: optional ``{scheme: matplotlib keyword arguments}``, merged over the
            defaults (:data:`OKABE_ITO` colours and :data:`MARKERS` in turn).
    """
    styles = styles or {}
    for i, (name, by_len) in enumerate(results.items()):
        lengths = sorted(by_len)
        kwargs = {
            "color": OKABE_ITO[i % len(OKABE_ITO)],
            "marker": MARKERS[i % len(MARKERS)],
            "label": name,
            **styles.get(name, {}),
        }
        ax.plot(lengths, [by_len[n] for n in lengths], **kwargs)
    ax.axvline(train_len, color="0.4", linestyle="--", linewidth=1)
    ax.text(
        train_len,
        ax.get_ylim()[1],
        " training length",
        va="top",
        ha="left",
        fontsize=MIN_FONT_PT,
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
    for i, (name, values) in enumerate(curves.items()):
        ax.plot(
            lengths,
            [max(v, floor_mib) for v in values],
            color=OKABE_ITO[i % len(OKABE_ITO)],
            marker=MARKERS[i % len(MARKERS)],
            label=name,
        )
    ax.set_yscale("log")
    _length_axis(ax, list(lengths))
    ax.set(xlabel="sequence length T", ylabel="peak memory (MiB)", title=title)
    ax.legend()
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
    evaluation length, one line per scheme, from
    :func:`posenc.experiments.stats.summarize`.

    Args:
        ax: the Axes. summary: the DataFrame of
            :func:`posenc.experiments.stats.summarize`.
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
            "capsize": 3,
            "label": scheme,
            "color": OKABE_ITO[i % len(OKABE_ITO)],
            "marker": MARKERS[i % len(MARKERS)],
            "linestyle": "-" if i < len(OKABE_ITO) else "--",
            **styles.get(scheme, {}),
        }
        ax.errorbar(x, y, yerr=np.nan_to_num(err), **kwargs)
    ax.axvline(train_length, color="0.4", linestyle="--", linewidth=1)
    _length_axis(ax, sorted(sel["eval_length"].unique()))
    ax.set(xlabel="evaluation length T (bytes)", ylabel=ylabel, title=title)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return ax
