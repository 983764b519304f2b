"""An exported task for lmms-eval 0.7: the files `vlbench export-task --harness lmms-eval` writes, and the
functions its YAML calls inside lmms-eval.

The folder holds `<task>.yaml` (lmms-eval's task format: the documents as a local parquet dataset, the
output type, the functions, one metric per headline metric of the benchmark), `utils.py` (four lines that
bind this module's `TaskFunctions` to the folder; lmms-eval imports it by path) and what `export.py` writes
for every harness (the documents, the scored split, `vlbench_task.json`, README.md).

Inside lmms-eval, a document shows its images (`doc_to_visual`) and its prompt (`doc_to_text`) as they are;
a multiple-choice document's options are its `doc_to_choice`, with no delimiter in front (each lmms-eval
model puts the option where its chat template writes an answer). `process_results` returns, under every
metric, the prompt's record (evaluator/harness/run.py). lmms-eval logs it in each sample of `--log_samples`
(that is how `vlbench evaluate` maps its log back, by id), and hands the records to each metric's
aggregation, which scores the whole run with the benchmark's own code (`ExportedRun.metrics`).
"""

from __future__ import annotations

import json
from pathlib import Path

from evaluator.harness.run import RECORD, ExportedRun


def task_name(bench: str, split: str) -> str:
    """The lmms-eval task name: never one of lmms-eval's own (a local task named like a built-in loses)."""
    return f"vlbench_{bench}_{split}".replace("-", "_")


def _yaml_text(value: str) -> str:
    """A YAML double-quoted scalar (JSON's escaping is YAML's)."""
    return json.dumps(value)


def task_yaml(meta: dict, docs_file: Path) -> str:
    """The task's YAML: lmms-eval reads the documents from `docs_file` (an absolute path: lmms-eval resolves
    a dataset path against the directory it runs in)."""
    split, multiple = meta["split"], meta["form"] == "loglik"
    lines = [
        f"# Written by `vlbench export-task` (vlbench {meta['vlbench']}): {meta['benchmark']}, split {split} of the",
        f"# build whose manifest.json has SHA-256 {meta['manifest_sha256']}. See README.md.",
        f"task: {_yaml_text(meta['task'])}",
        "dataset_path: parquet",
        "dataset_kwargs:",
        "  data_files:",
        f"    {split}: {_yaml_text(str(docs_file))}",
        f"test_split: {split}",
        f"output_type: {'multiple_choice' if multiple else 'generate_until'}",
        "doc_to_visual: !function utils.doc_to_visual",
        "doc_to_text: !function utils.doc_to_text",
        "doc_to_target: !function utils.doc_to_target",
    ]
    if multiple:
        lines += ["doc_to_choice: !function utils.doc_to_choice", 'target_delimiter: ""']
    else:
        generation = meta["generation"]
        lines += ["generation_kwargs:", f"  max_new_tokens: {generation['max_new_tokens']}", "  temperature: 0",
                  "  do_sample: false", "  num_beams: 1"]
    lines += ["process_results: !function utils.process_results", "metric_list:"]
    for n, metric in enumerate(meta["metrics"]):
        lines += [f"  - metric: {_yaml_text(metric['key'])}", f"    aggregation: !function utils.aggregate_{n}",
                  f"    higher_is_better: {'true' if metric['higher_is_better'] else 'false'}"]
    lines += ["metadata:", "  version: 1.0", f"  vlbench: {_yaml_text(meta['vlbench'])}",
              f"  manifest_sha256: {_yaml_text(meta['manifest_sha256'])}"]
    return "\n".join(lines) + "\n"


def utils_py(meta: dict) -> str:
    """The task's utils.py: this module's functions bound to the folder."""
    aggregates = "".join(f"aggregate_{n} = _task.aggregate({m['key']!r})\n" for n, m in enumerate(meta["metrics"]))
    return (f'"""Written by `vlbench export-task` (vlbench {meta["vlbench"]}); vlbench must be importable here."""\n'
            "from pathlib import Path\n\n"
            "from evaluator.harness.lmms_eval import TaskFunctions\n\n"
            "_task = TaskFunctions(Path(__file__).resolve().parent)\n"
            "doc_to_visual = _task.doc_to_visual\n"
            "doc_to_text = _task.doc_to_text\n"
            "doc_to_target = _task.doc_to_target\n"
            "doc_to_choice = _task.doc_to_choice\n"
            "process_results = _task.process_results\n" + aggregates)


def loglikelihood(result) -> float | None:
    """The log-likelihood of one option's result: lmms-eval 0.7.3 hands `process_results` the model's
    `(loglikelihood, is_greedy)` as its text, `str((ll, greedy))` (api/instance.py's
    `unwrap_generation_output`); an older lmms-eval hands the tuple. Python's float text is exact. None:
    not a number (reported when the run is scored)."""
    text = result[0] if isinstance(result, (tuple, list)) and result else result
    if isinstance(text, str):
        text = text.strip().removeprefix("(").split(",", 1)[0]
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


class TaskFunctions(ExportedRun):
    """The functions an exported task's YAML names, for the task folder `folder`."""

    # -- documents ---------------------------------------------------------------------------------
    @staticmethod
    def doc_to_visual(doc) -> list:
        from evaluator.models.images import open_image

        return [open_image(image) for image in doc["images"]]

    @staticmethod
    def doc_to_text(doc, lmms_eval_specific_kwargs=None) -> str:
        return doc["prompt"]

    @staticmethod
    def doc_to_target(doc) -> str:
        return doc["vlbench_id"]

    @staticmethod
    def doc_to_choice(doc) -> list[str]:
        return list(doc["choices"])

    # -- scoring -----------------------------------------------------------------------------------
    def process_results(self, doc, results) -> dict:
        """Every metric gets the prompt's record (the aggregation scores the whole run)."""
        output = [loglikelihood(r) for r in results] if self.meta["form"] == "loglik" else results[0]
        return {m["key"]: {RECORD: self.record(doc, output)} for m in self.meta["metrics"]}

    def aggregate(self, key: str):
        """The aggregation of one metric: every record of the run scored by the benchmark's code."""
        def aggregation(items: list) -> float:
            return self.metrics([item[RECORD] for item in items])[key]
        aggregation.__name__ = f"vlbench_{key}"
        return aggregation
