"""Lecture decks: a lecture source of its own words, the book's figures and values
pulled in by label from the executed chapters, rendered as a reveal.js deck.

Usage::

    python -m posenc.book.lecture NAME [NAME ...]   # book/lectures/NAME.md
    python -m posenc.book.lecture --all

writes ``_build/html/lectures/NAME.html`` (``make lecture NAME=rope``; ``make book``
builds every ``book/lectures/*.md``). The deck loads reveal.js, MathJax and plotly.js
from the built site (``../_static/``), so it works offline, once the book is built.

The source format (issue 41)::

    ---
    title: ...
    subtitle: ...
    minutes: 90
    names: [ALiBi-2, ...]   # optional: this lecture's proper names with digits
    ---
    # A section {minutes=10}      a vertical stack of slides; minutes add up
    ## A heading                  one slide
    visible words, {value}`rope:rope-label`, {figure}`rope:rope-label`,
    {explorer}`rope_rotation`, $math$, a fenced code block,
    [words shown on the next click]{.fragment}, or {.fragment} on the
    line before a paragraph or list that is shown on the next click
    Note:
    the lecturer's words (speaker notes)

``{value}`` is the text/plain of the output a chapter glued with ``myst_nb.glue``;
``{figure}`` the slide drawing that :func:`posenc.book.plotting.glue_figure` stored
(:data:`~posenc.book.plotting.SLIDE_MIME`); ``{explorer}`` the live figure
``posenc.book.explorers.<name>()`` with its precomputed states. The outputs are those
the book build stored in its execution cache (``_build/.jupyter_cache``), read by
:func:`executed_notebook`, as the per-chapter decks read them.

:func:`problems` lists what breaks the lecture rules (minutes, heading and notes,
words, code lines, numbers only from values, no reference to the page); the build
refuses a lecture with problems.
"""

from __future__ import annotations

import ast
import base64
import html
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

#: The repository, when run from its root (``make``), as posenc.book.execute assumes.
ROOT = Path.cwd()
#: Where the lecture sources are, and where the decks go (beside the site's pages).
LECTURES = Path("book") / "lectures"
OUTPUT = Path("_build") / "html" / "lectures"
#: The most visible words on a slide (heading, figures and explorers aside), and the
#: most lines of a code block (issue 41).
MAX_WORDS = 40
MAX_CODE_LINES = 8
#: Names whose digits are not numbers to take from a value.
ALLOWED_NAMES = (
    "Llama 3.1", "Llama 3", "Llama 2", "Llama 4", "Qwen3", "Qwen2.5", "Qwen2", "2D",
    "3D", "1D", "GPT-2", "GPT-NeoX", "T5", "bf16", "bfloat16", "float16", "float32",
    "float64", "fp16", "fp32", "fp64", "RoPE-2D", "Phi-3", "GLM-4", "int8", "Gemma 3",
    "Mistral 7B", "SmolLM2-135M-Instruct", "SmolLM2", "SmolLM3",
)
#: What refers to the book's page rather than to a slide (case-insensitive regular
#: expressions): "below" and "above" only where they point at the document ("the
#: figure below", "shown above", "(below)"), not where they compare ("wavelengths
#: below L", "above the dashed line").
PAGE_REFERENCES = (
    r"\bdropdown\b", r"\bfolded\b", r"\bthe last exercise\b", r"\bthis chapter\b",
    r"\bthis page\b", r"\b(see|shown|shows|listed|given|as|defined) "
    r"(below|above)\b",
    r"\bthe (figure|table|cell|code|section|list|exercise|example|paragraph|output|"
    r"plot|listing|equation|formula) (below|above)\b",
    r"\((below|above)\)",
)
#: Height of an explorer on a slide, CSS px, and its text size (the decks' floor is
#: 18 px: posenc.book.slide_figure.SLIDE_MIN_TEXT_PX).
EXPLORER_PX = 600
EXPLORER_FONT_PX = 18
#: The plot's share of an explorer's width on a slide; the controls take the rest.
EXPLORER_PLOT_SHARE = 0.55

