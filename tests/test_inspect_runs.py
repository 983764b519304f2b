"""Exported tasks run in the real Inspect (inspect-ai 0.3.285; scripts/harness_env.sh installs it beside the
main venv; `make test` passes its folder as VLBENCH_INSPECT), against the demo's tiny LLaVA served by
`transformers serve` on loopback (sockets may connect to 127.0.0.1 only), greedy, through Inspect's
chat-completions provider. Every benchmark Inspect can ask (all that generate or can be asked by letter; Inspect
scores no log-likelihoods) runs with the random tiny LLaVA, whose outputs change with any change of prompt or
image: each prompt's raw output in Inspect's `.eval` log equals what `vlbench predict --model openai:` gets from
the same server, the predictions read back are the same, and the metrics Inspect computed itself (the task's
metrics call vlbench's scoring) equal `vlbench evaluate` of the log. The multiple-choice benchmarks also run with
a tiny LLaVA that answers "B", so every letter is read.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import (
    assert_one_error_line,
    benchmarks_asked,
    evaluate_json,
    push_to_copy,
    read_submission,
    run_in_terminal,
    write_row_images,
)

from evaluator.harness.logs import eval_members
from evaluator.harness.run import INCOMPLETE
from pipelines.tiny_models import write_tiny_llava, write_tiny_llava_answering

pytestmark = [pytest.mark.slow, pytest.mark.allow_hosts(["127.0.0.1"])]

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 16  # samples per task (prompts; VCR asks two per row): all of DISCO's 16 test rows
INSPECT = os.environ.get("VLBENCH_INSPECT")
LETTER_BENCHES = benchmarks_asked("letter")  # from the registry, as every list of benchmarks here
INSPECT_BENCHES = (*benchmarks_asked("generate"), *LETTER_BENCHES)  # Inspect's models score no log-likelihoods


@pytest.fixture(autouse=True)
def _no_network():
    """Overrides conftest's: sockets may be made, and connect to loopback only (the module's mark)."""
    yield

def _inspect_eval(model: Path, url: str, tasks: list[str], cwd: Path, out: Path) -> None:
    """`inspect eval` of the task files (relative to cwd: Inspect globs task paths) against a loopback
    OpenAI-compatible server, through Inspect's chat-completions provider (`openai-api/<service>/<model>`), in a
    pseudo-terminal with Inspect's live display (its default there), which scores the samples done so far as
    they come in: every exported metric must be defined on a partial set, or Inspect ends the task `error`
    (and still exits 0; `_inspect_results` checks each log's status)."""
    env = {**os.environ, "VLBENCH_BASE_URL": url, "VLBENCH_API_KEY": "none", "INSPECT_LOG_DIR": str(out),
           "PYTHONPATH": os.pathsep.join([*(f"{INSPECT}/{p}" for p in ("harness", "deps", "stubs")), str(ROOT)])}
    command = [sys.executable, "-m", "inspect_ai", "eval", *tasks, "--model", f"openai-api/vlbench/{model}",
               "--log-dir", str(out), "--limit", str(LIMIT), "--max-connections", "1"]
    code, output = run_in_terminal(command, env, cwd, timeout=900)
    assert code == 0 and len(list(out.glob("*.eval"))) == len(tasks), output[-6000:]


def _inspect_results(log: Path) -> dict:
    """The metrics Inspect itself computed, from the log's header."""
    (header,) = eval_members(log, "header.json")
    assert header["status"] == "success"
    (scores,) = header["results"]["scores"]
    return {name: value["value"] for name, value in scores["metrics"].items()}


@pytest.fixture(scope="module")
def inspect_servers(tmp_path_factory):
    """The random tiny LLaVA and the one that answers "B", each served by `transformers serve` on loopback for
    the module: {run: (model, URL)}."""
    from served_helpers import transformers_serve

    if not INSPECT:
        pytest.skip("Inspect is not set up: `make test` runs scripts/harness_env.sh inspect and passes its folder "
                    "as VLBENCH_INSPECT")
    root = tmp_path_factory.mktemp("inspect-models")
    models = {"random": write_tiny_llava(root / "llava"), "letter-b": write_tiny_llava_answering(root / "llava-b", "B")}
    with transformers_serve(models["random"], root / "random.log") as random_url, \
            transformers_serve(models["letter-b"], root / "b.log") as letter_url:
        yield {"random": (models["random"], random_url), "letter-b": (models["letter-b"], letter_url)}


@pytest.fixture(scope="module")
def inspect_runs(built, inspect_servers, tmp_path_factory):
    """Per (model, benchmark): the build, images, export meta and Inspect's .eval log."""
    from evaluator.harness.export import export_task

    root = tmp_path_factory.mktemp("inspect")
    found = {}
    for run, (model, url) in inspect_servers.items():
        benches = INSPECT_BENCHES if run == "random" else LETTER_BENCHES
        tasks = {}
        for bench in benches:
            data = built(bench)
            images = write_row_images(bench, data, root / "images" / bench)
            export_task(bench, str(data), "inspect", root / run / "tasks" / bench, split=None, template=None,
                        choice_mode="auto", images=images, videos=None, frames=8, max_new_tokens=None)
            meta = json.loads((root / run / "tasks" / bench / "vlbench_task.json").read_text())
            tasks[bench] = (data, images, meta)
        if run == "random":  # a challenge's participant: the task exported from VQA-CP's sealed public half
            from pipelines.seal import seal

            data, public, answers = built("vqa-cp"), root / "sealed" / "vqa-cp", root / "sealed" / "answers.zip"
            seal(str(data), public, answers)
            images = write_row_images("vqa-cp", data, root / "images" / "vqa-cp")
            export_task("vqa-cp", str(public), "inspect", root / run / "tasks" / "sealed", split=None, template=None,
                        choice_mode="auto", images=images, videos=None, frames=8, max_new_tokens=None)
            meta = json.loads((root / run / "tasks" / "sealed" / "vlbench_task.json").read_text())
            tasks["sealed"] = ((public, answers), images, meta)
        _inspect_eval(model, url, [f"{b}/{m['task']}.py" for b, (_, _, m) in tasks.items()], root / run / "tasks",
                      root / run / "logs")
        for bench, (data, images, meta) in tasks.items():
            logs = sorted((root / run / "logs").glob(f"*_{meta['task'].replace('_', '-')}_*.eval"))
            (log,) = [g for g in logs if _log_task_dir(g) == bench]
            found[(run, bench)] = {"data": data, "images": images, "meta": meta, "log": log, "url": url,
                                   "model": model, "results": _inspect_results(log),
                                   "task": root / run / "tasks" / bench}
    return found


def _log_task_dir(log: Path) -> str:
    """The task folder a log's task file lay in (the sealed VQA-CP task and the plain one share their name)."""
    (header,) = eval_members(log, "header.json")
    return Path(header["eval"]["task_file"]).parent.name


@pytest.mark.parametrize("run", ["random"])
def test_a_task_exported_from_a_sealed_public_half_runs_and_its_log_is_scored_with_the_answers(inspect_runs, cli,
                                                                                              run):
    """A participant's run: the task exported from VQA-CP's sealed public half holds no answer and scores nothing
    in Inspect (NaN metrics, status success, no incomplete row); its log, scored with the answer file (as the
    challenge's service does), gives the metrics of the same model's log of the task exported from the build."""
    import math

    sealed, plain = inspect_runs[(run, "sealed")], inspect_runs[(run, "vqa-cp")]
    assert sealed["meta"]["sealed"]["commitment"]
    assert all(math.isnan(v) for k, v in sealed["results"].items() if k != INCOMPLETE)
    assert sealed["results"][INCOMPLETE] == 0
    public, answers = sealed["data"]
    from_sealed, _ = read_submission("vqa-cp", public, sealed["log"])
    from_build, _ = read_submission("vqa-cp", plain["data"], plain["log"])
    assert from_sealed == from_build and len(from_sealed) == LIMIT  # the same prompts, the same raw outputs
    scored = evaluate_json(cli, "vqa-cp", public, sealed["log"], "--answers", answers)
    expected = evaluate_json(cli, "vqa-cp", plain["data"], plain["log"])
    assert {k: v for k, v in scored.items() if k != "predictions"} == \
        {k: v for k, v in expected.items() if k != "predictions"} and scored["coverage"]["scored"] == LIMIT


INSPECT_CASES = [("random", b) for b in INSPECT_BENCHES] + [("letter-b", b) for b in LETTER_BENCHES]


@pytest.mark.parametrize("run, bench", INSPECT_CASES)
def test_inspect_log_gives_vlbench_s_numbers_and_openai_s_answers(inspect_runs, cli, tmp_path, monkeypatch, run,
                                                                   bench):
    """Inspect's own metrics equal `vlbench evaluate` on its .eval log; each prompt's raw output equals what
    `vlbench predict --model openai:` gets from the same server for the same rows, and so do the predictions."""
    case = inspect_runs[(run, bench)]
    metrics = evaluate_json(cli, bench, case["data"], case["log"])
    assert metrics["coverage"]["scored"] > 0
    assert case["results"] == {**{m["key"]: metrics[m["key"]] for m in case["meta"]["metrics"]}, INCOMPLETE: 0}
    from_log, read = read_submission(bench, case["data"], case["log"])
    assert read["format"] == "inspect" and read["form"] == case["meta"]["form"]
    monkeypatch.setenv("VLBENCH_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "served.json"
    code, _, err = cli("predict", bench, "--data", case["data"], "--model", f"openai:{case['model']}",
                       "--base-url", case["url"], "--images", case["images"], "--out", out, "--limit", len(from_log),
                       "--choice-mode", "letter" if case["meta"]["form"] == "letter" else "auto", "--log-samples",
                       "--no-cache")
    assert code == 0, err
    from evaluator.harness.logs import inspect_records

    asked = {}
    for line in out.with_suffix(".samples.jsonl").read_text().splitlines():
        sample = json.loads(line)
        for k, output in enumerate(sample["outputs"] if "outputs" in sample else [sample["output"]]):
            asked[(json.dumps(sample["id"]), k)] = output
    logged = {(r["id"], r["prompt_index"]): r["output"] for r in inspect_records(case["log"])}
    assert len(logged) == LIMIT and logged == {k: v for k, v in asked.items() if k in logged}
    assert read_submission(bench, case["data"], out)[0] == from_log
    if run == "letter-b":
        assert read["answers_not_read"] == 0


def test_inspect_logs_that_are_not_the_build_s(inspect_runs, cli, tmp_path):
    """An Inspect log of another benchmark's task, or not a zip: one line, exit 2; a benchmark that is scored
    by log-likelihood only is not exported to Inspect, with the reason."""
    case = inspect_runs[("random", "gqa-ood")]
    code, _, err = cli("evaluate", "vqa-cp", "--data", inspect_runs[("random", "vqa-cp")]["data"], "--predictions",
                       case["log"])
    assert_one_error_line(code, err, ["exported gqa-ood task, not vqa-cp's"])
    junk = tmp_path / "junk.eval"
    junk.write_bytes(b"not a zip")
    code, _, err = cli("evaluate", "gqa-ood", "--data", case["data"], "--predictions", junk)
    assert_one_error_line(code, err, ["junk.eval", "not an Inspect .eval log"])


def test_leaderboard_ranks_an_inspect_log(inspect_runs, cli, tmp_path):
    """An Inspect log in a leaderboard's submissions folder is scored like any submission (DISCO: the run
    covers its whole test split), with the values `vlbench evaluate` gives it."""
    import shutil

    case = inspect_runs[("random", "disco")]
    submissions = tmp_path / "submissions"
    submissions.mkdir()
    shutil.copy(case["log"], submissions / "inspect-run.eval")
    code, _, err = cli("leaderboard", "disco", "--data", case["data"], "--submissions", submissions, "--out",
                       tmp_path / "site", "--bootstrap", "0")
    assert code == 0, err
    (row,) = json.loads((tmp_path / "site" / "leaderboard.json").read_text())["submissions"]
    metrics = evaluate_json(cli, "disco", case["data"], case["log"])
    assert row["submission"] == "inspect-run" and row["status"] == "scored", row
    assert metrics["coverage"]["missing"] == 0
    assert {k: row["values"][k]["value"] for k in ("one_minus_mape", "mae")} == \
        {k: metrics[k] for k in ("one_minus_mape", "mae")}


@pytest.mark.parametrize("run, bench", [("random", "gqa-ood"), ("letter-b", "pmr-p")])
def test_a_pushed_repo_runs_as_inspect_s_hub_task(inspect_runs, cli, monkeypatch, tmp_path, run, bench):
    """A build pushed with --inspect-task runs as `inspect eval hf/ORG/NAME/TASK` through Inspect's own loader
    (tests/inspect_hub_task.py: eval.yaml validated by its HFTask schema, the config's rows turned into Samples
    by its field_spec; only the two downloads served from the local copy of the repo): each sample shows the
    row's prompt then its image, `vlbench evaluate --data REPO` reads the log back by id, and where the proxy
    can be compared (a model that answers "B", asked by letter) Inspect's own accuracy equals vlbench's."""
    import pyarrow.parquet as pq
    import yaml

    case = inspect_runs[(run, bench)]
    repo = tmp_path / bench
    code, _, err = push_to_copy(cli, monkeypatch, case["data"], repo, "--inspect-task", case["task"])
    assert code == 0, err
    hub_task = yaml.safe_load((repo / "eval.yaml").read_text())["tasks"][-1]
    task_id = hub_task["id"]
    env = {**os.environ, "VLBENCH_BASE_URL": case["url"], "VLBENCH_API_KEY": "none",
           "PYTHONPATH": os.pathsep.join([*(f"{INSPECT}/{p}" for p in ("harness", "deps", "stubs")), str(ROOT)])}
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "inspect_hub_task.py"), str(repo), f"org/{bench}",
                           task_id, f"openai-api/vlbench/{case['model']}", str(tmp_path / "logs"), str(LIMIT)],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (log,) = (tmp_path / "logs").glob("*.eval")
    (header,) = eval_members(log, "header.json")
    assert header["eval"]["task"] == f"hf/org/{bench}/{task_id}/{task_id}"  # Inspect appends the id of one of several
    rows = {r["id"]: r for r in pq.read_table(next((repo / "inspect").glob("*.parquet"))).to_pylist()}
    samples = eval_members(log, "samples/")
    assert len(samples) == LIMIT
    for sample in samples:  # Inspect numbers a Hub task's samples itself: the `vlbench` metadata names the prompt
        row = rows[f"{sample['metadata']['vlbench']['id']}#{sample['metadata']['vlbench']['prompt_index']}"]
        (message,) = sample["input"]
        text, image = message["content"]
        shown = sample["attachments"].get(image["image"].removeprefix("attachment://"), image["image"])
        assert (text["text"], shown, sample["target"]) == (row["input"], row["image"], row["target"])
    if bench == "gqa-ood":  # acc_head's task asks the head questions only, the rows its metric reads
        from core.data import load_table
        from evaluator.harness.docs import parse_id
        from evaluator.tasks import get_task

        head = set(get_task(bench).ids(load_table(case["data"], "head", hub_task["split"])))
        assert hub_task["config"] == "inspect_head" and all(
            parse_id(s["metadata"]["vlbench"]["id"]) in head for s in samples)
    metrics = evaluate_json(cli, bench, repo, log)  # the pushed repo serves as --data
    assert metrics["coverage"]["scored"] == LIMIT and read_submission(bench, repo, log)[1]["format"] == "inspect"
    if run == "letter-b":
        assert all(s["output"]["completion"].strip() == "B" for s in samples)
        assert _inspect_results(log)["accuracy"] * 100 == pytest.approx(metrics["accuracy"])


