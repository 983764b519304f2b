"""The report card's figures (`vlbench suite` and `vlbench suite-compare`): each diagnostic's values
with their 95% intervals, and the headline metrics of each benchmark family (the registry's
`family`) with one bar per model, side by side. FigureSpecs drawn by `core.figures.draw_bars` into
OUT/figures/ and shown on the page and in report.md."""

from __future__ import annotations

import re
from pathlib import Path

from core.figures import FigureSpec, draw_bars
from evaluator.tasks import task_entries

FOLDER = "figures"


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _bar(entry) -> tuple[float, tuple[float, float]]:
    """A value and its interval as (value, (below, above)); an undefined value is NaN (no bar)."""
    value = entry.get("value") if isinstance(entry, dict) else None
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return float("nan"), (0.0, 0.0)
    interval = entry.get("interval")
    if not interval:
        return float(value), (0.0, 0.0)
    return float(value), (max(0.0, value - interval[0]), max(0.0, interval[1] - value))


def diagnostic_entries(values: dict) -> list[tuple[str, dict]]:
    """A diagnostic's (name, value entry) rows, groups (per answer type) flattened."""
    rows = []
    for name, entry in values.items():
        if isinstance(entry, dict) and "value" in entry:
            rows.append((name, entry))
        else:
            rows += [(f"{name}: {k}", v) for k, v in entry.items()]
    return rows


def diagnostic_figure(index: int, diagnostic: dict) -> FigureSpec | None:
    """One diagnostic's rows as bars with their intervals; None when no row has a number."""
    bars = [(name, _bar(entry)) for name, entry in diagnostic_entries(diagnostic["values"])]
    if not any(value == value for _, (value, _) in bars):
        return None
    return FigureSpec(filename=f"diagnostic-{index + 1}-{_slug(diagnostic['name'])}.png", title=diagnostic["name"],
                      categories=[name for name, _ in bars], series={"value": [v for _, (v, _) in bars]},
                      errors={"value": [e for _, (_, e) in bars]}, ylabel="value (95% interval)")


def family_figures(cards: list[tuple[str, dict]]) -> list[FigureSpec]:
    """Per benchmark family, the headline metrics of its scored benchmarks, one series per (model name,
    card): a card alone, or several side by side."""
    specs = []
    families: dict[str, list[str]] = {}
    for entry in task_entries():
        families.setdefault(entry.family, []).append(entry.benchmark)
    for family, names in families.items():
        columns = [(bench, key, f"{bench} {h['label']}") for bench in names
                   for key, h in next((c["benchmarks"][bench].get("headline") or {} for _, c in cards
                                       if c["benchmarks"].get(bench, {}).get("status") == "scored"), {}).items()]
        if not columns:
            continue
        series, errors = {}, {}
        for model, card in cards:
            bars = [_bar(((card["benchmarks"].get(b) or {}).get("headline") or {}).get(k)) for b, k, _ in columns]
            series[model], errors[model] = [v for v, _ in bars], [e for _, e in bars]
        specs.append(FigureSpec(filename=f"family-{_slug(family)}.png", title=family,
                                categories=[label for _, _, label in columns], series=series, errors=errors,
                                ylabel="headline metric (95% interval)"))
    return specs


def curve_figure(index: int, diagnostic: dict) -> FigureSpec | None:
    """GQA-OOD's acc-tail over alpha (Kervadec et al., CVPR 2021: the smaller alpha, the rarer the tail
    answers), where the diagnostic carries the curve."""
    curve = [p for p in diagnostic.get("alpha_curve") or [] if isinstance(p.get("acc_tail"), (int, float))]
    if not curve:
        return None
    return FigureSpec(filename=f"diagnostic-{index + 1}-acc-tail-over-alpha.png",
                      title=f"{diagnostic['name']}: acc-tail over alpha",
                      categories=[f"{p['alpha']:g}" for p in curve],
                      series={"acc-tail": [p["acc_tail"] for p in curve]},
                      xlabel="alpha (tail: count < (1 + alpha) x the group's mean)", ylabel="acc-tail")


def card_figures(card: dict) -> tuple[list[list[FigureSpec]], list[FigureSpec]]:
    """A report card's figures: per diagnostic its values with their intervals (and GQA-OOD's curve
    over alpha), and one per benchmark family."""
    per_diagnostic = [[s for s in (diagnostic_figure(k, d), curve_figure(k, d)) if s]
                      for k, d in enumerate(card["diagnostics"])]
    return per_diagnostic, family_figures([(card["model"], card)])


def figure_files(out: Path, specs: list[FigureSpec]) -> dict[Path, bytes]:
    """Every figure's PNG by its path, OUT/figures/<filename>."""
    from evaluator.publish.report import png

    return {out / FOLDER / spec.filename: png(draw_bars, spec) for spec in specs}
