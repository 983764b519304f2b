"""VCR scoring: submissions `[{"annot_id": ..., "answer_scores": [4], "rationale_scores": [4]}]` (the rationale
scores given the correct answer), or with `rationale_scores` as 4 lists of 4, the rationales' scores given each
answer in order (the VCR leaderboard's form, which a split without labels -- a sealed one -- needs: only the list
of the correct answer is scored); Q->A, QA->R, Q->AR."""

from __future__ import annotations

import re

import numpy as np
import pyarrow as pa

from core.figures import FigureSpec
from core.markdown import report_table
from evaluator.base import Headline, Modality, Sealing, Task
from evaluator.models.ask import Ask
from evaluator.models.menu import Baseline
from evaluator.models.model import Model, row_random
from evaluator.submission import Coverage, either, is_score_grid, is_score_list
from evaluator.vcr.metrics import vcr_correct

METRICS = (("Q->A", "q_a"), ("QA->R", "qa_r"), ("Q->AR", "q_ar"))
_WORD = re.compile(r"\[person\d+\]|[a-z0-9']+")


def _words(text: str) -> set[str]:
    return set(_WORD.findall(text.lower()))


class RandomScores(Model):
    """Uniform random answer and rationale scores, seeded by (seed, annot_id)."""

    input_columns = ("annot_id",)

    def __init__(self, seed: int):
        self.seed = seed

    def predict(self, table: pa.Table) -> list:
        scores = row_random(self.seed, table.column("annot_id").to_pylist(), 8)
        return [(row[:4].tolist(), row[4:].tolist()) for row in scores]


class BlindTextScorer(Model):
    """Text-only baselines that never see the image: `length` scores a choice by its number of words;
    `overlap` by the Jaccard overlap of its words (tags included) with the query's (the question for
    answers; the question and the correct answer for rationales)."""

    input_columns = ("question", "answer_choices", "answer_label", "rationale_choices")

    def __init__(self, kind: str):
        self.kind = kind

    def _score(self, query: str, choice: str) -> float:
        if self.kind == "length":
            return float(len(choice.split()))
        a, b = _words(query), _words(choice)
        return len(a & b) / len(a | b) if a | b else 0.0

    def predict(self, table: pa.Table) -> list:
        out = []
        for row in table.select(list(self.input_columns)).to_pylist():
            qa = f"{row['question']} {row['answer_choices'][row['answer_label']]}"
            out.append(([self._score(row["question"], c) for c in row["answer_choices"]],
                        [self._score(qa, c) for c in row["rationale_choices"]]))
        return out


class AnswerThenRationale(Ask):
    """Prompts scored by log-likelihood: the four answers given the image and the question (Q->A), then the four
    rationales given the image, the question and an answer (QA->R): the correct answer where the table holds the
    label (a build), each of the four answers in turn where it does not (a sealed split's public half: the VCR
    leaderboard's form, Zellers et al., CVPR 2019, §5). The template's {query} is the question, then the question
    followed by the answer (VCR-Visor's explanatory query). `answer_label` is read only where it is there."""

    mode = "score"
    default_prompt = "{query}"
    fields = ("query",)
    input_columns = ("img_fn", "metadata_fn", "question", "answer_choices", "rationale_choices")
    image_column = "img_fn"

    def values(self, table: pa.Table) -> list[dict[str, str]]:
        return [{"query": q} for q in table.column("question").to_pylist()]

    def prompts(self, table: pa.Table) -> tuple[list[dict[str, str]], list[list[str]], list[int]]:
        """Per item, the Q->A prompt (`values`) with the answers, then the QA->R prompt with the rationales given
        the correct answer (or one per answer, where the table has no labels)."""
        values, continuations, rows = [], [], []
        labelled = "answer_label" in table.column_names
        items = table.select(["answer_choices", "rationale_choices", *(["answer_label"] if labelled else [])])
        for k, (asked, item) in enumerate(zip(self.values(table), items.to_pylist())):
            given = [item["answer_choices"][item["answer_label"]]] if labelled else item["answer_choices"]
            values += [asked, *({"query": f"{asked['query']} {answer}"} for answer in given)]
            continuations += [item["answer_choices"], *([item["rationale_choices"]] * len(given))]
            rows += [k] * (1 + len(given))
        return values, continuations, rows

    def answers(self, table: pa.Table) -> list[int]:
        """The answer's label, then the rationale's, per item (`prompts`' order)."""
        return [label for item in table.select(["answer_label", "rationale_label"]).to_pylist()
                for label in (item["answer_label"], item["rationale_label"])]

    def prediction(self, output) -> list[float]:
        return list(output)

    def combine(self, outputs: list) -> tuple[list[float], list]:
        """(answer scores, rationale scores) of an item: the rationales' scores given the correct answer, or the
        four lists given each answer."""
        answers, *rationales = (self.prediction(o) for o in outputs)
        return answers, rationales[0] if len(rationales) == 1 else rationales


