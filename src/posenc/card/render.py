"""The position card rendered: Markdown (:func:`card_markdown`), HTML for a notebook
(:func:`card_html`, legible at 414 px: short summary tables, the per-pair tables
folded in ``<details>``), and plain text of at most 100 columns for a terminal
(:func:`card_text`)."""

from __future__ import annotations

import html
import math
import textwrap

_PAIR_COLUMNS = ("i", "θ", "θ′", "λ′ = 2π/θ′", "turns in L", "θ′/θ", "region")


def _num(value, digits: int = 4) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        if math.isinf(value):
            return "∞"
        if math.isnan(value):
            return "—"
        if value.is_integer() and abs(value) < 1e15:  # a base of 1e6 reads 1,000,000
            return f"{int(value):,}"
        return f"{value:.{digits}g}"
    if isinstance(value, int) and abs(value) >= 1_000:
        return f"{value:,}"
    return str(value)


def _layers(layers: tuple[int, ...]) -> str:
    """(0, 1, 2, 5) → "0–2, 5"."""
    runs: list[list[int]] = []
    for i in layers:
        if runs and runs[-1][1] == i - 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ", ".join(f"{a}" if a == b else f"{a}–{b}" for a, b in runs)


def _layer_count(card) -> str:
    """"32 layers", or "layers: how many unknown" without num_hidden_layers."""
    if card.num_hidden_layers is None:
        return "layers: how many unknown (no num_hidden_layers)"
    return f"{card.num_hidden_layers} layers"


def _context(card) -> str:
    return (
        f"trained L = {_num(card.original_max_position_embeddings)}, "
        f"extended = {_num(card.max_position_embeddings)}"
    )


def group_rows(group) -> list[tuple[str, str]]:
    """(label, value) pairs summarising a layer group."""
    rows = [("layers", f"{len(group.layers)}: {_layers(group.layers)}")]
    if not group.layers:
        rows = [("layers", "all (their number is unknown)")]
    if not group.rope:
        linear = group.layer_type == "linear_attention"
        what = "none (linear attention)" if linear else "none (NoPE)"
        rows.append(("positions", what))
    else:
        rows += [
            ("rope_type", group.rope_type),
            ("head_dim / rotary_dim", f"{group.head_dim} / {group.rotary_dim}"),
            ("rope_theta", _num(group.rope_theta, 6)),
            ("attention factor (cos, sin)", _num(group.attention_factor, 6)),
            ("score multiplier", _num(group.score_multiplier, 6)),
        ]
        regions: dict[str, int] = {}
        for row in group.pairs:
            regions[row.region] = regions.get(row.region, 0) + 1
        rows.append(("pairs", ", ".join(f"{n} {r}" for r, n in regions.items())))
    if group.mrope_section:
        rows.append(("mrope_section", str(list(group.mrope_section))))
    if group.window:
        rows.append(("window", _num(group.window)))
    if group.chunk:
        rows.append(("chunk", _num(group.chunk)))
    if group.score_note:
        rows.append(("scores", group.score_note))
    return rows


def pair_cells(row) -> list[str]:
    cells = [
        str(row.pair),
        _num(row.theta),
        _num(row.theta_scaled),
        _num(row.wavelength),
        _num(row.turns_in_original),
        _num(row.ratio),
        row.region,
    ]
    if row.ratio_short is not None:
        cells[5] += f" (short {_num(row.ratio_short)})"
    return cells


