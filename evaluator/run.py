"""`vlbench predict` and `vlbench evaluate`: the benchmark-independent flow around a task."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

from builders.errors import ParamsError
from evaluator.data import load_table, pick_split, resolve_data
from evaluator.models import ModelOptions
from evaluator.report import write_report
from evaluator.submission import load_predictions, match_ids

TASKS = {
    "gqa-ood": "evaluator.gqa_ood:GQAOODTask",
    "vcr-visor": "evaluator.vcr_visor:VCRVisorTask",
}


def get_task(bench: str):
    if bench not in TASKS:
        raise ParamsError(f"unknown benchmark '{bench}' for evaluation; known: {', '.join(sorted(TASKS))}")
    module, _, cls = TASKS[bench].partition(":")
    return getattr(importlib.import_module(module), cls)()


def _open(task, data: str, split: str | None):
    folder = resolve_data(data)
    split = pick_split(folder, task.config, split, task.default_split)
    return split, load_table(folder, task.config, split)


def predict(bench: str, data: str, model: str, out: Path, split: str | None = None,
            options: ModelOptions = ModelOptions()) -> tuple[str, int]:
    """Run a model over a built split and write a prediction file in the benchmark's format."""
    task = get_task(bench)
    split, table = _open(task, data, split)
    predictions = task.make_model(model, options).predict(table)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".partial")
    tmp.write_text(json.dumps(task.predictions_file(table, predictions), indent=1) + "\n")
    tmp.replace(out)
    return split, len(predictions)


def evaluate(bench: str, data: str, predictions: Path, split: str | None = None, report: Path | None = None,
             allow_partial: bool = False, allow_extra: bool = False) -> dict:
    """Validate a prediction file against a split and compute the benchmark's metrics."""
    task = get_task(bench)
    split, table = _open(task, data, split)
    preds = load_predictions(predictions, task.id_field, task.value_field, task.id_type, task.value_check,
                             task.value_desc)
    coverage = match_ids(predictions, preds, task.ids(table), task.id_field, allow_partial, allow_extra)
    metrics = {"benchmark": bench, "split": split, "predictions": Path(predictions).name,
               **task.score(table, preds, coverage)}
    if report is not None:
        markdown, plots = task.report(metrics, Path(predictions).stem)
        write_report(report, metrics, markdown, plots)
    return metrics
