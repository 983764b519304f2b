"""`vlbench push BUILD --inspect-task TASK`: the pushed repo as a Hub benchmark for the inspect-ai framework
(evaluator/harness/hub.py), pushed into a local copy of the repo (helpers.HubRepoCopy). The schema golden is
Inspect's own (inspect_ai 0.3.285, inspect_ai/_eval/task/hf.py: `HFTask` forbids extra keys; its solver and
scorer names are literals); tests/test_inspect_runs.py runs such a repo through Inspect's real loader. Also the
`source` of `.eval_results` entries (`evaluate --hub-source`)."""

from __future__ import annotations

import base64
import json
import shutil

import pytest
import yaml
from helpers import assert_one_error_line, push_to_copy, write_row_images

HF_TASK_KEYS = {"id", "config", "split", "field_spec", "shuffle_choices", "epochs", "epoch_reducer", "solvers",
                "scorers"}
FIELD_SPEC_KEYS = {"input", "target", "choices", "id", "metadata", "sandbox", "files", "setup", "description",
                   "input_image"}
HF_SOLVERS = {"prompt_template", "system_message", "user_message", "chain_of_thought", "use_tools", "generate",
              "self_critique", "multiple_choice"}
HF_SCORERS = {"includes", "match", "pattern", "answer", "exact", "f1", "model_graded_qa", "model_graded_fact",
              "choice", "math"}


@pytest.fixture(scope="module")
def exported(built, tmp_path_factory):
    """export(bench, harness): an exported task folder of the sample build, with row images."""
    from evaluator.harness.export import export_task

    root, done = tmp_path_factory.mktemp("hub-tasks"), {}

    def export(bench: str, harness: str = "inspect"):
        if (bench, harness) not in done:
            images = write_row_images(bench, built(bench), root / "images" / bench)
            out = root / harness / bench
            export_task(bench, str(built(bench)), harness, out, split=None, template=None, choice_mode="auto",
                        images=images, videos=None, frames=8, max_new_tokens=None)
            done[(bench, harness)] = (out, images)
        return done[(bench, harness)]

    return export


@pytest.mark.parametrize("bench", ["gqa-ood", "pmr-p", "vcr", "disco"])
def test_a_pushed_repo_is_a_hub_benchmark_inspect_reads(bench, built, exported, cli, monkeypatch, tmp_path):
    import datasets
    import pyarrow.parquet as pq

    from core.data import load_table
    from evaluator.harness.docs import parse_id
    from evaluator.harness.hub import layer_config
    from evaluator.publish.hub_results import hub_tasks
    from evaluator.tasks import get_task
    from pipelines.verify import verify

    task_dir, images = exported(bench)
    repo = tmp_path / "repo"
    code, _, err = push_to_copy(cli, monkeypatch, built(bench), repo, "--inspect-task", task_dir)
    assert code == 0, err
    spec = yaml.safe_load((repo / "eval.yaml").read_text())
    assert spec["evaluation_framework"] == "inspect-ai" and set(spec) == {"name", "description",
                                                                         "evaluation_framework", "tasks"}
    meta = json.loads((task_dir / "vlbench_task.json").read_text())
    assert [t["id"] for t in spec["tasks"]] == [tid for tid, _ in hub_tasks(bench)]
    task = get_task(bench)
    for t, (_, headline) in zip(spec["tasks"], hub_tasks(bench)):
        assert set(t) <= HF_TASK_KEYS and set(t["field_spec"]) <= FIELD_SPEC_KEYS
        assert {s["name"] for s in t["solvers"]} <= HF_SOLVERS and {s["name"] for s in t["scorers"]} <= HF_SCORERS
        assert (t["config"], t["split"]) == (layer_config(headline.config), meta["split"])
        # each task's metric and scale in words (HFTask has no metric field): VisDial's MRR, DISCO's 1 - MAPE
        # are fractions (evaluator/visdial/metrics.py, evaluator/disco/metrics.py), the rest in %
        assert f"`{t['id']}`: {headline.label} {headline.scale_words}, over config {t['config']}" in \
            spec["description"]
    assert "fraction from 0 to 1" in spec["description"]  # Inspect's proxy accuracy, not vlbench's scale
    if bench == "gqa-ood":  # acc-tail and acc-head read the tail and head questions only (Kervadec et al.,
        # CVPR 2021, §3): three definitions, not one
        assert [t["config"] for t in spec["tasks"]] == ["inspect", "inspect_tail", "inspect_head"]
    if bench == "disco":
        assert "1 - MAPE from 0 to 1" in spec["description"]
    assert "&id" not in (repo / "eval.yaml").read_text()  # no YAML anchors: each task spelled out
    card = (repo / "README.md").read_text()
    assert "## Running it in Inspect" in card and "## As a Hub benchmark" not in card  # the plain section replaced

    # the config as `datasets` reads the repo (the card's `configs`), row by row against the documents and build
    rows = datasets.load_dataset(str(repo), name="inspect", split=meta["split"]).to_list()
    docs = pq.read_table(task_dir / "docs" / f"{meta['split']}.parquet").to_pylist()
    assert len(rows) == len(docs) == meta["documents"]
    table = load_table(built(bench), task.config, meta["split"])
    by_id = dict(zip(task.ids(table), table.to_pylist()))
    for row, doc in zip(rows, docs):
        assert row["id"] == f"{doc['vlbench_id']}#{doc['prompt_index']}" and row["input"] == doc["prompt"]
        head, data = row["image"].split(",", 1)
        assert head.startswith("data:image/") and base64.b64decode(data) == doc["images"][0]["bytes"]
        assert row["vlbench"] == {"benchmark": bench, "build": meta["manifest_sha256"][:16], "split": meta["split"],
                                  "form": meta["form"], "id": doc["vlbench_id"], "prompt_index": doc["prompt_index"],
                                  "prompts": doc["prompts"]}
        source = by_id[json.loads(doc["vlbench_id"])]
        expected = {"gqa-ood": lambda: source["answer"], "disco": lambda: str(int(source["count"] + 0.5)),
                    "pmr-p": lambda: "ABCD"[source["label"]],
                    "vcr": lambda: "ABCD"[source["answer_label" if doc["prompt_index"] == 0 else "rationale_label"]]}
        assert row["target"] == expected[bench]()
    for t in spec["tasks"]:  # a subset task's rows: the prompts of exactly its config's rows, in the same order
        if t["config"] != "inspect":
            subset = datasets.load_dataset(str(repo), name=t["config"], split=meta["split"]).to_list()
            wanted = set(task.ids(load_table(built(bench), t["config"].removeprefix("inspect_"), meta["split"])))
            assert subset and subset == [r for r in rows if parse_id(r["vlbench"]["id"]) in wanted]
            assert len(subset) < len(rows)

    report = verify(repo)  # the build's files against its manifest, the layer against its record
    assert report.problems == [] and any("Inspect layer" in c for c in report.checked)
    shard = next((repo / "inspect").glob("*.parquet"))
    shard.write_bytes(shard.read_bytes()[:-1] + b"\0")
    (repo / "eval.yaml").write_text((repo / "eval.yaml").read_text().replace("generate", "chain_of_thought"))
    problems = verify(repo).problems
    assert any(p.startswith(f"inspect/{shard.name}") for p in problems) and any(p.startswith("eval.yaml") for p
                                                                                 in problems), problems


