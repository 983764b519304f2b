"""Benchmark: PMR-P on a PMR-size input (1,538 original val samples, synthetic, native format), CPU,
packaged MiniLM and a tiny random NLI model (offline stand-ins for the recipe's models).

The issue's target (the VCR-Visor paper's App. C recipe through the shared pairing engine): the build
takes seconds beyond its model passes. Measured in one run with the caches off (the model libraries
imported before the clock starts, benchlib.offline_build_child): wall time, time inside the SBERT and
NLI forward passes, and what is left (target: at most 5 s).

    python scripts/bench_pmr_p_build.py [--samples 1538] [--nli-model PATH_OR_ID]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from benchlib import offline_build, offline_build_child, verdict, write_tiny_nli

ROOT = Path(__file__).resolve().parents[1]
TARGET_OUTSIDE_SECONDS = 5.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=1_538)
    parser.add_argument("--nli-model", default=None)
    parser.add_argument("--contexts", type=int, default=150,
                        help="premise endings of the synthetic samples (builders/pmr/samples.py); more: rarer pairs")
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        offline_build_child(*args.child)
        return 0
    sys.path.insert(0, str(ROOT))
    import msgspec

    from builders.pmr.samples import generate_pmr

    with tempfile.TemporaryDirectory(prefix="vlbench-bench-pmr-") as tmp:
        source = Path(tmp) / "val-ori.jsonl"
        samples = generate_pmr(args.samples, seed=17, contexts=args.contexts)
        source.write_bytes(b"".join(msgspec.json.encode(r) + b"\n" for r in samples))
        nli = args.nli_model or str(write_tiny_nli(Path(tmp) / "tiny-nli"))
        r = offline_build(__file__, "pmr-p", source, Path(tmp) / "out", nli)
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
    print(f"peak RSS: {r['peak_rss_mb']:.0f} MB")
    ok = verdict("PMR-P build, seconds beyond the model passes", outside, TARGET_OUTSIDE_SECONDS, " s",
                 detail=f"{args.samples:,} samples, wall {r['wall']:.1f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
