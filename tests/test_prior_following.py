"""The prior-following rate (evaluator/prior_following.py): of a model's errors, the share that are the training
prior's answer. Golden values: hand-computed on a five-row table; recounted here from the build's own train split
(VQA-CP) and from GQA's training questions file (GQA-OOD) with plain Counters, not vlbench's baselines; the random
answerer's expected rate derived from its uniform draw."""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from pathlib import Path

import pyarrow as pa
import pytest
from helpers import assert_one_error_line

from core.data import load_table
from evaluator.prior_following import prior_following
from evaluator.tasks import get_task

TRAIN = Path("gqa") / "train_balanced_questions.json"


def _most_frequent(counter: Counter) -> str:
    return min(counter, key=lambda a: (-counter[a], a))


def _gqa_table(rows: list[tuple]) -> pa.Table:
    return pa.table({"question_id": [r[0] for r in rows], "answer": [r[1] for r in rows],
                     "subset": [r[2] for r in rows], "imageId": [r[3] for r in rows]})


def test_the_rate_is_the_prior_s_share_of_the_errors_by_hand():
    """Five rows: q1 right; q2, q3, q4 wrong, q2 and q4 with the prior's answer; q5 not answered (out of scope).
    PF = 2/3 overall; head (q1, q2, q3): 1/2; tail (q4): 1/1."""
    task = get_task("gqa-ood")
    table = _gqa_table([("q1", "red", "head", "i1"), ("q2", "blue", "head", "i1"), ("q3", "no", "head", "i2"),
                        ("q4", "cat", "tail", "i3"), ("q5", "dog", "tail", "i3")])
    prior = ["red", "red", "yes", "dog", "dog"]
    predictions = {"q1": "red", "q2": "red", "q3": "maybe", "q4": "dog"}
    found = prior_following(task, table, predictions, prior, resamples=200)
    assert (found["errors"], found["following"], found["rate"]) == (3, 2, pytest.approx(100 * 2 / 3, abs=1e-4))
    assert found["parts"] == {"head": {"errors": 2, "following": 1, "rate": 50.0},
                              "tail": {"errors": 1, "following": 1, "rate": 100.0}}
    lo, hi = found["intervals"]["metrics"]["rate"]
    assert lo <= found["rate"] <= hi and found["intervals"]["unit"] == "image"
    # no errors: no rate, no interval
    right = prior_following(task, table, {"q1": "red"}, prior, resamples=200)
    assert right["rate"] is None and "intervals" not in right


def test_vqa_cp_prior_follows_on_every_error_and_majority_where_the_priors_agree(cli, built, tmp_path):
    """baseline:prior is the prior: 100% of its errors. baseline:majority answers the overall most frequent train
    answer; its errors follow the prior exactly where a question type's prior is that answer (recounted here)."""
    data = built("vqa-cp")
    train, test = load_table(data, "default", "train"), load_table(data, "default", "test")
    by_type: dict[str, Counter] = defaultdict(Counter)
    for t, a in zip(train.column("question_type").to_pylist(), train.column("multiple_choice_answer").to_pylist()):
        by_type[t][a] += 1
    overall = _most_frequent(Counter(train.column("multiple_choice_answer").to_pylist()))
    found = {}
    for model in ("prior", "majority"):
        out = tmp_path / f"{model}.json"
        assert cli("predict", "vqa-cp", "--data", data, "--model", f"baseline:{model}", "--out", out)[0] == 0
        code, _, err = cli("evaluate", "vqa-cp", "--data", data, "--predictions", out, "--bootstrap", "100",
                           "--report", tmp_path / f"report-{model}")
        assert code == 0, err
        found[model] = json.loads((tmp_path / f"report-{model}" / "metrics.json").read_text())["prior_following"]
    assert found["prior"]["rate"] == 100.0 and found["prior"]["errors"] > 0
    assert all(p["rate"] in (100.0, None) for p in found["prior"]["parts"].values())
    predictions = {r["question_id"]: r["answer"] for r in json.loads((tmp_path / "majority.json").read_text())}
    from evaluator.vqa.metrics import vqa_accuracy

    answers = [predictions[q] for q in test.column("question_id").to_pylist()]
    wrong = [s == 0 for s in vqa_accuracy(answers, test.column("answers"), "current")]
    priors = [_most_frequent(by_type[t]) if t in by_type else overall
              for t in test.column("question_type").to_pylist()]
    errors = sum(wrong)
    following = sum(w and p == overall for w, p in zip(wrong, priors))
    assert 0 < following < errors  # the check can tell the two apart on this build
    assert (found["majority"]["errors"], found["majority"]["following"]) == (errors, following)
    assert found["majority"]["rate"] == pytest.approx(100 * following / errors, abs=1e-4)
    report = (tmp_path / "report-majority" / "report.md").read_text()
    assert "## Prior-following rate" in report and "| answer_type = yes/no |" in report


