"""`vlbench counterbias-compare A B`: two CounterBias reports on the same VL-Bias split (the same images and
templates) compared cell by cell -- FairVLP's measure, debias, measure again (Zhang, Wang, Sang, ACM MM
2022, §5, Table 4). Model A is the reference (e.g. before debiasing), B the other; every Table 2 cell
(mean over targets of |Eq. 7|, per template and averaged) and every target's signed bias (Fig. 5 right)
is given for both, with B - A and its 95% interval from a paired cluster bootstrap over images (the same
draws resample both; `evaluator.stats.bootstrap.paired`). A target whose |bias| dropped has a negative
"change in |bias|"."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from core.errors import ParamsError
from core.markdown import report_table
from evaluator.publish.report import check_report, check_report_folder, write_report
from evaluator.vl_bias import counterbias as cb

NEEDED = ("id", "image_id", "template", "target", "target_type", "bias_class")


def _load(folder: Path) -> tuple[dict, dict]:
    """(metrics, per-instance columns sorted by id) of a `vlbench counterbias --report` folder."""
    folder = Path(folder)
    for name in ("metrics.json", "per_instance.parquet"):
        if not (folder / name).is_file():
            raise ParamsError(f"{folder}: not a CounterBias report (no {name}; write one with vlbench counterbias "
                              "--report)")
    check_report(folder, ("metrics.json", "per_instance.parquet"))  # both of one run
    try:
        metrics = json.loads((folder / "metrics.json").read_text(encoding="utf-8"))
        table = pq.read_table(folder / "per_instance.parquet")
    except (OSError, ValueError, RecursionError) as exc:
        raise ParamsError(f"{folder}: cannot read the CounterBias report ({str(exc).splitlines()[0][:160]})") from None
    if not isinstance(metrics, dict) or "measures" not in metrics or "concept" not in metrics:
        raise ParamsError(f"{folder}/metrics.json: not the metrics of a CounterBias report")
    missing = [c for c in NEEDED if c not in table.column_names]
    if missing:
        raise ParamsError(f"{folder}/per_instance.parquet: no column {missing[0]}")
    table = table.sort_by("id")
    import pyarrow as pa

    return metrics, {c: np.asarray(table.column(c).to_pylist(),
                                   dtype=object if pa.types.is_string(table.schema.field(c).type) else np.float64)
                     for c in table.column_names}


def compare_reports(a: Path, b: Path, *, out: Path | None = None, bootstrap: int = 1000, seed: int = 0) -> dict:
    """B against A, cell by cell, with paired bootstrap intervals of B - A."""
    from evaluator.stats.bootstrap import intervals, paired, point_values

    if out is not None:
        check_report_folder(out, {"report A": a, "report B": b}, "--out")
    (ma, ca), (mb, cb_) = _load(a), _load(b)
    if ma["split"] != mb["split"] or not np.array_equal(ca["id"], cb_["id"]):
        raise ParamsError(f"{b}: not measured on the same rows as {a} (split {mb['split']}, {len(cb_['id']):,} rows "
                          f"against {ma['split']}, {len(ca['id']):,}); compare two runs on the same VL-Bias build")
    if ma["concept"]["b0"] != mb["concept"]["b0"]:
        raise ParamsError(f"{b}: B0 is {mb['concept']['b0']}, {a}'s is {ma['concept']['b0']}; measure both with "
                          "the same --b0")
    measures = [m for m in cb.MEASURES if m in ma["measures"] and m in mb["measures"]]
    templates = ma["templates"]
    b0 = ma["concept"]["b0"]
    resampled = paired(cb.resampling(ca, measures, templates, b0, per_target=True),
                       cb.resampling(cb_, measures, templates, b0, per_target=True))
    iv = intervals(resampled, bootstrap, seed) if bootstrap else None
    point = point_values(resampled)
    cells = {}
    for m in measures:
        for kind in sorted(ma["measures"][m]["avg"]):
            keys = [f"measures.{m}.templates.{t}.{kind}.mean_abs" for t in templates] + [f"measures.{m}.avg.{kind}"]
            names = templates + ["avg"]
            targets = sorted(ma["measures"][m]["per_target_avg"].get(kind, {}))
            keys += [f"measures.{m}.per_target_avg.{kind}.{t}" for t in targets]
            names += [f"target:{t}" for t in targets]
            for name, key in zip(names, keys):
                cells.setdefault(m, {}).setdefault(kind, {})[name] = _cell(point, iv, key)
    metrics = {"a": {"model": ma["model"], "settings": ma["settings"]},
               "b": {"model": mb["model"], "settings": mb["settings"]},
               "split": ma["split"], "rows": int(len(ca["id"])), "images": ma["images"], "b0": b0,
               "templates": templates, "template_labels": ma.get("template_labels", {}), "measures": cells,
               "intervals": None if iv is None else {k: v for k, v in iv.items() if k != "metrics"}}
    if out is not None:
        write_report(Path(out), metrics, _markdown(metrics), [])
    return metrics


def _cell(point: dict, iv: dict | None, key: str) -> dict:
    def value(name):
        v = point.get(name)
        return None if v is None or not np.isfinite(v) else v

    out = {"a": value(f"a.{key}"), "b": value(f"b.{key}"), "diff": value(f"diff.{key}"),
           "diff_interval": None if iv is None else iv["metrics"].get(f"diff.{key}")}
    if ".per_target_avg." in key and out["a"] is not None and out["b"] is not None:
        out["abs_change"] = abs(out["b"]) - abs(out["a"])  # < 0: the target's bias dropped
    return out


def _pct(v) -> str:
    return "-" if v is None else f"{100 * v:.2f}"


def _interval(cell: dict, scale: float) -> str:
    iv = cell["diff_interval"]
    return "-" if iv is None else f"[{scale * iv[0]:.2f}, {scale * iv[1]:.2f}]"


def _markdown(metrics: dict) -> str:
    a, b = metrics["a"]["model"], metrics["b"]["model"]
    lines = [f"# CounterBias: {b} against {a}", "",
             f"VL-Bias split `{metrics['split']}`, {metrics['rows']:,} image x template rows, {metrics['images']:,} "
             f"images, the same for both (Zhang, Wang, Sang, ACM MM 2022, §5: measure, debias, measure again). "
             f"B - A with its 95% interval from a paired cluster bootstrap over images "
             f"({metrics['intervals']['resamples'] if metrics['intervals'] else 0} resamples). Values in % "
             f"(B@L log in log-probability units); + = {metrics['b0']}-leaning for signed biases."]
    for key in ("softmax", "attack", "b0"):
        if metrics["a"]["settings"].get(key) != metrics["b"]["settings"].get(key):
            lines.append(f"Note: the runs differ in {key} ({metrics['a']['settings'].get(key)} against "
                         f"{metrics['b']['settings'].get(key)}); the difference mixes the models and the settings.")
    relative = {side: bool(metrics[side]["settings"].get("relative_scores")) for side in "ab"}
    if relative["a"] != relative["b"]:
        lines.append("Note: one model's word probabilities are renormalised over the candidates (a dual encoder, or a "
                     "generative VLM's mid-sentence [MASK]) and the other's are full-vocabulary: their biases are "
                     "on different scales, so read the signs and the ranking of targets rather than B - A.")
    labels = metrics["template_labels"]
    for m, kinds in metrics["measures"].items():
        scale = 1.0 if m == "l_log" else 100.0
        fmt = (lambda v: "-" if v is None else f"{v:.3f}") if m == "l_log" else _pct
        for kind, cells in kinds.items():
            lines += ["", f"## {cb.MEASURES[m][0]} ({cb.MEASURES[m][1]}), {kind}", "", "Mean over targets of |Eq. 7|:",
                      "", report_table(["Template", "A", "B", "B - A", "95% interval"],
                                       [[labels.get(t, t) if t != "avg" else "Avg.", fmt(c["a"]), fmt(c["b"]),
                                         fmt(c["diff"]), _interval(c, scale)]
                                        for t, c in cells.items() if not t.startswith("target:")])]
            lines += ["", "Signed bias per target (template average):", "", report_table(
                ["Target", "A", "B", "B - A", "95% interval", "change in abs. bias"],
                [[t.removeprefix("target:"), fmt(c["a"]), fmt(c["b"]), fmt(c["diff"]), _interval(c, scale),
                  fmt(c.get("abs_change"))] for t, c in cells.items() if t.startswith("target:")])]
    return "\n".join(lines) + "\n"
