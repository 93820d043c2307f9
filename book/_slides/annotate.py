"""Give a chapter notebook its slide structure: the authoring helper behind the lecture decks.

    python book/_slides/annotate.py book/NEW_CHAPTER.ipynb   [--force]

What it does, in place:
- splits Markdown cells at top-level headings and at exercise/solution directives, so that each
  cell holds one idea (the site renders split cells exactly as before);
- gives every cell a ``slideshow.slide_type`` (Jupyter's slideshow metadata, read by nbconvert):
  the ``# title`` cell and every ``##`` section open a slide, ``###`` sections and exercises open a
  sub-slide, SymPy steps that end in an assert are fragments (revealed one click at a time), the
  install cell, solutions and the reference list are skipped, and a slide that would overflow
  continues on a sub-slide;
- keeps the slide type a cell already has unless ``--force`` is given, and never writes speaker
  notes: those are Markdown cells with ``slide_type: notes`` and the ``remove-cell`` tag (so the
  site does not show them), written by the author. ``tests/test_slides.py`` checks the result.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import nbformat

SPLIT_BEFORE = re.compile(r"^(#{2,3} |```\{(exercise|solution-start|solution-end|footbibliography)\})")
FENCE = re.compile(r"^(`{3,}|:{3,})")
# Lines a 960×700 reveal.js slide holds at the decks' font size, counted as in estimate_lines.
SLIDE_LINES = 22


def split_markdown(source: str) -> list[str]:
    """Split Markdown before every top-level ``##``/``###`` heading and exercise/solution fence.

    Lines inside a fenced block (``` or :::) or a ``$$`` display are never split points.
    """
    chunks: list[list[str]] = [[]]
    fence: str | None = None
    in_math = False
    for line in source.split("\n"):
        top_level = fence is None and not in_math
        if top_level and SPLIT_BEFORE.match(line) and any(s.strip() for s in chunks[-1]):
            chunks.append([])
        chunks[-1].append(line)
        match = FENCE.match(line)
        if fence is None and not in_math and match:
            fence = match.group(1)
        elif fence is not None and line.strip() == fence:
            fence = None
        elif fence is None and line.strip().startswith("$$"):
            if line.strip() == "$$" or not (line.strip().endswith("$$") and len(line.strip()) > 2):
                in_math = not in_math
    return ["\n".join(chunk).strip("\n") for chunk in chunks if "".join(chunk).strip()]


def estimate_lines(cell) -> int:
    """A rough slide height of a cell in text lines (a figure counts as 12)."""
    source = cell.source
    if cell.cell_type == "markdown":
        return sum(max(1, -(-len(line) // 90)) for line in source.split("\n")) + 1
    tags = cell.metadata.get("tags", [])
    shown_input = 0 if {"remove-input", "hide-input"} & set(tags) else source.count("\n") + 1
    figure = 12 if re.search(r"plt\.|plot|heatmap|imshow", source) else 0
    table = 8 if "Markdown(" in source else 0
    printed = 2 * source.count("print(")
    return shown_input + figure + table + printed + 1


def is_derivation_step(cell) -> bool:
    return cell.cell_type == "code" and "assert" in cell.source and re.search(r"\bsp\.|symbolic\.", cell.source) is not None


def annotate(nb, force: bool = False):
    cells = []
    for cell in nb.cells:
        if cell.cell_type == "markdown" and cell.metadata.get("slideshow", {}).get("slide_type") != "notes":
            for chunk in split_markdown(cell.source):
                new = nbformat.v4.new_markdown_cell(chunk, metadata=dict(cell.metadata))
                cells.append(new)
        else:
            cells.append(cell)
    in_solution = in_references = False
    height = 0
    for index, cell in enumerate(cells):
        first_line = cell.source.lstrip().split("\n", 1)[0]
        lines = estimate_lines(cell)
        if cell.metadata.get("slideshow", {}).get("slide_type") == "notes":
            continue
        if first_line.startswith("```{solution-start}"):
            in_solution = True
        if first_line.startswith("## "):
            in_references = first_line.strip() == "## References"
        if index == 0:
            kind = "slide"
        elif in_solution or in_references or "POSENC_INSTALL_SOURCE" in cell.source:
            kind = "skip"
        elif first_line.startswith("## ") or first_line.startswith(":::{admonition} In this chapter"):
            kind = "slide"
        elif first_line.startswith("### ") or first_line.startswith("```{exercise}"):
            kind = "subslide"
        elif height + lines > SLIDE_LINES:
            kind = "subslide"
        elif is_derivation_step(cell):
            kind = "fragment"
        else:
            kind = "-"
        if first_line.startswith("```{solution-end}"):
            in_solution = False
        if kind in ("slide", "subslide"):
            height = lines
        elif kind != "skip":
            height += lines
        if force or "slide_type" not in cell.metadata.get("slideshow", {}):
            cell.metadata.setdefault("slideshow", {})["slide_type"] = kind
    for cell in cells:
        cell.pop("id", None)
    nb.cells = cells
    return nb


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--force", action="store_true", help="recompute slide types that are already set")
    args = parser.parse_args()
    for path in args.notebooks:
        nb = nbformat.read(path, as_version=4)
        annotate(nb, force=args.force)
        for number, cell in enumerate(nb.cells):
            cell["id"] = f"c{number:03d}"
        nbformat.write(nb, path)
        print(f"{path}: {len(nb.cells)} cells")


if __name__ == "__main__":
    main()
