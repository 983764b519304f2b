"""`vlbench serve` (pipelines/serve/): the challenge's configuration checked key by key; teams' tokens stored hashed;
a real service (uvicorn on loopback, a scoring worker process, SQLite in WAL mode) started and stopped by a fixture:
a submission made with `vlbench submit` is scored by the code of `vlbench evaluate` (the shown scores are evaluate's
on the unsealed build, rounded as configured, for every benchmark), a refused one gets its one line and costs
nothing, limits are exact, uploads are bounded and stored content-addressed, a team sees only its own."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml
from helpers import assert_one_error_line, launch_chromium, public_names

from builders.registry import get_benchmark
from evaluator.tasks import get_task, task_names
from pipelines.serve.client import wait_for_service
from pipelines.serve.views import shown_interval

pytestmark = pytest.mark.allow_hosts(["127.0.0.1"])  # the service listens on loopback only
ROOT = Path(__file__).resolve().parents[1]
VLBENCH = [sys.executable, "-m", "pipelines.cli"]
CHROMIUM = Path("/usr/bin/chromium")


@pytest.fixture(autouse=True)
def _no_network():
    """Overrides conftest's: sockets may be made, and connect to loopback only (the module's mark)."""
    yield


@pytest.fixture(scope="module")
def postgres():
    """A PostgreSQL server of Debian's package (`make test` installs it): a cluster initialised in a temporary folder
    (as the `postgres` user when the tests run as root: the server refuses root), listening on 127.0.0.1 only,
    started here and stopped at the end. A function that creates a new database in it and gives its URL."""
    import shutil
    import tempfile

    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    if not found:
        pytest.skip("Debian's postgresql package is not installed (`make test` installs it)")
    binaries, root = found[-1].parent, Path(tempfile.mkdtemp(prefix="vlbench-postgres-"))
    as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    if as_user:
        shutil.chown(root, "postgres", "postgres")
    port = _free_port()

    def run(*argv):
        done = subprocess.run([*as_user, *map(str, argv)], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr

    run(binaries / "initdb", "-D", root / "data", "-U", "vlbench", "--auth=trust", "-E", "UTF8", "--no-sync")
    run(binaries / "pg_ctl", "-D", root / "data", "-l", root / "server.log", "-w", "-t", "60", "-o",
        f"-c listen_addresses=127.0.0.1 -p {port} -k {root}", "start")
    made = []

    def database() -> str:
        made.append(f"challenge{len(made)}")
        run(binaries / "createdb", "-h", "127.0.0.1", "-p", port, "-U", "vlbench", made[-1])
        return f"postgresql://vlbench@127.0.0.1:{port}/{made[-1]}"

    try:
        yield database
    finally:
        run(binaries / "pg_ctl", "-D", root / "data", "-m", "fast", "-w", "stop")
        shutil.rmtree(root, ignore_errors=True)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def sealed_phases(built, sample_sources, tmp_path_factory):
    """Every benchmark with a task sealed (VisDial built one round per dialog), with a prediction file made on the
    build by its registry's first demo model: {bench: (build, public, answers, predictions)}."""
    from pipelines.build import run_build
    from pipelines.cli import main

    root, found = tmp_path_factory.mktemp("serve-phases"), {}
    for bench in task_names():
        task, entry = get_task(bench), get_benchmark(bench)
        build = built(bench)
        if task.sealing.build_param is not None:
            build = root / f"{bench}-build"
            run_build(bench, sample_sources, build, splits=[task.default_split],
                      assignments=[*entry.demo_params, task.sealing.build_param])
        public, answers, predictions = root / bench, root / "private" / f"{bench}.zip", root / f"{bench}.json"
        train = [] if entry.demo.train_file is None else ["--train-file", str(sample_sources / entry.demo.train_file)]
        for argv in (["seal", str(build), "--public", str(public), "--answers", str(answers)],
                     ["predict", bench, "--data", str(build), "--model", entry.demo.models[0], "--out",
                      str(predictions), *train]):
            try:
                main(argv)
            except SystemExit as done:
                assert done.code in (0, None), argv
        found[bench] = (build, public, answers, predictions)
    return found


