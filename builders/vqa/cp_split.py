"""The VQA-CP re-split (Agrawal et al., CVPR 2018, §3) and its diagnostics.

Questions are grouped by (question_type, multiple_choice_answer). Groups are visited in a seeded
random order and moved from train to test while three rules hold: test stays at or below the target
number of questions, every question type keeps at least one group in train, and every concept of the
moved questions stays present in train (a concept of a question-answer pair is a word of the question
or the answer that is neither a stop word nor a word of its question type). The answer
distribution of each question type therefore differs between the splits, while the words a test
question needs were seen in training.
"""

from __future__ import annotations

import re

import numpy as np

# English function words; with the question-type words they are not concepts.
STOP_WORDS = frozenset("""
a about above after again against all am an and any are as at be because been before being below between
both but by can could did do does doing down during each few for from further had has have having he her
here hers herself him himself his how i if in into is it its itself just me more most my myself no nor not
now of off on once only or other our ours ourselves out over own same she should so some such than that the
their theirs them themselves then there these they this those through to too under until up very was we
were what when where which while who whom why will with would you your yours yourself yourselves s t
""".split())
_WORD = re.compile(r"[a-z0-9]+")


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def concepts(question: str, answer: str, question_type: str) -> set[str]:
    """The concept words of one question-answer pair."""
    excluded = STOP_WORDS.union(words(question_type))
    return {w for w in words(question) + words(answer) if w not in excluded}


def concept_matrix(questions: list[str], answers: list[str], qtypes: list[str]) -> tuple[np.ndarray, np.ndarray, int]:
    """(question index, word id) pairs of every question's distinct concepts, and the vocabulary size."""
    vocab: dict[str, int] = {}
    rows, cols = [], []
    for i, (q, a, t) in enumerate(zip(questions, answers, qtypes)):
        for w in concepts(q, a, t):
            rows.append(i)
            cols.append(vocab.setdefault(w, len(vocab)))
    return np.array(rows, np.int64), np.array(cols, np.int64), len(vocab)


def resplit(qtypes: list[str], answers: list[str], concept: tuple[np.ndarray, np.ndarray, int],
            test_fraction: float, seed: int) -> np.ndarray:
    """Greedy group assignment (`concept` from `concept_matrix`); boolean mask of the test questions."""
    n = len(qtypes)
    group_keys = sorted(set(zip(qtypes, answers)))
    group_id = {k: g for g, k in enumerate(group_keys)}
    group_of = np.fromiter((group_id[k] for k in zip(qtypes, answers)), np.int64, n)
    sizes = np.bincount(group_of, minlength=len(group_keys))
    type_id = {t: i for i, t in enumerate(sorted(set(qtypes)))}
    group_type = np.array([type_id[t] for t, _ in group_keys], np.int64)
    train_groups_of_type = np.bincount(group_type, minlength=len(type_id))

    rows, cols, vocab_size = concept
    train_count = np.bincount(cols, minlength=vocab_size)  # train questions holding each concept
    # Per group: its distinct concept words and how many of its questions hold each one.
    pair = np.unique(group_of[rows] * vocab_size + cols, return_counts=True)
    pair_group, pair_word, pair_count = pair[0] // vocab_size, pair[0] % vocab_size, pair[1]
    bounds = np.searchsorted(pair_group, np.arange(len(group_keys) + 1))

    target = test_fraction * n
    test_size = 0
    in_test = np.zeros(len(group_keys), bool)
    for g in np.random.default_rng(seed).permutation(len(group_keys)):
        if test_size + sizes[g] > target or train_groups_of_type[group_type[g]] == 1:
            continue
        w, c = pair_word[bounds[g]:bounds[g + 1]], pair_count[bounds[g]:bounds[g + 1]]
        if np.any(train_count[w] - c < 1):
            continue
        train_count[w] -= c
        train_groups_of_type[group_type[g]] -= 1
        test_size += sizes[g]
        in_test[g] = True
    return in_test[group_of]


def concept_coverage(is_test: np.ndarray, concept: tuple[np.ndarray, np.ndarray, int]) -> float:
    """Share of test questions whose every concept occurs in some train question (published: 99.01 %)."""
    rows, cols, vocab_size = concept
    in_train = np.zeros(vocab_size, bool)
    in_train[cols[~is_test[rows]]] = True
    uncovered = np.zeros(len(is_test), bool)
    uncovered[rows[~in_train[cols]]] = True
    tests = int(is_test.sum())
    return float((is_test & ~uncovered).sum() / tests) if tests else 1.0


def jensen_shannon(p: dict[str, int], q: dict[str, int]) -> float:
    """Jensen-Shannon divergence (base 2, in [0, 1]) between two answer count distributions."""
    keys = sorted(p.keys() | q.keys())
    a = np.array([p.get(k, 0) for k in keys], float)
    b = np.array([q.get(k, 0) for k in keys], float)
    if not a.sum() or not b.sum():
        return float("nan")
    a, b = a / a.sum(), b / b.sum()
    m = (a + b) / 2

    def kl(x):
        nz = x > 0
        return float((x[nz] * np.log2(x[nz] / m[nz])).sum())

    return 0.5 * kl(a) + 0.5 * kl(b)
