"""The lecture handout (posenc.book.handout, issue 41).

The notes page, read back with BeautifulSoup: the lecture's title, each section with its
minutes, every slide's heading and speaker notes in the source's order, Markdown rendered and
values resolved as the deck's slides show them (the fixture lecture of tests/test_lecture.py,
and every built lecture against its built deck). The PDF (``-m site``: it needs Chromium, like
tests/test_site.py): one page per slide and the title, none taller than the deck's 1280 × 800,
read back from the PDF's own page objects (pypdf is not in .venv) and, where poppler's
pdftotext is installed, its text: the slides' headings, not the speaker notes. Without
Chromium the PDF step says what to install and the command exits non-zero, the notes page
written first.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from bs4 import BeautifulSoup
from test_lecture import FIXTURES, executed  # noqa: F401 (fixture)

from posenc.book import handout
from posenc.book import lecture as lec
from posenc.book.slide_figure import SLIDE_SIZE

ROOT = Path(__file__).resolve().parents[1]
HTML = ROOT / "_build" / "html"
BUILT = sorted(p.stem for p in (HTML / "lectures").glob("*.html")
               if not p.stem.endswith("-notes") and (ROOT / lec.LECTURES / f"{p.stem}.md").exists())


def words(text: str) -> str:
    return " ".join(text.split())


def read_notes(path: Path) -> dict:
    """The notes page as a reader finds it: title, (section, minutes), and per slide its
    heading, the deck link of the heading, the notes' text and their element."""
    soup = BeautifulSoup(path.read_text(), "html.parser")
    sections = []
    for section in soup.select("section.posenc-notes-section"):
        h2 = section.find("h2")
        minutes = h2.select_one(".posenc-minutes")
        sections.append((words(h2.get_text().replace(minutes.get_text(), "")), minutes.get_text()))
    slides = [{"heading": words(a.find("h3").find("a").get_text()),
               "number": int(a.select_one("h3 .posenc-slide-number").get_text()),
               "href": a.find("h3").find("a")["href"],
               "notes": words(a.select_one(".posenc-notes").get_text()),
               "element": a.select_one(".posenc-notes")}
              for a in soup.select("article.posenc-notes-slide")]
    return {"title": words(soup.find("h1").get_text()), "sections": sections, "slides": slides,
            "soup": soup}


def test_the_notes_page_holds_every_slides_heading_and_notes_in_order(executed, tmp_path):  # noqa: F811
    notebooks, cache = executed
    path = handout.build_notes("tiny", lectures=FIXTURES, notebooks=notebooks, cache_path=cache,
                               out=tmp_path)
    assert path == tmp_path / "tiny-notes.html"
    page = read_notes(path)
    lecture = lec.load("tiny", FIXTURES)
    assert page["title"] == "A tiny lecture" == lecture.title
    assert page["sections"] == [("Frequencies", "6 min"), ("Rotation", "4 min")]
    assert [s["heading"] for s in page["slides"]] == [
        "The slowest pair turns slowly", "One frequency per pair", "Turn them yourself",
        "The rotation in code"]
    # the fixture's notes are plain prose: the page shows them word for word, in order
    assert [s["notes"] for s in page["slides"]] == [words(s.notes) for s in lecture.slides]
    # numbered as the deck (slideNumber "c") and the PDF count them: the title slide is 1
    assert [s["number"] for s in page["slides"]] == list(range(2, len(lecture.slides) + 2))
    assert page["slides"][0]["notes"].startswith("A head of eight features has four pairs")
    # each heading opens its slide in the deck (reveal.js's #/h/v; slide 0 is the title)
    assert [s["href"] for s in page["slides"]] == [
        "tiny.html#/1/0", "tiny.html#/1/1", "tiny.html#/2/0", "tiny.html#/2/1"]
    soup = page["soup"]
    assert soup.find("meta", attrs={"name": "viewport"})["content"].startswith("width=device-width")
    assert soup.find("script", src="../_static/mathjax/es5/tex-chtml.js")  # the site's, offline
    assert "http://" not in path.read_text() and "https://" not in path.read_text()
    assert [a["href"] for a in soup.select("header > p a")] == ["tiny.html", "tiny.pdf"]
    assert [a["href"] for a in soup.select("header nav a")] == ["#section-1", "#section-2"]


