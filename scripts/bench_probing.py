"""Benchmark: the adaptive attack of Blum and Hardt (*The Ladder: A Reliable Leaderboard for Machine Learning
Competitions*, ICML 2015, §5, the boosting attack) against a hidden phase under each defence the service offers:
none (exact scores), a daily limit, rounding, and the parameter-free Ladder.

The phase is a sealed Social-IQ split (binary labels: is this answer correct?) built from a synthetic release of
`--videos` validation videos; its rows are cut by a hash of their place in the build into the leaderboard's part (what a
hidden phase scores and shows) and a private part of the same size. The attacker submits `--submissions` random
answer vectors (a score of +1 or -1 per answer), keeps those the leaderboard shows above chance (under the Ladder:
those that moved its best), and submits their majority vote. Printed per defence, averaged over `--runs` attacks:
the final vector's leaderboard score minus its true accuracy (its score on the private part: the vectors carry no
information about the answers, so the true accuracy is 50% up to sampling), against the half-width of the
leaderboard's 95% interval. Scores are computed by the scoring code of `vlbench evaluate` (the Task's `score` on
the sealed split joined with its answers) and the Ladder by evaluator/stats/ladder.py, as the service does.

Target: with the Ladder, the attacker's gain stays within the 95% interval's half-width.

    python scripts/bench_probing.py [--videos 100] [--submissions 600] [--per-day 5] [--runs 20]
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import tempfile
import time
from pathlib import Path

from benchlib import reported, verdict

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--videos", type=int, default=100, help="validation videos (42 answers each)")
    parser.add_argument("--submissions", type=int, default=600, help="the attacker's submissions (k)")
    parser.add_argument("--per-day", type=int, default=5, help="the daily limit's submissions per day")
    parser.add_argument("--days", type=int, default=30, help="the days the daily limit allows them over")
    parser.add_argument("--rounding", type=int, default=0, help="decimals of the rounded scores (in %%)")
    parser.add_argument("--runs", type=int, default=20, help="attacks per defence (seeds)")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    import numpy as np
    import pyarrow as pa

    from builders.socialiq.samples import write_socialiq
    from evaluator.splits import open_split
    from evaluator.stats.ladder import paired_standard_error, release, rounding_step
    from evaluator.submission import Coverage
    from evaluator.tasks import get_task
    from pipelines.build import run_build
    from pipelines.seal import seal

    task = get_task("socialiq")
    with tempfile.TemporaryDirectory(prefix="vlbench-bench-probing-") as tmp:
        tmp = Path(tmp)
        write_socialiq(tmp / "src" / "socialiq", 24, args.videos, 0, seed=2015)
        run_build("socialiq", tmp / "src", tmp / "build", splits=["validation"], use_cache=False)
        seal(str(tmp / "build"), tmp / "public", tmp / "answers.zip")
        _, _, table = open_split(task, str(tmp / "public"), "validation", tmp / "answers.zip")
    ids = task.ids(table)  # the public half's names (keyed by the seal's salt); rows in the build's order
    board = np.array([hashlib.sha256(f"leaderboard:{k}".encode()).digest()[0] < 128 for k in range(len(ids))])
    parts = {"board": table.filter(pa.array(board)), "private": table.filter(pa.array(~board))}
    part_ids = {name: task.ids(t) for name, t in parts.items()}
    n = parts["board"].num_rows
    half_width = 100 * 1.959964 * (0.25 / n) ** 0.5

    def scored(part: str, vector: np.ndarray) -> float:
        """The Task's own accuracy of a +1/-1 vector on a part (the code `evaluate` runs)."""
        names = part_ids[part]
        values = vector[board] if part == "board" else vector[~board]
        predictions = dict(zip(names, values.tolist()))
        return task.score(parts[part], predictions, Coverage(len(names), len(names), 0, 0))["accuracy"]

    def resampling(vector: np.ndarray):
        return task.resampling(parts["board"], dict(zip(part_ids["board"], vector[board].tolist())))

    def attack(defence: str, seed: int) -> tuple[float, float]:
        """(the final vector's leaderboard score, its private score) after the attack under `defence`."""
        rng = np.random.default_rng([seed, 2015])
        k = min(args.submissions, args.per_day * args.days) if defence == "daily limit" else args.submissions
        kept, shown, best, best_resampling = [], None, None, None
        for _ in range(k):
            vector = rng.choice([-1.0, 1.0], size=len(ids))
            value = scored("board", vector)
            if defence == "Ladder":
                new = resampling(vector)
                threshold = 0.0 if best_resampling is None else paired_standard_error(best_resampling, new,
                                                                                       "accuracy")
                step = rounding_step(new, "accuracy", 100.0)
                out = release(shown, best, value, True, threshold, step)
                if out.improved:
                    shown, best, best_resampling = out.shown, out.best, new
                    kept.append(vector)
                continue
            seen = round(value, args.rounding) if defence == "rounding" else value
            if seen > 50.0:
                kept.append(vector)
        coin = rng.choice([-1.0, 1.0], size=len(ids))  # ties (and no vector kept) by a coin, never one answer
        votes = np.sum(kept, axis=0) if kept else np.zeros(len(ids))
        final = np.where(votes > 0, 1.0, np.where(votes < 0, -1.0, coin))
        return scored("board", final), scored("private", final)

    print(f"hidden phase: Social-IQ, {n:,} answers on the leaderboard, {len(ids) - n:,} private; "
          f"95% half-width {half_width:.2f} points; k = {args.submissions} (daily limit: {args.per_day}/day for "
          f"{args.days} days), rounding to {args.rounding} decimals, {args.runs} runs each")
    ok = True
    for defence in ("none", "daily limit", "rounding", "Ladder"):
        started = time.perf_counter()
        results = [attack(defence, seed) for seed in range(args.runs)]
        gain = float(np.mean([board_score - private for board_score, private in results]))
        detail = (f"leaderboard {np.mean([r[0] for r in results]):.2f}, true accuracy "
                  f"{np.mean([r[1] for r in results]):.2f}; {time.perf_counter() - started:.0f} s")
        if defence == "Ladder":
            ok &= verdict("attack gain with the Ladder", gain, half_width, " points", detail=detail)
        else:
            reported(f"attack gain, {defence}", gain, " points", f"no defence target ({detail})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
