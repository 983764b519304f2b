"""Benchmark: the threads vlbench chooses for torch (core/threads.py) against torch's default, on a busy machine
and on an idle one.

Timed, each in a fresh interpreter, forward passes of two random Llamas built from their configs: `tiny` (2
layers, hidden size 64, 400 passes of a batch of 8 prompts of 32 tokens: the shape of the tests' and the demo's
tiny models, whose steps are so small that waiting threads cost more than they compute) and `small` (4 layers,
hidden size 512, 30 passes of 4 prompts of 128 tokens), with torch's default threads (no thread variable set: one
per core, each spinning 300,000 times before it sleeps) and with what `vlbench` sets before torch is loaded (the
cores the process may use, GOMP_SPINCOUNT=1000). Beside one busy process per core but one (`--hogs`, default:
cores - 1; at least 1), then with nothing beside.

Targets, per model: beside the busy processes, vlbench's choice takes at most 0.8x the default's time; on the
idle machine, at most 1.15x.

    python scripts/bench_threads.py [--hogs N]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import time
from pathlib import Path

from benchlib import measure, report, verdict

ROOT = Path(__file__).resolve().parents[1]
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
MODELS = {  # name: (layers, hidden size, passes, batch, tokens)
    "tiny": (2, 64, 400, 8, 32),
    "small": (4, 512, 30, 4, 128),
}


def _child(name: str) -> None:
    """The timed step (`--child MODEL`): in this interpreter, with the thread variables it was given."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    layers, hidden, passes, batch, length = MODELS[name]
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=4096, hidden_size=hidden, intermediate_size=hidden * 11 // 4,
                                         num_hidden_layers=layers, num_attention_heads=8,
                                         num_key_value_heads=8)).eval()
    tokens = torch.randint(0, 4096, (batch, length))
    with torch.inference_mode():
        for _ in range(3):
            model(tokens)
        start = time.perf_counter()
        for _ in range(passes):
            model(tokens)
    report(time.perf_counter() - start)


def _hog() -> None:
    while True:
        pass


def _timed(name: str, chosen: bool) -> float:
    """Seconds of a model's forward passes with torch's default threads, or with vlbench's choice."""
    sys.path.insert(0, str(ROOT))
    from core.threads import choose_threads

    saved = {name: os.environ.pop(name) for name in THREAD_VARIABLES if name in os.environ}
    try:
        if chosen:
            choose_threads()
        return measure(__file__, name)["seconds"]
    finally:
        for name in THREAD_VARIABLES:
            os.environ.pop(name, None)
        os.environ.pop("VLBENCH_THREADS_CHOSEN", None)
        os.environ.update(saved)


def main() -> int:
    if sys.argv[1:2] == ["--child"]:
        _child(sys.argv[2])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hogs", type=int, default=max(1, len(os.sched_getaffinity(0)) - 1))
    args = parser.parse_args()
    hogs = [multiprocessing.Process(target=_hog, daemon=True) for _ in range(args.hogs)]
    for hog in hogs:
        hog.start()
    try:
        busy = {(name, chosen): _timed(name, chosen) for name in MODELS for chosen in (False, True)}
    finally:
        for hog in hogs:
            hog.terminate()
    idle = {(name, chosen): _timed(name, chosen) for name in MODELS for chosen in (False, True)}
    cores = len(os.sched_getaffinity(0))
    ok = True
    for name in MODELS:
        ok &= verdict(f"{name} model forwards beside {args.hogs} busy process(es), vlbench's threads vs torch's "
                      "default", busy[name, True] / busy[name, False], 0.8, "x",
                      detail=f"{busy[name, True]:.2f} s vs {busy[name, False]:.2f} s, {cores} cores")
        ok &= verdict(f"{name} model forwards on the idle machine, the same", idle[name, True] / idle[name, False],
                      1.15, "x", detail=f"{idle[name, True]:.2f} s vs {idle[name, False]:.2f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
