"""One notation, book-wide: the table of symbols in book/design.md ("Notation and shapes") is read
here, and the chapters' Markdown is held to it.

The checks are narrow on purpose, so that each failure is a real clash:

* a symbol written right after a phrase that names one of the table's meanings ("chunks of $s$",
  "the pretraining length $c$", "the query at position $p$") must be that meaning's symbol;
* a relative distance is written with the table's $m$ and $n$, never $i - j$ ($i$ is a pair index);
* YaRN's attention factor is not given a position's name ("$m = 0.1 \\ln s + 1$").
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"
DESIGN = BOOK / "design.md"

#: A phrase that names a meaning, and a word of that meaning as the table writes it.
PHRASES = {
    r"chunks? of|chunk size": "chunk size",
    r"(?:pre)?training length|trained length": "training (pretraining) length",
    r"group size": "group size",
    r"query (?:at )?position": "position of a query",
    r"key (?:at )?position": "position of a key",
    r"frequency base|the base": "frequency base",
    r"scaling factor": "scaling) factor",
}
#: A math span that is one symbol, alone or before a relation: the symbol, primes kept.
LEADING_SYMBOL = re.compile(r"^\s*(\\?[A-Za-z]+(?:_\{?[\w,]+\}?)?'*)\s*(?:$|=|<|>|\\le\b|\\ge\b|,)")
DISTANCE_IJ = re.compile(r"(?<![\w\\])([ij])\s*(?:-|−)\s*(?!\1)([ij])(?![\w(])")
YARN_FACTOR_AS_POSITION = re.compile(r"(?<![\w\\])[mn]\s*=\s*0\.1\s*\\ln")
#: Clashes that remain in chapters this change did not edit, each with its reason; the test
#: fails when one is fixed, so that the entry is removed with it.
KNOWN: dict[tuple[str, str], int] = {}


def notation_table() -> dict[str, dict[str, str]]:
    """{symbol: {"meaning", "code"}} from design.md's table (after its ``notation-table`` mark)."""
    text = DESIGN.read_text()
    block = text.split("<!-- notation-table -->", 1)[1].strip().split("\n\n", 1)[0]
    rows = [line for line in block.splitlines()[2:] if line.startswith("|")]
    table = {}
    for row in rows:
        symbol, meaning, code = (cell.strip() for cell in row.strip("|").split("|"))
        table[symbol.strip("$")] = {"meaning": meaning, "code": code}
    return table


def _strip_code(text: str) -> str:
    """The text without code: fenced code blocks (not the prose directives such as ```{prf:proposition})
    and inline code spans."""
    text = re.sub(r"^(`{3,})(?:[\w-]*|\{(?:code-block|code-cell|literalinclude)\}.*)\n.*?^\1", "", text,
                  flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", "", text)


def chapter_markdown() -> list[tuple[str, str]]:
    """(page, Markdown text without code) for every chapter page but design.md, which states the rule."""
    pages = []
    for path in sorted(BOOK.glob("*.ipynb")):
        cells = json.loads(path.read_text())["cells"]
        pages += [(path.name, _strip_code("".join(c["source"]))) for c in cells if c["cell_type"] == "markdown"]
    for path in sorted(BOOK.glob("*.md")):
        if path.name != "design.md":
            pages.append((path.name, _strip_code(path.read_text())))
    return pages


def clashes(text: str, table: dict[str, dict[str, str]]) -> list[tuple[str, str]]:
    """(kind, the text that clashes) for every clash with the table in ``text``."""
    found = []
    for phrase, meaning in PHRASES.items():
        (symbol,) = [s for s, row in table.items() if meaning in row["meaning"]]
        for match in re.finditer(rf"(?<![\w-])(?:{phrase})\s+\$([^$]+)\$", text, flags=re.I):
            leading = LEADING_SYMBOL.match(match.group(1))
            if leading and leading.group(1).rstrip("'") != symbol:
                found.append(("symbol", match.group(0)))
    found += [("distance", m.group(0)) for m in DISTANCE_IJ.finditer(text)]
    found += [("yarn factor", m.group(0)) for m in YARN_FACTOR_AS_POSITION.finditer(text)]
    return found


def test_the_table_has_the_books_symbols():
    table = notation_table()
    for symbol in ("m", "n", "n - m", "m - n", "T", "L", "d", "H", "d_h", "r", "b", r"\theta_i", "s", "C", "W",
                   "w", "G", "S"):
        assert symbol in table, f"design.md's notation table has no row for ${symbol}$"
    assert table["s"]["code"] == "`factor`" and table["d_h"]["code"] == "`head_dim`"
    meanings = [row["meaning"] for row in table.values()]
    assert len(set(meanings)) == len(meanings), "two symbols with one meaning"
    for meaning in PHRASES.values():  # every phrase checked names exactly one row
        assert sum(meaning in m for m in meanings) == 1, meaning


def test_chapters_keep_to_the_notation_table():
    table = notation_table()
    counts: dict[tuple[str, str], int] = {}
    problems = []
    for page, text in chapter_markdown():
        for kind, snippet in clashes(text, table):
            counts[page, kind] = counts.get((page, kind), 0) + 1
            if (page, kind) not in KNOWN:
                problems.append(f"{page}: {kind}: {snippet!r}")
    assert not problems, "symbols used against book/design.md's notation table:\n" + "\n".join(problems)
    for key, expected in KNOWN.items():
        assert counts.get(key, 0) == expected, f"{key}: {counts.get(key, 0)} clashes, KNOWN says {expected}"


@pytest.mark.parametrize("old, kind", [
    ("the text is cut into chunks of $s$ tokens", "symbol"),
    ("stays below the pretraining length $c$.", "symbol"),
    ("| $\\tau$ for the query at position $p$ |", "symbol"),
    ("depends only on the distance $i - j$", "distance"),
    ("ReRoPE scores a pair at distance $\\min(i - j, W)$", "distance"),
    ("| $m^2$, $m = 0.1 \\ln s + 1$, the same for every query |", "yarn factor"),
])
def test_the_checks_catch_the_old_long_context_notation(old, kind):
    """Sentences of the long-context chapter before the notation was unified: each is caught."""
    assert [k for k, _ in clashes(old, notation_table())] == [kind]


@pytest.mark.parametrize("fine", [
    "the text is cut into chunks of $C$ tokens", "a chunk of $L/4$ positions", "the query at position $m$",
    "the key position $n \\le m$", "the training length $L = 64$", "the new base $b'$", "pairs $(2i, 2i + 1)$",
    "$\\sqrt{1/t} = 0.1 \\ln s + 1$",
])
def test_the_checks_pass_the_books_own_forms(fine):
    assert clashes(fine, notation_table()) == []
