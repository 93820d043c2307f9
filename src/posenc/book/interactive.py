"""Figures a reader moves: every state precomputed by the package, drawn by plotly.js.

An :class:`Explorer` is a figure with one slider per :class:`Control`. Each
combination of the controls' values is a *state*, computed in Python by the
chapter's own functions (``state(**values)`` returns plotly.js traces, annotations
and shapes as plain dicts) and stored in the page, so the figure needs no kernel:
moving a slider looks the state up and redraws it (a dozen lines of JavaScript,
:data:`_GLUE`, that compute nothing). A figure holds at most :data:`MAX_STATES`
states.

Where plotly.js comes from is the one switch, :data:`MODE_ENV`:

* ``POSENC_FIGURES=site`` (set by the Makefile for every build and test): from the
  built site itself, ``_static/plotly.js-cartesian-dist-min/`` (vendored by npm from
  ``book/_vendor/package-lock.json`` beside MathJax and reveal.js), so the published
  pages make no request to another host;
* unset (Colab, Jupyter, VS Code): from the jsDelivr mirror of the same npm package,
  since the site's path does not exist there.

The same output also carries a PNG of the first state, drawn with matplotlib from the
same traces (:func:`draw_static`): the lecture decks and print use it, and the text
of both follows the book's legibility rule (at least 12 CSS px in the browser).

Shapes:
    a state's ``data`` is a list of plotly.js traces (``scatter`` with ``x``, ``y``;
    ``heatmap`` with ``z`` (rows, cols)); ``annotations`` and ``shapes`` as in
    plotly.js's layout.
"""

from __future__ import annotations

import base64
import html
import itertools
import json
import os
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

# The screens that get the narrow layout: those that get the narrow figures.
from .plotting import NARROW_MEDIA

#: The environment variable that says where plotly.js comes from (module docstring).
MODE_ENV = "POSENC_FIGURES"
#: plotly.js's version, the npm package ``plotly.js-cartesian-dist-min`` (scatter,
#: bar, heatmap; 1.5 MB, a third of the full bundle).
PLOTLY_JS_VERSION = "4.1.1"
SITE_SCRIPT = "../_static/plotly.js-cartesian-dist-min/plotly-cartesian.min.js"
NOTEBOOK_SCRIPT = (
    "https://cdn.jsdelivr.net/npm/plotly.js-cartesian-dist-min@"
    f"{PLOTLY_JS_VERSION}/plotly-cartesian.min.js"
)
#: The most states one figure may precompute.
MAX_STATES = 400
#: Font size of every text in the figures, CSS px (the book's floor is 12).
FONT_PX = 14
#: Heights in CSS px: the plot (on a wide screen), its x-axis labels and title under
#: it, each slider (the value read out above a rail; the step labels are hidden), one
#: line of the readout above the plot (the top margin holds the longest readout's
#: lines and :data:`TOP_PAD_PX`), and one row of the legend.
PLOT_PX = 340
AXIS_PX = 60
SLIDER_PX = 62
LINE_PX = 20
TOP_PAD_PX = 12
LEGEND_ROW_PX = 22
#: The most a figure may be tall on a phone, CSS px (issue 39: it leaves room for the
#: prose around it on a 414 × 896 screen), and the least its plot may be.
PHONE_MAX_PX = 700
MIN_PLOT_PX = 180
#: The legend's columns, on a wide screen and on a narrow one
#: (``LEGEND_COLUMNS[narrow]``): each entry gets that fraction of the plot's width, so
#: the rows are known in advance.
LEGEND_COLUMNS = {False: 4, True: 2}


@dataclass(frozen=True)
class Control:
    """One slider: ``name`` is the keyword the state function receives, ``values``
    the choices (numbers or strings), ``label`` what the reader sees."""

    name: str
    values: Sequence[Any]
    label: str = ""
    default: int = 0

    def __post_init__(self):
        if not self.values:
            raise ValueError(f"control {self.name!r} needs at least one value")
        if not 0 <= self.default < len(self.values):
            raise ValueError(
                f"control {self.name!r}: default index {self.default} is not in "
                f"0 … {len(self.values) - 1}"
            )