_ROLE = re.compile(r"\{(?P<role>value|figure|explorer)\}`(?P<target>[^`]+)`")
_SECTION = re.compile(r"^# (?P<title>.+?)\s*\{minutes=(?P<minutes>\d+)\}\s*$")
_LABEL = re.compile(r"^(?P<notebook>[a-z0-9_]+):(?P<label>[a-z0-9]+(-[a-z0-9]+)*)$")


class LectureError(ValueError):
    """A lecture source that cannot be built: the message names the line or label."""


@dataclass
class Slide:
    heading: str
    body: str = ""
    notes: str = ""
    line: int = 0


@dataclass
class Section:
    title: str
    minutes: int
    line: int = 0
    slides: list[Slide] = field(default_factory=list)


@dataclass
class Lecture:
    name: str
    title: str
    subtitle: str
    minutes: int
    sections: list[Section]
    names: tuple[str, ...] = ()

    @property
    def slides(self) -> list[Slide]:
        return [s for section in self.sections for s in section.slides]


def parse(text: str, name: str = "lecture") -> Lecture:
    """A lecture source (the module's format) as a :class:`Lecture`.

    Raises:
        LectureError: no front matter with ``title`` and ``minutes``; a slide before
            the first section; a section without ``{minutes=N}``; a heading deeper
            than ``##``.
    """
    import yaml

    match = re.match(r"^---\n(?P<front>.*?)\n---\n", text, re.S)
    if not match:
        raise LectureError(f"{name}: no front matter (--- title:, minutes: ---)")
    front = yaml.safe_load(match.group("front")) or {}
    for key in ("title", "minutes"):
        if key not in front:
            raise LectureError(f"{name}: the front matter has no {key!r}")
    offset = text[: match.end()].count("\n")
    sections: list[Section] = []
    slide: Slide | None = None
    in_notes, fence = False, ""
    for number, line in enumerate(text[match.end() :].split("\n"), start=offset + 1):
        if fence:
            fence = "" if line.strip() == fence else fence
        elif re.match(r"^(`{3,}|~{3,})", line.strip()):
            fence = re.match(r"^(`{3,}|~{3,})", line.strip()).group(1)
        elif line.startswith("# "):
            found = _SECTION.match(line)
            if not found:
                raise LectureError(
                    f"{name}:{number}: a section needs its minutes: "
                    f"'# Title {{minutes=N}}', got {line!r}"
                )
            sections.append(Section(found["title"], int(found["minutes"]), number))
            slide, in_notes = None, False
            continue
        elif line.startswith("## "):
            if not sections:
                raise LectureError(f"{name}:{number}: a slide before the first section")
            slide = Slide(line[3:].strip(), line=number)
            sections[-1].slides.append(slide)
            in_notes = False
            continue
        elif re.match(r"^#{3,} ", line):
            raise LectureError(
                f"{name}:{number}: one heading per slide ('## '), got {line!r}"
            )
        elif line.strip() == "Note:" and slide is not None:
            in_notes = True
            continue
        if slide is None:
            if line.strip():
                raise LectureError(f"{name}:{number}: text outside a slide: {line!r}")
            continue
        if in_notes:
            slide.notes += line + "\n"
        else:
            slide.body += line + "\n"
    for s in (s for section in sections for s in section.slides):
        s.body, s.notes = s.body.strip("\n"), s.notes.strip()
    return Lecture(
        name, str(front["title"]), str(front.get("subtitle", "")),
        int(front["minutes"]), sections, tuple(front.get("names") or ()),
    )


def load(name: str, lectures: Path | None = None) -> Lecture:
    """``book/lectures/<name>.md`` parsed (:func:`parse`)."""
    path = (lectures or ROOT / LECTURES) / f"{name}.md"
    if not path.exists():
        raise LectureError(f"no lecture source {path}")
    return parse(path.read_text(), name)