def card_markdown(card) -> str:
    """The card as Markdown."""
    lines = [f"## Position card: {card.model_type or 'model'}", ""]
    lines.append(f"{_layer_count(card)}; {_context(card)}.")
    if card.sinks:
        lines.append(f"Attention sinks: {card.sinks}.")
    lines.append(f"Source: {card.source}.")
    for group in card.groups:
        lines += ["", f"### {group.name}", "", "| | |", "|---|---|"]
        lines += [f"| {label} | {value} |" for label, value in group_rows(group)]
    lines += ["", "### Findings", ""]
    if not card.warnings:
        lines.append("No findings.")
    for lint in card.warnings:
        lines.append(f"- **{lint.id}** ({lint.severity}): {lint.message} "
                     f"*See {lint.chapter}.*")
    for group in card.groups:
        if group.pairs:
            lines += ["", f"#### Pairs of the {group.name} layers", ""]
            lines.append("| " + " | ".join(_PAIR_COLUMNS) + " |")
            lines.append("|" + "---|" * len(_PAIR_COLUMNS))
            lines += ["| " + " | ".join(pair_cells(r)) + " |" for r in group.pairs]
    return "\n".join(lines) + "\n"


def _table(rows, header=None) -> str:
    esc = html.escape
    out = ['<table style="font-size:0.9em;border-collapse:collapse">']
    if header:
        out.append("<tr>" + "".join(f"<th>{esc(h)}</th>" for h in header) + "</tr>")
    for row in rows:
        out.append("<tr>" + "".join(f"<td>{esc(str(c))}</td>" for c in row) + "</tr>")
    return "\n".join(out + ["</table>"])


def card_html(card) -> str:
    """The card as an HTML fragment: at most two columns except in the folded
    per-pair tables, which scroll sideways on a narrow screen."""
    esc = html.escape
    parts = [
        '<div class="posenc-card" style="max-width:100%;overflow-wrap:anywhere">',
        f"<h4>Position card: {esc(str(card.model_type or 'model'))}</h4>",
        f"<p>{_layer_count(card)}; {esc(_context(card))}."
        + (f" Attention sinks: {esc(card.sinks)}." if card.sinks else "")
        + "</p>",
    ]
    for group in card.groups:
        parts.append(f"<h5>{esc(group.name)}</h5>")
        parts.append(_table(group_rows(group)))
    parts.append("<h5>Findings</h5>")
    if not card.warnings:
        parts.append("<p>No findings.</p>")
    else:
        items = "".join(
            f"<li><b>{esc(w.id)}</b> ({esc(w.severity)}): {esc(w.message)} "
            f"<i>See {esc(w.chapter)}.</i></li>"
            for w in card.warnings
        )
        parts.append(f"<ul>{items}</ul>")
    for group in card.groups:
        if group.pairs:
            parts.append(
                f"<details><summary>Pairs of the {esc(group.name)} layers "
                f"({len(group.pairs)})</summary><div style=\"overflow-x:auto\">"
                + _table([pair_cells(r) for r in group.pairs], _PAIR_COLUMNS)
                + "</div></details>"
            )
    parts.append("</div>")
    return "\n".join(parts)


def _text_table(rows: list[list[str]], width: int) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for row in rows:
        line = "  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip()
        lines.append(line[:width])
    return lines


def card_text(card, width: int = 100) -> str:
    """The card as plain text, no line longer than ``width`` columns."""
    wrap = textwrap.TextWrapper(width=width, subsequent_indent="    ")
    lines = [f"Position card: {card.model_type or 'model'}  ({card.source})"[:width]]
    lines += wrap.wrap(f"{_layer_count(card)}; {_context(card)}")
    if card.sinks:
        lines += wrap.wrap(f"attention sinks: {card.sinks}")
    for group in card.groups:
        lines += ["", f"[{group.name}]"]
        for label, value in group_rows(group):
            lines += wrap.wrap(f"  {label}: {value}")
        if group.pairs:
            rows = [list(_PAIR_COLUMNS)] + [pair_cells(r) for r in group.pairs]
            lines += ["  " + line for line in _text_table(rows, width - 2)]
    lines += ["", "Findings:" if card.warnings else "Findings: none"]
    for lint in card.warnings:
        lines += wrap.wrap(f"- {lint.id} ({lint.severity}): {lint.message}")
        lines += wrap.wrap(f"    see {lint.chapter}")
    return "\n".join(lines) + "\n"