def test_push_refuses_a_task_that_is_not_this_build_s_inspect_task(built, exported, cli, monkeypatch, tmp_path):
    lmms, _ = exported("pmr-p", "lmms-eval")
    code, _, err = push_to_copy(cli, monkeypatch, built("pmr-p"), tmp_path / "a", "--inspect-task", lmms)
    assert_one_error_line(code, err, ("--inspect-task", "lmms-eval task"))
    other, _ = exported("gqa-ood")
    code, _, err = push_to_copy(cli, monkeypatch, built("pmr-p"), tmp_path / "b", "--inspect-task", other)
    assert_one_error_line(code, err, ("--inspect-task", "exported from the build"))
    edited = tmp_path / "edited"
    shutil.copytree(exported("pmr-p")[0], edited)
    doc = next((edited / "docs").glob("*.parquet"))
    doc.write_bytes(doc.read_bytes() + b"\0")
    code, _, err = push_to_copy(cli, monkeypatch, built("pmr-p"), tmp_path / "c", "--inspect-task", edited)
    assert_one_error_line(code, err, ("--inspect-task", "differs from what export-task wrote"))
    code, _, err = push_to_copy(cli, monkeypatch, built("pmr-p"), tmp_path / "d", "--inspect-task", tmp_path)
    assert_one_error_line(code, err, ("--inspect-task", "not a task folder"))
    assert not [p for name in "abcd" for p in (tmp_path / name).rglob("*")]  # nothing was committed


def test_hub_results_entries_name_their_source(built, cli, tmp_path):
    data = built("gqa-ood")
    cli("predict", "gqa-ood", "--data", data, "--model", "baseline:random", "--out", tmp_path / "p.json")
    url = "https://huggingface.co/datasets/org/gqa-ood-runs/blob/main/report.md"
    code, _, err = cli("evaluate", "gqa-ood", "--data", data, "--predictions", tmp_path / "p.json", "--bootstrap",
                       "0", "--hub-results", tmp_path / "repo", "--hub-dataset", "org/gqa-ood", "--hub-source", url)
    assert code == 0, err
    entries = yaml.safe_load((tmp_path / "repo" / ".eval_results" / "gqa_ood.yaml").read_text())
    assert entries and all(e["source"] == {"url": url, "name": "vlbench evaluate"} for e in entries)
    for bad in ("http://example.com/r", "https://a b", "javascript:alert(1)", "https://x\n- dataset: y"):
        code, _, err = cli("evaluate", "gqa-ood", "--data", data, "--predictions", tmp_path / "p.json",
                           "--hub-results", tmp_path / "repo2", "--hub-dataset", "org/gqa-ood", "--hub-source", bad)
        assert_one_error_line(code, err, ("--hub-source",))
    code, _, err = cli("evaluate", "gqa-ood", "--data", data, "--predictions", tmp_path / "p.json", "--hub-source",
                       url)
    assert_one_error_line(code, err, ("--hub-source", "--hub-results"))
    assert not (tmp_path / "repo2").exists()
