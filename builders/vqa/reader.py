"""Readers for VQA v2 (official questions + annotations files) and the published VQA-CP v2 files.

VQA v2 (visualqa.org): `v2_OpenEnded_mscoco_<subtype>_questions.json` holds `{"questions": [{image_id,
question, question_id}]}` and `v2_mscoco_<subtype>_annotations.json` holds `{"annotations":
[{question_id, image_id, question_type, answer_type, multiple_choice_answer, answers: [10 x {answer,
answer_confidence, answer_id}]}]}`. VQA-CP v2 (Agrawal et al., CVPR 2018) ships the same records as
flat lists with a `coco_split` field: `vqacp_v2_<split>_{questions,annotations}.json`.

Both are decoded with typed msgspec structs; every problem is a `SourceError` naming the file, the
record (question_id or list position) and the field. The result is one Arrow table per file pair,
sorted by question_id.
"""

from __future__ import annotations

from pathlib import Path

import msgspec
import pyarrow as pa

from builders.sources.files import read_bytes
from builders.sources.jsonio import Id, decode_typed
from core.errors import SourceError

ANSWERS_PER_QUESTION = 10  # VQA v2: ten human answers per question
V2_SUBTYPES = ("train2014", "val2014")


class Answer(msgspec.Struct, gc=False):
    answer: str
    answer_confidence: str
    answer_id: Id


class Question(msgspec.Struct, gc=False):
    question_id: Id
    image_id: Id
    question: str


class Annotation(msgspec.Struct, gc=False):
    question_id: Id
    image_id: Id
    question_type: str
    answer_type: str
    multiple_choice_answer: str
    answers: list[Answer]


class CPQuestion(Question, gc=False):
    coco_split: str


class CPAnnotation(Annotation, gc=False):
    coco_split: str


class QuestionsFile(msgspec.Struct):
    questions: list[Question]
    data_subtype: str


class AnnotationsFile(msgspec.Struct):
    annotations: list[Annotation]
    data_subtype: str


def v2_files(subtype: str) -> tuple[str, str]:
    return f"v2_OpenEnded_mscoco_{subtype}_questions.json", f"v2_mscoco_{subtype}_annotations.json"


def cp_files(split: str) -> tuple[str, str]:
    return f"vqacp_v2_{split}_questions.json", f"vqacp_v2_{split}_annotations.json"


def schema() -> pa.Schema:
    string = pa.string()
    return pa.schema([
        ("question_id", pa.int64()), ("image_id", pa.int64()), ("coco_split", string), ("question", string),
        ("question_type", string), ("answer_type", string), ("multiple_choice_answer", string),
        ("answers", pa.list_(string)), ("answer_confidences", pa.list_(string)),
    ])


def _index_unique(path: Path, records: list, what: str) -> dict[int, object]:
    by_id: dict[int, object] = {}
    for rec in records:
        if rec.question_id in by_id:
            raise SourceError(path, f"duplicate {what}", record=rec.question_id, field="question_id")
        by_id[rec.question_id] = rec
    return by_id


def _join(q_path: Path, questions: list, a_path: Path, annotations: list, coco_split) -> pa.Table:
    """One row per question with its annotation; ids, images and answer counts checked."""
    if not questions:
        raise SourceError(q_path, "no questions (an empty split cannot be built)", field="questions")
    by_id = _index_unique(q_path, questions, "question")
    annotated = _index_unique(a_path, annotations, "annotation")
    for qid in by_id.keys() - annotated.keys():
        raise SourceError(a_path, f"no annotation for question {qid} of {q_path.name}", record=qid)
    for qid in annotated.keys() - by_id.keys():
        raise SourceError(a_path, f"annotation of a question not in {q_path.name}", record=qid)
    columns: dict[str, list] = {name: [] for name in schema().names}
    for qid in sorted(by_id):
        q, a = by_id[qid], annotated[qid]
        if q.image_id != a.image_id:
            raise SourceError(a_path, f"image_id {a.image_id} differs from the question's {q.image_id}",
                              record=qid, field="image_id")
        if len(a.answers) != ANSWERS_PER_QUESTION:
            raise SourceError(a_path, f"{len(a.answers)} answers, expected {ANSWERS_PER_QUESTION}",
                              record=qid, field="answers")
        split = coco_split(q, a)
        columns["question_id"].append(qid)
        columns["image_id"].append(q.image_id)
        columns["coco_split"].append(split)
        columns["question"].append(q.question)
        columns["question_type"].append(a.question_type)
        columns["answer_type"].append(a.answer_type)
        columns["multiple_choice_answer"].append(a.multiple_choice_answer)
        columns["answers"].append([x.answer for x in a.answers])
        columns["answer_confidences"].append([x.answer_confidence for x in a.answers])
    return pa.table(columns, schema=schema())


def read_v2(questions: Path, annotations: Path) -> pa.Table:
    """A VQA v2 questions/annotations pair (one COCO subtype) -> rows sorted by question_id."""
    qf = decode_typed(questions, read_bytes(questions), QuestionsFile)
    af = decode_typed(annotations, read_bytes(annotations), AnnotationsFile)
    if qf.data_subtype != af.data_subtype:
        raise SourceError(annotations, f"data_subtype '{af.data_subtype}' differs from the questions file's "
                                       f"'{qf.data_subtype}'", field="data_subtype")
    return _join(questions, qf.questions, annotations, af.annotations, lambda q, a: qf.data_subtype)


def read_cp(questions: Path, annotations: Path) -> pa.Table:
    """A published VQA-CP v2 questions/annotations pair (flat lists with coco_split) -> rows."""
    qs = decode_typed(questions, read_bytes(questions), list[CPQuestion])
    ans = decode_typed(annotations, read_bytes(annotations), list[CPAnnotation])

    def coco_split(q, a):
        if q.coco_split not in V2_SUBTYPES:
            raise SourceError(questions, f"coco_split '{q.coco_split}' is not one of {', '.join(V2_SUBTYPES)}",
                              record=q.question_id, field="coco_split")
        if q.coco_split != a.coco_split:
            raise SourceError(annotations, f"coco_split '{a.coco_split}' differs from the question's "
                                           f"'{q.coco_split}'", record=q.question_id, field="coco_split")
        return q.coco_split

    return _join(questions, qs, annotations, ans, coco_split)
