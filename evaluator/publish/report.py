"""Evaluation reports: metrics.json, report.md and PNG line plots."""

from __future__ import annotations

import hashlib
import io
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Callable

from core.errors import ParamsError, write_error
from core.figures import FigureSpec, draw_bars, plain
from core.hashing import sha256_file
from core.jsonout import dumps
from core.markdown import report_table
from core.outdir import write_together


@dataclass(frozen=True)
class LinePlot:
    filename: str
    title: str
    x: list[float]
    series: dict[str, list[float | None]]
    xlabel: str
    ylabel: str
    logx: bool = False
    ylim: tuple[float, float] | None = (0.0, 100.0)


@dataclass
class ForestPlot:
    """Differences with their confidence intervals, one row each, around a zero line."""

    filename: str
    title: str
    labels: list[str]
    values: list[float]
    intervals: list[tuple[float, float]]
    xlabel: str


def draw_forest(plot: ForestPlot, path: Path | BinaryIO) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(plot.labels)
    fig, ax = plt.subplots(figsize=(7.0, max(2.5, 0.35 * n + 1.2)), dpi=100)
    ys = list(range(n))[::-1]
    below = [v - lo for v, (lo, _) in zip(plot.values, plot.intervals)]
    above = [hi - v for v, (_, hi) in zip(plot.values, plot.intervals)]
    ax.errorbar(plot.values, ys, xerr=[below, above], fmt="o", capsize=3)
    ax.axvline(0.0, color="grey", linestyle="--", linewidth=1)
    ax.set_yticks(ys, [plain(label) for label in plot.labels])
    ax.set_xlabel(plain(plot.xlabel))
    ax.set_title(plain(plot.title))
    fig.tight_layout()
    fig.savefig(path, format="png", metadata={"Software": None})
    plt.close(fig)


def _draw(plot: LinePlot, path: Path | BinaryIO) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=100)
    for name, ys in plot.series.items():
        ax.plot(plot.x, [float("nan") if y is None else y for y in ys], marker="o", markersize=3, label=plain(name))
    if plot.logx:
        ax.set_xscale("log")
    if plot.ylim:
        ax.set_ylim(*plot.ylim)
    ax.set_title(plain(plot.title))
    ax.set_xlabel(plain(plot.xlabel))
    ax.set_ylabel(plain(plot.ylabel))
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, format="png", metadata={"Software": None})
    plt.close(fig)


def intervals_markdown(metrics: dict, closing: str = "![Intervals](intervals.png)") -> str:
    """The report section of `metrics["intervals"]` (evaluator.stats.bootstrap.intervals): each headline
    metric with its confidence interval, and how they were computed; `closing` ends it (by default
    the link to `intervals_figure`)."""
    from evaluator.stats.bootstrap import value_at

    iv = metrics["intervals"]

    def num(v):  # four significant digits: percentages and fractions (MRR, CounterBias) alike
        return f"{v:.4g}" if isinstance(v, float) else v

    rows = [[path, num(value_at(metrics, path)), *([num(b) for b in bounds] if bounds else ["undefined", ""])]
            for path, bounds in iv["metrics"].items()]
    return "\n".join([
        f"## {100 * iv['confidence']:.0f}% confidence intervals", "",
        f"{iv['method'].capitalize()}: {iv['resamples']:,} resamples of the {iv['clusters']:,} {iv['unit']}s "
        f"(rows of one {iv['unit']} are resampled together), seed {iv['seed']}. Undefined: a resample left the "
        "metric without rows."
        + (f" Exact binomial (Clopper-Pearson) intervals, the outcomes being independent 0/1 values: "
           f"{', '.join(iv['exact'])}." if iv.get("exact") else ""), "",
        report_table(["metric", "value", "low", "high"], rows), "", closing, ""])


def intervals_figure(metrics: dict, title: str) -> FigureSpec:
    """The headline metrics as bars with their confidence intervals as error bars."""
    from evaluator.stats.bootstrap import value_at

    shown = [(path, value_at(metrics, path), b) for path, b in metrics["intervals"]["metrics"].items()
             if b is not None and isinstance(value_at(metrics, path), (int, float))]
    return FigureSpec(filename="intervals.png", title=f"{title}: {100 * metrics['intervals']['confidence']:.0f}% "
                      "confidence intervals", categories=[p for p, _, _ in shown],
                      series={"value": [v for _, v, _ in shown]},
                      errors={"value": [[max(0.0, v - lo), max(0.0, hi - v)] for _, v, (lo, hi) in shown]})


