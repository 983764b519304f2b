"""COSIM-Q and COSIM-C (the VCR-Visor paper, App. C): built from the real CoSIm val split with the
packaged MiniLM and checked pair by pair against an independent recomputation; the four-choice APQ /
HPQ on hand-computed goldens; determinism; the sample end to end."""

from __future__ import annotations

import json
import math
import random

import numpy as np
import pyarrow.parquet as pq
import pytest
from helpers import offline_params

from builders.nlp import PACKAGED_MINILM, resolve_model_path
from evaluator import paired
from pipelines.build import run_build

FIELD = {"cosim-q": "question", "cosim-c": "change"}


def _rows(folder):
    return pq.read_table(folder / "default" / "val-00000-of-00001.parquet").to_pylist()


@pytest.fixture(scope="module")
def real_builds(tmp_path_factory):
    from conftest import REFERENCE

    source = REFERENCE / "cosim" / "val.json"
    if not source.is_file():
        pytest.skip(f"shared reference data not found at {source} (only present beside the project checkout)")
    root = tmp_path_factory.mktemp("cosim-real")
    for bench in FIELD:
        run_build(bench, source, root / bench, assignments=offline_params(bench))
    return source, root


@pytest.mark.slow
@pytest.mark.parametrize("bench", sorted(FIELD))
def test_real_cosim_pairs_equal_an_independent_recomputation(real_builds, bench):
    """Every pair the recipe admits, and only those: recomputed here with sentence-transformers
    directly over all 800 x 800 example pairs (paired-field cosine > 0.9, correct-answer cosine < 0.9,
    different images, four different answer texts), and every sub-question's choices rebuilt."""
    from sentence_transformers import SentenceTransformer

    source, root = real_builds
    examples = json.loads(source.read_text())
    model = SentenceTransformer(resolve_model_path(PACKAGED_MINILM), device="cpu")

    def embed(texts):
        return model.encode(texts, batch_size=64, normalize_embeddings=True, convert_to_numpy=True).astype(np.float64)

    field = FIELD[bench]
    paired_e = embed([x[field] for x in examples])
    answers = embed([x["answer_choices"][x["answer_label"]] for x in examples])
    usable = np.array([len(set(x["answer_choices"])) == 4 for x in examples])
    images = np.array([f"{x['folder']}/{x['img_fn']}" for x in examples])
    i, j = np.triu_indices(len(examples), 1)
    keep = ((paired_e[i] * paired_e[j]).sum(1) > 0.9) & ((answers[i] * answers[j]).sum(1) < 0.9) \
        & usable[i] & usable[j] & (images[i] != images[j])
    stem = [x["img_fn"].rsplit(".", 1)[0] for x in examples]  # CoSIm val has one example per image
    expected = {frozenset((stem[a], stem[b])) for a, b in zip(i[keep], j[keep])}

    rows = _rows(root / bench)
    by_pair: dict[str, list[dict]] = {}
    for row in rows:
        by_pair.setdefault(row["pair_id"], []).append(row)
    built = {frozenset(pid.split(":")[1:]) for pid in by_pair}
    assert built == expected
    assert len(built) == {"cosim-q": 66, "cosim-c": 90}[bench]  # measured with the packaged MiniLM, no NLI

    by_stem = dict(zip(stem, examples))
    for pid, subs in by_pair.items():
        one, two = sorted(subs, key=lambda s: s["sub_question"])
        for me, other in ((one, two), (two, one)):
            source_me, source_other = by_stem[me["example_id"]], by_stem[other["example_id"]]
            correct = source_me["answer_choices"][source_me["answer_label"]]
            other_correct = source_other["answer_choices"][source_other["answer_label"]]
            assert me["choices"][me["label"]] == correct
            assert other_correct in me["choices"] and len(set(me["choices"])) == 4
            own = set(me["choices"]) - {correct, other_correct}
            assert own <= set(source_me["answer_choices"]) - {correct}
            assert me["img_fn"] == f"{source_me['folder']}/{source_me['img_fn']}"
            assert (me["question"], me["change"]) == (source_me["question"], source_me["change"])
        assert one["img_fn"] != two["img_fn"]


@pytest.mark.slow
def test_real_card_puts_table_7_next_to_the_build(real_builds):
    _, root = real_builds
    card = (root / "cosim-c" / "README.md").read_text()
    assert "pretty_name: COSIM-C" in card
    assert "| VCR-Visor paper, Table 7 | 800 | 182 | - | - | - |" in card
    assert "| This build | 800 | - | 90 | 180 |" in card
    assert "6 source examples were left out because two of their answer choices are the same text" in card
    assert "**The NLI filter was skipped (`nli_model=none`)**" in card


