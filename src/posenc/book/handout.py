"""Lecture handouts: a built lecture deck printed to PDF, and its speaker notes as a
page of their own (issue 41).

Usage (from the repository root, after ``make lecture NAME=rope``)::

    python -m posenc.book.handout NAME [NAME ...]   # book/lectures/NAME.md
    python -m posenc.book.handout --all             # every book/lectures/*.md
    python -m posenc.book.handout --notes-only NAME # no browser needed

writes, beside the deck ``_build/html/lectures/NAME.html`` (:mod:`posenc.book.lecture`):

* ``NAME-notes.html`` (:func:`build_notes`): the lecture's title, then each section
  with its minutes, each slide with its heading (linked to the slide in the deck) and
  its speaker notes, Markdown rendered and ``{value}`` labels resolved as on the slide
  (:func:`posenc.book.lecture.render_slide`), math typeset by the site's MathJax; a
  plain page in the site's system font stack that reads on a 414 px phone.
* ``NAME.pdf`` (:func:`build_pdf`): Chromium's print of reveal.js's print view
  (``NAME.html?print-pdf``, reveal.js 4.6 ``js/controllers/print.js``), one slide per
  page of the deck's 1280 × 800 (:data:`~posenc.book.slide_figure.SLIDE_SIZE`), every
  fragment shown, speaker notes left out (``showNotes=false``: the notes page carries
  them). The deck is served over http on 127.0.0.1 with every other host unreachable,
  and printed once MathJax has typeset it and its explorers have drawn, by the site
  tests' browser helpers (``tests/site_goals.py``: ``serve``, ``launch``,
  ``open_page``) and Selenium's WebDriver print (``print_page``). It needs Debian's
  ``chromium`` and ``chromium-driver``; without them the PDF step says so and the
  command exits with status 3 (the notes page is written first).
"""

from __future__ import annotations

import base64
import html
import re
import sys
from pathlib import Path

from . import lecture as lec
from .slide_figure import SLIDE_SIZE

#: The repository, when run from its root (``make``), as posenc.book.lecture assumes.
ROOT = Path.cwd()
#: The site tests' browser helpers that print the PDF (tests/site_goals.py).
TESTS = ROOT / "tests"
#: reveal.js's print view, every fragment on its slide's one page, no speaker notes
#: (reveal.js reads its settings from the query: ``Util.getQueryHash``).
PRINT_QUERY = "print-pdf&showNotes=false&pdfSeparateFragments=false"
#: CSS px per cm (96 px to the inch): WebDriver's print takes the page size in cm.
PX_PER_CM = 96 / 2.54
#: What to install when the PDF step finds no browser.
INSTALL = (
    "install Debian's chromium and chromium-driver "
    "(apt-get install chromium chromium-driver), or build the notes page alone "
    "with --notes-only"
)


class HandoutError(RuntimeError):
    """A handout that cannot be made: the message says what is missing and what to
    do."""


class ChromiumMissing(HandoutError):
    """The PDF step found no Chromium, chromedriver or Selenium (:data:`INSTALL`)."""


# --- the notes page -------------------------------------------------------------------


def slide_notes_html(slide: lec.Slide, outputs: lec.Outputs) -> str:
    """The speaker notes of ``slide`` as HTML: Markdown and math rendered and labels
    resolved by :func:`posenc.book.lecture.render_slide`, as the deck's
    ``<aside class="notes">`` holds them.

    Raises:
        LectureError: a label is unknown or its chapter is not in the cache.
    """
    only_notes = lec.Slide(heading="", body="", notes=slide.notes, line=slide.line)
    section = lec.render_slide(only_notes, outputs)
    found = re.search(r'<aside class="notes">(.*)</aside>\s*</section>\s*\Z', section,
                      re.DOTALL)
    if found is None:  # render_slide's documented shape changed
        raise HandoutError(
            "posenc.book.lecture.render_slide no longer ends a slide with "
            '<aside class="notes">…</aside></section>: update slide_notes_html'
        )
    return found.group(1)