# --- the executed chapters --------------------------------------------------------


def executed_notebook(path, cache_path=None):
    """The notebook at ``path`` with the outputs the book build stored for it in its
    execution cache (jupyter-cache; ``_config.yml``'s ``execute.cache``, by default
    ``_build/.jupyter_cache``), matched by its code as myst-nb matches it.

    Raises:
        LookupError: the cache has no execution of the notebook's current code (the
            message says to build the book first).
    """
    import nbformat

    cache_path = Path(cache_path or ROOT / "_build" / ".jupyter_cache")
    try:
        return merged_outputs(nbformat.read(str(path), as_version=4), cache_path)
    except LookupError:
        raise LookupError(
            f"{path} has no outputs for its current code in {cache_path}: build the "
            "book first (make book)"
        ) from None


def merged_outputs(nb, cache_path):
    """``nb`` (a NotebookNode) with the outputs jupyter-cache holds for its code in
    ``cache_path`` (what myst-nb's cache mode shows; also the per-chapter decks',
    book/_slides/posenc_slides.py).

    Raises:
        LookupError: the cache has no execution of this code.
    """
    from jupyter_cache import get_cache

    try:
        _, merged = get_cache(str(cache_path)).merge_match_into_notebook(nb)
    except KeyError:
        raise LookupError(f"no outputs in {cache_path} for this code") from None
    return merged


_SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def readable_number(text: str) -> str:
    """A glued number as a slide says it: an integer of five digits or more with
    thousands separators (131072 → 131,072), a float in Python's exponent form as a
    power of ten (5e-06 → 5 × 10⁻⁶, 1.5e-05 → 1.5 × 10⁻⁵); anything else unchanged."""
    if re.fullmatch(r"-?\d{5,}", text):
        return f"{int(text):,}"
    match = re.fullmatch(r"(-?\d+(?:\.\d+)?)e([+-]?\d+)", text)
    if match:
        exponent = str(int(match.group(2))).translate(_SUPERSCRIPT)
        return f"{match.group(1)} × 10{exponent}"
    return text


class Outputs:
    """The glued outputs of the executed chapters, by ``notebook:label``, each chapter
    read once from the execution cache (:func:`executed_notebook`)."""

    def __init__(self, notebooks: Path | None = None, cache_path=None):
        self.notebooks = notebooks or ROOT / "book"
        self.cache_path = cache_path
        self._glued: dict[str, dict] = {}

    def glued(self, notebook: str) -> dict:
        if notebook not in self._glued:
            path = self.notebooks / f"{notebook}.ipynb"
            if not path.exists():
                raise LectureError(f"no notebook {path} (the label's part before ':')")
            try:
                nb = executed_notebook(path, self.cache_path)
            except LookupError as error:
                raise LectureError(str(error)) from None
            found = {}
            for cell in nb.cells:
                for output in cell.get("outputs", []):
                    meta = output.get("metadata", {}).get("scrapbook")
                    if meta:
                        cut = len(meta.get("mime_prefix", ""))
                        data = {k[cut:]: v for k, v in output.get("data", {}).items()}
                        found[meta["name"]] = data
            self._glued[notebook] = found
        return self._glued[notebook]

    def get(self, target: str, role: str) -> dict:
        match = _LABEL.match(target)
        if not match:
            raise LectureError(
                f"{{{role}}}`{target}`: a label is 'notebook:kebab-case-label', "
                "e.g. rope:rope-max-error"
            )
        notebook, label = match["notebook"], match["label"]
        glued = self.glued(notebook)
        if label not in glued:
            raise LectureError(
                f"{{{role}}}`{target}`: notebook book/{notebook}.ipynb glues no label "
                f"{label!r} (it glues {len(glued)}: {', '.join(sorted(glued)[:8])}"
                f"{' …' if len(glued) > 8 else ''}); glue it in the chapter "
                "(myst_nb.glue or posenc.book.plotting.glue_figure) and build the book"
            )
        return glued[label]

    def value(self, target: str) -> str:
        data = self.get(target, "value")
        text = str(data.get("text/plain", ""))
        if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
            return ast.literal_eval(text)  # a string glued as the chapter wrote it
        return readable_number(text)

    def figure(self, target: str) -> bytes:
        from .plotting import SLIDE_MIME

        data = self.get(target, "figure")
        if SLIDE_MIME not in data:
            raise LectureError(
                f"{{figure}}`{target}` has no slide drawing ({SLIDE_MIME}): glue it "
                "with posenc.book.plotting.glue_figure, not myst_nb.glue"
            )
        return base64.b64decode(data[SLIDE_MIME])


