"""`vlbench predict` and `vlbench evaluate`: the benchmark-independent flow around a task."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pyarrow as pa

from core.errors import ModelError, ParamsError
from evaluator.interop import load_submission
from evaluator.models.options import ModelOptions
from evaluator.models.prediction_record import (
    metadata_path,
    read_record,
    record_markdown,
    record_summary,
    rotations_path,
    samples_path,
)
from evaluator.publish.report import (
    check_output_file,
    check_report_folder,
    intervals_figure,
    intervals_markdown,
    write_report,
)
from evaluator.request import ScoringRequest
from evaluator.shards import Shard, row_shards, shard_state, split_fingerprint, state_path, write_run
from evaluator.splits import column_groups, open_split, task_options, with_column
from evaluator.stats.bootstrap import intervals, rows_in_scope
from evaluator.stats.circular import circular_markdown, circular_report, read_rotations
from evaluator.submission import match_ids
from evaluator.tasks import get_task


def _gathered(world, values: list, shard, n: int) -> list:
    """Every rank's per-row values (any Python objects) in row order, on every rank."""
    if world.size == 1:
        return values
    import numpy as np

    local = np.empty(len(values), dtype=object)
    for i, v in enumerate(values):
        local[i] = v
    return world.all_rows(local, shard, n).tolist()


def predict(bench: str, data: str, model: str, out: Path, *, split: str | None = None,
            options: ModelOptions = ModelOptions(), log_samples: bool = False, limit: int | None = None,
            offset: int = 0, shard=None) -> tuple[str, int, Path] | None:
    """Run a model over a built split and write a prediction file in the benchmark's format, with its
    metadata file beside it (and one JSON line per sample with `log_samples`, generative models).
    Under torchrun / accelerate launch each rank predicts its rows (evaluator.models.distributed); rank 0
    gathers them in row order and writes the files (the other ranks return None). `limit` / `offset`:
    only rows offset .. offset + limit - 1 of the split (a smoke run; `evaluate` then needs
    --allow-partial), recorded in the metadata file. `shard` (evaluator.shards.Shard): only the shard's rows, written
    under the shard's name beside OUT with the state `vlbench merge` reads. (split, rows predicted, the file written)"""
    from core.jsonout import dumps
    from core.manifest import library_versions
    from core.threads import recorded as recorded_threads
    from evaluator.models.ask import GenerativeAdapter
    from evaluator.models.distributed import world_from_env
    from evaluator.models.images import BLIND_NOTES
    from evaluator.models.options import reader_kind, recorded_options
    from evaluator.models.spec import parse_spec

    task = get_task(bench)
    if shard is not None:
        if limit is not None or offset != 0:
            raise ParamsError("--shard with --limit / --offset: a shard is a part of the whole split; pass one of them")
        out = shard.path(out)
    for path, option in ((out, "--out"), (metadata_path(out), "--out"), (samples_path(out), "--log-samples"),
                         (rotations_path(out), "--circular"), *(((state_path(out), "--out"),) if shard else ())):
        check_output_file(path, option)
    folder, split, table = open_split(task, data, split, truth=False)
    rows_chosen = limit is not None or offset != 0
    if rows_chosen:
        if offset < 0 or offset >= table.num_rows or (limit is not None and limit < 1):
            raise ParamsError(f"--offset {offset} / --limit {limit}: the {split} split has {table.num_rows:,} rows "
                              "(offset in 0..rows - 1, limit at least 1)")
        table = table.slice(offset, limit)
    adapter = task.make_model(model, dataclasses.replace(options, data=folder))
    _check_public_inputs(adapter, model, data, folder, table)
    adapter.fit_split(table)
    if shard is not None:
        fingerprint = split_fingerprint(folder, task.config, split)
        table = table.filter(pa.array(row_shards(task, table, shard.count) == shard.index))
    if log_samples and adapter.samples is None:
        raise ParamsError(f"--log-samples: {model} has no prompts or raw outputs to log (generative hf: models do)")
    world = world_from_env()
    ranked = world.shard(table.num_rows)  # this rank's rows under torchrun (all of them in one process)
    predictions = adapter.predict(table if world.size == 1 else table.take(pa.array(ranked)))
    predictions = _gathered(world, list(predictions), ranked, table.num_rows)
    if adapter.samples is not None:
        adapter.samples = _gathered(world, list(adapter.samples), ranked, table.num_rows)
    if adapter.rotations is not None:
        adapter.rotations = _gathered(world, list(adapter.rotations), ranked, table.num_rows)
    world.close()
    if not world.is_main:
        return None
    kind = reader_kind(parse_spec(model)[0], isinstance(adapter, GenerativeAdapter))
    meta = {"benchmark": bench, "data": str(data), "split": split, "rows": table.num_rows, "model": model,
            "predictions": Path(out).name, **adapter.metadata(),
            **({"blind": BLIND_NOTES[kind]} if options.no_image else {}),
            "options": {**recorded_options(options, kind),
                        **({"limit": limit, "offset": offset} if rows_chosen else {})},
            "library_versions": library_versions(), "threads": recorded_threads(),
            **({"shard": shard.record(fingerprint)} if shard else {})}
    samples = None
    if log_samples:
        lines = [dumps({"id": list(i) if isinstance(i, tuple) else i, **s}) for i, s in zip(task.ids(table),
                                                                                          adapter.samples)]
        samples = "".join(line + "\n" for line in lines).encode()  # no line at all for an empty shard
    try:
        write_run(task, table, out, predictions, meta, samples, adapter.rotations,
                  (lambda written: shard_state(task, table, predictions, adapter.rotations, adapter.judge, written,
                                               samples)) if shard else None)
    except ValueError:
        raise ModelError(f"{model}: the model produced NaN or infinite values; no prediction file was written") \
            from None
    return split, len(predictions), Path(out)


