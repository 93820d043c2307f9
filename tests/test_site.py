"""The built site and the lecture decks, opened as a reader opens them: every page of _build/html
and every deck of _build/html/slides in headless Chromium (Debian's chromium and chromium-driver,
driven by Selenium), served from 127.0.0.1 with every other host unreachable.

Checked on each page: MathJax rendered every formula (and no raw ``$$`` is left), every image
loaded, the JavaScript console has no errors, on chapter pages the Colab and download buttons
point at the page's own notebook, and the reader's goals of tests/site_goals.py hold (at most 25
screens, no paragraph dense with intervals, at most 120 visible lines of code, figure text at
least 12 px as displayed at 1280 px and 10 px at 414 px; at 414 px nothing wider than the
phone, no text or formula cut off, every box that scrolls sideways with its cue, every explorer
at most 700 px tall with its legend clear of the plot). On each deck: no slide is taller than the
slide. A screenshot of each page (desktop and phone width) and of each deck's first slides is
saved under _build/screenshots/.

Every page is read once it has loaded (site_goals.open_page: the new document, complete,
typeset, its images, fonts and figures in), never right after WebDriver's ``get``; a page check
also runs against a server that sends each page's second half a second late, with a browser
whose ``get`` returns at once (``test_a_page_is_read_once_it_has_loaded``).

Run by ``make site-tests`` after the book and the decks are built (``make test`` does both).
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import quote

import pytest
import yaml

import site_goals
from test_notebooks import chapters

try:
    from selenium.webdriver.support.wait import WebDriverWait
except ImportError:  # the browser fixture skips with the reason
    WebDriverWait = None

pytestmark = pytest.mark.site

ROOT = Path(__file__).resolve().parents[1]
HTML = ROOT / "_build" / "html"
SHOTS = ROOT / "_build" / "screenshots"
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())
CHAPTERS = chapters()
PAGES = sorted(
    p.relative_to(HTML).as_posix()
    for p in HTML.rglob("*.html")
    if not {"_static", "_sources", "_images", "slides"} & set(p.relative_to(HTML).parts)
)
DECKS = sorted(p.relative_to(HTML).as_posix() for p in (HTML / "slides").glob("*.slides.html"))


def require(condition: bool, reason: str):
    """Missing build output fails under `make` (POSENC_REQUIRE_SITE=1) and skips, visibly, otherwise."""
    if not condition:
        if os.environ.get("POSENC_REQUIRE_SITE"):
            pytest.fail(reason)
        pytest.skip(reason)


@pytest.fixture(scope="module")
def base_url():
    require((HTML / "index.html").exists(), f"no site at {HTML}: run `make book` first")
    with site_goals.serve(HTML) as base:  # POSENC_SITE_DELAY slows every page down
        yield base.rstrip("/")


#: The delay of :func:`slow_base_url`'s server, seconds: the second half of each page's HTML
#: arrives that much after the first.
SLOW_SERVER_DELAY = 1.0


@pytest.fixture(scope="module")
def slow_base_url():
    require((HTML / "index.html").exists(), f"no site at {HTML}: run `make book` first")
    with site_goals.serve(HTML, delay=SLOW_SERVER_DELAY) as base:
        yield base.rstrip("/")


def open_page(driver, url: str):
    """Every test opens a page with this: it returns once the page has loaded."""
    site_goals.open_page(driver, url)


def open_document(driver, url: str):
    """For a test that reads the HTML alone (ids): returns once the document is complete."""
    site_goals.open_page(driver, url, document_only=True)


@pytest.fixture(scope="module")
def browser():
    pytest.importorskip("selenium.webdriver")
    chromium, driver_path = site_goals.chromium_paths()
    if not (chromium and driver_path):
        pytest.skip("Chromium or chromedriver is not installed and `make` could not install "
                    "them (needs root and apt-get): install Debian's chromium and chromium-driver")
    driver = site_goals.launch()
    SHOTS.mkdir(parents=True, exist_ok=True)
    yield driver
    driver.quit()


# MathJax 3 signals the end of its first typesetting pass by resolving this promise.
MATHJAX_DONE = site_goals.MATHJAX_DONE

LOAD_ALL_IMAGES = site_goals.LOAD_ALL_IMAGES


def console_errors(driver) -> list[str]:
    return [entry["message"] for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


def screenshot(driver, name: str, full_page: bool = True, width: int = 1280):
    if width != driver.get_window_size()["width"]:
        driver.set_window_size(width, 900)
        open_page(driver, driver.current_url)  # laid out for this width from the start, as a phone loads it
    driver.set_window_size(width, 900)
    if full_page:
        height = driver.execute_script("return document.documentElement.scrollHeight")
        driver.set_window_size(width, min(max(height, 900), 12000))
    driver.save_screenshot(str(SHOTS / name))
    driver.set_window_size(1280, 900)


VISIBLE_TEX = """
const body = document.body.cloneNode(true);
body.querySelectorAll('pre, code, script, style, mjx-container, .highlight, aside.notes').forEach(e => e.remove());
const text = body.textContent;
const found = text.match(/\\$\\$|\\\\(frac|begin|theta|top|sum|langle|mathrm|cdot|sqrt|left|right|displaystyle)\\b/g);
return found ? found.slice(0, 5) : [];
"""


def check_math(driver, where: str, required: bool = False):
    """Every formula typeset by MathJax: MathJax loaded and produced output, every Sphinx math
    element holds it, and no TeX (``$$``, ``\\frac``, ``\\theta``, ...) is left in the text outside
    code."""
    has_math = driver.execute_script("return document.querySelectorAll('.math, .mathjax_process').length > 0")
    if not (has_math or required):
        return
    state = WebDriverWait(driver, 20).until(lambda d: d.execute_script(MATHJAX_DONE), f"{where}: MathJax did not load")
    assert state == "done", f"{where}: MathJax failed or is not loaded: {state}"
    untypeset = driver.execute_script(
        "return Array.from(document.querySelectorAll('.math')).filter(e => !e.querySelector('mjx-container'))"
        ".map(e => e.textContent.slice(0, 80))")
    assert untypeset == [], f"{where}: formulas left as raw TeX: {untypeset[:5]}"
    assert driver.execute_script("return document.querySelectorAll('mjx-container').length") > 0
    raw = driver.execute_script(VISIBLE_TEX)
    assert raw == [], f"{where}: raw TeX in the page text: {raw}"


def check_images(driver, where: str):
    images = driver.execute_async_script(LOAD_ALL_IMAGES)
    broken = [src for src, width in images if not width]
    assert broken == [], f"{where}: images that did not load: {broken}"


@pytest.mark.parametrize("page", PAGES)
def test_page(browser, base_url, page):
    open_page(browser, f"{base_url}/{page}")
    check_math(browser, page)
    check_images(browser, page)
    errors = console_errors(browser)
    assert errors == [], f"{page}: JavaScript console errors: {errors}"
    name = page.replace("/", "__").replace(".html", "")
    screenshot(browser, f"{name}.png")
    screenshot(browser, f"{name}__phone.png", width=site_goals.PHONE_WIDTH)


TOC_PAGES = [p for p in site_goals.toc_pages()]


@pytest.mark.parametrize("page", TOC_PAGES)
def test_page_reads_as_a_page(browser, base_url, page):
    """The reader's goals (tests/site_goals.py) on every page of the table of contents."""
    require((HTML / f"{page}.html").exists(), f"no {page}.html in {HTML}: run `make book` first")
    measured = site_goals.measure_page(browser, f"{base_url}/{page}.html")
    assert site_goals.failures(measured) == [], page
    # the check can fail: a page's figures carry posenc.book.plotting's text metadata
    figures = [f for f in measured["figures"] if f["cell"]]
    assert all(f["text_px"] is not None for f in figures)


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_chapter_buttons_number_and_notebook(browser, base_url, chapter):
    """The Colab button opens this page's notebook on the repository's branch; the download button
    serves the .ipynb; the chapter carries its number."""
    open_page(browser, f"{base_url}/{chapter}.html")
    repo = CONFIG["repository"]
    owner_name = repo["url"].removeprefix("https://github.com/")
    book_path = (repo.get("path_to_book") or "").strip("/")
    notebook = "/".join(filter(None, [book_path, f"{chapter}.ipynb"]))
    expected = f"{CONFIG['launch_buttons']['colab_url']}/github/{owner_name}/blob/{repo['branch']}/{quote(notebook)}"
    links = browser.execute_script("return Array.from(document.querySelectorAll('a')).map(a => a.href)")
    colab = [href for href in links if "colab.research.google.com" in href]
    assert colab == [expected], f"Colab links {colab}, expected {expected}"
    downloads = [href for href in links if href.endswith(f"/_sources/{chapter}.ipynb")]
    assert downloads, f"no download link to the .ipynb of {chapter}"
    assert (HTML / "_sources" / f"{chapter}.ipynb").exists()
    number = browser.execute_script("const n = document.querySelector('h1 .section-number'); return n && n.textContent")
    assert number and number.strip().rstrip(".").isdigit(), f"{chapter}: chapter heading has no number ({number!r})"


