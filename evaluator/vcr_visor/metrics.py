"""VCR-Visor metrics (the VCR-Visor paper, §3.4, Eq. 1-6) as plain functions over arrays."""

from __future__ import annotations

import numpy as np


def correct_probability(scores: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Eq. 2: P_i = exp(a_i,correct) / sum_j exp(a_i,j), a softmax over each sub-question's scores."""
    scores = np.asarray(scores, dtype=np.float64)
    shifted = np.exp(scores - scores.max(axis=1, keepdims=True))
    return shifted[np.arange(len(labels)), labels] / shifted.sum(axis=1)


def apq(p1: np.ndarray, p2: np.ndarray) -> np.ndarray:
    """Eq. 3: per pair, 1 when both sub-questions give the correct response P > 0.5."""
    return ((p1 > 0.5) & (p2 > 0.5)).astype(float)


def hpq(p1: np.ndarray, p2: np.ndarray) -> np.ndarray:
    """Eq. 5-6: per pair, the harmonic mean 2 P1 P2 / (P1 + P2) (0 when both are 0)."""
    total = p1 + p2
    return np.divide(2 * p1 * p2, total, out=np.zeros_like(total), where=total > 0)


def sub_question_accuracy(p: np.ndarray) -> np.ndarray:
    """Per sub-question, 1 when the correct response has the larger score (a tie counts as wrong)."""
    return (p > 0.5).astype(float)
