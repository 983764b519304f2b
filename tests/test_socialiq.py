"""Social-IQ: QA/fold readers (real folds), rows and A2 pairs, metric goldens, baselines, bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest

from builders.socialiq import reader as socialiq
from builders.socialiq.samples import write_socialiq
from core.errors import SourceError
from evaluator.socialiq.metrics import binary_correct, pair_correct

QA = """q1: Why is the man smiling?
a1: He is happy.
a1: He heard a joke.
a1: His friend arrived.
a1: He won.
i1: He is sad.
i1: He is angry.
i1: He is asleep.
q2: How does she feel?
a2: Proud.
a2: Glad.
a2: Fine.
a2: Good: very good.
i2: Ashamed.
i2: Upset.
i2: Scared.
"""


def test_real_standard_folds(reference_dir):
    """CMU-MultimodalSDK socialiq_std_folds: 888 train and 127 validation videos, disjoint."""
    folds = socialiq.read_folds(reference_dir / "socialiq" / "socialiq_std_folds.json")
    assert len(folds["train"]) == 888 and len(folds["validation"]) == 127
    assert not set(folds["train"]) & set(folds["validation"])


def test_qa_file_and_pairs(tmp_path):
    from builders.socialiq.builder import tables_of

    path = tmp_path / "vid_0000001.txt"
    path.write_text(QA)
    items = socialiq.read_qa(path)
    assert [i.question for i in items] == ["Why is the man smiling?", "How does she feel?"]
    assert items[1].correct[3] == "Good: very good."  # split on the first ':' only
    tables = tables_of({"vid_0000001": items})
    answers, pairs = tables["answers"].to_pylist(), tables["pairs"].to_pylist()
    assert len(answers) == 14 and [a["label"] for a in answers[:7]] == [1, 1, 1, 1, 0, 0, 0]
    assert answers[4]["id"] == "vid_0000001/q1/i1" and answers[0]["id"] == "vid_0000001/q1/a1"
    assert len(pairs) == 24 and pairs[0]["id"] == "vid_0000001/q1/a1-i1"
    assert (pairs[5]["correct"], pairs[5]["incorrect"]) == ("He heard a joke.", "He is asleep.")


@pytest.mark.parametrize("text, needles", [
    (QA.replace("a1: He won.\n", ""), ["3 correct and 3 incorrect", "question at line 1"]),
    (QA.replace("i2: Scared.", "x2: Scared."), ["line 16", "expected 'q<k>"]),
    ("a1: orphan\n" + QA, ["line 1", "answer before any question"]),
    (QA.replace("a2: Proud.", "a2:  "), ["line 10", "empty text"]),
])
def test_malformed_qa_files(tmp_path, text, needles):
    path = tmp_path / "v.txt"
    path.write_text(text)
    with pytest.raises(SourceError) as err:
        socialiq.read_qa(path)
    for needle in needles:
        assert needle in str(err.value)


def test_overlapping_folds_are_an_error(tmp_path):
    path = tmp_path / "folds.json"
    path.write_text(json.dumps({"standard_train_fold": ["a", "b"], "standard_valid_fold": ["b"]}))
    with pytest.raises(SourceError, match="record b: video in both folds"):
        socialiq.read_folds(path)


def test_metric_goldens():
    """Answer accuracy: score > 0 means correct. A2: correct above incorrect, ties count half."""
    assert binary_correct(np.array([0.5, -0.1, 0.0, 2.0]), np.array([1, 0, 1, 0])).tolist() == [1, 1, 0, 0]
    assert pair_correct(np.array([0.3, 0.1, 0.2]), np.array([0.1, 0.3, 0.2])).tolist() == [1.0, 0.0, 0.5]


def test_build_load_and_baselines(cli, tmp_path):
    from datasets import load_dataset

    write_socialiq(tmp_path / "src", 6, 4, 2, seed=1)
    out = tmp_path / "siq"
    assert cli("build", "socialiq", "--source", tmp_path / "src", "--out", out)[0] == 0
    answers = load_dataset(str(out), "answers", split="validation")
    pairs = load_dataset(str(out), "pairs", split="validation")
    assert len(answers) == 4 * 6 * 7 and len(pairs) == 4 * 6 * 12
    assert set(pairs.features) == {"id", "video_id", "question_index", "question", "correct_id", "incorrect_id",
                                   "correct", "incorrect"}
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["statistics"]["videos_without_fold"] == 2
    scores = {}
    for model in ("majority", "answer-sentiment"):
        preds = tmp_path / f"{model}.json"
        assert cli("predict", "socialiq", "--data", out, "--model", f"baseline:{model}", "--out", preds)[0] == 0
        scores[model] = json.loads(cli("evaluate", "socialiq", "--data", out, "--predictions", preds)[1])
    # Majority vote: 4 of 7 answers are correct -> 57.14 (Gat et al., NeurIPS 2021, Table 3, Acc_D);
    # every pair ties -> A2 50.
    assert scores["majority"]["accuracy"] == pytest.approx(100 * 4 / 7, abs=1e-4)
    assert scores["majority"]["a2"] == 50.0
    # The sample's answers lean on sentiment like the real ones: the sentiment baseline beats the majority.
    assert scores["answer-sentiment"]["a2"] > 60 and scores["answer-sentiment"]["accuracy"] > 60
    sentiment = json.loads((tmp_path / "answer-sentiment.json").read_text())
    first = answers[0]
    from vaderSentiment.vaderSentiment import SentimentIntensityAnalyzer

    assert sentiment[0]["score"] == SentimentIntensityAnalyzer().polarity_scores(first["answer"])["compound"]
    sentiment[3]["score"] = float("nan")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(sentiment))
    code, _, err = cli("evaluate", "socialiq", "--data", out, "--predictions", bad)
    assert code == 2 and "finite numbers" in err and sentiment[3]["id"] in err
