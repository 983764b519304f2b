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

from builders.base import Builder
from builders.pairing import (
    FLOATS,
    PairingParams,
    check_pair_target,
    check_pairs,
    mine_pairs,
    mining_record,
    model_record,
    pair_features,
    paired_rows,
)
from builders.result import BuildResult, RunStage, run_uncached
from builders.sources.files import decode_image, inside, read_bytes
from builders.sources.vcr import read_vcr
from builders.splits import locate_val_file
from builders.text import reasoning_types, render_tokens
from builders.vcr_visor import card as vcr_visor_card
from core.errors import ParamsError, SourceError
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


def features(with_images: bool = False):
    from datasets import Image, Value

    string = Value("string")
    return pair_features({"reasoning_type": string, "annot_id": string, "img_fn": string, "metadata_fn": string,
                          "movie": string, **({"image": Image()} if with_images else {}), "query": string})


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
    return {"items": pa.Table.from_pylist(rows, schema=_ITEM_SCHEMA), "skipped": skipped}


_ITEM_SCHEMA = pa.schema([("annot_id", pa.string()), ("img_fn", pa.string()), ("metadata_fn", pa.string()),
                          ("movie", pa.string()), ("reasoning_type", pa.string()), ("query", pa.string()),
                          ("response", pa.string()), ("distractors", pa.list_(pa.string()))])


def _item_columns(item: dict) -> dict:
    """A sub-question's own columns: its VCR item and query."""
    return {k: item[k] for k in ("reasoning_type", "annot_id", "img_fn", "metadata_fn", "movie", "query")}


def _embed_images(rows: list[dict], images: Path) -> None:
    """Each row's `img_fn` from the --images folder (the path must stay inside it), decoded once."""
    for row in rows:
        path = inside(images, row["img_fn"], images, record=row["annot_id"], field="img_fn")
        if not path.is_file():
            raise SourceError(path, "image not found (--images must be the folder that holds VCR's img_fn paths)",
                              record=row["annot_id"])
        data = read_bytes(path)
        decode_image(path, data, record=row["annot_id"])
        row["image"] = {"bytes": data, "path": row["img_fn"]}


class VCRVisorBuilder(Builder):
    name = NAME
    params_class = VCRVisorParams
    configs = ("default",)
    default_config = "default"
    splits = ("val",)
    source_dir = "vcr"
    card_template = "vcr_visor.md"
    floats = FLOATS
    supports_images = True
    description = "VCR-Visor: paired VCR val items that a text-only model cannot both answer (APQ, HPQ)"
    sources_help = "VCR v1.0 val.jsonl (23 fields per line)"

    def locate_sources(self, source: Path, splits: list[str], params=None) -> dict[str, Path]:
        return locate_val_file(self.name, source, splits, "val.jsonl", "VCR")

    def build(self, sources: dict[str, Path], params: VCRVisorParams, run_stage: RunStage = run_uncached,
              images: Path | None = None) -> BuildResult:
        path = sources["val"]
        read = run_stage("items", {"skip_invalid": params.skip_invalid}, [path],
                         lambda: vcr_items(path, params.skip_invalid))
        items = read["items"]
        encoder, nli = params.models(run_stage.text_cache)
        key = {**params.mining_key(), "skip_invalid": params.skip_invalid}
        by_type, rows, counts = {}, [], {}
        for kind in TYPES:
            part = items.filter(pc.equal(items.column("reasoning_type"), kind))
            by_type[kind] = part
            mined = run_stage(f"pairs-{kind}", key, [path],
                              lambda p=part: mine_pairs(p, params, encoder, nli, group_column="movie"))
            kind_rows, sampled = paired_rows(part, mined["pairs"], prefix=kind, id_column="annot_id",
                                             image_column="img_fn", target=params.target(kind), params=params,
                                             choices=2, item_columns=_item_columns, encoder=encoder)
            rows += kind_rows
            counts[kind] = mining_record(part, mined, "annot_id", sampled)
        rows.sort(key=lambda r: r["id"])
        if images is not None:
            _embed_images(rows, images)
        feats = features(with_images=images is not None)
        table = pa.Table.from_pylist(rows, schema=feats.arrow_schema)
        stats = vcr_visor_card.statistics(by_type, table, counts, encoder, read["skipped"], params)
        return BuildResult(tables={"default": {"val": table}}, features=feats, statistics=stats,
                           card_fields=vcr_visor_card.card_fields(stats, params),
                           figures=vcr_visor_card.figures(stats), run_info=model_record(encoder, nli))

    def check_invariants(self, tables, params: dict) -> list[str]:
        """The paired-benchmark invariants (`pairing.check_pairs`): two sub-questions per pair from
        different movies, two distinct choices each, each one's correct response among the other's
        choices (up to re-tagging), cosines on the right side of the thresholds."""
        return check_pairs(tables["default"]["val"], params, "movie", choices=2)
