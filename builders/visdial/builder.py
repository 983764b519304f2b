"""VisDial v1.0 (Das et al., CVPR 2017; used by Gat et al., NeurIPS 2021, §4.3): one row per (image, round) with the
caption, the dialog history, the question, the 100 answer options, the ground-truth index and, where
the dense annotations give them, the relevance of every option."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import pyarrow as pa

from builders.base import Builder
from builders.result import BuildResult, RunStage, run_uncached
from builders.sources.files import expect_file
from builders.splits import check_splits
from builders.visdial import reader as visdial
from core.errors import ParamsError, SourceError
from core.markdown import table
from core.params import param

DIALOG_FILE = "visdial_1.0_{}.json"
DENSE_FILE = "visdial_1.0_{}_dense_annotations.json"


@dataclass(frozen=True)
class VisDialParams:
    """Rows are the release's dialogs, flattened by round: every round, or only the rounds with dense relevance
    annotations (one per dialog in v1.0's val, chosen at random by its authors: the round its test split asks,
    Das et al., CVPR 2017, and v1.0's release notes), the form a sealed split takes (a later round's history holds
    the earlier rounds' answers)."""

    rounds: Literal["all", "dense"] = param("all", "which rounds are rows: all, or only those with dense relevance "
                                                   "(one per dialog in val, as v1.0's test split asks)")


def features():
    from datasets import Features, List, Value

    string = Value("string")
    return Features({
        "id": string, "image_id": Value("int64"), "round_id": Value("int32"), "caption": string,
        "history": List(string), "question": string, "answer": string, "options": List(string),
        "gt_index": Value("int32"), "relevance": List(Value("float32")),
    })


_OPTION_ROWS = 65_536  # rows per chunk of the options column: 6.5 million strings, far below Arrow's 2 GB offsets


def rows(dialogs: visdial.Dialogs, dense: dict[tuple[int, int], list[float]]) -> pa.Table:
    """Flatten dialogs, by image id then round: the history of round r is the caption's dialog so far,
    "question? answer" per round. Built from the pool indices with Arrow's `take` (VisDial train's 123
    million option strings are never Python objects)."""
    import pyarrow.compute as pc

    order = np.argsort(dialogs.image_id, kind="stable")
    first = np.concatenate([[0], np.cumsum(dialogs.rounds)[:-1]])  # each dialog's first round, file order
    counts = dialogs.rounds[order]
    row_first = np.repeat(np.concatenate([[0], np.cumsum(counts)[:-1]]), counts)  # the row's dialog's first row
    round_id = (np.arange(int(counts.sum())) - row_first + 1).astype(np.int32)
    source = np.repeat(first[order], counts) + round_id - 1  # each row's round in the file
    image_id = pa.array(np.repeat(dialogs.image_id[order], counts))
    questions = pc.take(pa.array(dialogs.questions, pa.string()), dialogs.question[source])
    answers_pool = pa.array(dialogs.answers, pa.string())
    answers = pc.take(answers_pool, dialogs.answer[source])
    history_lengths = round_id.astype(np.int64) - 1
    history_offsets = np.concatenate([[0], np.cumsum(history_lengths)]).astype(np.int32)
    history_values = np.repeat(row_first, history_lengths) + (np.arange(int(history_offsets[-1])) -
                                                             np.repeat(history_offsets[:-1], history_lengths))
    said = pc.binary_join_element_wise(questions, answers, "? ")
    options = dialogs.options[source]
    chunks = []
    for start in range(0, len(options), _OPTION_ROWS):
        block = options[start:start + _OPTION_ROWS]
        offsets = pa.array(np.arange(0, block.size + 1, visdial.OPTIONS, dtype=np.int32))
        chunks.append(pa.ListArray.from_arrays(offsets, pc.take(answers_pool, block.reshape(-1))))
    relevance = pa.array([dense.get((int(image), int(r))) for image, r in zip(image_id.to_numpy(), round_id)]
                         if dense else [None] * len(round_id), pa.list_(pa.float32()))
    columns = {
        "id": pc.binary_join_element_wise(pc.cast(image_id, pa.string()), pc.cast(pa.array(round_id), pa.string()),
                                          "_"),
        "image_id": image_id, "round_id": pa.array(round_id),
        "caption": pc.take(pa.array(dialogs.caption, pa.string()), np.repeat(order, counts)),
        "history": pa.ListArray.from_arrays(pa.array(history_offsets), pc.take(said, history_values)),
        "question": questions, "answer": answers,
        "options": pa.chunked_array(chunks, pa.list_(pa.string())) if chunks else pa.array([], pa.list_(pa.string())),
        "gt_index": pa.array(dialogs.gt_index[source]),
        "relevance": relevance,
    }
    return pa.table(columns, schema=features().arrow_schema)


def _options_hold_answers(t: pa.Table) -> bool:
    """Every row has OPTIONS options and options[gt_index] is its answer: on Arrow's buffers, a record
    batch at a time (VisDial train's options are 123 million strings, more than one Arrow array holds)."""
    import pyarrow.compute as pc

    for batch in t.select(["options", "gt_index", "answer"]).to_batches():
        options, gt, answer = batch.columns
        if batch.num_rows == 0:
            continue
        if options.null_count or pc.any(pc.not_equal(pc.list_value_length(options), visdial.OPTIONS)).as_py():
            return False
        gt = gt.to_numpy(zero_copy_only=False).astype(np.int64)
        if gt.min() < 0 or gt.max() >= visdial.OPTIONS:
            return False
        starts = options.offsets.to_numpy()[:-1].astype(np.int64)
        same = pc.equal(pc.take(options.values, pa.array(starts + gt)), answer)
        if same.null_count or not pc.all(same).as_py():
            return False
    return True


class VisDialBuilder(Builder):
    name = "visdial"
    params_class = VisDialParams
    configs = ("default",)
    default_config = "default"
    splits = ("train", "val")
    source_dir = "visdial"
    card_template = "visdial.md"
    floats = "`relevance` is copied from the dense annotations (float32), not computed."
    description = "VisDial v1.0 (Das et al., CVPR 2017): visual dialog, 100 answer options per round, dense relevance"
    sources_help = "visdial_1.0_{train,val}.json (+ visdial_1.0_val_dense_annotations.json for NDCG)"

    def locate_sources(self, source: Path, splits: list[str], params=None) -> dict:
        check_splits(self.name, splits, self.splits)
        if not source.is_dir():
            raise SourceError(source, "visdial reads a folder of VisDial v1.0 JSON files; " +
                              ("this is a file" if source.exists() else "no such folder"))
        found = {}
        for split in splits or self.splits:
            dialogs, dense = source / DIALOG_FILE.format(split), source / DENSE_FILE.format(split)
            if dialogs.exists() or dialogs.is_symlink():
                found[split] = (expect_file(dialogs, "a VisDial dialog file"),)
                if dense.exists() or dense.is_symlink():
                    found[split] += (expect_file(dense, "a VisDial dense annotation file"),)
            elif splits:
                raise SourceError(dialogs, "VisDial dialog file not found")
        if not found:
            raise SourceError(source, f"no VisDial file (expected {DIALOG_FILE.format('val')})")
        return found

    def table_features(self, config: str):
        return features()

    def check_invariants(self, tables, params: dict) -> list[str]:
        problems = []
        for split, t in sorted(tables["default"].items()):
            ids = t.column("id").to_pylist()
            if len(set(ids)) != len(ids):
                problems.append(f"{split}: duplicate (image, round) rows")
            if not _options_hold_answers(t):
                problems.append(f"{split}: a row's options[gt_index] is not its answer or it has not 100 options")
        return problems

    def build(self, sources: dict, params: VisDialParams, run_stage: RunStage = run_uncached) -> BuildResult:
        tables = {}
        for split, files in sorted(sources.items()):
            if params.rounds == "dense" and len(files) < 2:
                raise ParamsError(f"--param rounds=dense: the {split} split has no {DENSE_FILE.format(split)} (dense "
                                  "relevance); build only the splits that have one (--split)")

            def compute(files=files):
                dense = visdial.read_dense(files[1]) if len(files) > 1 else {}
                dialogs = visdial.read_dialogs(files[0])
                images = dict(zip(dialogs.image_id.tolist(), dialogs.rounds.tolist()))
                for image, r in dense:
                    if r > images.get(image, 0):
                        raise SourceError(files[1], "dense annotation for a round the dialogs do not have",
                                          f"image {image} round {r}")
                return {"rows": rows(dialogs, dense)}
            tables[split] = run_stage(f"rows-{split}", {}, list(files), compute)["rows"]
            if params.rounds == "dense":
                import pyarrow.compute as pc

                tables[split] = tables[split].filter(pc.invert(pc.is_null(tables[split].column("relevance"))))
        stats = statistics(tables)
        return BuildResult(tables={"default": tables}, features=features(), statistics=stats,
                           card_fields=card_fields(stats, params))


def statistics(tables: dict[str, pa.Table]) -> dict:
    out = {}
    for split, t in tables.items():
        relevance = [r for r in t.column("relevance").to_pylist() if r is not None]
        nonzero = [int(np.count_nonzero(r)) for r in relevance]
        out[split] = {"images": len(set(t.column("image_id").to_pylist())), "rounds": t.num_rows,
                      "dense_rounds": len(relevance),
                      "dense_all_zero": sum(1 for k in nonzero if k == 0),
                      "mean_relevant_options": round(float(np.mean(nonzero)), 2) if nonzero else None,
                      "mean_question_words": round(float(np.mean([len(q.split()) for q in
                                                                  t.column("question").to_pylist()])), 2)}
    return {"splits": out}


def card_fields(stats: dict, params: VisDialParams) -> dict[str, str]:
    rows_ = [[s, v["images"], v["rounds"], v["dense_rounds"], v["dense_all_zero"],
              "-" if v["mean_relevant_options"] is None else v["mean_relevant_options"], v["mean_question_words"]]
             for s, v in stats["splits"].items()]
    return {"statistics": table(["Split", "Images", "Rounds", "Rounds with dense relevance",
                                 "... all-zero", "Options with relevance > 0 (mean)", "Question words (mean)"], rows_),
            "rows": ("One row per (image, round)" if params.rounds == "all" else
                     "One row per image, its round with dense relevance (`rounds=dense`: the form of v1.0's test "
                     "split, one question per dialog with its history up to it)")}