# --- rendering ------------------------------------------------------------------------


def _markdown():
    from markdown_it import MarkdownIt
    from mdit_py_plugins.attrs import attrs_block_plugin, attrs_plugin
    from mdit_py_plugins.dollarmath import dollarmath_plugin

    def math(content: str, options) -> str:
        display = options.get("display_mode")
        left, right = ("\\[", "\\]") if display else ("\\(", "\\)")
        return html.escape(f"{left}{content}{right}", quote=False)

    # fragments (reveal.js's steps within a slide): `[words]{.fragment}` shows the words
    # on the next click, `{.fragment}` on the line before a paragraph or list shows it
    return (
        MarkdownIt("commonmark").enable("table")
        .use(dollarmath_plugin, renderer=math)
        .use(attrs_plugin, spans=True).use(attrs_block_plugin)
    )


def explorer_html(name: str) -> str:
    """The explorer ``posenc.book.explorers.<name>()`` as a slide shows it: its
    precomputed states and the page's script (:mod:`posenc.book.interactive`, plotly.js
    from the built site), :data:`EXPLORER_PX` tall, every text at least
    :data:`EXPLORER_FONT_PX`."""
    from . import explorers, interactive

    make = getattr(explorers, name, None)
    if not callable(make) or name.startswith("_"):
        raise LectureError(
            f"{{explorer}}`{name}`: posenc.book.explorers has no {name}()"
        )
    explorer = make()
    spec = explorer.spec()
    spec["layout"] = _slide_layout(spec["layout"])
    spec["narrow"] = spec["layout"]  # a deck is never a phone
    div = f"posenc-fig-{name}"
    glue = interactive._GLUE % {"div": div, "src": interactive.SITE_SCRIPT}
    data = json.dumps(spec, separators=(",", ":")).replace("</", "<\\/")
    return (
        f'<div class="posenc-interactive" data-states="{len(explorer.states)}">'
        f"<style>#{div} .slider-labels{{display:none}}</style>"
        f'<div id="{div}" class="posenc-interactive-plot"></div>'
        f'<script type="application/json" id="{div}-spec">{data}</script>'
        f"<script>{glue}</script></div>"
    )