def notes_html(lecture: lec.Lecture, outputs: lec.Outputs) -> str:
    """The notes page of ``lecture`` (the module's docstring), as one HTML document
    that loads MathJax from the built site (``../_static/``), offline.

    Raises:
        LectureError: a label is unknown or its chapter is not in the cache.
    """
    name = html.escape(lecture.name)
    plan, parts = [], []
    number = 1  # the deck's and the PDF's flat slide number (1: the title slide)
    for h, section in enumerate(lecture.sections, start=1):  # deck slide 0: the title
        title = html.escape(section.title)
        plan.append(f'<li><a href="#section-{h}">{title}</a> '
                    f'<span class="posenc-minutes">{section.minutes} min</span></li>')
        slides = []
        for v, slide in enumerate(section.slides):
            number += 1
            slides.append(
                f'<article class="posenc-notes-slide" id="slide-{h}-{v}">\n'
                f'<h3><span class="posenc-slide-number">{number}</span> '
                f'<a href="{name}.html#/{h}/{v}">'
                f"{html.escape(slide.heading)}</a></h3>\n"
                f'<div class="posenc-notes">{slide_notes_html(slide, outputs)}</div>\n'
                "</article>"
            )
        parts.append(
            f'<section class="posenc-notes-section" id="section-{h}">\n'
            f'<h2>{title} <span class="posenc-minutes">{section.minutes} min</span>'
            "</h2>\n" + "\n".join(slides) + "\n</section>"
        )
    subtitle = (f'<p class="posenc-subtitle">{html.escape(lecture.subtitle)}</p>'
                if lecture.subtitle else "")
    return _NOTES_PAGE.format(
        title=html.escape(lecture.title), subtitle=subtitle, name=name,
        minutes=lecture.minutes, slides=len(lecture.slides), plan="\n".join(plan),
        sections="\n".join(parts),
    )


def build_notes(
    name: str, *, lectures=None, notebooks=None, cache_path=None, out=None
) -> Path:
    """Write ``<out>/<name>-notes.html`` (:func:`notes_html`) from
    ``<lectures>/<name>.md`` (defaults as :func:`posenc.book.lecture.build`: the
    book's lectures, chapters and execution cache, ``_build/html/lectures``).

    Raises:
        LectureError: no such lecture, an unknown label, or a chapter missing from the
            cache (build the book first).
    """
    lecture = lec.load(name, lectures)
    page = notes_html(lecture, lec.Outputs(notebooks, cache_path))
    out = Path(out or ROOT / lec.OUTPUT)
    out.mkdir(parents=True, exist_ok=True)
    target = out / f"{name}-notes.html"
    target.write_text(page)
    return target


# --- the PDF --------------------------------------------------------------------------


def _site_goals():
    """The site tests' browser helpers, tests/site_goals.py of the repository."""
    tests = TESTS
    if not (tests / "site_goals.py").exists():
        raise HandoutError(
            f"the PDF is printed with {tests / 'site_goals.py'} (the site tests' "
            "browser helpers): run from the repository's root"
        )
    if str(tests) not in sys.path:
        sys.path.insert(0, str(tests))
    import site_goals

    return site_goals


def _browser(site_goals):
    """Headless Chromium from :func:`site_goals.launch` at the deck's size.

    Raises:
        ChromiumMissing: no chromium, chromedriver or selenium."""
    chromium, driver = site_goals.chromium_paths()
    missing = [what for what, path in (("chromium", chromium), ("chromedriver", driver))
               if not path]
    try:
        import selenium.webdriver  # noqa: F401
    except ImportError:
        missing.append("selenium (in .venv: make .venv)")
    if missing:
        raise ChromiumMissing(
            f"the PDF needs a browser and {', '.join(missing)} was not found: {INSTALL}"
        )
    return site_goals.launch(window=SLIDE_SIZE)


