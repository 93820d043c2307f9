"""A figure drawn again for a lecture slide: the drawing that
:func:`posenc.book.plotting.glue_figure` stores under
:data:`~posenc.book.plotting.SLIDE_MIME` and the lecture decks
(:mod:`posenc.book.lecture`) show.

A lecture deck is 1280 × 800 CSS px (reveal.js at scale 1 in a 1280 × 800 window). A
book figure shown there at its page size (:data:`~posenc.book.plotting.FIGURE_WIDTH`
inches, 9-pt text) is read from the back of a room at about 14 px. :func:`slide_png`
draws the same figure again so that it fills :data:`SLIDE_FIGURE_BOX` and its smallest
text is :data:`SLIDE_FONT_PT` points, the rest of its text scaled by the same factor.
The deck shows the PNG at :func:`slide_css_width` CSS px, :data:`CSS_PX_PER_INCH` CSS
px to the figure's inch, so text of ``s`` points is displayed at ``s · 96 / 72`` px:
:data:`SLIDE_FONT_PT` (15 pt) at 20 px, above the 18-px floor of the deck checks
(:data:`SLIDE_MIN_TEXT_PX`). Like :func:`posenc.book.phone.narrow_png`, every change
is undone afterwards, so the figure a chapter made is left as it was.
"""

from __future__ import annotations

#: The lecture decks' size (reveal.js ``width`` and ``height``), CSS px.
SLIDE_SIZE = (1280, 800)
#: The largest box a figure is shown in on a slide, CSS px: the slide's width less its
#: margins, its height less the heading and one line of text.
SLIDE_FIGURE_BOX = (1160, 520)
#: CSS px per inch of the drawing: the deck shows the PNG at this many px per inch of
#: the figure (the CSS inch), so a point of text is 96 / 72 px.
CSS_PX_PER_INCH = 96.0
#: Pixels per inch of the PNG: 1.5 device pixels per CSS px, sharp on a projector and
#: most laptop screens.
SLIDE_DPI = 144.0
#: The smallest text of a slide drawing, in points (20 CSS px as shown).
SLIDE_FONT_PT = 15.0
#: The smallest text the lecture decks accept, CSS px at 1280 × 800 (issue 41).
SLIDE_MIN_TEXT_PX = 18.0


def slide_png(fig) -> bytes:
    """``fig`` drawn for a lecture slide, as :func:`posenc.book.plotting.figure_png`
    writes it (its smallest font size and dpi recorded in the PNG): scaled to fill
    :data:`SLIDE_FIGURE_BOX` (CSS px at :data:`CSS_PX_PER_INCH`) with its aspect kept,
    every text's size multiplied by the one factor that makes the smallest
    :data:`SLIDE_FONT_PT` points, at :data:`SLIDE_DPI`. When the text around the panels
    (a legend beside them, long labels) makes the drawing larger than the box, the
    figure shrinks, its text kept, until the drawing fits (four tries). The figure is
    restored afterwards.

    Args:
        fig: a matplotlib Figure with at least one visible text.

    Returns:
        The PNG file's bytes; show it :func:`slide_css_width` CSS px wide.

    Raises:
        ValueError: if the figure has no visible text (there is no size to scale from).
    """
    import math
    import warnings

    import matplotlib as mpl

    from .plotting import figure_png, smallest_font_pt

    smallest = smallest_font_pt(fig)
    if math.isnan(smallest):
        raise ValueError(
            "slide_png: the figure has no visible text, so there is no font size to "
            "scale to the slide; label its axes (every book figure has labels)"
        )
    factor = SLIDE_FONT_PT / smallest
    width, height = fig.get_size_inches()
    box_w, box_h = (side / CSS_PX_PER_INCH for side in SLIDE_FIGURE_BOX)
    scale = min(box_w / width, box_h / height)
    undo = _scale_text(fig, factor)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="constrained_layout not applied")
            size = (width * scale, height * scale)
            for _ in range(4):
                fig.set_size_inches(*size)
                fig.draw_without_rendering()
                drawn = fig.get_tightbbox(fig.canvas.get_renderer())
                pad = 2 * float(mpl.rcParams["savefig.pad_inches"])  # savefig's margin
                over = max((drawn.width + pad) / box_w, (drawn.height + pad) / box_h)
                if over <= 1.0:
                    break
                size = (size[0] / over, size[1] / over)
            return figure_png(fig, SLIDE_DPI)
    finally:
        for restore in reversed(undo):
            restore()
        fig.set_size_inches(width, height)


def slide_css_width(png: bytes) -> float:
    """The width in CSS px at which a deck shows a :func:`slide_png` drawing: its width
    in pixels at its recorded dpi, :data:`CSS_PX_PER_INCH` px to the inch.

    Raises:
        ValueError: if the PNG has no dpi recorded by
            :func:`posenc.book.plotting.figure_png`.
    """
    from .plotting import png_text_metadata

    meta = png_text_metadata(png)
    if meta is None or "dpi" not in meta:
        raise ValueError(
            "slide_css_width: the PNG has no posenc:dpi text chunk; draw it with "
            "posenc.book.slide_figure.slide_png"
        )
    return meta["natural_px"] * CSS_PX_PER_INCH / meta["dpi"]


def _scale_text(fig, factor: float) -> list:
    """Multiply the size of every text of ``fig`` by ``factor``: tick labels through
    ``tick_params`` (so that ticks made at the new size get it too), every other text
    directly. Return the undo callables."""
    from matplotlib.text import Text

    undo = []
    tick_labels = set()
    for ax in fig.axes:
        for name, axis in (("x", ax.xaxis), ("y", ax.yaxis)):
            for which, ticks in (
                ("major", axis.get_major_ticks()),
                ("minor", axis.get_minor_ticks()),
            ):
                if not ticks:
                    continue
                old = ticks[0].label1.get_fontsize()
                ax.tick_params(axis=name, which=which, labelsize=old * factor)
                undo.append(
                    lambda ax=ax, name=name, which=which, old=old: ax.tick_params(
                        axis=name, which=which, labelsize=old
                    )
                )
                for tick in ticks:
                    tick_labels.update((tick.label1, tick.label2))
    for text in fig.findobj(Text):
        if text in tick_labels:
            continue
        old = text.get_fontsize()
        text.set_fontsize(old * factor)
        undo.append(lambda text=text, old=old: text.set_fontsize(old))
    return undo


class SlideDrawingOnAPage:
    """myst-nb's renderer plugin for the slide drawing (entry point group
    ``myst_nb.mime_renderers`` in pyproject.toml): on a page the drawing is not shown
    (the page shows the figure's ``text/html``), and myst-nb, which renders every MIME
    type of an output before it picks one, would otherwise warn that it skips an
    unknown type. Source: myst-nb 1.x, ``myst_nb/core/render.py``, ``MimeRenderPlugin``.
    """

    mime_priority_overrides = ()

    @staticmethod
    def handle_mime(renderer, data, inline):
        from .plotting import SLIDE_MIME

        return [] if data.mime_type == SLIDE_MIME else None
