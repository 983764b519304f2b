"""PMR-P (the VCR-Visor paper, App. C): PMR's format read and rendered (goldens from the example of the
authors' README), pairs checked against an independent recomputation, re-tagging, determinism, and the
sample end to end."""

from __future__ import annotations

import json
import random

import numpy as np
import pyarrow.parquet as pq
import pytest
from helpers import offline_params

from builders.nlp import PACKAGED_MINILM, resolve_model_path
from builders.pmr.builder import pmr_items
from pipelines.build import run_build

PARQUET = "default/val-00000-of-00001.parquet"

# The sample of github.com/2030NLP/PMR's README (Data Format), as one JSON line.
README_SAMPLE = {
    "total_id": 98, "movie": "3051_NANNY_MCPHEE_RETURNS", "objects": ["person", "person", "handbag", "spoon"],
    "img_fn": "lsmdc_3051_NANNY_MCPHEE_RETURNS/3051_NANNY_MCPHEE_RETURNS_01.19.27.912-01.19.30.662@0.jpg",
    "img_id": "train-5244",
    "metadata_fn": "lsmdc_3051_NANNY_MCPHEE_RETURNS/3051_NANNY_MCPHEE_RETURNS_01.19.27.912-01.19.30.662@0.json",
    "premise": [[1], "and", [0], "are", "in", "good", "relationship", "."], "category": "character",
    "answer_choices": [[[1], "with", "a", "handbag", "will", "hug", [0], "tightly", "."],
                       [[1], "with", "a", "green", "handbag", "will", "shout", "at", [0], "in", "the", "kitchen", "."],
                       [[1], "with", "a", "handbag", "will", "shout", "at", [0], "in", "the", "kitchen", "."],
                       [[1], "with", "a", "green", "handbag", "will", "hug", [0], "tightly", "."]],
    "answer_types": ["Action-True", "Distractor2", "Action-False", "Distractor1"], "answer_label": 0, "pal_id": -1}


def test_the_readme_sample_is_read_and_rendered(tmp_path):
    path = tmp_path / "val-ori.jsonl"
    path.write_text(json.dumps(README_SAMPLE) + "\n")
    item = pmr_items(path)["items"].to_pylist()[0]
    # hand-rendered: indices 1 and 0 are persons -> [person2], [person1]
    assert item["premise"] == "[person2] and [person1] are in good relationship."
    assert item["response"] == "[person2] with a handbag will hug [person1] tightly."
    assert item["distractors"] == ["[person2] with a green handbag will shout at [person1] in the kitchen.",
                                   "[person2] with a handbag will shout at [person1] in the kitchen.",
                                   "[person2] with a green handbag will hug [person1] tightly."]
    assert (item["total_id"], item["movie"], item["category"]) == ("98", "3051_NANNY_MCPHEE_RETURNS", "character")


@pytest.fixture(scope="module")
def sample_build(built):
    return built("pmr-p")


def _rows(folder):
    return pq.read_table(folder / PARQUET).to_pylist()


