"""The lecture pipeline (issue 41): a chapter's figure glued with its slide drawing
(posenc.book.plotting.glue_figure), and the builder posenc.book.lecture."""

from __future__ import annotations

import base64

import matplotlib
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from posenc.book import plotting  # noqa: E402
from posenc.book.slide_figure import (  # noqa: E402
    SLIDE_FIGURE_BOX,
    SLIDE_MIN_TEXT_PX,
    slide_css_width,
    slide_png,
)


def _glued(name, fig):
    """The outputs ``glue_figure(name, fig)`` displays, captured from an IPython shell."""
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output

    InteractiveShell.instance()
    with capture_output() as captured:
        plotting.glue_figure(name, fig)
    return captured.outputs


def _book_figure(ncols=1, nrows=1, legend_outside=False):
    plotting.use_style()
    fig, axes = plotting.figure(nrows, ncols)
    for ax in fig.axes:
        ax.plot([0, 1], [0, 2], label="a line")
        ax.set(xlabel="position m", ylabel="angle (rad)", title="a title")
    if legend_outside:
        fig.axes[-1].legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return fig


def _shown_text_px(png: bytes) -> float:
    """The smallest text of a slide drawing as the deck shows it: at the width the deck
    gives the image (slide_css_width)."""
    meta = plotting.png_text_metadata(png)
    return plotting.displayed_text_px(
        meta["font_pt_min"], meta["dpi"], meta["natural_px"], slide_css_width(png)
    )


def test_glue_figure_displays_the_books_figure_and_its_slide_drawing_labelled_for_myst_nb():
    fig = _book_figure(ncols=2, legend_outside=True)
    (output,) = _glued("rope-test-figure", fig)
    # what myst_nb.glue writes (myst_nb/ext/glue/__init__.py), so that {glue} finds it
    assert output.metadata == {"scrapbook": {"name": "rope-test-figure", "mime_prefix": ""}}
    assert set(output.data) == {"text/plain", "text/html", "image/png", plotting.SLIDE_MIME}
    assert plotting.SLIDE_MIME == "application/vnd.posenc.slide-png+base64"
    assert output.data["text/html"].startswith('<picture class="posenc-figure">')
    page = plotting.png_text_metadata(base64.b64decode(output.data["image/png"]))
    assert page["font_pt_min"] == plotting.MIN_FONT_PT  # the book's drawing, unchanged
    slide = base64.b64decode(output.data[plotting.SLIDE_MIME])
    assert _shown_text_px(slide) >= SLIDE_MIN_TEXT_PX
    assert not plt.fignum_exists(fig.number)  # closed: the inline backend shows it once


@pytest.mark.parametrize("value", [0.125, "Llama 3.1", 8192, [1, 2]])
def test_glue_value_writes_what_myst_nb_glue_writes_hidden(value):
    """glue_value(name, value) is myst_nb.glue(name, value, display=False), output for
    output, without importing myst-nb (which Colab does not have)."""
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output
    from myst_nb import glue

    InteractiveShell.instance()
    with capture_output() as ours:
        plotting.glue_value("rope-test-value", value)
    with capture_output() as theirs:
        glue("rope-test-value", value, display=False)
    assert [(o.data, o.metadata) for o in ours.outputs] == [
        (o.data, o.metadata) for o in theirs.outputs]
    with pytest.raises(ValueError, match="'Rope value' is not kebab-case"):
        plotting.glue_value("Rope value", value)


@pytest.mark.parametrize("shape", [(1, 1, False), (1, 2, True), (3, 1, False), (2, 2, True)])
def test_a_slide_drawing_fits_the_slide_with_its_text_at_least_18_px(shape):
    nrows, ncols, outside = shape
    fig = _book_figure(ncols, nrows, outside)
    before = (tuple(fig.get_size_inches()), plotting.smallest_font_pt(fig))
    png = slide_png(fig)
    width = slide_css_width(png)
    meta = plotting.png_text_metadata(png)
    height = meta["natural_px"] and width * _png_height(png) / meta["natural_px"]
    assert width <= SLIDE_FIGURE_BOX[0] + 1 and height <= SLIDE_FIGURE_BOX[1] + 1
    assert _shown_text_px(png) >= SLIDE_MIN_TEXT_PX
    # it fills the box in one direction at least (a slide figure is not a thumbnail)
    assert max(width / SLIDE_FIGURE_BOX[0], height / SLIDE_FIGURE_BOX[1]) > 0.8
    # the chapter's figure is left as it was
    assert (tuple(fig.get_size_inches()), plotting.smallest_font_pt(fig)) == before
    plt.close(fig)


