"""Language-shortcut labels per example (the VCR-Visor paper, Appendix A, Table 6): text-only
multiple-choice models -- by default BERT and RoBERTa, each fine-tuned with three seeds on the
context and one candidate at a time -- score the candidates of every evaluation example; the example
is "Biased" when every model picks the correct candidate, "Non-Biased" when none does, and "Neutral"
otherwise. Sentence level reads the text as is; word level shuffles the words of the context and of
each candidate first (a seeded generator, per example), which keeps only word-level correlations.

A task declares its multiple-choice questions (`Task.choice_questions`): VCR has two (Q->A: the
question and four answers; QA->R: question + correct answer and four rationales), the paired
benchmarks one (their sub-question text and choices).
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field

import numpy as np

from core.errors import ParamsError
from core.model_files import load_part, load_pretrained
from core.progress import progress

CONFIG = "shortcuts"  # the config of a built folder that holds its shortcut labels
LABELS = ("Biased", "Non-Biased", "Neutral")  # Table 6's column order
SCORE_BATCH = 64  # examples per scoring batch (at least the training batch size)
LEVELS = ("word", "sentence")


@dataclass(frozen=True)
class ChoiceQuestions:
    """Multiple-choice questions: a context, its candidates and the index of the correct one."""

    contexts: list[str]
    candidates: list[list[str]]
    labels: list[int]
    title: str = ""  # how reports name the kind (VCR: Q->A, QA->R)
    # For each row of the table, the examples whose runs decide its label (None: row k is example k).
    rows: tuple[tuple[int, ...], ...] | None = None

    def __len__(self) -> int:
        return len(self.contexts)


@dataclass(frozen=True)
class ShortcutOptions:
    """The paper's setup where it gives one (Appendix A: BERT and RoBERTa, three seeds; Table 8:
    AdamW, batch 16, learning rate 2e-5); base-size checkpoints by default."""

    models: tuple[str, ...] = ("google-bert/bert-base-uncased", "FacebookAI/roberta-base")
    seeds: tuple[int, ...] = (0, 1, 2)
    epochs: int = 3
    learning_rate: float = 2e-5
    batch_size: int = 16
    max_length: int = 128
    shuffle_seed: int = 0  # word level: the seed of the word shuffles
    device: str = "auto"
    bf16: bool = False  # autocast to bfloat16 on CUDA

    def __post_init__(self):
        if not self.models or not self.seeds:
            raise ParamsError("shortcuts: at least one model and one seed")
        if self.epochs < 1 or self.batch_size < 1 or self.max_length < 8 or not self.learning_rate > 0:
            raise ParamsError("shortcuts: epochs and batch size >= 1, max length >= 8, learning rate > 0")


def shuffle_words(text: str, rng: random.Random) -> str:
    """The words of a text (split on whitespace, so a tag such as [person1] stays one word) in a
    random order."""
    words = text.split()
    rng.shuffle(words)
    return " ".join(words)


def word_level(questions: ChoiceQuestions, seed: int) -> ChoiceQuestions:
    """Every context and candidate with its words shuffled; example k draws from Random(f"{seed}/{k}"),
    context first, then the candidates in order, so a shuffle does not depend on the other examples."""
    contexts, candidates = [], []
    for k, (context, options) in enumerate(zip(questions.contexts, questions.candidates)):
        rng = random.Random(f"{seed}/{k}")
        contexts.append(shuffle_words(context, rng))
        candidates.append([shuffle_words(c, rng) for c in options])
    return ChoiceQuestions(contexts, candidates, list(questions.labels), questions.title, questions.rows)


def agreement_labels(correct: np.ndarray, rows=None) -> list[str]:
    """Appendix A's rule over the runs (rows) of each example (columns): Biased when every run is
    right, Non-Biased when none is, Neutral otherwise. With `rows` (ChoiceQuestions.rows), a row
    whose label several examples decide is Biased when every run is right on every one of them,
    Non-Biased when no run is right on any."""
    correct = np.asarray(correct, dtype=bool)
    runs = correct.shape[0]
    right = correct.sum(axis=0)
    if rows is None:
        return ["Biased" if r == runs else "Non-Biased" if r == 0 else "Neutral" for r in right.tolist()]
    return ["Biased" if right[list(ex)].min() == runs else "Non-Biased" if right[list(ex)].max() == 0
            else "Neutral" for ex in rows]


def runs_right(correct: np.ndarray, rows=None) -> list[int]:
    """How many runs were right on each example; with `rows`, how many (run, example) decisions were
    right among a row's examples (all of them: Biased; none: Non-Biased)."""
    right = np.asarray(correct, dtype=bool).sum(axis=0)
    if rows is None:
        return right.astype(int).tolist()
    return [int(right[list(ex)].sum()) for ex in rows]


