"""The reader's goals for every page of the built site, measured in headless Chromium.

Used by tests/test_site.py (which asserts them on every page and deck) and runnable on
its own to print the measurements while writing a chapter::

    .venv/bin/python tests/site_goals.py                 # every page of _toc.yml
    .venv/bin/python tests/site_goals.py book/rope ...   # some pages
    .venv/bin/python tests/site_goals.py --decks         # and every deck's slides
    .venv/bin/python tests/site_goals.py --build book/rope book/alibi

``--build`` is the writer's loop: it executes the named pages (``python -m
posenc.book.execute``, only those), builds a site of the introduction and those pages alone
into ``_build/preview/<pages>/html`` (with their decks), and measures it there, without
touching ``_build/html`` or executing any other page.

What is measured (a page as a reader first sees it: folded blocks closed):

* ``screens``: the page's height in screens of a 1280 × 900 window;
* ``dense``: paragraphs (and list items) of the visible prose that quote three or more
  bracketed intervals, or twelve or more decimal numbers — numbers belong in tables and
  folded detail, sentences say one thing in words;
* ``code_lines``: lines of code cells shown unfolded (the package's source shown by
  ``literalinclude`` is not a code cell and does not count);
* ``min_text_px``: the smallest figure text as displayed at 1280 px (at least
  :data:`DESKTOP_MIN_TEXT_PX`), from the font size and dpi that :mod:`posenc.book.plotting`
  writes into every figure's PNG and the width the browser shows it at (a folded figure at the
  width it would have when opened); the PNG is the one the browser chose (``currentSrc``: a
  ``<picture>`` serves a narrow drawing to a phone), a file of the site or a ``data:`` URI;
* at 414 × 896, a phone, the page loaded at that width: ``phone_min_text_px``, the same at
  that width (at least :data:`~posenc.book.plotting.MIN_TEXT_PX`); ``phone_overflow``, whether
  the page is wider than the screen; ``clipped``, every text block, table, code block,
  formula, image or scrolling box whose edge lies beyond the visible box of the ancestor that
  clips it, where that ancestor does not scroll (text or a formula cut off); ``uncued``, every
  box that scrolls sideways (wider content than its box) without the cue that more is off to
  the side (book/_assets/posenc.css: edge shadows, a ``local`` background); ``widest``, the
  widest such element (its content's width), and ``widest_not_code``, the widest but code; ``explorers``, each plotly figure's height (at most
  :data:`MAX_EXPLORER_PX`) and whether its legend overlaps the plot or a slider;
* ``words`` and ``minutes``: the visible prose, read at 200 words a minute;
* for a deck, every slide whose content is taller than the slide (1280 × 800).

Every page is read only once it has loaded (:func:`open_page`): the new document, not the one
before it, complete, with MathJax's first typesetting done, every image loaded (lazy ones
too), the fonts ready and every plotly figure drawn. ``POSENC_SITE_DELAY`` (seconds) makes
:func:`serve` answer each page's HTML that much later, the first half at once: a slow server,
the way a busy machine is one (tests/test_site.py runs a page check with it).
"""

from __future__ import annotations

import argparse
import base64
import functools
import hashlib
import http.server
import json
import os
import re
import shutil
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import unquote, urljoin, urlparse

ROOT = Path(__file__).resolve().parents[1]
HTML = ROOT / "_build" / "html"
sys.path.insert(0, str(ROOT / "src"))

from posenc.book.plotting import MIN_TEXT_PX, displayed_text_px, png_text_metadata  # noqa: E402

SCREEN = (1280, 900)
PHONE_WIDTH = 414
PHONE = (PHONE_WIDTH, 896)
#: Figure text at 1280 px, CSS px (issue 39); at 414 px the floor is plotting.MIN_TEXT_PX.
DESKTOP_MIN_TEXT_PX = 12.0
#: The tallest a figure a reader moves may be on a phone, CSS px (posenc.book.interactive).
MAX_EXPLORER_PX = 700
#: The environment variable that delays :func:`serve`'s pages (the module's docstring).
DELAY_ENV = "POSENC_SITE_DELAY"
MAX_SCREENS = 25
MAX_CODE_LINES = 120
MAX_INTERVALS = 2  # a paragraph with more is dense
MAX_DECIMALS = 11
WORDS_PER_MINUTE = 200
DECK_SIZE = (1280, 800)

