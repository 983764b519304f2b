"""The publishing side under attack (the bad-input catalogue's leaderboard and publishing section):
hostile file names, records and cards reach the site only escaped or sanitised, the CSV never holds a
live formula, links out of --submissions are never read, a user's folder is never taken for a site,
an edited cache entry is never republished, every broken submission is its own error row while the
others are scored, harness tables are read strictly, and `--hub-results` never writes through a link.
The page itself is checked in Debian's headless Chromium (playwright): no injected script runs, no
request leaves the file system, and the Content-Security-Policy is in force."""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import zipfile
from html import unescape
from pathlib import Path

import pytest
from helpers import assert_one_error_line

CHROMIUM = Path("/usr/bin/chromium")
# Hostile names from the catalogue: markup in an attribute, in text, and spreadsheet formulas.
HOSTILE_NAMES = ['a"><svg onload=alert(1)>', 'x" onmouseover="alert(1)', "<script>alert(2)<script>",
                 '=HYPERLINK("127.0.0.1","y")', "@SUM(1+1)", "+1", "-2", r"cost$\frac{$x"]  # the last: mathtext
REMOTE = "http://127.0.0.1:9"  # nothing listens there; the browser test fails on any request to it


@pytest.fixture(scope="module")
def alpha(built, tmp_path_factory):
    """A scored submission with its prediction record (baseline:random, seed 0)."""
    from evaluator.run import predict

    folder = tmp_path_factory.mktemp("alpha")
    predict("gqa-ood", str(built("gqa-ood")), "baseline:random", folder / "alpha.json")
    return folder / "alpha.json"


def _add(folder: Path, source: Path, name: str, note: str | None = None) -> None:
    """A copy of SOURCE (and its record, with `processor_note` set to NOTE) named NAME.json."""
    shutil.copy(source, folder / f"{name}.json")
    record = json.loads(source.with_suffix(".meta.json").read_text())
    if note is not None:
        record["processor_note"] = note
    (folder / f"{name}.meta.json").write_text(json.dumps(record))


def _leaderboard(cli, data, subs, site, *extra):
    return cli("leaderboard", "gqa-ood", "--data", data, "--submissions", subs, "--out", site, "--bootstrap", "20",
               *extra)


HOSTILE_NOTE = (f'<img src="{REMOTE}/raw.png"> ![tracker]({REMOTE}/md.png) [click](javascript:alert(3)) '
                f'<a href="{REMOTE}/a">x</a> ![up](../../index.html)')
HOSTILE_CARD = (f"\n\nHostile summary ![badge]({REMOTE}/badge.svg) [js](javascript:alert(4)) <script>alert(5)"
                f"</script> <img src=x onerror=alert(6)> [ok](https://example.org/paper)\n")


@pytest.fixture(scope="module")
def hostile_site(built, alpha, tmp_path_factory):
    """A site built from hostile names, a hostile prediction record and a hostile dataset card."""
    from pipelines.cli import main

    root = tmp_path_factory.mktemp("hostile")
    data = root / "data"
    shutil.copytree(built("gqa-ood"), data)
    card = (data / "README.md").read_text()
    head, body = card.split("\n---\n", 1)
    (data / "README.md").write_text(head + "\n---\n" + HOSTILE_CARD + body)
    subs = root / "subs"
    subs.mkdir()
    for name in HOSTILE_NAMES:
        _add(subs, alpha, name)
    _add(subs, alpha, "noted", HOSTILE_NOTE)
    (subs / "=cmd.json").write_text('[{"questionId": "=1+1", "prediction": "@x"}]')  # invalid: its error row
    site = root / "site"
    try:
        main(["leaderboard", "gqa-ood", "--data", str(data), "--submissions", str(subs), "--out", str(site),
              "--bootstrap", "20"])
    except SystemExit as exc:
        assert exc.code in (0, None)
    return site


def _all_html(site: Path) -> dict[Path, str]:
    return {p: p.read_text() for p in site.rglob("*.html")}


