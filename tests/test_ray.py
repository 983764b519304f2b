"""Shards as Ray tasks (`--ray ADDRESS`, evaluator/ray_shards.py) on a real local Ray cluster: a head started by
`ray start --head` and a worker node (tests/ray_worker_node.py), both listening on loopback only, started and stopped
by the module's fixture. The golden of every comparison is one process's own output, made in the same test: the
merged files of a Ray run must be those bytes, also after the worker node is killed in the middle of the run."""

from __future__ import annotations

import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers import assert_one_error_line, sharded_suite_args

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
RAY = Path(sys.executable).with_name("ray")
SLOW_MODEL = '''"""Each question's last word; with VLBENCH_TEST_MARKERS set (the cluster's workers), slowly, having
written which node and process run it, its rows counted by a progress bar (which a Ray task reports to the driver)."""
import os
import time
from pathlib import Path

from core.progress import progress


class LastWords:
    def predict(self, table):
        questions = table.column("question").to_pylist()
        markers = os.environ.get("VLBENCH_TEST_MARKERS")
        if markers:
            import ray

            Path(markers, str(os.getpid())).write_text(ray.get_runtime_context().get_node_id())
        answers = []
        for question in progress(questions, desc="rows", unit="row"):
            if markers:
                time.sleep(8 / len(questions))
            answers.append(question.split()[-1].strip("?"))
        return answers


def make():
    return LastWords()
'''


@dataclass
class Cluster:
    address: str
    env: dict
    worker: subprocess.Popen
    worker_node: str
    markers: Path
    log: Path


def _killed(process: subprocess.Popen) -> None:
    """The process and its group (its session: a node's raylet, its workers), asked to stop, then killed."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=20)
            return
        except subprocess.TimeoutExpired:
            continue


def _first_line(process: subprocess.Popen, seconds: float) -> str:
    """The process's first stdout line, waited for at most SECONDS."""
    selector = selectors.DefaultSelector()
    selector.register(process.stdout, selectors.EVENT_READ)
    if not selector.select(timeout=seconds):
        raise AssertionError(f"no line from {process.args} within {seconds} s")
    return process.stdout.readline()


@pytest.fixture(scope="module")
def ray_cluster():
    """A head (`ray start --head --block`, 1 CPU) and a worker node (1 CPU) on 127.0.0.1, in a short temporary folder
    (Ray's socket paths must stay under 107 bytes); each in its own process group, killed at the end."""
    temp = Path(tempfile.mkdtemp(prefix="vlray-", dir="/tmp"))
    models, markers, log = temp / "models", temp / "markers", temp / "cluster.log"
    models.mkdir()
    markers.mkdir()
    (models / "slow_words.py").write_text(SLOW_MODEL)
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",  # loopback addresses stay loopback, listened on
           "RAY_USAGE_STATS_ENABLED": "0", "VLBENCH_TEST_MARKERS": str(markers),
           "PYTHONPATH": os.pathsep.join([str(models), str(ROOT)])}
    with open(log, "wb") as out:
        probe = subprocess.run([sys.executable, "-c", "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); "
                                "print(s.getsockname()[1])"], capture_output=True, text=True, check=True)
        address = f"127.0.0.1:{int(probe.stdout)}"
        head = subprocess.Popen([str(RAY), "start", "--head", "--block", "--node-ip-address=127.0.0.1",
                                 f"--port={address.split(':')[1]}", "--num-cpus=1", "--include-dashboard=false",
                                 "--disable-usage-stats", f"--temp-dir={temp}"], env=env, stdout=out, stderr=out,
                                start_new_session=True)
        worker = subprocess.Popen([sys.executable, str(ROOT / "tests" / "ray_worker_node.py"), address, str(temp), "1"],
                                  env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=out, text=True,
                                  start_new_session=True)
        try:
            node = json.loads(_first_line(worker, 180))["node_id"]
            yield Cluster(address, env, worker, node, markers, log)
        finally:
            _killed(worker)
            _killed(head)
            shutil.rmtree(temp, ignore_errors=True)


