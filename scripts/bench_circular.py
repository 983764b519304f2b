"""Benchmark: the cost of CircularEval (`predict --circular`) on the demo's COSIM-Q rows with the demo's tiny
LLaVA (`hf:`, letter choice).

Measured in this run against plain letter choice on the same rows (the baseline):
- asks (generations) per row: one per rotation of the options; target <= the options per row (4);
- wall time, circular over plain: target <= 4.5x (four times the generations, plus the rotations' prompts);
- a rerun with `--resume` (the response cache): every rotation answered from the cache, nothing generated;
  target: rerun wall time <= 25% of the first circular run's.
The build is made before the clock starts.

    python scripts/bench_circular.py [--bench cosim-q]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
import time
from pathlib import Path

from benchlib import verdict

ROOT = Path(__file__).resolve().parents[1]
TARGET_SLOWDOWN, TARGET_RERUN_SHARE = 4.5, 0.25


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bench", default="cosim-q",
                        help="a benchmark asked by letter (cosim-q, vcr-visor, pmr-p, vcr)")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    import pyarrow.parquet as pq

    from builders.registry import get_benchmark
    from evaluator.models.options import ModelOptions
    from evaluator.run import predict
    from pipelines.build import run_build
    from pipelines.samples import write_samples
    from pipelines.tiny_models import write_tiny_llava

    with tempfile.TemporaryDirectory(prefix="bench-circular-") as tmp:
        tmp = Path(tmp)
        write_samples(tmp / "sources")
        entry = get_benchmark(args.bench)
        run_build(args.bench, tmp / "sources", tmp / args.bench, assignments=entry.demo_params)
        model = f"hf:{write_tiny_llava(tmp / 'llava')}"
        images = _images(tmp, args.bench)
        base = ModelOptions(images=images, choice_mode="letter", max_new_tokens=2)
        rows = sum(pq.read_metadata(p).num_rows for p in (tmp / args.bench).glob("*/*.parquet")
                   if p.name.startswith(_split(args.bench)))
        timings = {}
        circular = dataclasses.replace(base, circular=True, response_cache=tmp / "cache.sqlite3")
        for name, options in (("plain", base), ("circular", circular), ("rerun", circular)):
            start = time.perf_counter()
            predict(args.bench, str(tmp / args.bench), model, tmp / f"{name}.json", options=options)
            timings[name] = time.perf_counter() - start
        record = json.loads((tmp / "circular.meta.json").read_text())
        rerun = json.loads((tmp / "rerun.meta.json").read_text())
    asks = record["asked"]["circular"]["asks"]
    prompts = record["asked"]["circular"]["prompts"]
    print(f"{args.bench}: {rows:,} rows, {prompts:,} prompts, {asks:,} asks; plain {timings['plain']:.1f} s, "
          f"circular {timings['circular']:.1f} s, rerun {timings['rerun']:.1f} s; rerun cache hits "
          f"{rerun['cache']['hits']:,}, stored {rerun['cache']['stored']:,}")
    ok = verdict("CircularEval asks per prompt", asks / prompts, 4.0, "")
    ok &= verdict("CircularEval wall time over plain letter choice", timings["circular"] / timings["plain"],
                  TARGET_SLOWDOWN, "x")
    ok &= verdict("CircularEval rerun from the cache, share of the first run", timings["rerun"] / timings["circular"],
                  TARGET_RERUN_SHARE, "", holds=rerun["cache"]["hits"] == asks and rerun["cache"]["stored"] == 0,
                  detail=f"{rerun['cache']['hits']:,} of {asks:,} asks from the cache, {rerun['cache']['stored']} new")
    return 0 if ok else 1


def _split(bench: str) -> str:
    from evaluator.tasks import get_task

    return get_task(bench).default_split


def _images(tmp: Path, bench: str) -> Path:
    """The sample sources' picture folder of the benchmark (the release's own layout)."""
    from evaluator.tasks import get_task

    folder = get_task(bench).images_folder
    return tmp / "sources" / folder


if __name__ == "__main__":
    sys.exit(main())