def test_the_suite_s_report_card_over_inspect_logs(inspect_runs, cli, tmp_path):
    """`suite --predictions` over Inspect logs: DISCO's run covers its whole test split and its row holds what
    `vlbench evaluate` gives the log; GQA-OOD's run stops at LIMIT prompts, and a card scores whole splits only,
    so its row says what is missing."""
    import shutil

    data, subs = tmp_path / "data", tmp_path / "subs"
    data.mkdir()
    subs.mkdir()
    for bench in ("disco", "gqa-ood"):
        case = inspect_runs[("random", bench)]
        (data / bench).symlink_to(case["data"], target_is_directory=True)
        shutil.copy(case["log"], subs / f"{bench}.eval")
    code, _, err = cli("suite", "--model", "tiny-llava (Inspect)", "--data", data, "--out", tmp_path / "card",
                       "--predictions", subs, "--bootstrap", "0")
    assert code == 0, err
    rows = json.loads((tmp_path / "card" / "card.json").read_text())["benchmarks"]
    metrics = evaluate_json(cli, "disco", data / "disco", subs / "disco.eval")
    assert rows["disco"]["status"] == "scored" and rows["disco"]["input"]["format"] == "inspect"
    assert {k: v["value"] for k, v in rows["disco"]["headline"].items()} == {k: metrics[k] for k in
                                                                             ("one_minus_mape", "mae")}
    assert rows["gqa-ood"]["status"] == "not scored" and "have no prediction" in rows["gqa-ood"]["reason"]