def _write_config(folder: Path, phases: dict, **top) -> Path:
    config = {"challenge": "Test challenge", "storage": str(folder / "store"), **top,
              "phases": [{"name": bench, "benchmark": bench, "data": str(public), "answers": str(answers),
                          "rounding": 3, "limits": {"per_day": 3, "total": 5, "concurrent": 2}}
                         for bench, (_, public, answers, _) in phases.items()]}
    path = folder / "challenge.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _add_team(config: Path, name: str, host: bool = False) -> str:
    done = subprocess.run([*VLBENCH, "serve", "team", "add", name, "--config", str(config),
                           *(["--host"] if host else [])], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


class Running:
    """`vlbench serve CONFIG` in its own process group on a free loopback port, its workers with it: started
    (bounded wait for its status route), and killed whole on `stop` (SIGTERM, then SIGKILL), or at once with
    `kill` (SIGKILL: what a crash or an OOM kill does)."""

    def __init__(self, config: Path, workers: int = 1):
        port = _free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.process = subprocess.Popen([*VLBENCH, "serve", str(config), "--port", str(port), "--workers",
                                         str(workers)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        text=True, start_new_session=True)
        if wait_for_service(self.url, lambda: self.process.poll() is None):
            return
        if self.process.poll() is not None:
            raise AssertionError(self.process.stdout.read())
        self.kill()
        pytest.fail("the service did not start within 120 s")

    def kill(self) -> None:
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(30)

    def stop(self) -> None:
        if self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.kill()


@pytest.fixture(scope="module")
def service(sealed_phases, tmp_path_factory):
    """A running service over every sealed phase, with one scoring worker; stopped at the end.
    {url, config, folder, tokens: the host's and two teams'}."""
    folder = tmp_path_factory.mktemp("service")
    config = _write_config(folder, sealed_phases, max_upload_mb=1)
    raw = yaml.safe_load(config.read_text())
    raw["phases"].append({**raw["phases"][[p["name"] for p in raw["phases"]].index("vqa-cp")], "name": "ladder",
                          "ladder": "parameter-free", "limits": {"per_day": 10, "concurrent": 1}})
    config.write_text(yaml.safe_dump(raw))
    tokens = {name: _add_team(config, name, host) for name, host in (("hosts", True), ("Team <A>", False),
                                                                      ("team b", False))}
    running = Running(config)
    try:
        yield {"url": running.url, "config": config, "folder": folder, "tokens": tokens}
    finally:
        running.stop()


def _submit(service, token: str, phase: str, path: Path, wait: float = 120):
    env = {**os.environ, "VLBENCH_TOKEN": token}
    return subprocess.run([*VLBENCH, "submit", str(path), "--server", service["url"], "--phase", phase, "--wait",
                           str(wait)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=wait + 60)


def _get(service, token: str | None, route: str):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.get(f"{service['url']}{route}", headers=headers, timeout=30)


# -- the configuration -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("edit, needles", [
    (lambda c: c.update(colour="red"), ["colour", "not a key"]),
    (lambda c: c["phases"][0]["limits"].update(per_day=0), ["phases[0].limits.per_day", "integer from 1"]),
    (lambda c: c["phases"][0]["limits"].update(per_day="5"), ["phases[0].limits.per_day"]),
    (lambda c: c["phases"][0].pop("answers"), ["phases[0].answers", "answer file"]),
    (lambda c: c["phases"][0].update(name="Test Phase"), ["phases[0].name", "lower-case"]),
    (lambda c: c["phases"][0].update(starts="next tuesday"), ["phases[0].starts", "YYYY-MM-DD"]),
    (lambda c: c["phases"][0].update(starts="2027-02-01", ends="2027-01-01"), ["phases[0].ends", "after starts"]),
    (lambda c: c["phases"][0].update(metrics=["no_such_metric"]), ["phases[0].metrics", "headline"]),
    (lambda c: c["phases"][0].update(benchmark="no-such-bench"), ["phases[0].benchmark"]),
    (lambda c: c["phases"].append(dict(c["phases"][0])), ["phases", "two phases are named"]),
    (lambda c: c.update(database="mysql://x"), ["database", "PostgreSQL URL"]),
    (lambda c: c.update(max_upload_mb=10 ** 6), ["max_upload_mb"]),
    (lambda c: c["phases"][0].update(ladder="sometimes"), ["phases[0].ladder", "parameter-free"]),
    (lambda c: c["phases"][0].update(ladder={"step": 0}), ["phases[0].ladder", "step"]),
    (lambda c: c["phases"][0].update(ladder="parameter-free"), ["phases[0].limits.concurrent", "1 under the Ladder"]),
    (lambda c: c["phases"][0].update(private=1.5, ends="2027-01-01"), ["phases[0].private", "between 0 and 1"]),
    (lambda c: c["phases"][0].update(private=True, ends="2027-01-01"), ["phases[0].private", "between 0 and 1"]),
    (lambda c: c["phases"][0].update(private=0.5), ["phases[0].ends", "private part needs an end"]),
    (lambda c: c["phases"][0].update(private=0.5, ends="2027-01-01", ladder={"step": 1}, limits={"concurrent": 1}),
     ["phases[0].private", "not both"]),
    (lambda c: c["phases"][0].update(min_subset=-1), ["phases[0].min_subset", "integer from 0"]),
    # a storage folder inside the public half would be published with it (the database and every submission)
    (lambda c: c.update(storage=c["phases"][0]["data"] + "/serve-data"), ["storage", "inside phases[0].data"]),
    (lambda c: c.update(trusted_proxies="127.0.0.1"), ["trusted_proxies", "a list"]),
    (lambda c: c.update(trusted_proxies=["*"]), ["trusted_proxies[0]", "never '*'"]),
    (lambda c: c.update(trusted_proxies=["::/0"]), ["trusted_proxies[0]", "a network of every address"]),
    (lambda c: c.update(trusted_proxies=["proxy.example.org"]), ["trusted_proxies[0]", "an IP address"]),
])
def test_a_bad_config_is_one_line_naming_the_key(sealed_phases, cli, tmp_path, edit, needles):
    path = _write_config(tmp_path, {"vqa-cp": sealed_phases["vqa-cp"]})
    config = yaml.safe_load(path.read_text())
    edit(config)
    path.write_text(yaml.safe_dump(config))
    code, _, err = cli("serve", "team", "add", "x", "--config", path)
    assert_one_error_line(code, err, [str(path), *needles])


def test_answers_that_would_be_published_or_belong_to_another_build_are_refused_at_once(sealed_phases, cli,
                                                                                          tmp_path):
    """Each was accepted before: answers inside the public half or inside the folder the service publishes
    (`STORAGE/site`), and a phase naming another seal's answers (which then refused every good submission)."""
    import shutil

    path = _write_config(tmp_path, {"vqa-cp": sealed_phases["vqa-cp"]})
    _, public, answers, _ = sealed_phases["vqa-cp"]
    config = yaml.safe_load(path.read_text())
    site = Path(config["storage"]) / "site" / "vqa-cp"
    site.mkdir(parents=True)
    inside_public = tmp_path / "public-copy"
    shutil.copytree(public, inside_public)
    shutil.copyfile(answers, inside_public / "answers.zip")
    shutil.copyfile(answers, site / "answers.zip")
    for phase, needles in (({"answers": str(site / "answers.zip")}, ["phases[0].answers", "the service publishes"]),
                           ({"data": str(inside_public), "answers": str(inside_public / "answers.zip")},
                            ["phases[0].answers", "inside phases[0].data"]),
                           ({"answers": str(sealed_phases["gqa-ood"][2])}, ["phases[0].answers", "commitment",
                                                                             "another seal's answers"])):
        config["phases"][0].update(phase)
        path.write_text(yaml.safe_dump(config))
        code, _, err = cli("serve", "team", "add", "x", "--config", path)
        assert_one_error_line(code, err, [str(path), *needles])
        config["phases"][0].update(data=str(public), answers=str(answers))


def test_a_hidden_phase_needs_a_sealed_build(sealed_phases, built, cli, tmp_path):
    path = _write_config(tmp_path, {"vqa-cp": sealed_phases["vqa-cp"]})
    config = yaml.safe_load(path.read_text())
    config["phases"][0].update(data=str(built("vqa-cp")))
    config["phases"][0].pop("answers")
    path.write_text(yaml.safe_dump(config))
    code, _, err = cli("serve", "team", "add", "x", "--config", path)
    assert_one_error_line(code, err, ["phases[0].data", "sealed build"])


def test_tokens_are_stored_hashed_and_a_wrong_one_names_no_team(tmp_path):
    from pipelines.serve.store import Store

    store = Store(tmp_path)
    token = store.add_team("Team A")
    assert token.startswith("vlb_") and store.team_of(token).name == "Team A"
    assert token.split("_", 2)[2].encode() not in (tmp_path / "serve.sqlite3").read_bytes()
    wrong = token[:-1] + ("x" if token[-1] != "x" else "y")
    assert store.team_of(wrong) is None and store.team_of(None) is None and store.team_of("vlb_") is None
    with pytest.raises(Exception, match="exists already"):
        store.add_team("Team A")


def test_a_database_an_earlier_version_made_gains_the_new_columns(tmp_path):
    """A serve.sqlite3 written by the previous release (its submissions table without `log` and `private_view`, the
    schema of commit a890bcb) opens, gains both columns, keeps its rows, and records a result in them."""
    old = """CREATE TABLE teams (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, host INTEGER NOT NULL,
        created TEXT NOT NULL);
    CREATE TABLE tokens (id TEXT PRIMARY KEY, team BIGINT NOT NULL REFERENCES teams(id), digest TEXT NOT NULL,
        created TEXT NOT NULL);
    CREATE TABLE submissions (id INTEGER PRIMARY KEY, team BIGINT NOT NULL REFERENCES teams(id), phase TEXT NOT NULL,
        sha256 TEXT NOT NULL, filename TEXT NOT NULL, bytes BIGINT NOT NULL, status TEXT NOT NULL,
        submitted TEXT NOT NULL, day TEXT NOT NULL, started TEXT, finished TEXT, worker TEXT, lease REAL,
        attempts INTEGER NOT NULL DEFAULT 0, seconds REAL, error TEXT, metrics TEXT, shown TEXT, ladder TEXT);
    INSERT INTO teams VALUES (1, 'A', 0, '2026-11-27');
    INSERT INTO submissions (team, phase, sha256, filename, bytes, status, submitted, day)
        VALUES (1, 'p', 'ab', 'f.json', 2, 'queued', '2026-11-27T00:00:00', '2026-11-27');"""
    with sqlite3.connect(tmp_path / "serve.sqlite3") as db:
        db.executescript(old)
    from pipelines.serve.store import Store

    store = Store(tmp_path)
    row = store.claim("w", 60)
    assert row["filename"] == "f.json" and row["log"] is None and row["private_view"] is None
    assert store.finish(row["id"], "w", error="refused", log="the whole line", private={"scores": []})
    again = store.submission(row["id"])
    assert again["log"] == "the whole line" and json.loads(again["private_view"]) == {"scores": []}
    assert Store(tmp_path).submission(row["id"])["log"] == "the whole line"  # opened again: nothing added twice


def test_the_leaderboard_ranks_each_team_s_best_and_never_a_host(tmp_path):
    """board_rows on records made by the store: a lower-is-better metric (DISCO's MAE) ranks ascending, each team by
    its best submission, equal scores share a rank, a host's submission is not ranked, a refused one not counted;
    under the Ladder a team's row is its latest release. Hand-made goldens."""
    from pipelines.serve.board import board_rows
    from pipelines.serve.config import Limits, Phase
    from pipelines.serve.store import Store, Team, now_utc

    store = Store(tmp_path)
    phase = Phase(name="p", benchmark="disco", data=tmp_path, answers=None, split=None, starts=None, ends=None,
                  hidden=True, limits=Limits(concurrent=None), metrics=("mae",), rounding=2)
    teams = {}
    for name, host in (("A", False), ("B", False), ("C", False), ("hosts", True)):
        store.add_team(name, host)
        teams[name] = next(t for t in store.teams() if t.name == name)

    def scored(team: Team, value: float | None, error: str | None = None):
        store.submit(team, phase, "0" * 64, "f.json", 2, now_utc())
        row = store.claim("w", 60)
        shown = {"scores": [{"metric": "mae", "label": "MAE", "value": value, "interval": None}], "rounding": 2}
        store.finish(row["id"], "w", shown=None if error else shown, metrics=None if error else {}, error=error)

    for team, value in (("A", 3.5), ("A", 2.25), ("A", 4.0), ("B", 2.25), ("C", 9.0), ("hosts", 0.5)):
        scored(teams[team], value)
    scored(teams["C"], None, error="refused")
    rows = board_rows(store, phase)
    assert [(r["rank"], r["team"], r["scores"][0]["value"], r["count"]) for r in rows] == \
        [(1, "A", 2.25, 3), (1, "B", 2.25, 1), (3, "C", 9.0, 1)]
    laddered = dataclasses.replace(phase, ladder="step", ladder_step=1.0)
    assert [(r["team"], r["scores"][0]["value"]) for r in board_rows(store, laddered)] == \
        [("B", 2.25), ("A", 4.0), ("C", 9.0)]  # the latest release of each (a real Ladder never releases a worse one)


def test_a_score_over_fewer_rows_than_min_subset_is_withheld_unless_it_is_the_whole_split():
    """views.headline_scores on hand-made metrics: GQA-OOD's acc-tail over 50 rows is withheld under min_subset 100,
    acc-all over the whole split of 80 rows is not (the aggregate itself); a part of 80 rows is; the hosts' exact
    view withholds nothing and does not round."""
    from evaluator.tasks import get_task
    from pipelines.serve.config import Limits, Phase
    from pipelines.serve.views import headline_scores

    task = get_task("gqa-ood")
    phase = Phase(name="p", benchmark="gqa-ood", data=Path("."), answers=None, split=None, starts=None, ends=None,
                  hidden=True, limits=Limits(), metrics=("acc_all", "acc_tail"), rounding=1, min_subset=100)
    metrics = {"acc_all": 51.26, "acc_tail": 40.04, "coverage": {"expected": 80},
               "intervals": {"metrics": {"acc_all": [40.0, 60.0], "acc_tail": [30.0, 50.0]},
                             "scope": {"acc_all": 80, "acc_tail": 50}},
               "parts": {"public": {"rows": 80, "acc_all": 51.26, "acc_tail": 40.04, "scope": {"acc_all": 80}}}}
    whole = headline_scores(task, phase, metrics)
    # the interval centred on the shown 51.3, its half-width max(51.26 - 40, 60 - 51.26) = 11.26 rounded up: 11.3
    assert whole[0] == {"metric": "acc_all", "label": "acc-all", "value": 51.3, "interval": [40.0, 62.6]}
    assert whole[1]["value"] is None and whole[1]["interval"] is None and "fewer than 100" in whole[1]["withheld"]
    assert all(s["value"] is None for s in headline_scores(task, phase, metrics, "public"))
    assert [s["value"] for s in headline_scores(task, phase, metrics, exact=True)] == [51.26, 40.04]
    assert [s["value"] for s in headline_scores(task, dataclasses.replace(phase, min_subset=0), metrics)] == \
        [51.3, 40.0]
    from evaluator.publish.site import page
    from pipelines.serve.pages import PAGE_TEMPLATES
    from pipelines.serve.views import as_text

    html = page("team.html", title="t", templates=PAGE_TEMPLATES, phases=(), refresh=None, problem=None,
                viewer={"name": "A", "host": False, "csrf": "x"}, open_phases=[], max_mb=1, received=None,
                rows=[{"id": 1, "phase": "p", "filename": "f.json", "status": "scored", "submitted": "", "error": None,
                       "scores": [as_text(s, 1) for s in whole]}]).decode()
    assert "acc-all 51.3" in html
    assert "acc-tail \u2013 <span class=\"ci\">(withheld: computed over fewer than 100" in html


def test_the_private_part_keeps_clusters_whole_and_cannot_be_drawn_without_the_salt():
    """views.private_mask on 2,000 clusters of 3 rows: about the share (within 4 standard deviations of a binomial),
    every cluster wholly in one part, the same draw for the same salt and phase, another for another salt or
    phase."""
    import numpy as np

    from pipelines.serve.views import private_mask

    class Clustered:
        def clusters(self, table):
            return np.repeat(np.arange(2000), 3), "image"

    draw = private_mask(Clustered(), None, b"\x01" * 32, "test", 0.3)
    clusters = np.asarray(draw).reshape(2000, 3)
    assert (clusters.all(axis=1) | ~clusters.any(axis=1)).all()
    share = clusters[:, 0].mean()
    assert abs(share - 0.3) < 4 * (0.3 * 0.7 / 2000) ** 0.5, share
    assert draw == private_mask(Clustered(), None, b"\x01" * 32, "test", 0.3)
    assert draw != private_mask(Clustered(), None, b"\x02" * 32, "test", 0.3)
    assert draw != private_mask(Clustered(), None, b"\x01" * 32, "dev", 0.3)


@pytest.mark.slow
def test_a_private_part_is_scored_apart_and_shown_once_the_phase_has_ended(sealed_phases, tmp_path):
    """A hidden VQA-CP phase with half its images private, scored by a worker: the team is shown the public part's
    accuracy (the mean of the rows' VQA accuracies over the public rows, computed here from the task's per-row
    scores: the golden), its private part's only once the phase has ended; the final leaderboard ranks by it; the
    hosts' record is `vlbench evaluate`'s whole-split metrics."""
    import numpy as np

    from evaluator.sealed import read_answers
    from evaluator.splits import open_split
    from pipelines.serve.app import _record
    from pipelines.serve.board import board_rows
    from pipelines.serve.config import load_config
    from pipelines.serve.store import now_utc
    from pipelines.serve.stored import stored_path
    from pipelines.serve.views import private_mask
    from pipelines.serve.worker import score_one

    _, public, answers, predictions = sealed_phases["vqa-cp"]
    config_path = _write_config(tmp_path, {"vqa-cp": sealed_phases["vqa-cp"]})
    raw = yaml.safe_load(config_path.read_text())
    raw["phases"][0].update(private=0.5, ends="2030-01-01", min_subset=10)
    config_path.write_text(yaml.safe_dump(raw))
    config = load_config(config_path)
    phase, store = config.phases[0], config.store()
    store.add_team("Team A")
    team = store.teams()[0]
    sha256 = hashlib.sha256(predictions.read_bytes()).hexdigest()
    target = stored_path(config.storage, sha256, "p.json")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(predictions.read_bytes())
    store.submit(team, phase, sha256, "p.json", target.stat().st_size, now_utc())
    assert score_one(config, store, "w", 60)
    row = store.submissions()[0]
    task = get_task("vqa-cp")
    _, _, table = open_split(task, str(public), None, answers)
    given = {e["question_id"]: e["answer"] for e in json.loads(predictions.read_text())}
    accuracy = np.asarray(task.per_sample(table, [given[i] for i in task.ids(table)])["vqa_accuracy"])
    private = np.asarray(private_mask(task, table, read_answers(answers).salt, "vqa-cp", 0.5))
    assert 0 < private.sum() < len(private)
    seen = _record(row, False, config)
    assert seen["shown"]["part"] == "public" and seen["private"] is None
    # the golden, to the phase's 3 decimals (the service rounds VQA accuracy's 4 decimals again, and a mean summed in
    # another order may fall on the other side of a rounding boundary: one unit of the last decimal)
    assert seen["shown"]["scores"][0]["value"] == pytest.approx(100 * accuracy[~private].mean(), abs=1e-3)
    host = _record(row, True, config)
    assert host["private"]["scores"][0]["value"] == pytest.approx(100 * accuracy[private].mean(), abs=1e-3)
    assert "parts" not in host["metrics"] and host["metrics"]["accuracy"] == pytest.approx(100 * accuracy.mean(),
                                                                                           abs=1e-3)
    ended = dataclasses.replace(phase, ends=now_utc())
    config = dataclasses.replace(config, phases=(ended,))
    assert _record(row, False, config)["private"] == host["private"]
    assert board_rows(store, ended, final=True)[0]["scores"] == host["private"]["scores"]
    assert board_rows(store, ended)[0]["scores"] == seen["shown"]["scores"]


# -- the running service ---------------------------------------------------------------------------------------
@pytest.mark.slow
def test_a_served_score_is_evaluate_s_on_the_unsealed_build_for_every_benchmark(service, sealed_phases, cli,
                                                                                tmp_path):
    team = service["tokens"]["Team <A>"]
    for bench, (build, public, answers, predictions) in sealed_phases.items():
        task = get_task(bench)
        submitted = predictions
        if task.sealing.opaque_ids:  # named as the public half names its rows
            names = public_names(answers, task.default_split, task.id_field)
            submitted = tmp_path / f"{bench}-public.json"
            submitted.write_text(json.dumps([{**e, task.id_field: names[e[task.id_field]]}
                                             for e in json.loads(predictions.read_text())]))
        done = _submit(service, team, bench, submitted)
        assert done.returncode == 0 and "scored" in done.stdout, done.stderr
        code, out, err = cli("evaluate", bench, "--data", build, "--predictions", predictions, "--report",
                             tmp_path / bench)
        assert code == 0, err
        expected = json.loads((tmp_path / bench / "metrics.json").read_text())
        shown = json.loads(done.stdout.split("\n", 1)[1])
        assert [s["metric"] for s in shown["scores"]] == [h.key for h in task.headline]
        for score in shown["scores"]:
            value = expected[score["metric"]]
            assert score["value"] == (None if value is None else round(value, 3)), (bench, score)
            bounds = expected.get("intervals", {}).get("metrics", {}).get(score["metric"])
            headline = next(h for h in task.headline if h.key == score["metric"])
            assert score["interval"] == (None if bounds is None else shown_interval(value, bounds, 3, headline)), \
                (bench, score)


@pytest.mark.slow
def test_a_shown_interval_holds_nothing_the_rounded_score_does_not():
    """Hand-computed: an interval beside a score rounded to DECIMALS is centred on the rounded score, its half-width
    the bootstrap's larger one rounded up; two scores with the same rounding and width show the same interval
    (bounds rounded by themselves, [40.0, 60.0] and [40.1, 60.1] here, told them apart); kept within 0..100."""
    accuracy = get_task("vqa-v2").headline[0]
    assert shown_interval(51.26, [40.0, 60.0], 1, accuracy) == [40.0, 62.6]
    assert shown_interval(51.21, [40.04, 60.04], 0, accuracy) == shown_interval(51.29, [40.12, 60.12], 0, accuracy) \
        == [39.0, 63.0]
    assert shown_interval(99.6, [98.2, 100.0], 0, accuracy) == [98.0, 100.0]
    assert shown_interval(0.4, [0.0, 1.9], 0, accuracy) == [0.0, 2.0]
    mae = get_task("disco").headline[1]  # lower is better, no top
    assert shown_interval(101.2, [95.0, 108.3], 0, mae) == [93.0, 109.0]


@pytest.mark.slow
def test_a_refused_submission_costs_nothing_and_limits_are_exact(service, sealed_phases, tmp_path):
    """per_day 3: a refused submission (an empty list) is one line on the team's record and counts against no
    limit; three good ones are scored; the fourth is refused at the door (429) without being recorded."""
    team = service["tokens"]["team b"]
    bad = tmp_path / "bad.json"
    bad.write_text("[]")
    done = _submit(service, team, "disco", bad)
    assert done.returncode == 2 and "refused" in done.stderr and "bad.json" in done.stderr, done.stderr
    predictions = sealed_phases["disco"][3]
    for _ in range(3):
        done = _submit(service, team, "disco", predictions)
        assert done.returncode == 0, done.stderr
    done = _submit(service, team, "disco", predictions)
    assert_one_error_line(done.returncode, done.stderr, ["429", "3 submission(s) allowed", "does not count"])
    mine = _get(service, team, "/api/v1/submissions?phase=disco").json()["submissions"]
    assert [s["status"] for s in mine] == ["scored"] * 3 + ["refused"]
    assert mine[-1]["error"].startswith("bad.json: ") and "metrics" not in mine[0]
    stored = {p.name for p in (service["folder"] / "store" / "submissions").iterdir()}
    assert len({s["sha256"] for s in mine}) == 2 and {f"{s['sha256']}.json" for s in mine} <= stored


def test_a_bad_file_followed_at_once_by_good_ones_costs_nothing(service, sealed_phases, tmp_path):
    """per_day 3, concurrent 2: three bad files and a good one sent at once, none waiting for its score. Before, a
    refused submission counted while it was still queued, so the third or the fourth got 429 (the guide says a
    refused one costs nothing); now an upload over a limit only because some counted ones are still being scored
    waits for them, and the good one is taken and scored."""
    token = _add_team(service["config"], "team hasty")
    bodies = [b"[]" + b" " * k for k in range(3)] + [sealed_phases["vqa-v2"][3].read_bytes()]  # 3 different bad files
    sent = [httpx.post(f"{service['url']}/api/v1/phases/vqa-v2/submissions", content=body, timeout=120,
                       headers={"Authorization": f"Bearer {token}", "X-Vlbench-Filename": "p.json"})
            for body in bodies]  # one after the other, at once
    assert [r.status_code for r in sent] == [202] * 4, [r.text for r in sent]
    good = _get(service, token, f"/api/v1/submissions/{sent[-1].json()['id']}?wait=60").json()
    assert good["status"] == "scored", good
    mine = _get(service, token, "/api/v1/submissions?phase=vqa-v2").json()["submissions"]
    assert [s["status"] for s in mine] == ["scored"] + ["refused"] * 3


@pytest.mark.slow
def test_a_team_sees_its_own_and_a_host_sees_every_submission(service, sealed_phases):
    host, a, b = (service["tokens"][k] for k in ("hosts", "Team <A>", "team b"))
    assert _submit(service, a, "vqa-v2", sealed_phases["vqa-v2"][3]).returncode == 0
    theirs = _get(service, a, "/api/v1/submissions?phase=vqa-v2").json()["submissions"][0]
    assert _get(service, b, f"/api/v1/submissions/{theirs['id']}").status_code == 404
    assert _get(service, None, "/api/v1/submissions").status_code == 401
    assert _get(service, "vlb_000000000000_" + "x" * 43, "/api/v1/submissions").status_code == 401
    seen = _get(service, host, f"/api/v1/submissions/{theirs['id']}").json()
    assert seen["team"] == "Team <A>" and seen["metrics"]["benchmark"] == "vqa-v2" and seen["attempts"] == 1
    assert "metrics" not in theirs and set(theirs["shown"]) == {"scores", "rounding"}


@pytest.mark.slow
def test_an_upload_over_the_limit_is_refused_and_nothing_is_recorded(service):
    token = service["tokens"]["team b"]
    before = _get(service, token, "/api/v1/submissions").json()["submissions"]

    def body():
        for _ in range(40):
            yield b" " * (1 << 16)  # 2.5 MB, streamed without a length: the limit is 1 MB

    response = httpx.post(f"{service['url']}/api/v1/phases/vcr/submissions", content=body(), timeout=60,
                          headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 413 and "1 MB" in response.json()["error"]
    assert _get(service, token, "/api/v1/submissions").json()["submissions"] == before
    assert not list((service["folder"] / "store" / "incoming").iterdir())
    with sqlite3.connect(service["folder"] / "store" / "serve.sqlite3") as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def _rows(folder: Path) -> list[dict]:
    """The submissions as the service's database holds them (SQLite or PostgreSQL, as its config says)."""
    from pipelines.serve.config import load_config

    store = load_config(folder / "challenge.yaml").store()
    return [dict(store.submission(r["id"])) for r in reversed(store.submissions())]


def _statuses(folder: Path) -> list[str]:
    """The submissions' statuses, read only (no schema check, no write lock: the service may be stopped holding
    one)."""
    from pipelines.serve.config import load_config

    config = load_config(folder / "challenge.yaml")
    if config.database:
        import psycopg

        with psycopg.connect(config.database, connect_timeout=10) as db:
            return [r[0] for r in db.execute("SELECT status FROM submissions ORDER BY id")]
    with sqlite3.connect(f"file:{config.storage / 'serve.sqlite3'}?mode=ro", uri=True, timeout=10) as db:
        return [r[0] for r in db.execute("SELECT status FROM submissions ORDER BY id")]


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_kill_9_mid_score_and_mid_upload_loses_nothing_and_scores_once(backend, sealed_phases, request, tmp_path):
    """The whole service (web process and worker) killed with SIGKILL while a submission is being scored, and again
    while a file is being uploaded; restarted: every accepted submission is scored exactly once (the interrupted
    one taken over when its lease lapsed: a second attempt, the same metrics), the cut-off upload was never
    recorded, and the per-day limit counts each submission once."""
    phases = {"vqa-cp": sealed_phases["vqa-cp"]}
    database = {"database": request.getfixturevalue("postgres")()} if backend == "postgresql" else {}
    config = _write_config(tmp_path, phases, lease_seconds=3, **database)
    raw = yaml.safe_load(config.read_text())
    raw["phases"][0]["limits"] = {"per_day": 9, "concurrent": 20}
    config.write_text(yaml.safe_dump(raw))
    token = _add_team(config, "team k")
    headers = {"Authorization": f"Bearer {token}", "X-Vlbench-Filename": "p.json"}
    body = phases["vqa-cp"][3].read_bytes()
    running = Running(config)
    try:
        accepted = [httpx.post(f"{running.url}/api/v1/phases/vqa-cp/submissions", content=body, headers=headers,
                               timeout=30) for _ in range(8)]
        assert [r.status_code for r in accepted] == [202] * 8
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # the rows read with the service stopped, killed while still stopped:
            os.killpg(running.process.pid, signal.SIGSTOP)  # what was read is what it leaves, however fast it is
            if "scoring" in _statuses(tmp_path):
                break
            os.killpg(running.process.pid, signal.SIGCONT)
            time.sleep(0.005)
        running.kill()
    finally:
        running.stop()
    at_kill = _rows(tmp_path)
    interrupted = [r["id"] for r in at_kill if r["status"] == "scoring"]
    assert len(at_kill) == 8 and len(interrupted) == 1 and any(r["status"] == "queued" for r in at_kill), at_kill

    running = Running(config)  # restarted
    try:
        def slow_body():
            yield body[:100]
            time.sleep(60)  # the server is killed meanwhile
            yield body[100:]

        def upload():
            try:
                httpx.post(f"{running.url}/api/v1/phases/vqa-cp/submissions", content=slow_body(), timeout=120,
                           headers=headers)
            except httpx.HTTPError:
                pass  # the connection drops: the team sees it and submits again

        import threading

        uploader = threading.Thread(target=upload, daemon=True)
        uploader.start()
        time.sleep(1.5)
        running.kill()
        # what the second kill cut off while being scored (the worker may have taken one up by then, or not: how
        # fast it starts is the machine's): each such submission is taken over too, one more attempt
        before = {r["id"]: r["attempts"] for r in at_kill}  # a row still marked from the first kill is not cut again
        again = [r["id"] for r in _rows(tmp_path) if r["status"] == "scoring" and r["attempts"] > before[r["id"]]]
        running = Running(config)  # restarted again
        deadline = time.monotonic() + 120
        while any(r["status"] != "scored" for r in _rows(tmp_path)) and time.monotonic() < deadline:
            time.sleep(0.2)
        rows = _rows(tmp_path)
        assert len(rows) == 8 and all(r["status"] == "scored" for r in rows), rows
        assert [r["attempts"] for r in rows] == [1 + (r["id"] in interrupted) + (r["id"] in again) for r in rows]
        assert len({r["metrics"] for r in rows}) == 1 and json.loads(rows[0]["metrics"])["benchmark"] == "vqa-cp"
        ninth = httpx.post(f"{running.url}/api/v1/phases/vqa-cp/submissions", content=body, headers=headers,
                           timeout=30)
        tenth = httpx.post(f"{running.url}/api/v1/phases/vqa-cp/submissions", content=body, headers=headers,
                           timeout=30)
        assert (ninth.status_code, tenth.status_code) == (202, 429), tenth.text
    finally:
        running.stop()


@pytest.mark.slow
def test_the_reveal_publishes_what_anyone_needs_to_check_and_rescore(service, sealed_phases, cli, tmp_path):
    """After the end (here `--before-end`): each phase's answer file verifies against its public half's commitment,
    and `vlbench evaluate` of every revealed submission with it gives the metrics the service recorded."""
    code, _, err = cli("serve", "reveal", service["config"], "--out", tmp_path / "revealed")
    assert_one_error_line(code, err, ["has not ended", "--before-end"])
    code, out, err = cli("serve", "reveal", service["config"], "--out", tmp_path / "revealed", "--before-end")
    assert code == 0, err
    record = json.loads((tmp_path / "revealed" / "reveal.json").read_text())
    rescored = 0
    for name, phase in record["phases"].items():
        _, public, _, _ = sealed_phases[phase["benchmark"]]
        answers = tmp_path / "revealed" / name / "answers.zip"
        code, _, err = cli("verify", public, "--answers", answers)
        assert code == 0, err
        for entry in phase["submissions"]:
            report = tmp_path / "rescored" / str(entry["id"])
            code, _, err = cli("evaluate", phase["benchmark"], "--data", public, "--answers", answers,
                               "--predictions", tmp_path / "revealed" / name / entry["file"], "--report", report)
            assert code == 0, err
            again = json.loads((report / "metrics.json").read_text())
            assert {k: v for k, v in again.items() if k != "predictions"} == \
                {k: v for k, v in entry["metrics"].items() if k != "predictions"}
            rescored += 1
    assert rescored >= len(sealed_phases)  # every benchmark's phase has at least one scored submission


@pytest.mark.slow
def test_the_ladder_shows_a_new_score_only_when_it_beats_the_best(service, sealed_phases, tmp_path):
    """Parameter-free Ladder on VQA-CP: the first submission is released (rounded to 1/n of the range, n the
    questions scored); the same file again does not beat itself; a worse one (every answer wrong) is not shown: the
    best is shown again, with no interval; the host sees the state, the team does not."""
    team, host = service["tokens"]["Team <A>"], service["tokens"]["hosts"]
    predictions = sealed_phases["vqa-cp"][3]
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps([{**e, "answer": "zzz"} for e in json.loads(predictions.read_text())]))
    views = []
    for path in (predictions, predictions, wrong):
        done = _submit(service, team, "ladder", path)
        assert done.returncode == 0, done.stderr
        views.append(json.loads(done.stdout.split("\n", 1)[1]))
    assert [v["ladder"]["improved"] for v in views] == [True, False, False]
    assert views[0]["scores"] == views[1]["scores"] == views[2]["scores"]
    assert views[0]["scores"][0]["interval"] is None and views[0]["scores"][0]["metric"] == "accuracy"
    mine = _get(service, team, "/api/v1/submissions?phase=ladder").json()["submissions"]
    assert "ladder" not in mine[0] and "best_score" not in json.dumps(mine)
    state = _get(service, host, f"/api/v1/submissions/{mine[0]['id']}").json()["ladder"]
    assert state["best_of"] == mine[-1]["id"] and state["threshold"] > 0
    exact = json.loads(_get(service, host, f"/api/v1/submissions/{mine[-1]['id']}").text)["metrics"]["accuracy"]
    assert state["best_score"] == exact and abs(views[0]["scores"][0]["value"] - exact) <= state["step"] / 2 + 1e-9



def test_the_rate_limit_is_a_token_bucket(monkeypatch):
    """3 a minute: three requests pass, the fourth waits 20 s (one token every 20 s), one token back after 20 s;
    keys are separate."""
    from pipelines.serve import app

    now = [1000.0]
    monkeypatch.setattr(app.time, "monotonic", lambda: now[0])
    limit = app.RateLimit(3)
    assert [limit.wait("a") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert limit.wait("a") == pytest.approx(20.0) and limit.wait("b") == 0.0
    now[0] += 20.0
    assert limit.wait("a") == 0.0 and limit.wait("a") == pytest.approx(20.0)


def _signed_in(service, token: str) -> httpx.Client:
    """A client signed in on the pages with a token (the session's cookie kept), as a browser on the site is."""
    client = httpx.Client(base_url=service["url"], timeout=30)
    done = client.post("/login", data={"token": token}, headers={"Origin": service["url"]})
    assert done.status_code == 303 and "vlbench_session" in client.cookies, done.text
    return client


def _csrf(client: httpx.Client) -> str:
    import re

    return re.search(r'name="csrf" value="([^"]+)"', client.get("/team").text).group(1)


@pytest.mark.slow
def test_a_team_uploads_through_the_page_sees_it_scored_and_the_leaderboard_changes(service, sealed_phases,
                                                                                  tmp_path):
    """In a real headless Chromium: a new team (its name is markup, shown as text) signs in with its token, uploads
    its predictions through the form, sees the submission scored on its page (the page reloads itself while it
    waits) with the score the API records, and the phase's public leaderboard gains its row with that score. No
    page breaks its Content-Security-Policy."""
    if not CHROMIUM.exists():
        pytest.skip("Debian's chromium is not installed (`make test` installs it: apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    name, url, phase = "Team <img src=x onerror=alert(1)>", service["url"], "vqa-cp"
    token = _add_team(service["config"], name)
    before = httpx.get(f"{url}/leaderboard/{phase}/board.json", timeout=30).json()["rows"]
    assert name not in [r["team"] for r in before]
    with sync_playwright() as p:
        browser = launch_chromium(p, CHROMIUM)
        page = browser.new_page(viewport={"width": 1200, "height": 800})
        problems = []
        page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: problems.append(str(e)))
        page.goto(f"{url}/")
        phases = yaml.safe_load(service["config"].read_text())["phases"]
        assert page.title() == "Test challenge" and page.locator("#phases tbody tr").count() == len(phases)
        with page.expect_navigation():
            page.locator("nav a", has_text="Sign in").click()
        page.fill("input[name=token]", token)
        with page.expect_navigation():
            page.locator("form button[type=submit]", has_text="Sign in").click()
        assert page.url == f"{url}/team" and page.title() == f"Submissions of {name}"
        assert page.locator("img").count() == 0 and name in page.locator("h1").inner_text()
        page.select_option("select[name=phase]", phase)
        page.set_input_files("input[name=file]", str(sealed_phases[phase][3]))
        with page.expect_navigation():
            page.locator("form.upload button").click()
        assert "received" in page.locator("#received").inner_text()
        page.locator("#submissions tbody tr").first.locator("td.status-scored").wait_for(timeout=180_000)
        recorded = _get(service, token, f"/api/v1/submissions?phase={phase}").json()["submissions"]
        assert len(recorded) == 1 and recorded[0]["status"] == "scored"
        value = recorded[0]["shown"]["scores"][0]["value"]
        assert f"{value:.3f}" in page.locator("#submissions tbody tr").first.inner_text()
        page.screenshot(path=str(tmp_path / "team.png"), full_page=True)
        page.locator("nav a", has_text=f"Leaderboard: {phase}").click()
        page.wait_for_load_state()
        rows = page.locator("#leaderboard tbody tr")
        assert rows.count() == len(before) + 1
        mine = page.locator("#leaderboard tbody tr", has_text="Team <img")
        assert mine.locator("td").nth(2).inner_text().startswith(f"{value:.3f}")
        assert page.evaluate("document.styleSheets.length") == 1  # its own style sheet, allowed by its CSP
        page.screenshot(path=str(tmp_path / "leaderboard.png"), full_page=True)
        browser.close()
    assert not problems, problems
    after = httpx.get(f"{url}/leaderboard/{phase}/board.json", timeout=30).json()["rows"]
    assert [r["scores"][0]["value"] for r in after if r["team"] == name] == [value]


@pytest.mark.slow
def test_the_page_forms_refuse_cross_site_requests_and_show_a_team_its_own_only(service, sealed_phases):
    """Signing in from another site, or with a wrong token, opens no session; an upload without the session's CSRF
    token, with a wrong one, or sent from another site is refused and records nothing; the right form is recorded;
    a team reads no other team's submission and not the host view; signing out needs the token too. Every page
    carries the CSP that lets forms post to the service alone."""
    url = service["url"]
    token = _add_team(service["config"], "team forms")
    for headers in ({"Origin": "http://evil.example"}, {"Sec-Fetch-Site": "cross-site"}):
        refused = httpx.post(f"{url}/login", data={"token": token}, headers=headers, timeout=30)
        assert refused.status_code == 403 and "vlbench_session" not in refused.cookies
    wrong = httpx.post(f"{url}/login", data={"token": token[:-2] + "xx"}, timeout=30)
    assert wrong.status_code == 401 and "names no team" in wrong.text and "vlbench_session" not in wrong.cookies
    client = _signed_in(service, token)
    page = client.get("/team")
    assert "form-action 'self'" in page.headers["content-security-policy"] and page.headers["x-frame-options"] == "DENY"
    csrf = _csrf(client)
    predictions = sealed_phases["vqa-v2"][3].read_bytes()

    def upload(fields: dict, headers: dict | None = None, data: bytes = predictions):
        return client.post("/team/submit", data=fields, files={"file": ("mine.json", data, "application/json")},
                           headers=headers or {"Origin": url})

    for fields, headers in (({"phase": "vqa-v2"}, None), ({"phase": "vqa-v2", "csrf": csrf[:-1] + "x"}, None),
                            ({"phase": "vqa-v2", "csrf": csrf}, {"Origin": "http://evil.example"})):
        refused = upload(fields, headers)
        assert refused.status_code == 403 and "did not come from this site" in refused.text
    assert _get(service, token, "/api/v1/submissions").json()["submissions"] == []
    too_big = upload({"phase": "vqa-v2", "csrf": csrf}, data=b" " * (2 << 20))
    assert too_big.status_code == 413 and "1 MB" in too_big.text
    assert _get(service, token, "/api/v1/submissions").json()["submissions"] == []
    assert not list((service["folder"] / "store" / "incoming").iterdir())
    done = upload({"phase": "vqa-v2", "csrf": csrf})
    assert done.status_code == 303 and done.headers["location"].startswith("/team?received=")
    mine = _get(service, token, "/api/v1/submissions").json()["submissions"]
    assert [(s["phase"], s["filename"]) for s in mine] == [("vqa-v2", "mine.json")]
    theirs = [s["id"] for s in _get(service, service["tokens"]["hosts"], "/api/v1/submissions").json()["submissions"]
              if s["team"] != "team forms"]
    assert theirs and all(client.get(f"/team/submissions/{i}").status_code == 404 for i in theirs)
    assert client.get(f"/team/submissions/{mine[0]['id']}").status_code == 200
    assert client.get("/host").status_code == 403
    assert client.post("/logout", data={}, headers={"Origin": url}).status_code == 403
    assert client.post("/logout", data={"csrf": csrf}, headers={"Origin": url}).status_code == 303
    assert client.get("/team").status_code == 303  # signed out: back to the sign-in page
    client.close()


@pytest.mark.slow
def test_the_host_view_lists_every_submission_with_its_worker_timings_and_log(service, sealed_phases, tmp_path):
    bad = tmp_path / "broken.json"
    bad.write_text("[]")
    assert _submit(service, service["tokens"]["team b"], "vcr", bad).returncode == 2
    host = _signed_in(service, service["tokens"]["hosts"])
    page = host.get("/host")
    listed = _get(service, service["tokens"]["hosts"], "/api/v1/submissions").json()["submissions"]
    assert page.status_code == 200 and all(f'data-id="{s["id"]}"' in page.text for s in listed)
    refused = next(s for s in listed if s["filename"] == "broken.json")
    assert refused["log"] and refused["worker"] and refused["attempts"] == 1 and refused["seconds"] is not None
    assert f"{refused['seconds']:.2f}" in page.text and refused["worker"] in page.text
    counts = _get(service, None, "/api/v1/status").json()["queue"]
    assert f'<td data-status="refused">{counts["refused"]}</td>' in host.get("/").text
    host.close()


@pytest.mark.slow
def test_every_route_answers_every_caller_without_a_sealed_answer(service, sealed_phases, tmp_path):
    """Every route of the application, called with the host's token, a team's and none (and a bad submission, whose
    refusal line is the team's to read): no response holds a sealed answer of any phase (the answer files' text
    answers of 6 or more characters: GQA's answers and full answers, VQA's, VisDial's), nor a token; what a team or
    an anonymous caller reads holds no sealed text value of 10 or more characters at all (question types, GQA's
    programs and records: the host's metrics break scores down by types). Then one address calling too often gets
    429 with Retry-After."""
    import io
    import zipfile

    import pyarrow.parquet as pq

    sealed_text, answers_text = set(), set()
    for _, _, answers, _ in sealed_phases.values():
        with zipfile.ZipFile(answers) as archive:
            for name in archive.namelist():
                if name.endswith(".parquet"):
                    table = pq.read_table(io.BytesIO(archive.read(name)))
                    for column in table.column_names:
                        if column.startswith("vlbench_") or column in ("id", "question_id", "annot_id"):
                            continue
                        for value in table.column(column).to_pylist():
                            if isinstance(value, str) and len(value) >= 6:
                                if len(value) >= 10:  # shorter types ("is this") are words of English errors
                                    sealed_text.add(value)
                                if "answer" in column.lower() and not column.endswith("_type"):
                                    answers_text.add(value)
    assert len(answers_text) > 100
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"id": "x", "scores": [0.1, 0.2]}]))
    done = _submit(service, service["tokens"]["Team <A>"], "vcr-visor", bad)
    assert done.returncode == 2
    from pipelines.serve.app import create_app
    from pipelines.serve.config import load_config

    routes = [r.path for r in create_app(load_config(service["config"])).routes]
    ids = [s["id"] for s in _get(service, service["tokens"]["hosts"], "/api/v1/submissions").json()["submissions"]]
    phases = [p["name"] for p in yaml.safe_load(service["config"].read_text())["phases"]]
    bodies = {}
    for caller in ("hosts", "Team <A>", "team b", None):
        token, seen = service["tokens"].get(caller), bodies.setdefault(caller, [])
        pages = _signed_in(service, token) if token else httpx.Client(base_url=service["url"], timeout=30)
        for route in routes:
            if route.startswith("/api/"):  # the JSON API, by the bearer token
                if "{id}" in route:
                    seen += [_get(service, token, route.replace("{id}", str(i))).text for i in ids]
                elif "{phase}" in route:
                    headers = {"Authorization": f"Bearer {token}"} if token else {}
                    seen.append(httpx.post(f"{service['url']}{route.replace('{phase}', 'gqa-ood')}", content=b"[]",
                                           headers=headers, timeout=30).text)
                else:
                    seen.append(_get(service, token, route).text)
            elif route == "/leaderboard":  # the pages, by the session's cookie
                seen += [pages.get(f"/leaderboard/{p}/{f}").text for p in phases for f in ("", "board.json")]
            elif "{id}" in route:
                seen += [pages.get(route.replace("{id}", str(i))).text for i in ids]
            else:
                seen.append(pages.get(route.replace("{name}", "site.css")).text)
        pages.close()
    assert all(len(seen) >= len(routes) for seen in bodies.values()) and "metrics" in " ".join(bodies["hosts"])
    assert "Host view" in " ".join(bodies["hosts"]) and "Host view" not in " ".join(bodies["team b"])
    leaked = [s for s in answers_text if any(s in body for seen in bodies.values() for body in seen)]
    assert not leaked, leaked[:5]
    leaked = [s for s in sealed_text if any(s in body for caller in ("Team <A>", "team b", None)
                                            for body in bodies[caller])]
    assert not leaked, leaked[:5]
    assert not any(token.split("_", 2)[2] in body for token in service["tokens"].values() for seen in bodies.values()
                   for body in seen)
    answers = [httpx.get(f"{service['url']}/api/v1/status", timeout=10) for _ in range(200)]
    refused = [r for r in answers if r.status_code == 429]
    assert refused and refused[0].headers["retry-after"].isdigit() and "too many requests" in refused[0].text