def test_no_markup_from_names_records_or_cards_is_live(hostile_site):
    rows = json.loads((hostile_site / "leaderboard.json").read_text())["submissions"]
    assert sorted(r["submission"] for r in rows if r["status"] == "scored") == sorted([*HOSTILE_NAMES, "noted"])
    pages = _all_html(hostile_site)
    index = pages[hostile_site / "index.html"]
    for html in pages.values():
        assert "<svg" not in html and "<script>alert" not in html and 'onmouseover="alert' not in html
        assert 'href="javascript:' not in html and REMOTE not in re.sub(r">[^<]*<", "><", html)  # none in a tag
        assert 'http-equiv="Content-Security-Policy"' in html and "default-src 'none'" in unescape(html)
        assert "<script>" not in html and "style=" not in html  # no inline script or style: the CSP allows none
    # the names are shown as text, escaped once
    assert "a&#34;&gt;&lt;svg onload=alert(1)&gt;" in index and "x&#34; onmouseover=&#34;alert(1)" in index
    # a hostile name gets a page folder named by a hash; a plain one keeps its name
    links = re.findall(r'href="(submissions/[^"]+)"', index)
    assert "submissions/noted/index.html" in links and all(re.fullmatch(r"submissions/[\w.-]+/index\.html", h)
                                                          for h in links)
    noted = pages[hostile_site / "submissions" / "noted" / "index.html"]
    assert "&lt;img src=" in noted and "tracker" in noted  # the raw tag as text, the image as its alt text
    assert '<img src="intervals.png"' in noted  # the report's own plots stay
    assert 'href="https://example.org/paper"' in index and "Hostile summary" in index


def test_csv_cells_never_start_a_formula(hostile_site):
    with open(hostile_site / "leaderboard.csv", newline="") as fh:
        rows = list(csv.reader(fh))
    cells = [c for row in rows for c in row]
    assert not [c for c in cells if c[:1] in ("=", "+", "@", "\t", "\r")
                or (c.startswith("-") and not re.fullmatch(r"-\d+(\.\d+)?(e-?\d+)?", c))]
    names = {r[0] for r in rows[1:]}
    assert "'=HYPERLINK(\"127.0.0.1\",\"y\")" in names and "'@SUM(1+1)" in names and "'+1" in names
    assert "'-2" in names and "'=cmd" in names
    # an error row names the file, never the maintainer's folder
    assert [r[-1] for r in rows if r[0] == "'=cmd"] == ["'=cmd.json: 1 unknown 'questionId' (not in the split): "
                                                        "'=1+1' (pass --allow-extra to ignore them)"]


@pytest.mark.slow
def test_hostile_site_in_headless_chromium(hostile_site, tmp_path):
    """No dialog (no injected script ran), no request but file:// ones, the CSP in force, the table
    still sorts (the site's own script runs under the CSP) and every detail page opens."""
    if not CHROMIUM.exists():
        pytest.skip("Debian's chromium is not installed (`make test` installs it: apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    dialogs, requests, violations = [], [], []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=[
            "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
            "--disable-component-update", "--disable-sync"])
        page = browser.new_page()
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        page.on("request", lambda r: requests.append(r.url))
        page.on("console", lambda m: violations.append(m.text) if "Content Security Policy" in m.text else None)
        page.goto((hostile_site / "index.html").as_uri())
        page.locator("#leaderboard th", has_text="acc-all").click()  # site.js runs: 'self' holds on file://
        assert page.locator("#leaderboard th.sorted-desc").count() == 1
        hrefs = page.eval_on_selector_all("#leaderboard tbody a", "as => as.map(a => a.href)")
        assert len(hrefs) == len(HOSTILE_NAMES) + 1
        for href in hrefs:
            page.goto(href)
            page.mouse.move(10, 10)
            assert page.locator("img").count() >= 1
            for k in range(page.locator("a").count()):  # every link that is left goes to the site or http(s)
                assert re.match(r"(file:|https?:|\.\./)", page.locator("a").nth(k).get_attribute("href") or "file:")
        page.screenshot(path=str(tmp_path / "hostile.png"), full_page=True)
        # the CSP itself is in force on file://: markup that got past the sanitiser would still not run
        # or load (an inline script injected into the page does not run; a remote image is blocked)
        page.goto((hostile_site / "index.html").as_uri())
        blocked = []
        page.on("requestfailed", lambda r: blocked.append((r.url, r.failure)))
        assert page.evaluate("""() => { const s = document.createElement('script');
            s.textContent = 'window.injected = 1'; document.body.appendChild(s);
            const i = document.createElement('img'); i.src = 'http://127.0.0.1:9/csp-probe.png';
            document.body.appendChild(i); return window.injected === undefined; }""")
        page.wait_for_timeout(300)
        browser.close()
    assert blocked == [("http://127.0.0.1:9/csp-probe.png", "csp")]
    assert dialogs == []
    assert [u for u in requests if not u.startswith("file://") and "csp-probe" not in u] == []
    assert (tmp_path / "hostile.png").stat().st_size > 5_000