def _vlbench(cluster: Cluster, *args, timeout: int = 600) -> subprocess.CompletedProcess:
    """`vlbench ARGS` as its own process (a Ray driver), with the cluster's environment."""
    return subprocess.run([sys.executable, "-m", "pipelines.cli", *map(str, args)], env=cluster.env,
                          capture_output=True, text=True, timeout=timeout)


def _files(out: Path) -> dict[str, bytes]:
    return {p.name.replace(out.stem, "OUT", 1): p.read_bytes() for p in sorted(out.parent.iterdir())
            if p.name.startswith(out.stem + ".") and ".shard-" not in p.name}


def test_predict_on_ray_writes_one_process_s_bytes(ray_cluster, cli, built, tmp_path):
    """GQA-OOD's random baseline: as many shards as the cluster runs at once (2: a CPU on each node) and 3 shards of
    half a CPU; both merges are the files one process writes. A model the nodes cannot load is one line."""
    data = built("gqa-ood")
    code, _, err = cli("predict", "gqa-ood", "--data", data, "--model", "baseline:random", "--out",
                       tmp_path / "one" / "p.json")
    assert code == 0, err
    whole = _files(tmp_path / "one" / "p.json")
    assert set(whole) == {"OUT.json", "OUT.meta.json"}
    for name, extra in (("auto", []), ("three", ["--ray-shards", 3, "--ray-task", "cpus=0.5,memory=64MiB"])):
        out = tmp_path / name / "p.json"
        done = _vlbench(ray_cluster, "predict", "gqa-ood", "--data", data, "--model", "baseline:random", "--out", out,
                        "--ray", ray_cluster.address, *extra)
        assert done.returncode == 0, done.stderr
        count = 3 if extra else 2
        assert f"in {count} shards on 2 nodes" in done.stdout
        assert all(f"ray: shard {i} of {count} finished" in done.stdout for i in range(count))
        assert _files(out) == whole
    done = _vlbench(ray_cluster, "predict", "gqa-ood", "--data", data, "--model", "py:no_such_module:make", "--out",
                    tmp_path / "bad" / "p.json", "--ray", ray_cluster.address)
    assert_one_error_line(done.returncode, done.stderr, ["no_such_module"])
    assert not (tmp_path / "bad" / "p.json").exists()


def test_a_suite_on_ray_writes_one_suite_process_s_predictions_and_card(ray_cluster, cli, built, tmp_path):
    """`suite --ray` over three benchmarks in 3 shards: the predictions, records and card of one suite process; a
    rerun into the same OUT keeps every shard."""
    args = sharded_suite_args(built, tmp_path)
    code, _, err = cli("suite", *args, "--out", tmp_path / "whole")
    assert code == 0, err
    out = tmp_path / "ray"
    done = _vlbench(ray_cluster, "suite", *args, "--out", out, "--ray", ray_cluster.address, "--ray-shards", 3)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("merged 3 shards") == 3
    for bench in ("gqa-ood", "cosim-q", "visdial"):
        for suffix in (".json", ".meta.json"):
            name = f"{bench}{suffix}"
            assert (out / "predictions" / name).read_bytes() == (tmp_path / "whole" / "predictions" / name
                                                                  ).read_bytes()
    for name in ("card.json", "report.md"):
        assert (out / name).read_bytes() == (tmp_path / "whole" / name).read_bytes()
    row = json.loads((out / "card.json").read_text())["benchmarks"]["vqa-v2"]  # the nodes' reason, never re-run here
    assert row["status"] == "not scored" and "baseline:random" in row["reason"]
    assert "vqa-v2     not scored" in done.stdout and "vqa-v2     merged" not in done.stdout
    done = _vlbench(ray_cluster, "suite", *args, "--out", out, "--ray", ray_cluster.address, "--ray-shards", 3)
    assert done.returncode == 0, done.stderr
    assert sum(done.stdout.count(f"shard {i} of 3 kept") for i in range(3)) == 9


