"""The reproducibility record beside a prediction file (`vlbench predict` writes it, `vlbench evaluate`
reads it into the report): preds.json -> preds.meta.json (model, revision, dtype, how the model was asked,
what it was not shown, library versions) and, with --log-samples, preds.samples.jsonl."""

from __future__ import annotations

import errno
from pathlib import Path

from core.errors import SubmissionError, os_problem
from core.ownfiles import OwnFileError, read_own_file

RECORD_LIMIT = 16 * 1024 * 1024  # bytes a prediction record may hold (one is a few KB: options, versions, counts)


def metadata_path(out: Path) -> Path:
    """preds.json -> preds.meta.json."""
    return Path(out).with_suffix(".meta.json")


def samples_path(out: Path) -> Path:
    """preds.json -> preds.samples.jsonl."""
    return Path(out).with_suffix(".samples.jsonl")


def rotations_path(out: Path) -> Path:
    """preds.json -> preds.rotations.json: with --circular, per row and prompt the option chosen in each
    rotation (evaluator/stats/circular.py reads it)."""
    return Path(out).with_suffix(".rotations.json")


# The record's counts over rows (dotted paths): what one process counts is the sum of what shards of its run count
# (evaluator/shards.py sums them; every other field must be the same in every shard). The judge's agreement is
# recomputed from the shards' samples.
ROW_COUNTS = frozenset({
    "rows", "requests", "retries", "cache.hits", "cache.stored", "cache.damaged",
    "asked.unfinished_answers", "asked.unparsed_outputs",
    "asked.circular.asks", "asked.circular.consistent_prompts", "asked.circular.prompts",
    "asked.judge.asked", "asked.judge.decided", "asked.judge.replied_none", "asked.judge.unread_replies",
    "asked.judge.agreement"})

# The record's fields that the report reads, with the types they must have when present.
_TYPES = {"model": str, "asked": dict, "revision": str, "dtype": str, "class": str, "device": str,
          "processor_note": str, "benchmark": str, "data": str, "split": str, "system_prompt": str,
          "chat_template": str, "attn_implementation": str, "device_map": str, "options": dict, "reasoning": dict}
_ASKED_TYPES = {"prompt_template": str, "cleaning": str, "note": str, "mode": str, "loglik": str,
                "generation": dict, "unparsed_outputs": int, "unfinished_answers": int, "prompt_is_default": bool}


def read_record(predictions: Path) -> dict | None:
    """The record beside a prediction file, or None when there is none (a file made elsewhere). A
    record that is not valid JSON, nests too deeply, holds a field of the wrong type, or is a link, a FIFO, a
    device or larger than RECORD_LIMIT (refused unread, core/ownfiles.py) is one error."""
    from evaluator.submission import parse_json

    path = metadata_path(predictions)
    try:
        data = read_own_file(path, RECORD_LIMIT)
    except OwnFileError as exc:
        raise SubmissionError(str(exc)) from None
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:  # no record can have such a name
            return None
        raise SubmissionError(f"{path}: cannot read the prediction record ({os_problem(exc)})") from None
    if data is None:
        return None
    try:
        record = parse_json(data, "")
    except SubmissionError as exc:
        raise SubmissionError(f"{path}: not a readable prediction record ({str(exc)[2:]}); fix it or move it "
                              "away") from None
    if not isinstance(record, dict) or not isinstance(record.get("model"), str):
        raise SubmissionError(f"{path}: not a prediction record (expected a JSON object with a 'model' field); "
                              "fix it or move it away")
    for fields, where in ((_TYPES, record), (_ASKED_TYPES, record.get("asked") or {})):
        wrong = next((k for k, t in fields.items() if where.get(k) is not None
                      and (not isinstance(where[k], t) or (t is int and isinstance(where[k], bool)))), None)
        if wrong is not None:
            name = wrong if where is record else f"asked.{wrong}"
            raise SubmissionError(f"{path}: not a prediction record (field '{name}' is not a "
                                  f"{fields[wrong].__name__}); fix it or move it away")
    return record


def record_summary(record: dict) -> dict:
    """The part of a record that metrics.json keeps: what was run, how it was asked, what it missed."""
    asked = record.get("asked") or {}
    summary = {"model": record["model"], "revision": record.get("revision"), "dtype": record.get("dtype"),
               "made_on": {k: record.get(k) for k in ("benchmark", "data", "split", "rows")},
               "prompt_template": asked.get("prompt_template"), "cleaning": asked.get("cleaning"),
               "unparsed_outputs": asked.get("unparsed_outputs"), "unfinished_answers": asked.get("unfinished_answers"),
               "thinking": (record.get("reasoning") or {}).get("thinking"),
               "judge": {k: v for k, v in asked["judge"].items() if k != "prompt"}
               if isinstance(asked.get("judge"), dict) else None,
               "chat_template_kwargs": (record.get("reasoning") or {}).get("chat_template_kwargs") or None,
               "note": asked.get("note"), "processor_note": record.get("processor_note")}
    return {k: v for k, v in summary.items() if v is not None}


