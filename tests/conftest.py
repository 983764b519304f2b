"""Test harness: no network, every Hugging Face and vlbench cache in a temporary folder."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

_TMP = Path(tempfile.mkdtemp(prefix="vlbench-tests-"))
for var, sub in (("HF_HOME", "hf"), ("HF_DATASETS_CACHE", "hf/datasets"), ("HF_HUB_CACHE", "hf/hub"),
                 ("TRANSFORMERS_CACHE", "hf/transformers"), ("VLBENCH_CACHE", "vlbench"),
                 ("MPLCONFIGDIR", "matplotlib")):
    os.environ[var] = str(_TMP / sub)
os.environ.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
                  HF_HUB_DISABLE_TELEMETRY="1", TQDM_DISABLE="1")
os.environ.pop("HF_TOKEN", None)
if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    # Each test worker, and everything it starts, gets its share of the CPUs for torch's (OpenMP's) threads: two
    # workers of two threads each on two cores spin-wait for one another (measured: 4.8x slower than one thread each)
    _share = len(os.sched_getaffinity(0)) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"])
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, _share)))

REFERENCE = Path(__file__).resolve().parents[2] / "shared" / "reference"


def pytest_collection_modifyitems(config, items):
    """The longest test files first (tests/durations.json, seconds each took: `make durations`), each file's tests in
    their own order; files not measured yet after them, in name order. `make test` runs two workers, each given
    whole files in this order (`--dist loadfile --no-loadscope-reorder`): a long file started last would run
    alone at the end while the other worker idles."""
    seconds = json.loads((Path(__file__).parent / "durations.json").read_text())
    items.sort(key=lambda item: -seconds.get(item.nodeid.split("::")[0], 0))  # stable: a file's order is kept


def pytest_sessionfinish(session, exitstatus):
    shutil.rmtree(_TMP, ignore_errors=True)


@pytest.fixture(autouse=True)
def _no_network(socket_disabled):
    """pytest-socket: any attempt to open an internet socket fails the test (Unix sockets, which
    DataLoader workers use to pass tensors, are allowed: pyproject addopts)."""
    yield


@dataclass(frozen=True)
class DemoRun:
    folder: Path  # laid out as the checkout after `make demo`: demo_out/ and a link to the repository's scripts/
    code: int
    stdout: str
    stderr: str
    env: dict  # the environment sharing the demo's response cache (VLBENCH_CACHE)


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory, worker_id) -> DemoRun:
    """`vlbench demo --out demo_out` as `make demo` runs it, once per test session however many workers ask: the
    first to ask runs it under a lock in the folder pytest-xdist's workers share (their base temporary folders'
    parent), the others wait for it and read what it left (the demo takes minutes; tests only read its outputs).
    Its response cache is kept beside it, so a page's command asks the tiny models only what the demo did not."""
    from filelock import FileLock

    shared = tmp_path_factory.getbasetemp()
    shared = shared if worker_id == "master" else shared.parent
    folder, result = shared / "demo", shared / "demo" / "result.json"
    env = {**os.environ, "VLBENCH_CACHE": str(shared / "demo-cache")}
    with FileLock(str(shared / "demo.lock")):
        if not result.is_file():
            folder.mkdir(exist_ok=True)
            if not (folder / "scripts").is_symlink():  # a try that timed out left it
                (folder / "scripts").symlink_to(Path(__file__).resolve().parents[1] / "scripts")
            done = subprocess.run([sys.executable, "-m", "pipelines.cli", "demo", "--out", "demo_out"], cwd=folder,
                                  env=env, capture_output=True, text=True, timeout=3600)
            result.write_text(json.dumps({"code": done.returncode, "stdout": done.stdout, "stderr": done.stderr}))
    found = json.loads(result.read_text())
    return DemoRun(folder, found["code"], found["stdout"], found["stderr"], env)


@pytest.fixture
def reference_dir() -> Path:
    if not REFERENCE.is_dir():
        pytest.skip(f"shared reference data not found at {REFERENCE} (only present beside the project checkout)")
    return REFERENCE


def sample_sources_folder() -> Path:
    """Every registered benchmark's sample sources, written once per session (also at collection time,
    where test tables are derived from them); tests copy them before changing anything."""
    root = _TMP / "sources"
    if not root.is_dir():
        from pipelines.samples import write_samples

        write_samples(root)
    return root


@pytest.fixture(scope="session")
def sample_sources() -> Path:
    return sample_sources_folder()


@pytest.fixture(scope="session")
def built(sample_sources, tmp_path_factory):
    """built(bench): the benchmark built from the sample sources with its registry entry's demo
    parameters (the offline stand-ins) and legacy files, once per session; tests read it and write
    elsewhere."""
    from builders.registry import get_benchmark
    from pipelines.build import run_build

    root, done = tmp_path_factory.mktemp("built"), {}

    def build(bench: str) -> Path:
        if bench not in done:
            entry = get_benchmark(bench)
            run_build(bench, sample_sources, root / bench, assignments=entry.demo_params,
                      legacy_json=entry.demo.legacy_json)
            done[bench] = root / bench
        return done[bench]

    return build


@pytest.fixture(scope="session")
def cosim(built, tmp_path_factory):
    """(the cosim-q sample build, a folder with a small image for each of its rows, its table): the
    multiple-choice rows the letter-choice tests ask."""
    import pyarrow.parquet as pq
    from PIL import Image

    folder = built("cosim-q")
    table = pq.read_table(folder / "default" / "val-00000-of-00001.parquet")
    images = tmp_path_factory.mktemp("cosim-images")
    for name in sorted(set(table.column("img_fn").to_pylist())):
        (images / name).parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (16, 16), (120, 40, 200)).save(images / name)
    return folder, images, table


@pytest.fixture
def cli(capsys):
    """Run `vlbench ARGS...` in-process; returns (exit code, stdout, stderr)."""
    from pipelines.cli import main

    def run(*args):
        code = 0
        try:
            main([str(a) for a in args])
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return run
