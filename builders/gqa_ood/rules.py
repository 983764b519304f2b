"""The GQA-OOD selection rules, as the authors' released code applies them (Kervadec et al., CVPR 2021, §3).

Pure functions shared by the builder and the evaluator:

* group imbalance: normalised entropy ne = H(p) / ln(d), H(p) = -sum p ln(p + 1e-9), d = 1 -> 1.0;
* group selection: keep ne <= mean(ne) - std(ne) (population std over all local groups);
* head/tail: an answer is tail iff count * d / n < 1 + alpha, in exact rational arithmetic
  (the paper's |a_i| <= alpha * mu(a) with the code's strict `<` and 1 + alpha);
* reasoning labels of Fig. 5a from the same rareness ratio count * d / n.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Iterable, Sequence

import numpy as np

ENTROPY_EPS = 1e-9
# The 22 alphas of the published alpha_tail family and of the authors' evaluation.py, in their order.
PUBLISHED_ALPHAS = (9.0, 7.0, 5.0, 3.6, 2.8, 2.2, 1.8, 1.4, 1.0, 0.8, 0.4, 0.3, 0.2, 0.1, 0.0,
                    -0.1, -0.2, -0.3, -0.4, -0.5, -0.6, -0.7)
# Fig. 5a footnote: head if rareness > 1.2, borderline if 0.7 < rareness <= 1.2, tail if <= 0.7.
REASONING_HEAD_ABOVE = Fraction(6, 5)
REASONING_TAIL_AT_MOST = Fraction(7, 10)


def normalized_entropy(counts: Iterable[int]) -> float:
    """ne = -sum p ln(p + 1e-9) / ln(d); a group with one distinct answer has ne = 1.0.

    Summed with `math.fsum`, so the value does not depend on the order of the answers.
    """
    counts = list(counts)
    d = len(counts)
    if d <= 1:
        return 1.0
    n = sum(counts)
    h = -math.fsum((c / n) * math.log(c / n + ENTROPY_EPS) for c in counts)
    return h / math.log(d)


def entropy_threshold(values: Iterable[float]) -> float:
    """mean - population std of the normalised entropies of all local groups of a split."""
    values = list(values)
    mean = math.fsum(values) / len(values)
    std = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / len(values))
    return mean - std


def alpha_fraction(alpha: float) -> Fraction:
    """alpha as the decimal the user wrote (0.2 -> 1/5), not its binary floating-point value."""
    return Fraction(repr(float(alpha)))


def tail_mask(count, num_answers, group_size, alpha: float) -> np.ndarray:
    """Exact rule over arrays of (count, d, n): tail iff count * d / n < 1 + alpha, in integer
    arithmetic (an answer exactly at the boundary is head)."""
    bound = 1 + alpha_fraction(alpha)
    count, num_answers, group_size = (np.asarray(a, dtype=object if bound.denominator > 10**6 else np.int64)
                                      for a in (count, num_answers, group_size))
    return np.asarray(count * num_answers * bound.denominator < group_size * bound.numerator, dtype=bool)


def tail_flags_authors_float(counts_in_first_occurrence_order: Sequence[int], alpha: float) -> list[bool]:
    """The authors' floating-point test `p_i < mean(p) * (alpha + 1)` with numpy, answers in file order."""
    dist = np.array(counts_in_first_occurrence_order)
    dist = dist / dist.sum()
    threshold = dist.mean() * (alpha + 1)
    return [bool(p < threshold) for p in dist]


def reasoning_label(count: int, num_answers: int, group_size: int) -> str:
    """Fig. 5a label of an answer from its rareness count * d / n within the question's group."""
    rareness = Fraction(count * num_answers, group_size)
    if rareness > REASONING_HEAD_ABOVE:
        return "head"
    if rareness > REASONING_TAIL_AT_MOST:
        return "borderline"
    return "tail"