@pytest.mark.slow
def test_several_workers_on_one_postgresql_never_score_a_submission_twice(postgres, sealed_phases, tmp_path):
    """Three workers beside the web process and two more started apart (`vlbench serve worker`, as on another
    machine), all against one PostgreSQL: 18 submissions from three teams sent at once are each claimed once
    (one attempt each), scored once, and the workers shared them."""
    phases = {"disco": sealed_phases["disco"]}
    # 18 uploads at once from one address: as many in progress as that
    config = _write_config(tmp_path, phases, database=postgres(), uploads_per_token=6, uploads_per_address=18)
    raw = yaml.safe_load(config.read_text())
    raw["phases"][0]["limits"] = {"per_day": 6, "concurrent": 6}
    config.write_text(yaml.safe_dump(raw))
    tokens = [_add_team(config, f"team {k}") for k in range(3)]
    body = phases["disco"][3].read_bytes()
    running = Running(config, workers=3)
    others = subprocess.Popen([*VLBENCH, "serve", "worker", str(config), "--workers", "2"], cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        import concurrent.futures

        def send(token: str) -> int:
            return httpx.post(f"{running.url}/api/v1/phases/disco/submissions", content=body, timeout=60,
                              headers={"Authorization": f"Bearer {token}", "X-Vlbench-Filename": "p.json"}).status_code

        with concurrent.futures.ThreadPoolExecutor(18) as pool:
            assert list(pool.map(send, tokens * 6)) == [202] * 18
        deadline = time.monotonic() + 180
        while any(r["status"] != "scored" for r in _rows(tmp_path)) and time.monotonic() < deadline:
            time.sleep(0.3)
        rows = _rows(tmp_path)
        assert len(rows) == 18 and all(r["status"] == "scored" and r["attempts"] == 1 for r in rows), rows
        assert len({r["metrics"] for r in rows}) == 1 and len({r["worker"] for r in rows}) >= 2
        assert httpx.post(f"{running.url}/api/v1/phases/disco/submissions", content=body, timeout=60,
                          headers={"Authorization": f"Bearer {tokens[0]}"}).status_code == 429
    finally:
        os.killpg(others.pid, signal.SIGTERM)
        others.wait(30)
        running.stop()



# -- trust: forwarding headers, revoked tokens, stored files, names ---------------------------------------------
def test_forwarding_headers_are_believed_from_the_trusted_proxies_only(sealed_phases, tmp_path):
    """5 requests a minute per caller. Without `trusted_proxies`, a fresh X-Forwarded-For on every request from one
    machine still meets its one bucket (before the fix uvicorn believed any loopback peer's header: 8 x 200); with
    the proxy named, each forwarded client has its own bucket, and one client is limited whatever it connects
    through."""
    seen = {}
    for trusted in (False, True):
        folder = tmp_path / f"trusted-{trusted}"
        folder.mkdir()
        config = _write_config(folder, {"vqa-cp": sealed_phases["vqa-cp"]}, requests_per_minute=5,
                               **({"trusted_proxies": ["127.0.0.1"]} if trusted else {}))
        running = Running(config, workers=0)
        try:
            def status(client: str) -> int:
                return httpx.get(f"{running.url}/api/v1/status", headers={"X-Forwarded-For": client},
                                 timeout=30).status_code

            seen[trusted] = ([status(f"203.0.113.{k}") for k in range(8)], [status("198.51.100.7") for _ in range(8)])
        finally:
            running.stop()
    assert 429 in seen[False][0] and 429 in seen[False][1]
    assert seen[True][0] == [200] * 8 and seen[True][1][:5] == [200] * 5 and 429 in seen[True][1]


def test_a_revoked_or_rotated_token_ends_with_every_session_it_opened(service, cli):
    """Before: `serve team` had only `add`, and a token's row deleted by hand left its page session working."""
    config = service["config"]
    token = _add_team(config, "team leaked")
    first = _signed_in(service, token)
    second = None
    try:
        assert first.get("/team").status_code == 200
        assert _get(service, token, "/api/v1/submissions").status_code == 200
        done = subprocess.run([*VLBENCH, "serve", "team", "rotate", "team leaked", "--config", str(config)], cwd=ROOT,
                              capture_output=True, text=True, timeout=120)
        new = done.stdout.strip()
        assert done.returncode == 0 and new.startswith("vlb_") and new != token and token not in done.stderr
        assert _get(service, token, "/api/v1/submissions").status_code == 401
        assert first.get("/team").status_code == 303  # back to the sign-in page: the session ended with its token
        assert _get(service, new, "/api/v1/submissions").status_code == 200
        second = _signed_in(service, new)
        with sqlite3.connect(service["folder"] / "store" / "serve.sqlite3") as db:  # the token's row removed by hand
            db.execute("DELETE FROM tokens WHERE team = (SELECT id FROM teams WHERE name = 'team leaked')")
        assert second.get("/team").status_code == 303
        host = _add_team(config, "second host", host=True)  # a host's token alike
        assert _get(service, host, "/api/v1/submissions").status_code == 200
        code, out, err = cli("serve", "team", "revoke", "second host", "--config", config)
        assert code == 0 and out == "" and "ended" in err
        assert _get(service, host, "/api/v1/submissions").status_code == 401
        code, _, err = cli("serve", "team", "revoke", "no such team", "--config", config)
        assert_one_error_line(code, err, ["'no such team'", "no such team (the challenge has"])
    finally:
        first.close()
        if second is not None:
            second.close()


def test_a_link_or_changed_bytes_at_a_content_address_are_never_scored_nor_revealed(sealed_phases, tmp_path):
    """A link planted at the address of a submission's bytes made the service discard the upload and score the
    link's file; a stored file whose bytes changed was scored and revealed. Now the upload replaces the link, and
    changed bytes are refused as the service's fault (costing the team nothing) and stop the reveal."""
    from core.errors import ParamsError
    from pipelines.serve.config import load_config
    from pipelines.serve.reveal import reveal
    from pipelines.serve.store import StoreUnavailable, now_utc
    from pipelines.serve.stored import stored_path
    from pipelines.serve.uploads import Upload, accept
    from pipelines.serve.worker import score_one

    predictions = sealed_phases["vqa-cp"][3]
    config = load_config(_write_config(tmp_path, {"vqa-cp": sealed_phases["vqa-cp"]}))
    phase, store = config.phases[0], config.store()
    store.add_team("Team A")
    team = store.teams()[0]
    data = predictions.read_bytes()
    sha256 = hashlib.sha256(data).hexdigest()
    target = stored_path(config.storage, sha256, "p.json")
    target.parent.mkdir(parents=True, exist_ok=True)
    planted = tmp_path / "planted.json"
    planted.write_text("[]")
    target.symlink_to(planted)
    (config.storage / "incoming").mkdir(exist_ok=True)
    upload = Upload(config.storage / "incoming", config.max_upload_bytes)
    upload.write(data)
    accept(config, store, team, phase, upload, "p.json")
    assert not target.is_symlink() and target.read_bytes() == data and planted.read_text() == "[]"
    assert score_one(config, store, "w", 60)
    scored = store.submissions()[0]
    assert scored["status"] == "scored", scored["error"]
    target.write_bytes(data[:-1] + b" ")  # the stored bytes changed behind the service's back
    store.submit(team, phase, sha256, "p.json", len(data), now_utc())
    assert score_one(config, store, "w", 60)
    refused = store.submissions()[0]
    assert refused["status"] == "refused" and "inside the service" in refused["error"]
    assert "no longer match the SHA-256" in refused["log"]
    with pytest.raises(ParamsError, match=f"submission {scored['id']}: .* no longer match.* nothing was revealed"):
        reveal(config, tmp_path / "revealed", before_end=True)
    assert not (tmp_path / "revealed").exists()
    # a folder at another upload's address: the upload is not accepted (503, was a 500), and nothing recorded
    other = data.replace(b"]", b" ]", 1)
    folder = stored_path(config.storage, hashlib.sha256(other).hexdigest(), "p.json")
    folder.mkdir()
    upload = Upload(config.storage / "incoming", config.max_upload_bytes)
    upload.write(other)
    with pytest.raises(StoreUnavailable, match="a folder lies at the submission's address") as refused:
        accept(config, store, team, phase, upload, "p.json")
    assert refused.value.status == 503 and len(store.submissions()) == 2 and folder.is_dir()


def test_a_non_ascii_file_name_is_kept_as_the_team_sent_it(service, sealed_phases, tmp_path):
    """`vlbench submit` sends the name as an RFC 8187 ext-value and the service decodes it (before: a traceback in
    the client; a raw UTF-8 header was shown as mojibake, `rÃ©sultats`)."""
    import shutil

    token = _add_team(service["config"], "team unicode")
    path = tmp_path / "résultats été.json"
    shutil.copyfile(sealed_phases["vqa-cp"][3], path)
    done = _submit(service, token, "vqa-cp", path, wait=0)
    assert done.returncode == 0, done.stderr
    assert _get(service, token, "/api/v1/submissions").json()["submissions"][0]["filename"] == "résultats été.json"
    raw = httpx.post(f"{service['url']}/api/v1/phases/vqa-cp/submissions", content=path.read_bytes(),
                     headers={"Authorization": f"Bearer {token}", "X-Vlbench-Filename": "résumé.json".encode()},
                     timeout=30)  # a client sending the name's UTF-8 bytes raw
    assert raw.status_code == 202, raw.text  # the phase takes 2 at once
    assert _get(service, token, f"/api/v1/submissions/{raw.json()['id']}").json()["filename"] == "résumé.json"


def _incoming(folder: Path) -> list[Path]:
    return sorted((folder / "store" / "incoming").glob(".upload-*"))


def _until(check, seconds: float = 30.0):
    """Wait (bounded) for `check()` to hold; its last value."""
    deadline = time.monotonic() + seconds
    while not (found := check()) and time.monotonic() < deadline:
        time.sleep(0.1)
    return found


def test_slow_clients_are_cut_off_and_uploads_in_progress_are_bounded(sealed_phases, tmp_path):
    """Before: a request head or an upload trickled a byte every 5 s was held open for ever (a staging file and two
    descriptors each; about 10,000 of them exhausted the process), and a token or an address could hold any number
    at once. Now: the head is cut at `header_seconds`, a body at `upload_idle_seconds` without a byte (408) or at
    `upload_seconds` in all, and a third upload of one token (a fourth from one address) is 429 while two (three)
    are in progress; every staging file is removed."""
    config = _write_config(tmp_path, {"vqa-cp": sealed_phases["vqa-cp"]}, header_seconds=3, upload_idle_seconds=3,
                           upload_seconds=10, uploads_per_token=2, uploads_per_address=3)
    tokens = [_add_team(config, name) for name in ("team slow", "team other")]
    running = Running(config, workers=0)
    address = ("127.0.0.1", int(running.url.rsplit(":", 1)[1]))
    opened: list[socket.socket] = []

    def upload(token: str) -> socket.socket:
        held = socket.create_connection(address, timeout=30)
        opened.append(held)
        held.sendall(f"POST /api/v1/phases/vqa-cp/submissions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}"
                     f"\r\nContent-Length: 100000\r\n\r\n[".encode())
        return held

    def answer(held: socket.socket) -> bytes:
        data = b""
        while chunk := held.recv(65536):
            data += chunk
        return data

    try:
        with socket.create_connection(address, timeout=30) as slow:  # a head, a byte a second
            slow.sendall(b"POST /api/v1/phases/vqa-cp/submissions HTTP/1.1\r\n")
            started, cut = time.monotonic(), False
            for _ in range(60):
                try:
                    slow.sendall(b"X")
                except OSError:
                    cut = True
                    break
                slow.settimeout(1.0)
                try:
                    if slow.recv(1024) == b"":
                        cut = True
                        break
                except TimeoutError:
                    pass
                except ConnectionError:  # closed while bytes were on their way: reset
                    cut = True
                    break
            assert cut and time.monotonic() - started < 30
        first, second = upload(tokens[0]), upload(tokens[0])
        assert len(_until(lambda: len(_incoming(tmp_path)) == 2 and _incoming(tmp_path))) == 2
        third = httpx.post(f"{running.url}/api/v1/phases/vqa-cp/submissions", content=b"[]", timeout=30,
                           headers={"Authorization": f"Bearer {tokens[0]}"})
        assert third.status_code == 429 and "this team's token" in third.json()["error"], third.text
        other = upload(tokens[1])
        assert len(_until(lambda: len(_incoming(tmp_path)) == 3 and _incoming(tmp_path))) == 3
        fourth = httpx.post(f"{running.url}/api/v1/phases/vqa-cp/submissions", content=b"[]", timeout=30,
                            headers={"Authorization": f"Bearer {tokens[1]}"})
        assert fourth.status_code == 429 and "this address" in fourth.json()["error"], fourth.text
        started = time.monotonic()
        for held in (first, other):  # they stop: cut after 3 s without a byte
            assert answer(held).startswith(b"HTTP/1.1 408"), "no 408"
        for _ in range(30):  # the second trickles a byte a second: cut at 10 s in all
            try:
                second.sendall(b" ")
            except OSError:
                break
            second.settimeout(1.0)
            try:
                if second.recv(65536).startswith(b"HTTP/1.1 408"):
                    break
            except TimeoutError:
                pass
        else:
            pytest.fail("a body trickled for 30 s was not cut at upload_seconds")
        assert time.monotonic() - started < 30
        assert _until(lambda: not _incoming(tmp_path))  # every staging file removed
    finally:
        for held in opened:
            held.close()
        running.stop()


# -- the workers' supervisor -------------------------------------------------------------------------------------
class _Stand:
    """A real process (`sleep`) standing in for a scoring worker, with the methods of multiprocessing.Process."""

    def __init__(self, seconds: float):
        self.popen = subprocess.Popen(["sleep", str(seconds)])
        self.pid, self.exitcode = self.popen.pid, None
        if seconds == 0:
            self.popen.wait(30)

    def is_alive(self) -> bool:
        return self.popen.poll() is None

    def kill(self) -> None:
        self.popen.kill()

    def terminate(self) -> None:
        self.popen.terminate()

    def join(self, timeout=None) -> None:
        try:
            self.exitcode = self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            pass


def test_a_score_past_its_time_or_memory_bound_replaces_the_worker_and_is_refused(sealed_phases, tmp_path):
    """The supervisor (pipelines/serve/supervisor.py) against real processes and a real SQLite store: a worker
    holding a submission longer than `score_seconds`, or past `score_memory_mb` resident, is killed, a new one
    takes its place, and the submission is refused in the line that names the bound (before: no bound at all; a
    1.49 MB .eval took a worker to 2.16 GB)."""
    from pipelines.serve.config import load_config
    from pipelines.serve.store import now_utc
    from pipelines.serve.supervisor import Supervisor

    config = load_config(_write_config(tmp_path, {"vqa-cp": sealed_phases["vqa-cp"]}))
    store = config.store()
    store.add_team("Team A")
    team, phase = store.teams()[0], config.phases[0]
    started: list[_Stand] = []

    def start(index: int):
        started.append(_Stand(60))
        return started[-1], f"stand-{len(started)}"

    for bound, needle in ((dict(score_seconds=1), "took longer than the limit of 1 s"),
                          (dict(score_memory_mb=0), "took more memory than the limit of 0 MB")):
        supervisor = Supervisor(dataclasses.replace(config, **bound), store, 1, start)
        try:
            name = supervisor.slots[0].name
            store.submit(team, phase, "b" * 64, "p.json", 2, now_utc())
            assert store.claim(name, 60)["worker"] == name
            if "score_seconds" in bound:  # claimed 10 s ago
                with sqlite3.connect(config.storage / "serve.sqlite3") as db:
                    db.execute("UPDATE submissions SET started = ? WHERE worker = ?",
                               ((now_utc() - __import__("datetime").timedelta(seconds=10)).isoformat(), name))
            supervisor.check()
            row = store.submissions()[0]
            assert row["status"] == "refused" and needle in row["error"] and "does not count" in row["error"]
            assert not started[-2].is_alive() and started[-1].is_alive() and supervisor.slots[0].name != name
        finally:
            supervisor.stop()


def test_a_worker_that_keeps_dying_is_started_again_then_given_up(sealed_phases, tmp_path, monkeypatch):
    """Before: `serve worker` exited 0 when one of its workers died and took the others down with it. Now a dead
    worker is started again, at most MAX_RESTARTS times in RESTART_WINDOW_SECONDS; then `serve worker` fails in one
    line (its other workers stopped)."""
    from pipelines.serve import supervisor as supervising
    from pipelines.serve.config import load_config

    monkeypatch.setattr(supervising, "CHECK_SECONDS", 0.01)
    config = load_config(_write_config(tmp_path, {"vqa-cp": sealed_phases["vqa-cp"]}))
    kinds = iter(["live", *["dead"] * 100])
    processes: list[_Stand] = []

    def start(index: int):
        processes.append(_Stand(60 if index == 0 else 0))  # worker 1 dies at once, every time
        next(kinds)
        return processes[-1], f"w{index}-{len(processes)}"

    supervisor = supervising.Supervisor(config, config.store(), 2, start)
    with pytest.raises(supervising.WorkersFailed, match="worker 1 died 6 times"):
        supervisor.run(fail_when_down=True)
    assert len(processes) == 2 + supervising.MAX_RESTARTS and processes[0].is_alive()
    supervisor.stop()
    assert not processes[0].is_alive()


def _workers_of(process: subprocess.Popen) -> list[int]:
    """The scoring worker processes a `vlbench serve` / `serve worker` started (its spawned children, not
    multiprocessing's resource tracker)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if not entry.name.isdigit() or int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) != \
                    process.pid:
                continue
            command = (entry / "cmdline").read_bytes()
        except (OSError, ValueError, IndexError):
            continue
        if b"multiprocessing" in command and b"resource_tracker" not in command:
            found.append(int(entry.name))
    return found


@pytest.mark.parametrize("command", ["serve", "serve worker"])
def test_a_killed_worker_is_replaced_and_shown_on_the_status(command, sealed_phases, tmp_path):
    """SIGKILL to the only scoring worker (what an OOM kill does): before, `serve` went on taking submissions that
    waited for ever and its status said nothing of workers; `serve worker` exited 0. Now a new worker takes its
    place and scores the next submission; /api/v1/status counts the workers alive."""
    config = _write_config(tmp_path, {"vqa-cp": sealed_phases["vqa-cp"]})
    token = _add_team(config, "team a")
    database = tmp_path / "store" / "serve.sqlite3"

    def names() -> set[str]:
        with sqlite3.connect(database) as db:
            return {r[0] for r in db.execute("SELECT name FROM workers")}

    web = Running(config, workers=1 if command == "serve" else 0)
    worker = None
    try:
        if command == "serve worker":
            worker = subprocess.Popen([*VLBENCH, "serve", "worker", str(config), "--workers", "1"], cwd=ROOT,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
        parent = web.process if worker is None else worker
        first = _until(lambda: names())
        pids = _until(lambda: _workers_of(parent))
        assert len(first) == 1 and len(pids) == 1, (first, pids)
        os.kill(pids[0], signal.SIGKILL)
        assert _until(lambda: len(names() - first) == 1, 120), "no worker took the killed one's place"
        assert parent.poll() is None  # still running
        assert _get({"url": web.url}, None, "/api/v1/status").json()["workers"]["alive"] >= 1
        done = _submit({"url": web.url}, token, "vqa-cp", sealed_phases["vqa-cp"][3], wait=120)
        assert done.returncode == 0 and "scored" in done.stdout, done.stdout + done.stderr
    finally:
        if worker is not None:
            os.killpg(worker.pid, signal.SIGTERM)
            worker.wait(30)
        web.stop()


# -- the records under faults: locked, gone, full, read-only ------------------------------------------------------
@pytest.fixture
def small_disk(tmp_path):
    """A file system of its own, 16 MiB of tmpfs mounted here (root only: the test runs as root in `make test`), so
    that it can be filled and made read-only; unmounted at the end."""
    folder = tmp_path / "disk"
    folder.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(folder)], capture_output=True,
                          text=True, timeout=30)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip()[:80]}): `make test` runs as root")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True, timeout=30)


def _fault_service(folder: Path, phases: dict, **top) -> tuple[Path, str]:
    config = _write_config(folder, phases, **top)
    raw = yaml.safe_load(config.read_text())
    raw["phases"][0]["limits"] = {"per_day": 50, "concurrent": 50}
    config.write_text(yaml.safe_dump(raw))
    return config, _add_team(config, "team a")


def _upload(url: str, token: str, body: bytes) -> httpx.Response:
    return httpx.post(f"{url}/api/v1/phases/vqa-cp/submissions", content=body, timeout=120,
                      headers={"Authorization": f"Bearer {token}", "X-Vlbench-Filename": "p.json"})


def test_a_full_or_read_only_disk_and_a_deleted_database_are_refused_in_a_line(sealed_phases, small_disk,
                                                                               tmp_path):
    """SQLite on a file system of its own. Before: a full disk answered 500 "Internal Server Error"; the database
    file deleted while running still took uploads (202), scored into the deleted file, and a restart began empty
    with no error ever shown. Now: 507 (full) or 503 (read-only, gone) with a line, nothing accepted, uploads
    taken again once the disk is back; a restart over a storage with submissions but no database is refused."""
    phases = {"vqa-cp": sealed_phases["vqa-cp"]}
    config, token = _fault_service(tmp_path, phases, storage=str(small_disk / "store"))
    body = sealed_phases["vqa-cp"][3].read_bytes()
    running = Running(config, workers=0)
    try:
        assert _upload(running.url, token, body).status_code == 202
        filler = small_disk / "filler"
        with open(filler, "wb") as out:  # the disk filled by something else
            try:
                while True:
                    out.write(b"\0" * (1 << 20))
                    out.flush()
            except OSError:
                pass
        full = _upload(running.url, token, body + b" ")
        assert full.status_code == 507 and "the disk is full" in full.json()["error"], full.text
        filler.unlink()
        assert _upload(running.url, token, body + b"  ").status_code == 202
        # read-only from here on: a read-only bind mount over the folder (a remount would be refused while the
        # service holds its database open for writing)
        subprocess.run(["mount", "--bind", str(small_disk), str(small_disk)], check=True, timeout=30)
        try:
            subprocess.run(["mount", "-o", "remount,bind,ro", str(small_disk)], check=True, timeout=30)
            read_only = _upload(running.url, token, body + b"   ")
        finally:
            subprocess.run(["umount", str(small_disk)], check=True, timeout=30)
        assert read_only.status_code == 503 and "read-only" in read_only.json()["error"], read_only.text
        assert _upload(running.url, token, body + b"    ").status_code == 202
        for name in ("serve.sqlite3", "serve.sqlite3-wal", "serve.sqlite3-shm"):  # deleted while it runs
            (small_disk / "store" / name).unlink(missing_ok=True)
        gone = _upload(running.url, token, body + b"     ")
        assert gone.status_code == 503 and "database file is gone" in gone.json()["error"], gone.text
        status = _get({"url": running.url}, None, "/api/v1/status")
        assert status.status_code == 503 and status.headers["retry-after"] == "30"
    finally:
        running.stop()
    again = subprocess.run([*VLBENCH, "serve", str(config), "--workers", "0"], cwd=ROOT, capture_output=True,
                           text=True, timeout=120)
    assert_one_error_line(again.returncode, again.stderr, ["serve.sqlite3: missing", "holds submissions",
                                                          "restore the file"])


def test_a_database_locked_by_another_process_is_503_in_a_line_and_stalls_no_route(sealed_phases, tmp_path):
    """Another process holds the SQLite database's write lock for 15 s. Before: the upload answered 500 after 30 s,
    and every route, the status included, waited with it (the database was called on the event loop). Now the
    upload is 503 in a line after WEB_BUSY_SECONDS, and the status answers meanwhile."""
    import concurrent.futures

    from pipelines.serve.store import WEB_BUSY_SECONDS

    config, token = _fault_service(tmp_path, {"vqa-cp": sealed_phases["vqa-cp"]})
    body = sealed_phases["vqa-cp"][3].read_bytes()
    running = Running(config, workers=0)
    holder = sqlite3.connect(tmp_path / "store" / "serve.sqlite3", isolation_level=None)
    try:
        holder.execute("BEGIN EXCLUSIVE")
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            started = time.monotonic()
            waiting = pool.submit(_upload, running.url, token, body)
            time.sleep(1.0)  # the upload is waiting on the lock by now (or already answered: then nothing waits)
            asked = time.monotonic()
            status = _get({"url": running.url}, None, "/api/v1/status")
            answered = time.monotonic() - asked
            busy = waiting.result(timeout=120)
        took = time.monotonic() - started
        assert status.status_code == 200 and answered < WEB_BUSY_SECONDS, answered
        assert busy.status_code == 503 and "the database is busy" in busy.json()["error"], busy.text
        assert WEB_BUSY_SECONDS <= took < 30, took
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    try:
        assert _upload(running.url, token, body).status_code == 202  # the lock gone, taken at once
    finally:
        running.stop()


def test_postgresql_locked_gone_or_read_only_is_refused_in_a_line(postgres, sealed_phases, tmp_path):
    """The same faults on the real PostgreSQL: the team's row locked by another session past lock_timeout (503
    busy), the database made read-only (503), the service's connections ended by the server (503, then taken
    again on a new connection)."""
    import psycopg

    url = postgres()
    config, token = _fault_service(tmp_path, {"vqa-cp": sealed_phases["vqa-cp"]}, database=url)
    body = sealed_phases["vqa-cp"][3].read_bytes()
    running = Running(config, workers=0)
    try:
        assert _upload(running.url, token, body).status_code == 202
        with psycopg.connect(url) as holder:  # a transaction holding the team's row
            holder.execute("SELECT id FROM teams FOR UPDATE")
            busy = _upload(running.url, token, body + b" ")
        assert busy.status_code == 503 and "the database is busy" in busy.json()["error"], busy.text
        answers = []

        def refused_read_only() -> bool:
            answers.append(_upload(running.url, token, body + b"  "))
            return answers[-1].status_code == 503 and "read-only" in answers[-1].json()["error"]

        with psycopg.connect(url, autocommit=True) as admin:
            name = url.rsplit("/", 1)[1]
            admin.execute(f"ALTER DATABASE {name} SET default_transaction_read_only = on")
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> "
                          "pg_backend_pid()", (name,))
            assert _until(refused_read_only, 30), answers[-1].text
            admin.execute(f"ALTER DATABASE {name} SET default_transaction_read_only = off")
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> "
                          "pg_backend_pid()", (name,))
        # meanwhile every answer was a line: a connection ended under it, or the database read-only; none accepted
        assert all(a.status_code == 503 and ("read-only" in a.json()["error"] or "cannot be read or written" in
                                             a.json()["error"]) for a in answers), [a.text for a in answers]
        assert _until(lambda: _upload(running.url, token, body + b"    ").status_code == 202, 30)
    finally:
        running.stop()


def _guide_block(marker: str) -> str:
    """The code block after `<!-- MARKER -->` in the challenge guide, dedented."""
    import re
    import textwrap

    text = (ROOT / "docs" / "guides" / "challenge.md").read_text()
    found = re.search(rf"<!-- {marker} -->\n\s*```\w*\n(.*?)\n\s*```", text, re.S)
    assert found, f"no <!-- {marker} --> block in the challenge guide"
    return textwrap.dedent(found.group(1))


def test_behind_the_guide_s_nginx_sign_in_works_over_tls(sealed_phases, tmp_path):
    """The guide's nginx block, as written (only its listening port, certificate and the service's port put in),
    in front of a running service that trusts it: sign-in over TLS answers 303 with a Secure cookie, the team page
    answers with it, and a client that sends its own X-Forwarded-For still meets its one bucket (5 a minute)."""
    import re
    import shutil

    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    if not Path(nginx).is_file():
        pytest.skip("Debian's nginx is not installed (`make test` installs it)")
    config = _write_config(tmp_path, {"vqa-cp": sealed_phases["vqa-cp"]}, trusted_proxies=["127.0.0.1"],
                           requests_per_minute=5)
    token = _add_team(config, "team proxied")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                    "/CN=127.0.0.1", "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True,
                   timeout=60)
    running = Running(config, workers=0)
    port, block = _free_port(), _guide_block("nginx")
    for pattern, value in ((r"listen 443 ssl;", f"listen 127.0.0.1:{port} ssl;"),
                           (r"ssl_certificate /\S+;", f"ssl_certificate {cert};"),
                           (r"ssl_certificate_key /\S+;", f"ssl_certificate_key {key};"),
                           (r"proxy_pass http://127\.0\.0\.1:8000;", f"proxy_pass {running.url};")):
        block, count = re.subn(pattern, value, block)
        assert count == 1, pattern  # the guide still says it so
    folder = tmp_path / "nginx"
    folder.mkdir()
    (folder / "nginx.conf").write_text(
        f"daemon off;\nuser root;\nworker_processes 1;\npid {folder}/nginx.pid;\nerror_log {folder}/error.log;\n"
        f"events {{ worker_connections 64; }}\nhttp {{\n access_log off;\n client_body_temp_path {folder}/body;\n"
        f" proxy_temp_path {folder}/proxy;\n fastcgi_temp_path {folder}/f;\n uwsgi_temp_path {folder}/u;\n"
        f" scgi_temp_path {folder}/s;\n{block}\n}}\n")
    proxy = subprocess.Popen([nginx, "-c", str(folder / "nginx.conf"), "-p", str(folder)], stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, start_new_session=True)
    site = f"https://127.0.0.1:{port}"
    try:
        assert _until(lambda: _reachable(site), 30), (folder / "error.log").read_text()
        with httpx.Client(base_url=site, verify=False, timeout=30) as browser:
            signed = browser.post("/login", data={"token": token}, headers={"Origin": site})
            assert signed.status_code == 303, signed.text
            cookie = signed.headers["set-cookie"]
            assert "Secure" in cookie and "HttpOnly" in cookie, cookie
            assert browser.get("/team").status_code == 200
        statuses = [httpx.get(f"{site}/api/v1/status", verify=False, timeout=30,
                              headers={"X-Forwarded-For": f"203.0.113.{k}"}).status_code for k in range(8)]
        assert 429 in statuses, statuses
    finally:
        os.killpg(proxy.pid, signal.SIGTERM)
        proxy.wait(30)
        running.stop()


def _reachable(url: str) -> bool:
    try:
        return httpx.get(f"{url}/api/v1/status", verify=False, timeout=2).status_code in (200, 429)
    except httpx.HTTPError:
        return False
