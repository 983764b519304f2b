"""The Hub's evaluation-results files, checked against the schema the Hub documentation gives
("Evaluation Results"): a built folder's eval.yaml (name, description, tasks with id, config and
split) and the .eval_results/*.yaml entries `evaluate --hub-results` writes for a model repo
(dataset.id and dataset.task_id required, dataset.revision optional, value required and numeric,
date ISO-8601, notes, and no other keys)."""

from __future__ import annotations

import datetime
import json
import re
from pathlib import Path

import pytest
import yaml

EVAL_YAML_KEYS = {"name", "description", "evaluation_framework", "tasks"}
TASK_KEYS = {"id", "config", "split"}
ENTRY_KEYS = {"dataset", "value", "verifyToken", "date", "source", "notes"}
DATASET_KEYS = {"id", "task_id", "revision"}


def check_eval_yaml(folder):
    spec = yaml.safe_load((folder / "eval.yaml").read_text())
    assert set(spec) <= EVAL_YAML_KEYS and isinstance(spec["name"], str) and isinstance(spec["description"], str)
    assert spec["tasks"] and all(set(t) == TASK_KEYS for t in spec["tasks"])
    for t in spec["tasks"]:
        assert re.fullmatch(r"[a-z0-9_]+", t["id"])
        assert list((folder / t["config"]).glob(f"{t['split']}-*.parquet")), t  # the task's data exists
    return spec


def check_entries(path, dataset_id, task_ids):
    entries = yaml.safe_load(path.read_text())
    assert isinstance(entries, list) and entries
    for e in entries:
        assert set(e) <= ENTRY_KEYS and {"dataset", "value"} <= set(e)
        assert set(e["dataset"]) <= DATASET_KEYS and e["dataset"]["id"] == dataset_id
        assert e["dataset"]["task_id"] in task_ids
        assert isinstance(e["value"], (int, float)) and not isinstance(e["value"], bool)
        datetime.date.fromisoformat(e["date"])
    return entries


@pytest.mark.slow  # two builds, predictions and evaluations end to end
@pytest.mark.parametrize("bench,model", [("gqa-ood", "baseline:random"), ("disco", "baseline:mean")])
def test_built_folder_and_model_results_follow_the_hub_schema(bench, model, built, cli, tmp_path):
    data = built(bench)
    spec = check_eval_yaml(data)
    manifest = json.loads((data / "manifest.json").read_text())
    assert "eval.yaml" in {o["path"] for o in manifest["outputs"]}  # verified and pushed like any output
    if bench == "disco":  # MAE: lower is better, not a Hub leaderboard (the Hub ranks descending)
        assert [t["id"] for t in spec["tasks"]] == ["one_minus_mape"]
        # 1 - MAPE is a fraction (Gat et al., NeurIPS 2021, Table 5; evaluator/disco/metrics.py), not a percentage
        assert "`one_minus_mape`: 1 - MAPE from 0 to 1" in spec["description"]
    else:  # acc-tail and acc-head read the tail and head questions (Kervadec et al., CVPR 2021, §3): the configs
        # the builder writes them to, so that each task is defined by its own metric's rows
        assert [(t["id"], t["config"]) for t in spec["tasks"]] == [("acc_all", "all"), ("acc_tail", "tail"),
                                                                   ("acc_head", "head")]
        assert "`acc_tail`: acc-tail in %, over config tail" in spec["description"]
    assert "No `evaluation_framework` is named" in spec["description"]
    card = (data / "README.md").read_text()  # the card says why the eval.yaml names no framework
    section = card[card.index("\n## As a Hub benchmark\n"):]
    assert "It names no `evaluation_framework`" in section and all(f"- `{t['id']}`" in section for t in spec["tasks"])
    code, _, err = cli("predict", bench, "--data", data, "--model", model, "--out", tmp_path / "p.json")
    assert code == 0, err
    code, stdout, err = cli("evaluate", bench, "--data", data, "--predictions", tmp_path / "p.json", "--report",
                            tmp_path / "r", "--hub-results", tmp_path / "model-repo", "--hub-dataset", "org/bench")
    assert code == 0, err
    metrics = json.loads((tmp_path / "r" / "metrics.json").read_text())
    path = tmp_path / "model-repo" / ".eval_results" / f"{bench.replace('-', '_')}.yaml"
    entries = check_entries(path, "org/bench", {t["id"] for t in spec["tasks"]})
    assert [e["dataset"]["task_id"] for e in entries] == [t["id"] for t in spec["tasks"]]
    first = entries[0]
    assert first["value"] == metrics[spec["tasks"][0]["id"]] and f"split {metrics['split']}" in first["notes"]
    assert first["notes"].startswith("1 - MAPE from 0 to 1; " if bench == "disco" else "acc-all in %; ")
    code, _, err = cli("verify", data)
    assert code == 0, err


