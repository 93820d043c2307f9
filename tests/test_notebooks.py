"""Notebook hygiene: the book's notebooks are exactly those in the table of contents, are stored
without outputs, and start with the install cell that names the repository of _config.yml."""

import json
import re
from pathlib import Path

import pytest
import yaml
from sphinx_external_toc.parsing import parse_toc_yaml

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted(p for p in (ROOT / "book").rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts and "_build" not in p.parts)


def toc_files():
    """Every document of _toc.yml in book order, parsed as Jupyter Book parses it."""
    return list(parse_toc_yaml(str(ROOT / "_toc.yml")).keys())


def notebooks():
    """The documents of _toc.yml that are notebooks, in book order."""
    return [f for f in toc_files() if (ROOT / f"{f}.ipynb").exists()]


def page_kind(doc: str) -> str:
    """A notebook page's kind, from its metadata ``posenc.kind``: ``"chapter"`` (the
    default) follows the chapter template — exercises, a deck, a lecture plan, a
    clean-environment run — while ``"tour"`` (the 20-minute tour) and ``"reference"``
    (the claims ledger) are pages the chapters link to, exempt from them."""
    metadata = json.loads((ROOT / f"{doc}.ipynb").read_text()).get("metadata", {})
    kind = metadata.get("posenc", {}).get("kind", "chapter")
    assert kind in ("chapter", "tour", "reference"), f"{doc}: unknown page kind {kind!r}"
    return kind


def chapters():
    """The chapters of the book, in book order: the notebooks of _toc.yml whose kind is
    ``chapter`` (:func:`page_kind`)."""
    return [f for f in notebooks() if page_kind(f) == "chapter"]


def cells(nb):
    return json.loads(nb.read_text())["cells"]


def test_notebooks_are_exactly_the_toc_notebooks():
    listed = set(notebooks())
    on_disk = {p.relative_to(ROOT).with_suffix("").as_posix() for p in NOTEBOOKS}
    assert on_disk == listed
    for f in toc_files():
        assert (ROOT / f"{f}.ipynb").exists() or (ROOT / f"{f}.md").exists(), f"{f} in _toc.yml has no file"


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.stem)
def test_stored_without_outputs(nb):
    for cell in cells(nb):
        if cell["cell_type"] == "code":
            assert cell["outputs"] == [] and cell["execution_count"] is None


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.stem)
def test_starts_with_the_install_cell(nb):
    repo_url = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"]
    all_cells = cells(nb)
    assert all_cells[0]["cell_type"] == "markdown" and "".join(all_cells[0]["source"]).startswith("# ")
    first_code = next(c for c in all_cells if c["cell_type"] == "code")
    source = "".join(first_code["source"])
    assert "hide-cell" in first_code["metadata"].get("tags", [])
    assert 'find_spec("posenc") is None' in source and "POSENC_INSTALL_SOURCE" in source
    assert f"git+{repo_url}.git" in source
    assert 'f"posenc[book] @ {source}"' in source, "the chapters ask for the book's extra"
    assert " -e " not in source and "torch" not in re.findall(r"pip\", \"install\"[^\n]*", source)[0]
    assert "posenc.get_device()" in source


@pytest.mark.parametrize("chapter", chapters())
def test_chapters_open_with_their_question_and_short_answer(chapter):
    """The chapter template: the title, then (after the hidden install cell and speaker notes)
    the question the chapter answers with its short answer, then what the reader will
    understand ("In this chapter")."""
    prose = [c for c in cells(ROOT / f"{chapter}.ipynb")
             if c["cell_type"] == "markdown" and "remove-cell" not in c["metadata"].get("tags", [])]
    question, objectives = ("".join(c["source"]) for c in prose[1:3])
    assert "{admonition} Question" in question and ":class: posenc-question" in question, question[:200]
    assert "**Short answer.**" in question
    short = question.split("**Short answer.**", 1)[1].rsplit(":::", 1)[0]
    assert 15 <= len(short.split()) <= 90, f"the short answer is two or three sentences ({len(short.split())} words)"
    assert "In this chapter" in objectives


def install_block(nb) -> str:
    """The install part of a notebook's first code cell: its lines up to
    ``importlib.invalidate_caches()``."""
    first = "".join(next(c for c in cells(nb) if c["cell_type"] == "code")["source"])
    end = first.index("importlib.invalidate_caches()\n") + len("importlib.invalidate_caches()\n")
    return first[:end]


def test_every_notebook_installs_posenc_the_same_way():
    """One install block in every notebook (only the modules it imports may differ)."""
    blocks = {re.sub(r"^import importlib, .*$", "import importlib, …", install_block(nb), flags=re.M)
              for nb in NOTEBOOKS}
    assert len(blocks) == 1, "the notebooks' install cells differ"


