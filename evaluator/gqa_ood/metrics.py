"""GQA-OOD metrics (Kervadec et al., CVPR 2021, §3-4, Figs. 3 and 5, appendix D), as plain functions over arrays.

Per-sample values are exact-match correctness (the GQA evaluation compares answer strings as they
are); aggregates are percentages over the scored questions.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Sequence

import numpy as np

from builders.gqa_ood.rules import reasoning_label, tail_mask

LABELS = ("head", "borderline", "tail")


def exact_match(predictions: Sequence[str], answers: Sequence[str]) -> np.ndarray:
    """Per-sample 1.0 when the prediction equals the ground-truth answer, else 0.0."""
    return np.array([p == a for p, a in zip(predictions, answers)], dtype=float)


def accuracy(correct: np.ndarray, mask: np.ndarray | None = None) -> float | None:
    """Mean correctness in percent over the masked samples (None when there are none)."""
    values = correct if mask is None else correct[mask]
    return round(100.0 * float(values.mean()), 4) if values.size else None


def acc_tail_curve(correct, count, num_answers, group_size, alphas) -> list[dict]:
    """acc-tail as a function of alpha (Fig. 3a): tail(alpha) = count·d/n < 1 + alpha."""
    return [{"alpha": a, "questions": int(m.sum()), "acc_tail": accuracy(correct, m)}
            for a, m in ((a, tail_mask(count, num_answers, group_size, a)) for a in alphas)]


def head_answers_by_group(groups: Sequence[str], answers: Sequence[str], subsets: Sequence[str]) -> dict[str, set]:
    """Answers labelled head in each group (at the build's alpha)."""
    heads: dict[str, set] = defaultdict(set)
    for g, a, s in zip(groups, answers, subsets):
        if s == "head":
            heads[g].add(a)
    return heads


def head_tail_confusion(predictions, groups, count, num_answers, group_size, head_answers, alphas) -> list[dict]:
    """Appendix D: share of tail(alpha)-GT questions answered with a head answer of the same group.

    The tail shrinks with alpha while the head set stays the one of the build (Fig. 3b).
    """
    predicted_head = np.array([p in head_answers.get(g, ()) for p, g in zip(predictions, groups)], dtype=float)
    return [{"alpha": a, "questions": int(m.sum()), "confusion": accuracy(predicted_head, m)}
            for a, m in ((a, tail_mask(count, num_answers, group_size, a)) for a in alphas)]


def group_answer_counts(groups: Sequence[str], answers: Sequence[str]) -> dict[str, Counter]:
    counts: dict[str, Counter] = defaultdict(Counter)
    for g, a in zip(groups, answers):
        counts[g][a] += 1
    return counts


def reasoning_matrix(predictions, answers, groups, group_counts: dict[str, Counter]) -> dict:
    """Fig. 5a: % of questions per (predicted label, GT label, correct/wrong).

    Labels come from the rareness count·d/n of the predicted and of the GT answer in the question's
    group (head > 1.2, borderline in (0.7, 1.2], tail <= 0.7); an answer the group never has is tail.
    """
    cells = Counter()
    for p, a, g in zip(predictions, answers, groups):
        counts = group_counts[g]
        n, d = sum(counts.values()), len(counts)
        gt = reasoning_label(counts[a], d, n)
        pred = reasoning_label(counts.get(p, 0), d, n)
        cells[(pred, gt, "C" if p == a else "W")] += 1
    total = sum(cells.values()) or 1
    return {pred: {gt: {cw: round(100.0 * cells[(pred, gt, cw)] / total, 4) for cw in ("C", "W")}
                   for gt in LABELS} for pred in LABELS}