@pytest.mark.parametrize("bench", INSPECT_BENCHES)
def test_inspect_scores_every_partial_run(inspect_runs, bench):
    """Inspect's live display scores the samples done so far, at moments that depend on the machine's speed (on a
    loaded 2-core machine VCR-Visor's log ended `error`): every prefix of the real log, scored by Inspect's own
    `eval_results` with the task's scorer and metrics (tests/inspect_partial_metrics.py), gives a value for
    every metric (NaN while nothing is complete) equal to `ExportedRun.metrics` of the same records, and the
    whole log gives Inspect's recorded results."""
    from evaluator.harness.logs import inspect_records
    from evaluator.harness.run import ExportedRun

    case = inspect_runs[("random", bench)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*(f"{INSPECT}/{p}" for p in ("harness", "deps", "stubs")),
                                                        str(ROOT)])}
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "inspect_partial_metrics.py"), str(case["task"]),
                           str(case["log"])], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    prefixes = [json.loads(line) for line in done.stdout.splitlines()]
    records = inspect_records(case["log"])
    assert len(prefixes) == len(records) + 1 == LIMIT + 1
    run = ExportedRun(case["task"])
    assert set(prefixes[0].values()) == {None}  # no sample: Inspect itself reports NaN without asking the metric
    for k, values in enumerate(prefixes[1:], start=1):
        expected = run.metrics(records[:k])
        assert values == {key: None if v != v else v for key, v in expected.items()}, k
    assert prefixes[-1] == case["results"]
