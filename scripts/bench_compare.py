"""Benchmark: `vlbench compare` of two GQA-OOD val-size submissions with 1,000 bootstrap resamples
(and as many permutations) versus one plain `evaluate` of one of them (no intervals), in the same run.

Target: the comparison takes seconds -- at most 10 s here -- being vectorised (cluster
counts times cluster sums), never a per-resample loop over examples; the ratio to `evaluate` is
printed. Both are timed in this process after one warm-up call of each on the sample sources.

    python scripts/bench_compare.py [--questions 132062] [--resamples 1000]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

from benchlib import verdict

ROOT = Path(__file__).resolve().parents[1]
TARGET_SECONDS = 10.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=132_062)
    parser.add_argument("--resamples", type=int, default=1000)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    import msgspec

    from builders.gqa_ood.samples import generate_split
    from evaluator.compare import compare_predictions
    from evaluator.request import ScoringRequest
    from evaluator.run import evaluate
    from pipelines.build import run_build
    from pipelines.samples import write_samples

    with tempfile.TemporaryDirectory(prefix="vlbench-bench-compare-") as tmp:
        tmp = Path(tmp)
        source = tmp / "src"
        source.mkdir()
        records = generate_split(2, args.questions, seed=2024)
        (source / "val_balanced_questions.json").write_bytes(msgspec.json.encode(records))
        run_build("gqa-ood", source, tmp / "gqa", splits=["val"], use_cache=False)
        import pyarrow.parquet as pq

        table = pq.read_table(tmp / "gqa" / "all" / "val-00000-of-00001.parquet", columns=["question_id", "answer"])
        answers = sorted(set(table.column("answer").to_pylist()))
        files = []
        for k, right in enumerate((0.45, 0.47)):
            rng = random.Random(k)
            rows = [{"questionId": q, "prediction": a if rng.random() < right else rng.choice(answers)}
                    for q, a in zip(table.column("question_id").to_pylist(), table.column("answer").to_pylist())]
            files.append(tmp / f"sub{k}.json")
            files[-1].write_text(json.dumps(rows))

        warm = tmp / "warm"
        write_samples(warm / "src")
        run_build("gqa-ood", warm / "src", warm / "gqa", use_cache=False)
        from evaluator.models.options import ModelOptions
        from evaluator.run import predict

        predict("gqa-ood", str(warm / "gqa"), "baseline:random", warm / "a.json")
        predict("gqa-ood", str(warm / "gqa"), "baseline:random", warm / "b.json", options=ModelOptions(seed=1))
        evaluate(ScoringRequest("gqa-ood", str(warm / "gqa"), resamples=0), warm / "a.json")
        compare_predictions(ScoringRequest("gqa-ood", str(warm / "gqa"), resamples=10),
                            [warm / "a.json", warm / "b.json"])

        start = time.perf_counter()
        evaluate(ScoringRequest("gqa-ood", str(tmp / "gqa"), "val", resamples=0), files[0])
        t_eval = time.perf_counter() - start
        start = time.perf_counter()
        request = ScoringRequest("gqa-ood", str(tmp / "gqa"), "val", resamples=args.resamples)
        result = compare_predictions(request, files)
        t_compare = time.perf_counter() - start
    c = result["comparisons"][0]
    print(f"input: GQA-OOD val built from {args.questions:,} synthetic questions: {result['rows']:,} rows, "
          f"{c['clusters']:,} images; two submissions")
    print(f"evaluate (one submission, no intervals): {t_eval:6.2f} s")
    print(f"compare ({args.resamples:,} bootstrap resamples + {args.resamples:,} permutations): {t_compare:6.2f} s  "
          f"({t_compare / t_eval:.1f}x evaluate)")
    print("acc_all difference: {difference:+.2f} points, interval {interval}, p = {p_value}".format(
        **c["metrics"]["acc_all"]))
    ok = verdict("compare of two submissions", t_compare, TARGET_SECONDS, " s",
                 detail=f"{args.resamples:,} resamples and permutations, {result['rows']:,} rows")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
