"""Confidence intervals and paired comparisons of headline metrics, by a cluster bootstrap.

Every headline metric vlbench reports is a ratio of sums over the rows in its scope (an accuracy:
right answers over questions; APQ: pair probabilities over pairs), or a function of such ratios
(GQA-OOD's Δ of acc-head and acc-tail). Rows that share an image (GQA, VQA, VCR, DISCO), a pair
(APQ / HPQ), a video (Social-IQ) or a dialog (VisDial) are not independent, so whole clusters are resampled with
replacement (Efron & Tibshirani, *An Introduction to the Bootstrap*, 1993, §6 and §13: percentile
intervals; Field & Welsh, 2007, for the cluster bootstrap). Each resample is a vector of cluster
counts; a metric's value on it is (counts @ cluster sums of the numerator) / (counts @ cluster sums of
the denominator), so B resamples cost two matrix products, never a loop over examples.

A paired comparison resamples the same clusters for both submissions (the paired bootstrap of the
difference) and tests "no difference" with a paired permutation test: within each cluster the two
submissions' values are swapped with probability 1/2 (a sign flip of the cluster's contribution to
the difference), the two-sided p-value counting the flips at least as extreme as the observed
difference, with the observed one included (Phipson & Smyth, 2010).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from evaluator.request import DEFAULT_RESAMPLES

CONFIDENCE = 0.95
CHUNK_CELLS = 1 << 22  # resample x cluster cells held at once (a few 32 MB arrays)


@dataclass(frozen=True)
class Ratio:
    """A metric as sum(num) / sum(den) over rows, times `scale` (100: a percentage). A row outside
    the metric's scope has den 0 (and num 0)."""

    num: np.ndarray
    den: np.ndarray
    scale: float = 100.0


@dataclass(frozen=True)
class Resampling:
    """What a task hands the bootstrap: per-row cluster ids, the ratio metrics, and metrics derived
    from them (`derived[name](values) -> array`, values being {ratio name: array of estimates}). A
    ratio named with a leading underscore only feeds derived metrics (DISCO's mean squared error for
    its RMSE) and is not reported."""

    clusters: np.ndarray  # per row: an integer cluster id (rows of one image / pair / video / dialog)
    unit: str  # what a cluster is, for reports ("image", "pair", "video", "dialog")
    ratios: dict[str, Ratio]
    derived: dict[str, Callable[[dict], np.ndarray]] = field(default_factory=dict)


def value_at(metrics: dict, path: str):
    """The value of a metric path (`by_type.causal.apq`) in a metrics dict; None when absent."""
    value = metrics
    for key in path.split("."):
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return value


def cluster_codes(values) -> np.ndarray:
    """Integer codes of per-row cluster keys (any hashable), in order of first appearance."""
    codes: dict = {}
    return np.fromiter((codes.setdefault(v, len(codes)) for v in values), dtype=np.int64)


def _reported(r: Resampling) -> list[str]:
    return [k for k in (*r.ratios, *r.derived) if not k.startswith("_")]


def rows_in_scope(r: Resampling) -> dict[str, int]:
    """{reported ratio metric: the number of rows it is computed over} (rows whose denominator is not 0)."""
    return {name: int((np.asarray(q.den) > 0).sum()) for name, q in r.ratios.items() if not name.startswith("_")}


def cluster_sums(r: Resampling) -> tuple[int, dict[str, tuple[np.ndarray, np.ndarray]]]:
    """(number of clusters, {ratio: (its numerators, its denominators) summed per cluster})."""
    n = int(r.clusters.max()) + 1 if len(r.clusters) else 0
    return n, {name: (np.bincount(r.clusters, weights=np.asarray(q.num, np.float64), minlength=n),
                      np.bincount(r.clusters, weights=np.asarray(q.den, np.float64), minlength=n))
               for name, q in r.ratios.items()}


