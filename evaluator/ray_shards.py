"""A run's shards as Ray tasks (`predict --ray ADDRESS`, `suite --ray ADDRESS`): one task per benchmark's shard
(evaluator/shards.py), each with the resources it declares, on an existing Ray cluster.

Each task runs the shard on its node, in a folder of its own, and sends the shard's files back through Ray's object
store: the nodes share no folder with the driver, only the build (read at the path the command names, as every
shard's record says). The driver writes each shard's files as they come (evaluator.shards' names, beside OUT) and
then merges them, so the result is the bytes one process writes. A task lost with its node (or its worker process)
is retried by Ray on another node (`max_retries`); it starts again from the beginning of its shard, and the merge is
unchanged, since a shard's rows and their predictions depend on the build alone. An error of the run itself (a bad
option, a model that cannot load) is not retried: the first one stops the run, in its own words.

Progress streams back: a task's progress bars report to a small actor on the driver's node (core.progress
`reported_to`), which the driver reads while it waits."""

from __future__ import annotations

import logging
import os
import re
import socket
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Callable

from core.errors import ModelError, ParamsError, VlbenchError
from evaluator.shards import Shard

RETRIES = 3  # times Ray runs a task again after its worker or node is lost (never after an error of the run)
PROBE_TIMEOUT_S = 5.0  # how long --ray's address has to answer as a gRPC server (_speaks_grpc)
HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"  # a client's connection preface (RFC 9113 section 3.4)
HTTP2_SETTINGS = 0x4  # the SETTINGS frame's type
HTTP2_EMPTY_SETTINGS = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"  # length 0, SETTINGS, no flags, stream 0
SHOWN_EVERY_S = 10.0  # a running shard's progress line, at most this often
JOIN_SECONDS = 60.0  # how long joining the cluster may take once the probe passed (VLBENCH_RAY_JOIN_SECONDS)


