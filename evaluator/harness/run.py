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
_SCORED: dict[str, dict] = {}  # metrics of one run's records, computed once for all its metrics


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
        """The benchmark's metrics of a run's records (partial runs, a harness's --limit, on the rows they
        cover), computed once per run."""
        from core.data import load_table
        from evaluator.harness.outputs import PromptOutput, predictions_of, prompt_choices, score
        from evaluator.tasks import get_task

        digest = hashlib.sha256(json.dumps(records, sort_keys=True).encode()).hexdigest()
        if digest not in _SCORED:
            task = get_task(self.meta["benchmark"])
            table = load_table(self.folder / "scored", task.config, self.meta["split"])
            choices = prompt_choices(task, table)
            outputs = [PromptOutput(parse_id(r["id"]), r["prompt_index"], r["prompts"], r["output"],
                                    choices[(r["id"], r["prompt_index"])]) for r in records]
            predictions, _ = predictions_of(task.generative, self.meta["form"], outputs, self.meta["task"])
            _SCORED[digest] = score(task, table, predictions, self.meta["task"], allow_partial=True)
        return _SCORED[digest]
