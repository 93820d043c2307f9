"""The Markdown table of :mod:`posenc.open_models`: :func:`settings_table` renders
the rows of :func:`~posenc.open_models.positional_settings` one line per model, in
the columns of ``_COLUMNS`` (model, class, the checkpoint the defaults resemble, θ,
RoPE type with its factor and original context, rotary fraction, head width, context,
layer pattern, window or chunk, other settings). Missing values show as "—", large
numbers with thousands separators, per-layer-type values as ``sliding … / full …``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from .config import FIELDS, short_layer_type

def _fmt_value(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float) and value.is_integer() and abs(value) >= 1000:
        return f"{value:,.0f}"
    if isinstance(value, float) and value.is_integer():
        return f"{value:g}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _fmt(value: Any) -> str:
    """A cell: per-layer-type dicts as ``sliding 10,000 / full 1,000,000``."""
    if isinstance(value, dict):
        values = list(value.values())
        if values and all(v == values[0] for v in values):
            return _fmt_value(values[0])
        cells = (f"{short_layer_type(k)} {_fmt_value(v)}" for k, v in value.items())
        return " / ".join(cells)
    return _fmt_value(value)


def _rope_cell(row: dict) -> str:
    cell = _fmt(row["rope_type"])
    if row["rope_factor"] is not None:
        cell += f" ×{_fmt(row['rope_factor'])}"
    if row["original_max_position_embeddings"] is not None:
        cell += f" (orig. {_fmt(row['original_max_position_embeddings'])})"
    return cell


_COLUMNS = (
    ("Model", lambda r: r["model"]),
    ("Config class", lambda r: f"`{r['config_class']}`"),
    ("Defaults ≈", lambda r: _fmt(r["docstring_checkpoint"])),
    ("θ (rope_theta)", lambda r: _fmt(r["rope_theta"])),
    ("RoPE type", _rope_cell),
    ("rotary fraction", lambda r: _fmt(r["partial_rotary_factor"])),
    ("head_dim", lambda r: _fmt(r["head_dim"])),
    ("max positions", lambda r: _fmt(r["max_position_embeddings"])),
    ("layer pattern", lambda r: _fmt(r["layer_pattern"])),
    ("window / chunk", lambda r: _fmt(r["window"])),
    ("other positional settings", lambda r: _fmt(r["specials"] or None)),
)


def settings_table(rows: Sequence[dict]) -> str:
    """A Markdown table of :func:`positional_settings` rows, one line per model.

    Args:
        rows: row dicts as :func:`positional_settings` returns them.

    Returns:
        The table: a header line, a separator line and one line per row, joined by
        newlines (no trailing newline). Missing values show as "—"; per-layer-type
        values as ``sliding … / full …``.

    Raises:
        TypeError: if a row is not a dict.
        ValueError: if ``rows`` is empty or a row lacks a key of :data:`FIELDS`.
    """
    if not rows:
        raise ValueError("settings_table needs at least one row, got none")
    for row in rows:
        if not isinstance(row, dict):
            raise TypeError(f"each row must be a dict, got {type(row).__name__}")
        missing = [key for key in FIELDS if key not in row]
        if missing:
            raise ValueError(f"row {row.get('model')!r} lacks keys {missing}")

    def line(cells: Iterable[str]) -> str:
        return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

    lines = [line(name for name, _ in _COLUMNS), line("---" for _ in _COLUMNS)]
    lines += [line(cell(row) for _, cell in _COLUMNS) for row in rows]
    return "\n".join(lines)
