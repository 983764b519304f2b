"""Figure specs and their drawing: a `FigureSpec` is the data of one bar chart, made by builders
(card statistics) and the evaluator (report plots) alike; `draw_bars` draws it as PNG, in the build
process or in its figure helper (pipelines/figure_process.py), the same bytes either way."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO


@dataclass(frozen=True)
class FigureSpec:
    """Data of one bar chart (a card's statistics, a report's intervals); `draw_bars` draws it."""

    filename: str
    title: str
    categories: list[str]
    series: dict[str, list[float]]
    xlabel: str = ""
    ylabel: str = ""
    bar_colors: list[str] | None = None  # one colour per category (single-series plots)
    legend_colors: dict[str, str] | None = None  # legend entries explaining `bar_colors`
    errors: dict[str, list] | None = None  # per series, error bar half-lengths or (below, above) pairs


def plain(text) -> str:
    """Text from data (a file name, a model name, a category) as matplotlib shows it literally, on one line:
    through the sanitiser (control characters, tabs and newlines as spaces, bidirectional controls and bytes
    that are not UTF-8 escaped), and a `$`, which would start mathtext (a formula, or a failed drawing),
    escaped."""
    from core.sanitise import sanitise

    return sanitise(text, (), None).replace("$", r"\$")


def draw_bars(spec: FigureSpec, path: Path | BinaryIO) -> None:
    """A (grouped) bar chart of a FigureSpec, as PNG (to a file name or a binary stream)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    n = len(spec.categories)
    fig, ax = plt.subplots(figsize=(max(6.0, 0.35 * n + 2), 4.0), dpi=100)
    width = 0.8 / max(1, len(spec.series))
    for k, (name, values) in enumerate(spec.series.items()):
        xs = [i + (k - (len(spec.series) - 1) / 2) * width for i in range(n)]
        errors = (spec.errors or {}).get(name)
        if errors and isinstance(errors[0], (list, tuple)):  # (below, above) per bar: an asymmetric interval
            errors = [[e[0] for e in errors], [e[1] for e in errors]]
        ax.bar(xs, values, width=width, label=plain(name), color=spec.bar_colors if len(spec.series) == 1 else None,
               yerr=errors, capsize=3)
    ax.set_xticks(range(n), [plain(c) for c in spec.categories], rotation=60 if n > 6 else 0,
                  ha="right" if n > 6 else "center")
    ax.set_title(plain(spec.title))
    ax.set_xlabel(plain(spec.xlabel))
    ax.set_ylabel(plain(spec.ylabel))
    if spec.legend_colors:
        ax.legend(handles=[Patch(color=color, label=plain(label)) for label, color in spec.legend_colors.items()])
    elif len(spec.series) > 1:
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, format="png", metadata={"Software": None})
    plt.close(fig)
