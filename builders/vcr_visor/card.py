"""Statistics and card tables of a VCR-Visor build, in the layout of the VCR-Visor paper, Table 2."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from builders.pairing import stable_mean_cosine
from core.figures import FigureSpec

TYPES = ("causal", "temporal", "explanatory")


def _mean_words(texts: list[str]) -> float:
    return round(float(np.mean([len(t.split()) for t in texts])), 2) if texts else 0.0


def statistics(by_type: dict[str, pa.Table], table: pa.Table, counts: dict, encoder, skipped: pa.Table,
               params) -> dict:
    """Table 2 for the VCR source items and for the built pairs, plus the mining funnel."""
    vcr, visor = {}, {}
    for kind in TYPES:
        items = by_type[kind]
        responses = items.column("response").to_pylist()
        distractors = items.column("distractors").to_pylist()
        vcr[kind] = {
            "examples": items.num_rows,
            "examples_per_image": round(items.num_rows / max(1, len(pc.unique(items.column("img_fn")))), 2),
            "avg_query_len": _mean_words(items.column("query").to_pylist()),
            "avg_response_len": _mean_words(responses),
            "answer_distractor_similarity": stable_mean_cosine(
                encoder, [r for r, ds in zip(responses, distractors) for _ in ds],
                [d for ds in distractors for d in ds], 3),
        }
        subs = table.filter(pc.equal(table.column("reasoning_type"), kind))
        subs = subs.select(["img_fn", "query", "choices", "label"])
        rows = subs.to_pylist()
        correct = [r["choices"][r["label"]] for r in rows]
        visor[kind] = {
            "examples": len(rows) // 2,
            "examples_per_image": round(len(rows) / max(1, len({r["img_fn"] for r in rows})), 2),
            "avg_query_len": _mean_words([r["query"] for r in rows]),
            "avg_response_len": _mean_words(correct),
            "answer_distractor_similarity": stable_mean_cosine(encoder, correct,
                                                               [r["choices"][1 - r["label"]] for r in rows], 3),
        }
    return {"vcr": vcr, "vcr_visor": visor, "mining": counts,
            "skipped_records": dict(zip(skipped.column("annot_id").to_pylist(), skipped.column("check").to_pylist())),
            "sbert_model": params.sbert_model, "nli_model": params.nli_model}


def _row(dataset: str, kind: str, s: dict) -> str:
    return (f"| {dataset} | {kind.capitalize()} | {s['examples']:,} | {s['examples_per_image']:.2f} | "
            f"{s['avg_query_len']:.2f} | {s['avg_response_len']:.2f} | {s['answer_distractor_similarity']:.3f} |")


def card_fields(stats: dict, params) -> dict[str, str]:
    header = ("| Dataset | Type | #Examples | #Examples per Image | Avg. Q. Len. | Avg. R. Len. | "
              "Answer-Distractor Similarity |\n|---|---|---|---|---|---|---|")
    table_2 = "\n".join([header] + [_row("VCR (source)", k, stats["vcr"][k]) for k in TYPES]
                        + [_row("VCR-Visor (this build)", k, stats["vcr_visor"][k]) for k in TYPES])
    mining = "\n".join(["| Type | Candidate pairs (cosines, movies) | One answer once re-tagged | After NLI "
                        "| Sampled |", "|---|---|---|---|---|"]
                       + [f"| {k} | {m['candidates']:,} | {m.get('same_after_retag', 0):,} | {m['kept']:,} | "
                          f"{m['sampled']:,} |" for k, m in stats["mining"].items()])
    nli = (f"Pairs were then filtered with the MNLI model `{params.nli_model}` (labels read from its config): "
           "queries must entail each other in both directions and neither response may entail the other."
           if params.nli_model != "none" else
           "**The NLI filter was skipped (`nli_model=none`)**: pairs are selected by Sentence-BERT cosines "
           "and movies only, so some query pairs may not be true paraphrases.")
    skipped = stats["skipped_records"]
    return {
        "table_2": table_2, "mining": mining, "nli_note": nli,
        "sbert_model": params.sbert_model, "query_threshold": str(params.query_threshold),
        "response_threshold": str(params.response_threshold),
        "targets": ", ".join(f"{k} {'all' if params.target(k) < 0 else params.target(k)}" for k in TYPES),
        "skipped_note": (f"{len(skipped)} source records failed a VCR invariant and were skipped "
                         f"(`skip_invalid=true`), e.g. {next(iter(skipped))}: {next(iter(skipped.values()))}."
                         if skipped else "Every source record passed the VCR invariants."),
    }


def figures(stats: dict) -> list[FigureSpec]:
    return [FigureSpec(filename="examples_per_type.png", title="Examples per reasoning type",
                       categories=list(TYPES), ylabel="examples",
                       series={"VCR items": [stats["vcr"][k]["examples"] for k in TYPES],
                               "VCR-Visor pairs": [stats["vcr_visor"][k]["examples"] for k in TYPES]})]
