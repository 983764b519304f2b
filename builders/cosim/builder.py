"""COSIM-Q and COSIM-C builders (the VCR-Visor paper, Appendix C, Table 7): the pairing recipe
(builders/pairing.py) on CoSIm's validation examples. COSIM-Q pairs examples whose questions mean
the same, COSIM-C examples whose counterfactual changes mean the same; in both, the two examples come
from different images and their correct answers differ.

Stages: `examples` (read and check the raw file) and `pairs-<field>` (Sentence-BERT cosine join,
image filter, NLI filter). Sampling and rows are cheap and run on every build.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import pyarrow as pa

from builders.base import Builder
from builders.cosim import card as cosim_card
from builders.cosim.reader import read_cosim
from builders.pairing import (
    FLOATS,
    AllPairsParams,
    check_pairs,
    distinct_choices,
    mine_pairs,
    mining_record,
    model_record,
    pair_features,
    paired_rows,
)
from builders.result import BuildResult, RunStage, run_uncached
from builders.splits import locate_val_file

CHOICES = 4  # per sub-question: its correct answer, the paired example's, two of its own distractors


def features():
    from datasets import Value

    string = Value("string")
    return pair_features({"example_id": string, "img_fn": string, "question": string, "change": string})


_ITEM_SCHEMA = pa.schema([("example_id", pa.string()), ("img_fn", pa.string()), ("question", pa.string()),
                          ("change", pa.string()), ("query", pa.string()), ("response", pa.string()),
                          ("distractors", pa.list_(pa.string()))])


def cosim_items(path: Path, paired: str) -> dict[str, pa.Table]:
    """One item per example: `query` = the paired field (question or change), `response` = the correct
    answer, `distractors` = the other three; `img_fn` = folder/img_fn, the image's path under CoSIm's
    image folder. Examples whose four choices are not four different texts are left out and listed
    (the real val split has six, five of them with the correct answer repeated as a distractor)."""
    rows, excluded = [], []
    for example_id, ex in read_cosim(path):
        if not distinct_choices(ex.answer_choices):
            excluded.append(example_id)
            continue
        rows.append({"example_id": example_id, "img_fn": f"{ex.folder}/{ex.img_fn}", "question": ex.question,
                     "change": ex.change, "query": getattr(ex, paired),
                     "response": ex.answer_choices[ex.answer_label],
                     "distractors": [c for k, c in enumerate(ex.answer_choices) if k != ex.answer_label]})
    return {"items": pa.Table.from_pylist(rows, schema=_ITEM_SCHEMA),
            "excluded": pa.table({"example_id": pa.array(excluded, pa.string())})}


def _item_columns(item: dict) -> dict:
    return {k: item[k] for k in ("example_id", "img_fn", "question", "change")}


class CoSImPairsBuilder(Builder):
    """The shared builder; a subclass names the paired field."""

    paired: ClassVar[str]  # "question" (COSIM-Q) or "change" (COSIM-C)
    table_7: ClassVar[int]  # the paper's count of examples
    params_class = AllPairsParams
    configs = ("default",)
    default_config = "default"
    splits = ("val",)
    source_dir = "cosim"
    card_template = "cosim.md"
    floats = FLOATS
    sources_help = "CoSIm data/val.json (a JSON list of examples)"

    def locate_sources(self, source: Path, splits: list[str], params=None) -> dict[str, Path]:
        return locate_val_file(self.name, source, splits, "val.json", "CoSIm")

    def build(self, sources: dict[str, Path], params: AllPairsParams,
              run_stage: RunStage = run_uncached) -> BuildResult:
        path = sources["val"]
        read = run_stage("examples", {"paired": self.paired}, [path], lambda: cosim_items(path, self.paired))
        items = read["items"]
        encoder, nli = params.models(run_stage.text_cache)
        mined = run_stage(f"pairs-{self.paired}", {**params.mining_key(), "paired": self.paired}, [path],
                          lambda: mine_pairs(items, params, encoder, nli, group_column="img_fn"))
        rows, sampled = paired_rows(items, mined["pairs"], prefix=self.paired, id_column="example_id",
                                    image_column="img_fn", target=params.pairs, params=params, choices=CHOICES,
                                    item_columns=_item_columns, encoder=encoder)
        rows.sort(key=lambda r: r["id"])
        feats = features()
        table = pa.Table.from_pylist(rows, schema=feats.arrow_schema)
        counts = mining_record(items, mined, "example_id", sampled)
        stats = cosim_card.statistics(items, read["excluded"], table, counts, self.paired, self.table_7, params)
        return BuildResult(tables={"default": {"val": table}}, features=feats, statistics=stats,
                           card_fields=cosim_card.card_fields(stats, self, params), figures=cosim_card.figures(stats),
                           run_info=model_record(encoder, nli))

    def check_invariants(self, tables, params: dict) -> list[str]:
        """The paired-benchmark invariants (builders.pairing.check_pairs), the two examples from
        different images."""
        return check_pairs(tables["default"]["val"], params, "img_fn", CHOICES)


class CoSImQuestionPairsBuilder(CoSImPairsBuilder):
    name = "cosim-q"
    paired = "question"
    table_7 = 154
    description = "COSIM-Q: CoSIm val pairs with equivalent questions, different images and answers (APQ, HPQ)"


class CoSImChangePairsBuilder(CoSImPairsBuilder):
    name = "cosim-c"
    paired = "change"
    table_7 = 182
    description = "COSIM-C: CoSIm val pairs with equivalent counterfactual changes, different answers (APQ, HPQ)"
