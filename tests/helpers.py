"""Small builders of raw GQA files for tests, a torchrun launcher of the CLI, and the check of what
vlbench promises for bad input (one `error:` line, exit 2)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path


def benchmarks_asked(form: str) -> tuple[str, ...]:
    """The registered benchmarks whose Task asks a generative VLM in FORM (evaluator/models/ask.py's `Ask`), in the
    registry's order: "generate" (an open answer per row), "letter" (multiple choice a model can be asked by
    letter) or "loglik-only" (multiple choice scored only by log-likelihood: the Ask gives a `letter_reason`)."""
    from evaluator.tasks import get_task, task_names

    def form_of(ask) -> str:
        return "generate" if ask.mode == "generate" else "letter" if ask.letter_reason is None else "loglik-only"

    asks = {name: get_task(name).generative for name in task_names()}
    return tuple(name for name, ask in asks.items() if ask is not None and form_of(ask) == form)


def gqa_record(answer: str, local: str | None, global_group: str | None = "thing", image: str = "n1",
               structural: str = "query", semantic: str = "attr") -> dict:
    """A complete GQA v1.2 record (every field of the release) with the given answer and groups."""
    return {
        "semantic": [{"operation": "select", "dependencies": [], "argument": "thing (1)"},
                     {"operation": "query", "dependencies": [0], "argument": "name"}],
        "entailed": [], "equivalent": [], "question": f"What is it ({local})?", "imageId": image,
        "isBalanced": True, "groups": {"global": global_group, "local": local}, "answer": answer,
        "semanticStr": "select: thing (1)->query: name [0]",
        "annotations": {"answer": {}, "question": {"2": "1"}, "fullAnswer": {"1": "1"}},
        "types": {"detailed": "objName", "semantic": semantic, "structural": structural},
        "fullAnswer": f"It is {answer}.",
    }


def write_gqa(path: Path, records: dict[str, dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(records, separators=(",", ":")))
    return path


def group(prefix: str, local: str | None, counts: dict[str, int], **kw) -> dict[str, dict]:
    """Records of one local group with the given answer counts, ids PREFIX0000, PREFIX0001, ..."""
    out, k = {}, 0
    for answer, count in counts.items():
        for _ in range(count):
            out[f"{prefix}{k:04d}"] = gqa_record(answer, local, **kw)
            k += 1
    return out


def torchrun(args: list, processes: int) -> subprocess.CompletedProcess:
    """`vlbench ARGS` under torchrun with `processes` CPU processes (gloo, one thread each); tests/ is
    importable (py: models)."""
    tests = Path(__file__).resolve().parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tests), str(tests.parent)]), "OMP_NUM_THREADS": "1",
           "VLBENCH_DIST_BACKEND": "gloo"}
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={processes}",
                "-m", "pipelines.cli"]
    return subprocess.run(launcher + [str(a) for a in args], env=env, capture_output=True, text=True, timeout=600)


def assert_one_error_line(code: int, stderr: str, needles) -> str:
    assert code == 2, f"exit {code}: {stderr}"
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    assert "Traceback" not in stderr and not re.search(r"0x[0-9a-fA-F]{6,}|<[\w.]+ object", lines[0]), lines[0]
    for needle in needles:
        assert needle in lines[0], f"{needle!r} not in {lines[0]!r}"
    return lines[0]


def offline_params(bench: str) -> list[str]:
    """The `--param` values a benchmark is built with offline: its registry entry's stand-ins (the
    packaged MiniLM for the pairing recipe's SBERT, no NLI model)."""
    from builders.registry import get_benchmark

    return list(get_benchmark(bench).offline_build)


def offline_flags(bench: str) -> list[str]:
    """`offline_params` as command-line flags."""
    return [flag for value in offline_params(bench) for flag in ("--param", value)]


def tiny_vl_bias(root: Path) -> dict:
    """The VL-Bias samples with one image per target and gender word (40 images) written under ROOT/src and
    built into ROOT/data: what the CounterBias tests measure their tiny models on."""
    from builders.vl_bias.samples import write_vl_bias
    from pipelines.build import run_build

    write_vl_bias(root / "src" / "vl_bias", per_gender=1)
    run_build("vl-bias", root / "src", root / "data", use_cache=False)
    return {"data": root / "data", "src": root / "src" / "vl_bias"}


def response_cache_rows(path: Path) -> int:
    """The answers a response cache (evaluator/models/response_cache.py) holds; 0 before it exists."""
    import sqlite3

    try:
        with sqlite3.connect(path) as db:
            return db.execute("SELECT COUNT(*) FROM responses").fetchone()[0]
    except sqlite3.Error:
        return 0


HOLD = "vlbench_test_hold"  # the trigger hold_at_stored plants


