"""The lecture kit, checked on the sources: every chapter of _toc.yml carries slide metadata (a title
slide, one idea per slide, fragments for derivation steps, speaker notes), has 2–4 exercises whose
solutions are collapsed and end in a check, has a lecture plan with its deck on the teaching page,
and converts to a deck with no MyST left over. The decks themselves are opened in a browser by
test_site.py; the solutions run in test_clean_env.py and under nbval."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import nbformat
import pytest

from test_notebooks import chapters

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "book" / "_slides"))
import posenc_slides  # noqa: E402

CHAPTERS = chapters()
SLIDE_TYPES = {"slide", "subslide", "fragment", "-", "skip", "notes"}


def read(chapter):
    return nbformat.read(ROOT / f"{chapter}.ipynb", as_version=4)


def slide_type(cell):
    return cell.metadata.get("slideshow", {}).get("slide_type")


def first_line(cell):
    return cell.source.lstrip().split("\n", 1)[0]


def exercises(nb):
    """(label, [solution cells]) for every exercise, from the gated solution directives."""
    found, current = [], None
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for kind, label in re.findall(r"```\{(solution-start|solution-end)\}\s*(\S*)", cell.source):
                current = (label, []) if kind == "solution-start" else None
                if current:
                    found.append(current)
        elif current is not None:
            current[1].append(cell)
    return found


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_cell_has_a_slide_type(chapter):
    nb = read(chapter)
    types = [slide_type(c) for c in nb.cells]
    assert set(types) <= SLIDE_TYPES and None not in types, set(types)
    assert types[0] == "slide" and nb.cells[0].source.startswith("# "), "the deck opens on the chapter's title"


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_one_idea_per_slide(chapter):
    """Each section heading opens its own slide (## ) or sub-slide (### ), and no cell holds two."""
    for cell in read(chapter).cells:
        if cell.cell_type != "markdown" or slide_type(cell) == "notes":
            continue
        headings = [line for line in cell.source.split("\n") if re.match(r"#{1,3} ", line)]
        fenced = re.sub(r"```.*?```", "", cell.source, flags=re.S)
        assert len(re.findall(r"^#{1,3} ", fenced, flags=re.M)) <= 1, f"two headings in one cell: {headings}"
        line = first_line(cell)
        if line.startswith("## ") and line != "## References":
            assert slide_type(cell) == "slide", line
        if line.startswith("### "):
            assert slide_type(cell) == "subslide", line


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_speaker_notes_for_the_title_and_every_section(chapter):
    nb = read(chapter)
    sections, noted = [], set()
    current = "#"
    for cell in nb.cells:
        line = first_line(cell)
        if cell.cell_type == "markdown" and slide_type(cell) != "notes" and (line.startswith("## ") or line.startswith("# ")):
            current = "#" if line.startswith("# ") else line
            if current != "## References":
                sections.append(current)
        if slide_type(cell) == "notes":
            assert cell.cell_type == "markdown" and "remove-cell" in cell.metadata.get("tags", []), \
                "speaker notes are Markdown cells hidden from the site (tag remove-cell)"
            assert len(cell.source.split()) >= 6, "a note says something"
            noted.add(current)
    assert set(sections) - noted == set(), "sections without speaker notes"


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_derivation_steps_are_fragments(chapter):
    nb = read(chapter)
    derivations = [c for c in nb.cells if c.cell_type == "code" and "assert" in c.source and re.search(r"\bsp\.", c.source)]
    if derivations:
        assert any(slide_type(c) == "fragment" for c in derivations)


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_exercises_and_collapsed_solutions(chapter):
    nb = read(chapter)
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    labels = re.findall(r"```\{exercise\}\n:label: (\S+)", text)
    assert 2 <= len(labels) <= 4, f"{len(labels)} exercises"
    found = exercises(nb)
    assert [label for label, _ in found] == labels, "one solution per exercise, in order"
    for label in labels:
        start = re.search(r"```\{solution-start\} " + re.escape(label) + r"\n((?::[^\n]*\n)*)", text)
        assert ":class: dropdown" in start.group(1), f"{label}: solution not collapsed"
    for label, cells in found:
        assert all(slide_type(c) == "skip" for c in cells), f"{label}: solutions stay out of the decks"
        for cell in cells:
            if cell.cell_type == "code":
                assert re.search(r"^\s*assert ", cell.source, flags=re.M), f"{label}: a code solution checks its answer"


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_converts_to_a_deck_without_myst(chapter):
    nb, _ = posenc_slides.BookToSlides(merge_outputs=False).preprocess(read(chapter), {})
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            assert not re.search(r"```\{|:::\{|\{[\w:-]+\}`", cell.source), cell.source[:200]
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    if "literalinclude" in "\n".join(c.source for c in read(chapter).cells):
        assert "def " in code or "class " in code, "the package's source is shown in the deck"
    assert not [c for c in nb.cells if "remove-cell" in c.metadata.get("tags", []) and slide_type(c) != "notes"]


def test_literalinclude_finds_methods_and_functions():
    source = posenc_slides.python_object_source(ROOT / "src" / "posenc" / "rope.py", "apply_rope")
    assert source.startswith("def apply_rope(") and source.rstrip().endswith(source.rstrip().split("\n")[-1])
    method = posenc_slides.python_object_source(ROOT / "src" / "posenc" / "rope.py", "RotaryScheme.transform_qk")
    assert method.lstrip().startswith("def transform_qk(")


def test_citations_read_as_author_year():
    cite = posenc_slides.Citations(ROOT / "book" / "references.bib")
    assert cite("footcite:p", "su2024roformer") == "(Su et al., 2024)"
    assert cite("footcite:t", "vaswani2017attention") == "Vaswani et al. (2017)"


def test_teaching_page_plans_every_chapter():
    text = (ROOT / "book" / "teaching.md").read_text()
    for chapter in CHAPTERS:
        name = Path(chapter).name
        assert f"../slides/{name}.slides.html" in text, f"no deck link for {name}"
        assert f"]({name}.ipynb)" in text, f"no lecture plan for {name}"
    plans = text.split("## Lecture plans", 1)[1].split("\n## ", 1)[0]
    assert plans.count("**Objectives.**") == plans.count("**Live demos.**") == plans.count("**Assign.**") == len(CHAPTERS)
    assert len(re.findall(r"^### .+ — \d+ minutes", plans, flags=re.M)) == len(CHAPTERS)
    # chapters are named, not numbered: numbers shift when a chapter is added or split
    assert not re.findall(r"^### \d+\. ", text, flags=re.M)


def test_every_literalinclude_of_a_cell_reaches_the_deck():
    """Two literalincludes with start-at/end-before in one cell: the first used to overwrite
    the loop's own `lines`, and the second block (and all after it) vanished from the deck."""
    from posenc_slides import myst_to_markdown

    block = "```{{literalinclude}} ../src/posenc/rope.py\n:start-at: {}\n:end-before: {}\n```"
    cell = "\n\n".join([
        "First:", block.format("def rotate_half", "def rotate_interleaved"),
        "Second:", block.format("def rotate_interleaved", "def _check_positions"),
        "After both.",
    ])
    out = myst_to_markdown(cell, lambda *a: "")
    assert out.count("```python") == 2
    assert "def rotate_half" in out and "def rotate_interleaved" in out and "After both." in out