def test_a_build_without_leaderboards_says_why_it_has_no_eval_yaml(built):
    data = built("vl-bias")  # CounterBias scores no higher-is-better headline metric
    assert not (data / "eval.yaml").exists()
    assert "This folder has no `eval.yaml`: vl-bias has no leaderboard metric" in (data / "README.md").read_text()


def test_hub_results_bad_usage_is_one_line(built, cli, tmp_path):
    data = built("gqa-ood")
    cli("predict", "gqa-ood", "--data", data, "--model", "baseline:random", "--out", tmp_path / "p.json")
    code, _, err = cli("evaluate", "gqa-ood", "--data", data, "--predictions", tmp_path / "p.json", "--hub-results",
                       tmp_path / "repo")
    assert code == 2 and "--hub-dataset" in err and len(err.strip().splitlines()) == 1
    code, _, err = cli("evaluate", "gqa-ood", "--data", data, "--predictions", tmp_path / "p.json", "--hub-results",
                       tmp_path / "repo", "--hub-dataset", "not a repo")
    assert code == 2 and "ORG/NAME" in err
    mine = tmp_path / "repo" / ".eval_results" / "gqa_ood.yaml"
    mine.parent.mkdir(parents=True)
    mine.write_text("- dataset: {id: me/x, task_id: y}\n  value: 1\n")
    code, _, err = cli("evaluate", "gqa-ood", "--data", data, "--predictions", tmp_path / "p.json", "--hub-results",
                       tmp_path / "repo", "--hub-dataset", "org/gqa")
    assert code == 2 and "not written by vlbench" in err and mine.read_text().startswith("- dataset: {id: me/x")


def _bibtex_entries(text: str) -> list[str]:
    block = text.split("```bibtex\n", 1)[1].split("```", 1)[0]
    entries, depth, start = [], 0, None
    for k, ch in enumerate(block):
        if ch == "@" and depth == 0:
            start = k
        depth += (ch == "{") - (ch == "}")
        assert depth >= 0
        if ch == "}" and depth == 0 and start is not None:
            entries.append(block[start:k + 1])
            start = None
    assert depth == 0 and block.strip().startswith("@")
    return entries


def test_every_card_has_the_hub_templates_sections_and_citations():
    """The Hub's dataset card template: uses and out-of-scope uses, bias / risks / limitations, and a
    citation of the benchmark's paper and of its source dataset (one entry where the benchmark is the
    source dataset itself: VCR, VL-Bias), each with title, author and year or note."""
    from builders.registry import benchmarks, get_builder

    seen = set()
    for benchmark in benchmarks():
        template = get_builder(benchmark.name).card_template
        if template in seen:
            continue
        seen.add(template)
        text = (Path(__file__).resolve().parents[1] / "data_cards" / template).read_text()
        for heading in ("## Uses", "**Direct use.**", "**Out-of-scope use.**", "## Bias, risks and limitations",
                        "## Citation"):
            assert heading in text, (benchmark.name, heading)
        entries = _bibtex_entries(text)
        assert len(entries) >= (1 if benchmark.name in ("vcr", "vl-bias") else 2), benchmark.name
        for entry in entries:
            assert re.match(r"@(inproceedings|article|misc)\{[a-z0-9]+,", entry), entry[:40]
            assert "title" in entry and "author" in entry and ("year" in entry or "note" in entry), entry[:60]
