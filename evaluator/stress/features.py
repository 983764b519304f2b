"""Hand-made non-visual features of the stress test's prompts (Brown et al., arXiv 2511.04655, 2025, §3: the
random-forest variant reads features a designer writes by hand from the text alone; the authors' code fits
every frequency map on the training folds only, so that no held-out answer leaks into its own features).

Two shapes, one per kind of benchmark:
- open-ended (`OpenFeatures`): per prompt, the question's length, its first one, two and three words and last word
  (each as a code learnt on the training folds; -1: unseen), and for each prefix and the last word the most
  frequent training answer given it, that answer's share and how often it was seen -- the question-type prior of
  Agrawal et al., CVPR 2018, §3, learnt anew on every fold (the last word: the object a question asks about);
- multiple choice (`ChoiceFeatures`): per (prompt, option) pair, the question's features above, the option's length
  and its rank by length among the prompt's options, its word overlap with the prompt and that overlap's rank, its
  position, and how often the same option text was right on the training folds -- the answer-only biases of
  multiple-choice benchmarks (Zellers et al., CVPR 2019, §4.2: the longest answer, the answer that repeats the
  question).

A key (a prefix, a last word, an option's text) seen fewer than `MIN_SEEN` times in the training folds is coded
as unseen and given no prior, as scikit-learn's encoders group infrequent categories: a key seen once or twice
names its rows, and fully grown trees memorise those rows by it instead of learning what carries to the held-out
fold. Without this, a give-away last word on questions whose prefix is seen once or twice scored s(x) 0.15-0.16
against 0.96 on frequent prefixes; with it, 1.00 and 0.96 (tests/test_stress.py). Out-of-fold priors for the
training rows (scikit-learn's `TargetEncoder.fit_transform`) were measured on the same case and do not help
(0.20 on rare prefixes, and 0.50 on frequent ones: a prior that differs between inner folds is noise a fully
grown tree splits on).

With `--text-model`, a text model from a checkpoint reads the prompts instead (`EmbeddedOpen`, `EmbeddedChoice`): the
forest sees the sentence embeddings of each prompt and option, which carry what the words mean where the hand-made
features see only which words they are. This is a frozen encoder under the same cross-fitted forest, not the paper's
TsT-LLM (an LLM fine-tuned with LoRA on each fold's training rows).
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict

import numpy as np

from evaluator.stress.items import BlindItems

OTHER = "\x00other"  # the class of every answer outside the `max_answers` most frequent training answers
PREFIXES = (1, 2, 3)
PRIOR_KEYS = (*(f"first{k}" for k in PREFIXES), "last")  # the keys whose training answers give a prior
MIN_SEEN = 10  # a key seen fewer times in the training folds is unseen (the module's docstring)
_WORD = re.compile(r"[a-z0-9']+")


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


class _Codes:
    """Keys coded by their training frequency (0: the most frequent; ties by key); -1 for a key seen fewer than
    MIN_SEEN times."""

    def __init__(self, keys):
        counts = Counter(keys)
        ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        self.code = {k: i for i, (k, n) in enumerate(ranked) if n >= MIN_SEEN}

    def __call__(self, keys) -> np.ndarray:
        return np.fromiter((self.code.get(k, -1) for k in keys), dtype=np.float64, count=len(keys))


def _question_keys(items: BlindItems) -> dict[str, list[str]]:
    """Per prompt: its question's first 1, 2, 3 words (with its kind, so VCR's Q->A and QA->R keep apart) and its
    last word."""
    keys = {f"first{k}": [] for k in PREFIXES}
    keys["last"] = []
    for question, kind in zip(items.questions, items.kinds):
        w = words(question)
        for k in PREFIXES:
            keys[f"first{k}"].append(f"{kind}|{' '.join(w[:k])}")
        keys["last"].append(f"{kind}|{w[-1] if w else ''}")
    return keys


class _QuestionFeatures:
    """The features every prompt has: lengths, kind, prefix and last-word codes."""

    names = ("question_words", "context_words", "kind", *(f"first{k}" for k in PREFIXES), "last")

    def __init__(self, items: BlindItems):
        self.keys = _question_keys(items)
        self.base = np.column_stack([
            np.fromiter((len(words(q)) for q in items.questions), dtype=np.float64, count=len(items)),
            np.fromiter((len(words(c)) for c in items.contexts), dtype=np.float64, count=len(items)),
            np.asarray(items.kinds, dtype=np.float64)])

    def matrix(self, train: np.ndarray, rows: np.ndarray) -> np.ndarray:
        coded = [_Codes([self.keys[name][i] for i in train])([self.keys[name][i] for i in rows])
                 for name in self.names[3:]]
        return np.column_stack([self.base[rows], *coded])


class OpenFeatures:
    """Open-ended prompts: one row per prompt, the class its reference answer (among the `max_answers` most
    frequent answers of the training folds; the rest are one class, `OTHER`)."""

    names = (*_QuestionFeatures.names,
             *(f"{p}_{k}" for k in PRIOR_KEYS for p in ("prior", "prior_share", "prior_seen")))

    def __init__(self, items: BlindItems, max_answers: int):
        self.items, self.max_answers = items, max_answers
        self.question = _QuestionFeatures(items)

    def classes(self, train: np.ndarray) -> list[str]:
        """The answers a fold's forest can give: the training folds' most frequent (ties by answer)."""
        counts = Counter(self.items.targets[i] for i in train)
        return [a for a, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:self.max_answers]]

    def labels(self, classes: list[str], rows: np.ndarray) -> np.ndarray:
        index = {a: k for k, a in enumerate(classes)}
        return np.fromiter((index.get(self.items.targets[i], len(classes)) for i in rows), dtype=np.int64,
                           count=len(rows))

    def matrix(self, train: np.ndarray, rows: np.ndarray, classes: list[str]) -> np.ndarray:
        index = {a: k for k, a in enumerate(classes)}
        columns = [self.question.matrix(train, rows)]
        for name in PRIOR_KEYS:
            keys = self.question.keys[name]
            answers: dict[str, Counter] = defaultdict(Counter)
            for i in train:
                answers[keys[i]][self.items.targets[i]] += 1
            prior = {key: (min(c.items(), key=lambda kv: (-kv[1], kv[0])), sum(c.values()))
                     for key, c in answers.items() if sum(c.values()) >= MIN_SEEN}
            found = [prior.get(keys[i]) for i in rows]
            columns.append(np.array([[-1.0, 0.0, 0.0] if f is None else
                                     [float(index.get(f[0][0], len(classes))), f[0][1] / f[1], np.log1p(f[1])]
                                     for f in found], dtype=np.float64).reshape(len(rows), 3))
        return np.column_stack(columns)


class ChoiceFeatures:
    """Multiple-choice prompts: one row per (prompt, option), the class whether the option is right."""

    names = (*_QuestionFeatures.names, "options", "position", "option_words", "length_rank", "length_share",
             "overlap", "overlap_rank", "option_right_rate", "option_seen")

    def __init__(self, items: BlindItems):
        self.items = items
        self.question = _QuestionFeatures(items)
        self.prompt_of = np.fromiter((p for p, o in enumerate(items.options) for _ in o), dtype=np.int64)
        self.starts = np.concatenate([[0], np.cumsum([len(o) for o in items.options])[:-1]]).astype(np.int64)
        self.texts = [o.strip().lower() for opts in items.options for o in opts]
        self.right = np.fromiter((r for rs in items.targets for r in rs), dtype=np.int64)
        own = []
        for context, opts in zip(items.contexts, items.options):
            seen = set(words(context))
            n = [len(words(o)) for o in opts]
            overlap = [len(set(words(o)) & seen) / max(len(set(words(o))), 1) for o in opts]
            longest, most = max(n, default=0), -np.asarray(overlap)
            for j, (length, share) in enumerate(zip(n, overlap)):
                own.append([len(opts), j, length, int((np.asarray(n) > length).sum()), length / longest if longest
                            else 0.0, share, int((most < -share).sum())])
        self.own = np.asarray(own, dtype=np.float64).reshape(len(self.texts), 7)

    def pairs(self, prompts: np.ndarray) -> np.ndarray:
        """The (prompt, option) rows of PROMPTS, in the order of PROMPTS (the forests see rows in their ids'
        order, whatever the split's)."""
        counts = np.asarray([len(self.items.options[p]) for p in prompts], dtype=np.int64)
        starts = self.starts[np.asarray(prompts, dtype=np.int64)]
        return np.repeat(starts - np.cumsum(counts) + counts, counts) + np.arange(counts.sum())

    def matrix(self, train: np.ndarray, pairs: np.ndarray) -> np.ndarray:
        """Features of PAIRS, every map learnt on the pairs of the TRAIN prompts."""
        right, seen = Counter(), Counter()
        for p in self.pairs(train):
            seen[self.texts[p]] += 1
            right[self.texts[p]] += int(self.right[p])
        rate = np.array([[right[self.texts[p]] / seen[self.texts[p]], np.log1p(seen[self.texts[p]])]
                         if seen[self.texts[p]] >= MIN_SEEN else [-1.0, 0.0] for p in pairs],
                        dtype=np.float64).reshape(-1, 2)
        question = self.question.matrix(train, self.prompt_of[pairs])
        return np.column_stack([question, self.own[pairs], rate])


EMBEDDING_DECIMALS = 6  # the precision of the embeddings the forests read


def text_encoder(model: str):
    """embed(texts): the sentence embeddings of `model` (a sentence-transformers checkpoint: a path, a hub id, or the
    packaged all-MiniLM-L6-v2), L2-normalised, computed in float64 (float32 kernels differ between CPUs and thread
    counts in the last bits, float64 ones far below the stated precision) and rounded to EMBEDDING_DECIMALS, so that
    the forests split on the same values on every machine. Each distinct text is embedded once per run (pruning's
    reruns included)."""
    from builders.nlp import SentenceEncoder

    encoder = SentenceEncoder(model, device="cpu")
    return lambda texts: np.round(encoder.encode_exact(list(texts)), EMBEDDING_DECIMALS)


class EmbeddedOpen(OpenFeatures):
    """Open-ended prompts read by a text model: one row per prompt, its features the embedding of the prompt's
    context (question last); the classes as `OpenFeatures`'."""

    def __init__(self, items: BlindItems, max_answers: int, embed):
        super().__init__(items, max_answers)
        self.vectors = embed(items.contexts)
        self.names = (f"prompt embedding ({self.vectors.shape[1]} dimensions)",)

    def matrix(self, train: np.ndarray, rows: np.ndarray, classes: list[str]) -> np.ndarray:
        return self.vectors[rows]


class EmbeddedChoice(ChoiceFeatures):
    """Multiple-choice prompts read by a text model: one row per (prompt, option), its features the prompt's
    embedding, the option's, their elementwise product (how the two agree, dimension by dimension), and where the
    option stands among how many (a model shown the prompt reads its options in order)."""

    def __init__(self, items: BlindItems, embed):
        super().__init__(items)
        self.prompt_vectors = embed(items.contexts)
        self.option_vectors = embed([o for opts in items.options for o in opts])
        width = self.prompt_vectors.shape[1]
        self.names = (f"prompt embedding ({width} dimensions)", f"option embedding ({width})",
                      f"their product ({width})", "options", "position")

    def matrix(self, train: np.ndarray, pairs: np.ndarray) -> np.ndarray:
        prompts, options = self.prompt_vectors[self.prompt_of[pairs]], self.option_vectors[pairs]
        return np.column_stack([prompts, options, prompts * options, self.own[pairs, :2]])
