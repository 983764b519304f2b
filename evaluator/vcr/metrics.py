"""VCR metrics (Zellers et al., CVPR 2019, §5): Q->A, QA->R and Q->AR accuracy per item."""

from __future__ import annotations

import numpy as np

from evaluator.paired import correct_chosen


def vcr_correct(answer_scores: np.ndarray, answer_labels: np.ndarray, rationale_scores: np.ndarray,
                rationale_labels: np.ndarray) -> dict[str, np.ndarray]:
    """Per item: Q->A right (the correct answer scores strictly highest), QA->R right (the correct
    rationale, scored given the correct answer, strictly highest), Q->AR right (both)."""
    q_a = correct_chosen(answer_scores, answer_labels)
    qa_r = correct_chosen(rationale_scores, rationale_labels)
    return {"q_a": q_a, "qa_r": qa_r, "q_ar": q_a * qa_r}
