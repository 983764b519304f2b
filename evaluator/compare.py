"""`vlbench compare`: submissions scored on the same rows, each against the first, with the
difference of every headline metric (and subset), its paired-bootstrap interval and the p-value of a
paired permutation test (evaluator/stats/bootstrap.py); a report with a forest plot per comparison."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from core.errors import ParamsError
from core.markdown import report_table
from evaluator.interop import load_submission
from evaluator.publish.report import ForestPlot, check_report_folder, write_report
from evaluator.request import ScoringRequest
from evaluator.splits import column_groups, open_split, task_options, with_column
from evaluator.stats import bootstrap
from evaluator.submission import Coverage, match_ids
from evaluator.tasks import get_task


def compare_predictions(request: ScoringRequest, predictions: list[Path], *, report: Path | None = None,
                        by: str | None = None) -> dict:
    """Every submission after the first minus the first. With `allow_partial`, the rows every
    submission predicts are compared (a comparison is always on the same rows). `by`: also compare
    on the rows of each value of a column (a table column, or a shortcut label of `vlbench shortcuts`)."""
    bench, resamples, seed = request.bench, request.resamples, request.seed
    if len(predictions) < 2:
        raise ParamsError("--predictions: give at least two files to compare")
    if resamples < 1:
        raise ParamsError(f"--bootstrap {resamples}: a comparison needs at least one resample")
    names = [Path(p).name for p in predictions]
    if len(set(map(str, predictions))) < len(predictions):
        raise ParamsError("--predictions: the same file is given twice")
    task = get_task(bench)
    options = task_options(task, list(request.options))
    if report is not None:
        check_report_folder(report)
    folder, split, table = open_split(task, request.data, request.split, request.answers)
    if by is not None:
        table = with_column(task, folder, split, table, by)
    ids = task.ids(table)
    loaded, inputs = [], []
    for path in predictions:
        preds, converted = load_submission(task, path, request.fmt, ids, request.harness_data,
                                             request.reasoning_tags, build=(folder, split, table))
        match_ids(path, preds, ids, task.id_field, request.allow_partial, request.allow_extra, request.partial_hint)
        loaded.append(preds)
        inputs.append(converted)
    common = [all(i in p for p in loaded) for i in ids]
    if not any(common):
        raise ParamsError("--predictions: no row has a prediction in every file")
    table = table.filter(pa.array(common, pa.bool_()))
    ids = task.ids(table)
    loaded = [{i: p[i] for i in ids} for p in loaded]
    coverage = Coverage(scored=len(ids), expected=len(common), missing=len(common) - len(ids), ignored_extra=0)
    comparisons = _comparisons(task, table, loaded, names, coverage, options, resamples, seed)
    metrics = {"benchmark": bench, "split": split, "rows": len(ids), "coverage": coverage.as_dict(),
               "predictions": names, "comparisons": comparisons,
               **({"inputs": dict(zip(names, inputs))} if any(inputs) else {})}
    if by is not None:
        metrics["by"] = {"column": by, "groups": _by_groups(task, table, loaded, names, by, options, resamples, seed)}
    if report is not None:
        markdown, plots = _report(metrics)
        write_report(report, metrics, markdown, plots)
    return metrics


def _comparisons(task, table: pa.Table, loaded: list[dict], names: list[str], coverage: Coverage, options,
                 resamples: int, seed: int) -> list[dict]:
    """Each submission after the first against the first, on the rows of `table`."""
    scores = [task.score(table, p, coverage, options) for p in loaded]
    resampled = [task.resampling(table, p, options) for p in loaded]
    if resampled[0] is None:
        raise ParamsError(f"compare: {task.name} does not declare how its rows are resampled yet")
    out = []
    for k in range(1, len(loaded)):
        result = bootstrap.compare(resampled[0], resampled[k], resamples, seed)
        for path, row in result["metrics"].items():
            row["a"], row["b"] = bootstrap.value_at(scores[0], path), bootstrap.value_at(scores[k], path)
        out.append({"a": names[0], "b": names[k], **result})
    return out


def _by_groups(task, table: pa.Table, loaded: list[dict], names: list[str], column: str, options, resamples: int,
               seed: int) -> dict:
    """The comparisons on the rows of each value of `column` (a group where a metric is undefined,
    e.g. no complete pair, says why)."""
    from core.errors import SubmissionError

    groups = {}
    for value, _, part in column_groups(table, column):
        ids = task.ids(part)
        coverage = Coverage(scored=len(ids), expected=len(ids), missing=0, ignored_extra=0)
        try:
            groups[str(value)] = {"rows": part.num_rows, "comparisons": _comparisons(
                task, part, [{i: p[i] for i in ids} for p in loaded], names, coverage, options, resamples, seed)}
        except SubmissionError as exc:
            groups[str(value)] = {"rows": part.num_rows, "undefined": str(exc)}
    return groups


def _p(value) -> str:
    return "undefined" if value is None else f"{value:.3g}"


def _report(metrics: dict) -> tuple[str, list]:
    first = metrics["comparisons"][0]
    md = [f"# {metrics['benchmark']}: paired comparison", "",
          f"{metrics['rows']:,} rows of split {metrics['split']}, the same for every submission. Each submission "
          f"is compared with `{metrics['predictions'][0]}` (B - A). Interval: {100 * first['confidence']:.0f}% "
          f"paired cluster bootstrap ({first['resamples']:,} resamples of the {first['clusters']:,} "
          f"{first['unit']}s, seed {first['seed']}); p: two-sided paired permutation test (the two submissions' "
          f"values swapped within each {first['unit']} at random), (extreme + 1) / (resamples + 1).", ""]
    plots = []
    for k, c in enumerate(metrics["comparisons"], start=1):
        rows = [[path, r["a"], r["b"], r["difference"], *(r["interval"] or ["undefined", ""]), _p(r["p_value"])]
                for path, r in c["metrics"].items()]
        md += [f"## {c['b']} - {c['a']}", "",
               report_table(["metric", "A", "B", "B - A", "low", "high", "p"], rows), "",
               f"![Differences](forest_{k}.png)", ""]
        shown = [(path, r) for path, r in c["metrics"].items() if r["interval"] is not None]
        plots.append(ForestPlot(filename=f"forest_{k}.png", title=f"{c['b']} - {c['a']}",
                                labels=[p for p, _ in shown], values=[r["difference"] for _, r in shown],
                                intervals=[tuple(r["interval"]) for _, r in shown],
                                xlabel=f"difference (points), {100 * c['confidence']:.0f}% interval"))
    if "by" in metrics:
        md += [f"## By {metrics['by']['column']}", ""]
        for value, group in metrics["by"]["groups"].items():
            if "undefined" in group:
                md += [f"### {value} ({group['rows']:,} rows): undefined, {group['undefined']}", ""]
                continue
            for c in group["comparisons"]:
                rows = [[path, r["difference"], *(r["interval"] or ["undefined", ""]), _p(r["p_value"])]
                        for path, r in c["metrics"].items()]
                md += [f"### {value} ({group['rows']:,} rows): {c['b']} - {c['a']}", "",
                       report_table(["metric", "B - A", "low", "high", "p"], rows), ""]
    return "\n".join(md), plots