@dataclass
class Explorer:
    """A figure with sliders whose every state the package computed.

    Args:
        controls: the sliders, top to bottom.
        state: ``state(**{control.name: value})`` → a dict with ``data`` (plotly.js
            traces), and optionally ``annotations`` and ``shapes``; called once per
            combination of the controls' values.
        layout: plotly.js layout shared by every state (axis titles and ranges).
        title: shown above the plot.

    Raises:
        ValueError: more than :data:`MAX_STATES` combinations; two controls with one
            name; a state without ``data``.
    """

    controls: Sequence[Control]
    state: Callable[..., dict]
    layout: dict = field(default_factory=dict)
    title: str = ""

    def __post_init__(self):
        names = [c.name for c in self.controls]
        if len(set(names)) != len(names):
            raise ValueError(f"control names must differ, got {names}")
        count = 1
        for c in self.controls:
            count *= len(c.values)
        if count > MAX_STATES:
            raise ValueError(
                f"{count} states (the product of the controls' sizes) is more than "
                f"MAX_STATES={MAX_STATES}; use fewer values"
            )
        self.states = {}
        for index in itertools.product(*(range(len(c.values)) for c in self.controls)):
            values = {c.name: c.values[i] for c, i in zip(self.controls, index)}
            result = self.state(**values)
            if "data" not in result:
                raise ValueError(f"state {values} has no 'data'")
            self.states[",".join(map(str, index))] = {
                "data": result["data"],
                "layout": {
                    key: result[key]
                    for key in ("annotations", "shapes")
                    if key in result
                },
            }

    @property
    def default_key(self) -> str:
        return ",".join(str(c.default) for c in self.controls)

    def readout_lines(self) -> int:
        """The most lines the annotations of a state have (the readout's)."""
        return max((max((a["text"].count("<br>") + 1 for a in st["layout"].get(
            "annotations", [])), default=0) for st in self.states.values()), default=0)

    def legend_names(self) -> list[list[str]]:
        """The legend's entries of every state (named traces not hidden from it)."""
        if self.layout.get("showlegend", True) is False:
            return []
        return [
            [t["name"] for t in st["data"]
             if t.get("name") and t.get("showlegend", True)
             and t.get("type", "scatter") != "heatmap"]
            for st in self.states.values()
        ]

    def legend_rows(self, narrow: bool = False) -> int:
        """How many rows the horizontal legend takes, at most over the states: its
        entries sit on a grid of :data:`LEGEND_COLUMNS` (narrow or wide) columns."""
        per_row = LEGEND_COLUMNS[narrow]
        rows = (-(-len(names) // per_row) for names in self.legend_names())
        return max(rows, default=0)

    def figure_layout(self, narrow: bool = False) -> dict:
        """The plotly.js layout of the first state, sliders included, from the top: the
        readout annotations in the top margin, the plot, its x-axis labels, the legend
        (horizontal, below the plot, so it never covers it), one slider per control.

        ``narrow`` is the layout of a phone (:data:`NARROW_MEDIA`): the plot is made
        shorter so that the figure is at most :data:`PHONE_MAX_PX` tall.

        Raises:
            ValueError: so many sliders and legend rows that a phone's plot would be
                under :data:`MIN_PLOT_PX`.
        """
        n = len(self.controls)
        top = TOP_PAD_PX + LINE_PX * self.readout_lines() + (24 if self.title else 0)
        rows = self.legend_rows(narrow)
        legend = LEGEND_ROW_PX * rows + (12 if rows else 0)  # its rows and a gap above
        # from the plot's bottom to the sliders' bottom
        below = AXIS_PX + legend + SLIDER_PX * n
        plot = PLOT_PX
        if narrow:
            plot = min(PLOT_PX, PHONE_MAX_PX - top - below - 8)
            if plot < MIN_PLOT_PX:
                raise ValueError(
                    f"{n} sliders and {rows} legend rows leave a {plot}-px plot on a "
                    f"phone (at least {MIN_PLOT_PX}): use fewer controls"
                )
        height = top + plot + below + 8
        inner = height - top - 8  # plotly's paper coordinates span this
        layout = {
            "height": height,
            "autosize": True,
            "margin": {"l": 64, "r": 16, "t": top, "b": 8},
            "font": {"size": FONT_PX},
            "title": {"text": self.title, "font": {"size": FONT_PX + 1}, "x": 0.02},
            "showlegend": bool(rows),
            **self.layout,
        }
        layout["yaxis"] = {**layout.get("yaxis", {}), "domain": [below / inner, 1]}
        # under the x-axis title, within the plot's width (a legend reaching past it
        # would push the plot's margins)
        layout["legend"] = {
            "font": {"size": FONT_PX - 1},
            **self.layout.get("legend", {}),
            "orientation": "h", "x": 0, "xanchor": "left",
            "entrywidthmode": "fraction", "entrywidth": 1 / LEGEND_COLUMNS[narrow],
            "yref": "paper", "y": (legend - 6 + SLIDER_PX * n) / inner,
            "yanchor": "top",
        }
        layout["sliders"] = [
            {
                "active": c.default,
                "x": 0.0,
                "len": 1.0,
                "y": SLIDER_PX * (n - k) / inner,
                "yanchor": "top",
                "pad": {"t": 4, "b": 0, "l": 8, "r": 8},
                "ticklen": 4,
                "currentvalue": {
                    "prefix": f"{c.label or c.name}: ",
                    "font": {"size": FONT_PX},
                    "xanchor": "left",
                    "offset": 4,
                },
                # the step labels are hidden (:meth:`html`'s style); small, they
                # take no height
                "font": {"size": 6},
                "steps": [
                    {"label": _label(v), "method": "skip", "args": []}
                    for v in c.values
                ],
            }
            for k, c in enumerate(self.controls)
        ]
        layout.update(self.states[self.default_key]["layout"])
        return layout

    def spec(self) -> dict:
        """Everything the page needs: the first state, its layouts (wide and
        narrow: the page picks by :data:`NARROW_MEDIA`), every state."""
        return {
            "data": self.states[self.default_key]["data"],
            "layout": self.figure_layout(),
            "narrow": self.figure_layout(narrow=True),
            "media": NARROW_MEDIA,
            "config": {"responsive": True, "displayModeBar": False},
            "states": self.states,
        }

    def html(self, mode: str | None = None, png: bytes | None = None) -> str:
        """The figure as one HTML fragment (a div, its data and the glue)."""
        mode = os.environ.get(MODE_ENV, "") if mode is None else mode
        script = SITE_SCRIPT if mode == "site" else NOTEBOOK_SCRIPT
        div = f"posenc-fig-{uuid.uuid4().hex[:12]}"
        png = base64.b64encode(self.png() if png is None else png).decode()
        spec = json.dumps(self.spec(), separators=(",", ":"))
        return (
            f'<div class="posenc-interactive" data-states="{len(self.states)}">'
            f"<style>#{div} .slider-labels{{display:none}}"
            ".posenc-interactive-static{display:none}"
            "@media print{.posenc-interactive-plot{display:none}"
            ".posenc-interactive-static{display:block;max-width:100%}}</style>"
            f'<div id="{div}" class="posenc-interactive-plot"></div>'
            f'<img class="posenc-interactive-static" alt="{html.escape(self.title)}"'
            f' src="data:image/png;base64,{png}"/>'
            f'<script type="application/json" id="{div}-spec">{spec}</script>'
            f"<script>{_GLUE % {'div': div, 'src': script}}</script></div>"
        )

    def png(self) -> bytes:
        """The first state drawn with matplotlib, as PNG bytes with the book's
        legibility metadata (:func:`posenc.book.plotting.figure_png`)."""
        import matplotlib as mpl
        import matplotlib.pyplot as plt

        from .plotting import STYLE, figure_png

        with mpl.rc_context(STYLE):
            first = self.states[self.default_key]["data"]
            fig = draw_static(first, self.figure_layout())
            try:
                return figure_png(fig)
            finally:
                plt.close(fig)

    def _repr_mimebundle_(self, include=None, exclude=None):
        png = self.png()  # drawn once: the HTML embeds it (print), the bundle (decks)
        return {
            "text/html": self.html(png=png),
            "image/png": base64.b64encode(png).decode(),
            "text/plain": f"<posenc figure with {len(self.states)} states>",
        }


def _label(value) -> str:
    """A slider value as the reader reads it: 500000.0 → "500,000"."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    big = isinstance(value, int) and abs(value) >= 10_000
    return f"{value:,}" if big else str(value)


def draw_static(data: list[dict], layout: dict):
    """A matplotlib Figure of plotly.js traces (scatter and heatmap), shapes (lines)
    and annotations: the static fallback of an :class:`Explorer`.

    Raises:
        ValueError: a trace type other than scatter or heatmap.
    """
    from matplotlib.patches import Circle

    from .plotting import figure

    fig, ax = figure()
    for trace in data:
        kind = trace.get("type", "scatter")
        if kind == "heatmap":
            image = ax.imshow(
                trace["z"], origin="lower", aspect="auto", cmap="viridis",
                vmin=trace.get("zmin"), vmax=trace.get("zmax"),
            )
            fig.colorbar(image, ax=ax)
            continue
        if kind != "scatter":
            raise ValueError(f"draw_static draws scatter and heatmap, got {kind!r}")
        mode = trace.get("mode", "lines")
        line, marker = trace.get("line", {}), trace.get("marker", {})
        ax.plot(
            trace["x"], trace["y"],
            drawstyle="steps-post" if line.get("shape") == "hv" else "default",
            linestyle={"dash": "--", "dot": ":"}.get(line.get("dash"), "-")
            if "lines" in mode else "none",
            marker="o" if "markers" in mode else None,
            color=line.get("color") or marker.get("color"),
            label=trace.get("name") if trace.get("showlegend", True) else None,
        )
    for shape in layout.get("shapes", []):
        color = shape.get("line", {}).get("color", "k")
        if shape.get("type") == "line" and shape["x0"] == shape["x1"]:
            ax.axvline(shape["x0"], color=color, linestyle="--")
        elif shape.get("type") == "circle":
            centre = ((shape["x0"] + shape["x1"]) / 2, (shape["y0"] + shape["y1"]) / 2)
            radius = (shape["x1"] - shape["x0"]) / 2
            ax.add_patch(Circle(centre, radius, fill=False, color=color))
    for note in layout.get("annotations", []):
        paper = note.get("xref") == "paper"
        ax.text(note["x"], note["y"], note["text"].replace("<br>", "\n"),
                transform=ax.transAxes if paper else ax.transData,
                ha="left" if paper else "center", va="bottom")
    for axis, name in (("xaxis", "x"), ("yaxis", "y")):
        spec = layout.get(axis, {})
        title = spec.get("title", {})
        getattr(ax, f"set_{name}label")(title.get("text", "") if isinstance(
            title, dict) else title)
        log = spec.get("type") == "log"
        if log:
            getattr(ax, f"set_{name}scale")("log")
        if "range" in spec:  # plotly gives a log axis's range in powers of ten
            low, high = spec["range"]
            limits = (10**low, 10**high) if log else (low, high)
            getattr(ax, f"set_{name}lim")(*limits)
    if layout.get("yaxis", {}).get("autorange") == "reversed":
        ax.invert_yaxis()
    if layout.get("yaxis", {}).get("scaleanchor") == "x":
        ax.set_aspect("equal")
    if layout.get("showlegend", True) and any(t.get("name") for t in data):
        ax.legend(loc="best")
    return fig


# Looks a state up and redraws it; computes nothing. %(div)s, %(src)s are filled in.
# The layout is the wide or the narrow one by the media query, and changes with it.
_GLUE = """(function(){
var id="%(div)s", src="%(src)s";
function go(){
 var gd=document.getElementById(id);
 var spec=JSON.parse(document.getElementById(id+"-spec").textContent);
 var mq=window.matchMedia(spec.media);
 function base(){return mq.matches ? spec.narrow : spec.layout;}
 function draw(active){
  var key=active.join(","), st=spec.states[key]; if(!st) return;
  var lay=JSON.parse(JSON.stringify(base()));
  lay.sliders.forEach(function(s, i){s.active=active[i];});
  Object.assign(lay, st.layout);
  return Plotly.react(gd, st.data, lay, spec.config);
 }
 function active(){return gd.layout.sliders.map(function(s){return s.active;});}
 Plotly.newPlot(gd, spec.data, base(), spec.config).then(function(){
  gd.on("plotly_sliderchange", function(){draw(active());});
  mq.addEventListener("change", function(){draw(active());});
  gd.setAttribute("data-posenc-drawn", "");
 });
}
if(window.Plotly){go();return;}
var s=document.querySelector("script[data-posenc-plotly]");
if(!s){s=document.createElement("script");s.src=src;
 s.setAttribute("data-posenc-plotly","");document.head.appendChild(s);}
s.addEventListener("load", go);
})();"""