@pytest.mark.slow
def test_pairs_equal_an_independent_recomputation(sample_sources, sample_build):
    """Every pair the recipe admits, and only those: premise cosine > 0.9, correct-action cosine < 0.9,
    different movies, four different actions; recomputed with sentence-transformers directly."""
    from sentence_transformers import SentenceTransformer

    from builders.text import render_tokens

    records = [json.loads(line) for line in (sample_sources / "pmr" / "val-ori.jsonl").read_text().splitlines()]
    premises = [render_tokens(r["premise"], r["objects"]) for r in records]
    actions = [[render_tokens(c, r["objects"]) for c in r["answer_choices"]] for r in records]
    correct = [a[r["answer_label"]] for a, r in zip(actions, records)]
    model = SentenceTransformer(resolve_model_path(PACKAGED_MINILM), device="cpu")

    def embed(texts):
        return model.encode(texts, normalize_embeddings=True, convert_to_numpy=True).astype(np.float64)

    p, c = embed(premises), embed(correct)
    i, j = np.triu_indices(len(records), 1)
    movies = np.array([r["movie"] for r in records])
    usable = np.array([len(set(a)) == 4 for a in actions])
    keep = ((p[i] * p[j]).sum(1) > 0.9) & ((c[i] * c[j]).sum(1) < 0.9) & (movies[i] != movies[j]) \
        & usable[i] & usable[j]
    expected = {frozenset((str(records[a]["total_id"]), str(records[b]["total_id"]))) for a, b in zip(i[keep], j[keep])}
    rows = _rows(sample_build)
    assert {frozenset(r["pair_id"].split(":")[1:]) for r in rows} == expected and expected
    by_id = {str(r["total_id"]): (r, a, k) for r, a, k in zip(records, actions, correct)}
    by_pair: dict[str, list[dict]] = {}
    for row in rows:
        by_pair.setdefault(row["pair_id"], []).append(row)
    for subs in by_pair.values():
        one, two = sorted(subs, key=lambda s: s["sub_question"])
        for me, other in ((one, two), (two, one)):
            _, my_actions, my_correct = by_id[me["total_id"]]
            their_correct = by_id[other["total_id"]][2]
            assert me["choices"][me["label"]] == my_correct and len(set(me["choices"])) == 4
            # the other sample's correct action: the one choice flagged re-written, else the one equal to it
            paired = ([k for k, f in enumerate(me["rewritten"]) if f]
                      or [k for k, c in enumerate(me["choices"]) if c == their_correct])
            assert len(paired) == 1 and paired[0] != me["label"]
            own = [c for k, c in enumerate(me["choices"]) if k not in (me["label"], paired[0])]
            assert set(own) <= set(my_actions) - {my_correct, me["choices"][paired[0]]}  # two own distractors


@pytest.mark.slow
def test_retagging_puts_the_premise_person_in_the_paired_action(sample_build):
    """Ye & Kovashka (2021), as in VCR-Visor: a re-written choice is the other sample's correct action
    with its single person tag replaced by the premise's single person tag."""
    import re

    rows = _rows(sample_build)
    correct = {r["total_id"]: r["choices"][r["label"]] for r in rows}
    rewritten = 0
    for r in rows:
        other = next(t for t in r["pair_id"].split(":")[1:] if t != r["total_id"])
        for choice, flag in zip(r["choices"], r["rewritten"]):
            if flag:
                rewritten += 1
                mine, = set(re.findall(r"\[person\d+\]", r["premise"]))
                theirs, = set(re.findall(r"\[person\d+\]", correct[other]))
                assert choice == correct[other].replace(theirs, mine) and mine != theirs
    assert rewritten > 0


@pytest.mark.slow
def test_build_is_identical_whatever_the_order_of_the_lines(sample_sources, sample_build, tmp_path):
    lines = (sample_sources / "pmr" / "val-ori.jsonl").read_text().splitlines()
    random.Random(3).shuffle(lines)
    (tmp_path / "val-ori.jsonl").write_text("\n".join(lines) + "\n")
    run_build("pmr-p", tmp_path / "val-ori.jsonl", tmp_path / "shuffled", assignments=offline_params("pmr-p"))
    assert (tmp_path / "shuffled" / PARQUET).read_bytes() == (sample_build / PARQUET).read_bytes()


@pytest.mark.slow
def test_sample_end_to_end(sample_build, cli, tmp_path):
    code, _, err = cli("predict", "pmr-p", "--data", sample_build, "--model", "baseline:random",
                       "--out", tmp_path / "r.json")
    assert code == 0, err
    code, stdout, err = cli("evaluate", "pmr-p", "--data", sample_build, "--predictions", tmp_path / "r.json",
                            "--report", tmp_path / "report")
    assert code == 0, err
    metrics = json.loads((tmp_path / "report" / "metrics.json").read_text())
    assert metrics["pairs"] == len(_rows(sample_build)) // 2 and 0 <= metrics["apq"] <= 100
    card = (sample_build / "README.md").read_text()
    assert "| VCR-Visor paper, Table 7 | 1,538 | 3,502 | - | - | - |" in card
    code, stdout, err = cli("verify", sample_build)
    assert code == 0, err + stdout
