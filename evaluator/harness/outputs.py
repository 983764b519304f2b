"""A harness's per-prompt outputs of an exported task, turned into vlbench predictions and scored.

The same steps `GenerativeAdapter` (evaluator/models/ask.py) takes after its backend answered, applied to
what the harness recorded: a generated output is read into its answer and its thinking
(evaluator/models/reasoning.py; one cut off while thinking is an empty answer); asked by letter, the answer's
letter is read by `parse_letter`'s rules and the chosen option scores 1, the others 0 (none read: all 0,
counted wrong); log-likelihoods are used as they are. A row's prompts then give its prediction through the
Ask's `combine` (VCR: Q->A and QA->R), and the Task's own `score` computes the metrics.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from core.errors import SubmissionError
from evaluator.models.ask import parse_letter
from evaluator.models.reasoning import DEFAULT_TAGS, Reasoning


@dataclass(frozen=True)
class PromptOutput:
    """One prompt's output as a harness logged it: the row's id, the prompt's place among the row's
    `prompts`, the raw output (text, or one log-likelihood per option) and the options."""

    row_id: object
    prompt_index: int
    prompts: int
    output: object
    choices: tuple[str, ...]


def _scores(form: str, output, choices: tuple[str, ...], reasoning: Reasoning, where: str):
    """One prompt's output as the Ask's `combine` reads it, and whether its answer was read (None: scored)."""
    if form == "loglik":
        if not isinstance(output, list) or len(output) != len(choices) or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in output):
            raise SubmissionError(f"{where}: output is not one finite log-likelihood per option ({len(choices)})")
        return [float(v) for v in output], None
    if not isinstance(output, str):
        raise SubmissionError(f"{where}: output is not the generated text")
    reply = reasoning.split(output)
    if form == "generate":
        return ("" if reply.unfinished else reply.answer), not reply.unfinished
    letter = None if reply.unfinished else parse_letter(reply.answer, list(choices))
    return [1.0 if i == letter else 0.0 for i in range(len(choices))], letter is not None


def predictions_of(ask, form: str, outputs: list[PromptOutput], where: str,
                   reasoning_tags: tuple | None = None) -> tuple[dict, dict]:
    """{id: prediction} of every row whose prompts are all in `outputs`, and counts for the record (rows
    left out because a prompt is missing, answers not read). A prompt logged twice is an error."""
    reasoning = Reasoning(reasoning_tags or DEFAULT_TAGS)
    by_row: dict[object, dict[int, PromptOutput]] = {}
    for n, out in enumerate(outputs):
        prompts = by_row.setdefault(out.row_id, {})
        if out.prompt_index in prompts:
            raise SubmissionError(f"{where}: sample {n}: prompt {out.prompt_index} of id {out.row_id} is logged twice")
        prompts[out.prompt_index] = out
    predictions, incomplete, unread = {}, 0, 0
    for row_id, prompts in by_row.items():
        total = next(iter(prompts.values())).prompts
        if sorted(prompts) != list(range(total)):
            incomplete += 1
            continue
        scored = []
        for k in range(total):
            value, read = _scores(form, prompts[k].output, prompts[k].choices, reasoning,
                                  f"{where}: id {row_id} prompt {k}")
            unread += read is False
            scored.append(value)
        parsed = ask.combine(scored)
        predictions[row_id] = 0.0 if parsed is None else parsed
    return predictions, {"rows_with_a_prompt_missing": incomplete, **(
        {} if form == "loglik" else {"answers_not_read": unread})}


def prompt_keys(task, table, row_of: list[int]) -> list[tuple[str, int]]:
    """(row id as a document carries it, prompt index) of each prompt the Ask's `prompts` gives, in order."""
    from evaluator.harness.docs import id_text

    ids, seen, keys = task.ids(table), {}, []
    for row in row_of:
        index = seen.get(row, 0)
        keys.append((id_text(ids[row]), index))
        seen[row] = index + 1
    return keys


def prompt_choices(task, table) -> dict:
    """{(row id as a document carries it, prompt index): the prompt's options} of a split, from the split
    itself (the Ask's `prompts`), so that a log's letters are read against the build's options."""
    _, continuations, row_of = task.generative.prompts(table)
    return {key: tuple(options) for key, options in zip(prompt_keys(task, table, row_of), continuations)}


def prompts_per_row(choices: dict) -> dict:
    """{row id as a document carries it: how many prompts the split asks of it}, from `prompt_choices`: a row's
    number of prompts comes from the split, never from a log (which may claim any number)."""
    from collections import Counter

    return dict(Counter(row for row, _ in choices))


def score(task, table, predictions: dict, where: str, allow_partial: bool = False) -> dict:
    """The Task's metrics of `predictions` on the split `table`, its default scoring options."""
    from evaluator.submission import match_ids

    coverage = match_ids(where, predictions, task.ids(table), task.id_field, allow_partial, False)
    options = task.options_class() if task.options_class is not None else None
    return task.score(table, predictions, coverage, options)