PACKAGE_LISTINGS = "div.highlight-default pre, div.highlight-python pre"
CODE_OVERFLOW = f"""
return Array.from(document.querySelectorAll('{PACKAGE_LISTINGS}'))
  .filter(p => p.scrollWidth > p.clientWidth + 1)
  .map(p => [p.textContent.split('\\n').reduce((a, b) => a.length >= b.length ? a : b, ''),
             p.clientWidth, p.scrollWidth]);
"""


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_package_source_fits_the_column(browser, base_url, chapter):
    """The package's code shown with literalinclude is read whole, with no horizontal scroll bar
    hiding its right end, in a 1280 px wide window (book/_assets/posenc.css and the 88-character
    lines of tests/test_hygiene.py)."""
    open_page(browser, f"{base_url}/{chapter}.html")
    assert browser.execute_script("return window.innerWidth") == 1280
    listings = browser.execute_script(f"return document.querySelectorAll('{PACKAGE_LISTINGS}').length")
    includes = (ROOT / f"{chapter}.ipynb").read_text().count("{literalinclude}")
    assert listings >= includes, f"{chapter}: {includes} literalincludes, {listings} listings found"
    font = browser.execute_script(
        f"const p = document.querySelector('{PACKAGE_LISTINGS}'); return p && getComputedStyle(p).fontSize")
    assert font in (None, "12px"), f"{chapter}: package listings in a {font} font (book/_assets/posenc.css)"
    overflowing = browser.execute_script(CODE_OVERFLOW)
    assert overflowing == [], f"{chapter}: code blocks cut at the right edge (longest line, width, needed): {overflowing[:3]}"


