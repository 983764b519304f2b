"""lmms-eval 0.7.3's own `--log_samples` logs, scored by `vlbench evaluate`.

The fixtures in tests/fixtures/lmms_eval/ were written by lmms-eval itself, run by
scripts/make_lmms_eval_fixtures.py (never by hand): its `vqav2_val` and `gqa` tasks, on the embedded
VQA v2 validation and GQA test-dev samples in lmms-lab's layout (pipelines/samples/lmms_lab.py), with a
tiny LLaVA that answers "Yes" to every question, capitalised as LLaVA-style models write it. Their lines
hold no `doc` (0.7.3's tracker drops it): each `doc_id` is mapped to the benchmark's id through
`--harness-data`, the same dataset folder, written again here from the same samples.

Goldens: lmms-eval's own numbers, its results.json (the mean) and each sample's `exact_match`.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from helpers import assert_one_error_line

from pipelines.samples.lmms_lab import GQA_QUESTIONS, VQAV2_SPLIT, write_gqa, write_vqav2

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "lmms_eval"
VQA_LOG, GQA_LOG = FIXTURES / "vqav2_val_vlbench.samples.jsonl", FIXTURES / "gqa_vlbench.samples.jsonl"


@pytest.fixture(scope="module")
def harness(sample_sources, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("lmms-lab")
    return {"vqa": write_vqav2(sample_sources, root / "VQAv2"), "gqa": write_gqa(sample_sources, root / "GQA")}


@pytest.fixture(scope="module")
def vqa_built(built) -> Path:
    return built("vqa-v2")


def _samples(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _lmms_number(task: str) -> float:
    """lmms-eval's own score of a task, from the results file it wrote (a fraction)."""
    return json.loads((FIXTURES / "results.json").read_text())["results"][task]["exact_match,none"]


def _evaluate(cli, tmp_path, bench, data, log, harness_data) -> dict:
    report = tmp_path / f"report-{bench}"
    code, _, err = cli("evaluate", bench, "--data", data, "--predictions", log, "--harness-data", harness_data,
                       "--bootstrap", "0", "--report", report)
    assert code == 0, err
    return json.loads((report / "metrics.json").read_text())


def test_the_fixtures_are_lmms_evals_own_logs():
    """What makes them 0.7.3 logs: no `doc`, one doc_hash for every line, the prompt in `input`."""
    for log in (VQA_LOG, GQA_LOG):
        samples = _samples(log)
        assert samples and all("doc" not in s and {"doc_id", "input", "target", "filtered_resps"} <= set(s)
                               for s in samples)
        assert len({s["doc_hash"] for s in samples}) == 1
        assert {s["filtered_resps"] for s in samples} == {"Yes"}  # a string in 0.7.3, not a list
    assert len(_samples(VQA_LOG)) == 400 and len(_samples(GQA_LOG)) == 3000


def test_vqav2_log_scores_lmms_evals_number(vqa_built, harness, cli, tmp_path):
    metrics = _evaluate(cli, tmp_path, "vqa-v2", vqa_built, VQA_LOG, harness["vqa"])
    assert metrics["input"]["format"] == "lmms-eval" and metrics["input"]["in_split"] == 400
    assert metrics["coverage"]["scored"] == 400
    # lmms-eval's mean of its 400 exact_match values, in vlbench's percent
    assert metrics["accuracy"] == pytest.approx(100 * _lmms_number("vqav2_val_vlbench"), abs=1e-9)
    assert 0 < metrics["accuracy"] < 100  # "Yes" is right on some questions only: the number says something


def test_vqav2_log_per_question_is_lmms_evals(vqa_built, harness):
    """Each question's score is the log's own `exact_match` for it: the doc_id mapping is right row
    by row (a shifted or shuffled mapping would score other questions)."""
    from core.data import load_table
    from evaluator.interop import load_submission
    from evaluator.vqa.task import VQATask

    task = VQATask()
    table = load_table(vqa_built, task.config, "validation")
    predictions, info = load_submission(task, VQA_LOG, "auto", task.ids(table), str(harness["vqa"]))
    per_sample = task.per_sample(table, [predictions[i] for i in task.ids(table)])["vqa_accuracy"]
    ours = dict(zip(task.ids(table), per_sample))
    ids = pq.read_table(harness["vqa"] / VQAV2_SPLIT, columns=["question_id"]).column(0).to_pylist()
    theirs = {ids[s["doc_id"]]: s["exact_match"] for s in _samples(VQA_LOG)}
    assert ours.keys() == theirs.keys()
    assert all(ours[i] == pytest.approx(theirs[i], abs=1e-12) for i in ours)
    assert {predictions[i] for i in ours} == {"yes"}  # "Yes" as the official evaluation expects it