def hold_at_stored(path: Path, answers: int) -> None:
    """A new response cache (evaluator/models/response_cache.py) at PATH that lets a run store ANSWERS answers and
    then holds it inside the next store, for as long as the run lives: a BEFORE INSERT trigger whose body is a
    20-fold self-join (answers^20 rows to count: for 5, about 10^14, more than days of work), run by the writer
    with the database's write lock held. A test kills the run at a point the code reached (N answers stored), not
    after a sleep. `release_hold` drops the trigger."""
    import sqlite3

    from evaluator.models.response_cache import ResponseCache

    ResponseCache(path).close()  # the cache's own schema and WAL mode
    tables = ", ".join(f"responses t{k}" for k in range(20))
    with sqlite3.connect(path) as db:
        db.execute(f"CREATE TRIGGER {HOLD} BEFORE INSERT ON responses WHEN (SELECT COUNT(*) FROM responses) >= "
                   f"{int(answers)} BEGIN SELECT COUNT(*) FROM {tables}; END")


def release_hold(path: Path) -> None:
    import sqlite3

    with sqlite3.connect(path) as db:
        db.execute(f"DROP TRIGGER {HOLD}")


def counterbias_reports(cli, data: Path, models: dict, folder: Path, *args) -> None:
    """`vlbench counterbias --report FOLDER/NAME` of each {name: model folder} on DATA (no cache, no
    bootstrap), with ARGS (e.g. the attack's --eps and --steps); each must succeed."""
    for name, model in models.items():
        code, _, err = cli("counterbias", "--data", data, "--model", f"hf:{model}", "--no-cache", "--bootstrap", "0",
                           "--report", folder / name, *args)
        assert code == 0, err


def write_row_images(bench: str, data: Path, folder: Path) -> Path:
    """A small random PNG for every image key of a built benchmark's rows, under the name `--images`
    finds it by (a path-like key as is, any other as <key>.png, found by its stem)."""
    import io

    import numpy as np
    from PIL import Image

    from core.data import load_table, pick_split
    from evaluator.tasks import get_task

    task = get_task(bench)
    table = load_table(data, task.config, pick_split(data, task.config, None, task.default_split))
    column = task.generative.image_column
    keys = set() if column is None or "image" in table.column_names else \
        {str(k) for k in table.column(column).to_pylist()}
    names = sorted(k if "/" in k or k.endswith(".jpg") else f"{k}.png" for k in keys)
    rng = np.random.default_rng(0)
    for i, name in enumerate(names):
        buffer = io.BytesIO()
        Image.fromarray((rng.random((24 + i % 17, 30 + i % 11, 3)) * 255).astype("uint8")).save(buffer, format="PNG")
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(buffer.getvalue())
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def launch_chromium(playwright, chromium: Path = Path("/usr/bin/chromium")):
    """Debian's headless Chromium through playwright, with the flags that keep it off the network."""
    return playwright.chromium.launch(executable_path=str(chromium), args=[
        "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"])


LEVEL_STEP = 20  # frame k of write_video's videos is a flat grey of level 20 * k


