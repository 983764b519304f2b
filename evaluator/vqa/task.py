"""VQA v2 / VQA-CP scoring: submissions `[{"question_id": int, "answer": str}]`, the official VQA
accuracy overall, per question type and per answer type."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pyarrow as pa

from core.figures import FigureSpec
from core.markdown import report_table
from core.params import param
from evaluator.base import HarnessSplit, Headline, Modality, PriorRule, Sealing, Task
from evaluator.models.ask import CLEANING, ShortAnswer, clean_answer
from evaluator.models.hf_vqa import clip_answers, vilt_vqa
from evaluator.models.menu import Baseline, on_train_split
from evaluator.models.model import Model
from evaluator.submission import Coverage, is_string
from evaluator.vqa.metrics import normalize_prediction, vqa_accuracy


@dataclass(frozen=True)
class VQAOptions:
    """`--option rule=pre-2021` scores with the answer normalisation of the official code before 2021."""

    rule: Literal["current", "pre-2021"] = param(
        "current", "answer normalisation of the official VQA evaluation code: current or pre-2021")


def _most_frequent(counter: Counter) -> str:
    return min(counter, key=lambda a: (-counter[a], a))


class TrainPrior(Model):
    """Blind baselines fitted on the built dataset's train split: `prior` answers the most frequent
    training answer of the question's type, `majority` the most frequent training answer overall."""

    def __init__(self, train: pa.Table, per_type: bool):
        self.input_columns = ("question_type",) if per_type else ()
        answers = train.column("multiple_choice_answer").to_pylist()
        self.fallback = _most_frequent(Counter(answers))
        self.prior: dict[str, str] = {}
        if per_type:
            by_type: dict[str, Counter] = {}
            for t, a in zip(train.column("question_type").to_pylist(), answers):
                by_type.setdefault(t, Counter())[a] += 1
            self.prior = {t: _most_frequent(c) for t, c in by_type.items()}

    def predict(self, table: pa.Table) -> list[str]:
        """The type's prior answer; `majority` reads no column (its declared inputs: none)."""
        if not self.prior:
            return [self.fallback] * table.num_rows
        return [self.prior.get(t, self.fallback) for t in table.column("question_type").to_pylist()]


def _pct(values: np.ndarray) -> float:
    return round(100.0 * float(values.mean()), 4) if values.size else 0.0


def _by(keys: list[str], scores: np.ndarray) -> dict[str, dict]:
    groups: dict[str, list[int]] = {}
    for i, k in enumerate(keys):
        groups.setdefault(k, []).append(i)
    return {k: {"questions": len(idx), "accuracy": _pct(scores[idx])} for k, idx in sorted(groups.items())}


class VqaAnswer(ShortAnswer):
    """A generated VQA answer: cleaned, then put in the form the official evaluation expects
    (`normalize_prediction`: lower case, punctuation, number words as digits, articles dropped); the raw
    output stays in `--log-samples`."""

    cleaning = CLEANING + "; then the official VQA answer normalisation (lower case, punctuation, number words " \
                          "as digits, articles dropped)"
    reference_column = "multiple_choice_answer"  # the annotators' most common answer (VQA accuracy reads all ten)

    def prediction(self, output: str) -> str:
        return normalize_prediction(clean_answer(output))