# The print view once reveal.js has laid it out ('pdf-ready': its pages are appended in
# one go): each page's height and its slide's heading and content height.
_PAGES_JS = """
if (!document.documentElement.classList.contains('print-pdf')) return null;
const pages = Array.from(document.querySelectorAll('.reveal .slides .pdf-page'));
if (!pages.length) return null;
if (document.querySelector('.speaker-notes-pdf')) return 'notes';
return pages.map((p) => { const s = p.querySelector('section');
  return {height: p.offsetHeight, content: s ? s.scrollHeight : 0,
          heading: s ? ((s.querySelector('h1, h2') || {}).textContent || '').trim()
                     : ''};
});
"""


_LAST_PAGE_JS = """
const style = document.createElement('style');
style.textContent = 'html.print-pdf .reveal .slides .pdf-page:last-of-type '
  + '{page-break-after: avoid; break-after: avoid}';
document.head.appendChild(style);
"""


def _print_view(site_goals, driver, url: str, expected: int, timeout: float):
    """Open ``url`` (the print view) as the site tests open a page, wait for its pages,
    and refuse a view that would not print one slide per page."""
    from selenium.webdriver.support.wait import WebDriverWait

    site_goals.open_page(driver, url, timeout=timeout)  # MathJax, images, explorers
    # reveal.js 4.6 breaks after every page, the last too: Chromium then prints a blank
    # page at the end (reveal.js issue #3483, fixed after 4.6 by this same rule)
    driver.execute_script(_LAST_PAGE_JS)
    pages = WebDriverWait(driver, timeout, poll_frequency=0.1).until(
        lambda d: d.execute_script(_PAGES_JS), f"{url}: reveal.js made no print view")
    if pages == "notes":
        raise HandoutError(f"{url}: the print view shows the speaker notes (showNotes)")
    width, height = SLIDE_SIZE
    tall = [f"page {i + 1} {p['heading'][:50]!r}: {p['content']} px"
            for i, p in enumerate(pages)
            if p["height"] > height + 1 or p["content"] > height + 1]
    if tall:
        raise HandoutError(f"{url}: slides taller than the {width} × {height} page "
                           f"(they would be cut or spill over): {tall}")
    if len(pages) != expected:
        raise HandoutError(f"{url}: the print view has {len(pages)} pages for "
                           f"{expected} slides")
    errors = [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    if errors:
        raise HandoutError(f"{url}: the browser reported errors: {errors[:5]}")
    return pages


def print_options():
    """Selenium's ``PrintOptions`` for one slide per page: the page is the deck's
    :data:`~posenc.book.slide_figure.SLIDE_SIZE` (CSS px, in cm), no margins,
    backgrounds printed, nothing shrunk."""
    from selenium.webdriver.common.print_page_options import PrintOptions

    options = PrintOptions()
    options.page_width = SLIDE_SIZE[0] / PX_PER_CM
    options.page_height = SLIDE_SIZE[1] / PX_PER_CM
    options.margin_top = options.margin_bottom = 0
    options.margin_left = options.margin_right = 0
    options.background = True
    options.shrink_to_fit = False
    return options


def build_pdf(
    name: str, *, lectures=None, html_dir=None, out=None, timeout: float = 120
) -> Path:
    """Print the built deck ``<html_dir>/lectures/<name>.html`` to
    ``<out>/<name>.pdf`` (the module's docstring): one page per slide, the title
    slide first, each page :data:`~posenc.book.slide_figure.SLIDE_SIZE` CSS px.
    Defaults: the book's lectures, ``_build/html``, ``<html_dir>/lectures``.

    Raises:
        ChromiumMissing: no chromium, chromedriver or selenium (:data:`INSTALL`).
        HandoutError: no built deck (``make lecture NAME=<name>``); a slide taller
            than the page; a page count other than the lecture's slides and its title;
            an error in the browser's console.
        LectureError: no such lecture source.
    """
    expected = 1 + len(lec.load(name, lectures).slides)  # and the title slide
    html_dir = Path(html_dir or ROOT / "_build" / "html")
    deck = html_dir / "lectures" / f"{name}.html"
    if not deck.exists():
        raise HandoutError(f"no deck {deck}: build it first (make lecture NAME={name})")
    site_goals = _site_goals()
    driver = _browser(site_goals)
    try:
        with site_goals.serve(html_dir) as base:
            url = f"{base}lectures/{name}.html?{PRINT_QUERY}"
            _print_view(site_goals, driver, url, expected, timeout)
            pdf = base64.b64decode(driver.print_page(print_options()))
    finally:
        driver.quit()
    out = Path(out or html_dir / "lectures")
    out.mkdir(parents=True, exist_ok=True)
    target = out / f"{name}.pdf"
    target.write_bytes(pdf)
    return target


def main(argv: list[str] | None = None) -> int:
    names, args = lec.lecture_command(
        __doc__, argv, notes_only="only the notes page (no browser)")
    for name in names:
        try:
            print(f"notes {name}: {build_notes(name)}")
            if not args.notes_only:
                print(f"pdf {name}: {build_pdf(name)}")
        except ChromiumMissing as error:
            print(f"error: {error}", file=sys.stderr)
            return 3
        except (lec.LectureError, HandoutError) as error:
            print(f"error: {error}", file=sys.stderr)
            return 1
    return 0


_NOTES_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>{title}: speaker notes</title>
<meta name="viewport" content="width=device-width, initial-scale=1.0">
<link rel="icon" href="../_static/favicon.svg">
<script>
window.MathJax = {{tex: {{inlineMath: [["\\\\(", "\\\\)"]],
  displayMath: [["\\\\[", "\\\\]"]], tags: "ams"}}}};
</script>
<script defer src="../_static/mathjax/es5/tex-chtml.js"></script>
<style>
body {{ margin: 0; color: #222; background: #fff; line-height: 1.6;
  font-family: system-ui, sans-serif, "Apple Color Emoji", "Segoe UI Emoji",
  "Segoe UI Symbol", "Noto Color Emoji"; font-size: 17px; }}
main {{ max-width: 46rem; margin: 0 auto; padding: 1rem 1.25rem 3rem;
  overflow-wrap: break-word; }}
h1 {{ font-size: 1.9rem; line-height: 1.2; margin: 1rem 0 0.25rem; }}
h2 {{ font-size: 1.4rem; margin: 2.5rem 0 0.5rem; padding-top: 0.75rem;
  border-top: 2px solid #ccc; }}
h3 {{ font-size: 1.1rem; margin: 1.5rem 0 0.25rem; }}
h3 a {{ color: inherit; text-decoration: none; }}
h3 a:hover {{ text-decoration: underline; }}
.posenc-subtitle {{ color: #555; margin-top: 0; }}
.posenc-minutes {{ color: #555; font-weight: normal; font-size: 0.95rem;
  white-space: nowrap; }}
.posenc-slide-number {{ color: #555; font-weight: normal; margin-right: 0.35rem;
  font-variant-numeric: tabular-nums; }}
.posenc-notes p {{ margin: 0.4rem 0; }}
.posenc-value {{ font-variant-numeric: tabular-nums; }}
code, pre {{ font-family: ui-monospace, "Cascadia Code", "Source Code Pro", Menlo,
  Consolas, "DejaVu Sans Mono", monospace; font-size: 0.9em; }}
pre, mjx-container[display="true"] {{ overflow-x: auto; overflow-y: hidden;
  max-width: 100%; }}
img {{ max-width: 100%; height: auto; }}
</style>
</head><body><main>
<header>
<h1>{title}</h1>
{subtitle}
<p>Speaker notes: {minutes} minutes, {slides} slides.
<a href="{name}.html">The deck</a> · <a href="{name}.pdf">the slides as PDF</a></p>
<nav aria-label="Sections"><ol>
{plan}
</ol></nav>
</header>
{sections}
</main></body></html>
"""


if __name__ == "__main__":
    sys.exit(main())
