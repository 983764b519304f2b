"""VisDial v1.0: metric goldens, NDCG against scikit-learn, reader errors, scoring end to end."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from helpers import assert_one_error_line

from builders.visdial import reader as visdial
from builders.visdial.samples import write_visdial
from core.errors import SourceError
from evaluator.visdial.metrics import gt_ranks, ndcg, retrieval_metrics, scores_to_ranks


def test_retrieval_metrics_by_hand():
    """Ground-truth ranks 1, 3, 7, 20: R@1 1/4, R@5 2/4, R@10 3/4, mean 7.75, MRR (1 + 1/3 + 1/7 + 1/20) / 4."""
    got = retrieval_metrics(np.array([1, 3, 7, 20]))
    assert got["r@1"] == 25.0 and got["r@5"] == 50.0 and got["r@10"] == 75.0
    assert got["mean_rank"] == 7.75
    assert got["mrr"] == pytest.approx((1 + 1 / 3 + 1 / 7 + 1 / 20) / 4)


def test_scores_to_ranks_and_gt_rank():
    scores = np.array([[0.1, 0.9, 0.5, 0.5]])  # ties keep option order: option 2 before option 3
    ranks = scores_to_ranks(scores)
    assert ranks.tolist() == [[4, 1, 2, 3]]
    assert gt_ranks(ranks, np.array([2])).tolist() == [2]


def test_ndcg_hand_computed():
    """relevance (0, 1, 0.5, 0, 0) -> k = 2; predicted order 0, 2, 1, 3, 4: DCG = 0 + 0.5 / log2(3),
    ideal = 1 + 0.5 / log2(3)."""
    ranks = np.array([[1, 3, 2, 4, 5]])
    got = ndcg(ranks, np.array([[0.0, 1.0, 0.5, 0.0, 0.0]]))[0]
    expected = (0.5 / math.log2(3)) / (1 + 0.5 / math.log2(3))
    assert got == pytest.approx(expected)
    # order 2, 0, 1, ...: the top k = 2 hold 0.5 and 0; option 1 (relevance 1) at position 3 is beyond k
    assert ndcg(np.array([[2, 3, 1, 4, 5]]), np.array([[0.0, 1.0, 0.5, 0.0, 0.0]]))[0] == pytest.approx(
        0.5 / (1 + 0.5 / math.log2(3)))


def test_ndcg_equals_sklearn_with_k_nonzero_per_row():
    from sklearn.metrics import ndcg_score

    rng = np.random.default_rng(0)
    for _ in range(200):
        relevance = np.where(rng.random(100) < 0.15, rng.choice([0.2, 0.4, 0.6, 0.8, 1.0], 100), 0.0)
        relevance[rng.integers(100)] = 1.0
        scores = rng.permutation(100).astype(float)  # no ties
        k = int((relevance != 0).sum())
        ours = ndcg(scores_to_ranks(scores[None, :]), relevance[None, :])[0]
        assert ours == pytest.approx(ndcg_score(relevance[None, :], scores[None, :], k=k), abs=1e-12)


def test_all_zero_relevance_is_nan_not_a_division_error():
    with np.errstate(all="raise"):
        values = ndcg(np.array([[1, 2, 3], [1, 2, 3]]), np.array([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0]]))
    assert math.isnan(values[0]) and values[1] == 1.0


@pytest.fixture
def source(tmp_path):
    write_visdial(tmp_path / "src", {"val": 6}, seed=4)
    return tmp_path / "src"


def _round(d, r, **fields):
    """Edit round r (0-based) of dialog d."""
    def edit(data):
        data["data"]["dialogs"][d]["dialog"][r].update(fields)
    return edit


def _option(d, r, k, value=None, copy_of=None):
    """Set option k of round r of dialog d to `value`, or to the same index as option `copy_of`."""
    def edit(data):
        options = data["data"]["dialogs"][d]["dialog"][r]["answer_options"]
        options[k] = options[copy_of] if copy_of is not None else value
    return edit


def _both(*edits):
    def edit(data):
        for e in edits:
            e(data)
    return edit


@pytest.mark.parametrize("block", [8192, 7])  # the option lists are decoded this many rounds at a time
@pytest.mark.parametrize("dialog, breakage, needles", [
    (2, lambda d: _round(2, 3, gt_index=(d["data"]["dialogs"][2]["dialog"][3]["gt_index"] + 1) % 100)(d),
     ["round 4", "gt_index"]),
    (1, lambda d: d["data"]["dialogs"][1]["dialog"][0]["answer_options"].pop(), ["round 1", "answer_options", "100"]),
    (0, _round(0, 5, question=10 ** 6), ["round 6", "question index"]),
    (3, lambda d: d["data"]["dialogs"][3].pop("caption"), ["caption", "record"]),
    (4, _option(4, 2, 7, "seven"), ["round 3", "answer_options", "Expected `int`, got `str`"]),
    (4, _option(4, 2, 7, 2.5), ["round 3", "answer_options", "Expected `int`, got `float`"]),
    (5, _option(5, 9, 7, -1), ["round 10", "answer_options", "outside the answer pool"]),
    # an image id is COCO's number of the image, never negative (before: built, and named a file that is none)
    (2, lambda d: d["data"]["dialogs"][2].update(image_id=-5), ["image_id", ">= 0"]),
    (5, _option(5, 9, 7, 2 ** 40), ["round 10", "answer_options", "outside the answer pool"]),
    (3, _option(3, 1, 7, copy_of=8), ["round 2", "answer_options", "distinct"]),
    # two problems in one dialog: the first round in the file's order is named, with its first broken rule
    (3, _both(_option(3, 6, 7, copy_of=8), _round(3, 2, answer=10 ** 6), _round(3, 2, question=10 ** 6)),
     ["round 3", "question index"]),
])
def test_malformed_dialogs_name_image_round_and_field(source, block, dialog, breakage, needles, monkeypatch):
    monkeypatch.setattr(visdial, "_OPTION_BLOCK", block)
    path = source / "visdial_1.0_val.json"
    data = json.loads(path.read_text())
    breakage(data)
    path.write_text(json.dumps(data))
    with pytest.raises(SourceError) as err:
        visdial.read_dialogs(path)
    assert str(data["data"]["dialogs"][dialog]["image_id"]) in str(err.value)
    for needle in needles:
        assert needle in str(err.value)


def test_rows_equal_the_literal_flattening(source, monkeypatch):
    """rows() builds its columns from pool indices with Arrow; on a file whose dialogs are out of image
    order, with the options column cut into chunks of 7 rows, it gives the rows of the rule written over
    the JSON as Python lists: dialogs by image id, round r's history the "question? answer" of rounds
    before it, options the pool's strings, relevance where the dense file has it."""
    import random

    from builders.visdial import builder

    monkeypatch.setattr(builder, "_OPTION_ROWS", 7)
    path = source / "visdial_1.0_val.json"
    data = json.loads(path.read_text())
    random.Random(1).shuffle(data["data"]["dialogs"])
    path.write_text(json.dumps(data))
    dense = visdial.read_dense(source / "visdial_1.0_val_dense_annotations.json")
    table = builder.rows(visdial.read_dialogs(path), dense)
    assert table.column("options").num_chunks == 9  # 60 rows in chunks of 7
    qs, ans = data["data"]["questions"], data["data"]["answers"]
    relevance = {key: [float(np.float32(v)) for v in values] for key, values in dense.items()}  # stored as float32
    expected = []
    for d in sorted(data["data"]["dialogs"], key=lambda d: d["image_id"]):
        history = []
        for r, rnd in enumerate(d["dialog"], start=1):
            q, a = qs[rnd["question"]], ans[rnd["answer"]]
            expected.append({"id": f"{d['image_id']}_{r}", "image_id": d["image_id"], "round_id": r,
                             "caption": d["caption"], "history": list(history), "question": q, "answer": a,
                             "options": [ans[o] for o in rnd["answer_options"]], "gt_index": rnd["gt_index"],
                             "relevance": relevance.get((d["image_id"], r))})
            history.append(f"{q}? {a}")
    got = table.to_pylist()
    assert [row["id"] for row in got] == [row["id"] for row in expected]
    assert got == expected
    assert sum(row["relevance"] is not None for row in got) == 6


