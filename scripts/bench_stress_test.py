"""Benchmark: `vlbench stress-test vqa-cp` over a full-size VQA-CP v2 test split, on this machine's CPUs.

Target: the stress test (5 folds of a 100-tree random forest over hand-made text features, the forest's answers
scored by VQA accuracy with 95% intervals, the new version of the build written) over a test split of VQA-CP v2's
size (219,928 questions; the synthetic re-split below gives 219,496) finishes in under 5 minutes.
`baseline:prior` (`vlbench predict` of the question type's training prior on the same split) is timed in the
same run, as the cheapest blind answerer, and the ratio printed. The build is
a VQA-CP re-split of a synthetic VQA v2 of 658,111 questions (the size of VQA-CP v2: 438,183 + 219,928), made
first and not timed. A CPU hog (`--hog`, one busy process) may run beside both.

    python scripts/bench_stress_test.py [--questions 658111] [--hog]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
import tempfile
import time
from pathlib import Path

from benchlib import verdict

ROOT = Path(__file__).resolve().parents[1]
TARGET_S = 300.0


def _hog() -> None:
    while True:
        pass


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=658_111)
    parser.add_argument("--hog", action="store_true", help="run a busy process beside the timed steps")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from builders.vqa.samples import write_vqa_v2
    from evaluator.run import predict
    from evaluator.stress.run import run_stress_test
    from pipelines.build import run_build

    with tempfile.TemporaryDirectory(prefix="vlbench-bench-") as tmp:
        tmp = Path(tmp)
        n_train = round(args.questions * 443_757 / 658_111)  # VQA v2 train2014 / (train2014 + val2014)
        write_vqa_v2(tmp / "src", n_train, args.questions - n_train, seed=2024)
        run_build("vqa-cp", tmp / "src", tmp / "vqa-cp", assignments=["mode=regenerate"])
        test = json.loads((tmp / "vqa-cp" / "manifest.json").read_text())["statistics"]["splits"]["test"]["questions"]
        print(f"VQA-CP build: {test:,} test questions (from {args.questions:,})")
        hog = multiprocessing.Process(target=_hog, daemon=True) if args.hog else None
        if hog is not None:
            hog.start()
        try:
            start = time.perf_counter()
            predict("vqa-cp", str(tmp / "vqa-cp"), "baseline:prior", tmp / "prior.json")
            prior_s = time.perf_counter() - start
            start = time.perf_counter()
            record = run_stress_test("vqa-cp", str(tmp / "vqa-cp"), tmp / "stressed", baselines=False)
            stress_s = time.perf_counter() - start
        finally:
            if hog is not None:
                hog.terminate()
        forest = record["forest"]["VQA accuracy"]
        print(f"baseline:prior (predict): {prior_s:6.1f} s")
        print(f"stress test: {stress_s:6.1f} s ({stress_s / prior_s:.1f}x baseline:prior); forest VQA accuracy "
              f"{forest['value']:.2f} {forest['interval']}, mean s(x) {record['mean_s']:.4f}")
        ok = verdict("stress test of a full-size VQA-CP test split", stress_s, TARGET_S, "s",
                     detail=f"{test:,} questions, {stress_s / prior_s:.1f}x baseline:prior"
                            + (", beside a CPU hog" if args.hog else ""))
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