def test_bibliography_lists_the_references(browser, base_url):
    open_page(browser, f"{base_url}/book/bibliography.html")
    entries = browser.execute_script("return document.querySelectorAll('.citation, div.citation, dl.citation > dt').length")
    assert entries >= 10


def test_search_works_offline(browser, base_url):
    open_page(browser, f"{base_url}/search.html?q=rotary")
    results = WebDriverWait(browser, 20).until(
        lambda d: d.execute_script("return document.querySelectorAll('#search-results li').length"),
        "the search page found nothing for 'rotary'")
    assert results > 0, "the search page found nothing for 'rotary'"
    assert console_errors(browser) == []
    screenshot(browser, "search-rotary.png")


def test_every_chapter_has_a_deck():
    require(bool(DECKS), f"no decks in {HTML / 'slides'}: run `make slides`")
    assert {Path(d).name.removesuffix(".slides.html") for d in DECKS} == {Path(c).name for c in CHAPTERS}


def deck_fragments(chapter: str) -> int:
    """How many cells of a chapter's deck are fragments, from the notebook and the converter."""
    import sys

    import nbformat

    sys.path.insert(0, str(ROOT / "book" / "_slides"))
    import posenc_slides

    path = next(ROOT / f"{c}.ipynb" for c in CHAPTERS if Path(c).name == chapter)
    nb, _ = posenc_slides.BookToSlides(merge_outputs=False).preprocess(nbformat.read(path, as_version=4), {})
    return sum(c.metadata.get("slideshow", {}).get("slide_type") == "fragment" for c in nb.cells)