def predict_on_ray(bench: str, data: str, model: str, out: Path, ray, *, split: str | None = None,
                   options: ModelOptions = ModelOptions(), log_samples: bool = False,
                   echo=print) -> tuple[str, int, Path]:
    """`predict --ray ADDRESS`: the split's shards as Ray tasks (`ray`, an evaluator.ray_shards.RayRun), each shard's
    files written beside OUT as it finishes (`predict --shard`'s names), then merged into OUT (`vlbench merge`): the
    bytes one process writes. (split, rows predicted, OUT)"""
    import functools

    from evaluator.ray_shards import run_on_ray, write_shard_files
    from evaluator.shards import merge

    for path, option in ((out, "--out"), (metadata_path(out), "--out"), (samples_path(out), "--log-samples"),
                         (rotations_path(out), "--circular")):
        check_output_file(path, option)
    _, split, _ = open_split(get_task(bench), data, split, truth=False)  # the build is there before the cluster works
    job = functools.partial(_shard_files, data, model, Path(out).name, split, options, log_samples)
    count = run_on_ray(ray, [bench], job, lambda bench, shard, files: write_shard_files(Path(out).parent, files),
                       echo, f"{model} on {bench}")
    _, rows = merge([Shard(i, count).path(out) for i in range(count)], Path(out), data)
    return split, rows, Path(out)


