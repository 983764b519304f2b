"""Benchmark: the threads vlbench chooses for torch (core/threads.py) against torch's default, on a busy machine
and on an idle one.

Timed, each in a fresh interpreter: 400 forward passes of a tiny random Llama built from its config (2 layers,
hidden size 64, a batch of 8 prompts of 32 tokens: the shape of the tests' and the demo's tiny models, whose steps
are small enough that waiting threads cost more than they compute), with torch's default threads (no thread
variable set: one per core, spinning while they wait) and with what `vlbench` sets before torch is loaded (the
cores the process may use, OpenMP's passive wait). Beside one busy process per core but one (`--hogs`, default:
cores - 1; at least 1), then with nothing beside.

Targets: beside the busy processes, vlbench's choice takes at most 0.8x the default's time; on the idle machine,
at most 1.1x (the passive wait costs little where no core is busy).

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
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OMP_WAIT_POLICY")


def _child() -> None:
    """The timed step (`--child forward`): in this interpreter, with the thread variables it was given."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=4)).eval()
    tokens = torch.randint(0, 512, (8, 32))
    with torch.inference_mode():
        for _ in range(20):
            model(tokens)
        start = time.perf_counter()
        for _ in range(400):
            model(tokens)
    report(time.perf_counter() - start)


def _hog() -> None:
    while True:
        pass


def _timed(chosen: bool) -> float:
    """Seconds of the forward passes with torch's default threads, or with vlbench's choice."""
    sys.path.insert(0, str(ROOT))
    from core.threads import choose_threads

    saved = {name: os.environ.pop(name) for name in THREAD_VARIABLES if name in os.environ}
    try:
        if chosen:
            choose_threads()
        return measure(__file__, "forward")["seconds"]
    finally:
        for name in THREAD_VARIABLES:
            os.environ.pop(name, None)
        os.environ.pop("VLBENCH_THREADS_CHOSEN", None)
        os.environ.update(saved)


def main() -> int:
    if sys.argv[1:2] == ["--child"]:
        _child()
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hogs", type=int, default=max(1, len(os.sched_getaffinity(0)) - 1))
    args = parser.parse_args()
    hogs = [multiprocessing.Process(target=_hog, daemon=True) for _ in range(args.hogs)]
    for hog in hogs:
        hog.start()
    try:
        busy = {chosen: _timed(chosen) for chosen in (False, True)}
    finally:
        for hog in hogs:
            hog.terminate()
    idle = {chosen: _timed(chosen) for chosen in (False, True)}
    cores = len(os.sched_getaffinity(0))
    ok = verdict(f"tiny model forwards beside {args.hogs} busy process(es), vlbench's threads vs torch's default",
                 busy[True] / busy[False], 0.8, "x", detail=f"{busy[True]:.2f} s vs {busy[False]:.2f} s, {cores} cores")
    ok &= verdict("the same on the idle machine", idle[True] / idle[False], 1.1, "x",
                  detail=f"{idle[True]:.2f} s vs {idle[False]:.2f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
