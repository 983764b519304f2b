"""Benchmark: `vlbench suite` of a tiny generative VLM over every benchmark of the embedded samples, as Ray tasks on
two workers (`--ray`, evaluator/ray_shards.py) against one process, in the same run.

Targets, measured in this run:

1. the suite on a local Ray cluster of 2 CPUs (2 shards, a task of 1 CPU per benchmark's shard) is >= 1.6x as fast
   as one process with one CPU's threads (OMP_NUM_THREADS=1: what Ray gives a 1-CPU task), and writes the same
   bytes: every prediction file, record, the card and the report. The medians of --rounds rounds (3), the two
   runs taking turns to go first: one run of each varies by 15% or more on a shared virtual machine;
2. merging the shards (`vlbench merge`'s work, for every benchmark) takes < 2% of the Ray run's wall time.

Reported without a target:
- the machine's own ceiling: the same split without Ray, `suite --shard 0/2` and `suite --shard 1/2` as two plain
  processes at once (one thread each), then `suite` merging and scoring them. Two processes on two cores are not
  twice one: they share the caches and the memory bus, so what Ray adds is the gap between this and the Ray run;
- one process with torch's default threads (every core), and whether its bytes are the others' (CPU floats depend
  on the thread count in the last bits, which can flip a random tiny model's near tie).

The model is a tiny LLaVA (pipelines/tiny_models.py; hidden size 64, 64 px images by default). The builds, the model
and the cluster are made before the clock starts; the runs leave out the perceptual score and CounterBias
(`--no-perceptual --no-counterbias`: neither is split into shards, so each costs every run alike).

    python scripts/bench_shards.py [--rounds 3] [--shards 2] [--cpus 2] [--hidden 64] [--image-size 64]
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchlib import reported, verdict

ROOT = Path(__file__).resolve().parents[1]
SPEEDUP_TARGET, MERGE_SHARE_TARGET = 1.6, 2.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_cluster(temp: Path, cpus: int, env: dict) -> tuple[subprocess.Popen, str]:
    """A Ray head of `cpus` CPUs on loopback (`ray start --head --block`, in its own process group), once its GCS
    answers (at most 120 s)."""
    port = free_port()
    head = subprocess.Popen([str(Path(sys.executable).with_name("ray")), "start", "--head", "--block",
                             "--node-ip-address=127.0.0.1", f"--port={port}", f"--num-cpus={cpus}",
                             "--include-dashboard=false", "--disable-usage-stats", f"--temp-dir={temp}"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 120
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return head, f"127.0.0.1:{port}"
        except OSError:
            if head.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("the Ray head did not start") from None
            time.sleep(0.5)


def timed(command: list[str], env: dict) -> float:
    start = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command[:6])}...: {done.stderr[-2000:]}")
    return seconds


def timed_side_by_side(commands: list[list[str]], then: list[str], env: dict) -> float:
    """Seconds for COMMANDS run at once (each to its end), then THEN."""
    start = time.perf_counter()
    running = [subprocess.Popen(c, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
               for c in commands]
    for command, process in zip(commands, running):
        _, err = process.communicate()
        if process.returncode != 0:
            raise SystemExit(f"{' '.join(command[:6])}...: {err[-2000:]}")
    return time.perf_counter() - start + timed(then, env)


def outputs(out: Path) -> dict[str, bytes]:
    """A suite folder's files that must be identical: predictions and records, the card and the report."""
    found = {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted((out / "predictions").iterdir())
             if ".shard-" not in p.name and not p.name.endswith(".key.json")}
    return found | {name: (out / name).read_bytes() for name in ("card.json", "report.md")}


