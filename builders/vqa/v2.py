"""VQA v2 as a built dataset (Gat et al., NeurIPS 2021, §4.1): the official train2014 / val2014 questions
with their ten human answers, one row per question. It is the plain source dataset of the
perceptual-score studies and the input of the VQA-CP re-split.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from builders.base import Builder
from builders.result import BuildResult, RunStage, run_uncached
from builders.sources.files import expect_file
from builders.splits import check_disjoint_ids, check_splits
from builders.vqa import card as vqa_card
from builders.vqa import reader as vqa
from core.errors import SourceError

SUBTYPE_OF_SPLIT = {"train": "train2014", "validation": "val2014"}


@dataclass(frozen=True)
class VQAv2Params:
    """VQA v2 has no build parameters: the dataset is the official release, re-typed."""


def features():
    from datasets import Features, List, Value

    string = Value("string")
    return Features({
        "question_id": Value("int64"), "image_id": Value("int64"), "coco_split": string, "question": string,
        "question_type": string, "answer_type": string, "multiple_choice_answer": string,
        "answers": List(string), "answer_confidences": List(string),
    })


def locate_pairs(source: Path, wanted: dict[str, tuple[str, str]], bench: str) -> dict[str, tuple[Path, Path]]:
    """{key: (questions file, annotations file)} inside SOURCE; a missing file is one clear error."""
    if not source.is_dir():
        raise SourceError(source, f"{bench} reads a folder of JSON files; " +
                          ("this is a file" if source.exists() else "no such folder"))
    found = {}
    for key, names in wanted.items():
        paths = tuple(source / name for name in names)
        for path in paths:
            if not (path.exists() or path.is_symlink()):
                raise SourceError(path, f"{bench} source file not found (expected {', '.join(names)} in {source})")
            expect_file(path, f"a {bench} JSON file")
        found[key] = paths
    return found


def check_invariants(tables: dict[str, dict[str, pa.Table]], params: dict) -> list[str]:
    """Unique question ids across splits, ten answers each, sorted rows."""
    problems, seen = [], {}
    for split, table in sorted(tables["default"].items()):
        ids = table.column("question_id").to_numpy()
        if (ids[1:] <= ids[:-1]).any():
            problems.append(f"{split}: question ids are not strictly increasing")
        lengths = table.column("answers").combine_chunks().value_lengths().to_numpy(zero_copy_only=False)
        if (lengths != vqa.ANSWERS_PER_QUESTION).any():
            problems.append(f"{split}: {(lengths != vqa.ANSWERS_PER_QUESTION).sum()} questions without 10 answers")
        for other, other_ids in seen.items():
            if len(set(ids.tolist()) & other_ids):
                problems.append(f"{split}: shares question ids with {other}")
        seen[split] = set(ids.tolist())
    return problems


class VQAv2Builder(Builder):
    name = "vqa-v2"
    params_class = VQAv2Params
    configs = ("default",)
    default_config = "default"
    splits = ("train", "validation")
    source_dir = "vqa_v2"
    card_template = "vqa_v2.md"
    description = "VQA v2 (Goyal et al., CVPR 2017): the official questions with ten human answers each"
    sources_help = "v2_OpenEnded_mscoco_{train,val}2014_questions.json + v2_mscoco_{train,val}2014_annotations.json"

    def locate_sources(self, source: Path, splits: list[str], params=None) -> dict[str, tuple[Path, Path]]:
        wanted = check_splits(self.name, splits, self.splits)
        return locate_pairs(source, {s: vqa.v2_files(SUBTYPE_OF_SPLIT[s]) for s in wanted}, self.name)

    def table_features(self, config: str):
        return features()

    def check_invariants(self, tables, params: dict) -> list[str]:
        return check_invariants(tables, params)

    def build(self, sources: dict[str, tuple[Path, Path]], params: VQAv2Params,
              run_stage: RunStage = run_uncached) -> BuildResult:
        tables = {}
        for split, (questions, answers) in sorted(sources.items()):
            table = run_stage(f"read-{split}", {}, [questions, answers],
                              lambda q=questions, a=answers: {"rows": vqa.read_v2(q, a)})["rows"]
            subtype = SUBTYPE_OF_SPLIT[split]
            if table.num_rows and table.column("coco_split")[0].as_py() != subtype:
                raise SourceError(questions, f"data_subtype is '{table.column('coco_split')[0]}', expected "
                                             f"'{subtype}' for split {split}", field="data_subtype")
            tables[split] = table
        check_disjoint_ids(sources, tables)
        stats = vqa_card.statistics(tables)
        return BuildResult(tables={"default": tables}, features=features(), statistics=stats,
                           card_fields=vqa_card.card_fields(stats), figures=vqa_card.figures(stats))
