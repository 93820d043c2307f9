"""What the lecture decks need beyond stock nbconvert (used by nbconvert_config.py).

The slide structure is the notebooks' own slideshow metadata (annotate.py writes a first version).
The preprocessor BookToSlides turns the book's MyST Markdown into the plain Markdown that nbconvert
renders — directives, roles, citations, literalinclude of the package's real source — and applies
the book's cell tags (remove-input, remove-stderr, ...) to the deck.
"""

from __future__ import annotations

import ast
import json
import re
import textwrap
from pathlib import Path

from nbconvert.preprocessors import Preprocessor
from traitlets import Bool
from pybtex.database import parse_file
from sphinx_external_toc.parsing import parse_toc_yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
BOOK = ROOT / "book"


def chapter_notebooks() -> list[str]:
    """The notebook of every chapter listed in _toc.yml, in book order: every notebook but
    the reference pages (metadata ``posenc.kind: reference``, tests/test_notebooks.py),
    which have no deck."""
    files = parse_toc_yaml(str(ROOT / "_toc.yml")).keys()
    paths = [ROOT / f"{name}.ipynb" for name in files if (ROOT / f"{name}.ipynb").exists()]
    return [str(p) for p in paths
            if json.loads(p.read_text()).get("metadata", {}).get("posenc", {}).get("kind", "chapter") == "chapter"]


def with_outputs(nb, path: str = "the notebook"):
    """The notebook with the outputs the book build stored for it in its execution cache
    (jupyter-cache, _build/.jupyter_cache): the decks show exactly what the site shows."""
    from posenc.book.lecture import merged_outputs  # the lectures read the cache the same way

    try:
        return merged_outputs(nb, ROOT / "_build" / ".jupyter_cache")
    except LookupError:
        raise RuntimeError(f"{path} has no outputs in _build/.jupyter_cache: build the book (make book) first, "
                           "then the slides") from None


def python_object_source(path: Path, name: str, *, docstring: bool = True) -> str:
    """Source of a top-level function or class (or Class.method) of a Python file, like Sphinx's
    literalinclude :pyobject:; without its docstring when ``docstring`` is False (a deck shows
    the code, the site the whole listing)."""
    text = path.read_text()
    body = ast.parse(text).body
    node = None
    for part in name.split("."):
        node = next(n for n in body if isinstance(n, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)) and n.name == part)
        body = node.body
    lines = text.split("\n")
    start = min([node.lineno] + [d.lineno for d in node.decorator_list]) - 1
    selected = list(range(start, node.end_lineno))
    first = node.body[0] if node.body else None
    if (not docstring and isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
            and isinstance(first.value.value, str) and len(node.body) > 1):
        dropped = set(range(first.lineno - 1, first.end_lineno))
        selected = [i for i in selected if i not in dropped]
    return "\n".join(lines[i] for i in selected)


class Citations:
    """Author–year text for the book's citation keys, read from book/references.bib."""

    def __init__(self, bibfile: Path):
        self.entries = parse_file(str(bibfile)).entries

    def names(self, key: str) -> tuple[str, str]:
        entry = self.entries[key.strip()]
        people = entry.persons.get("author", [])
        last = " ".join(people[0].last_names).replace("{", "").replace("}", "") if people else key
        who = last + (" et al." if len(people) > 2 else f" and {' '.join(people[1].last_names)}" if len(people) == 2 else "")
        return who, entry.fields.get("year", "")

    def __call__(self, role: str, keys: str) -> str:
        parts = [self.names(k) for k in keys.split(",")]
        if role.endswith(":t"):
            return "; ".join(f"{who} ({year})" for who, year in parts)
        return "(" + "; ".join(f"{who}, {year}" for who, year in parts) + ")"


FENCE_OPEN = re.compile(r"^(?P<fence>`{3,}|:{3,})\{(?P<name>[\w:-]+)\}\s*(?P<argument>.*)$")
ROLE = re.compile(r"\{(?P<role>[\w:-]+)\}`(?P<content>[^`]*)`")
TITLES = {"note": "Note", "tip": "Tip", "warning": "Warning", "exercise": "Exercise", "important": "Important"}


def folded(name: str, options: dict[str, str]) -> bool:
    """Whether a directive is folded on the site (a dropdown, a toggle): detail that a
    reader opens on demand and a lecturer does not show, so the deck leaves it out."""
    return name in ("dropdown", "toggle") or "dropdown" in options.get("class", "").split()


