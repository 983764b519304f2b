"""Social-IQ metrics: answer-level binary accuracy (the task of Gat et al., NeurIPS 2021, Table 3: is this answer
correct? majority = 4/7 = 57.14 %) and A2, the binary-pair accuracy of Zadeh et al. (is the correct
answer scored above the incorrect one, over the 4 x 3 pairs per question)."""

from __future__ import annotations

import numpy as np


def binary_correct(scores: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Per answer: 1 when the decision (score > 0 means 'correct') matches the label."""
    return ((np.asarray(scores) > 0) == (np.asarray(labels) == 1)).astype(np.float64)


def pair_correct(correct_scores: np.ndarray, incorrect_scores: np.ndarray) -> np.ndarray:
    """Per pair: 1 when the correct answer scores higher, 0.5 on a tie (a coin flip's expectation), else 0."""
    c, i = np.asarray(correct_scores, np.float64), np.asarray(incorrect_scores, np.float64)
    return np.where(c > i, 1.0, np.where(c == i, 0.5, 0.0))
