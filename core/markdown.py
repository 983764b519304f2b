"""Markdown tables, the one writer for dataset cards and evaluation reports. A cell is written by
`card_cell` (integers with thousands separators, everything else as given) or `report_cell` (missing
values as "-", floats to two decimals, a `|` inside a cell, e.g. P(B | V), escaped so that it stays one
cell)."""

from __future__ import annotations

from typing import Callable


def card_cell(value) -> str:
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else str(value)


def report_cell(value) -> str:
    if value is None:
        return "-"
    return f"{value:.2f}" if isinstance(value, float) else str(value).replace("|", "\\|")


def table(header: list, rows: list[list], cell: Callable[[object], str] = card_cell) -> str:
    return "\n".join(["| " + " | ".join(cell(h) for h in header) + " |", "|" + "---|" * len(header)]
                     + ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows])


def report_table(header: list, rows: list[list]) -> str:
    """A report's table (`report_cell`)."""
    return table(header, rows, report_cell)