def check_output_file(path: Path, option: str) -> None:
    """A file the command will write: not an existing folder, and its parent is (or can be) a folder."""
    path = Path(path)
    if path.is_dir():
        raise ParamsError(f"{option} {path}: is a folder, expected a file name")
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise ParamsError(f"{option} {path}: {parent} is a file, not a folder")
            break


def check_report_folder(folder: Path, inputs: dict | None = None, option: str = "--report") -> None:
    """--report DIR: a folder (created when missing); an existing file there is an error, and so is a
    folder that is or lies inside one of the command's input folders (`inputs`, {option: path}: the
    built dataset, the reports compared, the images): a report written there would change what it reads
    (a build that then fails `verify`, a report overwritten by its own comparison)."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise ParamsError(f"{option} {folder}: a file with this name exists; the report is a folder")
    target = Path(os.path.abspath(folder))
    for name, path in (inputs or {}).items():
        if path is None or not Path(path).exists():
            continue
        real = Path(path).resolve()
        for candidate in {target, target.resolve()}:
            if candidate == real or real in candidate.parents:
                relation = "is" if candidate == real else "lies inside"
                raise ParamsError(f"{option} {folder}: {relation} the {name} {path}; write the report elsewhere")
    check_output_file(folder / "metrics.json", option)


RECORD = ".vlbench-report.json"  # the files of the report in its folder and their SHA-256, written last
RECORD_LIMIT = 1 << 20  # bytes: a report's record is a few hundred


def png(draw: Callable[..., None], *args) -> bytes:
    """The PNG bytes a drawing function (`draw(*args, stream)`) writes."""
    stream = io.BytesIO()
    draw(*args, stream)
    return stream.getvalue()


def write_report(folder: Path, metrics: dict, markdown: str, plots: list, extra: dict[str, bytes] | None = None
                 ) -> list[Path]:
    """metrics.json (never NaN: undefined values are null and listed), report.md, the plots and `extra` ({file
    name: bytes}), all rendered first and then written together with the report's record (RECORD: each file's
    SHA-256), so that a full disk, a kill or a second run never leaves the files of two runs side by side
    unnoticed (`check_report` compares them with the record). The files an earlier report listed in its record,
    still as it wrote them, and this one does not write are removed."""
    check_report_folder(folder)
    files = {"metrics.json": (dumps(metrics, note_key="undefined", indent=2, sort_keys=True) + "\n").encode(),
             "report.md": markdown.encode("utf-8", "backslashreplace")}  # a name that is not UTF-8
    for plot in plots:
        draw = draw_bars if isinstance(plot, FigureSpec) else draw_forest if isinstance(plot, ForestPlot) else _draw
        files[plot.filename] = png(draw, plot)
    files.update(extra or {})
    record = {"files": {name: hashlib.sha256(data).hexdigest() for name, data in files.items()}}
    earlier = _recorded(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        write_together({**{folder / name: data for name, data in files.items()},
                        folder / RECORD: (dumps(record, indent=2) + "\n").encode()})
        for name in sorted(set(earlier) - set(files)):
            if (folder / name).is_file() and sha256_file(folder / name) == earlier[name]:  # as vlbench wrote it
                (folder / name).unlink()
    except OSError as exc:
        raise write_error(f"--report {folder}: cannot write the report", exc) from None
    return [folder / name for name in files]


def _recorded(folder: Path) -> dict[str, str]:
    """{file name: SHA-256} of the report's record in FOLDER; {} where there is none (a report of an older
    vlbench) or it is not one (then nothing is taken from it: a name with a path is never followed)."""
    from core.ownfiles import OwnFileError, read_own_file

    try:  # never through a link, never waiting on a FIFO planted in its place, bounded
        files = json.loads(read_own_file(Path(folder) / RECORD, RECORD_LIMIT) or b"null")["files"]
    except (OSError, OwnFileError, ValueError, KeyError, TypeError, RecursionError):
        return {}
    if not isinstance(files, dict):
        return {}
    return {n: h for n, h in files.items() if isinstance(n, str) and isinstance(h, str) and n == Path(n).name
            and n not in ("", ".", "..", RECORD)}


def check_report(folder: Path, names: tuple[str, ...]) -> None:
    """Refuse a report folder whose files NAMES are not those its record lists (the files of two runs, or an
    edit): one line naming the first such file. A folder with no record (an older vlbench) is taken as it is."""
    recorded = _recorded(folder)
    if not recorded:
        return
    for name in names:
        path = Path(folder) / name
        if name not in recorded or not path.is_file() or sha256_file(path) != recorded[name]:
            raise ParamsError(f"{path}: not the file {RECORD} lists (a later report into {folder} stopped midway, "
                              "or the file was edited); write the report again")