def _slide_layout(layout: dict) -> dict:
    """A page layout of :meth:`Explorer.figure_layout` at slide size, in two columns:
    the plot on the left (:data:`EXPLORER_PLOT_SHARE` of the width, its full height
    but the x-axis title), the sliders stacked from the top of the right column and the
    legend at its foot, one entry per line, so that nothing is squeezed or overlaps.
    Every font is at least :data:`EXPLORER_FONT_PX` (the hidden step labels aside)."""
    layout = json.loads(json.dumps(layout))
    k = EXPLORER_FONT_PX / layout["font"]["size"]

    def grow(node):
        if isinstance(node, dict):
            font = node.get("font")
            if isinstance(font, dict) and font.get("size", 99) > 8:
                font["size"] = max(EXPLORER_FONT_PX, round(font["size"] * k))
            for value in node.values():
                grow(value)
        elif isinstance(node, list):
            for value in node:
                grow(value)

    grow(layout)
    share, right = EXPLORER_PLOT_SHARE, EXPLORER_PLOT_SHARE + 0.06
    top = round(layout["margin"]["t"] * k)
    layout["margin"] = {"l": round(64 * k), "r": 16, "t": top, "b": 8}
    layout["height"] = EXPLORER_PX
    inner = EXPLORER_PX - top - 8
    axis_title = 2.6 * EXPLORER_FONT_PX / inner  # tick labels and the x-axis title
    for key in [k_ for k_ in layout if k_.startswith("xaxis")]:
        lo, hi = layout[key].get("domain", [0, 1])
        layout[key]["domain"] = [lo * share, hi * share]
    for key in [k_ for k_ in layout if k_.startswith("yaxis")]:
        layout[key]["domain"] = [axis_title, 1]
    sliders = layout.get("sliders", [])
    step = min(0.25, 0.72 / max(len(sliders), 1))
    for i, slider in enumerate(sliders):
        slider.update(x=right, len=1 - right, y=1 - i * step, yanchor="top")
    layout["legend"] = {**layout.get("legend", {}), "orientation": "v", "x": right,
                        "xanchor": "left", "y": 0, "yanchor": "bottom",
                        "entrywidthmode": "pixels", "entrywidth": 0}
    return layout


def _values_class(text: str) -> str:
    return f'<span class="posenc-value">{html.escape(text)}</span>'


def render_slide(slide: Slide, outputs: Outputs, md=None) -> str:
    """One slide as a reveal.js ``<section>``: its heading, its body (labels
    resolved, Markdown and math rendered) and ``<aside class="notes">``."""
    from .slide_figure import slide_css_width

    md = md or _markdown()
    blocks: dict[str, str] = {}

    def role(match: re.Match) -> str:
        kind, target = match["role"], match["target"].strip()
        key = f"POSENCBLOCK{len(blocks)}X"
        if kind == "value":
            blocks[key] = _values_class(outputs.value(target))
        elif kind == "figure":
            png = outputs.figure(target)
            uri = "data:image/png;base64," + base64.b64encode(png).decode()
            width = round(slide_css_width(png))
            blocks[key] = (
                f'<img class="posenc-slide-figure" src="{uri}" width="{width}" '
                f'alt="{html.escape(target)}"/>'
            )
        else:
            blocks[key] = explorer_html(target)
        return key

    def fill(text: str) -> str:
        rendered = md.render(_ROLE.sub(role, text))
        for key, value in blocks.items():
            rendered = rendered.replace(f"<p>{key}</p>", value).replace(key, value)
        return rendered

    body, notes = fill(slide.body), fill(slide.notes)
    return (
        f"<section>\n<h2>{html.escape(slide.heading)}</h2>\n{body}"
        f'<aside class="notes">{notes}</aside>\n</section>'
    )


def render(lecture: Lecture, outputs: Outputs) -> str:
    """The deck's HTML: a title slide, then each section a vertical stack."""
    md = _markdown()
    plan = "".join(
        f"<li>{html.escape(s.title)}: {s.minutes} min</li>" for s in lecture.sections
    )
    title = (
        f'<section class="posenc-title"><h1>{html.escape(lecture.title)}</h1>'
        f'<p class="posenc-subtitle">{html.escape(lecture.subtitle)}</p>'
        '<p class="posenc-subtitle">posenc · Positional encodings for transformers</p>'
        f'<aside class="notes"><p>The plan:</p><ul>{plan}</ul></aside></section>'
    )
    stacks = [title]
    for section in lecture.sections:
        slides = "\n".join(render_slide(s, outputs, md) for s in section.slides)
        stacks.append(f'<section data-posenc-section="{html.escape(section.title)}">'
                      f"\n{slides}\n</section>")
    return _PAGE.format(title=html.escape(lecture.title), slides="\n".join(stacks))


# --- the lecture rules ----------------------------------------------------------------


