"""Paired-question evaluation (the VCR-Visor paper, §3.4, Eq. 1-6), shared by the benchmarks the
pairing recipe builds (vcr-visor with two choices per sub-question; pmr-p, cosim-q and cosim-c with
four). Submissions are `[{"id": "<pair_id>/<k>", "scores": [s_0, ..., s_{K-1}]}]`, a score per choice.

With P_k = softmax(scores_k)[label_k] (Eq. 2): APQ = mean over pairs of [both sub-questions right]
(Eq. 3-4), HPQ = mean of the harmonic mean 2 P_1 P_2 / (P_1 + P_2) (Eq. 5-6). A sub-question is right
when its correct choice scores above every other choice; for two choices that is Eq. 3's P > 0.5
exactly, and it stays "the model finds the correct answer" with four.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import pyarrow as pa

from core.errors import SubmissionError
from core.figures import FigureSpec
from core.markdown import report_table
from evaluator.base import Headline, Sealing, Task
from evaluator.models.ask import Ask
from evaluator.models.menu import Baseline, HfFamily, has_architecture, is_model_type
from evaluator.models.options import ModelOptions
from evaluator.submission import Coverage, is_score_list


def correct_probability(scores: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Eq. 2: P_i = exp(a_i,correct) / sum_j exp(a_i,j), a softmax over each sub-question's scores."""
    scores = np.asarray(scores, dtype=np.float64)
    shifted = np.exp(scores - scores.max(axis=1, keepdims=True))
    return shifted[np.arange(len(labels)), labels] / shifted.sum(axis=1)