def _png_height(png: bytes) -> int:
    import io

    from PIL import Image

    with Image.open(io.BytesIO(png)) as image:
        return image.size[1]


def test_a_label_that_is_not_kebab_case_and_a_figure_without_text_are_refused():
    fig = _book_figure()
    with pytest.raises(ValueError, match="'Rope_Fig' is not kebab-case"):
        plotting.glue_figure("Rope_Fig", fig)
    plt.close(fig)
    bare = plt.figure()
    bare.add_subplot().set_axis_off()
    with pytest.raises(ValueError, match="no visible text"):
        slide_png(bare)
    plt.close(bare)


# --- the builder, on a fixture lecture and chapter of its own --------------------------

import re  # noqa: E402
import shutil  # noqa: E402
from pathlib import Path  # noqa: E402

from posenc.book import lecture as lec  # noqa: E402

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "lectures"
LECTURES = sorted((Path(__file__).resolve().parents[1] / "book" / "lectures").glob("*.md"))


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    """The fixture chapter executed in a kernel and stored in an execution cache of its
    own, as posenc.book.execute stores a chapter: (notebooks folder, cache folder)."""
    import nbformat
    from jupyter_cache import get_cache
    from jupyter_cache.base import CacheBundleIn
    from jupyter_cache.executors.utils import single_nb_execution

    folder = tmp_path_factory.mktemp("book")
    path = folder / "tiny_chapter.ipynb"
    shutil.copy(FIXTURES / "tiny_chapter.ipynb", path)
    result = single_nb_execution(nbformat.read(path, as_version=4), cwd=str(folder),
                                 timeout=120, allow_errors=False, meta_override=True)
    assert result.err is None, result.exc_string
    cache = folder / "cache"
    get_cache(str(cache)).cache_notebook_bundle(
        CacheBundleIn(result.nb, str(path)), check_validity=False, overwrite=True)
    return folder, cache


@pytest.fixture(scope="module")
def deck(executed, tmp_path_factory):
    notebooks, cache = executed
    out = tmp_path_factory.mktemp("html") / "lectures"
    path = lec.build("tiny", lectures=FIXTURES, notebooks=notebooks, cache_path=cache, out=out)
    return path.read_text()


def test_a_source_is_parsed_into_timed_sections_of_slides_with_notes():
    lecture = lec.load("tiny", FIXTURES)
    assert (lecture.title, lecture.minutes) == ("A tiny lecture", 10)
    assert [(s.title, s.minutes, len(s.slides)) for s in lecture.sections] == [
        ("Frequencies", 6, 2), ("Rotation", 4, 2)]
    first = lecture.slides[0]
    assert first.heading == "The slowest pair turns slowly"
    assert first.body.startswith("Pair {value}`tiny_chapter:tiny-chapter-pairs`")
    assert first.notes.startswith("A head of eight features") and "Note:" not in first.body
    # a '#' inside a code block is code, not a section
    code = lec.parse("---\ntitle: t\nminutes: 1\n---\n# S {minutes=1}\n## H\n```python\n"
                     "# a comment\nx = 1\n```\nNote:\nsaid\n")
    assert len(code.sections) == 1 and "# a comment" in code.slides[0].body


def test_the_deck_shows_the_chapters_values_figure_and_explorer(deck, executed):
    import base64

    from posenc.book.interactive import SITE_SCRIPT

    # the value is the chapter's text, as it formatted it: 10000^(-6/8), 4 decimals
    assert f'<span class="posenc-value">{10000 ** (-6 / 8):.4f}</span>' in deck
    assert '<span class="posenc-value">4</span>' in deck  # len(inv_freq) for head_dim 8
    # the figure is the chapter's slide drawing, shown at its CSS width
    notebooks, cache = executed
    glued = lec.Outputs(notebooks, cache).get("tiny_chapter:tiny-chapter-inv-freq", "figure")
    png = base64.b64decode(glued[plotting.SLIDE_MIME])
    img = re.search(r'<img class="posenc-slide-figure" src="data:image/png;base64,([^"]+)" '
                    r'width="(\d+)"', deck)
    assert base64.b64decode(img.group(1)) == png
    assert int(img.group(2)) == round(slide_css_width(png))
    # the explorer: every state precomputed, plotly.js from the built site
    assert f'src="{SITE_SCRIPT}"' in deck or SITE_SCRIPT in deck
    spec = re.search(r'<script type="application/json" id="posenc-fig-rope_rotation-spec">'
                     r"(.*?)</script>", deck, re.S)
    import json

    spec = json.loads(spec.group(1))
    from posenc.book.explorers import rope_rotation

    assert spec["states"] == json.loads(json.dumps(rope_rotation().states))
    assert spec["layout"]["height"] == lec.EXPLORER_PX
    fonts = []

    def walk(node):
        if isinstance(node, dict):
            if isinstance(node.get("font"), dict) and "size" in node["font"]:
                fonts.append(node["font"]["size"])
            [walk(v) for v in node.values()]
        elif isinstance(node, list):
            [walk(v) for v in node]
    walk(spec["layout"])
    assert min(f for f in fonts if f > 8) >= SLIDE_MIN_TEXT_PX  # 6: hidden step labels


