"""Benchmark: VQA-CP `mode=regenerate` on a full-size synthetic VQA v2 versus loading its JSON.

Target: re-splitting a synthetic VQA v2 train2014 + val2014 of 658,111 questions (the size
of VQA-CP v2: 438,183 + 219,928; at the release's shape, `release_shape` in builders/vqa/samples.py: thousands of
distinct answers) finishes within 5x the time of `json.load` of its four JSON files,
measured in the same run; the build's peak RSS is printed. The build covers reading, the greedy
split, statistics, the card and the parquet export (stage cache off).

Each measurement runs in its own fresh process so that one's memory does not count against the
other's peak RSS; the build process first builds the small sample sources once (imports and
first-call costs).

    python scripts/bench_vqa_cp_regenerate.py [--questions 658111]
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
TARGET_RATIO = 5.0


def _child(mode: str, source: Path, out: Path) -> None:
    """Runs in a fresh interpreter; prints {"seconds", "peak_rss_mb"} as JSON."""
    sys.path.insert(0, str(ROOT))
    from builders.vqa.reader import V2_SUBTYPES, v2_files

    if mode == "json":
        start = time.perf_counter()
        for subtype in V2_SUBTYPES:
            for name in v2_files(subtype):
                with open(source / name) as fh:
                    json.load(fh)
        seconds = time.perf_counter() - start
    else:
        seconds = warm_timed_build("vqa-cp", source, out, assignments=["mode=regenerate"])
    report(seconds)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=658_111)
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.child[0], Path(args.child[1]), Path(args.child[2]))
        return 0

    sys.path.insert(0, str(ROOT))
    from builders.vqa.samples import write_vqa_v2

    with tempfile.TemporaryDirectory(prefix="vlbench-bench-") as tmp:
        source = Path(tmp) / "src"
        n_train = round(args.questions * 443_757 / 658_111)  # VQA v2 train2014 / (train2014 + val2014)
        files = write_vqa_v2(source, n_train, args.questions - n_train, seed=2024, release_shape=True)
        size = sum(f.stat().st_size for f in files) / 1e6
        print(f"input: {args.questions:,} questions ({n_train:,} train2014 + {args.questions - n_train:,} val2014), "
              f"4 files, {size:.0f} MB")
        loaded = measure(__file__, "json", source, Path(tmp))
        built = measure(__file__, "build", source, Path(tmp))
        ratio = built["seconds"] / loaded["seconds"]
        manifest = json.loads((Path(tmp) / "vqa-cp" / "manifest.json").read_text())
        sizes = {s: v["questions"] for s, v in manifest["statistics"]["splits"].items()}
        print(f"json.load of the 4 files: {loaded['seconds']:6.2f} s  (peak RSS {loaded['peak_rss_mb']:.0f} MB)")
        print(f"vlbench build vqa-cp --param mode=regenerate: {built['seconds']:6.2f} s  "
              f"(peak RSS {built['peak_rss_mb']:.0f} MB); train {sizes['train']:,} / test {sizes['test']:,}, "
              f"concept coverage {100 * manifest['statistics']['concept_coverage']:.2f} %")
        ok = verdict("VQA-CP re-split build vs json.load of its 4 files", ratio, TARGET_RATIO, "x",
                     detail=f"{built['seconds']:.1f} s, peak RSS {built['peak_rss_mb']:.0f} MB")
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
