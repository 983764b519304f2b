"""PMR-P builder (the VCR-Visor paper, Appendix C, Table 7: PMR 1,538 -> PMR-P 3,502): the pairing recipe
(builders/pairing.py) on PMR's original validation samples. Two samples are paired when their premises
mean the same, they come from different movies, and their correct actions differ.

Stages: `samples` (read, check and render) and `pairs` (Sentence-BERT cosine join, movie filter, NLI
filter). Sampling and rows are cheap and run on every build.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from builders.base import Builder
from builders.errors import ParamsError, SourceError
from builders.pairing import NO_NLI, PairingParams, check_pair_target, distinct_choices, mine_pairs, paired_rows
from builders.params import param
from builders.pmr.reader import read_pmr
from builders.result import BuildResult, FigureSpec, RunStage, run_uncached
from builders.sources.files import expect_file
from builders.text import render_tokens

NAME = "pmr-p"
SOURCE_FILE = "val-ori.jsonl"
CHOICES = 4  # per sub-question: its correct action, the paired sample's, two of its own distractors
TABLE_7 = {"source": 1538, "built": 3502}


@dataclass(frozen=True)
class PMRPairsParams(PairingParams):
    """The recipe of the VCR-Visor paper (§3.2, thresholds 0.9, RoBERTa-MNLI); every pair is kept."""

    pairs: int = param(-1, "pairs sampled (-1: all)")

    def __post_init__(self):
        super().__post_init__()
        check_pair_target("pairs", self.pairs)


def features():
    from datasets import Features, List, Value

    string = Value("string")
    return Features({
        "id": string, "pair_id": string, "sub_question": Value("int8"), "total_id": string, "movie": string,
        "img_fn": string, "metadata_fn": string, "category": string, "premise": string, "choices": List(string),
        "label": Value("int8"), "rewritten": List(Value("bool")), "query_cosine": Value("float64"),
        "response_cosine": Value("float64"), "query_nli": List(string), "response_nli": List(string),
    })


_ITEM_SCHEMA = pa.schema([("total_id", pa.string()), ("movie", pa.string()), ("img_fn", pa.string()),
                          ("metadata_fn", pa.string()), ("category", pa.string()), ("premise", pa.string()),
                          ("query", pa.string()), ("response", pa.string()), ("distractors", pa.list_(pa.string()))])


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
    return {"items": pa.Table.from_pylist(rows, schema=_ITEM_SCHEMA),
            "excluded": pa.table({"total_id": pa.array(excluded, pa.string())})}


def _item_columns(item: dict) -> dict:
    return {k: item[k] for k in ("total_id", "movie", "img_fn", "metadata_fn", "category", "premise")}


def statistics(items: pa.Table, excluded: pa.Table, table: pa.Table, counts: dict, params) -> dict:
    rows = table.select(["img_fn", "movie", "premise", "choices", "label", "rewritten"]).to_pylist()
    correct = [r["choices"][r["label"]] for r in rows]
    return {
        "source_samples": items.num_rows + excluded.num_rows,
        "excluded_samples": excluded.column("total_id").to_pylist(),
        "pairs": len(rows) // 2, "sub_questions": len(rows), "table_7": TABLE_7,
        "images": len({r["img_fn"] for r in rows}), "movies": len({r["movie"] for r in rows}),
        "rewritten_choices": sum(sum(r["rewritten"]) for r in rows),
        "avg_premise_len": round(float(np.mean([len(r["premise"].split()) for r in rows])), 2) if rows else 0.0,
        "avg_action_len": round(float(np.mean([len(c.split()) for c in correct])), 2) if rows else 0.0,
        "mining": counts, "sbert_model": params.sbert_model, "nli_model": params.nli_model,
    }


def card_fields(stats: dict, params) -> dict[str, str]:
    m, paper = stats["mining"], stats["table_7"]
    nli = (f"Pairs were then filtered with the MNLI model `{params.nli_model}` (labels read from its config): the "
           "premises must entail each other in both directions and neither correct action may entail the other."
           if params.nli_model != NO_NLI else
           "**The NLI filter was skipped (`nli_model=none`)**: pairs are selected by Sentence-BERT cosines and "
           "movies only, so some premise pairs may not be true paraphrases.")
    excluded = stats["excluded_samples"]
    return {
        "sbert_model": params.sbert_model, "query_threshold": str(params.query_threshold),
        "response_threshold": str(params.response_threshold), "nli_note": nli,
        "target": "all" if params.pairs < 0 else f"{params.pairs:,}",
        "counts": "\n".join([
            "| | Source samples | Pairs | Sub-questions | Images | Movies |", "|---|---|---|---|---|---|",
            f"| VCR-Visor paper, Table 7 | {paper['source']:,} | {paper['built']:,} (examples) | - | - | - |",
            f"| This build | {stats['source_samples']:,} | {stats['pairs']:,} | {stats['sub_questions']:,} | "
            f"{stats['images']:,} | {stats['movies']:,} |"]),
        "funnel": "\n".join(["| Candidate pairs (cosines, movies) | After NLI | Sampled |", "|---|---|---|",
                             f"| {m['candidates']:,} | {m['kept']:,} | {m['sampled']:,} |"]),
        "excluded_note": (f"{len(excluded)} samples were left out because two of their rendered actions are the same "
                          f"text (e.g. total_id {excluded[0]})." if excluded else
                          "Every sample has four different actions."),
        "lengths": (f"Average lengths in words over the sub-questions: premise {stats['avg_premise_len']:.2f}, "
                    f"correct action {stats['avg_action_len']:.2f}; {stats['rewritten_choices']:,} paired actions "
                    "had a person tag re-written."),
    }


class PMRPairsBuilder(Builder):
    name = NAME
    params_class = PMRPairsParams
    configs = ("default",)
    default_config = "default"
    splits = ("val",)
    source_dir = "pmr"
    card_template = "pmr_p.md"
    description = "PMR-P: PMR val pairs with equivalent premises, different movies and actions (APQ, HPQ)"
    sources_help = f"PMR {SOURCE_FILE} (the original validation samples, JSON lines)"

    def locate_sources(self, source: Path, splits: list[str], params=None) -> dict[str, Path]:
        if any(s != "val" for s in splits):
            raise ParamsError(f"--split {', '.join(splits)}: pmr-p is built from PMR's original val only (split 'val')")
        path = source / SOURCE_FILE if source.is_dir() else source
        if not (path.exists() or path.is_symlink()):
            raise SourceError(path, f"PMR source file not found (expected {SOURCE_FILE})")
        expect_file(path, "the PMR val-ori.jsonl file")
        return {"val": path}

    def build(self, sources: dict[str, Path], params: PMRPairsParams,
              run_stage: RunStage = run_uncached) -> BuildResult:
        path = sources["val"]
        read = run_stage("samples", {}, [path], lambda: pmr_items(path))
        items = read["items"]
        encoder, nli = params.models(getattr(run_stage, "text_cache", None))
        mined = run_stage("pairs", params.mining_key(), [path],
                          lambda: mine_pairs(items, params, encoder, nli, group_column="movie"))
        rows, sampled = paired_rows(items, mined["pairs"], prefix="premise", id_column="total_id",
                                    image_column="img_fn", target=params.pairs, params=params, choices=CHOICES,
                                    item_columns=_item_columns)
        rows.sort(key=lambda r: r["id"])
        feats = features()
        table = pa.Table.from_pylist(rows, schema=feats.arrow_schema)
        stats = statistics(items, read["excluded"], table, {**mined["counts"].to_pylist()[0], "sampled": sampled},
                           params)
        m = stats["mining"]
        figure = FigureSpec(filename="mining_funnel.png", title="Pairs of equivalent premises",
                            categories=["candidates", "after NLI", "sampled", "Table 7"], ylabel="pairs",
                            series={"pairs": [m["candidates"], m["kept"], m["sampled"], TABLE_7["built"]]})
        run_info = {"models": {"sbert": vars(encoder.stats), **({"nli": vars(nli.stats)} if nli else {})}}
        return BuildResult(tables={"default": {"val": table}}, features=feats, statistics=stats,
                           card_fields=card_fields(stats, params), figures=[figure], run_info=run_info)

    def check_invariants(self, tables, params: dict) -> list[str]:
        """Two sub-questions per pair from different movies, four distinct choices each, each one's
        correct action among the other's choices (up to re-tagging), cosines within the thresholds."""
        problems = []
        by_pair: dict[str, list[dict]] = {}
        for row in tables["default"]["val"].select(["pair_id", "sub_question", "movie", "choices", "label",
                                                    "rewritten", "query_cosine", "response_cosine"]).to_pylist():
            by_pair.setdefault(row["pair_id"], []).append(row)
        for pair_id, subs in sorted(by_pair.items()):
            if sorted(s["sub_question"] for s in subs) != [1, 2]:
                problems.append(f"{pair_id}: expected sub-questions 1 and 2")
                continue
            one, two = sorted(subs, key=lambda s: s["sub_question"])
            if one["movie"] == two["movie"]:
                problems.append(f"{pair_id}: both samples come from movie {one['movie']!r}")
            for a, b in ((one, two), (two, one)):
                if len(a["choices"]) != CHOICES or len(set(a["choices"])) != CHOICES:
                    problems.append(f"{pair_id}: expected {CHOICES} distinct choices per sub-question")
                elif b["choices"][b["label"]] not in a["choices"] and not any(a["rewritten"]):
                    problems.append(f"{pair_id}: a sub-question's choices lack the other's correct action")
            if not one["query_cosine"] > params["query_threshold"] or \
                    not one["response_cosine"] < params["response_threshold"]:
                problems.append(f"{pair_id}: cosines outside the thresholds")
        return problems
