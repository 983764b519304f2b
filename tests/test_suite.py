"""`vlbench suite`: one model over every built benchmark, one report card, resumable.

The card's numbers are checked against `vlbench evaluate` run on its own on the same prediction files;
the diagnostics against hand computations from those metrics (their formulas in
evaluator/suite/diagnostics.py's docstring).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from helpers import assert_one_error_line, disk_full_at, launch_chromium, response_cache_rows

from builders.registry import benchmarks


@pytest.fixture(scope="module")
def demo_builds(built, tmp_path_factory) -> Path:
    """A folder of every registered benchmark's sample build, as `make demo` lays them out."""
    root = tmp_path_factory.mktemp("suite-data")
    for entry in benchmarks():
        (root / entry.name).symlink_to(built(entry.name), target_is_directory=True)
    return root


def assert_figures_exist(*pages: Path) -> None:
    """Every image a page references (Markdown `![..](x)` or HTML `src="x"`) is a PNG beside it."""
    import re

    for page in pages:
        refs = re.findall(r"!\[[^\]]*\]\(([^)]+)\)|<img src=\"([^\"]+)\"", page.read_text())
        refs = [a or b for a, b in refs]
        assert refs, f"{page}: no figure"
        for ref in refs:
            assert (page.parent / ref).read_bytes()[:4] == b"\x89PNG", f"{page}: {ref} missing"


def _card(out: Path) -> dict:
    return json.loads((out / "card.json").read_text())


@pytest.mark.slow  # every benchmark predicted and scored, twice
def test_the_card_holds_what_evaluate_says_and_a_rerun_reuses_it(cli, demo_builds, tmp_path):
    out = tmp_path / "card"
    code, stdout, err = cli("suite", "--model", "baseline:random", "--data", demo_builds, "--out", out,
                            "--bootstrap", "200")
    assert code == 0, err
    card = _card(out)
    scored = {b for b, r in card["benchmarks"].items() if r["status"] == "scored"}
    # baseline:random is on the menu of these benchmarks, and only these (their Tasks declare it)
    assert scored == {"gqa-ood", "vcr-visor", "vcr", "cosim-q", "cosim-c", "pmr-p", "visdial"}
    for bench in ("vqa-v2", "vqa-cp", "socialiq", "disco"):
        assert card["benchmarks"][bench]["status"] == "not scored"
        assert "predictions come from" in card["benchmarks"][bench]["reason"]
    assert "vl-bias" not in card["benchmarks"]  # no task: measured by `vlbench counterbias`
    # every headline value and interval is `vlbench evaluate`'s on the same file
    for bench in scored:
        code, _, err = cli("evaluate", bench, "--data", demo_builds / bench, "--predictions",
                           out / "predictions" / f"{bench}.json", "--bootstrap", "200", "--report", tmp_path / bench)
        assert code == 0, err
        alone = json.loads((tmp_path / bench / "metrics.json").read_text())
        for key, entry in card["benchmarks"][bench]["headline"].items():
            assert entry["value"] == alone[key]
            assert entry["interval"] == alone["intervals"]["metrics"].get(key)
    # diagnostics: GQA-OOD's from its metrics; VCR vs VCR-Visor: the difference, normal approximation
    by_name = {d["name"]: d for d in card["diagnostics"]}
    gqa = json.loads((out / "reports" / "gqa-ood" / "metrics.json").read_text())
    values = by_name["GQA-OOD: tail vs head"]["values"]
    assert values["delta_tail_head"]["value"] == gqa["delta_tail_head"]
    assert values["delta_tail_head"]["interval"] == gqa["intervals"]["metrics"]["delta_tail_head"]
    vcr = json.loads((out / "reports" / "vcr" / "metrics.json").read_text())
    visor = json.loads((out / "reports" / "vcr-visor" / "metrics.json").read_text())
    gap = by_name["VCR vs VCR-Visor: single vs paired questions"]["values"]["gap"]
    (a_lo, a_hi), (b_lo, b_hi) = vcr["intervals"]["metrics"]["q_a"], visor["intervals"]["metrics"]["apq"]
    se = (((a_hi - a_lo) / 3.919928) ** 2 + ((b_hi - b_lo) / 3.919928) ** 2) ** 0.5
    assert gap["value"] == pytest.approx(vcr["q_a"] - visor["apq"], abs=1e-4)
    assert gap["interval"] == pytest.approx([gap["value"] - 1.959964 * se, gap["value"] + 1.959964 * se], abs=1e-3)
    assert any("VQA v2 vs VQA-CP" in m for m in card["missing_diagnostics"])
    report = (out / "report.md").read_text()
    assert "| gqa-ood | testdev | acc-all |" in report and "## Diagnostics" in report and "## Not scored" in report
    # a rerun keeps every prediction file (its key and checksum hold) and writes the same card
    before = {p.name: p.read_bytes() for p in (out / "predictions").iterdir()}
    code, stdout, err = cli("suite", "--model", "baseline:random", "--data", demo_builds, "--out", out,
                            "--bootstrap", "200")
    assert code == 0, err
    assert stdout.count("(kept predictions)") == len(scored)
    assert {p.name: p.read_bytes() for p in (out / "predictions").iterdir()} == before
    again = _card(out)
    assert all(again["benchmarks"][b]["reused"] for b in scored)
    assert {b: r.get("headline") for b, r in again["benchmarks"].items()} == \
        {b: r.get("headline") for b, r in card["benchmarks"].items()}


def test_a_changed_prediction_file_or_option_is_predicted_again(cli, built, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "vcr").symlink_to(built("vcr"), target_is_directory=True)
    out = tmp_path / "card"
    args = ("suite", "--model", "baseline:random", "--data", data, "--out", out, "--bootstrap", "0")
    assert cli(*args)[0] == 0
    kept = out / "predictions" / "vcr.json"
    kept.write_text(kept.read_text().replace("[", "[ ", 1))  # edited by hand: not reused
    code, stdout, _ = cli(*args)
    assert code == 0 and "(kept predictions)" not in stdout
    code, stdout, _ = cli(*args)
    assert "(kept predictions)" in stdout
    code, stdout, _ = cli(*args[:-2], "--seed", "3", "--bootstrap", "0")  # another seed: another random baseline
    assert "(kept predictions)" not in stdout


def test_only_the_named_benchmarks_and_the_missing_ones_are_listed(cli, built, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "vcr").symlink_to(built("vcr"), target_is_directory=True)
    (data / "broken").mkdir()
    (data / "broken" / "manifest.json").write_text("{not json")
    out = tmp_path / "card"
    code, _, err = cli("suite", "--model", "baseline:random", "--data", data, "--out", out, "--bootstrap", "0",
                       "--benchmarks", "vcr,vcr-visor")
    assert code == 0, err
    rows = _card(out)["benchmarks"]
    assert rows["vcr"]["status"] == "scored" and rows["vcr-visor"]["status"] == "not built"
    assert "vlbench build vcr-visor" in rows["vcr-visor"]["reason"]
    assert rows["broken/"]["status"] == "damaged build" and "corrupt manifest" in rows["broken/"]["reason"]
    assert "gqa-ood" not in rows


