"""VisDial v1.0 retrieval metrics as the official starter code computes them (visdial-challenge-starter-
pytorch, visdialch/metrics.py): ranks of the ground-truth option -> R@1/5/10, mean rank, MRR; NDCG over
dense relevance with k = number of options with nonzero relevance and linear gain."""

from __future__ import annotations

import numpy as np


def scores_to_ranks(scores: np.ndarray) -> np.ndarray:
    """Rank (1 = best) of every option from its score; ties keep option order (stable sort)."""
    order = np.argsort(-np.asarray(scores, dtype=np.float64), axis=1, kind="stable")
    ranks = np.empty_like(order)
    np.put_along_axis(ranks, order, np.arange(1, order.shape[1] + 1)[None, :].repeat(len(order), 0), axis=1)
    return ranks


def gt_ranks(ranks: np.ndarray, gt_index: np.ndarray) -> np.ndarray:
    return np.take_along_axis(np.asarray(ranks), np.asarray(gt_index)[:, None], axis=1)[:, 0]


def retrieval_metrics(gt_rank: np.ndarray) -> dict[str, float]:
    """R@k in %, mean rank and MRR over the rounds' ground-truth ranks."""
    gt_rank = np.asarray(gt_rank, dtype=np.float64)
    return {"r@1": 100 * float((gt_rank <= 1).mean()), "r@5": 100 * float((gt_rank <= 5).mean()),
            "r@10": 100 * float((gt_rank <= 10).mean()), "mean_rank": float(gt_rank.mean()),
            "mrr": float((1.0 / gt_rank).mean())}


def ndcg(ranks: np.ndarray, relevance: np.ndarray) -> np.ndarray:
    """Per-row NDCG@k, k = number of options with nonzero relevance: DCG of the top-k options in the
    predicted order, sum rel / log2(position + 1), over the DCG of the top-k by relevance. Rows whose
    relevance is all zero have no ideal DCG and come back as NaN (callers report them)."""
    ranks, relevance = np.asarray(ranks), np.asarray(relevance, dtype=np.float64)
    k = (relevance != 0).sum(axis=1)
    discounts = 1.0 / np.log2(np.arange(ranks.shape[1]) + 2.0)
    within = np.arange(ranks.shape[1])[None, :] < k[:, None]
    predicted = np.take_along_axis(relevance, np.argsort(ranks, axis=1, kind="stable"), axis=1)
    ideal = -np.sort(-relevance, axis=1)
    dcg = (predicted * discounts * within).sum(axis=1)
    best = (ideal * discounts * within).sum(axis=1)
    out = np.full(len(ranks), np.nan)
    np.divide(dcg, best, out=out, where=k > 0)
    return out
