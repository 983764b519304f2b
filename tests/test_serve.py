"""`vlbench serve` (pipelines/serve/): the challenge's configuration checked key by key; teams' tokens stored hashed;
a real service (uvicorn on loopback, a scoring worker process, SQLite in WAL mode) started and stopped by a fixture:
a submission made with `vlbench submit` is scored by the code of `vlbench evaluate` (the shown scores are evaluate's
on the unsealed build, rounded as configured, for every benchmark), a refused one gets its one line and costs
nothing, limits are exact, uploads are bounded and stored content-addressed, a team sees only its own."""

from __future__ import annotations

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
from helpers import assert_one_error_line, public_names

from builders.registry import get_benchmark
from evaluator.tasks import get_task, task_names

pytestmark = pytest.mark.allow_hosts(["127.0.0.1"])  # the service listens on loopback only
ROOT = Path(__file__).resolve().parents[1]
VLBENCH = [sys.executable, "-m", "pipelines.cli"]


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
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/api/v1/status", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                if self.process.poll() is not None:
                    raise AssertionError(self.process.stdout.read()) from None
                time.sleep(0.2)
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
])
def test_a_bad_config_is_one_line_naming_the_key(sealed_phases, cli, tmp_path, edit, needles):
    path = _write_config(tmp_path, {"vqa-cp": sealed_phases["vqa-cp"]})
    config = yaml.safe_load(path.read_text())
    edit(config)
    path.write_text(yaml.safe_dump(config))
    code, _, err = cli("serve", "team", "add", "x", "--config", path)
    assert_one_error_line(code, err, [str(path), *needles])


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
            assert score["interval"] == (None if bounds is None else [round(b, 3) for b in bounds]), (bench, score)


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
        while not any(r["status"] == "scoring" for r in _rows(tmp_path)) and time.monotonic() < deadline:
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
        running = Running(config)  # restarted again
        deadline = time.monotonic() + 120
        while any(r["status"] != "scored" for r in _rows(tmp_path)) and time.monotonic() < deadline:
            time.sleep(0.2)
        rows = _rows(tmp_path)
        assert len(rows) == 8 and all(r["status"] == "scored" for r in rows), rows
        assert [r["attempts"] for r in rows] == [2 if r["id"] in interrupted else 1 for r in rows]
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
    clusters); the same file again does not beat itself; a worse one (every answer wrong) is not shown: the best
    is shown again, with no interval; the host sees the state, the team does not."""
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
    bodies = {}
    for caller in ("hosts", "Team <A>", "team b", None):
        token, seen = service["tokens"].get(caller), bodies.setdefault(caller, [])
        for route in routes:
            if "{id}" in route:
                seen += [_get(service, token, route.replace("{id}", str(i))).text for i in ids]
            elif "{phase}" in route:
                headers = {"Authorization": f"Bearer {token}"} if token else {}
                seen.append(httpx.post(f"{service['url']}{route.replace('{phase}', 'gqa-ood')}", content=b"[]",
                                       headers=headers, timeout=30).text)
            else:
                seen.append(_get(service, token, route).text)
    assert all(len(seen) >= len(routes) for seen in bodies.values()) and "metrics" in " ".join(bodies["hosts"])
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
    config = _write_config(tmp_path, phases, database=postgres())
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