def correct_chosen(scores: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Per sub-question, 1 when the correct choice scores strictly above every other (a tie is wrong)."""
    scores = np.asarray(scores, dtype=np.float64)
    rows = np.arange(len(labels))
    others = scores.copy()
    others[rows, labels] = -np.inf
    return (scores[rows, labels] > others.max(axis=1)).astype(float)


def apq(right_1: np.ndarray, right_2: np.ndarray) -> np.ndarray:
    """Eq. 3: per pair, 1 when both sub-questions are answered correctly."""
    return ((right_1 > 0) & (right_2 > 0)).astype(float)


def hpq(p1: np.ndarray, p2: np.ndarray) -> np.ndarray:
    """Eq. 5-6: per pair, the harmonic mean 2 P1 P2 / (P1 + P2) (0 when both are 0)."""
    total = p1 + p2
    return np.divide(2 * p1 * p2, total, out=np.zeros_like(total), where=total > 0)


def _pct(values: np.ndarray) -> float | None:
    return round(100.0 * float(values.mean()), 4) if values.size else None


class ChoiceLikelihood(Ask):
    """Each choice's log-likelihood given the image and the sub-question's text: the scores of a
    sub-question, so APQ and HPQ apply unchanged."""

    mode = "score"
    image_column = "img_fn"

    def __init__(self, default_prompt: str, fields: tuple[str, ...], input_columns: tuple[str, ...]):
        self.default_prompt, self.fields, self.input_columns = default_prompt, fields, input_columns

    def values(self, table: pa.Table) -> list[dict[str, str]]:
        columns = {f: table.column(f).to_pylist() for f in self.fields}
        return [{f: columns[f][k] for f in self.fields} for k in range(table.num_rows)]

    def continuations(self, table: pa.Table) -> list[list[str]]:
        return table.column("choices").to_pylist()

    def answers(self, table: pa.Table) -> list[int]:
        return table.column("label").to_pylist()

    def prediction(self, scores: list[float]) -> list[float]:
        return list(scores)


def _random_scores(task: "PairedTask", options: ModelOptions, spec: str):
    from evaluator.models.choice_scorers import RandomScores

    return RandomScores(options.seed, task.choices)


def _clip(task: "PairedTask", name: str, options: ModelOptions):
    """A CLIP dual encoder scores each choice against the image (evaluator/models/clip.py)."""
    from evaluator.models.clip import ClipChoiceScorer

    return ClipChoiceScorer(name, options, task.choices, task.text_columns)


def _cross_encoder(task: "PairedTask", name: str, options: ModelOptions):
    """A text cross-encoder scores each (sub-question, choice) pair (evaluator/models/choice_scorers.py)."""
    from evaluator.models.choice_scorers import CrossEncoderScorer

    return CrossEncoderScorer(name, options, task.choices, task.text_columns)


class PairedTask(Task):
    """A benchmark of paired sub-questions: `choices` scores per sub-question, APQ / HPQ per pair,
    overall and per reasoning type when the benchmark has them (`types`)."""
    headline = (Headline("APQ", "apq"), Headline("HPQ", "hpq"), Headline("accuracy", "accuracy"))

    title: ClassVar[str]  # the benchmark's name in reports
    choices: ClassVar[int]  # choices per sub-question
    types: ClassVar[tuple[str, ...]] = ()  # reasoning types (a `reasoning_type` column), if any
    text_columns: ClassVar[tuple[str, ...]] = ("query",)  # a sub-question's text for choice scorers
    config = "default"
    default_split = "val"
    id_field, value_field, id_type = "id", "scores", str
    metric_labels = {"accuracy": "Acc"}
    layout = "by-modality"
    majority = None  # built from a validation split only: no training split for Z_D
    baselines = (Baseline("random", _random_scores),)
    hf_families = (HfFamily("CLIP dual encoder", is_model_type("clip"), _clip),
                   HfFamily("sequence-classification cross-encoder", has_architecture("ForSequenceClassification"),
                            _cross_encoder))

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "generative" in cls.__dict__:
            # A sub-question, its pair and what the model is shown (the image, the text, the choices); the label,
            # which choice was re-tagged from the pair's other item, the source item and the mining scores stay
            # sealed.
            cls.sealing = Sealing(("id", "pair_id", "sub_question", "image", *cls.generative.input_columns),
                                  "the build's sub-questions and choices, without labels")
        if "choices" in cls.__dict__:
            cls.value_check = staticmethod(is_score_list(cls.choices))
            cls.value_desc = f"lists of {cls.choices} finite numbers"

    def ids(self, table: pa.Table) -> list[str]:
        return table.column("id").to_pylist()

    def predictions_file(self, table: pa.Table, predictions: list) -> list[dict]:
        return [{"id": i, "scores": [float(s) for s in scores]} for i, scores in zip(self.ids(table), predictions)]

    def choice_questions(self, table: pa.Table):
        """One kind, `choice`: the sub-question's text (`text_columns`) and its choices."""
        from evaluator.models.choice_scorers import sub_question_texts
        from evaluator.shortcuts.labels import ChoiceQuestions

        return {"choice": ChoiceQuestions(sub_question_texts(table, self.text_columns),
                                          table.column("choices").to_pylist(), table.column("label").to_pylist(),
                                          "sub-questions")}

    def per_sample(self, table: pa.Table, predictions: list, options=None) -> dict:
        """Sub-question accuracy: the correct choice scores highest."""
        scores = np.asarray(predictions, dtype=np.float64).reshape(-1, self.choices)
        return {"accuracy": correct_chosen(scores, table.column("label").to_numpy().astype(np.int64))}

    def _scored_pairs(self, table: pa.Table, predictions: dict) -> dict:
        """Per scored sub-question its correctness (and type); per complete pair (both sub-questions
        scored) its APQ and HPQ values, type and id."""
        kind_column = ["reasoning_type"] if self.types else []
        rows = table.select(["id", "pair_id", "sub_question", "label", *kind_column]).to_pylist()
        scored = [r for r in rows if r["id"] in predictions]
        scores = np.array([predictions[r["id"]] for r in scored], dtype=np.float64).reshape(-1, self.choices)
        labels = np.array([r["label"] for r in scored], dtype=np.int64)
        p, right = correct_probability(scores, labels), correct_chosen(scores, labels)
        prob = {r["id"]: (float(v), float(c)) for r, v, c in zip(scored, p, right)}
        pairs = {}
        for r in rows:
            pairs.setdefault(r["pair_id"], {"type": r.get("reasoning_type"), "pair_id": r["pair_id"]})[
                r["sub_question"]] = r["id"]
        complete = [d for _, d in sorted(pairs.items()) if d[1] in prob and d[2] in prob]
        if not complete:
            raise SubmissionError("no pair has scores for both of its sub-questions")
        (p1, c1), (p2, c2) = ([np.array([prob[d[k]][n] for d in complete]) for n in (0, 1)] for k in (1, 2))
        return {"right": right, "sub_kinds": np.array([r.get("reasoning_type") for r in scored], dtype=object),
                "sub_pairs": [r["pair_id"] for r in scored], "apq": apq(c1, c2), "hpq": hpq(p1, p2),
                "kinds": np.array([d["type"] for d in complete], dtype=object),
                "pair_ids": [d["pair_id"] for d in complete]}

    def score(self, table: pa.Table, predictions: dict, coverage: Coverage, options=None) -> dict:
        """APQ and HPQ per pair (both sub-questions must be scored), accuracy per sub-question."""
        s = self._scored_pairs(table, predictions)
        pair_apq, pair_hpq, right, kinds, sub_kinds = s["apq"], s["hpq"], s["right"], s["kinds"], s["sub_kinds"]
        metrics = {"apq": _pct(pair_apq), "hpq": _pct(pair_hpq), "accuracy": _pct(right), "pairs": len(pair_apq)}
        if self.types:
            by_type = {k: {"pairs": int((kinds == k).sum()), "apq": _pct(pair_apq[kinds == k]),
                           "hpq": _pct(pair_hpq[kinds == k]), "accuracy": _pct(right[sub_kinds == k])}
                       for k in self.types if (kinds == k).any()}
            metrics["mean_over_types"] = {key: round(float(np.mean([v[key] for v in by_type.values()])), 4)
                                          for key in ("apq", "hpq", "accuracy")}
            metrics["by_type"] = by_type
        return {**metrics, "coverage": coverage.as_dict()}

    def clusters(self, table: pa.Table):
        from evaluator.stats.bootstrap import cluster_codes

        return cluster_codes(table.column("pair_id").to_pylist()), "pair"

    def resampling(self, table: pa.Table, predictions: dict, options=None):
        """APQ and HPQ over complete pairs, accuracy over sub-questions (overall, per reasoning type
        and their mean), clustered by pair: a sub-question belongs to its pair's cluster."""
        from evaluator.stats.bootstrap import Ratio, Resampling, cluster_codes

        s = self._scored_pairs(table, predictions)
        n_pairs, n_subs = len(s["apq"]), len(s["right"])
        # rows: the complete pairs (APQ, HPQ), then the scored sub-questions (accuracy)
        clusters = cluster_codes([*s["pair_ids"], *s["sub_pairs"]])
        pair_row = np.r_[np.ones(n_pairs), np.zeros(n_subs)]
        sub_row = 1 - pair_row
        values = {"apq": np.r_[s["apq"], np.zeros(n_subs)], "hpq": np.r_[s["hpq"], np.zeros(n_subs)],
                  "accuracy": np.r_[np.zeros(n_pairs), np.asarray(s["right"], np.float64)]}
        scope = {"apq": pair_row, "hpq": pair_row, "accuracy": sub_row}
        ratios = {key: Ratio(values[key] * scope[key], scope[key]) for key in values}
        derived = {}
        if self.types:
            kind_of_row = np.r_[s["kinds"], s["sub_kinds"]]
            present = [k for k in self.types if (s["kinds"] == k).any()]
            for k in present:
                inside = (kind_of_row == k).astype(np.float64)
                for key in values:
                    ratios[f"by_type.{k}.{key}"] = Ratio(values[key] * scope[key] * inside, scope[key] * inside)
            for key in values:
                derived[f"mean_over_types.{key}"] = (
                    lambda v, key=key: np.mean([v[f"by_type.{k}.{key}"] for k in present], axis=0))
        return Resampling(clusters, "pair", ratios, derived)

    def report(self, metrics: dict, title: str):
        cov = metrics["coverage"]
        names = (("APQ", "apq"), ("HPQ", "hpq"), ("Accuracy (sub-questions)", "accuracy"))
        intro = (f"Scored {cov['scored']:,} of {cov['expected']:,} sub-questions ({metrics['pairs']:,} complete "
                 "pairs).")
        if not self.types:
            md = [f"# {self.title} evaluation: {title}", "",
                  f"{intro} {self.choices} choices per sub-question; a sub-question is right when its correct "
                  "choice scores highest.", "",
                  report_table(["metric", "All pairs"], [[name, metrics[key]] for name, key in names]), "",
                  "![APQ and HPQ](scores.png)", ""]
            plot = FigureSpec(filename="scores.png", title=f"{title}: {self.title}", categories=["All pairs"],
                              ylabel="%", series={name.split(" ")[0]: [metrics[key]] for name, key in names})
            return "\n".join(md), [plot]
        types = list(metrics["by_type"])
        header = ["metric", "Mean", *(t.capitalize() for t in types), "All pairs"]
        table = [[name, metrics["mean_over_types"][key], *(metrics["by_type"][t][key] for t in types), metrics[key]]
                 for name, key in names]
        md = [f"# {self.title} evaluation: {title}", "",
              f"{intro} Mean = the average over reasoning types, as the paper's tables.", "",
              report_table(header, table), "", "![APQ and HPQ per reasoning type](scores_by_type.png)", ""]
        plot = FigureSpec(filename="scores_by_type.png", title=f"{title}: {self.title} (Fig. 2 layout)",
                          categories=["Mean", *(t.capitalize() for t in types)], ylabel="%",
                          series={name.split(" ")[0]: [metrics["mean_over_types"][key],
                                                       *(metrics["by_type"][t][key] for t in types)]
                                  for name, key in names})
        return "\n".join(md), [plot]
