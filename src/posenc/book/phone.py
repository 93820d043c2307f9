"""A figure drawn again for a phone: the narrow drawing of
:func:`posenc.book.plotting.figure_html`.

The book's figures are :data:`~posenc.book.plotting.FIGURE_WIDTH` inches wide, for a
690-px column; shrunk into a 382-px phone column their text would show at about 8 px.
:func:`narrow_png` draws the same figure :data:`~posenc.book.plotting.NARROW_WIDTH`
inches wide with its font sizes kept, and does for that drawing what constrained
layout does not: legends that would not fit go under the panels, long titles break,
clashing tick labels turn. Each change is undone afterwards, so the figure a chapter
made is left as it was.
"""

from __future__ import annotations

from .plotting import NARROW_WIDTH, figure_png


def narrow_png(fig, dpi: float | None = None) -> bytes:
    """``fig`` drawn for a phone, as :func:`figure_png` writes it, at
    :data:`NARROW_WIDTH` inches wide with its height and font sizes kept; the figure is
    restored afterwards.

    Constrained layout (the book's default) lays the panels out again at the narrow
    width. What it does not do is done here, for the narrow drawing only: a legend
    beside a panel moves under it, a title or x label wider than its panel breaks into
    two lines, x tick labels that would overlap turn by 35°, and when text outside the
    panels still makes the drawing wider than :data:`NARROW_WIDTH`, the panels narrow
    (to three quarters at most) so that the text keeps its size on the phone. A figure
    already that narrow is drawn as it is.

    Args:
        fig: a matplotlib Figure. dpi: default ``savefig.dpi``.

    Returns:
        The PNG file's bytes.
    """
    import warnings

    width, height = fig.get_size_inches()
    target = min(width, NARROW_WIDTH)
    undo: list = []
    moved: dict = {}
    try:
        with warnings.catch_warnings():
            # a layout squeezed on the way (before a legend moves) is laid out again
            warnings.filterwarnings("ignore", message="constrained_layout not applied")
            size = target
            fig.set_size_inches(size, height)
            undone, taller = _legends_for_a_phone(fig, target, moved)
            undo += undone
            undo += _break_wide_text(fig)
            for _ in range(4):
                fig.set_size_inches(size, height + taller)
                undo += _turn_clashing_ticks(fig)
                undo += _legends_under_panels(fig, moved)
                renderer = fig.canvas.get_renderer()
                extra = list(moved)
                drawn = fig.get_tightbbox(renderer, bbox_extra_artists=extra).width
                if drawn <= target + 0.05 or size <= 0.75 * target:
                    break
                size = max(0.75 * target, size - (drawn - target))
            return figure_png(fig, dpi, extra_artists=list(moved))
    finally:
        for restore in reversed(undo):
            restore()
        fig.set_size_inches(width, height)


def _legend_parts(legend) -> tuple[list, list, dict]:
    """What a legend shows: its handles, labels and title, to draw it again."""
    labels = [t.get_text() for t in legend.texts]
    title = legend.get_title().get_text()
    return list(legend.legend_handles), labels, {"title": title or None}


def _fitting_columns(make, ncols: int, room: float, renderer, dpi: float):
    """The legend ``make(n)`` with the most columns, at most ``ncols``, that is at most
    ``room`` inches wide (one column if none is); each one tried is removed again."""
    for n in range(max(ncols, 1), 0, -1):
        legend = make(n)
        if n == 1 or legend.get_window_extent(renderer).width / dpi <= room:
            return legend
        legend.remove()


def _legends_for_a_phone(fig, target: float, moved: dict) -> list:
    """Draw again, for the phone, every legend of the figure that would not fit: a
    figure's legend goes under the panels (``outside lower center``), a panel's legend
    that sticks out of its panel or is wider than the drawing goes under its panel
    (placed by :func:`_legends_under_panels`, which ``moved`` tells), each with as many
    columns as fit :data:`NARROW_WIDTH`. Return the undo callables, and the inches the
    figure must grow by to keep its panels' height under the figure's legends."""
    fig.draw_without_rendering()
    renderer = fig.canvas.get_renderer()
    undo, taller = [], 0.0
    for old in list(fig.legends):
        if not old.get_visible():
            continue
        handles, labels, kwargs = _legend_parts(old)
        at = fig.legends.index(old)
        fig.legends.remove(old)

        def make(n, handles=handles, labels=labels, kwargs=kwargs):
            return fig.legend(
                handles, labels, loc="outside lower center", ncols=n, **kwargs
            )

        new = _fitting_columns(make, old._ncols, target, renderer, fig.dpi)
        # the panels lose the new legend's height, less what a legend under them took
        was, now = old.get_window_extent(renderer), new.get_window_extent(renderer)
        bottom = min(a.get_window_extent(renderer).y0 for a in _visible_axes(fig))
        grown = now.height - (was.height if was.y1 <= bottom else 0.0)
        taller += max(grown, 0.0) / fig.dpi

        def restore(old=old, new=new, at=at):
            fig.legends.remove(new)
            fig.legends.insert(at, old)

        undo.append(restore)
        fig.draw_without_rendering()
    for ax in _visible_axes(fig):
        old = ax.get_legend()
        if old is None or not old.get_visible():
            continue
        box, panel = old.get_window_extent(renderer), ax.get_window_extent(renderer)
        if box.x1 <= panel.x1 + 2 and box.width / fig.dpi <= target:
            continue
        handles, labels, kwargs = _legend_parts(old)

        def make(n, ax=ax, handles=handles, labels=labels, kwargs=kwargs):
            return ax.legend(handles, labels, loc="upper center", ncols=n, **kwargs)

        new = _fitting_columns(make, old._ncols, target, renderer, fig.dpi)
        new.set_in_layout(False)
        moved[new] = ax

        def restore(ax=ax, old=old):
            ax.legend_ = old

        undo.append(restore)
    return undo, taller