class VCRTask(Task):
    headline = (Headline("Q->A", "q_a"), Headline("QA->R", "qa_r"), Headline("Q->AR", "q_ar"))
    # VCR's test file gives everything but the two labels (Zellers et al., CVPR 2019, §5).
    sealing = Sealing(("annot_id", "movie", "img_fn", "metadata_fn", "objects", "question", "answer_choices",
                       "rationale_choices"), "VCR's test file")
    name = "vcr"
    config = "default"
    default_split = "val"
    id_field, value_field, id_type = "annot_id", ("answer_scores", "rationale_scores"), str
    value_check = (is_score_list(4), either(is_score_list(4), is_score_grid(4, 4)))  # per field
    value_desc = "lists of 4 finite numbers (rationale_scores: or 4 such lists, given each answer)"
    baselines = (Baseline("random", lambda task, options, spec: RandomScores(options.seed)),
                 *(Baseline(name, lambda task, options, spec, name=name: BlindTextScorer(name), note)
                   for name, note in (("length", "blind: a choice's word count"),
                                      ("overlap", "blind: a choice's word overlap with the query"))))
    # The image (file names), the question, and the answer and rationale choices; the labels stay.
    modalities = (Modality("image", ("img_fn", "metadata_fn")), Modality("question", ("question",)),
                  Modality("choices", ("answer_choices", "rationale_choices")))
    metric_labels = {"q_a": "Q->A", "qa_r": "QA->R", "q_ar": "Q->AR"}
    layout = "by-modality"
    images_folder = "vcr1images"
    generative = AnswerThenRationale()

    def ids(self, table: pa.Table) -> list[str]:
        return table.column("annot_id").to_pylist()

    def choice_questions(self, table: pa.Table):
        """Q->A: the question and the four answers; QA->R: the question and the correct answer, and
        the four rationales (the VCR-Visor paper, Appendix A)."""
        from evaluator.shortcuts.labels import ChoiceQuestions

        rows = table.select(["question", "answer_choices", "answer_label", "rationale_choices",
                             "rationale_label"]).to_pylist()
        return {"q_a": ChoiceQuestions([r["question"] for r in rows], [r["answer_choices"] for r in rows],
                                       [r["answer_label"] for r in rows], "Q->A"),
                "qa_r": ChoiceQuestions([f"{r['question']} {r['answer_choices'][r['answer_label']]}" for r in rows],
                                        [r["rationale_choices"] for r in rows], [r["rationale_label"] for r in rows],
                                        "QA->R")}

    def predictions_file(self, table: pa.Table, predictions: list) -> list[dict]:
        return [{"annot_id": i, "answer_scores": np.asarray(a, np.float64).tolist(),
                 "rationale_scores": np.asarray(r, np.float64).tolist()} for i, (a, r) in zip(self.ids(table),
                                                                                                predictions)]

    def per_sample(self, table: pa.Table, predictions: list, options=None) -> dict:
        """Q->A, QA->R and Q->AR per item; rationale scores given each answer are read at the correct answer."""
        labels = table.column("answer_label").to_numpy().astype(np.int64)
        answers = np.array([a for a, _ in predictions], dtype=np.float64).reshape(-1, 4)
        rationales = np.array([r[label] if isinstance(r[0], list) else r
                               for (_, r), label in zip(predictions, labels)], dtype=np.float64).reshape(-1, 4)
        return vcr_correct(answers, labels, rationales, table.column("rationale_label").to_numpy().astype(np.int64))

    def score(self, table: pa.Table, predictions: dict, coverage: Coverage, options=None) -> dict:
        """Accuracy over the scored items, in %."""
        keep = np.array([i in predictions for i in self.ids(table)])
        scored = table.filter(pa.array(keep))
        right = self.per_sample(scored, [predictions[i] for i in self.ids(scored)])
        return {**{key: round(100.0 * float(right[key].mean()), 4) for _, key in METRICS},
                "items": scored.num_rows, "coverage": coverage.as_dict()}

    def clusters(self, table: pa.Table):
        from evaluator.stats.bootstrap import cluster_codes

        return cluster_codes(table.column("img_fn").to_pylist()), "image"

    def resampling(self, table: pa.Table, predictions: dict, options=None):
        """Q->A, QA->R and Q->AR, items clustered by image."""
        from evaluator.stats.bootstrap import Ratio, Resampling

        scored = table.filter(pa.array([i in predictions for i in self.ids(table)], pa.bool_()))
        right = self.per_sample(scored, [predictions[i] for i in self.ids(scored)])
        ones = np.ones(scored.num_rows)
        return Resampling(*self.clusters(scored),
                          {key: Ratio(np.asarray(right[key], np.float64), ones) for _, key in METRICS})

    def report(self, metrics: dict, title: str):
        cov = metrics["coverage"]
        md = [f"# VCR evaluation: {title}", "",
              f"{cov['scored']:,} of {cov['expected']:,} items scored. Q->AR counts an item only when both its "
              "answer and its rationale are right (Zellers et al., CVPR 2019, §5); a tie at the top counts as "
              "wrong. Chance: 25, 25 and 6.25 %.", "",
              report_table([name for name, _ in METRICS], [[metrics[key] for _, key in METRICS]]), "",
              "![Accuracy](vcr_accuracy.png)", ""]
        plot = FigureSpec(filename="vcr_accuracy.png", title=f"{title}: VCR", categories=[n for n, _ in METRICS],
                          series={"%": [metrics[key] for _, key in METRICS]}, ylabel="%")
        return "\n".join(md), [plot]