def write_video(path: Path, frames: int, size: int = 32, codec: str = "mpeg4", fps: int = 5) -> Path:
    """A video whose frame k is a flat grey of level LEVEL_STEP * k (PyAV, of the test extra)."""
    import av
    import numpy as np

    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), mode="w") as container:
        stream = container.add_stream(codec, rate=fps)
        stream.width = stream.height = size
        stream.pix_fmt = "yuv420p"
        for k in range(frames):
            pixels = np.full((size, size, 3), LEVEL_STEP * k, dtype=np.uint8)
            for packet in stream.encode(av.VideoFrame.from_ndarray(pixels, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


def evaluate_json(cli, bench, data, predictions, *args):
    """`vlbench evaluate` of a prediction file or log, partial rows allowed and no intervals: its JSON."""
    code, stdout, stderr = cli("evaluate", bench, "--data", data, "--predictions", predictions, "--bootstrap", "0",
                               "--allow-partial", *args)
    assert code == 0, stderr
    return json.loads(stdout)


def read_submission(bench, data, path):
    """({id: prediction}, how it was read) of a prediction file or a harness log, against the built split."""
    from core.data import load_table
    from evaluator.interop import load_submission
    from evaluator.tasks import get_task

    task = get_task(bench)
    table = load_table(data, task.config, task.default_split)
    return load_submission(task, path, "auto", task.ids(table), build=(data, task.default_split, table))


class HubRepoCopy:
    """HfApi's commit surface for `vlbench push`: each committed file is copied into `folder`, a local copy of
    the repo as the Hub would hold it after the commit."""

    def __init__(self, folder: Path):
        self.folder, self.commits = Path(folder), []

    def create_repo(self, **kw):
        pass

    def create_branch(self, **kw):
        pass

    def list_repo_files(self, **kw):
        return sorted(p.relative_to(self.folder).as_posix() for p in self.folder.rglob("*") if p.is_file())

    def create_commit(self, operations, **kw):
        import shutil

        self.commits.append([op.path_in_repo for op in operations])
        for op in operations:
            target = self.folder / op.path_in_repo
            if type(op).__name__ == "CommitOperationDelete":
                target.unlink()
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(op.path_or_fileobj, target)
        return type("Info", (), {"commit_url": None})()


def push_to_copy(cli, monkeypatch, data: Path, repo: Path, *args) -> tuple[int, str, str]:
    """`vlbench push DATA --repo-id org/bench ARGS` into a local copy of the repo (HubRepoCopy)."""
    import pipelines.push

    repo.mkdir(parents=True, exist_ok=True)
    monkeypatch.setenv("HF_TOKEN", "hf_test")
    monkeypatch.setattr(pipelines.push, "_api", lambda token: HubRepoCopy(repo))
    return cli("push", data, "--repo-id", f"org/{data.name}", *args)


def disk_full_at(monkeypatch, nth: int) -> None:
    """Path.write_bytes fails with ENOSPC at its `nth` call from now on (a disk that fills midway through a
    command's writes); undo with monkeypatch.undo()."""
    import errno

    written, real = [], Path.write_bytes

    def full_disk(path, data):
        written.append(path)
        if len(written) >= nth:
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real(path, data)

    monkeypatch.setattr(Path, "write_bytes", full_disk)


def nli_labels(classifier, pairs: list[tuple[str, str]]) -> list[str]:
    """The labels an `NLIClassifier` gives (premise, hypothesis) string pairs, through the one entry the
    builders use (`classify_codes`: texts and the pairs' indices into them)."""
    texts = list(dict.fromkeys(t for pair in pairs for t in pair))
    code = {t: k for k, t in enumerate(texts)}
    return classifier.classify_codes(texts, [code[p] for p, _ in pairs], [code[h] for _, h in pairs]).tolist()


def run_in_terminal(command: list[str], env: dict, cwd: Path, timeout: float,
                    keep: int = 200_000) -> tuple[int, str]:
    """(exit code, the last `keep` characters it printed) of `command` run in a pseudo-terminal (stdin, stdout and
    stderr; 50 x 160), as a person runs it: a program that draws a live display when it sees a terminal (Inspect's)
    draws it. The terminal is read as the program writes (a full one would stall it); killed past `timeout`."""
    import fcntl
    import pty
    import select
    import signal
    import struct
    import termios
    import time

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 160, 0, 0))
    process = subprocess.Popen(command, stdin=slave, stdout=slave, stderr=slave, cwd=cwd, start_new_session=True,
                               env={**env, "TERM": "xterm-256color", "COLUMNS": "160", "LINES": "50"})
    os.close(slave)
    output, deadline = bytearray(), time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 1.0)
            if ready:
                try:
                    data = os.read(master, 65536)
                except OSError:  # EIO: every process holding the terminal has closed it
                    break
                if not data:
                    break
                output += data
                del output[:-keep]
            elif process.poll() is not None:
                break
        else:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            raise AssertionError(f"{command[:4]} ran past {timeout} s:\n{output.decode(errors='replace')[-3000:]}")
        return process.wait(timeout=60), output.decode(errors="replace")
    finally:
        os.close(master)
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def public_names(answers: Path, split: str, id_column: str) -> dict:
    """{built id: the id the public half gives it}, read from the answer file (opaque ids only)."""
    import zipfile

    import pyarrow as pa
    import pyarrow.parquet as pq

    with zipfile.ZipFile(answers) as archive:
        table = pq.read_table(pa.BufferReader(archive.read(f"{split}.parquet")))
    return dict(zip(table.column(id_column).to_pylist(), table.column("vlbench_public_id").to_pylist()))


SHARDED_SUITE = ("gqa-ood", "cosim-q", "visdial", "vqa-v2")  # baseline:random cannot predict vqa-v2


def sharded_suite_args(built, tmp_path: Path) -> list:
    """The arguments of the suite the shard tests run (tests/test_shards.py, tests/test_ray.py): the random baseline
    over four benchmarks' sample builds (linked into TMP_PATH/builds), one of which it cannot predict, 50 resamples,
    no perceptual score."""
    data = tmp_path / "builds"
    data.mkdir()
    for bench in SHARDED_SUITE:
        (data / bench).symlink_to(built(bench), target_is_directory=True)
    return ["--model", "baseline:random", "--data", data, "--bootstrap", 50, "--benchmarks", ",".join(SHARDED_SUITE),
            "--no-perceptual"]
