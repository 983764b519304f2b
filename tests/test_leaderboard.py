"""`vlbench leaderboard`: every submission scored (a broken one listed with its error, the others
unaffected), leaderboard.csv / .json, the cache (a rerun scores only the new file), OUT safety, and the
page itself in a real headless Chromium (Debian's, driven by playwright): it loads, the table sorts,
the links resolve, and a screenshot is taken."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest
from helpers import launch_chromium

CHROMIUM = Path("/usr/bin/chromium")


@pytest.fixture(scope="module")
def gqa(built):
    return built("gqa-ood")


@pytest.fixture
def submissions(gqa, cli, tmp_path):
    folder = tmp_path / "subs"
    folder.mkdir()
    for name, seed in (("alpha", "0"), ("beta", "1")):
        code, _, err = cli("predict", "gqa-ood", "--data", gqa, "--model", "baseline:random", "--seed", seed,
                           "--out", folder / f"{name}.json")
        assert code == 0, err
    (folder / "broken.json").write_text('[{"questionId": "nope", "prediction": "x"}]')
    return folder


@pytest.mark.slow  # scores four submissions end to end, three times
def test_site_lists_every_submission_and_caches_scores(gqa, submissions, cli, tmp_path):
    site = tmp_path / "site"
    code, stdout, err = cli("leaderboard", "gqa-ood", "--data", gqa, "--submissions", submissions, "--out", site,
                            "--bootstrap", "100")
    assert code == 0, err
    assert "2 of 3 submissions scored (0 from the cache), 1 invalid" in stdout
    record = json.loads((site / "leaderboard.json").read_text())
    rows = {r["submission"]: r for r in record["submissions"]}
    assert rows["broken"]["status"] == "invalid" and "unknown 'questionId'" in rows["broken"]["error"]
    assert record["columns"][:3] == ["acc_all", "acc_tail", "acc_head"] and record["split"] == "testdev"
    # the leaderboard's values are evaluate's, the same bootstrap settings give the same intervals
    code, _, err = cli("evaluate", "gqa-ood", "--data", gqa, "--predictions", submissions / "alpha.json",
                       "--report", tmp_path / "r", "--bootstrap", "100")
    assert code == 0, err
    metrics = json.loads((tmp_path / "r" / "metrics.json").read_text())
    assert rows["alpha"]["values"]["acc_tail"] == {"value": metrics["acc_tail"],
                                                   "interval": metrics["intervals"]["metrics"]["acc_tail"]}
    with open(site / "leaderboard.csv") as fh:
        table = list(csv.DictReader(fh))
    assert [r["submission"] for r in table] == ["alpha", "beta", "broken"]
    assert float(table[0]["acc_all"]) == metrics["acc_all"] and table[2]["acc_all"] == ""
    assert (site / "submissions" / "alpha" / "index.html").is_file()
    assert (site / "submissions" / "alpha" / "intervals.png").is_file()

    cli("predict", "gqa-ood", "--data", gqa, "--model", "baseline:random", "--seed", "2", "--out",
        submissions / "gamma.json")
    shutil.copy(submissions / "alpha.json", submissions / "alpha_again.json")  # same bytes: scored once
    shutil.copy(submissions / "alpha.meta.json", submissions / "alpha_again.meta.json")  # (the record too)
    code, stdout, err = cli("leaderboard", "gqa-ood", "--data", gqa, "--submissions", submissions, "--out", site,
                            "--bootstrap", "100")
    assert code == 0, err
    record = json.loads((site / "leaderboard.json").read_text())
    cached = {r["submission"]: r["cached"] for r in record["submissions"]}
    assert cached == {"alpha": True, "alpha_again": True, "beta": True, "broken": True, "gamma": False}
    cli("predict", "gqa-ood", "--data", gqa, "--model", "baseline:random", "--seed", "3", "--out",
        submissions / "beta.json")  # a changed file is scored again
    cli("leaderboard", "gqa-ood", "--data", gqa, "--submissions", submissions, "--out", site, "--bootstrap", "100")
    record = json.loads((site / "leaderboard.json").read_text())
    assert {r["submission"]: r["cached"] for r in record["submissions"]}["beta"] is False


def test_out_is_protected(gqa, submissions, cli, tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    code, _, err = cli("leaderboard", "gqa-ood", "--data", gqa, "--submissions", submissions, "--out", mine)
    assert code == 2 and "not written by `vlbench leaderboard`" in err and (mine / "notes.txt").read_text() == "keep"
    code, _, err = cli("leaderboard", "gqa-ood", "--data", gqa, "--submissions", submissions, "--out",
                       submissions / "site")
    assert code == 2 and "--submissions" in err and len(err.strip().splitlines()) == 1
    code, _, err = cli("leaderboard", "gqa-ood", "--data", gqa, "--submissions", tmp_path / "none", "--out",
                       tmp_path / "s")
    assert code == 2 and "no such folder" in err and not (tmp_path / "s").exists()
    code, _, err = cli("leaderboard", "gqa-ood", "--data", gqa, "--submissions", submissions, "--out",
                       tmp_path / "s", "--option", "rule=x")
    assert code == 2 and "--option" in err and len(err.strip().splitlines()) == 1 and not (tmp_path / "s").exists()


@pytest.mark.slow
def test_page_loads_sorts_and_links_in_headless_chromium(gqa, submissions, cli, tmp_path):
    if not CHROMIUM.exists():
        pytest.skip("Debian's chromium is not installed (`make test` installs it: apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    site = tmp_path / "site"
    code, _, err = cli("leaderboard", "gqa-ood", "--data", gqa, "--submissions", submissions, "--out", site,
                       "--bootstrap", "100")
    assert code == 0, err
    values = {r["submission"]: r["values"]["acc_all"]["value"]
              for r in json.loads((site / "leaderboard.json").read_text())["submissions"] if r["status"] == "scored"}
    with sync_playwright() as p:
        browser = launch_chromium(p, CHROMIUM)
        page = browser.new_page(viewport={"width": 1200, "height": 800})
        page.goto((site / "index.html").as_uri())
        assert page.title() == "gqa-ood leaderboard"
        names = lambda: page.locator("#leaderboard tbody td.name").all_inner_texts()  # noqa: E731
        assert sorted(names()) == sorted(values)
        header = page.locator("#leaderboard th", has_text="acc-all")
        header.click()
        assert names() == sorted(values, key=values.get, reverse=True)
        header.click()
        assert names() == sorted(values, key=values.get)
        assert "broken.json" in page.locator("#invalid").inner_text()
        page.screenshot(path=str(tmp_path / "leaderboard.png"), full_page=True)
        first = names()[0]
        page.locator("#leaderboard tbody a", has_text=first).click()
        assert page.title() == f"gqa-ood: {first}"
        images = page.locator("img")
        assert images.count() >= 2
        assert all(page.evaluate("img => img.naturalWidth", images.nth(k).element_handle()) > 0
                   for k in range(images.count()))  # every plot of the report resolves
        page.locator("a", has_text="leaderboard").first.click()
        assert page.title() == "gqa-ood leaderboard"
        browser.close()
    assert (tmp_path / "leaderboard.png").stat().st_size > 10_000
