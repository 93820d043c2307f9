"""Source hygiene that the site depends on: the book shows the package's real source with
literalinclude, in a text column that fits 88 characters of its code font (book/_assets/posenc.css;
tests/test_site.py measures the rendered blocks)."""

from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "posenc"
SOURCES = sorted(PACKAGE.rglob("*.py"))
MAX_LINE = 88


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.relative_to(PACKAGE).as_posix())
def test_package_lines_fit_the_book_column(path):
    long = [(n, len(line)) for n, line in enumerate(path.read_text().splitlines(), 1) if len(line) > MAX_LINE]
    assert long == [], f"{path.name}: lines longer than {MAX_LINE} characters (line, length): {long[:10]}"
