"""VCR-Visor builder (the VCR-Visor paper, §3): paired VCR items whose queries mean the same and
whose responses differ, so a text-only model must fail one of the two sub-questions.

Stages: `items` (read, check and render VCR val; one item per reasoning type it belongs to) and
`pairs-<type>` (Sentence-BERT cosine join, movie filter, NLI filter). Sampling, tag
post-processing and rows are cheap and run on every build.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from builders.pairing import PairedBuilder, PairingParams, check_pair_target, item_schema, pair_features
from builders.sources.vcr import read_vcr
from builders.text import reasoning_types, render_tokens
from builders.vcr_visor import card as vcr_visor_card
from core.errors import ParamsError
from core.params import param

NAME = "vcr-visor"
TYPES = ("causal", "temporal", "explanatory")


@dataclass(frozen=True)
class VCRVisorParams(PairingParams):
    """Defaults are the paper's recipe (thresholds 0.9, 5,000 causal, 2,000 temporal, all explanatory)."""

    causal_pairs: int = param(5000, "causal pairs sampled (-1: all)")
    temporal_pairs: int = param(2000, "temporal pairs sampled (-1: all)")
    explanatory_pairs: int = param(-1, "explanatory pairs sampled (-1: all)")
    skip_invalid: bool = param(False, "skip records that break VCR's invariants instead of failing")
    source_similarity_items: int = param(
        2000, "VCR items per reasoning type (a seeded sample) whose answer-distractor similarity the card's "
              "VCR rows estimate, with a 95% interval (-1: every item, the exact Table 2 value)")

    def __post_init__(self):
        super().__post_init__()
        for name in ("causal_pairs", "temporal_pairs", "explanatory_pairs"):
            check_pair_target(name, getattr(self, name))
        if self.source_similarity_items != -1 and self.source_similarity_items < 2:
            raise ParamsError(f"source_similarity_items={self.source_similarity_items}: a sample of at least 2 items "
                              "(its interval needs a spread), or -1 for every item")

    def target(self, kind: str) -> int:
        return getattr(self, f"{kind}_pairs")


_ITEM_OWN = ("annot_id", "img_fn", "metadata_fn", "movie", "reasoning_type")  # the items stage's table
_ROW_OWN = ("reasoning_type", "annot_id", "img_fn", "metadata_fn", "movie", "query")  # a sub-question's, published


def vcr_items(path: Path, skip_invalid: bool) -> dict[str, pa.Table]:
    """One item per (record, reasoning type): causal/temporal from Q->A (query = question, response =
    correct answer), explanatory from QA->R (query = question + correct answer, response = rationale)."""
    source = read_vcr(path, skip_invalid)
    rows = []
    for rec in sorted(source.records, key=lambda r: r.annot_id):
        question = render_tokens(rec.question, rec.objects)
        answers = [render_tokens(c, rec.objects) for c in rec.answer_choices]
        rationales = [render_tokens(c, rec.objects) for c in rec.rationale_choices]
        base = {"annot_id": rec.annot_id, "img_fn": rec.img_fn, "metadata_fn": rec.metadata_fn, "movie": rec.movie}
        for kind in sorted(reasoning_types(question)):
            rows.append({**base, "reasoning_type": kind, "query": question, "response": answers[rec.answer_label],
                         "distractors": [a for k, a in enumerate(answers) if k != rec.answer_label]})
        rows.append({**base, "reasoning_type": "explanatory",
                     "query": f"{question} {answers[rec.answer_label]}", "response": rationales[rec.rationale_label],
                     "distractors": [r for k, r in enumerate(rationales) if k != rec.rationale_label]})
    skipped = pa.table({"annot_id": list(source.skipped), "check": list(source.skipped.values())},
                       schema=pa.schema([("annot_id", pa.string()), ("check", pa.string())]))
    return {"items": pa.Table.from_pylist(rows, schema=item_schema(_ITEM_OWN)), "skipped": skipped}


class VCRVisorBuilder(PairedBuilder):
    """Two choices per sub-question (its correct response and the paired item's), one kind of pair per
    reasoning type."""

    name = NAME
    params_class = VCRVisorParams
    source_dir = "vcr"
    source_file, source_release = "val.jsonl", "VCR"
    card_template = "vcr_visor.md"
    supports_images = True
    description = "VCR-Visor: paired VCR val items that a text-only model cannot both answer (APQ, HPQ)"
    sources_help = "VCR v1.0 val.jsonl (23 fields per line)"
    id_column = "annot_id"
    group_column = "movie"  # the two items come from different movies
    row_columns = _ROW_OWN
    choices = 2

    def features(self, with_images: bool = False):
        """The sub-question's own columns, the image (with --images) before its query."""
        from datasets import Image, Value

        own = {c: Value("string") for c in self.row_columns if c != "query"}
        return pair_features({**own, **({"image": Image()} if with_images else {}), "query": Value("string")})

    def read_items(self, path: Path, params: VCRVisorParams) -> dict[str, pa.Table]:
        return vcr_items(path, params.skip_invalid)

    def items_key(self, params: VCRVisorParams) -> dict:
        return {"skip_invalid": params.skip_invalid}

    def pairs_key(self, params: VCRVisorParams) -> dict:
        return {**params.mining_key(), "skip_invalid": params.skip_invalid}

    def kinds(self, items: pa.Table, params: VCRVisorParams) -> list[tuple[str, str, pa.Table, int]]:
        return [(f"pairs-{kind}", kind, items.filter(pc.equal(items.column("reasoning_type"), kind)),
                 params.target(kind)) for kind in TYPES]

    def card(self, read, parts, table, counts, encoder, params) -> tuple[dict, dict, list]:
        stats = vcr_visor_card.statistics(parts, table, counts, encoder, read["skipped"], params)
        return stats, vcr_visor_card.card_fields(stats, params), vcr_visor_card.figures(stats)