def visible_text(fragment: str) -> str:
    """The words a slide body shows: its HTML without tags, math, code, figures,
    explorers and notes."""
    for pattern in (
        r'<aside class="notes">.*?</aside>', r"<pre>.*?</pre>",
        r'<div class="posenc-interactive".*?</script></div>', r"\\\(.*?\\\)",
        r"\\\[.*?\\\]", r"<code>.*?</code>", r"<[^>]+>",
    ):
        fragment = re.sub(pattern, " ", fragment, flags=re.S)
    return html.unescape(fragment)


def stray_numbers(text: str, names=()) -> list[str]:
    """The numbers in ``text`` (a slide's visible text, values removed) that are not
    part of an :data:`ALLOWED_NAMES` name or one of ``names`` (a lecture's own)."""
    for name in sorted((*ALLOWED_NAMES, *names), key=len, reverse=True):
        text = re.sub(rf"(?<![\w.]){re.escape(name)}(?![\w])", " ", text)
    return re.findall(r"\d[\d,.]*", text)


def problems(lecture: Lecture, outputs: Outputs | None = None) -> list[str]:
    """Every rule of issue 41 the lecture breaks, in words (empty when none): the
    sections' minutes add up to the front matter's; every slide has a heading and
    speaker notes, at most :data:`MAX_WORDS` visible words, no code block over
    :data:`MAX_CODE_LINES` lines; every number shown comes from a ``{value}`` (math,
    code and :data:`ALLOWED_NAMES` aside); nothing matches :data:`PAGE_REFERENCES`.
    With ``outputs``, the checks run on the rendered slides (values filled in)."""
    out = []
    total = sum(s.minutes for s in lecture.sections)
    if total != lecture.minutes:
        out.append(f"the sections' minutes add up to {total}, not {lecture.minutes}")
    md = _markdown()
    for slide in lecture.slides:
        where = f"line {slide.line} {slide.heading!r}"
        if not slide.heading:
            out.append(f"{where}: no heading")
        if not slide.notes.strip():
            out.append(f"{where}: no speaker notes (a 'Note:' block)")
        for fence in re.findall(r"^(```|~~~)[^\n]*\n(.*?)^\1", slide.body, re.M | re.S):
            lines = fence[1].rstrip("\n").count("\n") + 1
            if lines > MAX_CODE_LINES:
                out.append(f"{where}: a code block of {lines} lines (at most 8)")
        shown = _ROLE.sub(" ", slide.body)
        text = visible_text(md.render(shown))
        words = len(text.split())
        if words > MAX_WORDS:
            out.append(f"{where}: {words} visible words (at most {MAX_WORDS})")
        numbers = stray_numbers(text + " " + slide.heading, lecture.names)
        if numbers:
            out.append(f"{where}: numbers not from a {{value}}: {numbers}")
        for said in (text + " " + slide.heading, slide.notes):
            for pattern in PAGE_REFERENCES:
                for found in re.finditer(pattern, " ".join(said.split()), re.I):
                    out.append(f"{where}: refers to the page ({found.group(0)!r})")
        if outputs is not None:
            render_slide(slide, outputs, md)  # every label resolves
    return out


def build(
    name: str, *, lectures=None, notebooks=None, cache_path=None, out=None
) -> Path:
    """Build ``<lectures>/<name>.md`` into ``<out>/<name>.html`` (defaults: the
    module's :data:`LECTURES`, ``book/``, the book's cache, :data:`OUTPUT`).

    Raises:
        LectureError: the source breaks a rule (:func:`problems`, all listed), a label
            is unknown, or the cache lacks a chapter (build the book first).
    """
    lecture = load(name, lectures)
    outputs = Outputs(notebooks, cache_path)
    found = problems(lecture)
    if found:
        raise LectureError(f"lecture {name}: " + "; ".join(found))
    deck = render(lecture, outputs)
    out = Path(out or ROOT / OUTPUT)
    out.mkdir(parents=True, exist_ok=True)
    target = out / f"{name}.html"
    target.write_text(deck)
    return target