def merge_seconds(predictions: Path, count: int, into: Path) -> float:
    """Seconds to merge every benchmark's shards in PREDICTIONS again (into INTO), as `vlbench merge` does."""
    from evaluator.shards import Shard, merge

    benches = sorted({p.name.split(".shard-")[0] for p in predictions.glob(f"*.shard-0-of-{count}.json")})
    start = time.perf_counter()
    for bench in benches:
        out = predictions / f"{bench}.json"
        merge([Shard(i, count).path(out) for i in range(count)], into / f"{bench}.json")
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="rounds of one process and Ray (their medians)")
    parser.add_argument("--shards", type=int, default=2, help="shards of the Ray run")
    parser.add_argument("--cpus", type=int, default=2, help="CPUs of the local Ray cluster (one per worker)")
    parser.add_argument("--hidden", type=int, default=64, help="the tiny LLaVA's hidden size")
    parser.add_argument("--image-size", type=int, default=64, help="its vision tower's image size")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from builders.registry import benchmarks
    from evaluator.tasks import has_task
    from pipelines.build import run_build
    from pipelines.samples import write_samples
    from pipelines.tiny_models import write_tiny_llava

    with tempfile.TemporaryDirectory(prefix="bench-shards-", dir="/tmp") as tmp:  # short: Ray's socket paths
        tmp = Path(tmp)
        write_samples(tmp / "sources")
        for entry in benchmarks():
            if has_task(entry.name):
                run_build(entry.name, tmp / "sources", tmp / "data" / entry.name, assignments=entry.demo_params)
        model = write_tiny_llava(tmp / "llava", hidden=args.hidden, layers=2, image_size=args.image_size)
        env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0",
               "PYTHONPATH": str(ROOT), "TQDM_DISABLE": "1"}
        suite = [sys.executable, "-m", "pipelines.cli", "suite", "--model", f"hf:{model}", "--data",
                 str(tmp / "data"), "--images-root", str(tmp / "sources"), "--no-perceptual", "--no-counterbias",
                 "--max-new-tokens", "4"]
        (tmp / "ray").mkdir()
        head, address = start_cluster(tmp / "ray", args.cpus, env)
        runs = {"one": lambda out: timed([*suite, "--out", str(out)], {**env, "OMP_NUM_THREADS": "1"}),
                "on-ray": lambda out: timed([*suite, "--out", str(out), "--ray", address, "--ray-shards",
                                             str(args.shards)], env)}
        seconds: dict[str, list[float]] = {name: [] for name in runs}
        try:
            for k in range(args.rounds):  # taking turns to go first; each round into folders of its own
                for name in sorted(runs, reverse=k % 2 == 1):
                    seconds[name].append(runs[name](tmp / f"{name}-{k}"))
                print(f"round {k + 1}: one process {seconds['one'][-1]:.1f} s, on Ray {seconds['on-ray'][-1]:.1f} s",
                      flush=True)
            one, on_ray = statistics.median(seconds["one"]), statistics.median(seconds["on-ray"])
            default = timed([*suite, "--out", str(tmp / "default")], env)
            plain = timed_side_by_side([[*suite, "--out", str(tmp / "plain"), "--shard", f"{i}/2"] for i in range(2)],
                                       [*suite, "--out", str(tmp / "plain")], {**env, "OMP_NUM_THREADS": "1"})
        finally:
            os.killpg(head.pid, signal.SIGTERM)
            try:
                head.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(head.pid, signal.SIGKILL)
        (tmp / "merged").mkdir()
        merging = merge_seconds(tmp / "on-ray-0" / "predictions", args.shards, tmp / "merged")
        ray_bytes = outputs(tmp / "on-ray-0")
        same = all(outputs(tmp / f"{name}-{k}") == ray_bytes for name in runs for k in range(args.rounds))
        default_same = outputs(tmp / "default") == ray_bytes
        plain_same = outputs(tmp / "plain") == ray_bytes
    print(f"medians of {args.rounds} rounds: one process (1 thread) {one:.1f} s, {args.shards} shards on Ray "
          f"({args.cpus} CPUs) {on_ray:.1f} s; once: "
          f"one process (default threads) {default:.1f} s, 2 plain shard processes at once and the merging suite "
          f"{plain:.1f} s; merging every benchmark's shards {merging:.2f} s")
    ok = verdict(f"suite on Ray, {args.cpus} workers vs one process", one / on_ray, SPEEDUP_TARGET, "x", at_least=True,
                 holds=same, detail=f"bytes identical: {same} (predictions, records, card, report; every round's runs)")
    ok &= verdict("merge's share of the Ray run", 100 * merging / on_ray, MERGE_SHARE_TARGET, "%")
    reported("the machine's ceiling: 2 plain shard processes (no Ray) vs one process", one / plain, "x",
             f"bytes identical to the Ray run's: {plain_same}; Ray reaches {100 * plain / on_ray:.0f}% of it")
    reported(f"suite on Ray, {args.cpus} workers vs one process with every core's threads", default / on_ray, "x",
             f"bytes identical to the Ray run's: {default_same} (the thread count moves CPU floats' last bits)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
