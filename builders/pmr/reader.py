"""Reader for PMR (Dong et al., *Premise-based Multimodal Reasoning: Conditional Inference on Joint
Textual and Visual Clues*, ACL 2022): JSON lines, one sample per line, as the README of
github.com/2030NLP/PMR describes them: `total_id`, `movie`, `objects`, `img_fn`, `img_id`,
`metadata_fn`, `premise` and `answer_choices` as token lists whose integer lists index `objects` (as
VCR's), `category`, `answer_types`, `answer_label` (and `pal_id` / `answer_ori_ids`, not needed here).

Every problem is a `SourceError` naming the file, the line (and total_id) and the field.
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from builders.sources.files import check_relative
from builders.sources.jsonio import Id, read_jsonl
from builders.sources.vcr import Token
from core.errors import SourceError

CHOICES = 4


class PMRRecord(msgspec.Struct, gc=False):
    total_id: Id
    movie: str
    objects: list[str]
    img_fn: str
    img_id: str
    metadata_fn: str
    premise: list[Token]
    category: str
    answer_choices: list[list[Token]]
    answer_types: list[str]
    answer_label: Id


def _problem(rec: PMRRecord) -> tuple[str, str] | None:
    """(field, problem) of the first rule the record breaks, or None."""
    if len(rec.answer_choices) != CHOICES:
        return "answer_choices", f"expected {CHOICES} answer choices, found {len(rec.answer_choices)}"
    if len(rec.answer_types) != CHOICES:
        return "answer_types", f"expected {CHOICES} answer types, found {len(rec.answer_types)}"
    if not 0 <= rec.answer_label < CHOICES:
        return "answer_label", f"answer_label {rec.answer_label} is not in 0..{CHOICES - 1}"
    n = len(rec.objects)
    for name, tokens in [("premise", rec.premise)] + [(f"answer_choices[{k}]", c)
                                                       for k, c in enumerate(rec.answer_choices)]:
        for token in tokens:
            if isinstance(token, list) and any(not 0 <= i < n for i in token):
                return name, f"object index {token} outside objects (0..{n - 1})"
    return None


def read_pmr(path: Path) -> list[PMRRecord]:
    """Decode and check every line; a repeated total_id is an error."""
    records: list[PMRRecord] = []
    seen: dict[int, int] = {}
    for number, rec in read_jsonl(path, PMRRecord, "a PMR jsonl file"):
        record = f"line {number} (total_id {rec.total_id})"
        for name in ("img_fn", "metadata_fn"):
            check_relative(getattr(rec, name), path, record=record, field=name)
        problem = _problem(rec)
        if problem:
            raise SourceError(path, problem[1], record=record, field=problem[0])
        if rec.total_id in seen:
            raise SourceError(path, f"total_id also on line {seen[rec.total_id]}", record=record,
                              field="total_id")
        seen[rec.total_id] = number
        records.append(rec)
    if not records:
        raise SourceError(path, "no samples (expected one PMR sample per line)")
    return records