class VQATask(Task):
    """Shared by vqa-v2 (default split validation) and vqa-cp (default split test)."""
    headline = (Headline("VQA accuracy", "accuracy"),)
    # VQA's test questions file gives a question and its COCO image (Antol et al., ICCV 2015, §3); the ten answers,
    # the question and answer types stay sealed.
    sealing = Sealing(("question_id", "image_id", "coco_split", "question"), "VQA's test questions file")

    config = "default"
    id_field, value_field, id_type = "question_id", "answer", int
    value_check, value_desc = staticmethod(is_string), "strings"
    options_class = VQAOptions
    feature_heads = True
    baselines = (Baseline("prior", on_train_split(TrainPrior, per_type=True),
                          "the question type's most frequent train answer"),
                 Baseline("majority", on_train_split(TrainPrior, per_type=False), "the most frequent train answer"))
    images_folder = "coco"
    # the prior VQA-CP moves between train and test (Agrawal et al., CVPR 2018, §3): the question type's answer
    prior_rule = PriorRule("prior", "vqa_accuracy", "the most frequent training answer of the question's type "
                           "(Agrawal et al., CVPR 2018, §3)", normalise=normalize_prediction, parts="answer_type")
    hf_families = (vilt_vqa("image_id"), clip_answers("image_id"))
    # Gat et al., NeurIPS 2021, §4.1: image and question; the question type is read off the question, so
    # it moves with it.
    modalities = (Modality("image", ("image_id", "coco_split")), Modality("question", ("question", "question_type")))
    metric_labels = {"vqa_accuracy": "Acc"}
    layout = "by-subset"  # Table 1: rows are question (answer) types
    generative = VqaAnswer("image_id")  # scored by VQA accuracy

    def __init__(self, name: str = "vqa-v2", default_split: str = "validation"):
        self.name, self.default_split = name, default_split

    def ids(self, table: pa.Table) -> list[int]:
        return table.column("question_id").to_pylist()

    def per_sample(self, table: pa.Table, predictions: list[str], options: VQAOptions | None = None) -> dict:
        options = options or VQAOptions()
        return {"vqa_accuracy": vqa_accuracy(predictions, table.column("answers"), options.rule)}

    def majority(self, train: pa.Table) -> TrainPrior:
        """Eq. 4's majority vote: the most frequent training answer."""
        return TrainPrior(train, per_type=False)

    def perceptual_extras(self, table: pa.Table, train: pa.Table | None, result) -> dict:
        """Gat et al., NeurIPS 2021, Table 2: yes/no proportions by question start token, with the image's
        sample scores."""
        from evaluator.perceptual.report import token_analysis
        from evaluator.perceptual.score import sample_scores

        if train is None:
            return {}
        p_image = sample_scores(result).get("image", {}).get("vqa_accuracy")
        return {"token_analysis": token_analysis(table, train, result.predictions, p_image)}

    # The feature-level head (evaluator/models/features.py): one class per training answer.
    head_target = "multiple_choice_answer"
    head_kind = "classification"

    def predictions_file(self, table: pa.Table, predictions: list[str]) -> list[dict]:
        return [{"question_id": q, "answer": a} for q, a in zip(self.ids(table), predictions)]

    def score(self, table: pa.Table, predictions: dict, coverage: Coverage, options: VQAOptions | None = None) -> dict:
        options = options or VQAOptions()
        keep = pa.array([q in predictions for q in self.ids(table)])
        scored = table.filter(keep)
        scores = vqa_accuracy([predictions[q] for q in self.ids(scored)], scored.column("answers"),
                              options.rule)
        return {"accuracy": _pct(scores), "rule": options.rule,
                "per_answer_type": _by(scored.column("answer_type").to_pylist(), scores),
                "per_question_type": _by(scored.column("question_type").to_pylist(), scores),
                "coverage": coverage.as_dict()}

    # lmms-eval's `vqav2_val` (its doc's `question_id`); VLMEvalKit tables that carry `question_id`.
    # VQA-CP's test split is drawn from VQA v2 train and val: a val log covers its val questions.
    harness_tasks = {"lmms-eval": ("vqav2_val",), "vlmevalkit": ()}
    harness_id_fields = ("question_id",)
    harness_split = HarnessSplit(None, "validation", "question_id", "question")  # lmms-lab-encoder/VQAv2

    def clusters(self, table: pa.Table):
        from evaluator.stats.bootstrap import cluster_codes

        return cluster_codes(table.column("image_id").to_pylist()), "image"

    def resampling(self, table: pa.Table, predictions: dict, options: VQAOptions | None = None):
        """VQA accuracy, overall and per answer type, questions clustered by image."""
        from evaluator.stats.bootstrap import Ratio, Resampling

        options = options or VQAOptions()
        scored = table.filter(pa.array([q in predictions for q in self.ids(table)], pa.bool_()))
        scores = np.asarray(vqa_accuracy([predictions[q] for q in self.ids(scored)], scored.column("answers"),
                                         options.rule), dtype=np.float64)
        kinds = np.array(scored.column("answer_type").to_pylist(), dtype=object)
        ratios = {"accuracy": Ratio(scores, np.ones_like(scores))}
        for kind in sorted(set(kinds.tolist())):
            inside = (kinds == kind).astype(np.float64)
            ratios[f"per_answer_type.{kind}.accuracy"] = Ratio(scores * inside, inside)
        return Resampling(*self.clusters(scored), ratios)

    def report(self, metrics: dict, title: str):
        cov = metrics["coverage"]
        answer_types = metrics["per_answer_type"]
        qtypes = metrics["per_question_type"]
        md = [f"# {self.name} evaluation: {title}", "",
              f"VQA accuracy (rule: {metrics['rule']}) on {cov['scored']:,} of {cov['expected']:,} questions.", "",
              report_table(["", "Overall", *answer_types],
                             [["Accuracy", metrics["accuracy"], *(v["accuracy"] for v in answer_types.values())]]),
              "", "## Per question type", "",
              report_table(["Question type", "Questions", "Accuracy"],
                             [[t, v["questions"], v["accuracy"]] for t, v in qtypes.items()]),
              "", "![Accuracy per answer type](accuracy_by_answer_type.png)", ""]
        plot = FigureSpec(filename="accuracy_by_answer_type.png", title=f"{title}: {self.name} VQA accuracy",
                          categories=["overall", *answer_types], ylabel="%",
                          series={"accuracy": [metrics["accuracy"], *(v["accuracy"] for v in answer_types.values())]})
        return "\n".join(md), [plot]


def vqa_v2_task() -> VQATask:
    return VQATask("vqa-v2", "validation")


def vqa_cp_task() -> VQATask:
    return VQATask("vqa-cp", "test")