def test_dense_annotation_errors(cli, source, tmp_path):
    path = source / "visdial_1.0_val_dense_annotations.json"
    dense = json.loads(path.read_text())
    dense[1]["gt_relevance"][5] = 1.5
    path.write_text(json.dumps(dense))
    code, _, err = cli("build", "visdial", "--source", source, "--out", tmp_path / "out")
    assert code == 2 and "gt_relevance" in err and f"image {dense[1]['image_id']}" in err
    assert not (tmp_path / "out").exists()


def test_end_to_end_perfect_and_reversed_rankings(cli, source, tmp_path):
    from core.data import load_table

    out = tmp_path / "visdial"
    assert cli("build", "visdial", "--source", source, "--out", out)[0] == 0
    table = load_table(out, "default", "val").to_pylist()
    assert len(table) == 60 and table[3]["history"][0].endswith(table[0]["answer"])
    perfect, reversed_ = [], []
    for row in table:
        relevance = np.array(row["relevance"] if row["relevance"] is not None else np.zeros(100))
        key = relevance + 10.0 * (np.arange(100) == row["gt_index"])  # ground truth first, then by relevance
        ranks = scores_to_ranks(key[None, :])[0].tolist()
        perfect.append({"image_id": row["image_id"], "round_id": row["round_id"], "ranks": ranks})
        reversed_.append({**perfect[-1], "ranks": [101 - r for r in ranks]})
    sub = tmp_path / "perfect.json"
    sub.write_text(json.dumps(perfect))
    code, stdout, err = cli("evaluate", "visdial", "--data", out, "--predictions", sub)
    metrics = json.loads(stdout)
    assert code == 0, err
    assert metrics["mrr"] == 1.0 and metrics["r@1"] == 100.0 and metrics["mean_rank"] == 1.0
    assert metrics["ndcg"] == 100.0 and metrics["ndcg_rounds"] == 6
    sub.write_text(json.dumps(reversed_))
    metrics = json.loads(cli("evaluate", "visdial", "--data", out, "--predictions", sub)[1])
    assert metrics["mean_rank"] == 100.0 and metrics["r@10"] == 0.0 and metrics["mrr"] == 0.01
    bad = [dict(p) for p in perfect]
    bad[7]["ranks"] = [1] * 100
    sub.write_text(json.dumps(bad))
    code, _, err = cli("evaluate", "visdial", "--data", out, "--predictions", sub)
    assert code == 2 and "permutations of 1..100" in err and f"({bad[7]['image_id']}, {bad[7]['round_id']})" in err
    sub.write_text(json.dumps(perfect[:-1]))
    code, _, err = cli("evaluate", "visdial", "--data", out, "--predictions", sub)
    assert code == 2 and "image_id/round_id" in err and "have no prediction" in err


