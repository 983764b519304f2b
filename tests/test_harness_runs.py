"""Exported tasks run in the real lmms-eval 0.7.3 (scripts/harness_env.sh installs it beside the main venv;
`make test` passes its folder as VLBENCH_LMMS_EVAL), with the demo's tiny LLaVA through lmms-eval's own
`llava_hf`, greedy. Every exportable benchmark runs; its `--log_samples` log, read back by `vlbench evaluate`,
gives the metrics the harness printed in its results, and for the forms where lmms-eval's model computes what
vlbench's does (generated answers and letters), the answers and metrics `vlbench predict` + `evaluate` give on
the same model and rows.

Four lmms-eval runs, one per model: the random tiny LLaVA on every benchmark that generates (short answers,
counts, and multiple choice asked by letter, the export's default for lmms-eval), whose outputs change with
any change of prompt, image or decoding, so equal raw outputs prove the same input; a tiny LLaVA whose greedy
answer is "Yes" (short-answer and counting benchmarks: metrics that are not all zero), one whose answer is "B"
(multiple choice by letter: every letter read), and lmms-eval's own `dummy` model for log-likelihood multiple
choice (VisDial, Social-IQ, VCR-Visor with --choice-mode loglik): lmms-eval 0.7.3's transformers classes
cannot score image prompts here (llava_hf's `loglikelihood` fails under transformers 5, its chat class
generates only; see docs/guides/harnesses.md), so that run proves the task, its multiple-choice requests and
its log, with a model that scores every option 0.0 (ties, which vlbench counts as it always does). lmms-eval's
`--limit` keeps each run small; `vlbench predict --limit` asks the same first rows.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import assert_one_error_line, benchmarks_asked, evaluate_json, read_submission, write_row_images

from pipelines.tiny_models import write_tiny_llava, write_tiny_llava_answering

pytestmark = pytest.mark.slow

LMMS_EVAL = os.environ.get("VLBENCH_LMMS_EVAL")
ROOT = Path(__file__).resolve().parents[1]
LIMIT = 12  # documents per task (prompts; VCR asks two per row)
GENERATING, BY_LETTER, LOGLIK_ONLY = (benchmarks_asked(form) for form in ("generate", "letter", "loglik-only"))

# (model, --choice-mode) per run, from the registry: every benchmark with an Ask is in one of them. Those that
# generate (an open answer) and those asked by letter run on a random tiny LLaVA; the first also on one that says
# "Yes", the second on one that says "B"; those that can only be scored by log-likelihood (and one that can be
# asked by letter, to compare) on lmms-eval's dummy model.
RUNS = {
    "random": ((*GENERATING, *BY_LETTER), "auto"),
    "yes": (GENERATING, "auto"),
    "letter-b": (BY_LETTER, "auto"),
    "dummy": ((*LOGLIK_ONLY, BY_LETTER[0]), "loglik"),
}


def _lmms_eval(model: Path | None, tasks: list[str], include: Path, out: Path, home: Path) -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
           "HF_DATASETS_CACHE": str(home / "datasets"), "HF_HOME": str(home),
           "PYTHONPATH": os.pathsep.join([*(f"{LMMS_EVAL}/{p}" for p in ("harness", "deps", "stubs")), str(ROOT)])}
    chosen = ["--model", "dummy"] if model is None else \
        ["--model", "llava_hf", "--model_args", f"pretrained={model},device_map=cpu"]
    command = [sys.executable, "-m", "lmms_eval", *chosen, "--tasks", ",".join(tasks), "--include_path", str(include),
               "--batch_size", "1", "--limit", str(LIMIT), "--log_samples", "--output_path", str(out),
               "--device", "cpu"]
    done = subprocess.run(command, env=env, cwd=home, capture_output=True, text=True, timeout=900)
    # lmms-eval exits 0 after some failures (a task it cannot load): its results file is the proof it ran
    assert done.returncode == 0 and list(out.rglob("*_results.json")), done.stdout[-3000:] + done.stderr[-3000:]


@pytest.fixture(scope="module")
def runs(built, tmp_path_factory):
    """Per (run, benchmark): the build, its images, the exported task's meta, its log and lmms-eval's results."""
    from evaluator.harness.export import export_task

    if not LMMS_EVAL:
        pytest.skip("lmms-eval is not set up: `make test` runs scripts/harness_env.sh lmms-eval and passes its folder "
                    "as VLBENCH_LMMS_EVAL")
    root = tmp_path_factory.mktemp("harness")
    models = {"random": write_tiny_llava(root / "llava"), "yes": write_tiny_llava_answering(root / "llava-yes", "Yes"),
              "letter-b": write_tiny_llava_answering(root / "llava-b", "B"),
              "dummy": None}
    found = {}
    for run, (benches, mode) in RUNS.items():
        include = root / run / "tasks"
        metas = {}
        for bench in benches:
            data = built(bench)
            images = write_row_images(bench, data, root / "images" / bench)
            out = include / bench
            export_task(bench, str(data), "lmms-eval", out, split=None, template=None, choice_mode=mode,
                        images=images, videos=None, frames=8, max_new_tokens=None)
            metas[bench] = (data, images, json.loads((out / "vlbench_task.json").read_text()))
        _lmms_eval(models[run], [m["task"] for _, _, m in metas.values()], include, root / run / "logs", root / run)
        (results_file,) = (root / run / "logs").rglob("*_results.json")
        results = json.loads(results_file.read_text())["results"]
        for bench, (data, images, meta) in metas.items():
            (log,) = (root / run / "logs").rglob(f"*_samples_{meta['task']}.jsonl")
            found[(run, bench)] = {"data": data, "images": images, "meta": meta, "log": log,
                                   "results": results[meta["task"]], "model": models[run]}
    return found


CASES = [(run, bench) for run, (benches, _) in RUNS.items() for bench in benches]


@pytest.mark.parametrize("run, bench", CASES)
def test_log_read_back_gives_the_harness_aggregate(runs, cli, run, bench):
    """The harness's own aggregate (lmms-eval's results file) equals `vlbench evaluate` on its log."""
    case = runs[(run, bench)]
    metrics = evaluate_json(cli, bench, case["data"], case["log"])
    assert metrics["coverage"]["scored"] > 0
    for metric in case["meta"]["metrics"]:
        assert case["results"][f"{metric['key']},none"] == pytest.approx(metrics[metric["key"]], abs=0), metric


@pytest.mark.parametrize("run, bench", [c for c in CASES if c[0] != "dummy"])
def test_same_answers_and_metrics_as_vlbench_predict(runs, cli, tmp_path, run, bench):
    """Generated answers and letters: the log's predictions are those `vlbench predict` makes on the same rows
    with the same model (identical), and so are the metrics."""
    case = runs[(run, bench)]
    from_log, read = read_submission(bench, case["data"], case["log"])
    out = tmp_path / "predictions.json"
    code, _, err = cli("predict", bench, "--data", case["data"], "--model", f"hf:{case['model']}", "--images",
                       case["images"], "--out", out, "--limit", len(from_log), "--choice-mode",
                       "letter" if case["meta"]["form"] == "letter" else "auto", "--log-samples")
    assert code == 0, err
    # each prompt's text and raw output (lmms-eval strips a generated output before scoring it)
    asked = {}
    for line in out.with_suffix(".samples.jsonl").read_text().splitlines():
        sample = json.loads(line)
        prompts, outputs = (sample["prompts"], sample["outputs"]) if "prompts" in sample else \
            ([sample["prompt"]], [sample["output"]])
        for k, (prompt, output) in enumerate(zip(prompts, outputs)):
            asked[(json.dumps(sample["id"]), k)] = (prompt, output.strip())
    logged = {}
    for line in case["log"].read_text().splitlines():
        sample = json.loads(line)
        record = next(v["vlbench"] for v in sample.values() if isinstance(v, dict) and "vlbench" in v)
        logged[(record["id"], record["prompt_index"])] = (sample["input"], record["output"])
    assert logged == {k: v for k, v in asked.items() if k in logged} and len(logged) == LIMIT
    assert read_submission(bench, case["data"], out)[0] == from_log
    ours, theirs = evaluate_json(cli, bench, case["data"], out), evaluate_json(cli, bench, case["data"], case["log"])
    drop = ("predictions", "input", "prediction_record")
    assert {k: v for k, v in ours.items() if k not in drop} == {k: v for k, v in theirs.items() if k not in drop}
    if run == "letter-b":  # the model names option B of every prompt: every letter was read
        assert read["answers_not_read"] == 0 and read["rows_with_a_prompt_missing"] == 0


def test_logs_that_are_not_the_build_s(runs, cli, sample_sources, tmp_path):
    """A log of another task, of a build with another manifest, or with ids that are not the build's: one
    line each, exit 2."""
    from builders.registry import get_benchmark
    from pipelines.build import run_build

    case = runs[("yes", "gqa-ood")]
    code, _, err = cli("evaluate", "vqa-cp", "--data", runs[("yes", "vqa-cp")]["data"], "--predictions", case["log"])
    assert_one_error_line(code, err, ["exported gqa-ood task, not vqa-cp's"])
    other = tmp_path / "gqa-ood-again"
    run_build("gqa-ood", sample_sources, other, assignments=get_benchmark("gqa-ood").demo_params)
    code, _, err = cli("evaluate", "gqa-ood", "--data", other, "--predictions", case["log"], "--allow-partial")
    assert_one_error_line(code, err, ["manifest SHA-256", "not on --data's"])
    lines = case["log"].read_text().splitlines()
    sample = json.loads(lines[3])
    for value in sample.values():
        if isinstance(value, dict) and "vlbench" in value:
            value["vlbench"]["id"] = json.dumps("not-a-question")
    edited = tmp_path / "samples_edited.jsonl"
    edited.write_text("\n".join([*lines[:3], json.dumps(sample), *lines[4:]]) + "\n")
    code, _, err = cli("evaluate", "gqa-ood", "--data", case["data"], "--predictions", edited, "--allow-partial")
    assert_one_error_line(code, err, ["sample 3", "not-a-question", "is not a prompt of the testdev split"])
