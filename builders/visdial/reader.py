"""Readers for VisDial v1.0 (Das et al., CVPR 2017): dialogs and dense annotations.

`visdial_1.0_<split>.json` is `{"version", "split", "data": {"dialogs": [{image_id, caption, dialog:
[{question, answer, answer_options: [100], gt_index}]}], "questions": [str], "answers": [str]}}`, where
question / answer / answer_options are indices into the two pools. `visdial_1.0_val_dense_annotations.json`
is `[{image_id, round_id (1-based), gt_relevance: [100 floats]}]`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import msgspec
import numpy as np

from builders.sources.files import read_bytes
from builders.sources.jsonio import Id, ImageId, decode_typed
from core.errors import SourceError

OPTIONS = 100
ROUNDS = 10


class Round(msgspec.Struct, gc=False):
    question: Id
    answer: Id
    answer_options: msgspec.Raw  # decoded block by block into one integer matrix (`_option_matrix`)
    gt_index: Id


class Dialog(msgspec.Struct, gc=False):
    image_id: ImageId
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
    image_id: ImageId
    round_id: int
    gt_relevance: list[float]


@dataclass(frozen=True)
class Dialogs:
    """A dialog file as columns, in the file's order: one entry per dialog (`image_id`, `caption`,
    `rounds`), one per round, dialog after dialog (`question`, `answer`, `gt_index`, the pool indices of
    the `options`, shape (rounds, 100)), and the two pools. VisDial train's 123 million option indices as
    Python integers took several GB; as int32 they take 0.5 GB."""
    image_id: np.ndarray
    caption: list[str]
    rounds: np.ndarray
    question: np.ndarray
    answer: np.ndarray
    gt_index: np.ndarray
    options: np.ndarray
    questions: list[str]
    answers: list[str]


_OPTION_BLOCK = 8192  # rounds decoded at once: their Python integers (0.8 million) live only for one block
_OPTION_LISTS = msgspec.json.Decoder(list[list[Id]])


def read_dialogs(path: Path) -> Dialogs:
    """Decode and check: unique images, 1..10 rounds, pool indices in range, 100 distinct options, gt
    among them. A problem names the first failing round in the file's order and its field."""
    data = decode_typed(path, read_bytes(path), DialogFile, record_key="image_id").data
    seen = set()
    for dialog in data.dialogs:
        image = dialog.image_id
        if image in seen:
            raise SourceError(path, "duplicate dialog", record=f"image {image}", field="image_id")
        seen.add(image)
        if not 1 <= len(dialog.dialog) <= ROUNDS:
            raise SourceError(path, f"{len(dialog.dialog)} rounds, expected 1..{ROUNDS}", record=f"image {image}",
                              field="dialog")
    n = len(data.dialogs)
    image_id = np.fromiter((d.image_id for d in data.dialogs), np.int64, n)
    rounds = np.fromiter((len(d.dialog) for d in data.dialogs), np.int64, n)
    flat = [rnd for d in data.dialogs for rnd in d.dialog]
    column = {name: np.fromiter((getattr(r, name) for r in flat), np.int64, len(flat))
              for name in ("question", "answer", "gt_index")}

    def where(k: int) -> str:
        d = int(np.searchsorted(np.cumsum(rounds), k, side="right"))
        return f"image {image_id[d]} round {k - int(rounds[:d].sum()) + 1}"

    options, not_distinct, negative_or_huge = _option_matrix(path, flat, where)
    del flat
    _check_rounds(path, column, options, not_distinct, negative_or_huge, len(data.questions), len(data.answers),
                  where)
    return Dialogs(image_id=image_id, caption=[d.caption for d in data.dialogs], rounds=rounds,
                   question=column["question"].astype(np.int32), answer=column["answer"].astype(np.int32),
                   gt_index=column["gt_index"].astype(np.int32), options=options, questions=data.questions,
                   answers=data.answers)


def _option_matrix(path: Path, flat: list[Round], where) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every round's `answer_options` as one int32 matrix (rounds, 100), decoded a block at a time, with
    two masks: rounds whose options are not 100 distinct integers, and rounds holding a negative one or
    one past int32 (no pool is that large). A masked round's row holds -1."""
    matrix = np.full((len(flat), OPTIONS), -1, np.int32)
    not_distinct = np.zeros(len(flat), bool)
    negative_or_huge = np.zeros(len(flat), bool)
    for start in range(0, len(flat), _OPTION_BLOCK):
        block = flat[start:start + _OPTION_BLOCK]
        try:
            lists = _OPTION_LISTS.decode(b"[" + b",".join(r.answer_options for r in block) + b"]")
        except msgspec.ValidationError as exc:
            message, _, at = str(exc).partition(" - at `$[")
            raise SourceError(path, message, where(start + int(at.split("]")[0] or 0)), "answer_options") from None
        full = np.fromiter(map(len, lists), np.int64, len(lists)) == OPTIONS
        rows = np.flatnonzero(full)
        values = np.array(lists if full.all() else [lists[k] for k in rows], np.int64).reshape(-1, OPTIONS)
        del lists
        ordered = np.sort(values, axis=1)
        distinct = ~(ordered[:, 1:] == ordered[:, :-1]).any(axis=1)
        in_range = (ordered[:, 0] >= 0) & (ordered[:, -1] <= np.iinfo(np.int32).max)
        not_distinct[start:start + len(block)] = True
        not_distinct[rows + start] = ~distinct
        negative_or_huge[rows + start] = ~in_range
        good = distinct & in_range
        matrix[rows[good] + start] = values[good]
    return matrix, not_distinct, negative_or_huge


def _check_rounds(path: Path, column: dict, options: np.ndarray, not_distinct: np.ndarray,
                  negative_or_huge: np.ndarray, nq: int, na: int, where) -> None:
    """The release's rules for each round, checked on the columns; the first round that breaks one (in
    the file's order) is reported with its first broken rule."""
    question, answer, gt = column["question"], column["answer"], column["gt_index"]
    in_range = (gt >= 0) & (gt < OPTIONS)
    chosen = options[np.arange(len(gt)), np.where(in_range, gt, 0)]
    rules = [
        ((question < 0) | (question >= nq), "question",
         lambda k: f"question index {question[k]} outside the pool (0..{nq - 1})"),
        ((answer < 0) | (answer >= na), "answer", lambda k: f"answer index {answer[k]} outside the pool (0..{na - 1})"),
        (not_distinct, "answer_options", lambda k: f"expected {OPTIONS} distinct answer options"),
        (negative_or_huge | (options >= na).any(axis=1), "answer_options",
         lambda k: "answer option outside the answer pool"),
        (~in_range | (chosen != answer), "gt_index",
         lambda k: f"gt_index {gt[k]} does not point at the round's answer"),
    ]
    broken = np.logical_or.reduce([mask for mask, _, _ in rules])
    if broken.any():
        k = int(np.argmax(broken))
        _, field, message = next(rule for rule in rules if rule[0][k])
        raise SourceError(path, message(k), where(k), field)


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