def _gqa_local_priors(train_file: Path) -> tuple[dict, dict, str]:
    """The local and global groups' most frequent answers in GQA's training questions, and the overall one."""
    local, glob, overall = defaultdict(Counter), defaultdict(Counter), Counter()
    for q in json.loads(train_file.read_text()).values():
        groups = q.get("groups") or {}
        if groups.get("local") is not None:
            local[groups["local"]][q["answer"]] += 1
        glob[groups.get("global") or "none"][q["answer"]] += 1
        overall[q["answer"]] += 1
    return ({g: _most_frequent(c) for g, c in local.items()}, {g: _most_frequent(c) for g, c in glob.items()},
            _most_frequent(overall))


def test_gqa_ood_rates_against_the_local_group_prior_from_gqa_s_training_questions(cli, built, sample_sources,
                                                                                    tmp_path):
    """baseline:local-prior (its answers recounted from the training file here) follows it on every error, head and
    tail; baseline:random, a uniform guess among the d answers of the question's local group, follows it on an
    expected sum([prior != answer and prior among them] / d) / sum((d - 1) / d) of its errors, within four standard
    deviations (its draws are seeded, so the test is deterministic); without --train-file it is not measured."""
    data, train_file = built("gqa-ood"), sample_sources / TRAIN
    local, glob, overall = _gqa_local_priors(train_file)
    test = load_table(data, "all", "testdev")
    groups = test.column("groups").to_pylist()
    priors = [local.get(g["local"]) or glob.get(g["global"] or "none") or overall for g in groups]
    found = {}
    for model in ("local-prior", "random"):
        out = tmp_path / f"{model}.json"
        code, _, err = cli("predict", "gqa-ood", "--data", data, "--model", f"baseline:{model}", "--train-file",
                           train_file, "--out", out)
        assert code == 0, err
        if model == "local-prior":
            answers = {r["questionId"]: r["prediction"] for r in json.loads(out.read_text())}
            assert [answers[q] for q in test.column("question_id").to_pylist()] == priors
        code, _, err = cli("evaluate", "gqa-ood", "--data", data, "--predictions", out, "--train-file", train_file,
                           "--bootstrap", "100", "--report", tmp_path / f"report-{model}")
        assert code == 0, err
        found[model] = json.loads((tmp_path / f"report-{model}" / "metrics.json").read_text())["prior_following"]
    assert found["local-prior"]["rate"] == 100.0
    assert set(found["local-prior"]["parts"]) == {"head", "tail"}
    candidates: dict[str, set] = defaultdict(set)
    for g, a in zip(groups, test.column("answer").to_pylist()):
        candidates[g["local"] or "none"].add(a)
    num = den = var = 0.0
    for g, a, p in zip(groups, test.column("answer").to_pylist(), priors):
        d = len(candidates[g["local"] or "none"])
        follow = (p != a and p in candidates[g["local"] or "none"]) / d
        num, den = num + follow, den + (d - 1) / d
    expected = num / den
    for g, a, p in zip(groups, test.column("answer").to_pylist(), priors):  # the delta method's variance
        d = len(candidates[g["local"] or "none"])
        follow, error = (p != a and p in candidates[g["local"] or "none"]) / d, (d - 1) / d
        # per row: the indicator follow - expected * error, its variance over the draw
        values = [(1 - expected, follow), (-expected, error - follow), (0.0, 1 - error)]
        mean = sum(v * q for v, q in values)
        var += sum((v - mean) ** 2 * q for v, q in values)
    sd = 100 * math.sqrt(var) / den
    assert abs(found["random"]["rate"] - 100 * expected) <= 4 * sd, (found["random"]["rate"], 100 * expected, sd)
    assert found["random"]["rate"] < 50  # far from the prior's own 100%
    out = tmp_path / "random.json"
    code, _, err = cli("evaluate", "gqa-ood", "--data", data, "--predictions", out, "--report", tmp_path / "no-train")
    assert code == 0, err
    missing = json.loads((tmp_path / "no-train" / "metrics.json").read_text())["prior_following"]
    assert "--train-file" in missing["not_measured"]