INTERVAL = re.compile(r"\[\s*[−+-]?\d[\d,]*(?:\.\d+)?\s*%?\s*[,;]\s*[−+-]?\d[\d,]*(?:\.\d+)?\s*%?\s*\]")
DECIMAL = re.compile(r"\d+\.\d+")

# The visible prose, code and figures of the article; "visible" is what has a layout box,
# so the content of a closed <details> (hide-input, hide-output, dropdowns) is not.
PAGE_JS = """
const article = document.querySelector('article.bd-article') || document.querySelector('main') || document.body;
// Chromium lays out a closed <details> under content-visibility: hidden, and a folded solution
// under visibility: hidden, so a layout box alone does not mean the reader sees it
const shown = (e) => e.getClientRects().length > 0
  && (!e.checkVisibility || e.checkVisibility({contentVisibilityAuto: true, visibilityProperty: true}));
const text = (e) => { const c = e.cloneNode(true);
  c.querySelectorAll('mjx-container, .MathJax, script, style, code, pre').forEach(x => x.remove());
  return c.textContent.replace(/\\s+/g, ' ').trim(); };
const blocks = Array.from(article.querySelectorAll('p, li'))
  .filter(e => shown(e) && !e.closest('table, pre, .highlight, aside.footnote, .footnote-list, div.citation, '
                                      + '.bd-sidebar-primary, .bd-sidebar-secondary, nav, .toctree-wrapper')
          && !(e.tagName === 'LI' && e.querySelector('p')))
  .map(text).filter(t => t.length > 0);
const code = Array.from(article.querySelectorAll('div.cell div.cell_input pre'))
  .filter(shown).map(p => p.textContent.replace(/\\n+$/, '').split('\\n').length);
const column = article.getBoundingClientRect().width;
return {height: document.documentElement.scrollHeight, blocks: blocks, code: code, images: IMAGES(article),
        column: column, width: document.documentElement.scrollWidth};
"""

# The figures of the article: the PNG the browser chose for this width (currentSrc) and the
# width it is shown at (null when folded). An explorer's static PNG is for print only.
IMAGES_JS = """
const IMAGES = (article) => Array.from(article.querySelectorAll('img'))
  .filter(img => !img.closest('.posenc-interactive'))
  .map(img => ({src: img.currentSrc || img.src, natural: img.naturalWidth,
    shown: (img.getClientRects().length > 0 && (!img.checkVisibility || img.checkVisibility(
      {contentVisibilityAuto: true, visibilityProperty: true}))) ? img.getBoundingClientRect().width : null,
    cell: !!img.closest('div.cell_output, div.output')}));
"""
PAGE_JS = IMAGES_JS + PAGE_JS