@pytest.mark.parametrize("source, url", [
    (None, "git+https://github.com/posenc/posenc.git"),
    ("file:///tmp/posenc-0.1.0-py3-none-any.whl", "file:///tmp/posenc-0.1.0-py3-none-any.whl"),
    ("relative/posenc-0.1.0-py3-none-any.whl", "RELATIVE"),
])
def test_the_install_cell_asks_pip_for_posenc_with_the_book_extra(monkeypatch, tmp_path, source, url):
    """What the install cell hands pip, with POSENC_INSTALL_SOURCE unset, a URL or a
    path (tests/test_clean_env.py passes the wheel's path): a PEP 508 requirement for
    posenc with the ``book`` extra, from that source (a path as its absolute file://
    URL, the form pip takes an extra with)."""
    import importlib.util
    import subprocess

    from packaging.requirements import Requirement

    monkeypatch.chdir(tmp_path)
    if source is None:
        monkeypatch.delenv("POSENC_INSTALL_SOURCE", raising=False)
    else:
        monkeypatch.setenv("POSENC_INSTALL_SOURCE", source)
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "posenc" else find_spec(name, *a))
    calls = []
    monkeypatch.setattr(subprocess, "check_call", calls.append)
    exec(install_block(NOTEBOOKS[0]), {"__name__": "cell"})
    (command,) = calls
    assert command[1:5] == ["-m", "pip", "install", "--quiet"]
    requirement = Requirement(command[-1])
    expected = (tmp_path / source).as_uri() if url == "RELATIVE" else url
    assert (requirement.name, requirement.extras, requirement.url) == ("posenc", {"book"}, expected)


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_sympy_chapter_asserts(nb):
    code = "\n".join("".join(c["source"]) for c in cells(nb) if c["cell_type"] == "code")
    if "sympy" in code:
        assert code.count("assert ") >= 3


def test_markdown_printed_by_cells_can_hold_tables():
    """Chapters print tables with display(Markdown(...)); myst-nb's default (commonmark) shows them
    as raw pipes on the site."""
    config = yaml.safe_load((ROOT / "_config.yml").read_text())["sphinx"]["config"]
    assert config.get("nb_render_markdown_format") in ("myst", "gfm")


def test_the_parallel_execution_step_sees_the_books_chapters_and_cache(tmp_path):
    """posenc.book.execute (make book, make test) executes exactly the chapters, into the cache
    jupyter-book reads, and a stored chapter counts as cached for its current code only."""
    import nbformat
    from jupyter_cache import get_cache

    from posenc.book import execute

    assert [p.relative_to(ROOT).with_suffix("").as_posix() for p in execute.chapters(ROOT)] == notebooks()
    config = yaml.safe_load((ROOT / "_config.yml").read_text())["execute"]
    assert config["execute_notebooks"] == "cache"
    assert execute.book_config(ROOT)["cache"] == ROOT / config["cache"]
    assert execute.book_config(ROOT)["timeout"] == config["timeout"]

    path = NOTEBOOKS[0]
    cache = get_cache(str(tmp_path / "cache"))
    assert not execute.is_cached(cache, path)
    nb = nbformat.read(path, as_version=4)
    assert execute.store(nb, path, 1.0, tmp_path / "cache")
    assert execute.is_cached(cache, path)
    assert not execute.store(nb, path, 1.0, tmp_path / "cache")  # never over stored outputs
    changed = nbformat.read(path, as_version=4)
    next(c for c in changed.cells if c.cell_type == "code").source += "\n"
    with pytest.raises(KeyError):
        cache.match_cache_notebook(changed)


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.stem)
def test_packages_are_installed_by_version_and_the_scale_is_chosen(nb):
    """One way to install what a chapter needs beyond posenc: posenc.ensure_installed, at the book's
    pins, never by presence; and the experiment scale is the reader's choice (POSENC_SCALE), never
    the hardware's."""
    code = "\n".join("".join(c["source"]) for c in cells(nb) if c["cell_type"] == "code")
    first = "".join(next(c for c in cells(nb) if c["cell_type"] == "code")["source"])
    uses = {name for name, pattern in (("transformers", r"\bimport transformers\b|from transformers\b|pretrained\.load"),
                                       ("gguf", r"pretrained\.load\(\"smollm2\"")) if re.search(pattern, code)}
    for name in uses:
        assert re.search(rf"ensure_installed\([^)]*\"{name}\"", first), f"{nb.stem} uses {name}: ensure_installed it"
    assert not re.search(r"find_spec\(\"(transformers|gguf|accelerate)\"\)", first), "installs by presence"
    assert not re.search(r"pip\", \"install\"[^\n]*transformers", first), "installs transformers by hand"
    assert not re.search(r"if device\.type == \"cuda\" else", code), "the scale is switched by the hardware"
    if re.search(r"^SCALE =", first, flags=re.M):
        assert "SCALE = book_scale()" in first


# pandas methods that import a package posenc does not bring (tabulate, openpyxl; the Styler's
# jinja2 comes with torch): they pass in the book's environment, which has them, and fail in a
# reader's, which need not (CI's clean-environment run failed on to_markdown).
PANDAS_OPTIONAL = r"\.(to_markdown|to_excel)\("


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.stem)
def test_chapters_need_only_what_posenc_installs(nb):
    code = "\n".join("".join(c["source"]) for c in cells(nb) if c["cell_type"] == "code")
    found = re.findall(PANDAS_OPTIONAL, code)
    assert not found, (f"{nb.stem} calls pandas' {sorted(set(found))}, whose dependency posenc "
                       "does not install (the clean-environment run fails on it); build the table "
                       "as text, as the other chapters do")


if __name__ == "__main__":
    import sys

    if sys.argv[1:] != ["--pages"]:
        sys.exit("usage: python tests/test_notebooks.py --pages")
    # the notebooks that are not chapters, as paths for nbval (make page-notebooks)
    print(*(f"{f}.ipynb" for f in notebooks() if page_kind(f) != "chapter"))