def test_the_card_carries_evaluate_s_rate(cli, built, sample_sources, tmp_path):
    """The suite's card row is evaluate's rate and interval, shown in report.md and on the page."""
    root = tmp_path / "data"
    root.mkdir()
    (root / "gqa-ood").symlink_to(built("gqa-ood"), target_is_directory=True)
    out = tmp_path / "card"
    code, _, err = cli("suite", "--model", "baseline:random", "--data", root, "--out", out, "--bootstrap", "100",
                       "--train-file", sample_sources / TRAIN, "--no-perceptual", "--no-counterbias")
    assert code == 0, err
    row = json.loads((out / "card.json").read_text())["benchmarks"]["gqa-ood"]["prior_following"]
    alone = json.loads((out / "reports" / "gqa-ood" / "metrics.json").read_text())["prior_following"]
    assert (row["value"], row["interval"], row["errors"]) == \
        (alone["rate"], alone["intervals"]["metrics"]["rate"], alone["errors"])
    assert row["parts"]["tail"]["value"] == alone["parts"]["tail"]["rate"]
    report, page = (out / "report.md").read_text(), (out / "index.html").read_text()
    assert "## Prior-following rate" in report and f"| gqa-ood | {row['errors']} | {row['value']:.2f} [" in report
    assert 'id="prior-following"' in page and f"{row['value']:.2f} [" in page


def test_an_explicit_train_file_that_cannot_be_read_is_an_error(built, cli, tmp_path):
    """Before: evaluate with a --train-file that was missing, a folder or malformed exited 0 with the rate "not
    measured" (and a FIFO hung it). An option given for the prior that cannot be honoured is one line, exit 2."""
    import os

    data = built("gqa-ood")
    out = tmp_path / "random.json"
    code, _, err = cli("predict", "gqa-ood", "--data", data, "--model", "baseline:random", "--out", out)
    assert code == 0, err
    fifo, malformed, empty = tmp_path / "train.fifo", tmp_path / "malformed.json", tmp_path / "empty.json"
    os.mkfifo(fifo)
    malformed.write_text('{"x": 1')
    empty.write_text("{}")
    for train, needle in ((tmp_path / "missing.json", "not found"), (tmp_path, "is a folder"), (fifo, "is a FIFO"),
                          (malformed, "truncated JSON"), (empty, "no questions")):
        code, _, err = cli("evaluate", "gqa-ood", "--data", data, "--predictions", out, "--train-file", train,
                           "--report", tmp_path / "report")
        assert_one_error_line(code, err, [f"--train-file {train}", "cannot be fitted from it", needle])
        assert not (tmp_path / "report").exists()