def test_four_choice_apq_hpq_goldens():
    """Hand-computed. Pair A: sub-question 1 scores [ln 6, 0, 0, 0] with label 0: P = 6 / 9 = 2/3,
    right; sub-question 2 scores [0, 0, ln 2, ln 2] with label 2: a tie at the top, P = 2 / 6 = 1/3,
    wrong. APQ 0, H = 2 (2/3)(1/3) / 1 = 4/9. Pair B: [0, ln 3, 0, 0] label 1 (P = 3/6 = 1/2, right:
    the largest, though not > 0.5) and [ln 5, 0, 0, 0] label 0 (P = 5/8, right): APQ 1,
    H = 2 (1/2)(5/8) / (9/8) = 5/9."""
    scores = np.array([[math.log(6), 0, 0, 0], [0, 0, math.log(2), math.log(2)],
                       [0, math.log(3), 0, 0], [math.log(5), 0, 0, 0]])
    labels = np.array([0, 2, 1, 0])
    p = paired.correct_probability(scores, labels)
    assert p == pytest.approx([2 / 3, 1 / 3, 1 / 2, 5 / 8])
    right = paired.correct_chosen(scores, labels)
    assert right.tolist() == [1.0, 0.0, 1.0, 1.0]
    assert paired.apq(right[0::2], right[1::2]).tolist() == [0.0, 1.0]
    assert paired.hpq(p[0::2], p[1::2]) == pytest.approx([4 / 9, 5 / 9])


@pytest.fixture(scope="module")
def sample_build(built):
    return built("cosim-q")


def test_sample_end_to_end_with_exact_and_random_scores(sample_build, cli, tmp_path):
    rows = _rows(sample_build)
    assert rows and all(len(r["choices"]) == 4 for r in rows)
    perfect = [{"id": r["id"], "scores": [1.0 if k == r["label"] else 0.0 for k in range(4)]} for r in rows]
    (tmp_path / "perfect.json").write_text(json.dumps(perfect))
    code, stdout, err = cli("evaluate", "cosim-q", "--data", sample_build, "--predictions", tmp_path / "perfect.json",
                            "--report", tmp_path / "report")
    assert code == 0, err
    metrics = json.loads((tmp_path / "report" / "metrics.json").read_text())
    # every P = e / (e + 3) = 0.475367: both right, H = P
    assert metrics["apq"] == 100.0 and metrics["hpq"] == pytest.approx(100 * math.e / (math.e + 3), abs=1e-4)
    assert "# COSIM-Q evaluation: perfect" in (tmp_path / "report" / "report.md").read_text()
    code, _, err = cli("predict", "cosim-q", "--data", sample_build, "--model", "baseline:random",
                       "--out", tmp_path / "random.json")
    assert code == 0, err
    assert all(len(p["scores"]) == 4 for p in json.loads((tmp_path / "random.json").read_text()))
    two = [{"id": r["id"], "scores": [0.0, 1.0]} for r in rows]
    (tmp_path / "two.json").write_text(json.dumps(two))
    code, _, err = cli("evaluate", "cosim-q", "--data", sample_build, "--predictions", tmp_path / "two.json")
    assert code == 2 and "lists of 4 finite numbers" in err and len(err.strip().splitlines()) == 1


def test_build_is_identical_whatever_the_order_of_the_examples(sample_sources, sample_build, tmp_path):
    examples = json.loads((sample_sources / "cosim" / "val.json").read_text())
    random.Random(5).shuffle(examples)
    (tmp_path / "val.json").write_text(json.dumps(examples))
    run_build("cosim-q", tmp_path / "val.json", tmp_path / "shuffled", assignments=offline_params("cosim-q"))
    parquet = "default/val-00000-of-00001.parquet"
    assert (tmp_path / "shuffled" / parquet).read_bytes() == (sample_build / parquet).read_bytes()


def test_verify_rechecks_the_pairs(sample_build, cli):
    code, stdout, err = cli("verify", sample_build)
    assert code == 0, err + stdout


@pytest.mark.slow
def test_real_counts_with_the_recipe_sbert(real_builds, tmp_path):
    """Optional: with the recipe's all-mpnet-base-v2 (VLBENCH_MPNET_DIR, e.g. from
    scripts/fetch_mpnet.py, hash-checked here), the counts the README puts next to Table 7."""
    import hashlib
    import os
    from pathlib import Path

    folder = os.environ.get("VLBENCH_MPNET_DIR")
    if not folder:
        pytest.skip("VLBENCH_MPNET_DIR is not set (python scripts/fetch_mpnet.py prints a folder for it)")
    weights = Path(folder) / "model.safetensors"
    assert hashlib.sha256(weights.read_bytes()).hexdigest() == \
        "78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658"  # the hub's all-mpnet-base-v2
    source, _ = real_builds
    for bench, pairs in (("cosim-q", 80), ("cosim-c", 79)):  # README, with an independent check there
        run_build(bench, source, tmp_path / bench, assignments=[f"sbert_model={folder}", "nli_model=none"])
        assert len({r["pair_id"] for r in _rows(tmp_path / bench)}) == pairs
