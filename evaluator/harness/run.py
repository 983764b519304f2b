"""What every exported task does inside its harness, whichever harness: the record of one prompt's output, and
the benchmark's metrics of a run's records.

A record holds the benchmark, the first 16 hex digits of the build's manifest SHA-256, the split, the form, the
row's vlbench id, the prompt's place among its row's prompts, their number and the raw output. The harness logs
it with each sample (that is how `vlbench evaluate` maps a log back by id, evaluator/harness/logs.py), and the
run's records are scored together with the benchmark's own code on the exported split (evaluator/harness/
outputs.py), so the group metrics (GQA-OOD's tail and head, APQ / HPQ over pairs, VisDial's MRR and NDCG) are
computed over the whole run, as vlbench computes them.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from evaluator.harness.docs import parse_id

RECORD = "vlbench"  # the key under which a sample's metric, score or metadata holds the record
INCOMPLETE = "incomplete_rows"  # the count metric beside the headline ones: rows with a prompt missing
_SCORED: dict[str, dict] = {}  # metrics of one task folder's run's records, computed once for all its metrics


def prompt_record(meta: dict, doc) -> dict:
    """The record of one document's prompt, without its output (the Hub's Inspect rows carry it as metadata)."""
    return {"benchmark": meta["benchmark"], "build": meta["manifest_sha256"][:16], "split": meta["split"],
            "form": meta["form"], "id": doc["vlbench_id"], "prompt_index": doc["prompt_index"],
            "prompts": doc["prompts"]}


class ExportedRun:
    """The scoring side of an exported task folder `folder`, inside any harness."""

    def __init__(self, folder: Path):
        from evaluator.harness.meta import read_meta

        self.folder, self.meta = folder, read_meta(folder)

    def record(self, doc, output) -> dict:
        """What a harness logs of one prompt (evaluator/harness/logs.py reads it back)."""
        return {**prompt_record(self.meta, doc), "output": output}

    def metrics(self, records: list[dict]) -> dict:
        """The benchmark's headline metrics of any subset of a run's records, computed once per subset: a
        harness scores partial sets too (Inspect's live display, a --limit), so each metric is the paper's
        metric over what is complete (the rows whose prompts are all there, the pairs whose two
        sub-questions are), NaN where nothing is yet (or where the metric's group is empty, GQA-OOD's head
        on a few tail questions), never an error; `INCOMPLETE` counts the rows left out for a missing
        prompt. A task exported from the public half of a sealed build scores nothing (its answers are held apart):
        its metrics are NaN, `INCOMPLETE` is counted."""
        from core.data import load_table
        from core.errors import SubmissionError
        from evaluator.harness.outputs import PromptOutput, predictions_of, prompt_choices, prompts_per_row, score
        from evaluator.tasks import get_task

        digest = hashlib.sha256(json.dumps([str(self.folder), records], sort_keys=True).encode()).hexdigest()
        if digest not in _SCORED:
            task = get_task(self.meta["benchmark"])
            table = load_table(self.folder / "scored", task.config, self.meta["split"])
            choices = prompt_choices(task, table)
            per_row = prompts_per_row(choices)
            outputs = [PromptOutput(parse_id(r["id"]), r["prompt_index"], per_row[r["id"]], r["output"],
                                    choices[(r["id"], r["prompt_index"])]) for r in records]
            predictions, counts = predictions_of(task.generative, self.meta["form"], outputs, self.meta["task"])
            values = {}
            if predictions and not self.meta.get("sealed"):  # a sealed split holds no truth: the service scores it
                try:
                    values = score(task, table, predictions, self.meta["task"], allow_partial=True)
                except SubmissionError:  # nothing complete for the metric yet (no pair has both sub-questions)
                    values = {}
            _SCORED[digest] = {**{m["key"]: _number(values.get(m["key"])) for m in self.meta["metrics"]},
                               INCOMPLETE: counts["rows_with_a_prompt_missing"]}
        return _SCORED[digest]


def _number(value) -> float:
    """A headline value as a harness's metric: a float, NaN where the metric has nothing to average."""
    return float("nan") if value is None else float(value)