def test_the_deck_is_reveal_js_with_notes_stacks_and_the_sites_scripts(deck):
    assert deck.count('<aside class="notes">') == 1 + 4  # the title slide and 4 slides
    # each section is a vertical stack: a <section> holding its slides' <section>s
    stacks = re.findall(r'<section data-posenc-section="([^"]+)">', deck)
    assert stacks == ["Frequencies", "Rotation"]
    for asset in ("../_static/reveal.js/dist/reveal.js", "../_static/mathjax/es5/tex-chtml.js",
                  "../_static/reveal.js/plugin/notes/notes.js"):
        assert f'src="{asset}"' in deck
    assert "width: 1280, height: 800, margin: 0" in deck
    assert r"\[\theta_i = b^{-2i/d}\]" in deck  # math for MathJax, untouched
    assert "http://" not in deck and "https://" not in deck  # offline


def test_an_unknown_label_is_refused_naming_the_label_and_the_notebook(executed):
    notebooks, cache = executed
    outputs = lec.Outputs(notebooks, cache)
    with pytest.raises(lec.LectureError, match=r"book/tiny_chapter.ipynb glues no label "
                       r"'tiny-chapter-missing'"):
        outputs.value("tiny_chapter:tiny-chapter-missing")
    with pytest.raises(lec.LectureError, match="no slide drawing"):
        outputs.figure("tiny_chapter:tiny-chapter-pairs")  # a value, not glue_figure
    with pytest.raises(lec.LectureError, match="'notebook:kebab-case-label'"):
        outputs.value("tiny-chapter-pairs")
    with pytest.raises(lec.LectureError, match="has no nope"):
        lec.explorer_html("nope")


def test_a_chapter_missing_from_the_cache_says_build_the_book_first(executed, tmp_path):
    notebooks, _ = executed
    outputs = lec.Outputs(notebooks, tmp_path / "empty-cache")
    with pytest.raises(lec.LectureError, match=r"tiny_chapter.ipynb has no outputs .*"
                       r"build the book first"):
        outputs.value("tiny_chapter:tiny-chapter-pairs")


def _one_slide(body, notes="Said aloud.", minutes=1, total=1):
    return lec.parse(f"---\ntitle: t\nminutes: {total}\n---\n# S {{minutes={minutes}}}\n"
                     f"## A heading\n{body}\n" + (f"Note:\n{notes}\n" if notes else ""))


@pytest.mark.parametrize("body, notes, minutes, found", [
    ("Fine words.", "Said.", 2, "minutes add up to 2, not 1"),
    ("Fine words.", "", 1, "no speaker notes"),
    (" ".join(["word"] * 41), "Said.", 1, "41 visible words"),
    ("```python\n" + "x = 1\n" * 9 + "```", "Said.", 1, "a code block of 9 lines"),
    ("The error is 0.003 here.", "Said.", 1, "numbers not from a {value}: ['0.003']"),
    ("Read the figure below.", "Said.", 1, "refers to the page ('the figure below')"),
    ("As shown above, it turns.", "Said.", 1, "refers to the page ('shown above')"),
    ("Fine.", "Open the dropdown.", 1, "refers to the page ('dropdown')"),
    ("Fine.", "The proof is folded.", 1, "refers to the page ('folded')"),
    ("Fine.", "As in this chapter.", 1, "refers to the page ('this chapter')"),
])
def test_the_lecture_rules_find_what_breaks_them(body, notes, minutes, found):
    problems = lec.problems(_one_slide(body, notes, minutes=minutes))
    assert any(found in p for p in problems), problems
    assert len(problems) == 1