def test_the_notes_resolve_values_and_render_markdown_as_the_slide_does(executed, tmp_path):  # noqa: F811
    notebooks, cache = executed
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "valued.md").write_text(
        "---\ntitle: Valued\nminutes: 3\n---\n# One {minutes=3}\n## A value in the notes\n"
        "Fine.\n\nNote:\nThe slowest pair turns by {value}`tiny_chapter:tiny-chapter-slowest` "
        "radians, *slowly*, as $b^{-2i/d}$ says.\n\nA second paragraph.\n")
    path = handout.build_notes("valued", lectures=tmp_path / "src", notebooks=notebooks,
                               cache_path=cache, out=tmp_path)
    notes = read_notes(path)["slides"][0]["element"]
    # the chapter's value as it formatted it: inv_freq[-1] = 10000^(-6/8) for head_dim 8
    assert notes.select_one("span.posenc-value").get_text() == f"{10000 ** (-6 / 8):.4f}"
    assert notes.find("em").get_text() == "slowly"
    assert [words(p.get_text()) for p in notes.find_all("p")][1] == "A second paragraph."
    assert r"\(b^{-2i/d}\)" in notes.get_text()  # left for MathJax, as on a slide
    assert "{value}" not in notes.get_text() and "`" not in notes.get_text()
    # the same HTML the deck's speaker notes hold for that slide
    lecture = lec.load("valued", tmp_path / "src")
    deck = lec.render_slide(lecture.slides[0], lec.Outputs(notebooks, cache))
    aside = BeautifulSoup(deck, "html.parser").select_one("aside.notes")
    assert words(aside.get_text()) == words(notes.get_text())


def test_an_unknown_label_in_the_notes_is_refused_naming_it(executed, tmp_path):  # noqa: F811
    notebooks, cache = executed
    (tmp_path / "bad.md").write_text(
        "---\ntitle: Bad\nminutes: 1\n---\n# One {minutes=1}\n## H\nFine.\n\nNote:\n"
        "It is {value}`tiny_chapter:tiny-chapter-nowhere`.\n")
    with pytest.raises(lec.LectureError, match="glues no label 'tiny-chapter-nowhere'"):
        handout.build_notes("bad", lectures=tmp_path, notebooks=notebooks, cache_path=cache,
                            out=tmp_path)


def _deck_slides(deck: Path) -> list[tuple[str, str]]:
    """(heading, notes text) of every slide of a built deck, the title slide aside."""
    soup = BeautifulSoup(deck.read_text(), "html.parser")
    slides = [s for s in soup.select(".slides section")
              if not s.find("section") and "posenc-title" not in (s.get("class") or [])]
    return [(words(s.find("h2").get_text()), words(s.select_one("aside.notes").get_text()))
            for s in slides]


@pytest.mark.parametrize("name", BUILT or ["(none built)"])
def test_a_built_lectures_notes_page_holds_its_decks_notes_in_order(name):
    from test_site import require

    require(bool(BUILT), f"no lecture deck in {HTML / 'lectures'}: run `make book` "
                         "(or make lecture NAME=rope)")
    notes = HTML / "lectures" / f"{name}-notes.html"
    require(notes.exists(), f"no {notes}: run `make book` (or make handout NAME={name})")
    page = read_notes(notes)
    lecture = lec.load(name)
    assert page["title"] == lecture.title
    assert page["sections"] == [(s.title, f"{s.minutes} min") for s in lecture.sections]
    assert [s["heading"] for s in page["slides"]] == [s.heading for s in lecture.slides]
    deck = _deck_slides(HTML / "lectures" / f"{name}.html")
    assert [(s["heading"], s["notes"]) for s in page["slides"]] == deck
    assert all(s["notes"] for s in page["slides"])


