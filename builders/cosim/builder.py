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

from builders.cosim import card as cosim_card
from builders.cosim.reader import read_cosim
from builders.pairing import AllPairsParams, PairedBuilder, distinct_choices, item_schema

_OWN = ("example_id", "img_fn", "question", "change")  # an example's own columns, in the published order


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
    return {"items": pa.Table.from_pylist(rows, schema=item_schema(_OWN)),
            "excluded": pa.table({"example_id": pa.array(excluded, pa.string())})}


class CoSImPairsBuilder(PairedBuilder):
    """The shared builder; a subclass names the paired field. Four choices per sub-question: its correct
    answer, the paired example's, two of its own distractors."""

    paired: ClassVar[str]  # "question" (COSIM-Q) or "change" (COSIM-C)
    table_7: ClassVar[int]  # the paper's count of examples
    params_class = AllPairsParams
    source_dir = "cosim"
    source_file, source_release = "val.json", "CoSIm"
    card_template = "cosim.md"
    sources_help = "CoSIm data/val.json (a JSON list of examples)"
    id_column = "example_id"
    group_column = "img_fn"  # the two examples come from different images
    row_columns = _OWN
    items_stage = "examples"

    def read_items(self, path: Path, params) -> dict[str, pa.Table]:
        return cosim_items(path, self.paired)

    def items_key(self, params) -> dict:
        return {"paired": self.paired}

    def pairs_key(self, params) -> dict:
        return {**params.mining_key(), "paired": self.paired}

    def kinds(self, items: pa.Table, params) -> list[tuple[str, str, pa.Table, int]]:
        return [(f"pairs-{self.paired}", self.paired, items, params.pairs)]

    def card(self, read, parts, table, counts, encoder, params) -> tuple[dict, dict, list]:
        stats = cosim_card.statistics(read["items"], read["excluded"], table, counts[self.paired], self.paired,
                                      self.table_7, params)
        return stats, cosim_card.card_fields(stats, self, params), cosim_card.figures(stats)


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