def test_a_users_folder_shaped_like_a_site_is_not_replaced(built, alpha, cli, tmp_path):
    subs = tmp_path / "subs"
    subs.mkdir()
    _add(subs, alpha, "alpha")
    mine = tmp_path / "thesis"
    mine.mkdir()
    (mine / "leaderboard.json").write_text(json.dumps({"benchmark": "gqa-ood", "submissions": []}))
    (mine / "thesis.tex").write_text("\\documentclass{article}")
    code, _, err = _leaderboard(cli, built("gqa-ood"), subs, mine)
    assert_one_error_line(code, err, ["--out", "not written by `vlbench leaderboard`"])
    assert (mine / "thesis.tex").read_text() == "\\documentclass{article}"
    # a site this command wrote is proven by its marker and replaced without --overwrite
    site = tmp_path / "site"
    assert _leaderboard(cli, built("gqa-ood"), subs, site)[0] == 0 and (site / ".vlbench-site.json").is_file()
    assert _leaderboard(cli, built("gqa-ood"), subs, site)[0] == 0


def test_an_edited_cache_entry_is_scored_again(built, alpha, cli, tmp_path):
    subs = tmp_path / "subs"
    subs.mkdir()
    _add(subs, alpha, "alpha")
    site = tmp_path / "site"
    assert _leaderboard(cli, built("gqa-ood"), subs, site)[0] == 0
    scored = json.loads((site / "leaderboard.json").read_text())["submissions"][0]["values"]["acc_all"]["value"]
    (result,) = site.glob("cache/*/result.json")
    edited = json.loads(result.read_text())
    edited["metrics"]["acc_all"] = 99.99
    result.write_text(json.dumps(edited))
    code, _, err = _leaderboard(cli, built("gqa-ood"), subs, site)
    assert code == 0 and "is damaged (result.json does not match its checksum); scoring alpha.json again" in err
    row = json.loads((site / "leaderboard.json").read_text())["submissions"][0]
    assert row["values"]["acc_all"]["value"] == scored != 99.99 and row["cached"] is False
    # a link planted in an entry is never followed into the site
    (entry,) = site.glob("cache/*/")
    (entry / "report" / "secret.png").symlink_to(tmp_path / "subs" / "alpha.json")
    code, _, err = _leaderboard(cli, built("gqa-ood"), subs, site)
    assert code == 0 and "holds a link or a special file" in err
    assert not (site / "submissions" / "alpha" / "secret.png").exists()


