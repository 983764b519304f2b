"""Benchmark: the VisDial build on VisDial v1.0's full train + val (123,287 + 2,064 images, ten rounds each,
100 answer options per round) versus loading its JSON.

Targets: `vlbench build visdial` (reading the release's files, resolving every round's question, answer
and options, the dense relevance of val, statistics, the card and the parquet export; stage cache off)
finishes within 2x the time a fresh Python takes to `json.load` the same three files, measured in the
same run, with a peak RSS within 1.5x the baseline's. The input is the sample writer's
(`builders.visdial.samples.write_visdial`) at the release's size, in its format.

Each measurement runs in its own fresh process, so one's memory does not count against the other's peak
RSS; the build process first builds the small sample sources once (imports and first-call costs).

    python scripts/bench_visdial_build.py [--train 123287] [--val 2064]
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
FILES = ("visdial_1.0_train.json", "visdial_1.0_val.json", "visdial_1.0_val_dense_annotations.json")


def _child(mode: str, source: Path, out: Path) -> None:
    """Runs in a fresh interpreter; prints {"seconds", "peak_rss_mb"} as JSON."""
    if mode == "json":
        start = time.perf_counter()
        loaded = []
        for name in FILES:
            with open(source / "visdial" / name) as fh:
                loaded.append(json.load(fh))
        seconds = time.perf_counter() - start
    else:
        seconds = warm_timed_build("visdial", source, out)
    report(seconds)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", type=int, default=123_287)
    parser.add_argument("--val", type=int, default=2_064)
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.child[0], Path(args.child[1]), Path(args.child[2]))
        return 0

    sys.path.insert(0, str(ROOT))
    from builders.visdial.samples import write_visdial

    with tempfile.TemporaryDirectory(prefix="vlbench-bench-visdial-") as tmp:
        source = Path(tmp) / "src"
        write_visdial(source / "visdial", {"train": args.train, "val": args.val}, seed=2024)
        size = sum((source / "visdial" / name).stat().st_size for name in FILES) / 1e6
        print(f"input: {args.train:,} train + {args.val:,} val VisDial v1.0 dialogs (synthetic, native format), "
              f"3 files, {size:.0f} MB")
        loaded = measure(__file__, "json", source, Path(tmp))
        built = measure(__file__, "build", source, Path(tmp))
        ratio = built["seconds"] / loaded["seconds"]
        print(f"json.load of the 3 files: {loaded['seconds']:6.2f} s  (peak RSS {loaded['peak_rss_mb']:.0f} MB)")
        print(f"vlbench build visdial: {built['seconds']:6.2f} s  (peak RSS {built['peak_rss_mb']:.0f} MB)")
        ok = verdict("VisDial build (train + val) vs json.load of its files", ratio, TARGET_RATIO, "x",
                     detail=f"{built['seconds']:.1f} s vs {loaded['seconds']:.1f} s")
        rss = built["peak_rss_mb"] / loaded["peak_rss_mb"]
        ok &= verdict("VisDial build (train + val), peak RSS vs json.load's", rss, TARGET_RSS_RATIO, "x",
                      detail=f"{built['peak_rss_mb']:.0f} MB vs {loaded['peak_rss_mb']:.0f} MB")
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
