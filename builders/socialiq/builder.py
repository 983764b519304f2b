"""Social-IQ 1.0 (Zadeh et al., CVPR 2019; used by Gat et al., NeurIPS 2021, §4.2): one row per (video, question,
answer candidate) with its label, in the standard folds, plus the 4 x 3 correct/incorrect pairs per
question of the binary task (A2)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from builders.base import Builder
from builders.result import BuildResult, RunStage, run_uncached
from builders.socialiq import reader as socialiq
from builders.sources.files import expect_file
from builders.splits import check_splits
from core.errors import SourceError
from core.markdown import table

FOLDS_FILE = "socialiq_std_folds.json"


@dataclass(frozen=True)
class SocialIQParams:
    """Social-IQ has no build parameters: rows are the release's QA files in the standard folds."""


def features(config: str):
    from datasets import Features, Value

    string = Value("string")
    common = {"id": string, "video_id": string, "question_index": Value("int32"), "question": string}
    if config == "answers":
        return Features({**common, "answer_index": Value("int32"), "answer": string, "label": Value("int8")})
    return Features({**common, "correct_id": string, "incorrect_id": string, "correct": string, "incorrect": string})


def tables_of(videos: dict[str, list[socialiq.QAItem]]) -> dict[str, pa.Table]:
    """Answer rows (ids `<video>/q<k>/a<j>` correct, `<video>/q<k>/i<j>` incorrect) and A2 pairs."""
    answers = {name: [] for name in features("answers")}
    pairs = {name: [] for name in features("pairs")}
    for video in sorted(videos):
        for k, item in enumerate(videos[video], start=1):
            ids = {}
            for kind, texts, label in (("a", item.correct, 1), ("i", item.incorrect, 0)):
                for j, text in enumerate(texts, start=1):
                    ids[(kind, j)] = f"{video}/q{k}/{kind}{j}"
                    for name, value in (("id", ids[(kind, j)]), ("video_id", video), ("question_index", k),
                                        ("question", item.question), ("answer_index", j), ("answer", text),
                                        ("label", label)):
                        answers[name].append(value)
            for a, correct in enumerate(item.correct, start=1):
                for i, incorrect in enumerate(item.incorrect, start=1):
                    for name, value in (("id", f"{video}/q{k}/a{a}-i{i}"), ("video_id", video),
                                        ("question_index", k), ("question", item.question),
                                        ("correct_id", ids[("a", a)]), ("incorrect_id", ids[("i", i)]),
                                        ("correct", correct), ("incorrect", incorrect)):
                        pairs[name].append(value)
    return {"answers": pa.table(answers, schema=features("answers").arrow_schema),
            "pairs": pa.table(pairs, schema=features("pairs").arrow_schema)}


class SocialIQBuilder(Builder):
    name = "socialiq"
    params_class = SocialIQParams
    configs = ("answers", "pairs")
    default_config = "answers"
    splits = ("train", "validation")
    source_dir = "socialiq"
    card_template = "socialiq.md"
    description = "Social-IQ 1.0 (Zadeh et al., CVPR 2019): is this answer about the social situation correct?"
    sources_help = "qa/<video_id>.txt QA files + socialiq_std_folds.json"

    def locate_sources(self, source: Path, splits: list[str], params=None) -> dict:
        """{"folds": file, <split>: QA files of the fold's videos, "unassigned": QA files in no fold}."""
        check_splits(self.name, splits, self.splits)
        folds_path = source / FOLDS_FILE
        if not (folds_path.exists() or folds_path.is_symlink()):
            raise SourceError(folds_path, "Social-IQ folds file not found")
        expect_file(folds_path, "the Social-IQ folds JSON file")
        files = socialiq.qa_files(source / "qa")
        if not files:
            raise SourceError(source / "qa", "no Social-IQ QA files (<video_id>.txt)")
        folds = socialiq.read_folds(folds_path)
        found = {"folds": folds_path,
                 "unassigned": tuple(files[v] for v in
                                     sorted(set(files) - set(folds["train"]) - set(folds["validation"])))}
        for split in splits or self.splits:
            found[split] = tuple(files[v] for v in folds[split] if v in files)
        return found

    def table_features(self, config: str):
        return features(config)

    def check_invariants(self, tables, params: dict) -> list[str]:
        problems = []
        for split, answers in sorted(tables["answers"].items()):
            labels = answers.column("label").to_pylist()
            if labels.count(1) * socialiq.INCORRECT != labels.count(0) * socialiq.CORRECT:
                problems.append(f"{split}: answers are not 4 correct to 3 incorrect per question")
            if tables["pairs"][split].num_rows != 3 * labels.count(1):
                problems.append(f"{split}: pairs are not the 4 x 3 correct/incorrect combinations")
        return problems

    def build(self, sources: dict, params: SocialIQParams, run_stage: RunStage = run_uncached) -> BuildResult:
        folds = socialiq.read_folds(sources["folds"])
        stats: dict = {"splits": {}, "videos_without_fold": len(sources["unassigned"])}
        out: dict[str, dict[str, pa.Table]] = {"answers": {}, "pairs": {}}
        for split in sorted(set(sources) & set(self.splits)):
            files = sources[split]
            built = run_stage(f"rows-{split}", {}, list(files),
                              lambda files=files: tables_of({p.stem: socialiq.read_qa(p) for p in files}))
            for config in out:
                out[config][split] = built[config]
            stats["splits"][split] = {"fold_videos": len(folds[split]), "videos": len(files),
                                      "missing_qa_files": len(folds[split]) - len(files),
                                      "questions": built["answers"].num_rows // (socialiq.CORRECT + socialiq.INCORRECT),
                                      "answers": built["answers"].num_rows, "pairs": built["pairs"].num_rows}
        rows = [[s, v["fold_videos"], v["videos"], v["missing_qa_files"], v["questions"], v["answers"], v["pairs"]]
                for s, v in stats["splits"].items()]
        fields = {"statistics": table(["Split", "Videos in fold", "Videos with QA", "Missing QA files", "Questions",
                                       "Answer rows", "A2 pairs"], rows),
                  "unassigned": f"{stats['videos_without_fold']:,} QA files belong to no standard fold "
                                "(the non-public test videos) and are left out."}
        return BuildResult(tables=out, features=features("answers"), statistics=stats, card_fields=fields,
                           config_features={"pairs": features("pairs")})
