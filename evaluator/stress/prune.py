"""Iterative Bias Pruning (Brown et al., arXiv 2511.04655, 2025, §4, Algorithm 1): stress-test the rows still kept,
remove the batch with the highest bias scores s(x), and repeat on what is left, until the budget is spent or the
highest remaining score is at or below the threshold. As in the authors' code, a row is removed only where its
group (`--group COLUMN`, e.g. a question type) keeps more than `min_per_group` rows, and tied scores (compared at
12 decimals) go in the order of the rows' ids, so the removed set does not depend on the input's row order."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Callable

import numpy as np

from core.errors import ParamsError

SCORE_DECIMALS = 12  # ties are compared at this precision (the authors' code)


@dataclass(frozen=True)
class PruneOptions:
    """`budget` rows to remove at most, `batch` per iteration (the authors' default: 50), the group floor (their
    default: 5), and the early-stop threshold on the highest remaining s(x) (None: spend the budget)."""

    budget: int
    batch: int = 50
    min_per_group: int = 5
    threshold: float | None = None
    group: str | None = None  # the column whose groups keep `min_per_group` rows (None: the split is one group)

    def __post_init__(self):
        if self.budget < 1 or self.batch < 1 or self.min_per_group < 0:
            raise ParamsError("stress-test --prune: --budget and --batch >= 1, --min-per-group >= 0")


def iterative_bias_pruning(scores_of: Callable[[np.ndarray], np.ndarray], keys: list, groups: list,
                           options: PruneOptions, progress=None) -> tuple[np.ndarray, list[dict], str]:
    """Prune the rows 0..n-1 (KEYS: their ids' sort keys; GROUPS: each row's group); `scores_of(rows)` is the
    stress test's s(x) of ROWS, cross-fitted on those rows alone. (the iteration each row was removed at, 0 for a
    row kept; one record per iteration; why it stopped: "budget", "threshold" or "floor")."""
    n = len(keys)
    removed_at = np.zeros(n, dtype=np.int64)
    iterations: list[dict] = []
    spent = 0
    while spent < options.budget:
        rows = np.flatnonzero(removed_at == 0)
        scores = scores_of(rows)
        top = float(scores.max()) if len(scores) else float("nan")
        if options.threshold is not None and not top > options.threshold:
            return removed_at, iterations, "threshold"
        left = Counter(groups[r] for r in rows)
        want = min(options.batch, options.budget - spent)
        rounded = np.round(scores, SCORE_DECIMALS)
        chosen = []
        for k in sorted(range(len(rows)), key=lambda k: (-rounded[k], keys[rows[k]])):
            if len(chosen) == want:
                break
            if left[groups[rows[k]]] > options.min_per_group:
                chosen.append(rows[k])
                left[groups[rows[k]]] -= 1
        if not chosen:
            return removed_at, iterations, "floor"
        removed_at[chosen] = len(iterations) + 1
        spent += len(chosen)
        iterations.append({"iteration": len(iterations) + 1, "rows_before": len(rows), "removed": len(chosen),
                           "max_s": round(top, 6), "mean_s": round(float(scores.mean()), 6)})
        if progress is not None:
            progress(len(chosen))
    return removed_at, iterations, "budget"