def test_gqa_testdev_log_scores_lmms_evals_number_on_gqa_ood(built, harness, cli, tmp_path):
    """GQA-OOD keeps a subset of test-dev: on it, acc-all is lmms-eval's mean over the same questions."""
    metrics = _evaluate(cli, tmp_path, "gqa-ood", built("gqa-ood"), GQA_LOG, harness["gqa"])
    ids = pq.read_table(harness["gqa"] / GQA_QUESTIONS, columns=["id"]).column(0).to_pylist()
    table = pq.read_table(built("gqa-ood") / "all" / "testdev-00000-of-00001.parquet", columns=["question_id"])
    kept = set(table.column(0).to_pylist())
    theirs = [s["exact_match"] for s in _samples(GQA_LOG) if ids[s["doc_id"]] in kept]
    assert len(theirs) == len(kept) == metrics["coverage"]["scored"]
    assert metrics["input"]["outside_split"] == 3000 - len(kept)
    assert metrics["acc_all"] == pytest.approx(100 * sum(theirs) / len(theirs), abs=1e-9)
    # over the whole of test-dev, lmms-eval's own number
    assert sum(s["exact_match"] for s in _samples(GQA_LOG)) / 3000 == pytest.approx(_lmms_number("gqa_vlbench"))


def test_a_log_without_doc_needs_the_harness_data(vqa_built, cli):
    code, _, err = cli("evaluate", "vqa-v2", "--data", vqa_built, "--predictions", VQA_LOG, "--bootstrap", "0")
    assert_one_error_line(code, err, ["sample 0 (doc_id 0) has no doc field", "pass --harness-data"])


def test_a_harness_dataset_in_another_order_is_refused(vqa_built, harness, cli, tmp_path):
    """Rows in another order than the log's dataset: the first sample whose input does not hold its
    mapped question is named, and nothing is scored."""
    import pyarrow as pa

    other = tmp_path / "VQAv2"
    shutil.copytree(harness["vqa"], other)
    table = pq.read_table(other / VQAV2_SPLIT)
    pq.write_table(table.take(pa.array(list(range(1, table.num_rows)) + [0])), other / VQAV2_SPLIT)
    code, _, err = cli("evaluate", "vqa-v2", "--data", vqa_built, "--predictions", VQA_LOG, "--harness-data", other,
                       "--bootstrap", "0", "--report", tmp_path / "r")
    assert_one_error_line(code, err, ["sample 0 (doc_id 0): its input does not hold the question of row 0",
                                      "is this the dataset the log was made on?"])
    assert not (tmp_path / "r").exists()


def test_a_gqa_target_that_is_not_the_rows_answer_is_refused(built, harness, cli, tmp_path):
    samples = _samples(GQA_LOG)
    samples[5]["target"] = "not the answer"
    log = tmp_path / "gqa.samples.jsonl"
    log.write_text("".join(json.dumps(s) + "\n" for s in samples))
    code, _, err = cli("evaluate", "gqa-ood", "--data", built("gqa-ood"), "--predictions", log, "--harness-data",
                       harness["gqa"], "--bootstrap", "0")
    assert_one_error_line(code, err, ["sample 5 (doc_id 5): target 'not the answer' is not row 5's answer"])


@pytest.mark.parametrize("value,needle", [("no/such/dataset/here", "no such folder"),
                                          ("./missing", "no such folder")])
def test_a_bad_harness_data_is_one_line(value, needle, vqa_built, cli):
    code, _, err = cli("evaluate", "vqa-v2", "--data", vqa_built, "--predictions", VQA_LOG, "--harness-data", value,
                       "--bootstrap", "0")
    assert_one_error_line(code, err, ["--harness-data", needle])


@pytest.mark.slow  # a generative predict over the 400 VQA v2 sample questions
def test_vlbench_predict_with_the_same_model_scores_lmms_evals_number(vqa_built, sample_sources, cli, tmp_path):
    """The same tiny LLaVA that wrote the fixtures (it answers "Yes"), run by `vlbench predict`: its
    capitalised answers, normalised as the official evaluation expects, score lmms-eval's own number."""
    from pipelines.tiny_models import write_tiny_llava_answering

    model = write_tiny_llava_answering(tmp_path / "tiny-llava-yes", "Yes")
    out = tmp_path / "p.json"
    code, _, err = cli("predict", "vqa-v2", "--data", vqa_built, "--model", f"hf:{model}", "--images",
                       sample_sources / "coco", "--out", out)
    assert code == 0, err
    assert {p["answer"] for p in json.loads(out.read_text())} == {"yes"}
    code, _, err = cli("evaluate", "vqa-v2", "--data", vqa_built, "--predictions", out, "--bootstrap", "0",
                       "--report", tmp_path / "r")
    assert code == 0, err
    metrics = json.loads((tmp_path / "r" / "metrics.json").read_text())
    assert metrics["accuracy"] == pytest.approx(100 * _lmms_number("vqav2_val_vlbench"), abs=1e-9)
