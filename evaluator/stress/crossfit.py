"""k-fold cross-fitting of a text-only random forest on the evaluated split itself (Brown et al., arXiv
2511.04655, 2025, §3, the Test-set Stress-Test; the authors' code: stratified k folds, 5 by default, a forest of
100 trees, the held-out probability of the right answer as the item's bias score s(x)).

Every row of the split is held out once: the forest is fitted on the other folds' rows and scores this fold's.
- Open-ended prompts: s(x) = P(reference answer) (0 when that answer is not among the forest's classes, as in the
  authors' code); the forest's answer is its most probable class that is an answer.
- Multiple choice: the forest scores each (prompt, option) pair as right or not; s(x) = the right options' share of
  the prompt's summed probabilities (for a prompt of one option that is right or not -- Social-IQ -- the
  probability of its own label); each option's log-odds stand in for a model's log-likelihood.
- A row that asks several prompts (VCR: Q->A, then QA->R) scores the product of its prompts' s(x): the
  probability the forest gets the whole row right, as Q->AR counts it.

Determinism: rows are put in the order of their ids before folds are drawn and forests fitted, so the input's
row order does not matter; each tree's seed comes from the forest's seed whatever the number of threads, and
probabilities are summed over the trees in one thread, in a fixed order (as the authors' code does);
scores are written at 6 decimals. The forest is scikit-learn's, grown and scored a tree at a time
(evaluator/stress/forest.py), so that its memory does not grow with the trees nor the answers.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from core.errors import ParamsError
from evaluator.stress.features import OTHER, ChoiceFeatures, EmbeddedChoice, EmbeddedOpen, OpenFeatures
from evaluator.stress.forest import forest_probabilities
from evaluator.stress.items import BlindItems

DECIMALS = 6  # the precision of s(x) as written
_CLIP = 1e-6  # probabilities are clipped to [_CLIP, 1 - _CLIP] before their log-odds


@dataclass(frozen=True)
class StressOptions:
    """The authors' defaults: 5 folds, 100 trees, seed 42; `max_answers` bounds an open-ended forest's
    classes (VQA has thousands of answers; the rest are one class, never the forest's answer)."""

    folds: int = 5
    trees: int = 100
    seed: int = 42
    max_answers: int = 1000
    threads: int = 0  # threads fitting the trees (0: every CPU); the result does not depend on it
    text_model: str | None = None  # a sentence-embedding checkpoint read instead of the hand-made features

    def __post_init__(self):
        if self.folds < 2 or self.trees < 1 or self.max_answers < 1 or self.threads < 0:
            raise ParamsError("stress-test: --folds >= 2, --trees >= 1, --max-answers >= 1, --threads >= 0")


@dataclass(frozen=True)
class CrossFit:
    """Per row of the split (in its order): s(x), its fold, and per prompt the forest's output (open-ended: its
    answer; multiple choice: each option's log-odds)."""

    scores: np.ndarray
    folds: np.ndarray
    outputs: list


def _workers(options: StressOptions) -> int:
    """Trees fitted at once: --threads, or the cores this process may run on."""
    return options.threads or len(os.sched_getaffinity(0))


def _forest(x_train, y_train, x_held, options: StressOptions):
    return forest_probabilities(x_train, y_train, x_held, options.trees, options.seed, _workers(options))


def _row_folds(order: list[int], clusters, options: StressOptions) -> np.ndarray:
    """The fold of each row. Folds are drawn over the benchmark's clusters (`Task.clusters`: one image's questions,
    one pair's sub-questions; each row its own where it declares none), so that no held-out row's twin is trained
    on -- the authors' grouped folds: the clusters, each named by its first row in ORDER (the ids' order), are
    shuffled by the seed and dealt to the folds in turn."""
    rows = len(order)
    codes = np.arange(rows) if clusters is None else np.asarray(clusters)
    first: dict = {}
    for r in order:
        first.setdefault(codes[r], len(first))
    if len(first) < options.folds:
        raise ParamsError(f"stress-test: {len(first)} clusters of rows cannot make {options.folds} folds (--folds)")
    dealt = np.random.default_rng(options.seed).permutation(len(first)) % options.folds
    named = np.fromiter((first[c] for c in codes), dtype=np.int64, count=rows)
    return dealt[named]


def feature_shape(items: BlindItems, options: StressOptions, embed=None):
    """What the forests read of the prompts: the hand-made features, or with `embed` (features.text_encoder of
    --text-model) the prompts' and options' embeddings."""
    if embed is not None:
        return EmbeddedChoice(items, embed) if items.choice else EmbeddedOpen(items, options.max_answers, embed)
    return ChoiceFeatures(items) if items.choice else OpenFeatures(items, options.max_answers)


def cross_fit(items: BlindItems, keys: list, clusters, options: StressOptions, rows: int, embed=None) -> CrossFit:
    """Cross-fit the forest over the ROWS of a split (KEYS: each row's sortable id; CLUSTERS: each row's cluster
    code, or None), every row held out once; `embed`: `feature_shape`'s."""
    order = sorted(range(rows), key=lambda r: keys[r])
    rank = np.empty(rows, dtype=np.int64)
    rank[order] = np.arange(rows)
    prompts = np.asarray(sorted(range(len(items)), key=lambda p: (rank[items.rows[p]], items.kinds[p])))
    row_of = np.asarray(items.rows)
    folds = _row_folds(order, clusters, options)
    prompt_s = np.zeros(len(items))
    outputs: list = [None] * len(items)
    fit = _fit_choice if items.choice else _fit_open
    shape = feature_shape(items, options, embed)
    for k in range(options.folds):
        held = prompts[folds[row_of[prompts]] == k]
        train = prompts[folds[row_of[prompts]] != k]
        fit(shape, train, held, options, prompt_s, outputs)
    scores = np.ones(rows)
    for p, s in enumerate(prompt_s):
        scores[items.rows[p]] *= s
    return CrossFit(np.round(scores, DECIMALS), folds, outputs)


def _fit_open(shape: OpenFeatures, train, held, options, prompt_s, outputs) -> None:
    classes = shape.classes(train)
    known, proba = _forest(shape.matrix(train, train, classes), shape.labels(classes, train),
                           shape.matrix(train, held, classes), options)  # known: the class codes seen in training
    answers = np.array([*classes, OTHER], dtype=object)[known]
    other = len(classes)  # the code of OTHER, the highest: if seen, the last column
    real = int((known != other).sum())  # the columns 0..real-1 are answers
    gold = shape.labels(classes, held)
    column = {c: j for j, c in enumerate(known)}
    proba.sum_duplicates()
    for k, (p, g) in enumerate(zip(held, gold)):
        cols, probs = (a[proba.indptr[k]:proba.indptr[k + 1]] for a in (proba.indices, proba.data))
        j = column.get(g) if g < other else None
        prompt_s[p] = float(probs[cols == j][0]) if j is not None and (cols == j).any() else 0.0
        # the most probable answer, the first column of the highest probability (np.argmax's tie rule); the first
        # answer when the forest gives no answer any probability
        ranked = cols < real
        best = cols[ranked][np.argmax(probs[ranked])] if ranked.any() else 0
        outputs[p] = str(answers[best]) if real else ""


def _fit_choice(shape: ChoiceFeatures, train, held, options, prompt_s, outputs) -> None:
    pairs_train, pairs_held = shape.pairs(train), shape.pairs(held)
    known, proba = _forest(shape.matrix(train, pairs_train), shape.right[pairs_train],
                           shape.matrix(train, pairs_held), options)
    right_col = list(known).index(1) if 1 in known else None
    p_right = proba[:, right_col].toarray().ravel() if right_col is not None else np.zeros(len(pairs_held))
    by_prompt: dict[int, list[int]] = {}
    for k, pair in enumerate(pairs_held):
        by_prompt.setdefault(int(shape.prompt_of[pair]), []).append(k)
    for p, ks in by_prompt.items():
        probs, truth = p_right[ks], shape.right[pairs_held[ks]]
        if len(ks) == 1:
            prompt_s[p] = probs[0] if truth[0] else 1.0 - probs[0]
        else:
            total = probs.sum()
            prompt_s[p] = probs[truth == 1].sum() / total if total > 0 else truth.sum() / len(ks)
        clipped = np.clip(probs, _CLIP, 1 - _CLIP)
        outputs[p] = np.round(np.log(clipped / (1 - clipped)), DECIMALS).tolist()