def lecture_command(description: str, argv: list[str] | None, **options):
    """The command line of the lecture tools: lecture names, or ``--all`` for every
    ``book/lectures/*.md``, plus the flags in ``options`` (name → help). Returns
    ``(names, args)``; exits with a usage message when no lecture is named."""
    import argparse

    parser = argparse.ArgumentParser(description=description.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="lectures of book/lectures (NAME.md)")
    parser.add_argument("--all", action="store_true", help="every book/lectures/*.md")
    for flag, text in options.items():
        parser.add_argument("--" + flag.replace("_", "-"), action="store_true",
                            help=text)
    args = parser.parse_args(argv)
    names = args.names
    if args.all:
        names = sorted(p.stem for p in (ROOT / LECTURES).glob("*.md"))
    if not names:
        parser.error("name a lecture, or --all")
    return names, args


def main(argv: list[str] | None = None) -> int:
    names, _ = lecture_command(__doc__, argv)
    for name in names:
        try:
            print(f"lecture {name}: {build(name)}")
        except LectureError as error:
            print(f"error: {error}", file=sys.stderr)
            return 1
    return 0


_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>{title}</title>
<meta name="viewport" content="width=device-width, initial-scale=1.0">
<link rel="icon" href="../_static/favicon.svg">
<link rel="stylesheet" href="../_static/reveal.js/dist/reveal.css">
<link rel="stylesheet" href="../_static/reveal.js/dist/theme/white.css">
<script>
window.MathJax = {{tex: {{inlineMath: [["\\\\(", "\\\\)"]],
  displayMath: [["\\\\[", "\\\\]"]], tags: "ams"}},
  options: {{ignoreHtmlClass: "tex2jax_ignore"}}}};
</script>
<script defer src="../_static/mathjax/es5/tex-chtml.js"></script>
<style>
.reveal {{ font-size: 30px; }}
.reveal h1 {{ font-size: 52px; text-transform: none; }}
.reveal h2 {{ font-size: 40px; text-transform: none; margin-bottom: 16px; }}
.reveal .slides section {{ text-align: left; }}
/* a slide (not the stack around a section's slides) keeps its text off the edges */
.reveal .slides section:not(.stack) {{ padding: 20px 56px; box-sizing: border-box; }}
/* the handout (reveal.js's print view, whose own rule sets none): the sides only */
html.print-pdf .reveal .slides section:not(.stack) {{ padding: 0 56px !important; }}
.reveal .slides section.posenc-title {{ text-align: center; }}
.reveal .posenc-subtitle {{ color: #444; font-size: 26px; }}
.reveal pre {{ width: 100%; font-size: 22px; box-shadow: none; }}
.reveal pre code {{ max-height: none; padding: 12px; }}
.reveal img.posenc-slide-figure {{ display: block; margin: 0 auto; max-width: none;
  max-height: none; border: 0; }}
.reveal .slide-number {{ font-size: 18px; }}
.reveal .posenc-interactive, .reveal .posenc-interactive-plot {{ width: 1168px; }}
.reveal ul {{ display: block; }}
.reveal table {{ margin-bottom: 24px; }}
</style>
</head><body>
<div class="reveal"><div class="slides">
{slides}
</div></div>
<script src="../_static/reveal.js/dist/reveal.js"></script>
<script src="../_static/reveal.js/plugin/notes/notes.js"></script>
<script>
Reveal.initialize({{hash: true, center: false, width: 1280, height: 800, margin: 0,
  controls: false,  // keys, a swipe or Esc move a lecture on: no arrows over text
  // one flat count, as the PDF's pages and the notes page number the slides
  minScale: 0.2, maxScale: 2.0, slideNumber: "c", transition: "slide",
  plugins: [RevealNotes]}});
</script>
</body></html>
"""


if __name__ == "__main__":
    sys.exit(main())