# At a phone's width: what is cut off, what scrolls without its cue, the widest element, the
# explorers' heights and legends (the module's docstring).
PHONE_JS = IMAGES_JS + """
const article = document.querySelector('article.bd-article') || document.querySelector('main') || document.body;
const shown = (e) => e.getClientRects().length > 0
  && (!e.checkVisibility || e.checkVisibility({contentVisibilityAuto: true, visibilityProperty: true,
                                              opacityProperty: true}));
const scrolls = (s) => s.overflowX === 'auto' || s.overflowX === 'scroll';
const describe = (e) => {
  let name = e.tagName.toLowerCase();
  const cls = typeof e.className === 'string' ? e.className.trim().split(/\\s+/).filter(Boolean).slice(0, 2) : [];
  if (cls.length) name += '.' + cls.join('.');
  const text = (e.textContent || e.getAttribute('alt') || e.getAttribute('src') || '').replace(/\\s+/g, ' ').trim();
  return name + (text ? ' ' + JSON.stringify(text.slice(0, 50)) : '');
};
const inside = (e) => e.closest('.posenc-interactive-plot, mjx-assistive-mml, .bd-sidebar-primary, .bd-sidebar-secondary');
const all = Array.from(article.querySelectorAll('*')).filter(e => !inside(e));
const boxes = all.filter(e => scrolls(getComputedStyle(e)) && shown(e));
const content = Array.from(article.querySelectorAll(
  'p, li, dt, dd, h1, h2, h3, h4, h5, h6, caption, figcaption, th, td, blockquote, table, pre, '
  + 'mjx-container, img, .posenc-interactive')).filter(e => !inside(e) && shown(e));
const clipped = [];
let widest = {width: 0, what: ''}, widestNotCode = {width: 0, what: ''};
new Set([...content, ...boxes]).forEach((e) => {
  const r = e.getBoundingClientRect();
  const width = Math.max(r.width, e.scrollWidth || 0);
  if (width > widest.width) widest = {width: Math.round(width), what: describe(e)};
  if (width > widestNotCode.width && !e.closest('pre, div.highlight'))
    widestNotCode = {width: Math.round(width), what: describe(e)};
  // the nearest ancestor that clips decides: one that scrolls lets the reader reach the rest
  for (let a = e.parentElement; a && a !== document.documentElement; a = a.parentElement) {
    const s = getComputedStyle(a);
    if (s.overflowX === 'visible') continue;
    const box = a.getBoundingClientRect();
    const left = box.left + a.clientLeft, right = left + a.clientWidth;
    if ((r.right > right + 1 || r.left < left - 1) && !scrolls(s))
      clipped.push(`${describe(e)}: ${Math.round(r.left)}–${Math.round(r.right)} px, in `
                   + `${a.tagName.toLowerCase()}.${String(a.className).split(' ')[0]} (overflow ${s.overflowX}) `
                   + `${Math.round(left)}–${Math.round(right)} px`);
    break;
  }
});
const uncued = boxes.filter(b => b.scrollWidth > b.clientWidth + 1).filter((b) => {
  const s = getComputedStyle(b);
  return !(s.backgroundAttachment.includes('local') && s.backgroundImage.includes('gradient'));
}).map(b => `${describe(b)} (${b.clientWidth} px box, ${b.scrollWidth} px content)`);
const rect = (e) => { const r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
const overlap = (a, b) => a[0] < b[2] - 1 && b[0] < a[2] - 1 && a[1] < b[3] - 1 && b[1] < a[3] - 1;
const explorers = Array.from(article.querySelectorAll('.posenc-interactive')).filter(shown).map((fig) => {
  const legend = fig.querySelector('.legend');
  const plots = Array.from(fig.querySelectorAll('.nsewdrag')).map(rect);
  const sliders = Array.from(fig.querySelectorAll('.slider-container')).map(rect);
  const box = legend && legend.getClientRects().length ? rect(legend) : null;
  return {height: Math.round(fig.getBoundingClientRect().height),
          legend_over_plot: !!box && plots.some(p => overlap(box, p)),
          legend_over_slider: !!box && sliders.some(p => overlap(box, p))};
});
return {images: IMAGES(article), column: article.getBoundingClientRect().width,
        width: document.documentElement.scrollWidth, inner: window.innerWidth,
        clipped: clipped, uncued: uncued, widest: widest, widest_not_code: widestNotCode,
        explorers: explorers};
"""

LOAD_ALL_IMAGES = """
const done = arguments[arguments.length - 1];
const images = Array.from(document.images);
images.forEach((img) => { img.loading = "eager"; });
Promise.all(images.map((img) => img.complete ? null : new Promise((ok) => {
  img.addEventListener("load", ok); img.addEventListener("error", ok);
}))).then(() => done(images.map((img) => [img.getAttribute("src"), img.naturalWidth])));
"""


def dense(paragraph: str) -> bool:
    """Whether a paragraph quotes too many intervals or decimals to be read as prose."""
    return len(INTERVAL.findall(paragraph)) > MAX_INTERVALS or len(DECIMAL.findall(paragraph)) > MAX_DECIMALS


def words(paragraphs: list[str]) -> int:
    return sum(len(p.split()) for p in paragraphs)


def local_file(url: str, html: Path | None = None) -> Path | None:
    """The file of the site (default :data:`HTML`) that a URL served by :func:`serve`
    points at."""
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https", "file", ""):
        return None  # a data: URI (a figure's embedded static fallback) is no file
    path = unquote(parsed.path).lstrip("/")
    candidate = (html or HTML) / path
    return candidate if candidate.is_file() else None