@pytest.mark.parametrize("deck", DECKS)
def test_deck(browser, base_url, deck):
    open_page(browser, f"{base_url}/{deck}")
    WebDriverWait(browser, 20).until(
        lambda d: d.execute_script("return !!(window.Reveal && Reveal.isReady && Reveal.isReady())"),
        f"{deck}: reveal.js did not start")
    assert browser.execute_script("return Reveal.getTotalSlides()") >= 8
    assert browser.execute_script("return document.querySelectorAll('aside.notes').length") >= 3, "no speaker notes"
    # a fragment on the deck for every cell the converter keeps as one (a derivation step)
    fragments = browser.execute_script("return document.querySelectorAll('.fragment').length")
    assert fragments >= deck_fragments(Path(deck).name.removesuffix(".slides.html")), "fragments missing"
    # the outputs of the book build: text and figures
    assert browser.execute_script("return document.querySelectorAll('.jp-OutputArea-output').length") >= 3
    assert browser.execute_script("return document.querySelectorAll('.jp-OutputArea-output img').length") >= 1
    check_math(browser, deck, required=True)
    check_images(browser, deck)
    errors = console_errors(browser)
    assert errors == [], f"{deck}: JavaScript console errors: {errors}"
    name = Path(deck).name.removesuffix(".html")
    browser.execute_script("Reveal.configure({transition: 'none', backgroundTransition: 'none'})")
    title = browser.execute_script(
        "Reveal.slide(0, 0); const s = Reveal.getCurrentSlide();"
        "return [!!s.querySelector('h1'), !!s.querySelector('.posenc-subtitle')]")
    assert title == [True, True], f"{deck}: the first slide is the chapter's title slide"
    # the title, the chapter's objectives, and the first sub-slide of the third section
    for h, v in ((0, 0), (1, 0), (3, 1)):
        browser.execute_script(f"Reveal.slide({h}, {v}); Reveal.layout();")
        browser.execute_script("document.querySelectorAll('section.present .fragment').forEach(f => f.classList.add('visible'))")
        screenshot(browser, f"slides__{name}__{h}-{v}.png", full_page=False)


@pytest.mark.parametrize("deck", DECKS)
def test_every_slide_fits_the_slide(browser, base_url, deck):
    """No slide's content is taller than the slide at the decks' 1280 × 800."""
    measured = site_goals.measure_deck(browser, f"{base_url}/{deck}")
    assert measured["tall"] == [], f"{deck}: slides taller than the slide (h, v, title, content, slide): {measured['tall']}"


def test_teaching_page_links_every_deck(browser, base_url):
    open_page(browser, f"{base_url}/book/teaching.html")
    hrefs = browser.execute_script("return Array.from(document.querySelectorAll('a')).map(a => a.getAttribute('href'))")
    linked = {h.split("/")[-1] for h in hrefs if h and h.endswith(".slides.html")}
    assert linked == {f"{Path(c).name}.slides.html" for c in CHAPTERS}
    for href in {h for h in hrefs if h and h.endswith(".slides.html")}:
        assert (HTML / "book" / href).resolve().exists(), f"teaching page links a missing deck: {href}"


def test_the_teaching_page_leads_with_the_course_and_its_links_resolve(browser, base_url):
    """The teaching page opens with the course of four lectures (issues 41 and 43): every
    lecture of book/lectures, in the course's order, with its four links (the deck, the notes
    page, the handout, the problem set), each a file of the built site."""
    open_page(browser, f"{base_url}/book/teaching.html")
    first, hrefs = browser.execute_script(
        "const s = document.querySelector('section section');"
        "return [s.id, Array.from(s.querySelectorAll('p a')).map(a => a.getAttribute('href'))];")
    assert first == "the-course-four-lectures", first
    lectures = [h for h in hrefs if h.startswith("../lectures/")]
    decks = [h.split("/")[-1][: -len(".html")] for h in lectures
             if h.endswith(".html") and not h.endswith("-notes.html")]
    assert decks == ["positions", "rope", "long_context", "evidence"], decks
    assert sorted(decks) == sorted(p.stem for p in (HTML.parents[1] / "book" / "lectures").glob("*.md"))
    assert len(lectures) == 4 * len(decks), hrefs
    for href in lectures:
        assert (HTML / "book" / href).resolve().is_file(), f"the teaching page links a missing file: {href}"


@pytest.mark.parametrize("query", ["rope_scaling", "partial_rotary_factor", "rope_parameters"])
def test_search_finds_what_practitioners_type(browser, base_url, query):
    open_page(browser, f"{base_url}/search.html?q={query}")
    found = WebDriverWait(browser, 20).until(
        lambda d: d.execute_script(
            "const r = Array.from(document.querySelectorAll('#search-results li a')).map(a => a.getAttribute('href'));"
            "return r.length ? r : false"), f"the search page found nothing for {query!r}")
    assert any("cheatsheet" in href for href in found), f"{query}: the cheat-sheet is not among {found[:8]}"


