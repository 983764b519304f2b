"""VCR builder (Zellers, Bisk, Farhadi, Choi, *From Recognition to Cognition: Visual Commonsense
Reasoning*, CVPR 2019): VCR v1.0 train and val, one row per item with the question, the four answers
and the four rationales rendered as text (the tag rendering VCR-Visor uses: `[personK]`, object class
names), so that the drop from VCR to VCR-Visor is measured on the same text.

Stage per split: `items` (read, check and render). The test split has no labels and is not built.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from builders.base import Builder
from builders.result import BuildResult, RunStage, run_uncached
from builders.sources.files import expect_file
from builders.sources.vcr import read_vcr
from builders.splits import check_disjoint_ids, check_splits
from builders.text import render_tokens
from core.errors import ParamsError, SourceError
from core.figures import FigureSpec
from core.params import param

NAME = "vcr"
SPLIT_FILES = {"train": "train.jsonl", "val": "val.jsonl"}


@dataclass(frozen=True)
class VCRParams:
    """VCR v1.0 as released; only the handling of records that break its invariants can change."""

    skip_invalid: bool = param(False, "skip records that break VCR's invariants instead of failing")


def features():
    from datasets import Features, List, Value

    string = Value("string")
    return Features({
        "annot_id": string, "movie": string, "img_fn": string, "metadata_fn": string, "objects": List(string),
        "question": string, "answer_choices": List(string), "answer_label": Value("int8"),
        "rationale_choices": List(string), "rationale_label": Value("int8"),
    })


def vcr_rows(path: Path, skip_invalid: bool) -> dict[str, pa.Table]:
    """One row per VCR item, in annot_id order, with its tags rendered."""
    source = read_vcr(path, skip_invalid)
    rows = []
    for rec in sorted(source.records, key=lambda r: r.annot_id):
        rows.append({"annot_id": rec.annot_id, "movie": rec.movie, "img_fn": rec.img_fn,
                     "metadata_fn": rec.metadata_fn, "objects": list(rec.objects),
                     "question": render_tokens(rec.question, rec.objects),
                     "answer_choices": [render_tokens(c, rec.objects) for c in rec.answer_choices],
                     "answer_label": rec.answer_label,
                     "rationale_choices": [render_tokens(c, rec.objects) for c in rec.rationale_choices],
                     "rationale_label": rec.rationale_label})
    skipped = pa.table({"annot_id": list(source.skipped), "check": list(source.skipped.values())},
                       schema=pa.schema([("annot_id", pa.string()), ("check", pa.string())]))
    return {"rows": pa.Table.from_pylist(rows, schema=features().arrow_schema), "skipped": skipped}


def _mean_words(texts) -> float:
    return round(float(np.mean([len(t.split()) for t in texts])), 2) if texts else 0.0


def statistics(tables: dict[str, pa.Table], skipped: dict[str, dict]) -> dict:
    """Per split: items, movies, images, label balance and mean lengths (words)."""
    stats = {}
    for split, table in tables.items():
        rows = table.select(["movie", "img_fn", "question", "answer_choices", "answer_label", "rationale_choices",
                             "rationale_label"]).to_pylist()
        stats[split] = {
            "items": len(rows), "movies": len({r["movie"] for r in rows}), "images": len({r["img_fn"] for r in rows}),
            "answer_label_counts": [Counter(r["answer_label"] for r in rows)[k] for k in range(4)],
            "rationale_label_counts": [Counter(r["rationale_label"] for r in rows)[k] for k in range(4)],
            "avg_question_len": _mean_words([r["question"] for r in rows]),
            "avg_answer_len": _mean_words([a for r in rows for a in r["answer_choices"]]),
            "avg_rationale_len": _mean_words([a for r in rows for a in r["rationale_choices"]]),
            "skipped_records": skipped[split],
        }
    return stats


def card_fields(stats: dict) -> dict[str, str]:
    header = ("| Split | Items | Movies | Images | Avg. question | Avg. answer | Avg. rationale | "
              "Correct answer at 0/1/2/3 | Correct rationale at 0/1/2/3 |\n|---|---|---|---|---|---|---|---|---|")
    lines = [header] + [
        f"| {split} | {s['items']:,} | {s['movies']:,} | {s['images']:,} | {s['avg_question_len']:.2f} | "
        f"{s['avg_answer_len']:.2f} | {s['avg_rationale_len']:.2f} | {'/'.join(map(str, s['answer_label_counts']))} | "
        f"{'/'.join(map(str, s['rationale_label_counts']))} |" for split, s in stats.items()]
    skipped = {k: v for s in stats.values() for k, v in s["skipped_records"].items()}
    note = (f"{len(skipped)} source records failed a VCR invariant and were skipped (`skip_invalid=true`), "
            f"e.g. {next(iter(skipped))}: {next(iter(skipped.values()))}." if skipped else
            "Every source record passed the VCR invariants.")
    return {"statistics": "\n".join(lines), "skipped_note": note}


def figures(stats: dict) -> list[FigureSpec]:
    return [FigureSpec(filename="label_positions.png", title="Position of the correct choice",
                       categories=["0", "1", "2", "3"], xlabel="choice index", ylabel="items",
                       series={f"{split} {part}": s[f"{part}_label_counts"] for split, s in stats.items()
                               for part in ("answer", "rationale")})]


class VCRBuilder(Builder):
    name = NAME
    params_class = VCRParams
    configs = ("default",)
    default_config = "default"
    splits = ("train", "val")
    source_dir = "vcr"
    card_template = "vcr.md"
    description = "VCR v1.0 (Zellers et al., CVPR 2019): Q->A, QA->R and Q->AR accuracy, tags rendered as text"
    sources_help = "VCR v1.0 {train,val}.jsonl (23 fields per line)"

    def locate_sources(self, source: Path, splits: list[str], params=None) -> dict[str, Path]:
        check_splits(self.name, splits, self.splits)
        if source.is_file():
            split = next((s for s, f in SPLIT_FILES.items() if f == source.name), None)
            if split is None and len(splits) == 1:
                split = splits[0]
            if split is None or (splits and split not in splits):
                raise ParamsError(f"{source}: cannot tell the split; name it train.jsonl or val.jsonl, or pass --split")
            return {split: expect_file(source, "a VCR annotation file")}
        if not source.is_dir():
            raise SourceError(source, "no such file or folder")
        wanted = splits or [s for s in self.splits if (source / SPLIT_FILES[s]).exists()]
        missing = [source / SPLIT_FILES[s] for s in wanted if not (source / SPLIT_FILES[s]).exists()]
        if missing or not wanted:
            raise SourceError(missing[0] if missing else source,
                              "VCR source file not found (expected train.jsonl and/or val.jsonl)")
        return {s: expect_file(source / SPLIT_FILES[s], "a VCR annotation file") for s in wanted}

    def build(self, sources: dict[str, Path], params: VCRParams, run_stage: RunStage = run_uncached) -> BuildResult:
        tables, skipped = {}, {}
        for split, path in sorted(sources.items()):
            read = run_stage(f"items-{split}", {"skip_invalid": params.skip_invalid}, [path],
                             lambda p=path: vcr_rows(p, params.skip_invalid))
            tables[split] = read["rows"]
            skipped[split] = dict(zip(read["skipped"].column("annot_id").to_pylist(),
                                      read["skipped"].column("check").to_pylist()))
        check_disjoint_ids(sources, tables, id_column="annot_id")
        stats = statistics(tables, skipped)
        return BuildResult(tables={"default": tables}, features=features(), statistics=stats,
                           card_fields=card_fields(stats), figures=figures(stats))

    def table_features(self, config: str):
        return features()

    def check_invariants(self, tables, params: dict) -> list[str]:
        """Four answers and four rationales per item, labels in 0..3, unique annot_ids."""
        problems = []
        for split, table in tables["default"].items():
            ids = table.column("annot_id").to_pylist()
            if len(set(ids)) != len(ids):
                problems.append(f"{split}: an annot_id appears twice")
            for row in table.select(["annot_id", "answer_choices", "answer_label", "rationale_choices",
                                     "rationale_label"]).to_pylist():
                for part in ("answer", "rationale"):
                    if len(row[f"{part}_choices"]) != 4 or not 0 <= row[f"{part}_label"] < 4:
                        problems.append(f"{split} {row['annot_id']}: expected 4 {part}s and a label in 0..3")
        return problems