def record_markdown(record: dict, record_name: str) -> str:
    """A report section saying how the predictions were made."""
    asked = record.get("asked") or {}
    made_on = (f"benchmark {record.get('benchmark', '?')}, data `{record.get('data', '?')}`, split "
               f"{record.get('split', '?')}, {record.get('rows', '?')} rows")
    model = f"`{record['model']}`" + (f" at revision `{record['revision']}`" if record.get("revision") else "")
    lines = ["## How the predictions were made", "", f"From `{record_name}`, written by `vlbench predict`.", "",
             f"- Model: {model}"
             + (f" ({record['class']}, {record.get('dtype')} on {record.get('device')}, batch size "
                f"{record.get('batch_size')})" if record.get("class") else ""),
             f"- Made on: {made_on}"]
    if asked:
        default = " (the benchmark's default)" if asked.get("prompt_is_default") else ""
        lines.append(f"- Prompt template{default}: `{asked.get('prompt_template')!r}`")
        if asked.get("mode") == "generate" or asked.get("choice_mode") == "letter":
            generation = asked.get("generation") or {}
            decoding = "greedy" if generation.get("greedy", True) else ", ".join(
                f"{k}={v}" for k, v in generation.items() if k not in ("greedy", "max_new_tokens", "stop"))
            stop = generation.get("stop")
            stops = f", stopped at {', '.join(repr(s) for s in stop)}" if isinstance(stop, list) and stop else ""
            lines.append(f"- Answers: {decoding}, at most {generation.get('max_new_tokens')} new tokens{stops}")
            if asked.get("choice_mode") == "letter":
                lines.append("- Scores: the options were listed by letter and the letter was read from each answer "
                             "(1 for the option it names, 0 for the others; none read: all 0, counted wrong)")
        else:
            lines.append(f"- Scores: log-likelihoods of the continuations ({asked.get('loglik')} of token log-probs)")
        if asked.get("cleaning"):
            lines.append(f"- How answers were cleaned: {asked['cleaning']}")
        if asked.get("unparsed_outputs"):
            lines.append(f"- Outputs that could not be parsed: {asked['unparsed_outputs']:,}")
        if asked.get("unfinished_answers"):
            lines.append(f"- Answers cut off inside their thinking (unfinished: no answer, scored wrong; a larger "
                         f"--max-new-tokens gives the model room): {asked['unfinished_answers']:,}")
        judge = asked.get("judge") if isinstance(asked.get("judge"), dict) else None
        if judge:
            agreement = judge.get("agreement") or {}
            pinned = judge.get("pinned") if isinstance(judge.get("pinned"), dict) else {}
            pin = ", ".join(f"{k} `{v}`" for k, v in sorted(pinned.items()) if isinstance(v, (str, int)))
            lines.append(f"- Judge (answers the rules could not read): `{judge.get('model')}`"
                         f"{f' (pinned: {pin})' if pin else ' (not pinned: nothing names its weights)'}, greedy, a "
                         f"fixed prompt; asked {judge.get('asked')}, decided {judge.get('decided')}; it read "
                         f"{agreement.get('agreed')} of {agreement.get('sample')} answers the rules read the same way")
        if asked.get("note"):
            lines.append(f"- Note: {asked['note']}")
    reasoning = record.get("reasoning") or {}
    if reasoning.get("thinking") or reasoning.get("chat_template_kwargs"):
        switches = ", ".join(f"{k}={v!r}" for k, v in (reasoning.get("chat_template_kwargs") or {}).items())
        lines.append(f"- Thinking: {'on' if reasoning.get('thinking') else 'not switched on'}"
                     + (f" (opened by the chat template with `{reasoning['opened_by_template']}`)"
                        if reasoning.get("opened_by_template") else "")
                     + (f"; chat-template switches: `{switches}`" if switches else "")
                     + "; the thinking is removed before the answer is read")
    if record.get("processor_note"):
        lines.append(f"- Processor: {record['processor_note']}")
    for key, label in (("system_prompt", "System prompt"), ("chat_template", "Chat template (replacing the "
                       "processor's)"), ("attn_implementation", "Attention"), ("device_map", "Device map")):
        if record.get(key):
            lines.append(f"- {label}: `{record[key]!r}`")
    rows = (record.get("options") or {}) if isinstance(record.get("options"), dict) else {}
    if rows.get("limit") is not None or rows.get("offset"):
        lines.append(f"- Rows: {rows.get('limit')} from row {rows.get('offset') or 0} (--limit / --offset)")
    return "\n".join(lines) + "\n"
