"""The Ladder (Blum and Hardt, ICML 2015; evaluator/stats/ladder.py): Algorithm 1's release rule and rounding, and
Algorithm 2's threshold s/sqrt(n), each against hand-computed values."""

from __future__ import annotations

import math

import numpy as np
import pytest

from evaluator.stats.bootstrap import Ratio, Resampling
from evaluator.stats.ladder import paired_standard_error, release, round_to


def test_algorithm_1_releases_only_a_score_past_the_best_by_the_step_rounded_to_it():
    """Step 1 (in %), best 50: 50.9 is not released (the best, 50, shown again); 51.2 is, as 51; the first
    submission is always released. Lower-is-better (MAE) mirrors it."""
    first = release(None, None, 50.4, True, 1.0, 1.0)
    assert (first.shown, first.best, first.improved) == (50.0, 50.4, True)
    held = release(50.0, 50.4, 51.3, True, 1.0, 1.0)  # 51.3 < 50.4 + 1
    assert (held.shown, held.best, held.improved) == (50.0, 50.4, False)
    moved = release(50.0, 50.4, 51.6, True, 1.0, 1.0)
    assert (moved.shown, moved.best, moved.improved) == (52.0, 51.6, True)
    lower = release(3.0, 3.2, 2.5, False, 0.5, 0.5)
    assert (lower.shown, lower.improved) == (2.5, True)
    assert release(3.0, 3.2, 2.9, False, 0.5, 0.5).improved is False
    assert release(50.0, 50.4, float("nan"), True, 1.0, 1.0).improved is False


def test_rounding_to_a_step():
    assert round_to(16.733, 0.25) == 16.75 and round_to(0.6666, 1 / 3) == pytest.approx(2 / 3)
    assert round_to(2.5, 1.0) == 3.0 and round_to(-2.5, 1.0) == -3.0


def _accuracy(outcomes, clusters=None) -> Resampling:
    outcomes = np.asarray(outcomes, np.float64)
    codes = np.arange(len(outcomes)) if clusters is None else np.asarray(clusters)
    return Resampling(codes, "item", {"accuracy": Ratio(outcomes, np.ones(len(outcomes)))})


def test_algorithm_2_s_over_root_n_by_hand():
    """Best right on items 1 and 3 of 4, new on 1, 2 and 3: differences (0, 100, 0, 0) in %, s = 50 (ddof 1),
    threshold s / sqrt(4) = 25."""
    assert paired_standard_error(_accuracy([1, 0, 1, 0]), _accuracy([1, 1, 1, 0]), "accuracy") == pytest.approx(25.0)
    # clusters of two items: per-cluster numerator differences (0, 1, 1) over the mean denominator 2, in %:
    # (0, 50, 50), s = 28.8675, / sqrt(3)
    best = _accuracy([1, 0, 0, 0, 0, 1], [0, 0, 1, 1, 2, 2])
    new = _accuracy([1, 0, 1, 0, 1, 1], [0, 0, 1, 1, 2, 2])
    assert paired_standard_error(best, new, "accuracy") == pytest.approx(np.std([0, 50, 50], ddof=1) / math.sqrt(3))


def test_the_parameter_free_rounding_is_one_over_the_items_scored_not_the_clusters():
    """Hand-computed (Blum and Hardt, ICML 2015, Algorithm 2: round to 1/n, n the test items): a Social-IQ-shaped
    phase of 12 videos x 42 answers rounds accuracy to 100/504 points (0.198), not to 100/12 (8.3); a ratio's rows
    outside its scope (denominator 0) are not items; a metric that is no ratio: 1/rows of its range."""
    from evaluator.stats.ladder import rounding_step

    clusters = np.repeat(np.arange(12), 42)
    ones = np.ones(504)
    scoped = np.r_[np.ones(404), np.zeros(100)]
    resampling = Resampling(clusters, "video", {"accuracy": Ratio(ones, ones), "a2": Ratio(scoped, scoped)})
    assert rounding_step(resampling, "accuracy", 100.0) == pytest.approx(100 / 504)
    assert rounding_step(resampling, "a2", 100.0) == pytest.approx(100 / 404)
    assert rounding_step(resampling, "mrr", 1.0) == pytest.approx(1 / 504)
