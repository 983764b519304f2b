"""Reader for VCR v1.0 `val.jsonl` (one annotation per line, 23 fields).

Each record is decoded into a typed struct and checked against the invariants of the release
(adversarial matching puts the correct choice first in match order and takes it from the item
itself; every reference is an index into `objects`). A failing record is a `SourceError` naming the
line and `annot_id`; with `skip_invalid` it is skipped and counted instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from builders.sources.files import check_relative
from builders.sources.jsonio import Id, read_jsonl
from core.errors import SourceError

Token = str | list[Id]


class VCRRecord(msgspec.Struct, gc=False):
    movie: str
    objects: list[str]
    interesting_scores: list[Id]
    answer_likelihood: str
    img_fn: str
    metadata_fn: str
    answer_orig: str
    question_orig: str
    rationale_orig: str
    question: list[Token]
    answer_match_iter: list[Id]
    answer_sources: list[Id]
    answer_choices: list[list[Token]]
    answer_label: Id
    rationale_choices: list[list[Token]]
    rationale_sources: list[Id]
    rationale_match_iter: list[Id]
    rationale_label: Id
    img_id: str
    question_number: Id
    annot_id: str
    match_fold: str
    match_index: Id


FIELDS = VCRRecord.__struct_fields__


@dataclass
class VCRSource:
    records: list[VCRRecord]
    skipped: dict[str, str] = field(default_factory=dict)  # annot_id (or line) -> failed check


def check_record(rec: VCRRecord) -> str | None:
    """The first invariant the record breaks, or None."""
    for part in ("answer", "rationale"):
        choices = getattr(rec, f"{part}_choices")
        label = getattr(rec, f"{part}_label")
        match_iter, sources = getattr(rec, f"{part}_match_iter"), getattr(rec, f"{part}_sources")
        if not (len(choices) == len(match_iter) == len(sources) == 4):
            return f"{part}_choices, {part}_match_iter and {part}_sources must have 4 entries"
        if not 0 <= label < 4:
            return f"{part}_label {label} is not in 0..3"
        if match_iter[label] != 0:
            return f"{part}_match_iter[{part}_label] == {match_iter[label]}, expected 0"
        if sources[label] != rec.match_index:
            return f"{part}_sources[{part}_label] == {sources[label]}, expected match_index {rec.match_index}"
    n = len(rec.objects)
    for name, seq in [("question", rec.question)] + [(f"answer_choices[{i}]", c) for i, c in
                                                      enumerate(rec.answer_choices)] + \
            [(f"rationale_choices[{i}]", c) for i, c in enumerate(rec.rationale_choices)]:
        for token in seq:
            if isinstance(token, list) and any(not 0 <= i < n for i in token):
                return f"{name}: object index {token} outside objects (0..{n - 1})"
    return None


def read_vcr(path: Path, skip_invalid: bool = False) -> VCRSource:
    """Decode and check every line; a duplicate annot_id is always an error."""
    source = VCRSource(records=[])
    seen: dict[str, int] = {}
    for number, rec in read_jsonl(path, VCRRecord, "a VCR annotation file"):
        check_relative(rec.img_fn, path, record=f"line {number} ({rec.annot_id})", field="img_fn")
        problem = check_record(rec)
        if problem:
            if skip_invalid:
                source.skipped[rec.annot_id] = problem
                continue
            raise SourceError(path, f"{problem} (set skip_invalid=true to skip such records)",
                              record=f"line {number} ({rec.annot_id})")
        if rec.annot_id in seen:
            raise SourceError(path, f"annot_id also on line {seen[rec.annot_id]}",
                              record=f"line {number} ({rec.annot_id})", field="annot_id")
        seen[rec.annot_id] = number
        source.records.append(rec)
    if not source.records and not source.skipped:
        raise SourceError(path, "no records (expected one VCR annotation per line)")
    return source
