"""Draw the builders' FigureSpec data as PNG bar charts (matplotlib, Agg backend)."""

from __future__ import annotations

from pathlib import Path

from builders.result import FigureSpec


def render(spec: FigureSpec, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    n = len(spec.categories)
    fig, ax = plt.subplots(figsize=(max(6.0, 0.35 * n + 2), 4.0), dpi=100)
    width = 0.8 / max(1, len(spec.series))
    for k, (name, values) in enumerate(spec.series.items()):
        xs = [i + (k - (len(spec.series) - 1) / 2) * width for i in range(n)]
        ax.bar(xs, values, width=width, label=name, color=spec.bar_colors if len(spec.series) == 1 else None)
    ax.set_xticks(range(n), spec.categories, rotation=60 if n > 6 else 0, ha="right" if n > 6 else "center")
    ax.set_title(spec.title)
    ax.set_xlabel(spec.xlabel)
    ax.set_ylabel(spec.ylabel)
    if spec.legend_colors:
        ax.legend(handles=[Patch(color=c, label=l) for l, c in spec.legend_colors.items()])
    elif len(spec.series) > 1:
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, metadata={"Software": None})
    plt.close(fig)