def unresolved_section_links(driver, base_url: str, page: str, read=open_document,
                             linked: set[str] | None = None) -> list[str]:
    """The internal links of ``page`` that name a section (#anchor) with no element of that id
    on the page they point at (only the pages of ``linked``, paths such as "book/rope.html",
    when given); ``page`` opened with :func:`open_document`, each linked page once, with
    ``read``."""
    from selenium.common.exceptions import WebDriverException

    open_document(driver, f"{base_url}/{page}.html")
    targets = driver.execute_script(
        "return Array.from(document.querySelectorAll('article a[href*=\"#\"]')).map(a => a.href)"
        ".filter(h => h.startsWith(location.origin) && !h.includes('.slides.html'))")
    assert targets, f"{page}: no section links"
    anchors: dict[str, set[str]] = {}
    for url in targets:
        path, anchor = url.split("#", 1)
        if anchor and (linked is None or path.removeprefix(base_url + "/") in linked):
            anchors.setdefault(path, set()).add(anchor)
    assert anchors, f"{page}: no section links to {linked}"
    problems = []
    for path, names in sorted(anchors.items()):
        read(driver, path)
        try:
            missing = driver.execute_script(
                "return arguments[0].filter(a => !document.getElementById(a))", sorted(names))
        except WebDriverException as error:  # the document went away under the script
            missing = [f"(not read: {error.msg})"]
        if missing:
            problems.append(f"{path} has no element with the id(s) {missing}")
    return problems


@pytest.mark.parametrize("page", ["book/intro", "book/tour", "book/cheatsheet", "book/teaching"])
def test_every_link_to_a_section_resolves(browser, base_url, page):
    """Internal links of the entry pages that name a section (#anchor) land on an element with that id."""
    require((HTML / f"{page}.html").exists(), f"no {page}.html")
    problems = unresolved_section_links(browser, base_url, page)
    assert not problems, f"{page}: {problems}"


@pytest.fixture(scope="module")
def impatient_browser():
    """A browser whose ``get`` returns at once (page load strategy "none"), before the page
    has loaded: what WebDriver's ``get`` may do under load (Selenium's documentation)."""
    pytest.importorskip("selenium.webdriver")
    chromium, driver_path = site_goals.chromium_paths()
    if not (chromium and driver_path):
        pytest.skip("Chromium or chromedriver is not installed")
    driver = site_goals.launch(page_load_strategy="none")
    yield driver
    driver.quit()


# the page of the failure and two more of the largest the teaching page links to
READ_ONCE_LOADED_PAGES = {"book/context_extension.html", "book/rope.html", "book/remapping.html"}


def read_at_once(driver, url: str):
    """How the tests read a page before issue 39: right after ``get``."""
    driver.get(url)


@pytest.mark.parametrize("read", [
    pytest.param(read_at_once, id="read-at-once", marks=pytest.mark.xfail(
        strict=True, raises=AssertionError,
        reason="the failure of issue 39, reproduced: a page read before it has loaded lacks the "
               "ids near its end (context_extension.html's exercises)")),
    pytest.param(open_document, id="read-once-loaded"),
])
def test_a_page_is_read_once_it_has_loaded(impatient_browser, slow_base_url, read):
    """Issue 39: test_every_link_to_a_section_resolves[book/teaching] failed once with a busy
    process alongside (context_extension.html "has no element with the id(s)
    ['ex-dynamic-factor', 'ex-ntk-interp']", both on the built page): the page was read before
    it had loaded. Reproduced for certain here: ``get`` returns at once and the server sends the
    second half of each page a second late. Read right after ``get``, the check fails (the
    strict xfail); read with open_document (site_goals.open_page), which waits for the new
    document to be complete, it passes. Every browser test reads pages so."""
    require((HTML / "book/teaching.html").exists(), "no book/teaching.html")
    problems = unresolved_section_links(impatient_browser, slow_base_url, "book/teaching", read=read,
                                        linked=READ_ONCE_LOADED_PAGES)
    assert not problems, f"book/teaching: {problems}"


# Pages with figures a reader moves (posenc.book.interactive), how many each has, and the most
# bytes they may add to a first visit of the page (issue 26: at most 3 MB).
PAGE_WEIGHT_BUDGET = 3_000_000
INTERACTIVE = {"book/rope.html": 1, "book/relative.html": 1, "book/context_extension.html": 2,
               "book/alibi.html": 2}
