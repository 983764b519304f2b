"""What the test-set stress test sees of a split: the text of every prompt a model is asked, never its images.

A benchmark declares this once, in its `Task.generative` Ask (evaluator/models/ask.py): its prompts' field values,
and either the continuations it scores with the index of the right one (`answers`, or `right_options` where a
prompt has no single right option: Social-IQ's one answer, right or not), or the reference answer it generates
(`reference_column`). Each prompt becomes a `BlindItem`: its question (the last field of its template: the
question asked, after VisDial's caption and history or CoSIm's change), its whole context, and its options with
which are right (multiple choice) or its reference answer (open-ended).
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from core.errors import ParamsError


@dataclass(frozen=True)
class BlindItems:
    """The prompts of a split's rows, in row order (a row may ask several: VCR's Q->A, then QA->R)."""

    questions: list[str]  # per prompt: the question asked (its template's last field)
    contexts: list[str]  # per prompt: every field of its template, one per line
    options: list[list[str]] | None  # multiple choice: per prompt its options; None: open-ended
    targets: list  # multiple choice: per prompt, per option 1 (right) or 0; open-ended: the reference answer
    rows: list[int]  # per prompt, its row of the split
    kinds: list[int]  # per prompt, its place among its row's prompts (VCR: 0 Q->A, 1 QA->R)

    @property
    def choice(self) -> bool:
        return self.options is not None

    def __len__(self) -> int:
        return len(self.questions)


def blind_items(task, table: pa.Table) -> BlindItems:
    """The split's prompts as the stress test reads them; one line when the benchmark declares no prompts or the
    split holds no answers (the public half of a sealed split)."""
    ask = task.generative
    if ask is None:
        raise ParamsError(f"stress-test: {task.name} declares no prompts ({task.generative_reason})")
    values, continuations, rows = ask.prompts(table)
    kinds, seen = [], {}
    for r in rows:
        kinds.append(seen.get(r, 0))
        seen[r] = kinds[-1] + 1
    questions = [str(v[ask.fields[-1]]) if ask.fields else "" for v in values]
    contexts = ["\n".join(str(v[f]) for f in ask.fields) for v in values]
    try:
        if ask.mode == "score":
            targets = ask.right_options(table, continuations)
            options = [[str(c) for c in cs] for cs in continuations]
        else:
            targets = ask.references(table)
            options = None
    except (KeyError, NotImplementedError) as exc:
        raise ParamsError(f"stress-test: the split holds no answers to fit on ({exc}); a sealed split's public half "
                          "cannot be stress-tested, its build can") from None
    if len(targets) != len(questions):
        raise ParamsError(f"stress-test: {task.name} gives {len(targets)} answers for {len(questions)} prompts")
    return BlindItems(questions, contexts, options, targets, rows, kinds)
