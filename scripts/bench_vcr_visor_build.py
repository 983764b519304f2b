"""Benchmark: VCR-Visor pair mining on a VCR-val-size input (26,534 questions), CPU, packaged MiniLM.

The input (`generate_vcr_matched`) has VCR val's shape: its mix of causal and temporal questions, short
questions that recur across movies, correct responses that are texts of their own, and distractors that
are other records' correct responses re-tagged (adversarial matching).

Reports what the models were asked for versus what they computed (each distinct string is
embedded once; each distinct NLI pair is classified once), the candidate pairs against the NLI
pairs scored, the float64 re-checks, the stages' seconds and the NLI estimate against the pass, and
three measures from one run with the caches off: the wall time of the build (target: under 10 minutes
on 2 cores), its peak RSS (under 4 GB), both printed against a bare `json.loads` of the same
file in a fresh process in the same run, and the share of the build's wall time spent outside model
forward passes (at most 10%).

The NLI model is a tiny random RobertaForSequenceClassification built from a config (nothing is
downloaded); pass --nli-model to use a real one, e.g. FacebookAI/roberta-large-mnli.

    python scripts/bench_vcr_visor_build.py [--items 26534] [--nli-model PATH_OR_ID | none]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from benchlib import offline_build, offline_build_child, verdict, write_tiny_nli

ROOT = Path(__file__).resolve().parents[1]
TARGET_OUTSIDE_SHARE = 0.10
TARGET_WALL_S = 600.0
TARGET_RSS_MB = 4096.0
# the baseline: a fresh Python parses every line of the file with json.loads (the clock around the parse only)
LOAD_BASELINE = """import json, resource, sys, time
start = time.perf_counter()
with open(sys.argv[1], "rb") as fh:
    records = [json.loads(line) for line in fh]
print(json.dumps({"seconds": time.perf_counter() - start,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=26_534)
    parser.add_argument("--nli-model", default=None)
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        offline_build_child(*args.child)
        return 0
    sys.path.insert(0, str(ROOT))
    import msgspec

    from builders.sources.vcr_samples import generate_vcr_matched

    with tempfile.TemporaryDirectory(prefix="vlbench-bench-vcr-") as tmp:
        source = Path(tmp) / "src"
        source.mkdir()
        records = generate_vcr_matched(args.items, 11)
        (source / "val.jsonl").write_bytes(b"".join(msgspec.json.encode(r) + b"\n" for r in records))
        nli = args.nli_model or str(write_tiny_nli(Path(tmp) / "tiny-nli"))
        baseline = load_baseline(source / "val.jsonl")
        r = offline_build(__file__, "vcr-visor", source, Path(tmp) / "out", nli)
    sbert, nli_stats = r["models"]["sbert"], r["models"].get("nli", {})
    forward = sbert["forward_seconds"] + nli_stats.get("forward_seconds", 0.0)
    outside = (r["wall"] - forward) / r["wall"]
    candidates = sum(m["candidates"] for m in r["statistics"]["mining"].values())
    print(f"input: {args.items:,} VCR val questions (synthetic, native format, adversarially matched); NLI model: "
          f"{args.nli_model or 'tiny random RoBERTa (offline stand-in)'}")
    print(f"sentence strings: {sbert['requested']:,} requested, {sbert['distinct']:,} distinct, "
          f"{sbert['computed']:,} encoded ({sbert['computed'] / max(1, sbert['requested']):.1%} of requested)")
    print(f"NLI: {candidates:,} candidate pairs -> {nli_stats.get('requested', 0):,} directed pairs asked, "
          f"{nli_stats.get('computed', 0):,} distinct pairs scored")
    print("candidate pairs -> kept after NLI: " + ", ".join(f"{k} {m['candidates']:,} -> {m['kept']:,}"
                                                          for k, m in r["statistics"]["mining"].items()))
    print(f"float64 re-checks: {sbert['refined']:,} texts (cosines on a rounding boundary that decide or are "
          f"written); NLI estimated {nli_stats.get('estimated_seconds', 0.0):.1f} s from early batches, took "
          f"{nli_stats.get('total_seconds', 0.0):.1f} s")
    print("stages: " + ", ".join(f"{k} {v:.1f} s" for k, v in r["stage_seconds"].items()))
    print(f"wall {r['wall']:.1f} s; forward passes {forward:.1f} s (SBERT {sbert['forward_seconds']:.1f}, "
          f"NLI {nli_stats.get('forward_seconds', 0.0):.1f})")
    print(f"json.loads of the same file: {baseline['seconds']:.2f} s, peak RSS {baseline['peak_rss_mb']:.0f} MB; "
          f"build: {r['wall']:.1f} s ({r['wall'] / baseline['seconds']:.0f}x), peak RSS {r['peak_rss_mb']:.0f} MB "
          f"({r['peak_rss_mb'] / baseline['peak_rss_mb']:.1f}x)")
    ok = verdict("VCR-Visor build, wall time", r["wall"], TARGET_WALL_S, " s",
                 detail=f"{args.items:,} items; json.loads {baseline['seconds']:.2f} s in the same run")
    ok &= verdict("VCR-Visor build, peak RSS", r["peak_rss_mb"], TARGET_RSS_MB, " MB",
                  detail=f"json.loads {baseline['peak_rss_mb']:.0f} MB")
    ok &= verdict("VCR-Visor build, share of wall outside model forward passes", 100 * outside,
                  100 * TARGET_OUTSIDE_SHARE, "%", detail=f"wall {r['wall']:.0f} s")
    return 0 if ok else 1


def load_baseline(path: Path) -> dict:
    """Seconds and peak RSS of LOAD_BASELINE on `path`."""
    done = subprocess.run([sys.executable, "-c", LOAD_BASELINE, str(path)], check=True, capture_output=True, text=True)
    return json.loads(done.stdout)

if __name__ == "__main__":
    sys.exit(main())
