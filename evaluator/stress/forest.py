"""The stress test's random forest, grown and scored one tree at a time, so that its memory does not grow with the
number of trees nor with the held-out rows times the answers.

scikit-learn's `RandomForestClassifier` keeps every tree until it predicts, and each fully grown tree stores a
probability for every class at every node: at VQA's real shape (a fold's 175,000 training questions, 1,001 answer
classes) one tree holds about 59,000 nodes, a 449 MiB value array, and a fold's 100 trees about 44 GiB. Here a
tree is fitted, scores the held-out rows and is dropped before the next; at most `workers` trees exist at once.
What a tree gives each held-out row (the class shares of the leaf it lands in) is added to a sparse sum: a fully
grown tree's leaf holds few classes, so the sum holds at most a few per tree and row, never rows x classes.

The result is scikit-learn's forest's, to the last bit (tests/test_stress.py compares them): the same trees (each
tree's seed drawn from the forest's seed as scikit-learn draws it, the same bootstrap, drawn from the tree's seed,
given as sample weights), each tree's own `predict_proba`, and the trees' probabilities summed in the trees'
order, then divided by their number, as `RandomForestClassifier.predict_proba` does with one job.
"""

from __future__ import annotations

from collections import deque
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import scipy.sparse as sp

_MAX_INT = np.iinfo(np.int32).max
_CHUNK = 4096  # leaves whose class shares are read at once (a dense block of _CHUNK x classes)


def tree_seeds(seed: int, trees: int) -> list[int]:
    """Each tree's seed, as `RandomForestClassifier(random_state=seed)` draws them (one draw per tree, in order)."""
    state = np.random.RandomState(seed)
    return [int(state.randint(_MAX_INT)) for _ in range(trees)]


def _grow(x: np.ndarray, y: np.ndarray, seed: int):
    """One tree as the forest grows it: its bootstrap of the rows drawn from its seed, given as weights."""
    from sklearn.tree import DecisionTreeClassifier

    counts = np.bincount(np.random.RandomState(seed).randint(0, len(y), len(y)), minlength=len(y))
    return DecisionTreeClassifier(max_features="sqrt", random_state=seed).fit(x, y, sample_weight=counts)


def _grown(x: np.ndarray, y: np.ndarray, seeds: list[int], workers: int):
    """The fitted trees in the seeds' order, at most `workers` fitting or waiting at once (the tree builder
    releases the GIL, so threads fit in parallel)."""
    with ThreadPoolExecutor(max_workers=workers) as pool:
        pending: deque = deque()
        for seed in seeds:
            pending.append(pool.submit(_grow, x, y, seed))
            if len(pending) >= workers:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


def _shares(tree, x: np.ndarray) -> sp.csr_matrix:
    """TREE's `predict_proba` of the rows X, sparse: read once per leaf the rows land in, by the tree itself."""
    leaves, first, where = np.unique(tree.apply(x), return_index=True, return_inverse=True)
    blocks = [sp.csr_matrix(tree.predict_proba(x[first[k:k + _CHUNK]])) for k in range(0, len(first), _CHUNK)]
    return sp.vstack(blocks, format="csr")[where.ravel()]


def forest_probabilities(x_train: np.ndarray, y_train: np.ndarray, x_held: np.ndarray, trees: int, seed: int,
                         workers: int) -> tuple[np.ndarray, sp.csr_matrix]:
    """(the classes seen in training, sorted; the forest's probability of each of them for every held-out row, a
    sparse rows x classes matrix): `RandomForestClassifier(n_estimators=trees, random_state=seed)` fitted on the
    training rows, its `predict_proba` of the held-out ones."""
    classes, codes = np.unique(y_train, return_inverse=True)
    x_train = np.asarray(x_train, dtype=np.float32)  # as the forest reads them
    x_held = np.asarray(x_held, dtype=np.float32)
    total = sp.csr_matrix((len(x_held), len(classes)), dtype=np.float64)
    if not len(x_held):
        return classes, total
    for tree in _grown(x_train, codes.astype(np.float64), tree_seeds(seed, trees), workers):
        total = total + _shares(tree, x_held)
    total = total.tocsr()
    total.data /= trees  # divided, not multiplied by 1/trees (scipy's `/`): the forest's own rounding
    return classes, total