def test_without_chromium_the_pdf_step_says_what_to_install(executed, tmp_path, monkeypatch,  # noqa: F811
                                                            capsys):
    """A repository of the fixture lecture (its source, chapter, cache and built deck), and a
    PATH with no browser: the command writes the notes page, then stops on the PDF."""
    notebooks, cache = executed
    (tmp_path / "book" / "lectures").mkdir(parents=True)
    shutil.copy(FIXTURES / "tiny.md", tmp_path / "book" / "lectures" / "tiny.md")
    shutil.copy(notebooks / "tiny_chapter.ipynb", tmp_path / "book" / "tiny_chapter.ipynb")
    shutil.copytree(cache, tmp_path / "_build" / ".jupyter_cache")
    monkeypatch.setattr(lec, "ROOT", tmp_path)
    monkeypatch.setattr(handout, "ROOT", tmp_path)
    lec.build("tiny")
    (tmp_path / "empty").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(handout.ChromiumMissing, match="chromium and chromium-driver"):
        handout.build_pdf("tiny")
    assert handout.main(["tiny"]) == 3
    err = capsys.readouterr().err
    assert "apt-get install chromium chromium-driver" in err and "--notes-only" in err
    lectures = tmp_path / "_build" / "html" / "lectures"
    assert (lectures / "tiny-notes.html").exists() and not (lectures / "tiny.pdf").exists()
    assert handout.main(["--notes-only", "tiny"]) == 0


def test_a_pdf_without_a_built_deck_says_build_it_first(tmp_path):
    with pytest.raises(handout.HandoutError, match=r"no deck .*make lecture NAME=tiny"):
        handout.build_pdf("tiny", lectures=FIXTURES, html_dir=tmp_path)


# --- the PDF, in Chromium -------------------------------------------------------------------


def pdf_pages(data: bytes) -> list[tuple[float, float]]:
    """(width, height) in points of every page of a PDF Chromium wrote (Skia: page objects in
    plain text, no object streams), from each ``/Type /Page`` object's ``/MediaBox``."""
    assert b"/ObjStm" not in data, "object streams: read this PDF with pypdf"
    sizes = []
    for obj in re.findall(rb"\d+ 0 obj\s*<<(.*?)>>\s*endobj", data, re.DOTALL):
        if re.search(rb"/Type\s*/Page(?![a-zA-Z])", obj):
            box = re.search(rb"/MediaBox\s*\[\s*([\d.\s-]+)\]", obj)
            x0, y0, x1, y1 = map(float, box.group(1).split())
            sizes.append((x1 - x0, y1 - y0))
    return sizes


@pytest.mark.site
@pytest.mark.parametrize("name", BUILT or ["(none built)"])
def test_the_pdf_has_one_page_per_slide_at_the_decks_aspect(name, tmp_path):
    from test_site import require

    require(bool(BUILT), f"no lecture deck in {HTML / 'lectures'}: run `make book` "
                         "(or make lecture NAME=rope)")
    pytest.importorskip("selenium.webdriver")
    if not all(handout._site_goals().chromium_paths()):
        pytest.skip("Chromium or chromedriver is not installed: install Debian's chromium and "
                    "chromium-driver")
    path = handout.build_pdf(name, out=tmp_path)
    data = path.read_bytes()
    assert data.startswith(b"%PDF-")
    lecture = lec.load(name)
    sizes = pdf_pages(data)
    assert len(sizes) == 1 + len(lecture.slides), f"{len(sizes)} pages for the title and " \
        f"{len(lecture.slides)} slides"
    width, height = SLIDE_SIZE
    for number, (w, h) in enumerate(sizes, 1):
        assert h / w <= height / width + 1e-3, f"page {number} is {w} × {h} pt"
        assert w == pytest.approx(width * 72 / 96, abs=1)  # CSS px at 96 to the inch, in pt
    if shutil.which("pdftotext"):
        text = subprocess.run(["pdftotext", "-layout", str(path), "-"], capture_output=True,
                              text=True, check=True).stdout
        pages = text.split("\f")
        assert words(lecture.title) in words(pages[0])
        for page, slide in zip(pages[1:], lecture.slides):
            assert words(slide.heading)[:30] in words(page), f"{slide.heading!r} not on its page"
        first_notes = words(lecture.slides[0].notes)[:60]
        assert first_notes not in words(text), "speaker notes in the PDF"
