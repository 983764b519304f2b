"""VCR v1.0 itself (Zellers et al., CVPR 2019): built from 50 real val records, Q->A / QA->R / Q->AR on
hand-computed goldens, the blind baselines, submissions, and the sample end to end."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pyarrow.parquet as pq
import pytest

from evaluator.vcr.metrics import vcr_correct
from evaluator.vcr.task import BlindTextScorer
from pipelines.build import run_build


def _rows(folder, split="val"):
    return {r["annot_id"]: r for r in pq.read_table(folder / "default" / f"{split}-00000-of-00001.parquet").to_pylist()}


@pytest.fixture
def real_build(reference_dir, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(reference_dir / "vcr" / "val_sample.jsonl", src / "val.jsonl")
    run_build("vcr", src, tmp_path / "vcr")
    return reference_dir, tmp_path / "vcr"


def test_real_records_become_rows_with_the_rendered_text(real_build):
    reference_dir, out = real_build
    rows = _rows(out)
    raw = [json.loads(line) for line in (reference_dir / "vcr" / "val_sample.jsonl").read_text().splitlines()]
    assert len(rows) == len(raw) == 50
    for rec in raw:  # labels, ids and files exactly as released
        row = rows[rec["annot_id"]]
        assert (row["answer_label"], row["rationale_label"], row["img_fn"], row["movie"], row["objects"]) == \
            (rec["answer_label"], rec["rationale_label"], rec["img_fn"], rec["movie"], rec["objects"])
    # hand-checked against question_orig / answer_orig / rationale_orig (as tests/test_vcr_text.py)
    assert rows["val-35"]["question"] == "What is [person1] thinking?"
    assert rows["val-35"]["answer_choices"][rows["val-35"]["answer_label"]] == \
        "[person1] is wondering if [person2] is going to kiss her."
    assert rows["val-111"]["rationale_choices"][rows["val-111"]["rationale_label"]] == \
        "[person5]'s clothing suggests that she is a secretary, and her body language indicates that she is " \
        "pulling the door shut."
    assert list(rows) == sorted(rows)  # annot_id order


def test_q_ar_needs_both_and_a_tie_is_wrong():
    """Hand-computed: item 1 answer right, rationale right -> Q->AR 1; item 2 answer right, rationale a
    tie at the top -> QA->R 0, Q->AR 0; item 3 answer wrong, rationale right -> Q->AR 0."""
    answers = np.array([[3, 1, 0, 0], [0, 5, 1, 1], [2, 2.5, 0, 0]], dtype=float)
    rationales = np.array([[0, 0, 1, 0], [4, 4, 0, 0], [0, 0, 0, 9]], dtype=float)
    right = vcr_correct(answers, np.array([0, 1, 0]), rationales, np.array([2, 0, 3]))
    assert right["q_a"].tolist() == [1, 1, 0]
    assert right["qa_r"].tolist() == [1, 0, 1]
    assert right["q_ar"].tolist() == [1, 0, 0]


def test_blind_baselines_follow_their_rules():
    import pyarrow as pa

    answers = ["He won.", "[person1] is happy because he won the game.", "No.", "Yes it is"]
    table = pa.table({"question": ["Why is [person1] happy?"], "answer_label": [1], "answer_choices": [answers],
                      "rationale_choices": [["[person1] won the game and is happy.", "Rain.", "a b c d e f", "x"]]})
    (answers, rationales), = BlindTextScorer("length").predict(table)
    assert answers == [2.0, 8.0, 1.0, 3.0] and rationales == [7.0, 1.0, 6.0, 1.0]  # words per choice
    (answers, rationales), = BlindTextScorer("overlap").predict(table)
    # question words {why, is, [person1], happy}; answer 1 words {[person1], is, happy, because, he, won, the,
    # game}: 3 shared of 9 -> 1/3
    assert answers[1] == pytest.approx(3 / 9) and answers[2] == 0.0
    # rationale query = question + correct answer: {why, is, [person1], happy, because, he, won, the, game};
    # rationale 0 {[person1], won, the, game, and, is, happy}: 6 shared of 10
    assert rationales[0] == pytest.approx(6 / 10)


@pytest.fixture(scope="module")
def sample_build(sample_sources, tmp_path_factory):
    out = tmp_path_factory.mktemp("vcr-sample") / "vcr"
    run_build("vcr", sample_sources, out)
    return out


def test_sample_end_to_end(sample_build, cli, tmp_path):
    rows = _rows(sample_build)
    perfect = [{"annot_id": a, "answer_scores": [float(k == r["answer_label"]) for k in range(4)],
                "rationale_scores": [float(k == r["rationale_label"]) for k in range(4)]} for a, r in rows.items()]
    half = [{**p, "rationale_scores": [0.0] * 4} if k % 2 else p for k, p in enumerate(perfect)]
    (tmp_path / "half.json").write_text(json.dumps(half))
    code, stdout, err = cli("evaluate", "vcr", "--data", sample_build, "--predictions", tmp_path / "half.json",
                            "--report", tmp_path / "report")
    assert code == 0, err
    metrics = json.loads((tmp_path / "report" / "metrics.json").read_text())
    expected_half = 100 * len(range(0, len(rows), 2)) / len(rows)
    assert metrics["q_a"] == 100.0 and metrics["qa_r"] == metrics["q_ar"] == pytest.approx(expected_half)
    for model in ("baseline:random", "baseline:overlap", "baseline:length"):
        code, _, err = cli("predict", "vcr", "--data", sample_build, "--model", model, "--out", tmp_path / "p.json")
        assert code == 0, err
        code, _, err = cli("evaluate", "vcr", "--data", sample_build, "--predictions", tmp_path / "p.json")
        assert code == 0, err


def test_rationales_given_each_answer_are_read_at_the_correct_one(sample_build, cli, tmp_path):
    """The VCR leaderboard's form: rationale_scores as 4 lists, the rationales' scores given answer 0..3. Hand-made:
    the list at the correct answer ranks the right rationale first and every other list ranks it last, so QA->R is
    100 (the correct answer's list read) where reading any other list would give 0; then the correct answer's list
    is the one made wrong: 0. The flat form of the same scores gives the same metrics."""
    rows = _rows(sample_build)

    def grid(r: dict, right_at_label: bool) -> list:
        good = [float(k == r["rationale_label"]) for k in range(4)]
        bad = [float(k != r["rationale_label"]) for k in range(4)]
        return [(good if right_at_label else bad) if a == r["answer_label"] else (bad if right_at_label else good)
                for a in range(4)]

    def scored(name: str, rationales) -> dict:
        entries = [{"annot_id": a, "answer_scores": [float(k == r["answer_label"]) for k in range(4)],
                    "rationale_scores": rationales(r)} for a, r in rows.items()]
        (tmp_path / name).write_text(json.dumps(entries))
        code, out, err = cli("evaluate", "vcr", "--data", sample_build, "--predictions", tmp_path / name,
                             "--bootstrap", "0")
        assert code == 0, err
        return json.loads(out)

    right = scored("right.json", lambda r: grid(r, True))
    assert right["q_a"] == right["qa_r"] == right["q_ar"] == 100.0
    wrong = scored("wrong.json", lambda r: grid(r, False))
    assert wrong["qa_r"] == wrong["q_ar"] == 0.0
    flat = scored("flat.json", lambda r: grid(r, True)[r["answer_label"]])
    assert {k: flat[k] for k in ("q_a", "qa_r", "q_ar")} == {k: right[k] for k in ("q_a", "qa_r", "q_ar")}


def test_the_vlm_asks_the_rationales_given_each_answer_where_the_labels_are_held_apart(sample_build):
    """On a table without labels (a sealed split's public half) the Ask makes five prompts per item: Q->A, then
    QA->R given each answer in order; `combine` gives the four rationale lists. With labels: two prompts."""
    from core.data import load_table
    from evaluator.vcr.task import AnswerThenRationale

    ask = AnswerThenRationale()
    table = load_table(sample_build, "default", "val")
    values, continuations, rows = ask.prompts(table)
    assert len(values) == 2 * table.num_rows and rows[:4] == [0, 0, 1, 1]
    public = table.drop_columns(["answer_label", "rationale_label"])
    values, continuations, rows = ask.prompts(public)
    item = table.slice(0, 1).to_pylist()[0]
    assert rows[:6] == [0, 0, 0, 0, 0, 1] and len(values) == 5 * table.num_rows
    assert values[:5] == [{"query": item["question"]}, *({"query": f"{item['question']} {a}"}
                                                          for a in item["answer_choices"])]
    assert continuations[:5] == [item["answer_choices"], *[item["rationale_choices"]] * 4]
    assert ask.combine([[1.0] * 4, [0.0] * 4, [1.0] * 4, [2.0] * 4, [3.0] * 4]) == \
        ([1.0] * 4, [[0.0] * 4, [1.0] * 4, [2.0] * 4, [3.0] * 4])
    assert "answer_label" not in ask.input_columns


@pytest.mark.parametrize("edit, needle", [
    (lambda p: p.pop("rationale_scores"), 'entries without "annot_id", "answer_scores", "rationale_scores"'),
    (lambda p: p.update(rationale_scores=[1, 2, 3]), "'rationale_scores' values that are not lists of 4"),
    (lambda p: p.update(answer_scores=[1, 2, float("nan"), 4]), "'answer_scores' values that are not lists of 4"),
    # the per-answer form is the rationales' only: 4 lists of 4, never the answers'
    (lambda p: p.update(answer_scores=[[0, 1, 2, 3]] * 4), "'answer_scores' values that are not lists of 4"),
    (lambda p: p.update(rationale_scores=[[0, 1, 2, 3]] * 3), "'rationale_scores' values that are not lists of 4"),
    (lambda p: p.update(rationale_scores=[[0, 1, 2, 3]] * 3 + [[0, 1, 2]]), "'rationale_scores' values"),
])
def test_a_bad_submission_is_one_line(sample_build, cli, tmp_path, edit, needle):
    rows = _rows(sample_build)
    entries = [{"annot_id": a, "answer_scores": [0, 1, 2, 3], "rationale_scores": [3, 2, 1, 0]} for a in rows]
    edit(entries[0])
    (tmp_path / "p.json").write_text(json.dumps(entries))
    code, _, err = cli("evaluate", "vcr", "--data", sample_build, "--predictions", tmp_path / "p.json")
    assert code == 2 and len(err.strip().splitlines()) == 1 and needle in err


def test_perceptual_score_of_a_blind_baseline(sample_build, cli, tmp_path):
    """A text-only scorer does not read the image: P_image is exactly 0 (Gat et al., NeurIPS 2021, Eq. 1)."""
    code, _, err = cli("perceptual", "vcr", "--data", sample_build, "--model", "baseline:overlap", "--repeats", "2",
                       "--permutations", "2", "--report", tmp_path / "ps")
    assert code == 0, err
    metrics = json.loads((tmp_path / "ps" / "metrics.json").read_text())
    assert metrics["all"]["q_ar"]["modalities"]["image"]["p"]["mean"] == 0.0


def test_an_annot_id_in_train_and_val_is_an_error(sample_sources, cli, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    lines = (sample_sources / "vcr" / "val.jsonl").read_text().splitlines()
    (src / "val.jsonl").write_text("\n".join(lines[1:]) + "\n")
    (src / "train.jsonl").write_text(lines[0] + "\n" + lines[1] + "\n")
    code, _, err = cli("build", "vcr", "--source", src, "--out", tmp_path / "out")
    assert code == 2 and "annot id also in" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_the_val_size_generator_follows_adversarial_matching():
    """generate_vcr_matched (the full-size benches' input): every record passes the release's invariants;
    each distractor is the correct response of the record its `*_sources` entry names, re-tagged to this
    record's people (Zellers et al., CVPR 2019, §4), of a question of the same form for answers; correct
    responses are texts of their own; the reasoning types come in VCR val's proportions (the VCR-Visor
    paper, Table 2: 9,848 causal and 1,548 temporal of 26,534, i.e. 37.1% and 5.8%)."""
    import msgspec

    from builders.sources.vcr import VCRRecord, check_record
    from builders.sources.vcr_samples import generate_vcr_matched
    from builders.text import reasoning_types, render_tokens

    records = generate_vcr_matched(3000, seed=1)
    decode = msgspec.json.Decoder(VCRRecord).decode
    assert all(check_record(decode(msgspec.json.encode(r))) is None for r in records)
    words = lambda tokens: [w if isinstance(w, str) else "P" for w in tokens]  # noqa: E731  (people as P)
    for r in records[:300]:
        for part in ("answer", "rationale"):
            label = r[f"{part}_label"]
            own = render_tokens(r[f"{part}_choices"][label], r["objects"])
            for k, source in enumerate(r[f"{part}_sources"]):
                if k == label:
                    assert source == r["match_index"]
                    continue
                other = records[source]
                theirs = other[f"{part}_choices"][other[f"{part}_label"]]
                assert words(r[f"{part}_choices"][k]) == words(theirs)  # the same words, its people re-tagged
                assert render_tokens(r[f"{part}_choices"][k], r["objects"]) != own
            if part == "answer":
                forms = {records[s]["question_orig"].split()[0] for s in r["answer_sources"]}
                assert len(forms) == 1  # the same question form (its first word) as the record's own
    correct = [render_tokens(r["answer_choices"][r["answer_label"]], r["objects"]) for r in records]
    assert len(set(correct)) > 0.95 * len(records)
    kinds = [k for r in records for k in reasoning_types(render_tokens(r["question"], r["objects"]))]
    assert abs(kinds.count("causal") / len(records) - 0.371) < 0.03
    assert abs(kinds.count("temporal") / len(records) - 0.058) < 0.015
