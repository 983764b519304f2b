"""Benchmark: `vlbench stress-test vqa-cp` over a full-size VQA-CP v2 test split, on this machine's CPUs.

Target: the stress test (5 folds of a 100-tree random forest over hand-made text features, the forest's answers
scored by VQA accuracy with 95% intervals, the new version of the build written) over a test split of VQA-CP v2's
size (219,928 questions; the synthetic re-split below gives 219,496) finishes in under 5 minutes.
`baseline:prior` (`vlbench predict` of the question type's training prior on the same split) is timed in the
same run, as the cheapest blind answerer, and the ratio printed. The build is
a VQA-CP re-split of a synthetic VQA v2 of 658,111 questions (the size of VQA-CP v2: 438,183 + 219,928) at the
release's shape (builders/vqa/samples.py, `release_shape`: thousands of distinct answers, the top 1,000 covering
about 97%; the figures of the split are printed), made first and not timed. The stress test's peak memory (its
process's, from a fresh interpreter) is printed against a bound of 6 GiB. A CPU hog (`--hog`, one busy process)
may run beside both.

    python scripts/bench_stress_test.py [--questions 658111] [--hog]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from benchlib import measure, report, verdict

ROOT = Path(__file__).resolve().parents[1]
TARGET_S = 300.0
MEMORY_MIB = 6144.0


def _hog() -> None:
    while True:
        pass


def _shape(folder: Path) -> str:
    """The test split's figures against the release's: distinct answers, the top 1,000's share, words a question,
    questions an image."""
    import pyarrow.parquet as pq

    table = pq.read_table(folder / "default" / "test-00000-of-00001.parquet",
                          columns=["multiple_choice_answer", "question", "image_id"])
    answers = Counter(table.column("multiple_choice_answer").to_pylist())
    questions = table.column("question").to_pylist()
    top = sum(n for _, n in answers.most_common(1000)) / table.num_rows
    return (f"{len(answers):,} distinct answers, the top 1,000 cover {top:.1%}, "
            f"{sum(len(q.split()) for q in questions) / len(questions):.2f} words a question, "
            f"{table.num_rows / len(set(table.column('image_id').to_pylist())):.2f} questions an image")


def _stress(data: str, out: str) -> None:
    """The timed step, in a fresh interpreter (`--child stress DATA OUT`): its seconds and peak memory."""
    sys.path.insert(0, str(ROOT))
    from evaluator.stress.run import run_stress_test

    start = time.perf_counter()
    run_stress_test("vqa-cp", data, Path(out), baselines=False)
    report(time.perf_counter() - start)


def main() -> int:
    if sys.argv[1:2] == ["--child"]:
        _stress(*sys.argv[3:5])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=658_111)
    parser.add_argument("--hog", action="store_true", help="run a busy process beside the timed steps")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from builders.vqa.samples import write_vqa_v2
    from evaluator.run import predict
    from pipelines.build import run_build

    with tempfile.TemporaryDirectory(prefix="vlbench-bench-") as tmp:
        tmp = Path(tmp)
        n_train = round(args.questions * 443_757 / 658_111)  # VQA v2 train2014 / (train2014 + val2014)
        write_vqa_v2(tmp / "src", n_train, args.questions - n_train, seed=2024, release_shape=True)
        run_build("vqa-cp", tmp / "src", tmp / "vqa-cp", assignments=["mode=regenerate"])
        test = json.loads((tmp / "vqa-cp" / "manifest.json").read_text())["statistics"]["splits"]["test"]["questions"]
        print(f"VQA-CP build: {test:,} test questions (from {args.questions:,}); {_shape(tmp / 'vqa-cp')}")
        hog = multiprocessing.Process(target=_hog, daemon=True) if args.hog else None
        if hog is not None:
            hog.start()
        try:
            start = time.perf_counter()
            predict("vqa-cp", str(tmp / "vqa-cp"), "baseline:prior", tmp / "prior.json")
            prior_s = time.perf_counter() - start
            child = measure(__file__, "stress", tmp / "vqa-cp", tmp / "stressed")
            stress_s, peak_mib = child["seconds"], child["peak_rss_mb"]
            record = json.loads((tmp / "stressed" / "manifest.json").read_text())["stress_test"]
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
        ok &= verdict("stress test's peak memory", peak_mib, MEMORY_MIB, " MiB",
                      detail=f"{record['options']['max_answers'] + 1:,} answer classes a forest"
                             + (", beside a CPU hog" if args.hog else ""))
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