@pytest.mark.parametrize("args, words", [
    (["--ray", "127.0.0.1:9", "--shard", "0/2"], ["--ray with --shard"]),
    (["--ray", "127.0.0.1:9", "--limit", "5"], ["--ray with --limit"]),
    (["--ray-shards", "2"], ["--ray-shards without --ray"]),
    (["--ray-task", "cpus=1"], ["--ray-task without --ray"]),
    (["--ray", "127.0.0.1:9", "--ray-task", "gpus=many"], ["gpus='many'"]),
    (["--ray", "127.0.0.1:9", "--ray-task", "cpus=0"], ["needs a CPU or a GPU"]),
    (["--ray", "127.0.0.1:9", "--ray-task", "memory=lots"], ["memory='lots'"]),
    (["--ray", "127.0.0.1:9"], ["127.0.0.1:9", "no Ray cluster answers there"]),
    (["--ray", "nohost"], ["'nohost'", "HOST:PORT"]),
])
def test_ray_options_that_cannot_run_are_one_line(args, words, built, tmp_path):
    """Before any cluster is asked (none runs at port 9, the discard port, on loopback)."""
    done = subprocess.run([sys.executable, "-m", "pipelines.cli", "predict", "gqa-ood", "--data", str(built("gqa-ood")),
                           "--model", "baseline:random", "--out", str(tmp_path / "p.json"), *args],
                          capture_output=True, text=True, timeout=120)
    assert_one_error_line(done.returncode, done.stderr, words)
    assert list(tmp_path.iterdir()) == []


class _Listener:
    """A loopback listener that takes connections and answers each in its own way (never, or as HTTP/1.1 does),
    for the --ray probe; stopped by its fixture."""

    def __init__(self, answer: bytes | None):
        import socket
        import threading

        self.answer, self.server = answer, socket.create_server(("127.0.0.1", 0))
        self.server.settimeout(0.2)
        self.port, self.stopped, self.held = self.server.getsockname()[1], threading.Event(), []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while not self.stopped.is_set():
            try:
                conn, _ = self.server.accept()
            except OSError:
                continue
            self.held.append(conn)
            if self.answer is not None:
                conn.recv(4096)
                conn.sendall(self.answer)

    def close(self):
        self.stopped.set()
        self.thread.join(timeout=5)
        for conn in self.held:
            conn.close()
        self.server.close()


