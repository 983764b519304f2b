"""Benchmark: the challenge service (`vlbench serve`, SQLite) against `vlbench evaluate` of the same files in the same
run.

- Upload to score (one scoring worker) of a VQA-CP-test-size submission (about 219,900 answers, on a hidden
  phase: a sealed VQA-CP test re-split from a synthetic VQA v2 of 658,111 questions) and of a VisDial val one
  (2,064 dialogs of 10 rounds, 100 options ranked per round, on a public phase: a sealed VisDial split asks one
  round per dialog): the time from the first byte sent to the scored record read back, against `evaluate` of the
  file on the unsealed build in this process (the medians of 3, after two warm-ups of each: repeated calls in one
  process get faster).
  Target: the service's overhead under 20% (ratio <= 1.2).
- 20 teams uploading 6 files each at once (120 requests on 20 threads, 2 scoring workers) with a limit of 5 a
  day: exactly 100 accepted and 20 refused with 429.
- Requests per second of the status endpoint while those uploads are taken and scored (no target).

    python scripts/bench_serve.py [--questions 658111] [--dialogs 2064]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import random
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

from benchlib import reported, serve_on_loopback, submitted, verdict

ROOT = Path(__file__).resolve().parents[1]
TARGET_RATIO = 1.2


def _served_seconds(url: str, token: str, phase: str, body: bytes) -> float:
    """Seconds from the upload's first byte to its scored record read back (the server holds the request until
    then: `?wait=`)."""
    started = time.perf_counter()
    record = submitted(url, token, phase, body)
    assert record["status"] == "scored", record["error"]
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=658_111)
    parser.add_argument("--dialogs", type=int, default=2064)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    import httpx
    import pyarrow.parquet as pq
    import yaml

    from builders.visdial.samples import write_visdial
    from builders.vqa.samples import write_vqa_v2
    from evaluator.request import ScoringRequest
    from evaluator.run import evaluate
    from pipelines.build import run_build
    from pipelines.seal import seal
    from pipelines.serve.config import load_config

    with tempfile.TemporaryDirectory(prefix="vlbench-bench-serve-") as tmp:
        tmp = Path(tmp)
        n_train = round(args.questions * 443_757 / 658_111)
        write_vqa_v2(tmp / "src" / "vqa_v2", n_train, args.questions - n_train, seed=2024, release_shape=True)
        run_build("vqa-cp", tmp / "src", tmp / "vqa-cp", assignments=["mode=regenerate"], use_cache=False)
        write_visdial(tmp / "src" / "visdial", {"val": args.dialogs}, seed=2024)
        run_build("visdial", tmp / "src", tmp / "visdial", splits=["val"], use_cache=False)
        files = {}
        rng = random.Random(0)
        test = pq.read_table(tmp / "vqa-cp" / "default" / "test-00000-of-00001.parquet",
                             columns=["question_id", "multiple_choice_answer"])
        files["vqa-cp"] = json.dumps([{"question_id": q, "answer": a if rng.random() < 0.6 else "no"} for q, a in
                                      zip(*(test.column(c).to_pylist() for c in test.column_names))]).encode()
        val = pq.read_table(tmp / "visdial" / "default" / "val-00000-of-00001.parquet",
                            columns=["image_id", "round_id"])
        rounds = zip(*(val.column(c).to_pylist() for c in val.column_names))
        files["visdial"] = json.dumps([{"image_id": i, "round_id": r, "ranks": rng.sample(range(1, 101), 100)}
                                       for i, r in rounds]).encode()
        seal(str(tmp / "vqa-cp"), tmp / "public-vqa-cp", tmp / "private" / "vqa-cp.zip")
        phases = [{"name": "vqa-cp", "benchmark": "vqa-cp", "data": str(tmp / "public-vqa-cp"),
                   "answers": str(tmp / "private" / "vqa-cp.zip"), "limits": {"per_day": 5, "concurrent": 6}},
                  {"name": "visdial", "benchmark": "visdial", "data": str(tmp / "visdial"), "visibility": "public",
                   "limits": {"per_day": 5, "concurrent": 6}}]
        for bench in ("vqa-cp", "visdial"):
            (tmp / f"{bench}.json").write_bytes(files[bench])
        config = tmp / "challenge.yaml"
        config.write_text(yaml.safe_dump({"challenge": "bench", "storage": str(tmp / "store"),
                                          "requests_per_minute": 100_000, "phases": phases}))
        store = load_config(config).store()
        tokens = [store.add_team(f"team {k}") for k in range(20)]
        host = store.add_team("hosts", host=True)
        ok = True
        # one worker: each measured submission is scored by a worker as warm as this process is for its evaluate
        process, url = serve_on_loopback(config, 1)
        try:
            for bench in ("vqa-cp", "visdial"):
                for _ in range(2):  # first calls, in the worker and here
                    _served_seconds(url, host, bench, files[bench])
                    evaluate(ScoringRequest(bench, str(tmp / bench)), tmp / f"{bench}.json")
                times = []
                for _ in range(3):
                    started = time.perf_counter()
                    evaluate(ScoringRequest(bench, str(tmp / bench)), tmp / f"{bench}.json")
                    times.append(time.perf_counter() - started)
                alone = sorted(times)[1]
                served = sorted(_served_seconds(url, host, bench, files[bench]) for _ in range(3))[1]
                rows = len(json.loads(files[bench]))
                ok &= verdict(f"upload to score, {bench} ({rows:,} rows), vs evaluate of the same file",
                              served / alone, TARGET_RATIO, "x", detail=f"{served:.2f} s vs {alone:.2f} s")
        finally:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(30)
        process, url = serve_on_loopback(config, 2)
        try:

            stop, counted = threading.Event(), [0]

            def poll_status():
                with httpx.Client() as client:
                    while not stop.is_set():
                        assert client.get(f"{url}/api/v1/status", timeout=30).status_code == 200
                        counted[0] += 1

            poller = threading.Thread(target=poll_status)
            small = files["visdial"]

            def upload(token: str) -> int:
                return httpx.post(f"{url}/api/v1/phases/visdial/submissions", content=small, timeout=120,
                                  headers={"Authorization": f"Bearer {token}"}).status_code

            started = time.perf_counter()
            poller.start()
            with concurrent.futures.ThreadPoolExecutor(20) as pool:
                codes = list(pool.map(upload, [t for t in tokens[:20] for _ in range(6)]))
            while store.counts()["queued"] + store.counts()["scoring"] and time.perf_counter() - started < 600:
                time.sleep(0.1)
            stop.set()
            poller.join()
            elapsed = time.perf_counter() - started
            exact = codes.count(202) == 100 and codes.count(429) == 20
            ok &= verdict("20 teams x 6 uploads at once, per-day limit 5: submissions accepted", codes.count(202),
                          100, "", holds=exact,
                          detail=f"{codes.count(429)} refused with 429; all scored in {elapsed:.1f} s")
            reported("status requests/s while 100 uploads are taken and scored", counted[0] / elapsed, "/s",
                     "depends on the machine; one client, one web process, 2 workers on 2 cores")
        finally:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(30)
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
