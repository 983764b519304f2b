"""Statistics and card tables of a COSIM-Q / COSIM-C build: Table 7's count next to the built one, and
the mining funnel."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from builders.pairing_card import counts_table, funnel_figure, funnel_table, nli_note
from core.figures import FigureSpec


def _mean_words(texts: list[str]) -> float:
    return round(float(np.mean([len(t.split()) for t in texts])), 2) if texts else 0.0


def statistics(items: pa.Table, excluded: pa.Table, table: pa.Table, counts: dict, paired: str, table_7: int,
               params) -> dict:
    rows = table.select(["pair_id", "img_fn", "question", "change", "choices", "label"]).to_pylist()
    correct = [r["choices"][r["label"]] for r in rows]
    return {
        "paired_field": paired,
        "source_examples": items.num_rows + excluded.num_rows,
        "excluded_examples": excluded.column("example_id").to_pylist(),
        "pairs": len(rows) // 2, "sub_questions": len(rows), "table_7_examples": table_7,
        "images": len({r["img_fn"] for r in rows}),
        "source_examples_used": len({(r["img_fn"], r["question"], r["change"]) for r in rows}),
        "avg_question_len": _mean_words([r["question"] for r in rows]),
        "avg_change_len": _mean_words([r["change"] for r in rows]),
        "avg_answer_len": _mean_words(correct),
        "mining": counts, "sbert_model": params.sbert_model, "nli_model": params.nli_model,
    }


def card_fields(stats: dict, builder, params) -> dict[str, str]:
    paired = stats["paired_field"]
    return {
        "pretty_name": builder.name.upper(), "name": builder.name, "paired": paired,
        "sbert_model": params.sbert_model, "query_threshold": str(params.query_threshold),
        "response_threshold": str(params.response_threshold),
        "nli_note": nli_note(params, paired, "correct answer", "images"),
        "target": "all" if params.pairs < 0 else f"{params.pairs:,}",
        "counts": counts_table("Source examples", 800, stats["table_7_examples"], stats),
        "funnel": funnel_table(stats["mining"], "images"),
        "excluded_note": (f"{len(stats['excluded_examples'])} source examples were left out because two of their "
                          f"answer choices are the same text (e.g. {stats['excluded_examples'][0]})."
                          if stats["excluded_examples"] else "Every source example has four different answer texts."),
        "lengths": (f"Average lengths in words over the sub-questions: question {stats['avg_question_len']:.2f}, "
                    f"change {stats['avg_change_len']:.2f}, correct answer {stats['avg_answer_len']:.2f}."),
    }


def figures(stats: dict) -> list[FigureSpec]:
    return [funnel_figure(stats["mining"], stats["paired_field"])]
