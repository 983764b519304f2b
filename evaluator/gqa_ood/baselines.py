"""Blind baselines of the GQA-OOD paper (§4): the training "Question Prior" and a random guess."""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path

import pyarrow as pa

from builders.gqa_ood import reader as gqa
from evaluator.models.model import Model, row_random


def _most_frequent(counter: Counter) -> str:
    """Most frequent answer; ties go to the alphabetically first, so the fit is deterministic."""
    return min(counter, key=lambda a: (-counter[a], a))


class MostFrequentAnswer(Model):
    """The majority vote (Gat et al., NeurIPS 2021, Eq. 4): the most frequent training answer for every question."""

    input_columns = ()

    def __init__(self, answers: list[str]):
        self.answer = _most_frequent(Counter(answers))

    def predict(self, table: pa.Table) -> list[str]:
        return [self.answer] * table.num_rows


class QuestionPrior(Model):
    """Most frequent training answer of the question's GQA global group (null groups form 'none').

    A global group unseen in training falls back to the most frequent training answer overall.
    """

    input_columns = ("groups",)

    def __init__(self, train_file: Path):
        index = gqa.read_index(Path(train_file))
        by_group: dict[str, Counter] = defaultdict(Counter)
        for g, a in zip(index.column("global_group").to_pylist(), index.column("answer").to_pylist()):
            by_group["none" if g is None else g][a] += 1
        self.prior = {g: _most_frequent(c) for g, c in by_group.items()}
        self.fallback = _most_frequent(Counter(index.column("answer").to_pylist()))

    def predict(self, table: pa.Table) -> list[str]:
        groups = [g["global"] for g in table.column("groups").to_pylist()]
        return [self.prior.get("none" if g is None else g, self.fallback) for g in groups]


class RandomGroupAnswer(Model):
    """Uniform guess among the distinct answers of the question's local group in the split (chance level 1/d),
    drawn per question from (seed, question id) (evaluator.models.model.row_random), so that a shard of the split
    guesses what the whole split's run does."""

    input_columns = ("groups", "answer")

    def __init__(self, seed: int = 0):
        self.seed = seed
        self.candidates: dict[str, list] | None = None

    def fit_split(self, table: pa.Table) -> None:
        self.candidates = self._candidates(table)

    @staticmethod
    def _local(table: pa.Table) -> list[str]:
        return ["none" if g["local"] is None else g["local"] for g in table.column("groups").to_pylist()]

    def _candidates(self, table: pa.Table) -> dict[str, list]:
        """{local group: its distinct answers in the split, sorted}."""
        candidates: dict[str, set] = defaultdict(set)
        for g, a in zip(self._local(table), table.column("answer").to_pylist()):
            candidates[g].add(a)
        return {g: sorted(c) for g, c in candidates.items()}

    def predict(self, table: pa.Table) -> list[str]:
        ordered = self.candidates if self.candidates is not None else self._candidates(table)
        draws = row_random(self.seed, table.column("question_id").to_pylist(), 1)[:, 0]
        return [ordered[g][int(u * len(ordered[g]))] for g, u in zip(self._local(table), draws.tolist())]
