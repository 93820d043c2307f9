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
* ``min_text_px``: the smallest figure text as displayed, from the font size and dpi that
  :mod:`posenc.book.plotting` writes into every figure's PNG and the width the browser shows it
  at (a folded figure at the width it would have when opened);
* ``phone_overflow``: whether the page is wider than a 414-px phone screen;
* ``words`` and ``minutes``: the visible prose, read at 200 words a minute;
* for a deck, every slide whose content is taller than the slide (1280 × 800).
"""

from __future__ import annotations

import argparse
import functools
import http.server
import json
import re
import shutil
import sys
import threading
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import unquote, urljoin, urlparse

ROOT = Path(__file__).resolve().parents[1]
HTML = ROOT / "_build" / "html"
sys.path.insert(0, str(ROOT / "src"))

from posenc.book.plotting import MIN_TEXT_PX, displayed_text_px, png_text_metadata  # noqa: E402

SCREEN = (1280, 900)
PHONE_WIDTH = 414
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
const images = Array.from(article.querySelectorAll('img')).map(img => ({
  src: img.currentSrc || img.src, shown: shown(img) ? img.getBoundingClientRect().width : null,
  natural: img.naturalWidth, cell: !!img.closest('div.cell_output, div.output')}));
return {height: document.documentElement.scrollHeight, blocks: blocks, code: code, images: images,
        column: column, width: document.documentElement.scrollWidth};
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


def figure_text(images: list[dict], column: float) -> list[dict]:
    """Every figure written by posenc.book.plotting, with its smallest text as displayed."""
    found = []
    for image in images:
        path = local_file(image["src"]) if image["src"] else None
        if path is None or path.suffix.lower() != ".png":
            continue
        meta = png_text_metadata(path)
        if meta is None:
            found.append({"src": path.name, "cell": image["cell"], "text_px": None})
            continue
        shown = image["shown"] if image["shown"] else min(meta["natural_px"], column)
        px = displayed_text_px(meta["font_pt_min"], meta["dpi"], meta["natural_px"], shown)
        found.append({"src": path.name, "cell": image["cell"], "text_px": px, "shown": shown})
    return found


def measure_page(driver, url: str) -> dict:
    """The goals' measurements of one page (see the module's docstring)."""
    driver.set_window_size(*SCREEN)
    driver.get(url)
    driver.execute_async_script(LOAD_ALL_IMAGES)
    raw = driver.execute_script(PAGE_JS)
    figures = figure_text(raw["images"], raw["column"])
    sizes = [f["text_px"] for f in figures if f["text_px"] is not None]
    driver.set_window_size(PHONE_WIDTH, SCREEN[1])
    driver.get(url)  # laid out for a phone from the start
    driver.execute_async_script(LOAD_ALL_IMAGES)
    phone_width = driver.execute_script("return document.documentElement.scrollWidth")
    phone_inner = driver.execute_script("return window.innerWidth")
    driver.set_window_size(*SCREEN)
    prose = words(raw["blocks"])
    return {
        "screens": raw["height"] / SCREEN[1],
        "dense": [p for p in raw["blocks"] if dense(p)],
        "code_lines": sum(raw["code"]),
        "figures": figures,
        "min_text_px": min(sizes) if sizes else None,
        "unlabelled_figures": [f["src"] for f in figures if f["text_px"] is None and f["cell"]],
        "phone_overflow": phone_width > phone_inner + 1,
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
    driver.get(url)
    WebDriverWait(driver, 20).until(
        lambda d: d.execute_script("return !!(window.Reveal && Reveal.isReady && Reveal.isReady())"),
        f"{url}: reveal.js did not start")
    driver.execute_script("Reveal.configure({transition: 'none', backgroundTransition: 'none'})")
    driver.execute_async_script(LOAD_ALL_IMAGES)
    result = driver.execute_script(DECK_JS)
    driver.set_window_size(*SCREEN)
    return result


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@contextmanager
def serve(directory: Path | None = None):
    """Serve ``directory`` (default :data:`HTML`) on 127.0.0.1 and yield its base URL."""
    directory = directory or HTML
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(directory)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def chromium_paths() -> tuple[str | None, str | None]:
    return shutil.which("chromium") or shutil.which("chromium-browser"), shutil.which("chromedriver")


def launch(window=SCREEN):
    """Headless Chromium driven by Selenium, with every host but 127.0.0.1 unreachable."""
    from selenium import webdriver

    chromium, driver_path = chromium_paths()
    options = webdriver.ChromeOptions()
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
    small = [f for f in m["figures"] if f["text_px"] is not None and f["text_px"] < MIN_TEXT_PX]
    if small:
        out.append("figure text below {:.0f} px: ".format(MIN_TEXT_PX)
                   + ", ".join(f"{f['src']} {f['text_px']:.1f} px" for f in small))
    if m["unlabelled_figures"]:
        out.append(f"figures without posenc.book.plotting's text metadata: {m['unlabelled_figures']}")
    if m["phone_overflow"]:
        out.append(f"wider than a {PHONE_WIDTH}-px phone")
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
            print(f"{'page':34} {'screens':>7} {'dense':>5} {'code':>5} {'fig px':>6} {'words':>6} {'min':>5}")
            for page in pages:
                m = measure_page(driver, urljoin(base, f"{page}.html"))
                small = f"{m['min_text_px']:.1f}" if m["min_text_px"] is not None else "-"
                print(f"{page:34} {m['screens']:7.1f} {len(m['dense']):5d} {m['code_lines']:5d} {small:>6} "
                      f"{m['words']:6d} {m['minutes']:5.1f}")
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
