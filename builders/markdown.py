"""Markdown tables for dataset cards (integers with thousands separators, everything else as given)."""

from __future__ import annotations


def table(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(f"{v:,}" if isinstance(v, int) and not isinstance(v, bool) else str(v) for v in row)
              + " |" for row in rows]
    return "\n".join(lines)