# deaf: never answers; http: HTTP/1.1; http2: an HTTP/2 server's empty SETTINGS frame (RFC 9113 section 6.5), then
# nothing -- it passes the probe, and Ray's join would wait for ever (measured: still waiting after 150 s)
@pytest.fixture(params=[None, b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n",
                        b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"], ids=["deaf", "http", "http2"])
def not_a_gcs(request, socket_enabled):
    listener = _Listener(request.param)
    yield listener
    listener.close()


def test_an_address_that_answers_but_is_no_ray_cluster_is_one_line_at_once(not_a_gcs, built, tmp_path):
    """Ray's own client retries such an address for minutes, printing warnings, and never raises (measured: still
    waiting after 150 s at a listener that does not answer). The probe speaks HTTP/2's preface to it (RFC 9113
    section 3.4), as a GCS answers it; the real cluster's GCS passing the probe is every other test of this file. A
    listener that answers as HTTP/2 but is no GCS: the join is bounded (8 s here, VLBENCH_RAY_JOIN_SECONDS), Ray's
    retries printed nowhere but in the line's last words."""
    done = subprocess.run([sys.executable, "-m", "pipelines.cli", "predict", "gqa-ood", "--data", str(built("gqa-ood")),
                           "--model", "baseline:random", "--out", str(tmp_path / "p.json"), "--ray",
                           f"127.0.0.1:{not_a_gcs.port}"], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "VLBENCH_RAY_JOIN_SECONDS": "8", "RAY_USAGE_STATS_ENABLED": "0"})
    assert_one_error_line(done.returncode, done.stderr, [f"127.0.0.1:{not_a_gcs.port}", "not a Ray cluster's GCS"])
    assert list(tmp_path.iterdir()) == []


def test_the_scale_guide_s_ray_commands_run_as_written(ray_cluster, cli, built, tmp_path, monkeypatch):
    """The guide's `vlbench` lines (its `ray start` is this fixture's cluster, whose address replaces the guide's),
    in a folder laid out as after `make demo` (two of its builds): both succeed, and the predictions are one
    process's."""
    page = (ROOT / "docs" / "guides" / "scale.md").read_text()
    block = page.split("<!-- ray run -->\n```bash\n", 1)[1].split("```", 1)[0]
    lines = [line.split("  #", 1)[0].strip() for line in block.splitlines() if line.startswith("vlbench ")]
    assert len(lines) == 2 and all("--ray 127.0.0.1:6379" in line for line in lines)
    (tmp_path / "demo_out").mkdir()
    for bench in ("gqa-ood", "cosim-q"):
        (tmp_path / "demo_out" / bench).symlink_to(built(bench), target_is_directory=True)
    for line in lines:
        done = subprocess.run(["bash", "-c", line.replace("127.0.0.1:6379", ray_cluster.address)], cwd=tmp_path,
                              env={**ray_cluster.env, "PATH": f"{RAY.parent}{os.pathsep}{os.environ['PATH']}"},
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
    monkeypatch.chdir(tmp_path)  # the record names the build as the command does: demo_out/gqa-ood
    code, _, err = cli("predict", "gqa-ood", "--data", "demo_out/gqa-ood", "--model", "baseline:random", "--out",
                       tmp_path / "one" / "preds.json")
    assert code == 0, err
    assert _files(tmp_path / "ray" / "preds.json") == _files(tmp_path / "one" / "preds.json")
    assert json.loads((tmp_path / "ray-card" / "card.json").read_text())["benchmarks"]["cosim-q"]["status"] == "scored"


def test_a_worker_node_killed_mid_run_is_retried_and_the_bytes_are_one_process_s(ray_cluster, cli, built, tmp_path,
                                                                                 monkeypatch):
    """A user's model slowed down on the cluster, in 2 shards (one per node); once the worker node runs its shard, its
    process group (its raylet and workers) is killed. Ray runs that shard again on the head, the driver says so, and
    the merged files are one process's. Runs last: the cluster has one node after it."""
    data = built("gqa-ood")
    monkeypatch.syspath_prepend(str(ray_cluster.markers.parent / "models"))
    code, _, err = cli("predict", "gqa-ood", "--data", data, "--model", "py:slow_words:make", "--out",
                       tmp_path / "one" / "p.json")
    assert code == 0, err
    out = tmp_path / "ray" / "p.json"
    run = subprocess.Popen([sys.executable, "-m", "pipelines.cli", "predict", "gqa-ood", "--data", str(data), "--model",
                            "py:slow_words:make", "--out", str(out), "--ray", ray_cluster.address, "--ray-shards", "2"],
                           env=ray_cluster.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 180
        while not any(p.read_text() == ray_cluster.worker_node for p in ray_cluster.markers.iterdir()):
            assert run.poll() is None and time.monotonic() < deadline, "the worker node never ran a shard"
            time.sleep(0.2)
        os.killpg(ray_cluster.worker.pid, signal.SIGKILL)
        stdout, stderr = run.communicate(timeout=300)
    finally:
        run.kill()
    assert run.returncode == 0, stderr
    assert "started again (its last try was lost with its worker or node)" in stdout
    assert "ray: shard 0 of 2: rows" in stdout and "ray: shard 1 of 2: rows" in stdout  # progress, streamed back
    assert _files(out) == _files(tmp_path / "one" / "p.json")