FIGURE_STATE = """
const out = [];
document.querySelectorAll('.posenc-interactive-plot').forEach((gd) => {
  const spec = JSON.parse(document.getElementById(gd.id + '-spec').textContent);
  const key = (gd.layout.sliders || []).map((s) => s.active).join(',');
  out.push({id: gd.id, key: key, values: (gd.layout.sliders || []).map((s) => s.steps[s.active].label),
    shown: Array.from(gd.querySelectorAll('.annotation-text')).map((e) => e.textContent),
    stored: (spec.states[key].layout.annotations || []).map((a) => a.text.replace(/<br>/g, '')),
    traces: gd.data.map((t) => [t.x, t.y]),
    stored_traces: spec.states[key].data.map((t) => [t.x, t.y]),
    min_font: Math.min(...Array.from(gd.querySelectorAll('text, tspan')).filter((t) =>
      t.getBoundingClientRect().width > 0).map((t) => parseFloat(getComputedStyle(t).fontSize))),
    width: gd.getBoundingClientRect().width,
    column: (gd.closest('article') || document.body).getBoundingClientRect().width});
});
return out;
"""


def figure_states(driver) -> list[dict]:
    WebDriverWait(driver, 20).until(lambda d: d.execute_script(
        "return document.querySelectorAll('.posenc-interactive-plot .main-svg').length > 0"))
    return driver.execute_script(FIGURE_STATE)


def move_each_slider(browser, rails, where: str, scroll: bool = False) -> int:
    """Click each slider rail of ``rails`` near one end, then the other, until its figure
    changes state; each figure must then show the state the package computed for the new
    values (its traces and its stored values). Returns the number of sliders moved."""
    from selenium.webdriver.common.action_chains import ActionChains

    for rail in rails:
        if scroll:
            browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", rail)
        old = {f["id"]: f["key"] for f in figure_states(browser)}
        for fraction in (0.9, 0.1):
            ActionChains(browser).move_to_element_with_offset(
                rail, int(rail.rect["width"] * (fraction - 0.5)), 0).click().perform()
            now = figure_states(browser)
            if any(old[f["id"]] != f["key"] for f in now):
                break
        assert any(old[f["id"]] != f["key"] for f in now), f"{where}: a slider did not move"
        for f in now:
            assert f["shown"] == f["stored"], f"{where}: the figure shows {f['shown']}, stored {f['stored']}"
            assert f["traces"] == f["stored_traces"], f"{where}: the traces are not the state's"
    return len(rails)


@pytest.mark.parametrize("page", sorted(INTERACTIVE))
@pytest.mark.parametrize("width", [1280, site_goals.PHONE_WIDTH])
def test_figures_move_and_show_the_package_numbers(browser, base_url, page, width):
    """Each slider of each figure, moved by a click on its rail, changes the figure to the state
    the package computed for the new values (tests/test_interactive.py holds those states to the
    package's functions); text is at least 12 px and the figure fits the column or the phone;
    plotly.js came from the site (the browser cannot reach another host) with no console error."""
    browser.set_window_size(width, 900)
    open_page(browser, f"{base_url}/{page}")
    before = figure_states(browser)
    assert len(before) == INTERACTIVE[page]
    rails = browser.find_elements("css selector", ".posenc-interactive-plot .slider-rail-touch-rect")
    assert rails, f"{page}: no slider"
    move_each_slider(browser, rails, page, scroll=True)
    for f in figure_states(browser):
        assert f["min_font"] >= 12, f"{page}: figure text of {f['min_font']} px"
        assert f["width"] <= f["column"] + 1, f"{page}: the figure is wider than the column"
    rope = [f for f in figure_states(browser) if f["values"] and page.endswith("rope.html")]
    if rope:
        from posenc.book.explorers import rotated_pair

        m, n = map(int, rope[0]["values"])
        assert f"score q·k = {rotated_pair(m, n)[2]:.4f}" in rope[0]["shown"][0]
    assert console_errors(browser) == []
    # what the figures add to a first visit: plotly.js once, and each figure's HTML
    plotly = HTML / "_static" / "plotly.js-cartesian-dist-min" / "plotly-cartesian.min.js"
    figures = browser.execute_script(
        "return Array.from(document.querySelectorAll('.posenc-interactive')).map((e) => e.outerHTML.length)")
    extra = plotly.stat().st_size + sum(figures)
    assert extra <= PAGE_WEIGHT_BUDGET, f"{page}: the figures add {extra / 1e6:.2f} MB"