def _shard_files(data: str, model: str, name: str, split: str, options: ModelOptions, log_samples: bool, bench: str,
                 shard) -> dict[str, bytes]:
    """One shard predicted on a Ray node into a folder of its own: its files (`predict --shard`'s), by name."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="vlbench-shard-") as folder:
        predict(bench, data, model, Path(folder) / name, split=split, options=options, log_samples=log_samples,
                shard=shard)
        return {path.name: path.read_bytes() for path in sorted(Path(folder).iterdir()) if path.is_file()}


def _check_public_inputs(adapter, model: str, data: str, folder: Path, table: pa.Table) -> None:
    """A model run on the public half of a sealed build reads only what it holds: one that reads a sealed column
    (VCR's QA->R prompts read the correct answer) is one line, before any weight is loaded."""
    from evaluator.models.model import input_columns
    from evaluator.sealed import sealed_record

    if sealed_record(folder) is None:
        return
    held = [c for c in input_columns(adapter, table) if c not in table.column_names]
    if held:
        raise ModelError(f"{model}: reads column {held[0]}, which --data {data} (the public half of a sealed build) "
                         "holds apart with the answers; a participant's model sees only "
                         f"{', '.join(table.column_names)}")


def evaluate(request: ScoringRequest, predictions: Path, *, report: Path | None = None, by: str | None = None,
             hub_results: Path | None = None, hub_dataset: str | None = None, hub_source: str | None = None,
             parts=None, scope: bool = False) -> dict:
    """Validate a prediction file against a split and compute the benchmark's metrics, with 95%
    confidence intervals from the request's cluster resamples (evaluator.stats.bootstrap; 0: none) where the
    benchmark declares its resampling; the record `vlbench predict` wrote beside the file (if any)
    says in the report how the predictions were made. `hub_results`: also the Hub's evaluation-results
    file for a model repo (evaluator.publish.hub_results), naming the benchmark's dataset repo `hub_dataset`
    (default: DATA when it is a repo id), each entry's `source` `hub_source`. `by`: also score each value of this
    column. `parts(task, table)`: [(name, row mask)] of parts of the split, each also scored (`metrics["parts"]`, as
    `by` groups, with each ratio metric's rows in scope); `scope`: the rows each ratio metric is computed over, in
    `metrics["intervals"]["scope"]` (the challenge service's minimum subset size reads them)."""
    bench, data, bootstrap, seed = request.bench, request.data, request.resamples, request.seed
    task = get_task(bench)
    options = task_options(task, list(request.options))
    if report is not None:
        check_report_folder(report, {"--data": data})
    if hub_results is not None and hub_dataset is None:
        if Path(data).exists():
            raise ParamsError("--hub-results: pass --hub-dataset ORG/NAME, the Hub dataset repo of this benchmark "
                              f"(--data {data} is a local folder)")
        hub_dataset = data
    from evaluator.publish.hub_results import check_source

    check_source(hub_source, hub_results)
    folder, split, table = open_split(task, data, request.split, request.answers)
    if by is not None:
        table = with_column(task, folder, split, table, by)
    preds, converted = load_submission(task, predictions, request.fmt, task.ids(table), request.harness_data,
                                         request.reasoning_tags, build=(folder, split, table))
    coverage = match_ids(predictions, preds, task.ids(table), task.id_field, request.allow_partial,
                         request.allow_extra, request.partial_hint)
    record = read_record(predictions)
    metrics = {"benchmark": bench, "split": split, "predictions": Path(predictions).name,
               **({"input": converted} if converted else {}), **task.score(table, preds, coverage, options)}
    resampling = task.resampling(table, preds, options) if bootstrap else None
    if resampling is not None:
        metrics["intervals"] = intervals(resampling, bootstrap, seed)
        if scope:
            metrics["intervals"]["scope"] = rows_in_scope(resampling)
    if parts is not None:
        metrics["parts"] = _group_metrics(task, table, preds, ((name, mask, table.filter(mask))
                                                               for name, mask in parts(task, table)),
                                          options, bootstrap, seed, scope=True)
    if record is not None:
        metrics["prediction_record"] = record_summary(record)
    if task.prior_rule is not None:
        metrics["prior_following"] = _prior_following(task, folder, table, preds, options, request)
    rotations = read_rotations(predictions) if (record or {}).get("asked", {}).get("circular") else None
    if rotations is not None:
        metrics["circular"] = circular_report(task, table, preds, rotations, bootstrap, seed, options)
    if by is not None:
        metrics["by"] = {"column": by, "groups": _group_metrics(task, table, preds, column_groups(table, by), options,
                                                                bootstrap, seed)}
    if hub_results is not None:
        from evaluator.publish.hub_results import write_eval_results

        # a dataset fetched from the Hub lies in its snapshot folder, named by the commit
        revision = folder.name if hub_dataset == data and re.fullmatch(r"[0-9a-f]{40}", folder.name) else None
        metrics["hub_results"] = str(write_eval_results(hub_results, bench, folder, metrics,
                                                        hub_dataset, revision, source=hub_source))
    if report is not None:
        markdown, plots = task.report(metrics, Path(predictions).stem)
        if "intervals" in metrics:
            markdown = markdown.rstrip("\n") + "\n\n" + intervals_markdown(metrics)
            plots = [*plots, intervals_figure(metrics, Path(predictions).stem)]
        if by is not None:
            markdown = markdown.rstrip("\n") + "\n\n" + _by_markdown(metrics["by"])
        if "circular" in metrics:
            markdown = markdown.rstrip("\n") + "\n\n" + circular_markdown(metrics["circular"])
        if "rate" in metrics.get("prior_following", {}):
            from evaluator.prior_following import prior_markdown

            markdown = markdown.rstrip("\n") + "\n\n" + prior_markdown(metrics["prior_following"])
        if record is not None:
            markdown = markdown.rstrip("\n") + "\n\n" + record_markdown(record, metadata_path(predictions).name)
        write_report(report, metrics, markdown, plots)
    return metrics


def _prior_following(task, folder: Path, table, preds: dict, options, request: ScoringRequest) -> dict:
    """The prior-following rate of the predictions (evaluator/prior_following.py), or why it is not measured."""
    from evaluator.prior_following import prior_answers, prior_following

    prior = prior_answers(task, folder, request.train_file, table)
    if isinstance(prior, str):
        return {"not_measured": prior}
    return prior_following(task, table, preds, prior, options, request.resamples, request.seed)


def _group_metrics(task, table: pa.Table, predictions: dict, groups, options, bootstrap: int = 0, seed: int = 0,
                   scope: bool = False) -> dict:
    """The task's metrics on the rows of each group ((name, row mask, rows): the values of a `--by` column, the
    parts of a challenge's split) (a group whose metric is undefined, e.g. no complete pair, says why), with each
    group's confidence intervals when `bootstrap`, and with `scope` its ratio metrics' rows in scope."""
    from core.errors import SubmissionError
    from evaluator.submission import Coverage

    found = {}
    ids = task.ids(table)
    for value, mask, part in groups:
        keep = [i for i, m in zip(ids, mask.to_pylist()) if m]
        scored = {i: predictions[i] for i in keep if i in predictions}
        coverage = Coverage(scored=len(scored), expected=len(keep), missing=len(keep) - len(scored), ignored_extra=0)
        try:
            metrics = task.score(part, scored, coverage, options) if scored else None
            resampling = task.resampling(part, scored, options) if scored and bootstrap else None
            if resampling is not None:
                metrics["intervals"] = intervals(resampling, bootstrap, seed)["metrics"]
                if scope:
                    metrics["scope"] = rows_in_scope(resampling)
        except SubmissionError as exc:
            metrics = {"undefined": str(exc)}
        found[str(value)] = {"rows": part.num_rows, **(metrics or {"undefined": "no scored rows"})}
    return found


def _by_markdown(by: dict) -> str:
    """The headline (numeric) metrics of every group, as a table."""
    from core.markdown import report_table

    keys = list(dict.fromkeys(k for g in by["groups"].values() for k, v in g.items()
                              if isinstance(v, (int, float)) and not isinstance(v, bool)))

    def cell(group: dict, key: str):
        bounds = (group.get("intervals") or {}).get(key)
        value = group.get(key, "-")
        return f"{value} [{bounds[0]}, {bounds[1]}]" if bounds else value

    rows = [[name, *(cell(g, k) for k in keys)] for name, g in by["groups"].items()]
    note = "In brackets: the group's 95% confidence interval." if any("intervals" in g for g in by["groups"].values()) \
        else ""
    return "\n".join([f"## By {by['column']}", "", report_table([by["column"], *keys], rows), "", note, ""])
