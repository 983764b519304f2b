"""A harness's log of a task `vlbench export-task` wrote, read back as a submission, by id.

lmms-eval's `--log_samples` file (`samples_<task>.jsonl`): each sample holds, under each metric of the task,
the record `process_results` returned (evaluator/harness/lmms_eval.py): the benchmark, the first 16 hex
digits of the build's manifest SHA-256, the split, the form, the row's vlbench id, the prompt's place and
the raw output. The log is checked against the split it is scored on (benchmark, build, split, every id a
row of it) before anything is scored; any mismatch is one error line. Its outputs become predictions as in
the harness (evaluator/harness/outputs.py).
"""

from __future__ import annotations

from pathlib import Path

from core.errors import SubmissionError
from core.hashing import sha256_file
from core.manifest import MANIFEST
from evaluator.harness.docs import FORMS, parse_id
from evaluator.harness.lmms_eval import RECORD


def exported_record(sample) -> dict | None:
    """The vlbench record a logged sample carries (None: not a sample of an exported task)."""
    if not isinstance(sample, dict):
        return None
    return next((v[RECORD] for v in sample.values() if isinstance(v, dict) and isinstance(v.get(RECORD), dict)),
                None)


def is_exported_log(samples: list) -> bool:
    return bool(samples) and exported_record(samples[0]) is not None


def read_exported_log(task, path: Path, samples: list, build: tuple, reasoning_tags: tuple | None = None
                      ) -> tuple[dict, dict]:
    """({id: prediction}, how it was read) of an lmms-eval log of an exported task; `build` is (the built
    folder, its split, the split's table) it is scored against."""
    from evaluator.harness.outputs import PromptOutput, predictions_of, prompt_choices

    folder, split, table = build
    manifest = sha256_file(Path(folder) / MANIFEST)
    choices = prompt_choices(task, table)
    outputs, forms = [], set()
    for n, sample in enumerate(samples):
        record = exported_record(sample)
        where = f"{path}: sample {n}"
        if record is None:
            raise SubmissionError(f"{where}: carries no vlbench record; every sample of an exported task's log has one")
        if record.get("benchmark") != task.name:
            raise SubmissionError(f"{where}: is a log of the exported {str(record.get('benchmark'))[:40]} task, not "
                                  f"{task.name}'s")
        if record.get("build") != manifest[:16]:
            raise SubmissionError(f"{where}: was made on the build whose manifest SHA-256 begins "
                                  f"{str(record.get('build'))[:16]}, not on --data's ({manifest[:16]}); export the "
                                  "task from this build and run it again")
        if record.get("split") != split:
            raise SubmissionError(f"{where}: is of split {str(record.get('split'))[:40]}, not {split}")
        if record.get("form") not in FORMS:
            raise SubmissionError(f"{where}: form {str(record.get('form'))[:20]} is not one of {', '.join(FORMS)}")
        forms.add(record["form"])
        key = (record.get("id"), record.get("prompt_index"))
        if not isinstance(key[0], str) or key not in choices:
            raise SubmissionError(f"{where}: id {str(key[0])[:60]} (prompt {str(key[1])[:10]}) is not a prompt of "
                                  f"the {split} split of --data")
        if type(record.get("prompts")) is not int:
            raise SubmissionError(f"{where}: `prompts` is not a whole number")
        outputs.append(PromptOutput(parse_id(key[0]), key[1], record["prompts"], record.get("output"), choices[key]))
    if len(forms) > 1:
        raise SubmissionError(f"{path}: mixes samples of several forms ({', '.join(sorted(forms))})")
    form = forms.pop() if forms else "generate"
    predictions, counts = predictions_of(task.generative, form, outputs, str(path), reasoning_tags)
    return predictions, {"format": "lmms-eval", "exported_task": True, "form": form, "build": manifest[:16],
                         "samples": len(samples), **counts}
