"""What a team is shown of a scored submission (pipelines/serve/worker.py records it; the pages and the public
leaderboard, pages.py and board.py, show it): never a per-item or per-type score of a hidden phase, and no score
computed over fewer rows than the phase's `min_subset`, unless those rows are the whole split.

A phase with a private part (`private: SHARE`) scores a submission on its two parts of the split: the public
part's scores are shown while the phase runs, the private part's once it has ended (the final standing), so
that tuning to the shown scores buys nothing on the private ones. A cluster of rows (one image's questions, one
pair, one video, one dialog: the task's bootstrap clusters) falls in the private part when HMAC-SHA-256 of the
phase's name and its place, keyed by the sealed answer file's salt, is below SHARE: nobody without the salt can
tell the parts apart, and anyone can recompute them once `serve reveal` publishes it."""

from __future__ import annotations

import hashlib
import hmac
import math

from evaluator.stats.bootstrap import value_at
from pipelines.serve.config import Phase

PARTS = ("public", "private")


def private_mask(task, table, salt: bytes, phase: str, share: float) -> list[bool]:
    """Per row of the split: in the phase's private part (the module docstring's rule)."""
    codes, _ = task.clusters(table)
    chosen = {}
    for code in set(codes.tolist()):
        digest = hmac.new(salt, f"vlbench-private-part:{phase}:{code}".encode(), hashlib.sha256).digest()
        chosen[code] = int.from_bytes(digest[:8], "big") < share * 2 ** 64
    return [chosen[c] for c in codes.tolist()]


def split_parts(phase: Phase, salt: bytes):
    """`evaluate`'s `parts` for a phase with a private part: (task, table) -> [("public", mask), ("private", mask)]."""
    import pyarrow as pa

    def parts(task, table):
        private = private_mask(task, table, salt, phase.name, phase.private)
        return [("public", pa.array([not p for p in private])), ("private", pa.array(private))]
    return parts


def as_text(score: dict, rounding: int | None) -> dict:
    """A score with its value and interval as text (`shown`), at the phase's decimals (None: as recorded, 6
    significant digits), and its sort value (`data`: empty when there is none), for the pages and the leaderboard."""
    def text(value):
        if value is None:
            return "\u2013"
        return f"{value:.{rounding}f}" if rounding is not None else f"{value:.6g}"

    return {**score, "shown": text(score["value"]), "data": "" if score["value"] is None else str(score["value"]),
            "interval": score["interval"] and [text(b) for b in score["interval"]]}


def _part(metrics: dict, name: str) -> dict:
    """A part's metrics (`evaluate`'s `parts`) in the shape of the whole split's (intervals and scope inside)."""
    group = metrics["parts"][name]
    return {**group, "intervals": {"metrics": group.get("intervals") or {}, "scope": group.get("scope") or {}}}


def headline_scores(task, phase: Phase, metrics: dict, part: str | None = None, exact: bool = False) -> list[dict]:
    """The phase's headline metrics (`metrics:` in the config, else the benchmark's headline) over the whole split or
    one part of it, each with its 95% interval, rounded to the phase's decimals: [{metric, label, value, interval}].
    On a hidden phase a score over fewer rows than `min_subset` (a part, GQA-OOD's tail on a small split) is
    withheld: no value, no interval, and `withheld` saying why. `exact`: the hosts' view, unrounded, nothing
    withheld. A team's interval is `shown_interval`'s."""
    keys = phase.metrics or tuple(h.key for h in task.headline)
    labels = {h.key: h.label for h in task.headline}
    source = metrics if part is None else _part(metrics, part)
    bounds = (source.get("intervals") or {}).get("metrics", {})
    scope = (source.get("intervals") or {}).get("scope") or {}
    whole = (metrics.get("coverage") or {}).get("expected")
    rows = source.get("rows", whole)  # a part's rows, or the split's

    def rounded(value):
        return None if value is None else float(value) if exact else round(float(value), phase.rounding)

    scores = []
    for key in keys:
        over = scope.get(key, rows)
        if not exact and phase.hidden and phase.min_subset and over is not None and over < phase.min_subset and \
                not (part is None and over == whole):
            scores.append({"metric": key, "label": labels.get(key, key), "value": None, "interval": None,
                           "withheld": f"computed over fewer than {phase.min_subset} rows (the phase's min_subset)"})
            continue
        value = value_at(source, key)
        interval = bounds.get(key)
        if interval is not None and value is not None:
            headline = next((h for h in task.headline if h.key == key), None)
            interval = ([float(b) for b in interval] if exact else
                        shown_interval(float(value), interval, phase.rounding, headline))
        scores.append({"metric": key, "label": labels.get(key, key), "value": rounded(value), "interval": interval})
    return scores


def shown_interval(value: float, bounds, decimals: int, headline=None) -> list[float]:
    """The 95% interval a team is shown beside a score rounded to DECIMALS: centred on the rounded score, its
    half-width the larger of the bootstrap interval's two, rounded up to the same decimals (and kept within the
    metric's range: at most 100 or 1 where higher is better, at least 0 where the bootstrap's bound is). Each
    bound rounded by itself would be two more measurements of the same submission, offset from the score by
    nearly the same amounts each time: combined with the rounded score, they give back much of what the rounding
    hid (scripts/bench_probing.py measures it). Centred, the interval holds nothing the rounded score does not,
    beyond its width."""
    step = 10.0 ** -decimals
    shown = round(value, decimals)
    half = math.ceil(round(max(value - bounds[0], bounds[1] - value) / step, 9)) * step
    low, high = shown - half, shown + half
    if headline is not None and headline.higher_is_better:
        high = min(high, 100.0 if headline.scale == "%" else 1.0)
    if bounds[0] >= 0:
        low = max(low, 0.0)
    return [round(low, decimals), round(high, decimals)]


def shown(task, phase: Phase, metrics: dict) -> dict:
    """What a team is shown of a scored submission while its phase runs. A hidden phase: the headline scores only
    (over the public part, where the phase has a private one). A public phase: every metric `evaluate` reports."""
    if not phase.hidden:
        return metrics
    return {"scores": headline_scores(task, phase, metrics, "public" if phase.private else None),
            "rounding": phase.rounding, **({"part": "public"} if phase.private else {})}


def private_view(task, phase: Phase, metrics: dict) -> dict | None:
    """The private part's headline scores of a submission, shown once the phase has ended (None: no private part)."""
    if not phase.private:
        return None
    return {"scores": headline_scores(task, phase, metrics, "private"), "rounding": phase.rounding,
            "part": "private"}


def private_if_shown(phase: Phase | None, row, host: bool, now) -> dict | None:
    """A recorded submission's private part's scores where they may be read: by a host, or once its phase ended."""
    import json

    if row["private_view"] is None or phase is None or not (host or phase.ended_at(now)):
        return None
    return json.loads(row["private_view"])


def workers_seen(workers: list[dict]) -> dict:
    """What anyone is shown of the scoring workers (store.workers(): latest first): how many are alive and when
    one was last heard of (never their names, which name the machines)."""
    return {"alive": sum(1 for w in workers if w["alive"]), "last_seen": workers[0]["seen"] if workers else None}