def _counts(n: int, resamples: int, rng: np.random.Generator):
    """Cluster counts of `resamples` bootstrap draws (n clusters drawn with replacement), in chunks."""
    chunk = max(1, CHUNK_CELLS // max(n, 1))
    for start in range(0, resamples, chunk):
        b = min(chunk, resamples - start)
        draws = rng.integers(0, n, size=(b, n)) + (np.arange(b) * n)[:, None]
        yield np.bincount(draws.ravel(), minlength=b * n).reshape(b, n).astype(np.float64)


def _values(sums: dict, weights: np.ndarray, r: Resampling) -> dict[str, np.ndarray]:
    """Every metric on each weighting of the clusters (rows of `weights`); NaN where undefined."""
    return _metrics({name: (weights @ num, weights @ den) for name, (num, den) in sums.items()}, r)


def _metrics(totals: dict, r: Resampling) -> dict[str, np.ndarray]:
    """Every metric from each ratio's (numerator, denominator) totals, one entry per resample or
    permutation; NaN where a denominator is 0."""
    out = {}
    with np.errstate(invalid="ignore", divide="ignore"):
        for name, (num, den) in totals.items():
            out[name] = np.where(den > 0, r.ratios[name].scale * num / np.where(den > 0, den, 1), np.nan)
        for name, fn in r.derived.items():
            out[name] = np.asarray(fn(out), dtype=np.float64)
    return out


def _percentile(samples: np.ndarray, confidence: float) -> list[float] | None:
    """The percentile interval; None when the metric is undefined on some resample (an empty tail)."""
    if not len(samples) or not np.isfinite(samples).all():
        return None
    tail = 100 * (1 - confidence) / 2
    lo, hi = np.percentile(samples, [tail, 100 - tail])
    return [float(f"{lo:.6g}"), float(f"{hi:.6g}")]  # six significant digits: % and small fractions alike


def intervals(r: Resampling, resamples: int = DEFAULT_RESAMPLES, seed: int = 0,
              confidence: float = CONFIDENCE) -> dict:
    """{"method", "unit", "clusters", "resamples", "seed", "confidence", "metrics": {name: [lo, hi] or
    None}, "exact": [names]} by the cluster bootstrap, the same seed giving the same intervals; where
    it is exact -- a proportion of independent 0/1 outcomes -- the analytic binomial interval instead
    (listed under "exact")."""
    n, sums = cluster_sums(r)
    rng = np.random.default_rng(seed)
    chunks = [_values(sums, w, r) for w in _counts(n, resamples, rng)] if n else []
    names = _reported(r)
    samples = {k: np.concatenate([c[k] for c in chunks]) if chunks else np.zeros(0) for k in names}
    bounds = {k: _percentile(samples[k], confidence) for k in names}
    exact = {k: _clopper_pearson(r.ratios[k], r.clusters, confidence) for k in names if k in r.ratios}
    exact = {k: v for k, v in exact.items() if v is not None}
    bounds.update(exact)
    return {"method": "cluster bootstrap, percentile interval", "unit": r.unit, "clusters": n,
            "resamples": resamples, "seed": seed, "confidence": confidence, "metrics": bounds,
            **({"exact": sorted(exact)} if exact else {})}


def _clopper_pearson(q: Ratio, clusters: np.ndarray, confidence: float) -> list[float] | None:
    """The exact binomial interval (Clopper & Pearson, Biometrika 1934) of a proportion whose rows in
    scope are independent 0/1 outcomes -- one per cluster, e.g. APQ over pairs; None otherwise, and
    the bootstrap interval stands."""
    from scipy.stats import beta

    scope = np.asarray(q.den) > 0
    num, den = np.asarray(q.num)[scope], np.asarray(q.den)[scope]
    n = int(scope.sum())
    if not n or not np.all(den == 1) or not np.all((num == 0) | (num == 1)) or \
            len(np.unique(clusters[scope])) < n:
        return None
    k, tail = int(num.sum()), (1 - confidence) / 2
    low = 0.0 if k == 0 else float(beta.ppf(tail, k, n - k + 1))
    high = 1.0 if k == n else float(beta.ppf(1 - tail, k + 1, n - k))
    return [round(q.scale * low, 4), round(q.scale * high, 4)]


def point_values(r: Resampling) -> dict[str, float]:
    """Every metric on the rows as they are (each cluster once): the point estimates beside `intervals`."""
    n, sums = cluster_sums(r)
    return {k: float(v[0]) for k, v in _values(sums, np.ones((1, n)), r).items()}


def paired(a: Resampling, b: Resampling, names: tuple[str, str] = ("a", "b")) -> Resampling:
    """A and B on the same clusters as one Resampling, so that one set of draws resamples both: each
    metric of A as `a.NAME`, of B as `b.NAME`, and their difference `diff.NAME` = B - A (for metrics whose
    denominators differ between A and B -- e.g. CounterBias, where an instance's bias can be defined
    for one model and not the other -- where `compare`'s permutation test does not apply)."""
    if not np.array_equal(a.clusters, b.clusters):
        raise ValueError("paired: the two must be resampled over the same clusters, in the same row order")

    def prefixed(prefix: str, name: str) -> str:
        return f"_{prefix}.{name[1:]}" if name.startswith("_") else f"{prefix}.{name}"

    ratios, derived = {}, {}
    for prefix, r in zip(names, (a, b)):
        ratios.update({prefixed(prefix, k): q for k, q in r.ratios.items()})
        own = [*r.ratios, *r.derived]
        for k, fn in r.derived.items():
            derived[prefixed(prefix, k)] = (lambda v, fn=fn, p=prefix, own=own:
                                            fn({n: v[prefixed(p, n)] for n in own if prefixed(p, n) in v}))
    for k in _reported(a):
        if k in b.ratios or k in b.derived:
            derived[f"diff.{k}"] = lambda v, k=k: v[prefixed(names[1], k)] - v[prefixed(names[0], k)]
    return Resampling(a.clusters, a.unit, ratios, derived)


def compare(a: Resampling, b: Resampling, resamples: int = DEFAULT_RESAMPLES, seed: int = 0,
            confidence: float = CONFIDENCE) -> dict:
    """B minus A on the same rows and clusters: per metric the observed difference, its paired
    bootstrap interval, and the two-sided p-value of the paired (within-cluster swap) permutation test."""
    n, sums_a = cluster_sums(a)
    _, sums_b = cluster_sums(b)
    if not np.array_equal(a.clusters, b.clusters) or any(
            not np.array_equal(sums_a[k][1], sums_b[k][1]) for k in sums_a):
        raise ValueError("compare: the two submissions must be scored on the same rows")
    names = _reported(a)
    one = np.ones((1, n))
    observed = {k: float(_values(sums_b, one, b)[k][0] - _values(sums_a, one, a)[k][0]) for k in names}
    rng = np.random.default_rng(seed)
    boot = {k: [] for k in names}
    for w in _counts(n, resamples, rng):
        va, vb = _values(sums_a, w, a), _values(sums_b, w, b)
        for k in names:
            boot[k].append(vb[k] - va[k])
    extreme = dict.fromkeys(names, 0)
    chunk = max(1, CHUNK_CELLS // max(n, 1))
    for start in range(0, resamples, chunk):
        swap = rng.random((min(chunk, resamples - start), n)) < 0.5
        # each permutation swaps A's and B's numerators in the chosen clusters (the denominators agree)
        va = _metrics({k: (np.where(swap, sums_b[k][0], num).sum(axis=1), den.sum())
                       for k, (num, den) in sums_a.items()}, a)
        vb = _metrics({k: (np.where(swap, num, sums_b[k][0]).sum(axis=1), den.sum())
                       for k, (num, den) in sums_a.items()}, a)
        for k in names:
            if np.isfinite(observed[k]):
                extreme[k] += int((np.abs(vb[k] - va[k]) >= abs(observed[k]) * (1 - 1e-9)).sum())
    out = {}
    for k in names:
        finite = bool(np.isfinite(observed[k]))
        out[k] = {"difference": round(observed[k], 4) if finite else None,
                  "interval": _percentile(np.concatenate(boot[k]), confidence) if finite and boot[k] else None,
                  "p_value": round((extreme[k] + 1) / (resamples + 1), 6) if finite else None}
    return {"method": "paired cluster bootstrap (interval), paired permutation test (p-value)", "unit": a.unit,
            "clusters": n, "resamples": resamples, "seed": seed, "confidence": confidence, "metrics": out}