def png_of(src: str, html: Path | None = None) -> tuple[str, bytes] | None:
    """The name and bytes of the PNG an image shows: a file of the site (default
    :data:`HTML`) or a ``data:image/png;base64,`` URI (named by its hash); None for another
    kind of image."""
    if src.startswith("data:"):
        head, _, data = src.partition(",")
        if not head.startswith("data:image/png") or not head.endswith(";base64"):
            return None
        png = base64.b64decode(data)
        return f"data:{hashlib.sha256(png).hexdigest()[:12]}.png", png
    path = local_file(src, html)
    if path is None or path.suffix.lower() != ".png":
        return None
    return path.name, path.read_bytes()


def figure_text(images: list[dict], column: float, html: Path | None = None) -> list[dict]:
    """Every figure written by posenc.book.plotting, with its smallest text as displayed:
    the PNG the browser chose (``src``, its ``currentSrc``), shown ``shown`` CSS px wide (a
    folded one at the width it would have, its own or the ``column``'s)."""
    found = []
    for image in images:
        png = png_of(image["src"], html) if image["src"] else None
        if png is None:
            continue
        name, data = png
        meta = png_text_metadata(data)
        if meta is None:
            found.append({"src": name, "cell": image["cell"], "text_px": None})
            continue
        shown = image["shown"] if image["shown"] else min(meta["natural_px"], column)
        px = displayed_text_px(meta["font_pt_min"], meta["dpi"], meta["natural_px"], shown)
        found.append({"src": name, "cell": image["cell"], "text_px": px, "shown": shown})
    return found


# Resolves with MathJax's first typesetting ("done", or the error), or "none" on a page that
# does not load MathJax; false while MathJax has not started.
MATHJAX_DONE = """
const loads = !!document.querySelector('script[src*="mathjax"], script[src*="MathJax"]');
if (!loads) return "none";
if (!(window.MathJax && MathJax.startup && MathJax.startup.promise)) return false;
if (!window.__mathjaxDone) { window.__mathjaxDone = "waiting";
  MathJax.startup.promise.then(() => { window.__mathjaxDone = "done"; }, (e) => { window.__mathjaxDone = String(e); }); }
return window.__mathjaxDone === "waiting" ? false : window.__mathjaxDone;
"""

# A new document (not the page before it: that one carries the mark :func:`open_page` left
# on it) has loaded, and it is not a redirect (the site's index.html sends the reader on with
# a meta refresh: the page it sends to is the one to read).
LOADED = """
return !window.__posencLeft && document.readyState === 'complete'
  && !document.querySelector('meta[http-equiv="refresh" i]');
"""
FIGURES_DRAWN = """
return Array.from(document.querySelectorAll('.posenc-interactive-plot'))
  .every(gd => gd.querySelector('.main-svg') && gd._fullLayout);
"""
FONTS_READY = """
const done = arguments[arguments.length - 1];
document.fonts.ready.then(() => done(true), () => done(true));
"""


def wait_until_loaded(driver, url: str, timeout: float = 60, document_only: bool = False) -> None:
    """Wait until a new document (``url``'s, or the page it redirects to) is current and
    complete, MathJax has typeset it, its images (lazy ones too) and fonts have loaded and
    its plotly figures are drawn (with ``document_only``, only the first: for a test that
    reads the HTML alone).

    Raises:
        selenium's TimeoutException, naming the page and what it waited for; AssertionError
        when MathJax failed.
    """
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.support.wait import WebDriverWait

    # a script may meet the old document as it goes (an error): ask again
    WebDriverWait(driver, timeout, poll_frequency=0.1, ignored_exceptions=(WebDriverException,)).until(
        lambda d: d.execute_script(LOADED), f"{url}: the page did not finish loading")
    if document_only:
        return
    state = WebDriverWait(driver, timeout, poll_frequency=0.1).until(
        lambda d: d.execute_script(MATHJAX_DONE), f"{url}: MathJax did not start")
    assert state in ("done", "none"), f"{url}: MathJax failed: {state}"
    driver.execute_async_script(LOAD_ALL_IMAGES)
    driver.execute_async_script(FONTS_READY)
    WebDriverWait(driver, timeout, poll_frequency=0.1).until(
        lambda d: d.execute_script(FIGURES_DRAWN), f"{url}: the plotly figures were not drawn")


