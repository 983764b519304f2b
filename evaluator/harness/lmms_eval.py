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

from pathlib import Path

import yaml

from evaluator.harness.run import RECORD, ExportedRun


def task_name(bench: str, split: str) -> str:
    """The task name: never one of lmms-eval's own (a local task named like a built-in loses), and a Python
    identifier (Inspect calls the task's function by it): the split's dots and the benchmark's hyphens become
    underscores (the split is one split-name-rule name, core/names.py)."""
    from core.names import check_identifier

    name = f"vlbench_{bench}_{split}".replace("-", "_").replace(".", "_")
    return check_identifier(name, f"the task name of {bench} split {split}")


class _Function(str):
    """A name lmms-eval's YAML loader resolves to a function (its `!function` tag)."""


class _TaskDumper(yaml.SafeDumper):
    pass


_TaskDumper.add_representer(_Function, lambda dumper, name: dumper.represent_scalar("!function", str(name)))


def task_yaml(meta: dict, docs_file: Path) -> str:
    """The task's YAML, written by a YAML dumper (no value is pasted into text): lmms-eval reads the documents
    from `docs_file` (an absolute path: lmms-eval resolves a dataset path against the directory it runs in)."""
    split, multiple = meta["split"], meta["form"] == "loglik"
    spec = {"task": meta["task"], "dataset_path": "parquet",
            "dataset_kwargs": {"data_files": {split: str(docs_file)}}, "test_split": split,
            "output_type": "multiple_choice" if multiple else "generate_until",
            **{key: _Function(f"utils.{key}") for key in ("doc_to_visual", "doc_to_text", "doc_to_target")}}
    if multiple:
        spec.update({"doc_to_choice": _Function("utils.doc_to_choice"), "target_delimiter": ""})
    else:
        spec["generation_kwargs"] = {"max_new_tokens": int(meta["generation"]["max_new_tokens"]), "temperature": 0,
                                     "do_sample": False, "num_beams": 1}
    spec["process_results"] = _Function("utils.process_results")
    spec["metric_list"] = [{"metric": metric["key"], "aggregation": _Function(f"utils.aggregate_{n}"),
                            "higher_is_better": bool(metric["higher_is_better"])}
                           for n, metric in enumerate(meta["metrics"])]
    spec["metadata"] = {"version": 1.0, "vlbench": meta["vlbench"], "benchmark": meta["benchmark"], "split": split,
                        "manifest_sha256": meta["manifest_sha256"]}
    header = "# Written by `vlbench export-task`; see README.md.\n"
    return header + yaml.dump(spec, Dumper=_TaskDumper, sort_keys=False, allow_unicode=False, width=1000)


def utils_py(meta: dict) -> str:
    """The task's utils.py: this module's functions bound to the folder (every value from meta as a Python
    literal, `repr`)."""
    aggregates = "".join(f"aggregate_{n} = _task.aggregate({m['key']!r})\n" for n, m in enumerate(meta["metrics"]))
    docstring = repr(f"Written by `vlbench export-task` (vlbench {meta['vlbench']}); vlbench must be importable here.")
    return (f"{docstring}\n"
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
