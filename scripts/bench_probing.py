"""Benchmark: the adaptive attack of Blum and Hardt (*The Ladder: A Reliable Leaderboard for Machine Learning
Competitions*, ICML 2015, §5, the boosting attack) against a hidden phase under each defence the service offers:
none (exact scores), a daily limit, rounding (alone, with each bound of the 95% interval rounded by itself, and with
the interval the service shows: centred on the rounded score), and the parameter-free Ladder; then the same attack
against a running `vlbench serve` over its API.

The phase is a sealed Social-IQ split (binary labels: is this answer correct?) built from a synthetic release of
`--videos` validation videos. In process, its rows are cut by a hash of their place in the build into the
leaderboard's part (what a hidden phase scores and shows) and a private part of the same size. The attacker
submits `--submissions` random answer vectors (a score of +1 or -1 per answer), keeps those the leaderboard shows
above chance (under the Ladder: those that moved its best; with an interval: those whose score, estimated from the
rounded score and the rounded bounds each moved back by its mean distance from the score over the attacker's
submissions, is above chance), and submits their majority vote. Printed per defence, averaged over `--runs`
attacks: the final vector's leaderboard score minus its true accuracy (its score on the private part: the vectors
carry no information about the answers, so the true accuracy is 50% up to sampling), against the half-width of
the leaderboard's 95% interval. Scores and intervals are computed by the code the service runs (the Task's
`score`, the cluster bootstrap with `evaluate`'s resamples and seed, serve/views.py's `shown_interval`, the Ladder
of evaluator/stats/ladder.py).

Against the service (`--service-runs` attacks a defence, 0: none): a real `vlbench serve` (SQLite, 2 scoring
workers, on loopback) with two hidden phases of the whole split, rounding to whole points with the shown interval,
and the parameter-free Ladder (the service's default 2 decimals); every vector is uploaded as a team would and
the attacker reads only what the API answers. Its gain is the final vector's exact score (as the hosts' API gives
it) minus 50, the true accuracy of a vote of random vectors (they carry nothing of the answers), against the whole
split's half-width.

Targets: with the Ladder, the attacker's gain stays within the 95% interval's half-width; with rounding and the
interval the service shows, it gains no more than with rounding alone (0.5 points of slack), and infers a shown
score's exact value no better (the RMS error of its estimates, at least 0.99x rounding alone's: floats' last bits;
printed for each bound rounded by itself too).

    python scripts/bench_probing.py [--videos 100] [--submissions 600] [--per-day 5] [--runs 20] [--service-runs 2]
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import tempfile
import time
from pathlib import Path

from benchlib import reported, serve_on_loopback, submitted, verdict

ROOT = Path(__file__).resolve().parents[1]
DEFENCES = ("none", "daily limit", "rounding", "rounding, bounds rounded", "rounding, shown interval", "Ladder")


class Boosting:
    """Blum and Hardt's boosting attacker (§5): random +1/-1 vectors; it keeps each one the leaderboard shows
    above chance (under the Ladder: each one that moved its best; beside an interval: each whose score, estimated
    from the shown score and each shown bound moved back by its mean distance from the score so far, is above
    chance) and submits their majority vote, ties by a coin."""

    def __init__(self, seed: int, size: int):
        import numpy as np

        self.np, self.rng, self.size = np, np.random.default_rng([seed, 2015]), size
        self.kept: list = []
        self.below: list[float] = []
        self.above: list[float] = []

    def vector(self):
        return self.rng.choice([-1.0, 1.0], size=self.size)

    def saw(self, vector, score: float, interval=None, improved: bool | None = None) -> float:
        """Keep VECTOR or not from what the leaderboard showed of it; returns the attacker's estimate of its
        score."""
        estimate = score
        if improved is not None:
            keep = improved
        elif interval is None:
            keep = score > 50.0
        else:
            self.below.append(score - interval[0])
            self.above.append(interval[1] - score)
            estimate = (score + interval[0] + self.np.mean(self.below) + interval[1] - self.np.mean(self.above)) / 3
            keep = round(estimate, 9) > 50.0  # a score the rounding put at 50 stays at 50
        if keep:
            self.kept.append(vector)
        return estimate

    def final(self):
        np = self.np
        coin = self.rng.choice([-1.0, 1.0], size=self.size)  # ties (and no vector kept) by a coin, never one answer
        votes = np.sum(self.kept, axis=0) if self.kept else np.zeros(self.size)
        return np.where(votes > 0, 1.0, np.where(votes < 0, -1.0, coin))


def _service_attacks(args, tmp: Path, task, table, runs: int) -> dict[str, list[float]]:
    """Per defence the service offers (rounding with its shown interval; the parameter-free Ladder), the gains of
    RUNS attacks on a running `vlbench serve` over its API: the final vector's shown score minus 50."""
    import json
    import os
    import signal

    import httpx
    import yaml

    from pipelines.serve.config import load_config

    phase = {"benchmark": "socialiq", "data": str(tmp / "public"), "answers": str(tmp / "answers.zip"),
             "limits": {"per_day": 1_000_000, "concurrent": 1}}
    phases = {"rounding, shown interval": {**phase, "name": "rounded", "rounding": args.rounding},
              "Ladder": {**phase, "name": "ladder", "ladder": "parameter-free"}}
    config = tmp / "challenge.yaml"
    config.write_text(yaml.safe_dump({"challenge": "probing", "storage": str(tmp / "store"),
                                      "requests_per_minute": 100_000, "phases": list(phases.values())}))
    store = load_config(config).store()
    host = store.add_team("hosts", host=True)
    ids = task.ids(table)
    gains: dict[str, list[float]] = {name: [] for name in phases}
    process, url = serve_on_loopback(config, 2)
    try:
        for name, spec in phases.items():
            for seed in range(runs):
                token = store.add_team(f"{spec['name']} attacker {seed}")
                attacker = Boosting(seed, len(ids))

                def upload(vector) -> dict:
                    body = json.dumps(task.predictions_file(table, vector.tolist())).encode()
                    record = submitted(url, token, spec["name"], body)
                    assert record["status"] == "scored", record.get("error")
                    return record

                for _ in range(args.submissions):
                    vector = attacker.vector()
                    shown = upload(vector)["shown"]
                    score = shown["scores"][0]
                    attacker.saw(vector, score["value"], score["interval"],
                                 shown["ladder"]["improved"] if "ladder" in shown else None)
                final = upload(attacker.final())["id"]  # its exact score, as the hosts see it
                exact = httpx.get(f"{url}/api/v1/submissions/{final}", headers={"Authorization": f"Bearer {host}"},
                                  timeout=60).json()["metrics"]["accuracy"]
                gains[name].append(exact - 50.0)
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(30)
    return gains


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--videos", type=int, default=100, help="validation videos (42 answers each)")
    parser.add_argument("--submissions", type=int, default=600, help="the attacker's submissions (k)")
    parser.add_argument("--per-day", type=int, default=5, help="the daily limit's submissions per day")
    parser.add_argument("--days", type=int, default=30, help="the days the daily limit allows them over")
    parser.add_argument("--rounding", type=int, default=0, help="decimals of the rounded scores (in %%)")
    parser.add_argument("--runs", type=int, default=20, help="attacks per defence (seeds)")
    parser.add_argument("--service-runs", type=int, default=2, help="attacks per defence on a running service")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    import numpy as np
    import pyarrow as pa

    from builders.socialiq.samples import write_socialiq
    from evaluator.request import DEFAULT_RESAMPLES
    from evaluator.splits import open_split
    from evaluator.stats.bootstrap import intervals
    from evaluator.stats.ladder import paired_standard_error, release, rounding_step
    from evaluator.submission import Coverage
    from evaluator.tasks import get_task
    from pipelines.build import run_build
    from pipelines.seal import seal
    from pipelines.serve.views import shown_interval

    task = get_task("socialiq")
    headline = task.headline[0]
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

        def attack(defence: str, seed: int) -> tuple[float, float, float]:
            """(the final vector's leaderboard score, its private score, the root mean square error of the
            attacker's estimates of its vectors' exact scores from what it was shown) after the attack under
            `defence`."""
            attacker = Boosting(seed, len(ids))
            errors = []
            k = min(args.submissions, args.per_day * args.days) if defence == "daily limit" else args.submissions
            shown, best, best_resampling = None, None, None
            for _ in range(k):
                vector = attacker.vector()
                value = scored("board", vector)
                if defence == "Ladder":
                    new = resampling(vector)
                    threshold = 0.0 if best_resampling is None else paired_standard_error(best_resampling, new,
                                                                                           "accuracy")
                    out = release(shown, best, value, True, threshold, rounding_step(new, "accuracy", 100.0))
                    if out.improved:
                        shown, best, best_resampling = out.shown, out.best, new
                    attacker.saw(vector, out.shown, improved=out.improved)
                elif defence.startswith("rounding"):
                    bounds = None
                    if defence != "rounding":
                        bounds = intervals(resampling(vector), DEFAULT_RESAMPLES, 0)["metrics"]["accuracy"]
                        bounds = ([round(b, args.rounding) for b in bounds] if defence.endswith("rounded") else
                                  shown_interval(value, bounds, args.rounding, headline))
                    errors.append(attacker.saw(vector, round(value, args.rounding), bounds) - value)
                else:
                    attacker.saw(vector, value)
            final = attacker.final()
            return scored("board", final), scored("private", final), float(np.sqrt(np.mean(np.square(errors or [0]))))

        print(f"hidden phase: Social-IQ, {n:,} answers on the leaderboard, {len(ids) - n:,} private; "
              f"95% half-width {half_width:.2f} points; k = {args.submissions} (daily limit: {args.per_day}/day "
              f"for {args.days} days), rounding to {args.rounding} decimals, {args.runs} runs each")
        ok = True
        gains, errors = {}, {}
        for defence in DEFENCES:
            started = time.perf_counter()
            results = [attack(defence, seed) for seed in range(args.runs)]
            gains[defence] = float(np.mean([r[0] - r[1] for r in results]))
            detail = (f"leaderboard {np.mean([r[0] for r in results]):.2f}, true accuracy "
                      f"{np.mean([r[1] for r in results]):.2f}; {time.perf_counter() - started:.0f} s")
            if defence.startswith("rounding"):
                errors[defence] = float(np.mean([r[2] for r in results]))
                detail += f"; a shown score's exact value inferred within {errors[defence]:.3f} points (RMS)"
            if defence == "Ladder":
                ok &= verdict("attack gain with the Ladder", gains[defence], half_width, " points", detail=detail)
            elif defence == "rounding, shown interval":
                ok &= verdict("attack gain, rounding with the shown interval, over rounding alone",
                              gains[defence] - gains["rounding"], 0.5, " points", detail=detail)
                ok &= verdict("what the shown interval tells of the exact score, over rounding alone (RMS error "
                              "ratio)", errors[defence] / errors["rounding"], 0.99, "x", at_least=True,
                              detail=f"bounds rounded each: {errors['rounding, bounds rounded']:.3f} points")
            else:
                reported(f"attack gain, {defence}", gains[defence], " points", f"no defence target ({detail})")
        if args.service_runs:
            whole = 100 * 1.959964 * (0.25 / len(ids)) ** 0.5
            started = time.perf_counter()
            served = _service_attacks(args, tmp, task, table, args.service_runs)
            seconds = time.perf_counter() - started
            for defence, found in served.items():
                reported(f"attack gain on the running service, {defence}", float(np.mean(found)), " points",
                         f"{len(found)} attack(s) of {args.submissions} uploads over the API, the whole split of "
                         f"{len(ids):,} answers (half-width {whole:.2f}); {seconds:.0f} s for all")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