def _document(url: str) -> tuple:
    """A URL without its fragment, its path normalised ("book/../slides" is "slides")."""
    import posixpath

    parsed = urlparse(url)
    return parsed.scheme, parsed.netloc, posixpath.normpath(parsed.path or "/"), parsed.query


def open_page(driver, url: str, timeout: float = 60, document_only: bool = False) -> None:
    """Open ``url`` and return once it has loaded (:func:`wait_until_loaded`). The page
    before it is marked first, so that a read can never reach it: WebDriver's ``get`` may
    return before the new document is current (Selenium's documentation says so)."""
    try:
        current = driver.current_url
    except Exception:  # no page yet (a new browser): nothing to mark
        current = ""
    # a fragment of the page already open is the same document (no new one comes)
    if current.startswith("http") and not (_document(current) == _document(url) and "#" in url):
        driver.execute_script("window.__posencLeft = true;")
    driver.get(url)
    wait_until_loaded(driver, url, timeout, document_only)


def measure_page(driver, url: str) -> dict:
    """The goals' measurements of one page (see the module's docstring): at 1280 × 900, then
    loaded afresh at 414 × 896, as a phone loads it."""
    driver.set_window_size(*SCREEN)
    open_page(driver, url)
    raw = driver.execute_script(PAGE_JS)
    figures = figure_text(raw["images"], raw["column"])
    sizes = [f["text_px"] for f in figures if f["text_px"] is not None]
    driver.set_window_size(*PHONE)
    try:
        open_page(driver, url)  # laid out for a phone from the start
        phone = driver.execute_script(PHONE_JS)
    finally:
        driver.set_window_size(*SCREEN)
    phone_figures = figure_text(phone["images"], phone["column"])
    phone_sizes = [f["text_px"] for f in phone_figures if f["text_px"] is not None]
    prose = words(raw["blocks"])
    return {
        "screens": raw["height"] / SCREEN[1],
        "dense": [p for p in raw["blocks"] if dense(p)],
        "code_lines": sum(raw["code"]),
        "figures": figures,
        "min_text_px": min(sizes) if sizes else None,
        "unlabelled_figures": [f["src"] for f in figures if f["text_px"] is None and f["cell"]],
        "phone_figures": phone_figures,
        "phone_min_text_px": min(phone_sizes) if phone_sizes else None,
        "phone_overflow": phone["width"] > phone["inner"] + 1,
        "clipped": phone["clipped"],
        "uncued": phone["uncued"],
        "widest": phone["widest"],
        "widest_not_code": phone["widest_not_code"],
        "phone_column": phone["column"],
        "explorers": phone["explorers"],
        "words": prose,
        "minutes": prose / WORDS_PER_MINUTE,
    }


DECK_JS = """
const slides = Reveal.getSlides();
const tall = [];
slides.forEach((s, i) => {
  const idx = Reveal.getIndices(s);
  Reveal.slide(idx.h, idx.v);
  Reveal.layout();
  s.querySelectorAll('.fragment').forEach(f => f.classList.add('visible'));
  const title = (s.querySelector('h1, h2, h3') || {}).textContent || '';
  if (s.scrollHeight > s.clientHeight + 2) tall.push([idx.h, idx.v, title.trim().slice(0, 60), s.scrollHeight, s.clientHeight]);
});
return {count: slides.length, tall: tall};
"""


def measure_deck(driver, url: str) -> dict:
    """Every slide of a deck that is taller than the slide, at the decks' 1280 × 800."""
    from selenium.webdriver.support.wait import WebDriverWait

    driver.set_window_size(*DECK_SIZE)
    open_page(driver, url)
    WebDriverWait(driver, 20).until(
        lambda d: d.execute_script("return !!(window.Reveal && Reveal.isReady && Reveal.isReady())"),
        f"{url}: reveal.js did not start")
    driver.execute_script("Reveal.configure({transition: 'none', backgroundTransition: 'none'})")
    driver.execute_async_script(LOAD_ALL_IMAGES)
    result = driver.execute_script(DECK_JS)
    driver.set_window_size(*SCREEN)
    return result


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    """Serves the site; with ``delay`` (seconds), each page's HTML arrives in two halves,
    the second ``delay`` later, as from a slow or busy server."""

    delay = 0.0

    def log_message(self, *args):
        pass

    def copyfile(self, source, outputfile):
        if not (self.delay and self.path.split("?")[0].split("#")[0].endswith(".html")):
            return super().copyfile(source, outputfile)
        data = source.read()
        half = len(data) // 2
        outputfile.write(data[:half])
        outputfile.flush()
        time.sleep(self.delay)
        outputfile.write(data[half:])