def test_what_the_rules_allow():
    # 40 words, 8 lines of code, numbers in values, math, code and proper names
    ok = _one_slide(" ".join(["word"] * 37) + " {value}`rope:rope-x` in Llama 3",
                    "Said.")
    assert lec.problems(ok) == []
    ok = _one_slide("```python\n" + "x = 2\n" * 8 + "```\n\n$$b^{-2i/d}$$ for Qwen3")
    assert lec.problems(ok) == []
    # below and above that compare, not point at the page
    ok = _one_slide("Wavelengths below L stay; pairs above the dashed line never turn.",
                    "The score is printed above the plot.")
    assert lec.problems(ok) == []
    # a lecture's own names with digits, from its front matter, and only in that lecture
    named = "---\ntitle: t\nminutes: 1\nnames: [Transformer-XL 2]\n---\n# S {minutes=1}\n"
    body = "## A heading\nTransformer-XL 2 caches.\nNote:\nSaid.\n"
    assert lec.parse(named + body).names == ("Transformer-XL 2",)
    assert lec.problems(lec.parse(named + body)) == []
    assert "numbers not from a {value}: ['2']" in lec.problems(_one_slide(
        "Transformer-XL 2 caches."))[0]
    with pytest.raises(lec.LectureError, match="needs its minutes"):
        lec.parse("---\ntitle: t\nminutes: 1\n---\n# S\n## H\n")
    with pytest.raises(lec.LectureError, match="the front matter has no 'minutes'"):
        lec.parse("---\ntitle: t\n---\n# S {minutes=1}\n")


def test_fragments_show_on_the_next_click_and_their_words_count():
    """`[words]{.fragment}` and a `{.fragment}` line before a block become reveal.js
    fragments; the word limit counts them (issue 41: fragments counted)."""
    slide = _one_slide("- asked: [answered]{.fragment}\n\n{.fragment}\nA second step.")
    html_ = lec.render_slide(slide.slides[0], outputs=None)
    assert '<li>asked: <span class="fragment">answered</span></li>' in html_
    assert '<p class="fragment">A second step.</p>' in html_
    long = _one_slide(" ".join(["word"] * 39) + " [two more]{.fragment}")
    assert lec.problems(long) == [
        "line 6 'A heading': 41 visible words (at most 40)"
    ]


@pytest.mark.parametrize("path", [FIXTURES / "tiny.md", *LECTURES], ids=lambda p: p.stem)
def test_every_lecture_keeps_the_rules(path):
    """The rules on every lecture of book/lectures (and the fixture): minutes, heading
    and notes, words, code lines, numbers from values, no page references."""
    lecture = lec.parse(path.read_text(), path.stem)
    assert lec.problems(lecture) == []


@pytest.mark.parametrize("text, said", [
    ("131072", "131,072"), ("5e-06", "5 × 10⁻⁶"), ("1.5e-05", "1.5 × 10⁻⁵"),
    ("1e+20", "1 × 10²⁰"), ("8192", "8192"), ("0.9163", "0.9163"), ("×3.0", "×3.0"),
])
def test_a_glued_number_is_written_as_a_slide_says_it(text, said):
    assert lec.readable_number(text) == said


def test_the_teaching_pages_course_is_the_lectures_in_order_with_their_minutes():
    """The course table of book/teaching.md names every lecture of book/lectures once, with the
    title and minutes of its front matter, and the course's stated total is their sum."""
    root = Path(__file__).resolve().parents[1]
    page = (root / "book" / "teaching.md").read_text()
    rows = re.findall(r"^\| (\d+) \| ([^|]+?) \| (\d+) min \|", page, re.M)
    lectures = {lec.load(p.stem, p.parent).title: lec.load(p.stem, p.parent)
                for p in LECTURES}
    assert [int(n) for n, _, _ in rows] == list(range(1, len(lectures) + 1))
    assert sorted(title for _, title, _ in rows) == sorted(lectures)
    for _, title, minutes in rows:
        assert int(minutes) == lectures[title].minutes, title
    total = re.search(r"a course on positions of (\d+) minutes", page)
    assert total and int(total.group(1)) == sum(x.minutes for x in lectures.values())
    for number, title, minutes in rows:
        assert f"### Lecture {number}: {title} — {minutes} minutes" in page