def myst_to_markdown(source: str, cite: Citations) -> str:
    """Plain Markdown for nbconvert from the book's MyST: directives, roles and targets."""
    out: list[str] = []
    lines = source.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        match = FENCE_OPEN.match(line)
        if re.match(r"^\([\w-]+\)=\s*$", line):
            i += 1
            continue
        if not match:
            out.append(line)
            i += 1
            continue
        fence, name, argument = match.group("fence"), match.group("name"), match.group("argument").strip()
        j = i + 1
        options: dict[str, str] = {}
        while j < len(lines) and re.match(r"^:[\w-]+:", lines[j]):
            key, _, value = lines[j][1:].partition(":")
            options[key] = value.strip()
            j += 1
        body: list[str] = []
        depth = 1
        while j < len(lines):
            inner = FENCE_OPEN.match(lines[j])
            if inner and inner.group("fence") == fence:
                depth += 1
            elif lines[j].strip() == fence:
                depth -= 1
                if depth == 0:
                    break
            body.append(lines[j])
            j += 1
        i = j + 1
        text = myst_to_markdown("\n".join(body), cite)
        if name in ("solution-start", "solution-end", "footbibliography") or folded(name, options):
            continue
        if name == "literalinclude":
            path = (BOOK / argument).resolve()
            if "pyobject" in options:
                # a deck shows the code; the docstring stays on the site
                code = python_object_source(path, options["pyobject"], docstring=False)
            else:
                # like Sphinx: whole lines, from the first that holds start-at to the
                # last before the first later line that holds end-before
                # (own names: the cell's `lines` and `i` drive the loop around this)
                source = path.read_text().split("\n")
                if "start-at" in options:
                    source = source[next(k for k, s in enumerate(source) if options["start-at"] in s):]
                if "end-before" in options:
                    source = source[:next(k for k, s in enumerate(source) if options["end-before"] in s)]
                code = "\n".join(source)
            if "dedent" in options:
                code = textwrap.dedent(code)
            out += [f"```{options.get('language', 'python')}", code.rstrip("\n"), "```"]
        elif name == "math":
            out += ["$$", text, "$$"]
        else:
            kind = name.split(":")[-1]
            title = TITLES.get(kind, kind.capitalize())
            if argument:
                title = argument if name == "admonition" else f"{title} ({argument})"
            out.append(f"**{title}.**")
            out.append("")
            out += text.split("\n")
    text = "\n".join(out)

    def role(match: re.Match) -> str:
        name, content = match.group("role"), match.group("content")
        if name.startswith("footcite") or name.startswith("cite"):
            return cite(name, content)
        if name == "math":
            return f"${content}$"
        labelled = re.match(r"^(?P<text>.*?)\s*<(?P<target>[^>]+)>$", content)
        if labelled:
            return labelled.group("text")
        if name == "eq":
            return f"({content})"
        return content.rsplit("/", 1)[-1]

    return ROLE.sub(role, text)


#: The line under the title on every deck's first slide.
SUBTITLE = "posenc · Positional encodings for transformers"


def static_figure(output):
    """A figure the reader moves on the site (posenc.book.interactive) is shown in the deck by
    its static PNG: its HTML needs the site's plotly.js and sliders a lecture does not use. A
    matplotlib figure's HTML (posenc.book.plotting.figure_html: a narrow drawing for phones
    beside the wide one) gives way to its PNG too: a deck is shown wide."""
    data = output.get("data", {})
    html = str(data.get("text/html", ""))
    if ("posenc-interactive" in html or 'class="posenc-figure"' in html) and "image/png" in data:
        del data["text/html"]
    return output


class BookToSlides(Preprocessor):
    """Apply the book's conventions to a deck: the outputs of the book build, MyST to Markdown,
    and the cell tags the book obeys. What the site folds, the deck leaves out: a folded cell
    (hide-cell) goes, a folded input (hide-input) or output (hide-output) goes, a dropdown
    goes; what the site removes (remove-cell, remove-input, remove-output, remove-stderr) goes
    too. Speaker notes are tagged remove-cell for the site and are kept here. The title slide
    gets the book's name under the chapter's title."""

    merge_outputs = Bool(True, help="take the outputs from the book build's execution cache").tag(config=True)

    def preprocess(self, nb, resources):
        if self.merge_outputs:
            nb = with_outputs(nb, resources.get("metadata", {}).get("name", "the notebook"))
        cite = Citations(BOOK / "references.bib")
        cells = []
        for cell in nb.cells:
            tags = set(cell.metadata.get("tags", []))
            slide_type = cell.metadata.get("slideshow", {}).get("slide_type")
            if tags & {"remove-cell", "hide-cell"} and slide_type != "notes":
                continue
            if cell.cell_type == "markdown":
                cell.source = myst_to_markdown(cell.source, cite)
                if not cells and cell.source.startswith("# "):
                    cell.source += f"\n\n<p class=\"posenc-subtitle\">{SUBTITLE}</p>"
            elif cell.cell_type == "code":
                if tags & {"remove-input", "hide-input"}:
                    # nbconvert's templates read the flag from the cell's metadata
                    cell.metadata["transient"] = {"remove_source": True}
                if tags & {"remove-output", "hide-output"}:
                    cell.outputs = []
                cell.outputs = [static_figure(o) for o in cell.outputs]
                if "remove-stderr" in tags:
                    cell.outputs = [o for o in cell.outputs if not (o.output_type == "stream" and o.name == "stderr")]
            cells.append(cell)
        nb.cells = cells
        return nb, resources
