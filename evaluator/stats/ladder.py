"""The Ladder (Blum and Hardt, *The Ladder: A Reliable Leaderboard for Machine Learning Competitions*, ICML 2015):
a leaderboard that shows a team a new score only when it beats the team's best shown score by a threshold, and then
shows it rounded; otherwise it shows the best again. Adaptive probing of the hidden answers (submitting, watching
the score, adjusting) then learns at most about a logarithmic number of bits per improvement.

- Algorithm 1 (the Ladder, step eta): release a new score s when s > best + eta (for a metric where higher is
  better; below for one where lower is), rounded to the nearest multiple of eta.
- Algorithm 2 (the parameter-free Ladder): the threshold is the standard error of the paired difference between
  the new submission and the team's best, s/sqrt(n), with s the standard deviation of the per-item differences;
  the released score is rounded to the nearest multiple of 1/n of the metric's range, n the items scored
  (`rounding_step`: the rows in the metric's scope; rounding to 1/clusters would hide 8 points of a 12-video
  Social-IQ phase, whose 504 answers are scored one by one). The threshold's items are a
  benchmark's clusters (an image's questions, a pair's sub-questions are resampled together), and a ratio metric's
  per-cluster difference is its numerator difference over the mean denominator per cluster (the delta method): for
  independent 0/1 items this is the paper's rule exactly; a metric derived from ratios (no per-item terms) takes
  the paired cluster bootstrap's standard error of the difference instead.

A new score is compared with the best's own score, not with its rounded release: with 0/1 items and n items the
two are equal (a score is a multiple of 1/n), and with clusters of several items a resubmitted best could
otherwise pass its own rounded value."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from evaluator.stats.bootstrap import Resampling, cluster_sums, compare


@dataclass(frozen=True)
class Release:
    """What the Ladder shows after a submission: the team's best (`shown`, rounded; `best`, its score), whether
    this one moved it (`improved`), and the threshold and rounding step it was held to."""

    shown: float | None
    best: float | None
    improved: bool
    threshold: float
    step: float


def round_to(value: float, step: float) -> float:
    """`value` rounded to the nearest multiple of `step` (half away from zero), written at 10 decimals."""
    return round(math.copysign(math.floor(abs(value) / step + 0.5), value) * step, 10)


def paired_standard_error(best: Resampling, new: Resampling, key: str, resamples: int = 1000, seed: int = 0) -> float:
    """Algorithm 2's s/sqrt(n) for metric `key` between two submissions scored on the same rows."""
    if key in best.ratios:
        n, sums_best = cluster_sums(best)
        _, sums_new = cluster_sums(new)
        num_best, den = sums_best[key]
        num_new, _ = sums_new[key]
        scope = den > 0
        count = int(scope.sum())
        if count < 2:
            return 0.0
        differences = best.ratios[key].scale * (num_new[scope] - num_best[scope]) / den[scope].mean()
        return float(np.std(differences, ddof=1) / math.sqrt(count))
    bounds = compare(best, new, resamples, seed)["metrics"][key]["interval"]  # the 95% paired interval
    return 0.0 if bounds is None else (bounds[1] - bounds[0]) / (2 * 1.959964)


def rounding_step(resampling: Resampling, key: str, full_range: float) -> float:
    """Algorithm 2's rounding: 1/n of the metric's range, n the items the metric is over -- for a ratio metric its
    rows in scope (a positive denominator), else every row; FULL_RANGE: the range of a metric that is no ratio."""
    ratio = resampling.ratios.get(key)
    if ratio is not None:
        return ratio.scale / max(int((np.asarray(ratio.den) > 0).sum()), 1)
    return full_range / max(len(resampling.clusters), 1)


def release(shown: float | None, best: float | None, value: float | None, higher_is_better: bool, threshold: float,
            step: float) -> Release:
    """One round of the Ladder: `shown` and `best` are the team's best released score and that submission's own
    score (None before its first), `value` the new submission's score, `threshold` the margin it must beat the best
    by, `step` the rounding of what is shown."""
    if value is None or not math.isfinite(value):
        return Release(shown, best, False, threshold, step)
    better = best is None or (value > best + threshold if higher_is_better else value < best - threshold)
    return Release(round_to(value, step), value, True, threshold, step) if better else \
        Release(shown, best, False, threshold, step)