@dataclass
class RunRecord:
    model: str
    seed: int
    level: str
    question: str
    train_examples: int
    accuracy: float
    seconds: dict = field(default_factory=dict)  # tokenize, train, score


class TokenCache:
    """Token ids (no special tokens) of each distinct text, once per tokenizer."""

    def __init__(self):
        self._by_tokenizer: dict[str, dict[str, list[int]]] = {}

    def matrix(self, name: str, tokenizer, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """The texts' token ids padded into a matrix (row k = texts[k]) and their lengths."""
        from builders.token_layout import encode_texts, pad_rows

        known = self._by_tokenizer.setdefault(name, {})
        todo = [t for t in dict.fromkeys(texts) if t not in known]
        if todo:
            known.update(zip(todo, encode_texts(tokenizer, todo)))
        return pad_rows(len(texts), range(len(texts)), [known[t] for t in texts])


@dataclass
class _Encoded:
    """A question set as (context, candidate) pairs over distinct-text codes, truncated as the
    tokenizer would: pair p = example p // choices, candidate p % choices."""

    matrix: np.ndarray
    first: np.ndarray
    second: np.ndarray
    first_len: np.ndarray
    second_len: np.ndarray
    choices: int
    labels: np.ndarray


def _encode(cache: TokenCache, name: str, tokenizer, layout: dict, questions: ChoiceQuestions) -> _Encoded:
    from builders.token_layout import truncate_pairs

    counts = {len(c) for c in questions.candidates}
    if len(counts) != 1:
        raise ParamsError(f"shortcuts: every {questions.title or 'question'} needs the same number of candidates "
                          f"(found {sorted(counts)})")
    choices = counts.pop()
    texts = list(dict.fromkeys([*questions.contexts, *(c for cs in questions.candidates for c in cs)]))
    code = {t: k for k, t in enumerate(texts)}
    first = np.repeat(np.fromiter((code[t] for t in questions.contexts), dtype=np.int64), choices)
    second = np.fromiter((code[c] for cs in questions.candidates for c in cs), dtype=np.int64, count=len(first))
    matrix, lengths = cache.matrix(name, tokenizer, texts)
    first_len, second_len = truncate_pairs(layout, lengths[first], lengths[second])
    return _Encoded(matrix, first, second, first_len, second_len, choices, np.asarray(questions.labels))


def _batches(enc: _Encoded, layout: dict, order: list[int], size: int):
    """(examples, tensors of shape (batch, choices, length), labels) `size` examples at a time."""
    import torch

    from builders.token_layout import pair_tensors

    for start in range(0, len(order), size):
        chosen = np.asarray(order[start:start + size], dtype=np.int64)
        pairs = (chosen[:, None] * enc.choices + np.arange(enc.choices)[None, :]).reshape(-1)
        tensors = pair_tensors(layout, enc.matrix, enc.first[pairs], enc.second[pairs], enc.first_len[pairs],
                               enc.second_len[pairs])
        shaped = {k: v.view(len(chosen), enc.choices, -1) for k, v in tensors.items()}
        yield chosen, shaped, torch.from_numpy(enc.labels[chosen])


def _timed(batches, seconds: dict):
    """The batches of a generator, the time spent making each added to seconds["data"]."""
    while True:
        start = time.perf_counter()
        batch = next(batches, None)
        seconds["data"] += time.perf_counter() - start
        if batch is None:
            return
        yield batch


def train_and_score(model_name: str, seed: int, train: ChoiceQuestions, test: ChoiceQuestions,
                    options: ShortcutOptions, cache: TokenCache, resolve=lambda name: name) -> tuple[np.ndarray, dict]:
    """Fine-tune a fresh multiple-choice head on `train` (seeded: weights of the new head, batch
    order, dropout) and return, per test example, whether the correct candidate scores strictly
    highest, with the seconds spent tokenizing, handling data (batches, results), in training steps
    (forward, backward, optimizer) and in scoring forward passes. Each distinct text is tokenized
    once per tokenizer; pairs are assembled as the tokenizer would (builders.nlp.pair_tensors)."""
    import torch
    from transformers import AutoModelForMultipleChoice, AutoTokenizer
    from transformers.utils import logging as hf_logging

    from builders.token_layout import pair_layout
    from core.torch_runtime import quiet_model_loading, torch_device

    seconds = {"tokenize": 0.0, "data": 0.0, "train": 0.0, "score": 0.0}
    path = resolve(model_name)
    quiet_model_loading()
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # the new multiple-choice head is reported as missing weights: expected
    try:
        tokenizer = load_part(AutoTokenizer, path, f"shortcuts model {model_name}", "tokenizer")
        torch.manual_seed(seed)
        model = load_pretrained(AutoModelForMultipleChoice, path, f"shortcuts model {model_name}")
    finally:
        hf_logging.set_verbosity(verbosity)
    device = torch_device(options.device)
    model.to(device)
    autocast = options.bf16 and device.type == "cuda"
    start = time.perf_counter()
    layout = pair_layout(tokenizer, min(options.max_length, int(getattr(tokenizer, "model_max_length", 512)), 512))
    train_enc = _encode(cache, model_name, tokenizer, layout, train)
    test_enc = _encode(cache, model_name, tokenizer, layout, test)
    seconds["tokenize"] += time.perf_counter() - start
    optimizer = torch.optim.AdamW(model.parameters(), lr=options.learning_rate)
    rng = random.Random(seed)
    model.train()
    for _ in range(options.epochs):
        order = list(range(len(train)))
        rng.shuffle(order)
        for _, tensors, labels in _timed(_batches(train_enc, layout, order, options.batch_size), seconds):
            start = time.perf_counter()
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
                loss = model(**{k: v.to(device) for k, v in tensors.items()}, labels=labels.to(device)).loss
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            seconds["train"] += time.perf_counter() - start
    model.eval()
    correct = np.zeros(len(test), dtype=bool)
    with torch.inference_mode():
        # Scoring batches are larger than training ones (no gradients to hold).
        for chosen, tensors, labels in _timed(_batches(test_enc, layout, list(range(len(test))),
                                                       max(options.batch_size, SCORE_BATCH)), seconds):
            start = time.perf_counter()
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
                logits = model(**{k: v.to(device) for k, v in tensors.items()}).logits.float()
            seconds["score"] += time.perf_counter() - start
            start = time.perf_counter()
            rows = torch.arange(len(chosen), device=logits.device)
            right = logits[rows, labels.to(logits.device)]
            others = logits.clone()
            others[rows, labels.to(logits.device)] = -torch.inf
            correct[chosen] = (right > others.max(dim=1).values).cpu().numpy()
            seconds["data"] += time.perf_counter() - start
    return correct, seconds


def shortcut_labels(train: dict[str, ChoiceQuestions], test: dict[str, ChoiceQuestions], options: ShortcutOptions,
                    resolve=lambda name: name, world=None) -> tuple[dict[str, list[str]], dict[str, list],
                                                                     list[RunRecord]]:
    """For each level and question kind: the per-row labels (`shortcut_<level>_<kind>`), the runs
    right per row (`runs_right`), and a record of every run (model, seed, accuracy, seconds).
    Under torchrun (`world`, evaluator.models.distributed) each process takes every W-th run and the
    results are gathered: every run is seeded by itself, so the labels equal one process's."""
    from evaluator.models.distributed import single_process

    world = world or single_process()
    cache = TokenCache()
    jobs = [(level, kind, model, seed) for level in LEVELS for kind in test for model in options.models
            for seed in options.seeds]
    shard = world.shard(len(jobs))
    local = np.empty(len(shard), dtype=object)
    for pos, job in enumerate(progress([jobs[k] for k in shard.tolist()], desc="shortcut runs", unit="run")):
        level, kind, model, seed = job
        tr, te = train[kind], test[kind]
        if level == "word":
            tr, te = word_level(tr, options.shuffle_seed), word_level(te, options.shuffle_seed)
        correct, seconds = train_and_score(model, seed, tr, te, options, cache, resolve)
        local[pos] = (correct, RunRecord(model, seed, level, kind, len(tr), round(100 * float(correct.mean()), 4),
                                         seconds))
    results = dict(zip(jobs, world.all_rows(local, shard, len(jobs)).tolist()))
    labels, votes, records = {}, {}, []
    for level in LEVELS:
        for kind in test:
            runs = [results[(level, kind, m, s)] for m in options.models for s in options.seeds]
            matrix = np.stack([c for c, _ in runs])
            labels[f"shortcut_{level}_{kind}"] = agreement_labels(matrix, test[kind].rows)
            votes[f"shortcut_{level}_{kind}_right"] = runs_right(matrix, test[kind].rows)
            records += [r for _, r in runs]
    return labels, votes, records


def label_shares(labels: list[str]) -> dict[str, float]:
    """Table 6: the share of each label, in %."""
    n = max(1, len(labels))
    return {name: round(100.0 * labels.count(name) / n, 2) for name in LABELS}