def test_the_options_invariant_on_arrow_agrees_with_the_literal_rule():
    """check_invariants' options rule (100 options, options[gt_index] == answer) runs on Arrow buffers: on
    hand-made tables (a sliced one too, whose offsets do not start at 0) it agrees with the rule written
    over Python lists, and each kind of breakage fails it."""
    import pyarrow as pa

    from builders.visdial.builder import _options_hold_answers

    def literal(t):
        rows = t.to_pylist()
        return all(len(r["options"]) == 100 and r["options"][r["gt_index"]] == r["answer"] for r in rows)

    def table(rows):
        return pa.table({"options": [r[0] for r in rows], "gt_index": pa.array([r[1] for r in rows], pa.int32()),
                         "answer": [r[2] for r in rows]})

    options = [[f"a{k}-{j}" for j in range(100)] for k in range(6)]
    good = [(options[k], (7 * k) % 100, options[k][(7 * k) % 100]) for k in range(6)]
    chunked = pa.table({"options": pa.chunked_array([pa.array([r[0] for r in good[:2]]),
                                                     pa.array([r[0] for r in good[2:]])]),
                        "gt_index": pa.array([r[1] for r in good], pa.int32()), "answer": [r[2] for r in good]})
    cases = {
        "good": table(good),
        "chunked": chunked,
        "chunked, wrong answer": chunked.set_column(2, "answer", pa.array([r[2] for r in good[:5]] + ["not it"])),
        "sliced": table([(["x"] * 100, 0, "y")] + good).slice(1),
        "wrong answer": table(good[:3] + [(options[3], 4, "not it")] + good[4:]),
        "99 options": table(good[:2] + [(options[2][:99], 0, options[2][0])] + good[3:]),
        "gt out of range": table(good[:1] + [(options[1], 100, options[1][0])]),
        "empty": table([]).cast(pa.schema([("options", pa.list_(pa.string())), ("gt_index", pa.int32()),
                                          ("answer", pa.string())])),
    }
    got = {name: _options_hold_answers(t) for name, t in cases.items()}
    assert got == {"good": True, "chunked": True, "chunked, wrong answer": False, "sliced": True, "wrong answer": False,
                   "99 options": False, "gt out of range": False, "empty": True}
    assert all(got[name] == literal(t) for name, t in cases.items() if name != "gt out of range")


def test_rounds_dense_keeps_the_densely_annotated_round_of_each_dialog(cli, sample_sources, tmp_path):
    """`--param rounds=dense`: the rows of the every-round build whose relevance the dense annotations give (the
    sample writer annotates one random round per val dialog, as VisDial v1.0's val release does), nothing else;
    a split without a dense annotation file is one line naming it."""
    from core.data import load_table

    code, _, err = cli("build", "visdial", "--source", sample_sources, "--out", tmp_path / "all")
    assert code == 0, err
    code, _, err = cli("build", "visdial", "--source", sample_sources, "--out", tmp_path / "dense", "--split", "val",
                       "--param", "rounds=dense")
    assert code == 0, err
    every = load_table(tmp_path / "all", "default", "val").to_pylist()
    dense = load_table(tmp_path / "dense", "default", "val").to_pylist()
    assert dense == [row for row in every if row["relevance"] is not None]
    assert len({row["image_id"] for row in dense}) == len(dense) == len({row["image_id"] for row in every})
    assert {row["round_id"] for row in dense} != {1}  # not just the first round
    code, _, err = cli("build", "visdial", "--source", sample_sources, "--out", tmp_path / "train",
                       "--param", "rounds=dense")
    assert_one_error_line(code, err, ("rounds=dense", "visdial_1.0_train_dense_annotations.json", "--split"))
    assert not (tmp_path / "train").exists()
