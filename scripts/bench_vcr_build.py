"""Benchmark: the VCR build on VCR v1.0's full train + val (212,923 + 26,534 questions) versus loading its
JSON lines.

Targets: `vlbench build vcr` (reading and checking every record against the release's invariants, rendering
the text, statistics, the card and the parquet export; stage cache off) finishes within 2x the time a fresh
Python takes to parse every line of the same two files with `json.loads` (and keep the records), measured
in the same run, with a peak RSS within 1.5x the baseline's (measured 2026-11-27: 50.4 s against 47.5 s,
3.3 GB against 2.9 GB). The input is `generate_vcr_matched`'s (native format, 23 fields, VCR's shape:
adversarially matched distractors, responses as distinct as VCR's).

Each measurement runs in its own fresh process, so one's memory does not count against the other's peak
RSS; the build process first builds the small sample sources once (imports and first-call costs).

    python scripts/bench_vcr_build.py [--train 212923] [--val 26534]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from benchlib import measure, report, verdict, warm_timed_build

ROOT = Path(__file__).resolve().parents[1]
TARGET_RATIO, TARGET_RSS_RATIO = 2.0, 1.5
FILES = ("train.jsonl", "val.jsonl")


def _child(mode: str, source: Path, out: Path) -> None:
    """Runs in a fresh interpreter; prints {"seconds", "peak_rss_mb"} as JSON."""
    sys.path.insert(0, str(ROOT))
    if mode == "json":
        start = time.perf_counter()
        for name in FILES:
            with open(source / name, "rb") as fh:
                records = [json.loads(line) for line in fh]
            del records
        seconds = time.perf_counter() - start
    else:
        seconds = warm_timed_build("vcr", source, out)
    report(seconds)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", type=int, default=212_923)
    parser.add_argument("--val", type=int, default=26_534)
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.child[0], Path(args.child[1]), Path(args.child[2]))
        return 0

    sys.path.insert(0, str(ROOT))
    import msgspec

    from builders.sources.vcr_samples import generate_vcr_matched

    with tempfile.TemporaryDirectory(prefix="vlbench-bench-vcr-") as tmp:
        source = Path(tmp) / "src"
        source.mkdir()
        for name, n, seed in (("train.jsonl", args.train, 5), ("val.jsonl", args.val, 11)):
            split = name.split(".")[0]
            records = generate_vcr_matched(n, seed, split=split)
            (source / name).write_bytes(b"".join(msgspec.json.encode(r) + b"\n" for r in records))
            del records
        size = sum((source / name).stat().st_size for name in FILES) / 1e6
        print(f"input: {args.train:,} train + {args.val:,} val VCR questions (synthetic, native format), "
              f"2 files, {size:.0f} MB")
        loaded = measure(__file__, "json", source, Path(tmp))
        built = measure(__file__, "build", source, Path(tmp))
        ratio = built["seconds"] / loaded["seconds"]
        manifest = json.loads((Path(tmp) / "vcr" / "manifest.json").read_text())
        print(f"json.loads of every line: {loaded['seconds']:6.2f} s  (peak RSS {loaded['peak_rss_mb']:.0f} MB)")
        print(f"vlbench build vcr: {built['seconds']:6.2f} s  (peak RSS {built['peak_rss_mb']:.0f} MB); "
              f"splits {', '.join(sorted(manifest['splits']))}")
        ok = verdict("VCR build (train + val) vs json.loads of its lines", ratio, TARGET_RATIO, "x",
                     detail=f"{built['seconds']:.1f} s, peak RSS {built['peak_rss_mb']:.0f} MB; json.loads peak RSS "
                            f"{loaded['peak_rss_mb']:.0f} MB")
        ok &= verdict("VCR build (train + val), peak RSS vs json.loads'", built["peak_rss_mb"] / loaded["peak_rss_mb"],
                      TARGET_RSS_RATIO, "x", detail=f"{built['peak_rss_mb']:.0f} MB vs {loaded['peak_rss_mb']:.0f} MB")
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
