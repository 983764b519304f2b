"""Statistics and card tables of VQA v2 and VQA-CP builds: split sizes, answer types, question types,
and for VQA-CP the per-question-type answer shift between train and test."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from builders.vqa.cp_split import jensen_shannon
from core.figures import FigureSpec
from core.markdown import table

TOP_TYPES = 15


def _counts(column: pa.ChunkedArray) -> dict[str, int]:
    vc = column.value_counts()
    pairs = zip(vc.field("values").to_pylist(), vc.field("counts").to_pylist())
    return dict(sorted(pairs, key=lambda kv: (-kv[1], kv[0])))


def statistics(tables: dict[str, pa.Table]) -> dict:
    """Per split: questions, images, answer types and question types (counts, most frequent first)."""
    return {"splits": {split: {
        "questions": t.num_rows,
        "images": pc.count_distinct(t.column("image_id")).as_py(),
        "coco_splits": _counts(t.column("coco_split")),
        "answer_types": _counts(t.column("answer_type")),
        "question_types": _counts(t.column("question_type")),
    } for split, t in sorted(tables.items())}}


def answer_shift(tables: dict[str, pa.Table]) -> dict[str, dict]:
    """Per question type: Jensen-Shannon divergence of the train and test answer distributions and
    the most frequent answer on each side."""
    by_split = {}
    for split in ("train", "test"):
        grouped = tables[split].group_by(["question_type", "multiple_choice_answer"]).aggregate([([], "count_all")])
        counts: dict[str, dict[str, int]] = {}
        for t, a, c in zip(*(grouped.column(i).to_pylist() for i in range(3))):
            counts.setdefault(t, {})[a] = c
        by_split[split] = counts
    shift = {}
    for qtype in sorted(by_split["train"].keys() | by_split["test"].keys()):
        train, test = by_split["train"].get(qtype, {}), by_split["test"].get(qtype, {})
        top = lambda c: min(c, key=lambda a: (-c[a], a)) if c else None  # noqa: E731
        shift[qtype] = {"train_questions": sum(train.values()), "test_questions": sum(test.values()),
                        "jsd": round(jensen_shannon(train, test), 4), "top_train": top(train), "top_test": top(test)}
    return shift


def card_fields(stats: dict) -> dict[str, str]:
    splits = stats["splits"]
    sizes = [[s, v["questions"], v["images"], ", ".join(f"{k} {n:,}" for k, n in v["coco_splits"].items())]
             for s, v in splits.items()]
    answer_types = sorted({a for v in splits.values() for a in v["answer_types"]})
    types = [[s, *(f"{100 * v['answer_types'].get(a, 0) / max(1, v['questions']):.2f}%" for a in answer_types)]
             for s, v in splits.items()]
    qtypes = []
    for s, v in splits.items():
        top = list(v["question_types"].items())[:TOP_TYPES]
        qtypes.append([s, len(v["question_types"]), ", ".join(f"{t} ({n:,})" for t, n in top)])
    return {
        "split_sizes": table(["Split", "Questions", "Images", "COCO source"], sizes),
        "answer_types": table(["Split", *answer_types], types),
        "question_types": table(["Split", "Question types", f"Most frequent {TOP_TYPES}"], qtypes),
    }


def shift_table(shift: dict[str, dict]) -> str:
    rows = [[t, s["train_questions"], s["test_questions"], "-" if np.isnan(s["jsd"]) else f"{s['jsd']:.3f}",
             s["top_train"] or "-", s["top_test"] or "-"] for t, s in shift.items()]
    return table(["Question type", "Train", "Test", "JSD(train, test)", "Top train answer", "Top test answer"], rows)


def figures(stats: dict) -> list[FigureSpec]:
    splits = stats["splits"]
    answer_types = sorted({a for v in splits.values() for a in v["answer_types"]})
    return [FigureSpec(filename="answer_types.png", title="Answer types per split", categories=answer_types,
                       ylabel="% of questions",
                       series={s: [100 * v["answer_types"].get(a, 0) / max(1, v["questions"]) for a in answer_types]
                               for s, v in splits.items()})]


def shift_figure(shift: dict[str, dict]) -> FigureSpec:
    """The question types whose answer distributions differ most between train and test."""
    ranked = sorted((t for t in shift if not np.isnan(shift[t]["jsd"])), key=lambda t: (-shift[t]["jsd"], t))[:20]
    return FigureSpec(filename="answer_shift.png", title="VQA-CP: answer shift per question type",
                      categories=ranked, series={"JSD(train, test)": [shift[t]["jsd"] for t in ranked]},
                      ylabel="Jensen-Shannon divergence (bits)")
