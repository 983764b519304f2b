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
    """Most frequent training answer of the question's GQA global group (null groups form 'none'): the GQA-OOD
    paper's "Question Prior" (§4). With `local`, of its local group, the finer prior whose frequent and rare
    answers are GQA-OOD's head and tail (§3), falling back to the global group's for a question without a local
    group or with one unseen in training. A global group unseen in training falls back to the most frequent
    training answer overall."""

    input_columns = ("groups",)

    def __init__(self, train_file: Path, local: bool = False):
        index = gqa.read_index(Path(train_file))
        levels = ("local", "global") if local else ("global",)
        by_group: dict[tuple, Counter] = defaultdict(Counter)
        columns = [index.column(f"{level}_group").to_pylist() for level in levels]
        for *groups, a in zip(*columns, index.column("answer").to_pylist()):
            for level, g in zip(levels, groups):
                if g is not None or level == "global":
                    by_group[level, "none" if g is None else g][a] += 1
        self.levels = levels
        self.prior = {key: _most_frequent(c) for key, c in by_group.items()}
        self.fallback = _most_frequent(Counter(index.column("answer").to_pylist()))

    def predict(self, table: pa.Table) -> list[str]:
        return [self._answer(g) for g in table.column("groups").to_pylist()]

    def _answer(self, groups: dict) -> str:
        for level in self.levels:
            key = (level, "none" if groups[level] is None else groups[level])
            if key in self.prior and (groups[level] is not None or level == "global"):
                return self.prior[key]
        return self.fallback


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