def test_every_broken_submission_is_its_own_row(built, alpha, cli, tmp_path):
    subs = tmp_path / "subs"
    subs.mkdir()
    _add(subs, alpha, "alpha")
    outside = tmp_path / "private.json"
    outside.write_text('[{"questionId": "PRIVATE-ID-4242", "prediction": "secret"}]')
    (subs / "linked.json").symlink_to(outside)
    (subs / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    (subs / "samples_deep.jsonl").write_text("[" * 100_000 + "]" * 100_000 + "\n")
    (subs / "bigint.json").write_text('[{"questionId": "1", "prediction": ' + "7" * 5000 + "}]")
    (subs / "samples_bigint.jsonl").write_text('{"doc_id": ' + "7" * 5000 + ', "filtered_resps": ["a"]}\n')
    (subs / "...json").write_text("[]")
    (subs / "model.json").write_text("[]")
    (subs / "model.jsonl").write_text("")
    (subs / ("n" * 246 + ".json")).write_text("[]")
    (subs / "folder.json").mkdir()
    os.mkfifo(subs / "fifo.json")  # opening it would hang the run
    site = tmp_path / "site"
    code, stdout, err = _leaderboard(cli, built("gqa-ood"), subs, site)
    assert code == 0, err
    rows = {r["file"]: r for r in json.loads((site / "leaderboard.json").read_text())["submissions"]}
    assert rows.pop("alpha.json")["status"] == "scored"
    expected = {"linked.json": "symbolic link that leads outside --submissions",
                "deep.json": "JSON nested too deeply", "samples_deep.jsonl": "line 1: JSON nested too deeply",
                "bigint.json": "integer of more than 4300 digits",
                "samples_bigint.jsonl": "line 1: holds an integer of more than 4300 digits",
                "...json": "no submission name before the extension",
                "model.json": "2 submissions share the name 'model'", "model.jsonl": "share the name 'model'",
                "n" * 246 + ".json": "a file name of 251 characters", "folder.json": "a folder, not a submission",
                "fifo.json": "not a regular file"}
    assert set(rows) == set(expected)
    for name, needle in expected.items():
        assert rows[name]["status"] == "invalid" and needle in rows[name]["error"], (name, rows[name]["error"])
        assert len(rows[name]["error"].splitlines()) == 1
    published = "".join(p.read_text(errors="replace") for p in site.rglob("*") if p.is_file())
    assert "PRIVATE-ID-4242" not in published and str(tmp_path / "private.json") not in published
    assert "1 of 12 submissions scored" in stdout and "Traceback" not in err


def test_hub_results_never_write_through_a_link(built, alpha, cli, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    repo = tmp_path / "model-repo"
    repo.mkdir()
    (repo / ".eval_results").symlink_to(elsewhere)
    code, _, err = cli("evaluate", "gqa-ood", "--data", built("gqa-ood"), "--predictions", alpha, "--bootstrap", "0",
                       "--hub-results", repo, "--hub-dataset", "org/gqa-ood")
    assert_one_error_line(code, err, ["--hub-results", "symbolic link"])
    assert list(elsewhere.iterdir()) == []
    (repo / ".eval_results").unlink()
    (repo / ".eval_results").mkdir()
    (repo / ".eval_results" / "gqa_ood.yaml").symlink_to(elsewhere / "planted.yaml")
    code, _, err = cli("evaluate", "gqa-ood", "--data", built("gqa-ood"), "--predictions", alpha, "--bootstrap", "0",
                       "--hub-results", repo, "--hub-dataset", "org/gqa-ood")
    assert_one_error_line(code, err, ["symbolic link"])
    assert list(elsewhere.iterdir()) == []


# ---------------------------------------------------------------------------------------------
# VLMEvalKit tables read strictly

def _workbook(path: Path, header: list[str], rows: list[list]) -> Path:
    import openpyxl

    book = openpyxl.Workbook()
    sheet = book.active
    sheet.append(header)
    for row in rows:
        sheet.append(row)
    book.save(path)
    return path


def _with_saved_values(path: Path, values: dict[str, str]) -> None:
    """Give formula cells the value a spreadsheet program saves beside them (`<v>`), as Excel or
    LibreOffice do; openpyxl itself writes formulas without one."""
    with zipfile.ZipFile(path) as z:
        parts = {n: z.read(n) for n in z.namelist()}
    sheet = parts["xl/worksheets/sheet1.xml"].decode()
    for cell, value in values.items():
        sheet, n = re.subn(rf'<c r="{cell}"([^>]*)><f>(.*?)</f><v\s*/?>(</v>)?</c>',
                           rf'<c r="{cell}" t="str"><f>\2</f><v>{value}</v></c>', sheet)
        assert n == 1, sheet
    parts["xl/worksheets/sheet1.xml"] = sheet.encode()
    with zipfile.ZipFile(path, "w") as z:
        for name, data in parts.items():
            z.writestr(name, data)


@pytest.fixture(scope="module")
def question_ids(built):
    import pyarrow.parquet as pq

    table = pq.read_table(built("gqa-ood") / "all" / "testdev-00000-of-00001.parquet",
                          columns=["question_id", "answer"])
    return table.to_pylist()


def test_xlsx_formulas_without_a_saved_value_are_refused(built, question_ids, cli, tmp_path):
    rows = [[r["question_id"], r["answer"]] for r in question_ids]
    rows[1][1] = '=LOWER("YES")'
    book = _workbook(tmp_path / "m_GQA_TestDev_Balanced.xlsx", ["question_id", "prediction"], rows)
    code, _, err = cli("evaluate", "gqa-ood", "--data", built("gqa-ood"), "--predictions", book, "--bootstrap", "0")
    assert_one_error_line(code, err, [book.name, "cell B3 holds a formula with no saved value"])
    # with the value a spreadsheet saved, the value is the prediction
    _with_saved_values(book, {"B3": question_ids[1]["answer"]})
    code, _, err = cli("evaluate", "gqa-ood", "--data", built("gqa-ood"), "--predictions", book, "--bootstrap", "0",
                       "--report", tmp_path / "r")
    assert code == 0, err
    assert json.loads((tmp_path / "r" / "metrics.json").read_text())["acc_all"] == 100.0


@pytest.mark.parametrize("suffix", [".xlsx", ".tsv"])
def test_a_table_with_two_prediction_columns_is_refused(suffix, built, question_ids, cli, tmp_path):
    header = ["question_id", "prediction", "prediction"]
    rows = [[r["question_id"], r["answer"], "no"] for r in question_ids]
    path = tmp_path / f"m_GQA_TestDev_Balanced{suffix}"
    if suffix == ".xlsx":
        _workbook(path, header, rows)
    else:
        path.write_text("\n".join("\t".join(map(str, r)) for r in [header, *rows]) + "\n")
    code, _, err = cli("evaluate", "gqa-ood", "--data", built("gqa-ood"), "--predictions", path, "--bootstrap", "0")
    assert_one_error_line(code, err, [path.name, "2 columns are named `prediction`"])


def test_a_name_shaped_like_a_hashed_page_gets_its_own_folder(built, alpha, cli, tmp_path):
    """A hostile name's page folder is `s-` + a hash of its file name; a submission named exactly that
    must not take (or collide with) the same folder."""
    import hashlib

    hostile = 'x" onmouseover="alert(1)'
    hashed = "s-" + hashlib.sha256(f"{hostile}.json".encode()).hexdigest()[:16]
    subs = tmp_path / "subs"
    subs.mkdir()
    _add(subs, alpha, hostile)
    _add(subs, alpha, hashed)
    code, _, err = _leaderboard(cli, built("gqa-ood"), subs, tmp_path / "site")
    assert code == 0, err
    rows = json.loads((tmp_path / "site" / "leaderboard.json").read_text())["submissions"]
    pages = {r["submission"]: r["page"] for r in rows}
    assert pages[hostile] == hashed and pages[hashed] != hashed and len(set(pages.values())) == 2
    assert all(r["status"] == "scored" for r in rows)


def test_a_report_removes_only_the_files_its_predecessor_wrote(tmp_path):
    """A report lists its files in its record; the next report into the folder removes those it does not write
    again (a figure the new run has none of), and only while they are as vlbench wrote them: never a file of the
    user's, even one a record names, and never a path outside the folder."""
    from evaluator.publish.report import RECORD, write_report

    folder = tmp_path / "r"
    write_report(folder, {"a": 1}, "# A\n", [], {"instances.png": b"png of A"})
    (folder / "notes.txt").write_text("mine")
    (tmp_path / "outside.txt").write_text("keep")
    assert set(json.loads((folder / RECORD).read_text())["files"]) == {"metrics.json", "report.md", "instances.png"}
    write_report(folder, {"a": 2}, "# B\n", [])
    assert sorted(p.name for p in folder.iterdir()) == [RECORD, "metrics.json", "notes.txt", "report.md"]
    (folder / RECORD).write_text(json.dumps({"files": {"../outside.txt": "0", "notes.txt": "0"}}))
    write_report(folder, {"a": 3}, "# C\n", [])
    assert (tmp_path / "outside.txt").read_text() == "keep" and (folder / "notes.txt").read_text() == "mine"


def test_a_fifo_planted_as_a_report_s_record_is_never_waited_on(tmp_path):
    """A FIFO in place of the report's record made `evaluate --report` hang for ever (read to find the files of the
    report before); now it is taken as no record, and the report is written beside it (the FIFO replaced)."""
    import os

    from evaluator.publish.report import RECORD, write_report

    folder = tmp_path / "r"
    folder.mkdir()
    os.mkfifo(folder / RECORD)
    write_report(folder, {"a": 1}, "# A\n", [])
    assert json.loads((folder / RECORD).read_text())["files"].keys() == {"metrics.json", "report.md"}


def test_text_from_data_reaches_a_figure_as_one_plain_line(monkeypatch):
    """A card's model name, a folder's name or a category with ESC, BEL, newlines, a bidi override or a `$`:
    every text matplotlib draws is one line without control characters, the override shown escaped, the `$`
    literal (not the start of a formula)."""
    import io

    from matplotlib.figure import Figure
    from matplotlib.text import Text

    from core.figures import FigureSpec, draw_bars
    from evaluator.publish.report import ForestPlot, draw_forest

    drawn, savefig = [], Figure.savefig

    def seen(self, *args, **kwargs):
        drawn.extend(t.get_text() for t in self.findobj(Text))
        return savefig(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", seen)
    hostile = "m\x1b]0;t\x07\n\u202eod$x$"
    draw_bars(FigureSpec(filename="f.png", title=hostile, categories=[hostile, "b"], series={hostile: [1.0, 2.0]},
                         xlabel=hostile, ylabel=hostile), io.BytesIO())
    draw_forest(ForestPlot("g.png", hostile, [hostile], [0.5], [(0.0, 1.0)], hostile), io.BytesIO())
    shown = [t for t in drawn if "od" in t]
    assert len(shown) >= 8
    for text in shown:
        assert not any(ord(c) < 32 or c == "\u202e" for c in text), repr(text)
        assert "\\u202eod" in text and r"\$x\$" in text