def _visible_axes(fig) -> list:
    return [ax for ax in fig.axes if ax.get_visible()]


def _legends_under_panels(fig, moved: dict) -> list:
    """Put every panel's legend that sticks out to the right of its panel under the
    panel, centred, a fixed distance (in points) below its x-axis labels, so that it
    stays clear of them however the layout changes the panel's height, and outside the
    layout; a legend moved before (``moved``, legend → its panel) is placed again.
    Return the undo callables of the legends moved now."""
    import matplotlib.transforms as mtransforms

    fig.draw_without_rendering()
    renderer = fig.canvas.get_renderer()
    undo = []
    for ax in _visible_axes(fig):
        legend = ax.get_legend()
        if legend is None or not legend.get_visible():
            continue
        panel = ax.get_window_extent(renderer)
        inside = legend.get_window_extent(renderer).x1 <= panel.x1 + 2
        if legend not in moved and inside:
            continue
        if legend not in moved:
            # matplotlib has no public way to put back an anchor it has transformed
            anchor, loc = legend._bbox_to_anchor, legend._loc
            laid_out = legend.get_in_layout()

            def restore(legend=legend, anchor=anchor, loc=loc, laid_out=laid_out):
                legend._bbox_to_anchor = anchor
                legend._loc = loc
                legend.set_in_layout(laid_out)

            undo.append(restore)
            moved[legend] = ax
            # under everything, it only extends the drawing downwards (savefig's tight
            # box); left to the layout, a legend wider than its panel squeezes the panel
            legend.set_in_layout(False)
        labels = ax.xaxis.get_tightbbox(renderer)
        drop = (panel.y0 - labels.y0) / fig.dpi if labels is not None else 0.0
        drop += 3 / 72  # three points of space, in inches
        shift = mtransforms.ScaledTranslation(0, -drop, fig.dpi_scale_trans)
        legend.set_bbox_to_anchor((0.5, 0.0), transform=ax.transAxes + shift)
        legend.set_loc("upper center")
    return undo


def _break_wide_text(fig) -> list:
    """Break a panel's title or x-axis label that is wider than its panel into two lines
    at the space nearest its middle; return the undo callables."""
    fig.draw_without_rendering()
    renderer = fig.canvas.get_renderer()
    undo = []
    for ax in _visible_axes(fig):
        room = ax.get_window_extent(renderer).width
        for text in (ax.title, ax.xaxis.label):
            words = text.get_text()
            if " " not in words or "\n" in words:
                continue
            if text.get_window_extent(renderer).width <= room:
                continue
            spaces = [i for i, c in enumerate(words) if c == " "]
            cut = min(spaces, key=lambda i: abs(i - len(words) / 2))
            text.set_text(words[:cut] + "\n" + words[cut + 1 :])
            undo.append(lambda text=text, words=words: text.set_text(words))
    return undo


def _turn_clashing_ticks(fig) -> list:
    """Turn the x tick labels of every panel whose labels overlap by 35°; return the
    undo callables."""
    fig.draw_without_rendering()
    renderer = fig.canvas.get_renderer()
    undo = []
    gap = 2 * fig.dpi / 72  # two points
    for ax in _visible_axes(fig):
        labels = [
            t for t in ax.get_xticklabels() if t.get_visible() and t.get_text().strip()
        ]
        if any("\n" in t.get_text() for t in labels):
            continue  # lines written to be read level; turned they run into each other
        boxes = sorted(
            (t.get_window_extent(renderer) for t in labels), key=lambda b: b.x0
        )
        clash = any(a.x1 + gap > b.x0 for a, b in zip(boxes, boxes[1:]))
        if labels and labels[0].get_rotation() == 0 and clash:
            for t in labels:
                old = {"rotation": t.get_rotation(), "ha": t.get_ha(),
                       "rotation_mode": t.get_rotation_mode()}
                t.set(rotation=35, ha="right", rotation_mode="anchor")
                undo.append(lambda t=t, old=old: t.set(**old))
    return undo