def server_delay() -> float:
    """The delay :func:`serve` gives each page, from :data:`DELAY_ENV` (0 when unset)."""
    return float(os.environ.get(DELAY_ENV) or 0)


@contextmanager
def serve(directory: Path | None = None, delay: float | None = None):
    """Serve ``directory`` (default :data:`HTML`) on 127.0.0.1 and yield its base URL;
    ``delay`` (default :func:`server_delay`) holds back the second half of each page."""
    directory = directory or HTML
    handler = type("Handler", (_QuietHandler,), {"delay": server_delay() if delay is None else delay})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(handler, directory=str(directory)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def chromium_paths() -> tuple[str | None, str | None]:
    return shutil.which("chromium") or shutil.which("chromium-browser"), shutil.which("chromedriver")


def launch(window=SCREEN, page_load_strategy: str = "normal"):
    """Headless Chromium driven by Selenium, with every host but 127.0.0.1 unreachable.
    ``page_load_strategy`` "none" makes ``get`` return at once, before the page has loaded
    (how tests/test_site.py shows that the tests do not rely on ``get`` waiting)."""
    from selenium import webdriver

    chromium, driver_path = chromium_paths()
    options = webdriver.ChromeOptions()
    options.page_load_strategy = page_load_strategy
    options.binary_location = chromium
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars",
                 f"--window-size={window[0]},{window[1]}", "--disable-background-networking",
                 # every host but the test server is unreachable: a page that needs the network fails
                 "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=driver_path))
    driver.set_page_load_timeout(60)
    driver.set_script_timeout(60)
    return driver


def toc_pages() -> list[str]:
    from sphinx_external_toc.parsing import parse_toc_yaml

    return list(parse_toc_yaml(str(ROOT / "_toc.yml")).keys())


def failures(m: dict) -> list[str]:
    """The goals a page's measurements miss, in words."""
    out = []
    if m["screens"] > MAX_SCREENS:
        out.append(f"{m['screens']:.1f} screens (at most {MAX_SCREENS})")
    if m["dense"]:
        out.append(f"{len(m['dense'])} dense paragraphs, e.g. {m['dense'][0][:160]!r}")
    if m["code_lines"] > MAX_CODE_LINES:
        out.append(f"{m['code_lines']} visible code lines (at most {MAX_CODE_LINES})")
    for key, floor, where in (("figures", DESKTOP_MIN_TEXT_PX, "at 1280 px"),
                              ("phone_figures", MIN_TEXT_PX, f"at {PHONE_WIDTH} px")):
        small = [f for f in m[key] if f["text_px"] is not None and f["text_px"] < floor]
        if small:
            out.append("figure text below {:.0f} px {}: ".format(floor, where)
                       + ", ".join(f"{f['src']} {f['text_px']:.1f} px" for f in small))
    if m["unlabelled_figures"]:
        out.append(f"figures without posenc.book.plotting's text metadata: {m['unlabelled_figures']}")
    if m["phone_overflow"]:
        out.append(f"wider than a {PHONE_WIDTH}-px phone")
    if m["clipped"]:
        out.append(f"{len(m['clipped'])} elements cut off at {PHONE_WIDTH} px, e.g. {m['clipped'][:3]}")
    if m["uncued"]:
        out.append(f"{len(m['uncued'])} boxes scroll sideways with no cue at {PHONE_WIDTH} px, e.g. {m['uncued'][:3]}")
    for k, e in enumerate(m["explorers"]):
        if e["height"] > MAX_EXPLORER_PX:
            out.append(f"explorer {k + 1} is {e['height']} px tall at {PHONE_WIDTH} px (at most {MAX_EXPLORER_PX})")
        if e["legend_over_plot"] or e["legend_over_slider"]:
            out.append(f"explorer {k + 1}'s legend covers its "
                       + ("plot" if e["legend_over_plot"] else "sliders") + f" at {PHONE_WIDTH} px")
    return out


def build_preview(pages: list[str]) -> Path:
    """Execute ``pages`` and build them, with the introduction, into a site of their own
    (``_build/preview/<pages>/html``), decks included; return that folder."""
    import subprocess

    import yaml

    bin_dir = Path(sys.executable).parent
    notebooks = [f"{p}.ipynb" for p in pages if (ROOT / f"{p}.ipynb").exists()]
    if notebooks:
        subprocess.run([sys.executable, "-m", "posenc.book.execute", "--workers", "1", *notebooks], cwd=ROOT, check=True)
    out = ROOT / "_build" / "preview" / "+".join(Path(p).name for p in pages)
    out.mkdir(parents=True, exist_ok=True)
    toc = {"format": "jb-book", "root": "book/intro",
           "parts": [{"caption": "Preview", "numbered": True, "chapters": [{"file": p} for p in pages]}]}
    (out / "_toc.yml").write_text(yaml.safe_dump(toc, sort_keys=False))
    subprocess.run([str(bin_dir / "jupyter-book"), "build", ".", "--toc", str(out / "_toc.yml"),
                    "--path-output", str(out), "-q"], cwd=ROOT, check=True)
    html = out / "_build" / "html"
    # decks are made for chapters only (a reference page has none)
    notebooks = [n for n in notebooks if json.loads((ROOT / n).read_text()).get("metadata", {})
                 .get("posenc", {}).get("kind", "chapter") == "chapter"]
    if notebooks:
        subprocess.run([str(bin_dir / "jupyter"), "nbconvert", "--config", "book/_slides/nbconvert_config.py",
                        f"--NbConvertApp.notebooks={[str(ROOT / n) for n in notebooks]!r}",
                        f"--FilesWriter.build_directory={html / 'slides'}"], cwd=ROOT, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return html


def main(argv=None) -> int:
    global HTML
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("pages", nargs="*", help="documents of _toc.yml (default: all)")
    parser.add_argument("--decks", action="store_true", help="also measure the decks' slides")
    parser.add_argument("--build", action="store_true",
                        help="execute and build the named pages into a preview site first (implies --decks)")
    args = parser.parse_args(argv)
    pages = [p.removesuffix(".ipynb").removesuffix(".md").removesuffix(".html") for p in args.pages] or toc_pages()
    if args.build:
        if not args.pages:
            parser.error("--build needs the pages to build")
        HTML = build_preview(pages)
        args.decks = True
        print(f"preview site: {HTML / 'index.html'}")
    driver = launch()
    missed = 0
    try:
        with serve(HTML) as base:
            print(f"{'page':34} {'screens':>7} {'dense':>5} {'code':>5} {'fig px':>6} {'@414':>5} "
                  f"{'words':>6} {'min':>5}  widest at {PHONE_WIDTH} px (all; not code)")
            for page in pages:
                m = measure_page(driver, urljoin(base, f"{page}.html"))
                small, phone = (f"{m[k]:.1f}" if m[k] is not None else "-" for k in ("min_text_px", "phone_min_text_px"))
                print(f"{page:34} {m['screens']:7.1f} {len(m['dense']):5d} {m['code_lines']:5d} {small:>6} {phone:>5} "
                      f"{m['words']:6d} {m['minutes']:5.1f}  {m['widest']['width']} px {m['widest']['what'][:40]}; "
                      f"{m['widest_not_code']['width']} px {m['widest_not_code']['what'][:40]}")
                for problem in failures(m):
                    missed += 1
                    print(f"    ✗ {problem}")
                if args.decks:
                    deck = HTML / "slides" / f"{Path(page).name}.slides.html"
                    if deck.exists():
                        d = measure_deck(driver, urljoin(base, f"slides/{deck.name}"))
                        print(f"    deck: {d['count']} slides, {len(d['tall'])} taller than the slide")
                        for h, v, title, scroll, client in d["tall"]:
                            missed += 1
                            print(f"    ✗ slide {h}.{v} {title!r}: {scroll} px of content in {client}")
    finally:
        driver.quit()
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
