"""Readers for VisDial v1.0 (Das et al., CVPR 2017): dialogs and dense annotations.

`visdial_1.0_<split>.json` is `{"version", "split", "data": {"dialogs": [{image_id, caption, dialog:
[{question, answer, answer_options: [100], gt_index}]}], "questions": [str], "answers": [str]}}`, where
question / answer / answer_options are indices into the two pools. `visdial_1.0_val_dense_annotations.json`
is `[{image_id, round_id (1-based), gt_relevance: [100 floats]}]`.
"""

from __future__ import annotations

import math
from pathlib import Path

import msgspec

from builders.sources.files import read_bytes
from builders.sources.jsonio import Id, decode_typed
from core.errors import SourceError

OPTIONS = 100
ROUNDS = 10


class Round(msgspec.Struct, gc=False):
    question: int
    answer: int
    answer_options: list[int]
    gt_index: int


class Dialog(msgspec.Struct, gc=False):
    image_id: Id
    caption: str
    dialog: list[Round]


class Data(msgspec.Struct):
    dialogs: list[Dialog]
    questions: list[str]
    answers: list[str]


class DialogFile(msgspec.Struct):
    version: str
    split: str
    data: Data


class Dense(msgspec.Struct, gc=False):
    image_id: Id
    round_id: int
    gt_relevance: list[float]


def read_dialogs(path: Path) -> DialogFile:
    """Decode and check: pool indices in range, 100 distinct options, gt among them, unique images."""
    content = decode_typed(path, read_bytes(path), DialogFile, record_key="image_id")
    nq, na = len(content.data.questions), len(content.data.answers)
    seen = set()
    for dialog in content.data.dialogs:
        image = dialog.image_id
        if image in seen:
            raise SourceError(path, "duplicate dialog", record=f"image {image}", field="image_id")
        seen.add(image)
        if not 1 <= len(dialog.dialog) <= ROUNDS:
            raise SourceError(path, f"{len(dialog.dialog)} rounds, expected 1..{ROUNDS}", record=f"image {image}",
                              field="dialog")
        for r, rnd in enumerate(dialog.dialog, start=1):
            where = f"image {image} round {r}"
            if not 0 <= rnd.question < nq:
                raise SourceError(path, f"question index {rnd.question} outside the pool (0..{nq - 1})", where,
                                  "question")
            if not 0 <= rnd.answer < na:
                raise SourceError(path, f"answer index {rnd.answer} outside the pool (0..{na - 1})", where, "answer")
            if len(rnd.answer_options) != OPTIONS or len(set(rnd.answer_options)) != OPTIONS:
                raise SourceError(path, f"expected {OPTIONS} distinct answer options", where, "answer_options")
            if any(not 0 <= o < na for o in rnd.answer_options):
                raise SourceError(path, "answer option outside the answer pool", where, "answer_options")
            if not 0 <= rnd.gt_index < OPTIONS or rnd.answer_options[rnd.gt_index] != rnd.answer:
                raise SourceError(path, f"gt_index {rnd.gt_index} does not point at the round's answer", where,
                                  "gt_index")
    return content


def read_dense(path: Path) -> dict[tuple[int, int], list[float]]:
    """{(image_id, round_id): 100 relevance scores}; values must be finite and in [0, 1]."""
    items = decode_typed(path, read_bytes(path), list[Dense], record_key="image_id")
    out = {}
    for item in items:
        where = f"image {item.image_id} round {item.round_id}"
        if (item.image_id, item.round_id) in out:
            raise SourceError(path, "duplicate dense annotation", where, "round_id")
        if not 1 <= item.round_id <= ROUNDS:
            raise SourceError(path, f"round_id {item.round_id} outside 1..{ROUNDS}", where, "round_id")
        if len(item.gt_relevance) != OPTIONS:
            raise SourceError(path, f"{len(item.gt_relevance)} relevance scores, expected {OPTIONS}", where,
                              "gt_relevance")
        if any(not math.isfinite(v) or not 0.0 <= v <= 1.0 for v in item.gt_relevance):
            raise SourceError(path, "relevance scores must be finite numbers in [0, 1]", where, "gt_relevance")
        out[(item.image_id, item.round_id)] = item.gt_relevance
    return out
