"""`vlbench perceptual`: the perceptual score of a model on a built split (Gat et al., NeurIPS 2021, Eq. 1-5),
its intervals, its decomposition by a column and its report."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pyarrow as pa

from core.data import load_table
from core.errors import ParamsError
from evaluator.models.options import ModelOptions
from evaluator.publish.report import check_report_folder, intervals_figure, intervals_markdown, write_report
from evaluator.request import ScoringRequest
from evaluator.splits import open_split, task_options, with_column
from evaluator.stats.bootstrap import intervals
from evaluator.tasks import get_task


def _training_table(task, folder: Path, options: ModelOptions):
    """The rows Eq. 4's majority vote is fitted on: the task's own source, else the train split."""
    from core.data import available_splits

    if not task.has_majority:
        return None
    own = task.training_table(options)
    if own is not None:
        return own
    return load_table(folder, task.config, "train") if "train" in available_splits(folder, task.config) else None


def _where(table, condition: str | None):
    """`--where COLUMN=VALUE`: evaluate on the matching rows only (e.g. one DISCO image quality)."""
    if condition is None:
        return table
    import pyarrow.compute as pc

    column, sep, value = condition.partition("=")
    if not sep or column not in table.column_names:
        raise ParamsError(f"--where {condition}: expected COLUMN=VALUE with a column of the table")
    values = table.column(column)
    try:
        target = pa.scalar(value).cast(values.type) if not pa.types.is_string(values.type) else value
        return table.filter(pc.equal(values, target))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        raise ParamsError(f"--where {condition}: '{value}' is not a value of column '{column}' ({values.type})") \
            from None


def _model_notes(model: str, adapter) -> list[str]:
    """What a generative model was not shown (a blind Social-IQ model, DISCO without audio), for the report."""
    from evaluator.models.ask import GenerativeAdapter

    note = adapter.note() if isinstance(adapter, GenerativeAdapter) else None
    return [f"{model}: {note}"] if note else []


def perceptual_score(request: ScoringRequest, model: str, options, *, model_options: ModelOptions = ModelOptions(),
                     report: Path | None = None, where: str | None = None, progress=None) -> dict | None:
    """`vlbench perceptual`: the perceptual score of a model on a built split (Gat et al., NeurIPS 2021, Eq. 1-5);
    `options` (evaluator.perceptual.score.PerceptualOptions) are the method's, the request's resamples and
    seed give the intervals.
    Under a distributed launch every rank computes its rows; rank 0 returns the metrics and writes
    the report, the other ranks return None."""
    from evaluator.models.distributed import world_from_env
    from evaluator.perceptual import report as r
    from evaluator.perceptual import score as p

    bench, data = request.bench, request.data
    task = get_task(bench)
    score_options = task_options(task, list(request.options))
    if report is not None:
        check_report_folder(report, {"--data": data, "--images": model_options.images,
                                     "--videos": model_options.videos})
    folder, split, table = open_split(task, data, request.split, request.answers)
    table = _where(table, where)
    if options.by is not None:
        table = with_column(task, folder, split, table, options.by)
    p.resolve_modalities(task, table, options.modalities)  # bad usage fails before a model is loaded
    if table.num_rows == 0:
        raise ParamsError(f"{bench} {split}: no rows to score" + (f" where {where}" if where else ""))
    model_options = dataclasses.replace(model_options, data=folder)
    world = world_from_env()
    adapter = task.make_model(model, model_options)
    train = _training_table(task, folder, model_options)
    result = p.perceptual(task, adapter, table, options, score_options, train, world, progress)
    world.close()
    if not world.is_main:
        return None
    metrics = {"benchmark": bench, "split": split, "model": model, "rows": table.num_rows, "where": where,
               "options": dataclasses.asdict(options), "world_size": world.size,
               "modalities": {m: list(c) for m, c in result.modalities.items()},
               "all": p.summarise(result), "notes": result.notes + _model_notes(model, adapter)}
    clusters = task.clusters(table) if request.resamples else None
    if clusters is not None:
        metrics["intervals"] = intervals(p.resampling(result, *clusters), request.resamples, request.seed)
    if options.by is not None:
        metrics["by"] = {"column": options.by, "groups": p.decompose(result, table.column(options.by).to_pylist())}
    metrics.update(task.perceptual_extras(table, train, result))  # benchmark-specific analyses (VQA: Table 2)
    if report is not None:
        labels = task.metric_labels
        first = next(iter(labels))
        plot = r.bar_plot(f"{model} on {bench}: perceptual score", metrics["all"], first, labels[first])
        markdown, plots = r.render(metrics, labels, task.layout), [plot]
        if "intervals" in metrics:
            markdown = markdown.rstrip("\n") + "\n\n" + intervals_markdown(metrics)
            plots.append(intervals_figure(metrics, f"{model} on {bench}"))
        ids = ["/".join(map(str, i)) if isinstance(i, tuple) else str(i) for i in task.ids(table)]
        write_report(report, metrics, markdown, plots,
                     {"per_sample.parquet": r.sample_scores_parquet(ids, table, options.by, result)})
    return metrics
