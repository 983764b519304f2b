"""Benchmark: the releases that are small even at full size (Social-IQ, DISCO, VL-Bias) built at that size
versus reading their files.

Inputs, from each sample writer at the release's size, in its format: Social-IQ's 1,250 videos of six
questions (Zadeh et al., CVPR 2019), in the standard folds' proportions (888 train, 127 valid, the rest in
no fold); DISCO's 1,935 scenes (Hu et al., ECCV 2020: image, one second of audio, density map), split
here 1,435 / 200 / 300; VL-Bias's 24K image-text pairs per template (Zhang et al., ACM MM 2022, §4.1:
13K for the 52 activities, 11K for the 13 occupations), here 62 images per activity and gender word and
212 per occupation and gender word (23,920).

Baseline, in the same run and each in a fresh process: reading every source file's bytes (`json.load`
for the JSON ones). The build (stage cache off, after a warm-up build of the embedded samples) reads and
checks every record, renders statistics and the card and writes the parquet files. No target: these
releases take seconds, and what the build does beyond reading (decoding every image and clip, the card's
figures) is most of it; the lines say what a maintainer waits for and how much memory it takes.

    python scripts/bench_small_release_builds.py [--only socialiq,disco,vl-bias]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from benchlib import measure, report, reported, warm_timed_build

ROOT = Path(__file__).resolve().parents[1]
RELEASES = ("socialiq", "disco", "vl-bias")


def _write(bench: str, source: Path) -> None:
    sys.path.insert(0, str(ROOT))
    if bench == "socialiq":
        from builders.socialiq.samples import write_socialiq
        write_socialiq(source / "socialiq", train=888, valid=127, unassigned=1_250 - 888 - 127, seed=5)
    elif bench == "disco":
        from builders.disco.samples import write_disco
        write_disco(source / "disco", {"train": 1_435, "val": 200, "test": 300}, seed=5)
    else:
        from builders.vl_bias.samples import write_vl_bias
        from builders.vl_bias.words import TARGETS
        write_vl_bias(source / "vl_bias", per_gender={"activity": 62, "occupation": 212}, seed=5, targets=TARGETS)


def _child(mode: str, bench: str, source: Path, out: Path) -> None:
    """Runs in a fresh interpreter; prints {"seconds", "peak_rss_mb"} as JSON."""
    if mode == "read":
        start = time.perf_counter()
        kept = []
        for path in sorted(p for p in source.rglob("*") if p.is_file()):
            if path.suffix == ".json":
                with open(path) as fh:
                    kept.append(json.load(fh))
            else:
                kept.append(path.read_bytes())
        seconds = time.perf_counter() - start
    else:
        seconds = warm_timed_build(bench, source, out)
    report(seconds)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=",".join(RELEASES))
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.child[0], args.child[1], Path(args.child[2]), Path(args.child[3]))
        return 0
    for bench in args.only.split(","):
        if bench not in RELEASES:
            parser.error(f"--only: {bench!r} is not one of {', '.join(RELEASES)}")
        with tempfile.TemporaryDirectory(prefix=f"vlbench-bench-{bench}-") as tmp:
            source = Path(tmp) / "src"
            _write(bench, source)
            files = [p for p in source.rglob("*") if p.is_file()]
            size = sum(p.stat().st_size for p in files) / 1e6
            print(f"{bench}: {len(files):,} source files, {size:.0f} MB (synthetic, native format)")
            read = measure(__file__, "read", bench, source, Path(tmp))
            built = measure(__file__, "build", bench, source, Path(tmp))
            print(f"  reading them: {read['seconds']:6.2f} s (peak RSS {read['peak_rss_mb']:.0f} MB); "
                  f"vlbench build {bench}: {built['seconds']:6.2f} s (peak RSS {built['peak_rss_mb']:.0f} MB)")
            why = "a release this small builds in seconds; the line says how many"
            reported(f"{bench} build at the release's size, wall time (reading its files: {read['seconds']:.2f} s)",
                     built["seconds"], " s", why)
            reported(f"{bench} build at the release's size, peak RSS (reading its files: "
                     f"{read['peak_rss_mb']:.0f} MB)", built["peak_rss_mb"], " MB", why)
    return 0


if __name__ == "__main__":
    sys.exit(main())