@dataclass(frozen=True)
class RayTask:
    """The resources each shard's task declares (`--ray-task cpus=C,gpus=G,memory=M`): Ray starts a task where they
    are free, and gives it the GPUs it asked for (CUDA_VISIBLE_DEVICES)."""

    cpus: float = 1.0
    gpus: float = 0.0
    memory: int = 0  # bytes; 0 declares none

    def options(self) -> dict:
        return {"num_cpus": self.cpus, "num_gpus": self.gpus, **({"memory": self.memory} if self.memory else {})}

    def fits(self, cluster: dict) -> int:
        """How many such tasks the cluster's resources hold at once (at least 1)."""
        counts = [int(cluster.get("CPU", 0) // self.cpus)] if self.cpus else []
        if self.gpus:
            counts.append(int(cluster.get("GPU", 0) // self.gpus))
        if self.memory:
            counts.append(int(cluster.get("memory", 0) // self.memory))
        return max(1, min(counts, default=1))


@dataclass(frozen=True)
class RayRun:
    """`--ray ADDRESS [--ray-shards N] [--ray-task ...]`: where the shards run, how many (None: as many as the
    cluster runs at once), and what each task declares."""

    address: str
    shards: int | None = None
    task: RayTask = RayTask()


_UNITS = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12, "kib": 2**10, "mib": 2**20, "gib": 2**30,
          "tib": 2**40, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}


def parse_ray_task(text: str | None) -> RayTask:
    """`--ray-task cpus=1,gpus=0,memory=16GiB` (any of the three; memory in bytes or with a unit: 16G, 16GiB)."""
    if text is None:
        return RayTask()
    values: dict = {}
    for part in text.split(","):
        name, sep, value = part.strip().partition("=")
        if not sep or name not in ("cpus", "gpus", "memory") or name in values:
            raise ParamsError(f"--ray-task {text[:80]!r}: expected cpus=C,gpus=G,memory=M (each at most once)")
        if name == "memory":
            found = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([a-zA-Z]*)", value.strip())
            if not found or found.group(2).lower() not in _UNITS:
                raise ParamsError(f"--ray-task memory={value[:40]!r}: expected bytes, or a number with a unit "
                                  "(16G, 16GiB, 512M)")
            values[name] = int(float(found.group(1)) * _UNITS[found.group(2).lower()])
        else:
            try:
                values[name] = float(value)
            except ValueError:
                values[name] = -1.0
            if not 0 <= values[name] <= 1024:
                raise ParamsError(f"--ray-task {name}={value[:40]!r}: expected a number from 0 to 1024")
    task = RayTask(**values)
    if not task.cpus and not task.gpus:
        raise ParamsError(f"--ray-task {text[:80]!r}: a task needs a CPU or a GPU")
    return task


def _speaks_grpc(host: str, port: int) -> bool:
    """Whether what listens at HOST:PORT answers as a gRPC server does, as a Ray cluster's GCS does: its first
    frame after a client's HTTP/2 preface is SETTINGS (RFC 9113 section 3.4), within PROBE_TIMEOUT_S. A listener
    that never answers, or answers in another protocol (the dashboard's HTTP, a database), is not one; Ray itself
    would retry it for minutes, flooding the terminal. With Ray's TLS on (RAY_USE_TLS), plain HTTP/2 cannot be
    spoken to it, and the probe leaves the question to Ray. Raises OSError when nothing listens."""
    with socket.create_connection((host, port), timeout=PROBE_TIMEOUT_S) as conn:
        if os.environ.get("RAY_USE_TLS", "0").lower() in ("1", "true"):
            return True
        conn.settimeout(PROBE_TIMEOUT_S)
        conn.sendall(HTTP2_PREFACE + HTTP2_EMPTY_SETTINGS)
        head = b""
        try:
            while len(head) < 9:
                chunk = conn.recv(9 - len(head))
                if not chunk:
                    return False
                head += chunk
        except (socket.timeout, ConnectionError):
            return False
        return head[3] == HTTP2_SETTINGS


def _connected(address: str):
    """Ray, connected to the cluster at ADDRESS (`auto`: the one this machine runs)."""
    try:
        import ray
    except ImportError:
        raise ParamsError("--ray: Ray is not installed (pip install 'vlbench[ray]')") from None
    host, colon, port = address.rpartition(":")
    if address != "auto" and "://" not in address:
        if not colon or not port.isdigit() or not host:
            raise ParamsError(f"--ray {address[:80]!r}: expected HOST:PORT (the head node's GCS address, `ray start "
                              "--head` prints it) or auto")
        try:  # a cluster that is not there: said at once (Ray itself waits minutes, printing its retries)
            speaks = _speaks_grpc(host.strip("[]"), int(port))
        except (OSError, ValueError) as exc:
            raise ParamsError(f"--ray {address}: no Ray cluster answers there ({exc.strerror or exc})") from None
        if not speaks:
            raise ParamsError(f"--ray {address}: what answers there is not a Ray cluster's GCS (no gRPC answer "
                              f"within {PROBE_TIMEOUT_S:g} s; `ray start --head` prints the address)")
    outcome: dict = {}

    def join():
        try:
            ray.init(address=address, logging_level=logging.ERROR, log_to_driver=False, configure_logging=True,
                     include_dashboard=False)
            outcome["joined"] = True
        except Exception as exc:  # noqa: BLE001 -- said on one line below
            outcome["error"] = exc

    seconds = float(os.environ.get("VLBENCH_RAY_JOIN_SECONDS") or JOIN_SECONDS)
    thread = threading.Thread(target=join, name="vlbench-ray-join", daemon=True)
    with _core_output_held() as held:  # Ray's core prints every retry to the process's stderr
        thread.start()
        thread.join(seconds)
        if thread.is_alive():  # an HTTP/2 server that is not a GCS passes the probe: Ray would wait for ever
            said = held.last_line()
            held.keep_away()
            raise ParamsError(f"--ray {address}: what answers there speaks HTTP/2 but no Ray driver joined within "
                              f"{seconds:g} s: not a Ray cluster's GCS, or one this machine cannot reach"
                              + (f" (Ray: {said[:200]})" if said else ""))
    if "error" in outcome:  # ConnectionError, a version mismatch, a malformed address: Ray's words, on one line
        exc = outcome["error"]
        text = " ".join(str(exc).split())[:300]
        raise ParamsError(f"--ray {address}: cannot join the Ray cluster there ({type(exc).__name__}: {text})") \
            from None
    return ray


class _core_output_held:
    """File descriptor 2 sent to a temporary file while Ray joins (its C++ core writes there, not to sys.stderr),
    given back afterwards; `keep_away()` leaves Ray's core writing to the file while Python's stderr is given back
    (a join still retrying in its thread as the command ends must not print over the one line it ends with)."""

    def __enter__(self):
        import tempfile

        sys.stderr.flush()
        self.file = tempfile.TemporaryFile()
        self.saved = os.dup(2)
        os.dup2(self.file.fileno(), 2)
        self.kept_away = False
        return self

    def last_line(self) -> str:
        self.file.seek(0)
        lines = [line.strip() for line in self.file.read()[-4096:].decode("utf-8", "replace").splitlines()]
        return next((line for line in reversed(lines) if line), "")

    def keep_away(self) -> None:
        from core.sanitise import MaskedStream

        self.kept_away = True
        fresh = os.fdopen(os.dup(self.saved), "w", buffering=1, errors="backslashreplace")
        sys.stderr = sys.stderr.onto(fresh) if isinstance(sys.stderr, MaskedStream) else fresh

    def __exit__(self, *exc):
        if not self.kept_away:
            os.dup2(self.saved, 2)
            self.file.close()
        os.close(self.saved)
        return False


class _Progress:
    """The actor the tasks report to (on the driver's node): (shard index, event, ...) tuples, read in order."""

    def __init__(self):
        self.events: list[tuple] = []

    def report(self, event: tuple) -> None:
        self.events.append(event)

    def drain(self) -> list[tuple]:
        events, self.events = self.events, []
        return events


def _shard_task(job: Callable, bench: str, shard: Shard, progress, folder: str):
    """What a task runs on its node: job(bench, shard), in the driver's working folder (the command's relative paths,
    the build's among them, mean there what they mean to the driver), its progress reported to the driver's actor."""
    import ray

    from core.progress import reported_to
    from core.threads import limit_to

    context = ray.get_runtime_context()
    cpus = context.get_assigned_resources().get("CPU")
    if cpus:  # a worker process runs on its task's CPUs, not the node's (the driver's setting it inherits)
        limit_to(int(cpus))
    if not os.path.isdir(folder):
        raise ParamsError(f"--ray: the driver's working folder {folder} is not on node {context.get_node_id()[:12]} "
                          f"({socket.gethostname()}); every node needs the build at the path the command names")
    name = (bench, shard.index)
    progress.report.remote((name, "start", context.get_node_id(), socket.gethostname(), os.getpid()))
    shown = {"at": 0.0}

    def report(desc, done, total):
        now = time.monotonic()
        if now - shown["at"] >= 1.0 or (total is not None and done >= total):
            shown["at"] = now
            progress.report.remote((name, "progress", desc, done, total))

    before = os.getcwd()
    os.chdir(folder)
    try:
        with reported_to(report):
            return job(bench, shard)
    finally:
        os.chdir(before)


def run_on_ray(run: RayRun, benches: list[str], job: Callable, keep: Callable, echo: Callable, what: str) -> int:
    """Run job(bench, Shard(i, N)) for every benchmark of BENCHES and i < N as Ray tasks on the cluster at
    `run.address`, and keep(bench, shard, result) each result as it comes; N is `run.shards`, or as many tasks as the
    cluster's resources run at once. One task per benchmark's shard: a worker that is done takes the next one, so
    the workers finish together however unequal the shards, and the driver gets each as it finishes. The shard
    count. `echo` hears each task start (and start again when it was lost), its progress now and then, and its end;
    `what` names the run in those lines. The first failure cancels the other tasks and is raised (`_result`)."""
    ray, task, count = _connected(run.address), run.task, run.shards
    try:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        if count is None:
            count = task.fits(ray.cluster_resources())
        here = NodeAffinitySchedulingStrategy(node_id=ray.get_runtime_context().get_node_id(), soft=False)
        progress = ray.remote(_Progress).options(num_cpus=0, scheduling_strategy=here).remote()
        remote = ray.remote(_shard_task).options(max_retries=RETRIES, retry_exceptions=False, **task.options())
        nodes = sum(1 for node in ray.nodes() if node.get("Alive"))
        echo(f"ray: {what} in {count} shard{'s' if count != 1 else ''} on {nodes} node{'s' if nodes != 1 else ''}, "
             f"each task with {task.cpus:g} CPU, {task.gpus:g} GPU"
             + (f", {task.memory / 2**30:.3g} GiB" if task.memory else ""))
        shipped = ray.put(job)  # the job (and what it carries) into the object store once, not once per task
        pending = {remote.remote(shipped, bench, Shard(i, count), progress, os.getcwd()): (bench, i)
                   for bench in benches for i in range(count)}
        watch = _Watch(count, len(benches) > 1, echo)
        try:
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1, timeout=1.0)
                watch.heard(ray.get(progress.drain.remote()))
                for ref in ready:
                    bench, index = pending.pop(ref)
                    shard = Shard(index, count)
                    keep(bench, shard, _result(ray, ref, watch.name((bench, index)), shard))
                    watch.done((bench, index))
        finally:
            for ref in pending:
                ray.cancel(ref, force=True)
        return count
    finally:
        ray.shutdown()


def _result(ray, ref, name: str, shard: Shard):
    """A finished task's result, or its failure as vlbench's own error: the run's error in its own words; a task
    lost more often than Ray retries it (RETRIES), or an internal error, in one line naming the shard."""
    from ray.exceptions import RayTaskError

    try:
        return ray.get(ref)
    except RayTaskError as exc:
        cause = exc.cause
        if isinstance(cause, VlbenchError):
            raise cause from None
        text = " ".join(str(cause).split())[:300]
        raise ModelError(f"--ray: {name} failed ({type(cause).__name__}: {text})") from None
    except Exception as exc:  # the worker or node lost RETRIES + 1 times, the task cancelled, the cluster gone
        text = " ".join(str(exc).split())[:300]
        raise ModelError(f"--ray: {name} did not finish after {RETRIES + 1} tries ({type(exc).__name__}: {text}); "
                         f"its files are not written, the finished shards' are: run it with --shard "
                         f"{shard.index}/{shard.count} and merge") from None


class _Watch:
    """The driver's lines about the tasks: started (again), progress at most every SHOWN_EVERY_S, finished. A task
    is named by its shard, and by its benchmark where the run has several (`suite`)."""

    def __init__(self, count: int, named: bool, echo):
        self.count, self.named, self.echo = count, named, echo
        self.starts: dict[tuple, int] = {}
        self.shown: dict[tuple, float] = {}

    def name(self, key: tuple) -> str:
        bench, index = key
        return f"{bench} shard {index} of {self.count}" if self.named else f"shard {index} of {self.count}"

    def heard(self, events: list[tuple]) -> None:
        for key, kind, *rest in events:
            key = tuple(key)
            if kind == "start":
                node, host, pid = rest
                self.starts[key] = self.starts.get(key, 0) + 1
                again = (" again (its last try was lost with its worker or node)" if self.starts[key] > 1 else "")
                self.echo(f"ray: {self.name(key)} started{again} on node {node[:12]} ({host}, pid {pid})")
            elif kind == "progress":
                desc, done, total = rest
                now = time.monotonic()
                if now - self.shown.get(key, 0.0) >= SHOWN_EVERY_S or (total is not None and done >= total):
                    self.shown[key] = now
                    self.echo(f"ray: {self.name(key)}: {desc} {done:,}" + (f" of {total:,}" if total is not None
                                                                          else ""))

    def done(self, key: tuple) -> None:
        self.echo(f"ray: {self.name(key)} finished")


def write_shard_files(root: Path, files: dict[str, bytes]) -> None:
    """A task's files (relative POSIX names, as the task made them in its folder) written under ROOT together;
    a name that would leave ROOT (absolute, `..`) is refused before anything is written."""
    from core.errors import write_error
    from core.outdir import write_together

    placed = {}
    for name in sorted(files):
        parts = PurePosixPath(name).parts
        if not parts or PurePosixPath(name).is_absolute() or any(p in ("", ".", "..") for p in parts) or \
                "\\" in name:
            raise ModelError(f"--ray: a task sent back a file named {name[:80]!r}, outside the run's folder")
        placed[Path(root, *parts)] = files[name]
    try:
        write_together(placed)
    except OSError as exc:
        raise write_error(f"{root}: cannot write the shards' files", exc) from None

