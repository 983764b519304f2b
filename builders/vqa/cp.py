"""VQA-CP v2 (Agrawal et al., CVPR 2018; used by Gat et al., NeurIPS 2021, §4.1): VQA v2 re-split so that each
question type's answer distribution differs between train and test.

`mode=import` converts the published `vqacp_v2_{train,test}_{questions,annotations}.json`;
`mode=regenerate` re-splits VQA v2 train2014 + val2014 with the greedy group assignment of
`builders.vqa.cp_split`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from builders.base import Builder
from builders.result import BuildResult, RunStage, run_uncached
from builders.splits import check_disjoint_ids, check_splits
from builders.vqa import card as vqa_card
from builders.vqa import reader as vqa
from builders.vqa.cp_split import concept_coverage, concept_matrix, resplit
from builders.vqa.v2 import check_invariants, features, locate_pairs
from core.errors import ParamsError
from core.params import param

# VQA-CP v2 as published (Agrawal et al., CVPR 2018, Table 1; Gat et al., NeurIPS 2021, §4.1): split sizes
# and concept coverage.
PUBLISHED = {"train": 438_183, "test": 219_928, "concept_coverage": 0.9901}


@dataclass(frozen=True)
class VQACPParams:
    """`test_fraction` defaults to the published VQA-CP v2 share, 219,928 / 658,111."""

    mode: Literal["import", "regenerate"] = param(
        "import", "import the published VQA-CP v2 files, or regenerate the split from VQA v2 train + val")
    test_fraction: float = param(round(PUBLISHED["test"] / (PUBLISHED["train"] + PUBLISHED["test"]), 4),
                                 "regenerate: target share of questions in test")
    seed: int = param(0, "regenerate: seed of the greedy group assignment")

    def __post_init__(self):
        if not 0.0 < self.test_fraction < 1.0:
            raise ParamsError(f"test_fraction={self.test_fraction}: expected a fraction in (0, 1)")


class VQACPBuilder(Builder):
    name = "vqa-cp"
    params_class = VQACPParams
    configs = ("default",)
    default_config = "default"
    splits = ("train", "test")
    source_dir = "vqa_cp"
    card_template = "vqa_cp.md"
    description = "VQA-CP v2 (Agrawal et al., CVPR 2018): VQA v2 with different answer priors in train and test"
    sources_help = ("mode=import: vqacp_v2_{train,test}_{questions,annotations}.json; mode=regenerate: "
                    "the VQA v2 train2014 + val2014 questions and annotations")

    def source_dir_for(self, params: VQACPParams) -> str:
        return "vqa_v2" if params.mode == "regenerate" else "vqa_cp"

    def locate_sources(self, source: Path, splits: list[str], params: VQACPParams | None = None) -> dict:
        params = params or VQACPParams()
        wanted = check_splits(self.name, splits, self.splits)
        if params.mode == "regenerate":
            return locate_pairs(source, {s: vqa.v2_files(s) for s in vqa.V2_SUBTYPES}, self.name)
        return locate_pairs(source, {s: vqa.cp_files(s) for s in wanted}, self.name)

    def table_features(self, config: str):
        return features()

    def check_invariants(self, tables, params: dict) -> list[str]:
        problems = check_invariants(tables, params)
        if params.get("mode") == "regenerate" and {"train", "test"} <= tables["default"].keys():
            keys = {s: set(zip(*(tables["default"][s].column(c).to_pylist()
                                 for c in ("question_type", "multiple_choice_answer")))) for s in ("train", "test")}
            if keys["train"] & keys["test"]:
                problems.append(f"{len(keys['train'] & keys['test'])} (question type, answer) groups are split "
                                "between train and test")
        return problems

    def build(self, sources: dict, params: VQACPParams, run_stage: RunStage = run_uncached) -> BuildResult:
        if params.mode == "import":
            tables = {split: run_stage(f"import-{split}", {}, list(files),
                                       lambda f=files: {"rows": vqa.read_cp(*f)})["rows"]
                      for split, files in sorted(sources.items())}
            check_disjoint_ids(sources, tables)
            coverage = None
            if {"train", "test"} <= tables.keys():  # the published split, measured with the same rule
                inputs = [p for files in sorted(sources.values()) for p in files]
                coverage = float(run_stage("coverage", {}, inputs, lambda: {"summary": published_coverage(tables)})[
                    "summary"].column("concept_coverage")[0].as_py())
        else:
            parts = {subtype: run_stage(f"read-{subtype}", {}, list(files),
                                        lambda f=files: {"rows": vqa.read_v2(*f)})["rows"]
                     for subtype, files in sorted(sources.items())}
            check_disjoint_ids(sources, parts)
            inputs = [p for files in sorted(sources.values()) for p in files]
            key = {"test_fraction": params.test_fraction, "seed": params.seed}
            tables = run_stage("resplit", key, inputs, lambda: regenerate(list(parts.values()), params))
            coverage = float(tables.pop("summary").column("concept_coverage")[0].as_py())
        stats = vqa_card.statistics(tables)
        stats["mode"] = params.mode
        stats["concept_coverage"] = coverage
        fields = vqa_card.card_fields(stats)
        figures = vqa_card.figures(stats)
        if {"train", "test"} <= tables.keys():
            shift = vqa_card.answer_shift(tables)
            stats["answer_shift"] = shift
            fields["answer_shift"] = vqa_card.shift_table(shift)
            figures.append(vqa_card.shift_figure(shift))
        else:
            fields["answer_shift"] = "(needs both splits)"
        fields.update(_mode_fields(stats, params))
        return BuildResult(tables={"default": tables}, features=features(), statistics=stats,
                           card_fields=fields, figures=figures)


def regenerate(parts: list[pa.Table], params: VQACPParams) -> dict[str, pa.Table]:
    """VQA v2 train + val -> VQA-CP train / test, plus the concept coverage of the result."""
    rows = pa.concat_tables(parts).sort_by("question_id")
    qtypes = rows.column("question_type").to_pylist()
    answers = rows.column("multiple_choice_answer").to_pylist()
    concept = concept_matrix(rows.column("question").to_pylist(), answers, qtypes)
    is_test = resplit(qtypes, answers, concept, params.test_fraction, params.seed)
    mask = pa.array(is_test)
    return {"train": rows.filter(pc.invert(mask)), "test": rows.filter(mask),
            "summary": pa.table({"concept_coverage": [concept_coverage(is_test, concept)]})}


def published_coverage(tables: dict[str, pa.Table]) -> pa.Table:
    """Concept coverage of an imported train/test split, by the rule `regenerate` enforces."""
    rows = pa.concat_tables([tables["train"], tables["test"]])
    concept = concept_matrix(rows.column("question").to_pylist(), rows.column("multiple_choice_answer").to_pylist(),
                             rows.column("question_type").to_pylist())
    is_test = np.arange(rows.num_rows) >= tables["train"].num_rows
    return pa.table({"concept_coverage": [concept_coverage(is_test, concept)]})


def _mode_fields(stats: dict, params: VQACPParams) -> dict[str, str]:
    sizes = {s: v["questions"] for s, v in stats["splits"].items()}
    published = ", ".join(f"{s} {PUBLISHED[s]:,}" for s in ("train", "test"))
    if params.mode == "import":
        how = ("Imported from the published VQA-CP v2 files (`vqacp_v2_{train,test}_{questions,annotations}.json`) "
               f"without changes. Published sizes: {published}.")
        coverage = ("Needs both splits." if stats["concept_coverage"] is None else
                    f"{100 * stats['concept_coverage']:.2f} % of the imported test questions have every concept in "
                    "train, by the concept rule below (the VQA-CP paper reports 99.01 % with its own concept "
                    "extraction).")
    else:
        total = sum(sizes.values()) or 1
        test_share = 100 * sizes.get("test", 0) / total
        how = (f"Regenerated from VQA v2 train2014 + val2014 with seed {params.seed} and target test fraction "
               f"{params.test_fraction} (test holds {test_share:.2f} % of the {total:,} questions; published: "
               f"{published}).")
        coverage = (f"{100 * stats['concept_coverage']:.2f} % of test questions have every concept in train "
                    "(published VQA-CP v2: 99.01 %).")
    return {"mode_note": how, "coverage": coverage}
