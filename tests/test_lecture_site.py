"""The lecture decks (_build/html/lectures/*.html, posenc.book.lecture) in headless Chromium at
1280 × 800, as a lecturer presents them (issue 41): every slide has a heading and speaker notes;
at most 40 words of visible text (heading, figures and explorers aside; fragments counted); no
code block over 8 lines; no text under 18 px, figures' text included (from the font size and dpi
their PNG records and the width the deck shows them at); nothing past the slide's 1280 × 800;
no reference to the page; every number shown comes from a {value}; each explorer moves when its
slider is clicked. Skips, saying why, when no lecture is built (fails under `make`)."""

from __future__ import annotations

import re

import pytest

import site_goals
from test_site import HTML, browser, console_errors, require  # noqa: F401 (fixtures)

from posenc.book import lecture as lec
from posenc.book.slide_figure import SLIDE_MIN_TEXT_PX, SLIDE_SIZE

pytestmark = pytest.mark.site

LECTURES = sorted(p.relative_to(HTML).as_posix() for p in (HTML / "lectures").glob("*.html")
                  if not p.stem.endswith("-notes"))  # the handout's notes pages are not decks

# One slide as shown (the current one): what the checks read. Text nodes are measured by their
# computed font size times reveal.js's scale; boxes against the slide's 1280 × 800.
SLIDE_JS = """
const s = Reveal.getCurrentSlide();
const scale = Reveal.getScale();
const frame = document.querySelector('.reveal .slides').getBoundingClientRect();
const box = {left: frame.left, top: frame.top, right: frame.left + arguments[0] * scale,
             bottom: frame.top + arguments[1] * scale};
const skip = (e) => e.closest('aside.notes');
const clone = s.cloneNode(true);
clone.querySelectorAll('aside.notes, h1, h2, mjx-container, pre, .posenc-interactive, img, script, style')
  .forEach((e) => e.remove());
const values = s.cloneNode(true);
values.querySelectorAll('aside.notes, .posenc-value, mjx-container, pre, code, .posenc-interactive, script, style')
  .forEach((e) => e.remove());
const small = [], outside = [];
const walker = document.createTreeWalker(s, NodeFilter.SHOW_TEXT);
for (let n = walker.nextNode(); n; n = walker.nextNode()) {
  const e = n.parentElement;
  if (!n.textContent.trim() || skip(e) || e.closest('script, style, .slider-labels')) continue;
  const r = e.getBoundingClientRect();
  if (r.width === 0 || r.height === 0) continue;
  const px = parseFloat(getComputedStyle(e).fontSize) * scale;
  if (px < arguments[2] - 0.01) small.push([n.textContent.trim().slice(0, 40), px]);
}
s.querySelectorAll('*').forEach((e) => {
  if (skip(e) || e.closest('script, style')) return;
  const r = e.getBoundingClientRect();
  if (r.width === 0 || r.height === 0) return;
  if (r.bottom > box.bottom + 1 || r.right > box.right + 1 || r.left < box.left - 1)
    outside.push(`${e.tagName.toLowerCase()} ${Math.round(r.left - box.left)}–${Math.round(r.right - box.left)} × `
                 + `${Math.round(r.top - box.top)}–${Math.round(r.bottom - box.top)} px`);
});
const notes = s.querySelector('aside.notes');
return {heading: (s.querySelector('h1, h2') || {}).textContent || '',
        notes: notes ? notes.textContent.replace(/\\s+/g, ' ').trim() : '',
        text: clone.textContent.replace(/\\s+/g, ' ').trim(),
        numbers_text: values.textContent.replace(/\\s+/g, ' ').trim(),
        code: Array.from(s.querySelectorAll('pre')).map((p) => p.textContent.replace(/\\n+$/, '').split('\\n').length),
        images: Array.from(s.querySelectorAll('img')).map((img) => ({src: img.currentSrc || img.src,
          natural: img.naturalWidth, shown: img.getBoundingClientRect().width, cell: true})),
        explorers: s.querySelectorAll('.posenc-interactive-plot').length,
        small: small, outside: outside, scale: scale};
"""


def open_deck(browser, url: str) -> int:
    from selenium.webdriver.support.wait import WebDriverWait

    # the viewport, not the window, is the presenter's full screen: headless Chromium's
    # window keeps about 140 px of its height for itself, which would scale every slide
    # down by a sixth (reveal.js fits the slide into the viewport)
    browser.set_window_size(*site_goals.DECK_SIZE)
    chrome = browser.execute_script("return window.outerHeight - window.innerHeight")
    browser.set_window_size(site_goals.DECK_SIZE[0], site_goals.DECK_SIZE[1] + chrome)
    site_goals.open_page(browser, url)
    inner = browser.execute_script("return [window.innerWidth, window.innerHeight]")
    assert tuple(inner) == tuple(site_goals.DECK_SIZE), f"viewport {inner}, not the deck's size"
    WebDriverWait(browser, 20).until(
        lambda d: d.execute_script("return !!(window.Reveal && Reveal.isReady && Reveal.isReady())"),
        f"{url}: reveal.js did not start")
    browser.execute_script("Reveal.configure({transition: 'none', backgroundTransition: 'none'})")
    return browser.execute_script("return Reveal.getSlides().length")


