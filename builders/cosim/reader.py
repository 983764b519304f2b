"""Reader for CoSIm (Kim, Zala, Bansal, *CoSIm: Commonsense Reasoning for Counterfactual Scene
Imagination*, NAACL 2022): the authors' `data/<split>.json`, a JSON list of examples with `question`,
`change` (the counterfactual change to the scene), `answer_choices` (4), `answer_label`, `answer_orig`,
`img_fn`, `folder` and `type`.

Every problem is a `SourceError` naming the file, the example (its list position) and the field.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import msgspec

from builders.sources.files import check_relative, read_bytes
from builders.sources.jsonio import Id, decode_typed
from core.errors import SourceError

CHOICES = 4


class CoSImExample(msgspec.Struct, gc=False):
    question: str
    change: str
    answer_choices: list[str]
    answer_label: Id
    answer_orig: str
    img_fn: str
    folder: str
    type: str


def read_cosim(path: Path) -> list[tuple[str, CoSImExample]]:
    """(example id, example) of every example, checked; the id is the image's file name without its
    extension (CoSIm has one example per image), with `#k` added in (question, change) order when an
    image has several, so ids do not depend on the order of the list."""
    examples = decode_typed(path, read_bytes(path), list[CoSImExample], record_key="img_fn")
    if not examples:
        raise SourceError(path, "no examples (expected a JSON list of CoSIm examples)")
    for k, ex in enumerate(examples):
        record = f"#{k} ({ex.img_fn})"
        if len(ex.answer_choices) != CHOICES:
            raise SourceError(path, f"expected {CHOICES} answer choices, found {len(ex.answer_choices)}",
                              record=record, field="answer_choices")
        if not 0 <= ex.answer_label < CHOICES:
            raise SourceError(path, f"answer_label {ex.answer_label} is not in 0..{CHOICES - 1}", record=record,
                              field="answer_label")
        for name in ("question", "change"):
            if not getattr(ex, name).strip():
                raise SourceError(path, "empty text", record=record, field=name)
        for name in ("folder", "img_fn"):  # folder/img_fn is the image's path under CoSIm's image folder
            check_relative(getattr(ex, name), path, record=record, field=name)
    stems = Counter(Path(ex.img_fn).stem for ex in examples)
    order = sorted(range(len(examples)), key=lambda k: (Path(examples[k].img_fn).stem, examples[k].question,
                                                         examples[k].change, examples[k].folder))
    ids, seen = {}, Counter()
    for k in order:
        stem = Path(examples[k].img_fn).stem
        seen[stem] += 1
        ids[k] = stem if stems[stem] == 1 else f"{stem}#{seen[stem]}"
    duplicate = _first_duplicate(examples)
    if duplicate is not None:
        raise SourceError(path, f"example repeated (also #{duplicate[0]})", record=f"#{duplicate[1]}")
    return sorted(((ids[k], ex) for k, ex in enumerate(examples)), key=lambda pair: pair[0])


def _first_duplicate(examples: list[CoSImExample]) -> tuple[int, int] | None:
    """(first, second) list positions of two identical examples, if any (a pair of them would be an
    example paired with itself)."""
    seen: dict[tuple, int] = {}
    for k, ex in enumerate(examples):
        key = (ex.folder, ex.img_fn, ex.question, ex.change)
        if key in seen:
            return seen[key], k
        seen[key] = k
    return None
