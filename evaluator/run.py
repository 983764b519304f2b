"""`vlbench predict` and `vlbench evaluate`: the benchmark-independent flow around a task."""

from __future__ import annotations

import dataclasses
import importlib
import json
from pathlib import Path

from builders.errors import ParamsError
from builders.params import apply_overrides
from evaluator.data import load_table, pick_split, resolve_data
from evaluator.models import ModelOptions
from evaluator.report import write_report
from evaluator.submission import load_predictions, match_ids

TASKS = {
    "disco": "evaluator.disco:DiscoTask",
    "gqa-ood": "evaluator.gqa_ood:GQAOODTask",
    "socialiq": "evaluator.socialiq:SocialIQTask",
    "vcr-visor": "evaluator.vcr_visor:VCRVisorTask",
    "visdial": "evaluator.visdial:VisDialTask",
    "vqa-cp": "evaluator.vqa:vqa_cp_task",
    "vqa-v2": "evaluator.vqa:vqa_v2_task",
}


def get_task(bench: str):
    if bench not in TASKS:
        raise ParamsError(f"unknown benchmark '{bench}' for evaluation; known: {', '.join(sorted(TASKS))}")
    module, _, cls = TASKS[bench].partition(":")
    return getattr(importlib.import_module(module), cls)()


def _open(task, data: str, split: str | None):
    folder = resolve_data(data)
    split = pick_split(folder, task.config, split, task.default_split)
    return folder, split, load_table(folder, task.config, split)


def task_options(task, assignments: list[str]):
    """The task's scoring options with `--set KEY=VALUE` applied (tasks without options take none)."""
    if not hasattr(task, "options_class"):
        if assignments:
            raise ParamsError(f"--set: {task.name} has no scoring options")
        return None
    return apply_overrides(task.options_class(), assignments)


def predict(bench: str, data: str, model: str, out: Path, split: str | None = None,
            options: ModelOptions = ModelOptions()) -> tuple[str, int]:
    """Run a model over a built split and write a prediction file in the benchmark's format."""
    task = get_task(bench)
    folder, split, table = _open(task, data, split)
    predictions = task.make_model(model, dataclasses.replace(options, data=folder)).predict(table)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".partial")
    tmp.write_text(json.dumps(task.predictions_file(table, predictions), indent=1) + "\n")
    tmp.replace(out)
    return split, len(predictions)


def evaluate(bench: str, data: str, predictions: Path, split: str | None = None, report: Path | None = None,
             allow_partial: bool = False, allow_extra: bool = False, assignments: list[str] | None = None) -> dict:
    """Validate a prediction file against a split and compute the benchmark's metrics."""
    task = get_task(bench)
    options = task_options(task, list(assignments or []))
    _, split, table = _open(task, data, split)
    preds = load_predictions(predictions, task.id_field, task.value_field, task.id_type, task.value_check,
                             task.value_desc)
    coverage = match_ids(predictions, preds, task.ids(table), task.id_field, allow_partial, allow_extra)
    metrics = {"benchmark": bench, "split": split, "predictions": Path(predictions).name,
               **(task.score(table, preds, coverage) if options is None else task.score(table, preds, coverage, options))}
    if report is not None:
        markdown, plots = task.report(metrics, Path(predictions).stem)
        write_report(report, metrics, markdown, plots)
    return metrics
