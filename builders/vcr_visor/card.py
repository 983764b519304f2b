"""Statistics and card tables of a VCR-Visor build, in the layout of the VCR-Visor paper, Table 2."""

from __future__ import annotations

import hashlib

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from builders.pairing import stable_mean_cosine, stable_sample_mean_cosine
from core.figures import FigureSpec

TYPES = ("causal", "temporal", "explanatory")


def _mean_words(texts: list[str]) -> float:
    return round(float(np.mean([len(t.split()) for t in texts])), 2) if texts else 0.0


def similarity_sample(ids: list[str], size: int, seed: int) -> list[int]:
    """Rows of a seeded simple random sample of `size` items (every row when size is -1 or covers them):
    the items whose SHA-256 of seed and id is smallest, so the sample does not depend on the order of the
    source's lines."""
    if size < 0 or size >= len(ids):
        return list(range(len(ids)))
    rank = sorted(range(len(ids)), key=lambda k: hashlib.sha256(f"{seed}:{ids[k]}".encode()).digest())
    return sorted(rank[:size])


def source_similarity(items: pa.Table, encoder, params) -> dict:
    """Table 2's answer-distractor similarity of the VCR items of one type (the mean Sentence-BERT cosine
    between each correct response and its three distractors): over a seeded sample of
    `source_similarity_items` items with its 95% interval's half-width, or over every item (-1). The
    sample keeps a val-size build from embedding VCR's ~180K distractor texts, which no other step needs."""
    rows = similarity_sample(items.column("annot_id").to_pylist(), params.source_similarity_items, params.seed)
    responses = items.column("response").take(rows).to_pylist()
    distractors = items.column("distractors").take(rows).to_pylist()
    mean, half = stable_sample_mean_cosine(
        encoder, [r for r, ds in zip(responses, distractors) for _ in ds], [d for ds in distractors for d in ds], 3,
        item=[k for k, ds in zip(rows, distractors) for _ in ds], population=items.num_rows)
    return {"answer_distractor_similarity": mean, "similarity_items": len(rows), "similarity_half_width": half}


def statistics(by_type: dict[str, pa.Table], table: pa.Table, counts: dict, encoder, skipped: pa.Table,
               params) -> dict:
    """Table 2 for the VCR source items and for the built pairs, plus the mining funnel."""
    vcr, visor = {}, {}
    for kind in TYPES:
        items = by_type[kind]
        responses = items.column("response").to_pylist()
        vcr[kind] = {
            "examples": items.num_rows,
            "examples_per_image": round(items.num_rows / max(1, len(pc.unique(items.column("img_fn")))), 2),
            "avg_query_len": _mean_words(items.column("query").to_pylist()),
            "avg_response_len": _mean_words(responses),
            **source_similarity(items, encoder, params),
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
    similarity = f"{s['answer_distractor_similarity']:.3f}"
    if s.get("similarity_items", s["examples"]) < s["examples"]:
        similarity += f" ± {s['similarity_half_width']:.3f} ({s['similarity_items']:,} items)"
    return (f"| {dataset} | {kind.capitalize()} | {s['examples']:,} | {s['examples_per_image']:.2f} | "
            f"{s['avg_query_len']:.2f} | {s['avg_response_len']:.2f} | {similarity} |")


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
    sampled = [k for k in TYPES if stats["vcr"][k].get("similarity_items", 0) < stats["vcr"][k]["examples"]]
    similarity = (f"The VCR rows' similarity of {', '.join(sampled)} items is estimated on a seeded sample of "
                  f"{params.source_similarity_items:,} items per type (`source_similarity_items`; the ± is the "
                  "half-width of its 95% interval, with the finite-population correction); "
                  "`source_similarity_items=-1` measures every item, as Table 2 does."
                  if sampled else "The VCR rows' similarity is measured on every item, as Table 2 does.")
    skipped = stats["skipped_records"]
    return {
        "table_2": table_2, "mining": mining, "nli_note": nli, "similarity_note": similarity,
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