def test_a_folder_holding_another_benchmarks_build_is_listed_not_used(cli, built, tmp_path):
    """data/vcr holding a VQA v2 build, and a manifest whose benchmark is not a name: listed as damaged
    builds with their reason, never scored as what they are not, never a traceback."""
    import json

    data = tmp_path / "data"
    data.mkdir()
    shutil.copytree(built("vqa-v2"), data / "vcr")
    shutil.copytree(built("vqa-v2"), data / "odd")
    manifest = json.loads((data / "odd" / "manifest.json").read_text())
    (data / "odd" / "manifest.json").write_text(json.dumps({**manifest, "benchmark": ["vcr"]}))
    code, _, err = cli("suite", "--model", "baseline:random", "--data", data, "--out", tmp_path / "card",
                       "--bootstrap", "0")
    assert code == 0, err
    rows = _card(tmp_path / "card")["benchmarks"]
    assert rows["vcr/"]["status"] == "damaged build" and "holds a build of vqa-v2" in rows["vcr/"]["reason"]
    assert rows["odd/"]["status"] == "damaged build" and "is not one vlbench knows" in rows["odd/"]["reason"]
    assert rows["vcr"]["status"] == "not built"


@pytest.mark.parametrize("case,needle", [
    ("out-not-a-suite", "not written by `vlbench suite`"), ("no-builds", "holds no built benchmark"),
    ("unknown-benchmark", "--benchmarks nope"), ("out-is-a-build", "--data build"),
    ("no-benchmark-named", "names no benchmark"),
    *((f"hub-org:{org}", "not a Hub organisation name") for org in ("../etc", "a/b", "<b>x</b>", "-rf", "a..b")),
])
def test_bad_suite_usage_is_one_line(case, needle, cli, built, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    out = tmp_path / "card"
    extra = ()
    if case != "no-builds":
        shutil.copytree(built("vcr"), data / "vcr")
    if case == "out-not-a-suite":
        out.mkdir()
        (out / "mine.txt").write_text("keep")
    if case == "unknown-benchmark":
        extra = ("--benchmarks", "nope")
    if case == "no-benchmark-named":
        extra = ("--benchmarks", " , ")
    if case.startswith("hub-org:"):  # written into .eval_results as a repo id: a path or markup is refused
        extra = ("--hub-org", case.partition(":")[2], "--hub-results", tmp_path / "model-repo")
    if case == "out-is-a-build":
        out = data / "vcr"
    code, _, err = cli("suite", "--model", "baseline:random", "--data", data, "--out", out, *extra)
    assert_one_error_line(code, err, (needle,))
    if case == "out-not-a-suite":
        assert sorted(p.name for p in out.iterdir()) == ["mine.txt"]
    if case.startswith("hub-org:") or case == "no-benchmark-named":
        assert not out.exists() and not (tmp_path / "model-repo").exists()


def _wait_for(condition, process, seconds: float) -> None:
    """Poll every 10 ms, at most `seconds`, until `condition()` holds or the process ends."""
    import time

    for _ in range(int(seconds * 100)):
        if condition() or process.poll() is not None:
            return
        time.sleep(0.01)


@pytest.mark.slow  # a suite process killed half-way, then resumed
def test_a_killed_suite_resumes_with_what_it_finished(demo_builds, tmp_path):
    """SIGKILL once two benchmarks are done: the rerun keeps their predictions (their key files were
    written after the predictions), predicts the rest, and writes the card a clean run writes."""
    import os
    import signal
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}
    args = [sys.executable, "-m", "pipelines.cli", "suite", "--model", "baseline:random", "--data", str(demo_builds),
            "--bootstrap", "3000"]
    out = tmp_path / "card"
    run = subprocess.Popen([*args, "--out", str(out)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    keys = out / "predictions"
    _wait_for(lambda: len(list(keys.glob("*.key.json"))) >= 2 if keys.is_dir() else False, run, 120)
    run.send_signal(signal.SIGKILL)
    run.wait(timeout=30)
    assert run.returncode == -signal.SIGKILL and not (out / "card.json").exists(), "killed too late"
    done_before = sorted(p.name.split(".")[0] for p in keys.glob("*.key.json"))
    assert 2 <= len(done_before) < 7
    resumed = subprocess.run([*args, "--out", str(out)], env=env, capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr
    kept = sorted(line.split()[0] for line in resumed.stdout.splitlines() if "(kept predictions)" in line)
    assert kept == done_before
    clean = subprocess.run([*args, "--out", str(tmp_path / "clean")], env=env, capture_output=True, text=True,
                           timeout=600)
    assert clean.returncode == 0, clean.stderr
    headline = {b: r.get("headline") for b, r in _card(out)["benchmarks"].items()}
    assert headline == {b: r.get("headline") for b, r in _card(tmp_path / "clean")["benchmarks"].items()}


def test_the_perceptual_score_of_a_model_reading_two_modalities_is_perceptuals(cli, built, tmp_path):
    """A model that reads Social-IQ's video and answer: the card's P/Z_D per modality, with intervals,
    are `vlbench perceptual`'s on the same rows; a rerun keeps them."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "socialiq").symlink_to(built("socialiq"), target_is_directory=True)
    out = tmp_path / "card"
    args = ("suite", "--model", "py:perceptual_models:SentimentAndVideo", "--data", data, "--out", out, "--bootstrap",
            "100")
    code, _, err = cli(*args)
    assert code == 0, err
    card = _card(out)
    assert card["benchmarks"]["socialiq"]["perceptual"] == "scored"
    (diagnostic,) = [d for d in card["diagnostics"] if d["name"] == "socialiq: perceptual score (P/Z_D)"]
    code, _, err = cli("perceptual", "socialiq", "--data", data / "socialiq", "--model",
                       "py:perceptual_models:SentimentAndVideo", "--bootstrap", "100", "--report", tmp_path / "alone")
    assert code == 0, err
    alone = json.loads((tmp_path / "alone" / "metrics.json").read_text())
    for modality in ("video", "question", "answer"):
        entry = diagnostic["values"][f"accuracy: {modality}"]
        assert entry["value"] == alone["all"]["accuracy"]["modalities"][modality]["p_zd"]["mean"]
        assert entry["interval"] == alone["intervals"]["metrics"][f"all.accuracy.modalities.{modality}.p_zd.mean"]
    assert diagnostic["reading"].startswith("the model relies most on the answer")
    key = (out / "perceptual" / "socialiq.key.json").read_bytes()
    code, _, err = cli(*args)
    assert code == 0, err
    assert (out / "perceptual" / "socialiq.key.json").read_bytes() == key
    assert _card(out)["diagnostics"] == card["diagnostics"]
    code, _, err = cli(*args[:-1], "50")  # other resamples: other intervals, so the score is computed again
    assert code == 0, err
    assert (out / "perceptual" / "socialiq.key.json").read_bytes() != key


@pytest.mark.slow  # a real browser
def test_the_card_page_loads_sorts_and_links_in_headless_chromium(cli, demo_builds, tmp_path):
    from test_leaderboard import CHROMIUM

    if not CHROMIUM.exists():
        pytest.skip("Debian's chromium is not installed (`make test` installs it: apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    out = tmp_path / "card"
    code, _, err = cli("suite", "--model", "baseline:random", "--data", demo_builds, "--out", out, "--bootstrap", "100",
                       "--benchmarks", "gqa-ood,vcr,vcr-visor,visdial")
    assert code == 0, err
    requests = []
    with sync_playwright() as p:
        browser = launch_chromium(p, CHROMIUM)
        page = browser.new_page(viewport={"width": 1200, "height": 800})
        page.on("request", lambda r: requests.append(r.url))
        page.goto((out / "index.html").as_uri())
        assert page.title() == "Report card: baseline:random"
        values = lambda: [float(v) for v in page.locator("#card tbody td:nth-child(4)").evaluate_all(  # noqa: E731
            "cells => cells.map(c => c.dataset.value)") if v]
        page.locator("#card th", has_text="Value").click()
        assert values() == sorted(values(), reverse=True)
        assert "VCR vs VCR-Visor" in page.locator("section.diagnostic").all_inner_texts()[1]
        # the figures (a diagnostic's intervals, each family's headline metrics) load, on the page as in report.md
        figures = page.locator("img")
        sources = figures.evaluate_all("imgs => imgs.map(i => i.getAttribute('src'))")
        assert {"figures/diagnostic-1-acc-tail-over-alpha.png",
                "figures/diagnostic-2-vcr-vs-vcr-visor-single-vs-paired-questions.png",
                "figures/family-vcr-and-the-paired-benchmarks.png"} <= set(sources)
        assert all(page.evaluate("img => img.naturalWidth", figures.nth(k).element_handle()) > 0
                   for k in range(figures.count()))
        page.screenshot(path=str(tmp_path / "card.png"), full_page=True)
        page.locator("#card tbody a", has_text="vcr-visor").first.click()
        assert page.title() == "vcr-visor: baseline:random"
        images = page.locator("img")
        assert images.count() >= 2 and all(page.evaluate("img => img.naturalWidth", images.nth(k).element_handle()) > 0
                                           for k in range(images.count()))
        browser.close()
    assert all(url.startswith("file://") for url in requests)  # nothing remote is loaded
    assert_figures_exist(out / "report.md", out / "index.html")


def test_hub_results_of_every_scored_benchmark_are_evaluates(cli, built, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    for bench in ("vcr", "visdial"):
        (data / bench).symlink_to(built(bench), target_is_directory=True)
    import yaml

    url = "https://huggingface.co/datasets/my-org/cards/blob/main/report.md"
    code, _, err = cli("suite", "--model", "baseline:random", "--data", data, "--out", tmp_path / "card",
                       "--bootstrap", "50", "--hub-results", tmp_path / "model-repo", "--hub-org", "my-org",
                       "--hub-source", url)
    assert code == 0, err
    for bench in ("vcr", "visdial"):
        code, _, err = cli("evaluate", bench, "--data", data / bench, "--predictions",
                           tmp_path / "card" / "predictions" / f"{bench}.json", "--bootstrap", "50", "--hub-results",
                           tmp_path / "alone", "--hub-dataset", f"my-org/{bench}", "--hub-source", url)
        assert code == 0, err
        suite_entries, alone_entries = (
            [{k: v for k, v in e.items() if k != "date"}
             for e in yaml.safe_load((folder / ".eval_results" / f"{bench}.yaml").read_text())]
            for folder in (tmp_path / "model-repo", tmp_path / "alone"))
        assert suite_entries == alone_entries and suite_entries[0]["dataset"]["id"] == f"my-org/{bench}"
        assert all(e["source"]["url"] == url for e in suite_entries)
    code, _, err = cli("suite", "--model", "baseline:random", "--data", data, "--out", tmp_path / "card2",
                       "--hub-results", tmp_path / "model-repo")
    assert_one_error_line(code, err, ("--hub-org",))


@pytest.mark.slow  # three suites, a comparison and a real browser
def test_cards_of_several_models_on_one_page_with_paired_comparisons(cli, built, tmp_path):
    """Two random baselines (seeds 0 and 1): a row each, a column per headline metric; where both
    scored the same build, `vlbench compare`'s difference, interval and p-value on the same files."""
    from test_leaderboard import CHROMIUM

    data = tmp_path / "data"
    data.mkdir()
    for bench in ("vcr", "gqa-ood"):
        (data / bench).symlink_to(built(bench), target_is_directory=True)
    for name, seed in (("a", "0"), ("b", "1")):
        code, _, err = cli("suite", "--model", "baseline:random", "--seed", seed, "--data", data, "--out",
                           tmp_path / name, "--bootstrap", "100", "--no-perceptual")
        assert code == 0, err
    site = tmp_path / "site"
    code, stdout, err = cli("suite-compare", tmp_path / "a", tmp_path / "b", "--out", site, "--bootstrap", "200")
    assert code == 0, err
    record = json.loads((site / "cards.json").read_text())
    assert [r["model"] for r in record["cards"]] == ["baseline:random (a)", "baseline:random (b)"]
    assert sorted(c["benchmark"] for c in record["comparisons"]) == ["gqa-ood", "vcr"]
    (vcr,) = [c for c in record["comparisons"] if c["benchmark"] == "vcr"]
    code, _, err = cli("compare", "vcr", "--data", data / "vcr", "--predictions", tmp_path / "a" / "predictions" /
                       "vcr.json", "--predictions", tmp_path / "b" / "predictions" / "vcr.json", "--bootstrap", "200",
                       "--report", tmp_path / "alone")
    assert code == 0, err
    alone = json.loads((tmp_path / "alone" / "metrics.json").read_text())["comparisons"][0]["metrics"]
    assert vcr["metrics"] == {k: alone[k] for k in ("q_a", "qa_r", "q_ar")}
    # a figure per family draws the two models side by side
    assert_figures_exist(site / "index.html")
    assert "figures/family-vcr-and-the-paired-benchmarks.png" in (site / "index.html").read_text()
    code, _, err = cli("suite-compare", tmp_path / "a", "--out", tmp_path / "one")
    assert_one_error_line(code, err, ("at least two",))
    if not CHROMIUM.exists():
        pytest.skip("Debian's chromium is not installed (`make test` installs it: apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = launch_chromium(p, CHROMIUM)
        page = browser.new_page()
        page.goto((site / "index.html").as_uri())
        assert page.title() == "Report cards"
        models = lambda: page.locator("#cards tbody td.name").all_inner_texts()  # noqa: E731
        q_a = {r["model"]: r["values"]["vcr:q_a"]["value"] for r in record["cards"]}
        page.get_by_role("columnheader", name="vcr Q->A", exact=True).click()
        assert models() == sorted(q_a, key=q_a.get, reverse=True)
        assert page.locator("section.comparison").count() == 2
        browser.close()


@pytest.mark.slow  # trains two tiny text-only models for the labels
def test_language_shortcut_gaps_are_evaluates_by_groups(cli, built, tmp_path):
    """A VCR build labelled by `vlbench shortcuts`: the card's Biased / Non-Biased scores are those of
    `evaluate --by` on the same predictions, and the gap their difference."""
    from pipelines.tiny_models import write_tiny_text_encoder

    encoder = write_tiny_text_encoder(tmp_path / "bert", "bert")
    data = tmp_path / "data"
    data.mkdir()
    code, _, err = cli("shortcuts", "vcr", "--data", built("vcr"), "--out", data / "vcr", "--model", encoder,
                       "--seed", "0", "--seed", "1", "--epochs", "1")
    assert code == 0, err
    out = tmp_path / "card"
    code, _, err = cli("suite", "--model", "baseline:overlap", "--data", data, "--out", out, "--bootstrap", "100",
                       "--no-perceptual")
    assert code == 0, err
    card = _card(out)
    found = {d["name"]: d for d in card["diagnostics"] if "language shortcuts" in d["name"]}
    assert set(found) == {f"vcr: language shortcuts (shortcut_{level}_{kind}, {kind})"
                          for level in ("sentence", "word") for kind in ("q_a", "qa_r")}
    code, _, err = cli("evaluate", "vcr", "--data", data / "vcr", "--predictions", out / "predictions" / "vcr.json",
                       "--by", "shortcut_sentence_q_a", "--bootstrap", "100", "--report", tmp_path / "alone")
    assert code == 0, err
    groups = json.loads((tmp_path / "alone" / "metrics.json").read_text())["by"]["groups"]
    values = found["vcr: language shortcuts (shortcut_sentence_q_a, q_a)"]["values"]
    assert {"Biased", "Non-Biased"} <= set(groups)  # the tiny models agree on some rows and miss others
    for label, name in (("Biased", "biased"), ("Non-Biased", "non_biased")):
        assert values[name]["value"] == groups[label]["q_a"]
        assert values[name]["interval"] == groups[label]["intervals"]["q_a"]
    assert values["gap"]["value"] == pytest.approx(values["biased"]["value"] - values["non_biased"]["value"], abs=1e-4)


@pytest.mark.slow  # measured twice
def test_counterbias_of_a_generative_vlm_is_the_counterbias_commands(cli, built, tmp_path):
    """The suite measures a tiny LLaVA on the VL-Bias build with `vlbench counterbias`'s defaults: the
    diagnostic's cells are that command's Table 2 "Avg." cells (in %) and intervals on the same build;
    a rerun keeps them; a model CounterBias cannot read is listed with the reason."""
    from pipelines.tiny_models import write_tiny_llava

    model = write_tiny_llava(tmp_path / "llava")
    data = tmp_path / "data"
    data.mkdir()
    (data / "vl-bias").symlink_to(built("vl-bias"), target_is_directory=True)
    (data / "vqa-v2").symlink_to(built("vqa-v2"), target_is_directory=True)
    args = ("suite", "--model", f"hf:{model}", "--data", data, "--out", tmp_path / "card", "--bootstrap", "100",
            "--no-perceptual")
    code, out, err = cli(*args)
    assert code == 0, err
    assert "vl-bias    CounterBias mean |bias|" in out
    card = _card(tmp_path / "card")
    diagnostic = next(d for d in card["diagnostics"] if d["name"] == "VL-Bias: CounterBias (male vs female)")
    code, _, err = cli("counterbias", "--data", built("vl-bias"), "--model", f"hf:{model}", "--bootstrap", "100",
                       "--report", tmp_path / "alone")
    assert code == 0, err
    alone = json.loads((tmp_path / "alone" / "metrics.json").read_text())
    cell = diagnostic["values"]["B@V-L (Eq. 6), activity"]
    assert cell["value"] == pytest.approx(100 * alone["measures"]["vl"]["avg"]["activity"], abs=1e-4)
    low, high = alone["intervals"]["metrics"]["measures.vl.avg.activity"]
    assert cell["interval"] == pytest.approx([100 * low, 100 * high], abs=1e-4)
    assert diagnostic["values"]["B@L (log, no image) (Eq. 13), occupation"]["value"] == \
        pytest.approx(alone["measures"]["l_log"]["avg"]["occupation"], abs=1e-4)
    assert "most male-leaning target" in diagnostic["reading"]
    assert "VL-Bias: CounterBias" in (tmp_path / "card" / "report.md").read_text()
    code, out, err = cli(*args)
    assert code == 0, err
    assert "(kept)" in out

    code, _, err = cli("suite", "--model", "baseline:random", "--data", data, "--out", tmp_path / "random",
                       "--bootstrap", "0")
    assert code == 0, err
    assert any(m.startswith("CounterBias: CounterBias reads a model's probabilities")
               for m in _card(tmp_path / "random")["missing_diagnostics"])


def _hub_cache_repo(org: str, name: str, folder: Path) -> None:
    """Put a built folder in the Hub cache as huggingface_hub lays a downloaded dataset repo out
    (datasets--ORG--NAME/refs/main naming the snapshot, snapshots/<commit>/ holding the files), so that
    the real `snapshot_download` finds it offline."""
    import hashlib
    import os

    repo = Path(os.environ["HF_HUB_CACHE"]) / f"datasets--{org}--{name}"
    commit = hashlib.sha1(f"{org}/{name}".encode()).hexdigest()
    shutil.copytree(folder, repo / "snapshots" / commit, symlinks=False)
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(commit)


def test_a_hub_organisation_as_data(cli, built, tmp_path):
    """--data ORG: every registered benchmark's ORG/<benchmark> dataset repo is looked for (offline, the
    Hub cache answers); found ones are scored as from a folder, the others listed with the reason, and
    --hub-results names the repos of ORG without --hub-org."""
    org = "vlbench-suite-test-org"
    for bench in ("vcr", "visdial"):
        _hub_cache_repo(org, bench, built(bench))
    code, out, err = cli("suite", "--model", "baseline:random", "--data", org, "--out", tmp_path / "card",
                         "--bootstrap", "0", "--hub-results", tmp_path / "hub")
    assert code == 0, err
    rows = _card(tmp_path / "card")["benchmarks"]
    assert rows["vcr"]["status"] == rows["visdial"]["status"] == "scored"
    assert rows["gqa-ood"]["status"] == "not built" and f"no {org}/gqa-ood dataset repo" in rows["gqa-ood"]["reason"]
    code, _, err = cli("evaluate", "vcr", "--data", built("vcr"), "--predictions",
                       tmp_path / "card" / "predictions" / "vcr.json", "--bootstrap", "0", "--report", tmp_path / "r")
    assert code == 0, err
    alone = json.loads((tmp_path / "r" / "metrics.json").read_text())
    assert rows["vcr"]["headline"]["q_a"]["value"] == alone["q_a"]
    import yaml

    entries = yaml.safe_load((tmp_path / "hub" / ".eval_results" / "vcr.yaml").read_text())
    assert {e["dataset"]["id"] for e in entries} == {f"{org}/vcr"}
    code, _, err = cli("suite", "--model", "baseline:random", "--data", "no-such-org-here", "--out",
                       tmp_path / "none", "--bootstrap", "0")
    assert_one_error_line(code, err, ("--data no-such-org-here: no such folder, and no no-such-org-here/<benchmark>",))


@pytest.mark.slow  # a generative model over two benchmarks, killed, resumed, and a clean run to compare
def test_a_killed_generative_suite_redoes_at_most_the_batch_in_flight(built, sample_sources, tmp_path):
    """`suite --resume` with a tiny LLaVA over VQA v2 and VQA-CP, SIGKILLed at three quarters of the rows
    (VQA v2 done, VQA-CP half-way): the rerun keeps VQA v2's predictions and takes every answer of VQA-CP
    the killed run stored from the response cache (its record's cache hits), computing exactly the rows
    that were missing, so what is computed twice is at most the batch that was in flight; the card
    equals an uninterrupted run's."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from pipelines.tiny_models import write_tiny_llava

    model = write_tiny_llava(tmp_path / "llava", hidden=64, layers=2, image_size=64)
    data = tmp_path / "data"
    data.mkdir()
    for bench in ("vqa-v2", "vqa-cp"):
        (data / bench).symlink_to(built(bench), target_is_directory=True)
    env = {**os.environ, "VLBENCH_CACHE": str(tmp_path / "cache"), "PYTHONPATH": str(Path(__file__).parents[1])}
    args = [sys.executable, "-m", "pipelines.cli", "suite", "--model", f"hf:{model}", "--data", str(data),
            "--images-root", str(sample_sources), "--max-new-tokens", "8", "--batch-size", "4", "--bootstrap", "0",
            "--no-perceptual", "--resume"]
    cache = tmp_path / "cache" / "responses.sqlite3"

    def stored() -> int:
        return response_cache_rows(cache)

    clean = subprocess.run([*args[:-1], "--out", str(tmp_path / "clean")], env=env, capture_output=True, text=True,
                           timeout=900)
    assert clean.returncode == 0, clean.stderr
    asked = {b: len(json.loads((tmp_path / "clean" / "predictions" / f"{b}.json").read_text()))
             for b in ("vqa-v2", "vqa-cp")}
    half = 3 * sum(asked.values()) // 4
    run = subprocess.Popen([*args, "--out", str(tmp_path / "card")], env=env, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE)
    for _ in range(3000):  # bounded: at most 300 s to reach half of the rows
        if stored() >= half or run.poll() is not None:
            break
        time.sleep(0.1)
    run.send_signal(signal.SIGKILL)
    run.wait(timeout=30)
    assert run.returncode == -signal.SIGKILL and not (tmp_path / "card" / "card.json").exists(), "killed too late"
    before = stored()
    assert half <= before < sum(asked.values())
    resumed = subprocess.run([*args, "--out", str(tmp_path / "card")], env=env, capture_output=True, text=True,
                             timeout=900)
    assert resumed.returncode == 0, resumed.stderr
    kept = {line.split()[0] for line in resumed.stdout.splitlines() if "(kept predictions)" in line}
    assert kept == {"vqa-v2"}
    hits = json.loads((tmp_path / "card" / "predictions" / "vqa-cp.meta.json").read_text())["cache"]["hits"]
    computed = asked["vqa-cp"] - hits  # rows the rerun ran through the model (VQA-CP shares some VQA v2 questions)
    # each of them added a new answer: nothing the killed run had stored was computed again, so what is done
    # twice is at most the batch that was in flight at the kill (the cache is written batch by batch)
    assert 0 < hits and computed == stored() - before
    headline = {b: r.get("headline") for b, r in _card(tmp_path / "card")["benchmarks"].items()}
    assert headline == {b: r.get("headline") for b, r in _card(tmp_path / "clean")["benchmarks"].items()}


def test_the_sample_sources_hold_an_image_for_every_row_of_every_benchmark_that_reads_images(sample_sources, built):
    """`vlbench suite --images-root SOURCES` serves every benchmark whose rows name images: the sample
    writers lay small pictures out as the releases do (COCO, GQA images/, vcr1images/, CoSIm and PMR
    by img_fn, VisDial's VisualDialog_val2018/)."""
    from builders.registry import benchmarks
    from core.data import load_table, pick_split
    from evaluator.models.images import ImageFolder
    from evaluator.tasks import get_task, has_task

    served = []
    for entry in benchmarks():
        task = get_task(entry.name) if has_task(entry.name) else None
        if task is None or task.images_folder is None or task.generative is None:
            continue
        column = task.generative.image_column
        folder = built(entry.name)
        table = load_table(folder, task.config, pick_split(folder, task.config, None, task.default_split))
        images = ImageFolder(sample_sources / task.images_folder)
        keys = sorted({str(k) for k in table.column(column).to_pylist()})
        assert keys and all(images.path(k).stat().st_size > 0 for k in keys), entry.name
        served.append(entry.name)
    assert set(served) >= {"gqa-ood", "vqa-v2", "vqa-cp", "vcr", "vcr-visor", "cosim-q", "cosim-c", "pmr-p", "visdial"}


def test_a_models_own_failure_on_one_benchmark_is_that_benchmarks_row(cli, built, tmp_path):
    """The model raises on VQA v2 (a RuntimeError of its own, not a vlbench error): vqa-v2 is "not scored" with
    the exception's type and first line, and the suite goes on to score gqa-ood."""
    data = tmp_path / "data"
    data.mkdir()
    for bench in ("gqa-ood", "vqa-v2"):
        (data / bench).symlink_to(built(bench), target_is_directory=True)
    code, _, err = cli("suite", "--model", "py:failing_models:FailsOnVqa", "--data", data, "--out", tmp_path / "card",
                       "--bootstrap", "0", "--no-perceptual", "--no-counterbias")
    assert code == 0, err
    rows = _card(tmp_path / "card")["benchmarks"]
    assert rows["gqa-ood"]["status"] == "scored"
    assert rows["vqa-v2"] == {"status": "not scored", "reason": "py:failing_models:FailsOnVqa failed on vqa-v2 "
                              "(RuntimeError: shape mismatch in the cross-attention mask)"}


def test_a_suite_of_a_model_s_runs_is_scored_as_evaluate_scores_them(cli, built, tmp_path):
    """`suite --predictions SUBS`: each benchmark's file in SUBS is copied into the card and scored as `vlbench
    evaluate` scores it (the same values and intervals); a benchmark without one is listed with the reason; the
    perceptual score and CounterBias, which run the model, are skipped with theirs; `suite-compare` pairs the
    copies with a card that ran the same model (random baseline, seed 0: a paired difference of exactly 0)."""
    data, subs = tmp_path / "data", tmp_path / "subs"
    data.mkdir()
    subs.mkdir()
    for bench in ("vcr", "gqa-ood", "pmr-p"):
        (data / bench).symlink_to(built(bench), target_is_directory=True)
    for bench in ("vcr", "gqa-ood"):
        code, _, err = cli("predict", bench, "--data", data / bench, "--model", "baseline:random", "--out",
                           subs / f"{bench}.json")
        assert code == 0, err
    out = tmp_path / "card"
    code, stdout, err = cli("suite", "--model", "my-model", "--data", data, "--out", out, "--predictions", subs,
                            "--bootstrap", "50")
    assert code == 0, err
    card = _card(out)
    assert card["model"] == "my-model" and card["predictions"] == str(subs)
    for bench in ("vcr", "gqa-ood"):
        row = card["benchmarks"][bench]
        assert row["status"] == "scored" and row["predictions"] == f"predictions/{bench}.json"
        assert (out / row["predictions"]).read_bytes() == (subs / f"{bench}.json").read_bytes()
        assert "runs the model itself" in row["perceptual"]
        code, stdout, err = cli("evaluate", bench, "--data", data / bench, "--predictions", subs / f"{bench}.json",
                                "--bootstrap", "50", "--report", tmp_path / f"alone-{bench}")
        assert code == 0, err
        alone = json.loads((tmp_path / f"alone-{bench}" / "metrics.json").read_text())
        for key, entry in row["headline"].items():
            assert entry["value"] == alone[key] and entry["interval"] == alone["intervals"]["metrics"][key]
    assert card["benchmarks"]["pmr-p"]["status"] == "not scored"
    assert "holds no pmr-p.<ext>" in card["benchmarks"]["pmr-p"]["reason"]
    (subs / "vcr.json").write_text("[]")  # the card keeps its own copy
    assert (out / "predictions" / "vcr.json").read_text() != "[]"
    ran = tmp_path / "ran"
    code, _, err = cli("suite", "--model", "baseline:random", "--data", data, "--out", ran, "--bootstrap", "50",
                       "--benchmarks", "vcr,gqa-ood", "--no-perceptual")
    assert code == 0, err
    code, _, err = cli("suite-compare", ran, out, "--out", tmp_path / "site", "--bootstrap", "50")
    assert code == 0, err
    comparisons = json.loads((tmp_path / "site" / "cards.json").read_text())["comparisons"]
    assert sorted(c["benchmark"] for c in comparisons) == ["gqa-ood", "vcr"]
    assert all(c["metrics"] and all(m["difference"] == 0 for m in c["metrics"].values()) for c in comparisons), \
        comparisons
    code, _, err = cli("suite", "--model", "m", "--data", data, "--out", tmp_path / "x", "--predictions",
                       tmp_path / "none")
    assert_one_error_line(code, err, ("--predictions", "no such folder"))
    assert not (tmp_path / "x").exists()
    part = tmp_path / "part"  # a run of all but the last row: not scored, and the reason names no option of evaluate's
    part.mkdir()
    (part / "gqa-ood.json").write_text(json.dumps(json.loads((subs / "gqa-ood.json").read_text())[:-1]))
    code, _, err = cli("suite", "--model", "m", "--data", data, "--out", tmp_path / "p", "--predictions", part,
                       "--benchmarks", "gqa-ood", "--bootstrap", "0")
    assert code == 0, err
    reason = _card(tmp_path / "p")["benchmarks"]["gqa-ood"]["reason"]
    assert "1 of" in reason and "a card scores complete runs only" in reason and "--allow-partial" not in reason


def test_two_cards_of_one_model_in_folders_of_one_name_stay_two_series(tmp_path):
    """One model's cards in `a/card` and `b/card`: two names, so two series in each family figure; a name with
    control characters reaches the figure as one clean line."""
    from evaluator.suite.compare import card_names
    from evaluator.suite.figures import family_figures

    row = {"status": "scored", "headline": {"q_a": {"label": "Q->A", "value": 25.0, "interval": [20.0, 30.0],
                                                    "higher_is_better": True}}}
    cards = [{"model": "m", "benchmarks": {"vcr": row}}, {"model": "m", "benchmarks": {"vcr": row}},
             {"model": "x\x1b]0;t\x07\ny", "benchmarks": {"vcr": row}}]
    names = card_names(cards, [tmp_path / "a" / "card", tmp_path / "b" / "card", tmp_path / "c"])
    assert names == ["m (card) #1", "m (card) #2", "x ]0;t  y (c)"]
    (figure,) = [f for f in family_figures(list(zip(names, cards))) if "vcr" in " ".join(f.categories)]
    assert list(figure.series) == names


@pytest.fixture(scope="module")
def vcr_card(built, tmp_path_factory):
    """A suite folder of baseline:random on VCR's sample build (no intervals)."""
    from pipelines.cli import main

    root = tmp_path_factory.mktemp("vcr-card")
    (root / "data").mkdir()
    (root / "data" / "vcr").symlink_to(built("vcr"), target_is_directory=True)
    main(["suite", "--model", "baseline:random", "--data", str(root / "data"), "--out", str(root / "card"),
          "--bootstrap", "0", "--no-perceptual"])
    return root / "card"


@pytest.mark.parametrize("edit,needle", [
    (lambda c: c.update(model=["m"]), "field 'model' is not text"),
    (lambda c: c["benchmarks"].update(vcr=3), "benchmarks.vcr: not a row"),
    (lambda c: c["benchmarks"]["vcr"].update(folder=None), "benchmarks.vcr.folder: not text"),
    (lambda c: c["benchmarks"]["vcr"].update(predictions=["../x"]), "benchmarks.vcr.predictions: not text"),
    (lambda c: c["benchmarks"]["vcr"].update(headline=[]), "benchmarks.vcr.headline: not a mapping"),
    (lambda c: c["benchmarks"]["vcr"]["headline"]["q_a"].pop("interval"), "headline.q_a: not a metric"),
    (lambda c: c["benchmarks"]["vcr"]["headline"]["q_a"].update(value="high"), "headline.q_a.value: not a number"),
    (lambda c: c["benchmarks"]["vcr"]["headline"]["q_a"].update(interval=[1]), "q_a.interval: not two numbers"),
])
def test_suite_compare_checks_every_row_of_an_edited_card(edit, needle, vcr_card, cli, tmp_path):
    """An edited card.json: one line naming the field, no traceback, no page written."""
    edited = tmp_path / "edited"
    shutil.copytree(vcr_card, edited)
    card = json.loads((edited / "card.json").read_text())
    edit(card)
    (edited / "card.json").write_text(json.dumps(card))
    code, _, err = cli("suite-compare", vcr_card, edited, "--out", tmp_path / "site")
    assert_one_error_line(code, err, ("card.json", needle))
    assert not (tmp_path / "site").exists()


def test_a_data_folder_whose_name_is_not_utf8_gives_a_whole_card(built, cli, tmp_path):
    """A --data folder named with a byte that is not UTF-8 and a terminal's escape and bell: the card's pages are
    written whole (the name shown escaped, as one line), never a page cut short by an encoding error, and no
    control character reaches report.md or the page."""
    import os

    data = Path(os.fsdecode(bytes(tmp_path) + b"/data\xff\x1b]0;t\x07"))
    data.mkdir()
    (data / "vcr").symlink_to(built("vcr"), target_is_directory=True)
    code, _, err = cli("suite", "--model", "baseline:random", "--data", data, "--out", tmp_path / "card",
                       "--bootstrap", "0", "--no-perceptual")
    assert code == 0, err
    page = (tmp_path / "card" / "index.html").read_text(encoding="utf-8")
    report = (tmp_path / "card" / "report.md").read_text(encoding="utf-8")
    assert page.rstrip().endswith("</html>") and "data\\xff ]0;t " in page and "data\\xff ]0;t " in report
    assert not any(c in text for c in "\x1b\x07" for text in (page, report))


def _vlbench_limited(args, limit_bytes: int):
    """`vlbench ARGS` in a process that may write files of at most `limit_bytes` (RLIMIT_FSIZE, SIGXFSZ ignored:
    a larger write fails with EFBIG, as on a full disk)."""
    import resource
    import signal
    import subprocess
    import sys

    def limit():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))

    return subprocess.run([sys.executable, "-c", "from pipelines.cli import main; main()", *map(str, args)],
                          preexec_fn=limit, capture_output=True, text=True, timeout=600,
                          cwd=Path(__file__).resolve().parents[1])


def test_a_full_disk_stops_the_suite_and_keeps_the_previous_card(built, cli, tmp_path):
    """A write the environment refuses (here a file-size limit, as a full disk) is no benchmark's failure: the
    suite stops with one line, exit 2, and the previous card, its predictions and their records stay as they
    were; `predict` alone never leaves new predictions beside an old record, or the reverse."""
    data = tmp_path / "data"
    data.mkdir()
    for bench in ("vcr", "gqa-ood"):
        (data / bench).symlink_to(built(bench), target_is_directory=True)
    out = tmp_path / "card"
    args = ["suite", "--model", "baseline:random", "--data", data, "--out", out, "--bootstrap", "0", "--no-perceptual"]
    code, _, err = cli(*args)
    assert code == 0, err
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    done = _vlbench_limited([*args, "--seed", "1"], 20_000)  # another seed: everything is predicted again
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert_one_error_line(2, done.stderr, ("cannot write the predictions", "File too large"))
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    kept = out / "predictions" / "gqa-ood.json"
    done = _vlbench_limited(["predict", "gqa-ood", "--data", data / "gqa-ood", "--model", "baseline:random",
                             "--seed", "2", "--out", kept], 20_000)
    assert done.returncode == 2 and "cannot write the predictions" in done.stderr, done.stderr
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before


def test_a_suite_stopped_midway_is_never_read_as_the_card_it_left(built, cli, tmp_path, monkeypatch):
    """Card A, then a run with another seed into the same folder stopped by Ctrl-C after its first benchmark
    (its predictions replaced A's): exit 130 and one line saying the card is marked unfinished; suite-compare
    refuses the folder (it would report the new predictions under A's numbers), and, with the marker put back
    by hand, refuses the prediction file whose SHA-256 is not the card's; the rerun finishes the card."""
    import evaluator.run

    data = tmp_path / "data"
    data.mkdir()
    for bench in ("vcr", "gqa-ood"):
        (data / bench).symlink_to(built(bench), target_is_directory=True)
    args = ["suite", "--model", "baseline:random", "--data", data, "--bootstrap", "0", "--no-perceptual"]
    for name in ("a", "other"):
        code, _, err = cli(*args, "--out", tmp_path / name)
        assert code == 0, err
    real, calls = evaluator.run.evaluate, []

    def stopped_on_the_second(*a, **k):
        calls.append(a)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(evaluator.run, "evaluate", stopped_on_the_second)
    code, _, err = cli(*args, "--out", tmp_path / "a", "--seed", "1")
    monkeypatch.undo()
    assert code == 130 and err.count("\n") == 1 and "interrupted; nothing half-written" in err
    assert f"{tmp_path / 'a'}: its card is marked unfinished until `vlbench suite` runs into it again" in err
    code, _, err = cli("suite-compare", tmp_path / "other", tmp_path / "a", "--out", tmp_path / "site")
    assert_one_error_line(code, err, ("stopped before writing its card",))
    marker = tmp_path / "a" / ".vlbench-suite.json"
    marker.write_text(marker.read_text().replace('"finished": false', '"finished": true'))
    code, _, err = cli("suite-compare", tmp_path / "other", tmp_path / "a", "--out", tmp_path / "site")
    assert_one_error_line(code, err, ("predictions", "not the predictions card.json was computed from"))
    assert not (tmp_path / "site").exists()
    code, _, err = cli(*args, "--out", tmp_path / "a", "--seed", "1")
    assert code == 0, err
    code, _, err = cli("suite-compare", tmp_path / "other", tmp_path / "a", "--out", tmp_path / "site")
    assert code == 0, err
    # a folder whose marker is gone or unreadable is refused for what it is, not as a stopped run
    for text, needle in ((None, "no .vlbench-suite.json beside its card.json"), ("[1]", "not a suite marker"),
                         ("{", "cannot be read (JSONDecodeError)")):
        marker.unlink(missing_ok=True)
        if text is not None:
            marker.write_text(text)
        code, _, err = cli("suite-compare", tmp_path / "other", tmp_path / "a", "--out", tmp_path / "site2")
        assert_one_error_line(code, err, (needle,))
        assert "stopped before writing its card" not in err


def test_a_rebuild_of_the_same_data_is_the_same_build_to_the_suite(cli, built, sample_sources, tmp_path):
    """VCR built again from the same sources: its data files are byte-identical, its manifest is not (the
    run record's timings). The suite keeps the predictions made on the first build (their key names the
    build's content), suite-compare pairs a card of one with a card of the other, and a manifest whose
    outputs are not a list of files is that benchmark's one-line "not scored" row, not a traceback."""
    from core.hashing import sha256_file
    from core.manifest import build_identity
    from pipelines.build import run_build

    again = tmp_path / "again" / "vcr"
    run_build("vcr", sample_sources, again)
    assert sha256_file(again / "manifest.json") != sha256_file(built("vcr") / "manifest.json")
    assert build_identity(again) == build_identity(built("vcr"))
    datas = {}
    for name, folder in (("first", built("vcr")), ("again", again)):
        datas[name] = tmp_path / f"data-{name}"
        datas[name].mkdir()
        (datas[name] / "vcr").symlink_to(folder, target_is_directory=True)
    args = ["suite", "--model", "baseline:random", "--bootstrap", "0", "--no-perceptual"]
    code, _, err = cli(*args, "--data", datas["first"], "--out", tmp_path / "a")
    assert code == 0, err
    code, _, err = cli(*args, "--data", datas["again"], "--out", tmp_path / "a")
    assert code == 0, err
    assert json.loads((tmp_path / "a" / "card.json").read_text())["benchmarks"]["vcr"]["reused"] is True
    code, _, err = cli(*args, "--seed", "1", "--data", datas["again"], "--out", tmp_path / "b")
    assert code == 0, err
    code, _, err = cli("suite-compare", tmp_path / "a", tmp_path / "b", "--out", tmp_path / "site")
    assert code == 0, err
    record = json.loads((tmp_path / "site" / "cards.json").read_text())
    assert [c["benchmark"] for c in record["comparisons"]] == ["vcr"]
    manifest = json.loads((again / "manifest.json").read_text())
    (again / "manifest.json").write_text(json.dumps({**manifest, "outputs": [{"path": "README.md"}]}))
    code, _, err = cli(*args, "--data", datas["again"], "--out", tmp_path / "c")
    assert code == 0, err
    row = json.loads((tmp_path / "c" / "card.json").read_text())["benchmarks"]["vcr"]
    assert row["status"] == "not scored" and "outputs is not a list of files with path and sha256" in row["reason"]


def test_a_full_disk_leaves_the_previous_page_and_no_empty_file(vcr_card, cli, tmp_path, monkeypatch):
    """suite-compare onto a disk that takes no file over 10 kB (its figures are larger), and the card's own
    writer failing at its third file: one line, exit 2, and the previous page, figures, site.js and card as they
    were, byte for byte, never an empty figure or a page beside another run's record."""
    from core.errors import VlbenchError
    from evaluator.suite.card import write_card

    other = tmp_path / "other"
    shutil.copytree(vcr_card, other)
    site = tmp_path / "site"
    code, _, err = cli("suite-compare", vcr_card, other, "--out", site)
    assert code == 0, err
    before = {p: p.read_bytes() for p in site.rglob("*") if p.is_file()}
    done = _vlbench_limited(["suite-compare", vcr_card, other, "--out", site, "--seed", "5"], 10_000)
    assert_one_error_line(done.returncode, done.stderr, (f"--out {site}: cannot write the page", "File too large"))
    assert {p: p.read_bytes() for p in site.rglob("*") if p.is_file()} == before
    card = json.loads((other / "card.json").read_text())
    before = {p: p.read_bytes() for p in other.rglob("*") if p.is_file()}
    disk_full_at(monkeypatch, 3)
    with pytest.raises(VlbenchError, match="cannot write the card"):
        write_card(other, {**card, "seed": 7})
    monkeypatch.undo()
    assert {p: p.read_bytes() for p in other.rglob("*") if p.is_file()} == before


def _fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


def _link(path: Path) -> None:
    target = path.with_name("elsewhere.json")
    path.rename(target)
    path.symlink_to(target)


def _huge(path: Path) -> None:
    with open(path, "r+b") as fh:
        fh.truncate(200 * 1024 * 1024)  # sparse: no disk used, every byte would have to be read


@pytest.mark.parametrize("name, make, needle", [
    (".vlbench-suite.json", _fifo, "is a FIFO"),
    (".vlbench-suite.json", _link, "is a symbolic link"),
    (".vlbench-suite.json", _huge, "bytes, more than"),
    (".vlbench-suite.json", lambda p: p.write_text('{"finished": "no"}'), "`finished` is not true or false"),
    (".vlbench-suite.json", lambda p: p.write_text('{"finished": 0}'), "`finished` is not true or false"),
    ("card.json", _fifo, "is a FIFO"),
    ("card.json", _huge, "bytes, more than"),
    ("predictions/vcr.meta.json", _fifo, "prediction record is not the one"),
    ("predictions/vcr.meta.json", lambda p: p.write_text(p.read_text().replace('"model"', '"model", "x": 1, "y"')
                                                        .replace('"y": "', '"y": "', 1)), "prediction record"),
    ("predictions/vcr.meta.json", lambda p: p.unlink(), "prediction record"),
])
def test_a_card_folder_s_own_files_are_untrusted(name, make, needle, vcr_card, cli, tmp_path):
    """The files vlbench finds in its own card folder are checked like any input: a marker, card or prediction
    record that is a FIFO (before: suite-compare hung reading it), a link, or huge is refused in one line without
    being read; `finished` must be a boolean (before: "no" counted as finished); the prediction record beside a
    card, which its report reads, is bound by its SHA-256 as the predictions are (before: an edited or removed
    record passed)."""
    folder = tmp_path / "card"
    shutil.copytree(vcr_card, folder)
    assert (folder / "predictions" / "vcr.meta.json").is_file()
    make(folder / name)
    code, _, err = cli("suite-compare", vcr_card, folder, "--out", tmp_path / "site")
    assert_one_error_line(code, err, (needle,))
    assert not (tmp_path / "site").exists()


def test_staging_files_are_created_exclusively_under_names_nobody_can_guess(tmp_path, monkeypatch):
    """A staging file's name carries 16 random hex digits beside the PID (before: `.NAME.vlbench-partial-PID`, known
    to anyone who knows the PID), and it is created with O_EXCL | O_NOFOLLOW: a link planted under the name it will
    take is never written through (the file it points to stays as it was)."""
    import core.tempfiles
    from core.outdir import write_atomically
    from core.tempfiles import parse_temp_name, temp_name

    names = {temp_name("p.json") for _ in range(3)}
    assert len(names) == 3 and all(parse_temp_name(n) == ("p.json", "partial", os.getpid()) for n in names)
    assert parse_temp_name(f".p.json.vlbench-partial-{os.getpid()}") == ("p.json", "partial", os.getpid())
    victim = tmp_path / "victim.txt"
    victim.write_text("the user's file")
    monkeypatch.setattr(core.tempfiles.secrets, "token_hex", lambda n: "0" * 2 * n)  # a guessed name, for the test
    (tmp_path / temp_name("p.json")).symlink_to(victim)
    with pytest.raises(FileExistsError):
        write_atomically(tmp_path / "p.json", b"predictions")
    assert victim.read_text() == "the user's file" and not (tmp_path / "p.json").exists()


@pytest.mark.parametrize("name", ["predictions/vcr.key.json", "predictions/vcr.json"])
def test_a_kept_prediction_whose_key_or_file_is_a_fifo_is_made_again(name, vcr_card, tmp_path):
    """A rerun into a card folder reuses its predictions when their key record says so: a key record or prediction
    file replaced by a FIFO (before: the rerun hung reading it) is not kept, and the predictions are made again."""
    from pipelines.cli import main

    folder = tmp_path / "card"
    shutil.copytree(vcr_card, folder)
    _fifo(folder / name)
    data = json.loads((folder / "card.json").read_text())["benchmarks"]["vcr"]["folder"]
    main(["suite", "--model", "baseline:random", "--data", str(Path(data).parent), "--out", str(folder),
          "--bootstrap", "0", "--no-perceptual"])
    card = json.loads((folder / "card.json").read_text())["benchmarks"]["vcr"]
    assert card["status"] == "scored" and card["reused"] is False
    assert (folder / name).is_file()
