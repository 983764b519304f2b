"""PMR-P builder (the VCR-Visor paper, Appendix C, Table 7: PMR 1,538 -> PMR-P 3,502): the pairing recipe
(builders/pairing.py) on PMR's original validation samples. Two samples are paired when their premises
mean the same, they come from different movies, and their correct actions differ.

Stages: `samples` (read, check and render) and `pairs` (Sentence-BERT cosine join, movie filter, NLI
filter). Sampling and rows are cheap and run on every build.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from builders.pairing import AllPairsParams, PairedBuilder, distinct_choices, item_schema
from builders.pairing_card import counts_table, funnel_figure, funnel_table, nli_note
from builders.pmr.reader import read_pmr
from builders.text import render_tokens

NAME = "pmr-p"
SOURCE_FILE = "val-ori.jsonl"
TABLE_7 = {"source": 1538, "built": 3502}


_OWN = ("total_id", "movie", "img_fn", "metadata_fn", "category", "premise")  # in the published order


def pmr_items(path: Path) -> dict[str, pa.Table]:
    """One item per sample, in total_id order: `query` = the rendered premise, `response` = the correct
    action, `distractors` = the other three (tags rendered as VCR's: `[personK]`, class names).
    Samples whose four rendered actions are not four different texts are left out and listed."""
    rows, excluded = [], []
    for rec in sorted(read_pmr(path), key=lambda r: r.total_id):
        premise = render_tokens(rec.premise, rec.objects)
        actions = [render_tokens(c, rec.objects) for c in rec.answer_choices]
        if not distinct_choices(actions):
            excluded.append(str(rec.total_id))
            continue
        rows.append({"total_id": str(rec.total_id), "movie": rec.movie, "img_fn": rec.img_fn,
                     "metadata_fn": rec.metadata_fn, "category": rec.category, "premise": premise, "query": premise,
                     "response": actions[rec.answer_label],
                     "distractors": [a for k, a in enumerate(actions) if k != rec.answer_label]})
    return {"items": pa.Table.from_pylist(rows, schema=item_schema(_OWN)),
            "excluded": pa.table({"total_id": pa.array(excluded, pa.string())})}


def statistics(items: pa.Table, excluded: pa.Table, table: pa.Table, counts: dict, params) -> dict:
    rows = table.select(["img_fn", "movie", "premise", "choices", "label", "rewritten"]).to_pylist()
    correct = [r["choices"][r["label"]] for r in rows]
    return {
        "source_examples": items.num_rows + excluded.num_rows,
        "excluded_samples": excluded.column("total_id").to_pylist(),
        "pairs": len(rows) // 2, "sub_questions": len(rows), "table_7": TABLE_7,
        "images": len({r["img_fn"] for r in rows}), "movies": len({r["movie"] for r in rows}),
        "rewritten_choices": sum(sum(r["rewritten"]) for r in rows),
        "avg_premise_len": round(float(np.mean([len(r["premise"].split()) for r in rows])), 2) if rows else 0.0,
        "avg_action_len": round(float(np.mean([len(c.split()) for c in correct])), 2) if rows else 0.0,
        "mining": counts, "sbert_model": params.sbert_model, "nli_model": params.nli_model,
    }


def card_fields(stats: dict, params) -> dict[str, str]:
    excluded = stats["excluded_samples"]
    return {
        "sbert_model": params.sbert_model, "query_threshold": str(params.query_threshold),
        "response_threshold": str(params.response_threshold),
        "nli_note": nli_note(params, "premise", "correct action", "movies"),
        "target": "all" if params.pairs < 0 else f"{params.pairs:,}",
        "counts": counts_table("Source samples", TABLE_7["source"], TABLE_7["built"], stats),
        "funnel": funnel_table(stats["mining"], "movies"),
        "excluded_note": (f"{len(excluded)} samples were left out because two of their rendered actions are the same "
                          f"text (e.g. total_id {excluded[0]})." if excluded else
                          "Every sample has four different actions."),
        "lengths": (f"Average lengths in words over the sub-questions: premise {stats['avg_premise_len']:.2f}, "
                    f"correct action {stats['avg_action_len']:.2f}; {stats['movies']:,} movies; "
                    f"{stats['rewritten_choices']:,} paired actions had a person tag re-written."),
    }


class PMRPairsBuilder(PairedBuilder):
    """Four choices per sub-question: its correct action, the paired sample's, two of its own distractors."""

    name = NAME
    params_class = AllPairsParams
    source_dir = "pmr"
    source_file, source_release = SOURCE_FILE, "PMR"
    card_template = "pmr_p.md"
    description = "PMR-P: PMR val pairs with equivalent premises, different movies and actions (APQ, HPQ)"
    sources_help = f"PMR {SOURCE_FILE} (the original validation samples, JSON lines)"
    id_column = "total_id"
    group_column = "movie"  # the two samples come from different movies
    row_columns = _OWN
    items_stage = "samples"

    def read_items(self, path: Path, params) -> dict[str, pa.Table]:
        return pmr_items(path)

    def kinds(self, items: pa.Table, params) -> list[tuple[str, str, pa.Table, int]]:
        return [("pairs", "premise", items, params.pairs)]

    def card(self, read, parts, table, counts, encoder, params) -> tuple[dict, dict, list]:
        stats = statistics(read["items"], read["excluded"], table, counts["premise"], params)
        return stats, card_fields(stats, params), [funnel_figure(stats["mining"], "premise")]