def show(browser, index: int) -> dict:
    """Go to the index-th slide, every fragment shown (fragments are counted), and read it."""
    browser.execute_script("""
const s = Reveal.getSlides()[arguments[0]]; const i = Reveal.getIndices(s);
Reveal.slide(i.h, i.v); Reveal.layout();
s.querySelectorAll('.fragment').forEach((f) => f.classList.add('visible'));""", index)
    browser.execute_script("return document.fonts.ready.then(() => true)")
    return browser.execute_script(SLIDE_JS, *SLIDE_SIZE, SLIDE_MIN_TEXT_PX)


@pytest.fixture(scope="module")
def deck_url():
    require(bool(LECTURES), f"no lecture deck in {HTML / 'lectures'}: run `make book` (or make lecture NAME=rope)")
    with site_goals.serve(HTML) as base:
        yield base.rstrip("/")


@pytest.mark.parametrize("deck", LECTURES or ["lectures/(none built)"])
def test_every_slide_of_a_lecture_can_be_presented_as_it_is(browser, deck_url, deck):  # noqa: F811
    count = open_deck(browser, f"{deck_url}/{deck}")
    assert count > 1, f"{deck}: {count} slides"
    source = (HTML.parents[1] / lec.LECTURES / deck.split("/")[-1]).with_suffix(".md")
    names = lec.parse(source.read_text(), source.stem).names if source.exists() else ()
    problems = []
    for index in range(count):
        m = show(browser, index)
        where = f"{deck} slide {index + 1} {m['heading'].strip()[:50]!r}"
        if not m["heading"].strip():
            problems.append(f"{where}: no heading")
        if not m["notes"]:
            problems.append(f"{where}: no speaker notes")
        words = len(m["text"].split())
        if words > lec.MAX_WORDS:
            problems.append(f"{where}: {words} visible words (at most {lec.MAX_WORDS})")
        for lines in m["code"]:
            if lines > lec.MAX_CODE_LINES:
                problems.append(f"{where}: a code block of {lines} lines")
        if m["small"]:
            problems.append(f"{where}: text under {SLIDE_MIN_TEXT_PX} px: {m['small'][:3]}")
        for f in site_goals.figure_text(m["images"], SLIDE_SIZE[0]):
            if f["text_px"] is None or f["text_px"] < SLIDE_MIN_TEXT_PX:
                problems.append(f"{where}: figure text at {f['text_px']} px")
        if m["outside"]:
            problems.append(f"{where}: past the slide's {SLIDE_SIZE}: {m['outside'][:3]}")
        stray = lec.stray_numbers(m["numbers_text"] + " " + m["heading"], names)
        if stray:
            problems.append(f"{where}: numbers not from a value: {stray}")
        for said in (m["text"] + " " + m["heading"], m["notes"]):
            for pattern in lec.PAGE_REFERENCES:
                found = re.search(pattern, said, re.I)
                if found:
                    problems.append(f"{where}: refers to the page ({found.group(0)!r})")
    assert problems == []
    assert console_errors(browser) == []


@pytest.mark.parametrize("deck", LECTURES or ["lectures/(none built)"])
def test_each_explorer_in_a_lecture_moves_when_its_slider_is_clicked(browser, deck_url, deck):  # noqa: F811
    """On each slide with an explorer, a click on each slider's rail changes the state the
    figure shows to one the package computed (its spec's states), plotly.js from the site."""
    from test_site import move_each_slider

    count = open_deck(browser, f"{deck_url}/{deck}")
    moved = 0
    for index in range(count):
        if not show(browser, index)["explorers"]:
            continue
        slide = browser.execute_script("return Reveal.getCurrentSlide()")
        rails = slide.find_elements("css selector", ".posenc-interactive-plot .slider-rail-touch-rect")
        assert rails, f"{deck} slide {index + 1}: an explorer without a slider"
        moved += move_each_slider(browser, rails, f"{deck} slide {index + 1}")
    source = (HTML.parents[1] / lec.LECTURES / deck.split("/")[-1]).with_suffix(".md")
    expected = source.read_text().count("{explorer}") if source.exists() else 0
    assert expected == 0 or moved >= expected, f"{deck}: {moved} sliders moved for {expected} explorers"
    assert console_errors(browser) == []
