"""GQA-OOD scoring: submissions `[{"questionId": str, "prediction": str}]` against a built split."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from builders.gqa_ood.rules import PUBLISHED_ALPHAS
from core.errors import ModelError
from core.markdown import report_table
from evaluator.base import HarnessSplit, Headline, Modality, PriorRule, Sealing, Task
from evaluator.gqa_ood import metrics as m
from evaluator.gqa_ood.baselines import MostFrequentAnswer, QuestionPrior, RandomGroupAnswer
from evaluator.models.ask import CLEANING, ShortAnswer, clean_answer
from evaluator.models.hf_vqa import vilt_vqa
from evaluator.models.menu import Baseline
from evaluator.models.options import ModelOptions
from evaluator.publish.report import LinePlot
from evaluator.submission import Coverage, is_string


class GqaAnswer(ShortAnswer):
    """A generated GQA answer: cleaned and lower-cased, as GQA's answers are written (the official
    evaluation compares exact strings); the raw output stays in `--log-samples`."""

    cleaning = CLEANING + "; lower case"
    reference_column = "answer"

    def prediction(self, output: str) -> str:
        return clean_answer(output).lower()


def train_file(options: ModelOptions) -> Path:
    """baseline:prior's and baseline:local-prior's training questions (the GQA-OOD paper, §4: the question prior
    of GQA's training set)."""
    if options.train_file is None:
        raise ModelError("GQA-OOD's priors are fitted on GQA training questions: pass --train-file "
                         "train_balanced_questions.json")
    return options.train_file


class GQAOODTask(Task):
    headline = (Headline("acc-all", "acc_all"), Headline("acc-tail", "acc_tail", config="tail"),
                Headline("acc-head", "acc_head", config="head"))
    # GQA's own test release gives a question, its image and whether it is balanced (Hudson and Manning, CVPR
    # 2019, §3.8); the answer, the program, the annotations, the groups and head / tail stay sealed.
    sealing = Sealing(("question_id", "imageId", "question", "isBalanced"), "GQA's test questions file")
    name = "gqa-ood"
    config = "all"
    default_split = "testdev"
    id_field, value_field, id_type = "questionId", "prediction", str
    value_check, value_desc = staticmethod(is_string), "strings"
    baselines = (Baseline("prior", lambda task, options, spec: QuestionPrior(train_file(options)),
                          "needs --train-file"),
                 Baseline("local-prior", lambda task, options, spec: QuestionPrior(train_file(options), local=True),
                          "the local group's most frequent training answer; needs --train-file"),
                 Baseline("random", lambda task, options, spec: RandomGroupAnswer(options.seed)))
    images_folder = "gqa"
    # the prior a model follows into GQA-OOD's tail: its local group's most frequent training answer, rates on the
    # head and the tail apart
    prior_rule = PriorRule("local-prior", "accuracy", "the most frequent answer of the question's local group in "
                           "GQA's training questions (Kervadec et al., CVPR 2021, §3)", parts="subset")
    hf_families = (vilt_vqa("imageId"),)
    # Image and question; the question's program, types and groups are read off the question.
    modalities = (Modality("image", ("imageId",)), Modality("question", ("question", "semantic", "types", "groups")))
    metric_labels = {"accuracy": "Acc"}
    layout = "by-subset"
    generative = GqaAnswer("imageId")  # compared with the answer by exact match

    def training_table(self, options: ModelOptions) -> pa.Table | None:
        """GQA-OOD has no training split of its own: the GQA training questions of --train-file."""
        from builders.gqa_ood import reader as gqa

        return None if options.train_file is None else gqa.read_index(Path(options.train_file))

    def majority(self, train: pa.Table) -> MostFrequentAnswer:
        return MostFrequentAnswer(train.column("answer").to_pylist())

    def per_sample(self, table: pa.Table, predictions: list[str], options=None) -> dict:
        return {"accuracy": m.exact_match(predictions, table.column("answer").to_pylist()).astype(np.float64)}

    def ids(self, table: pa.Table) -> list[str]:
        return table.column("question_id").to_pylist()

    def predictions_file(self, table: pa.Table, predictions: list[str]) -> list[dict]:
        return [{"questionId": q, "prediction": p} for q, p in zip(self.ids(table), predictions)]

    def score(self, table: pa.Table, predictions: dict[str, str], coverage: Coverage, options=None) -> dict:
        """acc-all/head/tail, alpha curves (Fig. 3) and the reasoning-label matrix (Fig. 5a)."""
        keep = np.array([q in predictions for q in self.ids(table)], dtype=bool)
        scored = table.filter(pa.array(keep))
        qids = self.ids(scored)
        preds = [predictions[q] for q in qids]
        answers = scored.column("answer").to_pylist()
        local = ["none" if g is None else g for g in
                 (x["local"] for x in scored.column("groups").to_pylist())]
        subset = np.array(scored.column("subset").to_pylist())
        count, d, n = (scored.column(c).to_numpy() for c in ("answer_count", "group_num_answers", "group_size"))
        correct = m.exact_match(preds, answers)
        acc_head, acc_tail = m.accuracy(correct, subset == "head"), m.accuracy(correct, subset == "tail")
        # Group answers come from the whole split, not the scored part (coverage must not move labels).
        all_local = ["none" if g is None else g for g in (x["local"] for x in table.column("groups").to_pylist())]
        all_answers = table.column("answer").to_pylist()
        heads = m.head_answers_by_group(all_local, all_answers, table.column("subset").to_pylist())
        return {
            "acc_all": m.accuracy(correct), "acc_head": acc_head, "acc_tail": acc_tail,
            "delta_tail_head": (round(100 * (acc_head - acc_tail) / acc_tail, 4)
                                if acc_head is not None and acc_tail else None),
            "acc_tail_by_alpha": m.acc_tail_curve(correct, count, d, n, PUBLISHED_ALPHAS),
            "head_tail_confusion_by_alpha": m.head_tail_confusion(preds, local, count, d, n, heads, PUBLISHED_ALPHAS),
            "reasoning_labels": m.reasoning_matrix(preds, answers, local,
                                                   m.group_answer_counts(all_local, all_answers)),
            "coverage": coverage.as_dict(),
        }

    # lmms-eval's `gqa` task (GQA test-dev balanced; its doc's `id` is the question id) and VLMEvalKit's
    # GQA_TestDev_Balanced, whose table must carry the question id as a column.
    harness_tasks = {"lmms-eval": ("gqa",), "vlmevalkit": ("GQA_TestDev_Balanced",)}
    harness_id_fields = ("id", "question_id", "questionId")
    # lmms-lab-encoder/GQA (lmms-eval 0.7.3's; lmms-lab/GQA before)
    harness_split = HarnessSplit("testdev_balanced_instructions", "testdev", "id", "question", "answer")

    def clusters(self, table: pa.Table):
        from evaluator.stats.bootstrap import cluster_codes

        return cluster_codes(table.column("imageId").to_pylist()), "image"

    def resampling(self, table: pa.Table, predictions: dict[str, str], options=None):
        """acc-all, acc-head, acc-tail and Δ (Kervadec et al., CVPR 2021, Table 3), questions clustered
        by image."""
        from evaluator.stats.bootstrap import Ratio, Resampling

        scored = table.filter(pa.array([q in predictions for q in self.ids(table)], pa.bool_()))
        correct = m.exact_match([predictions[q] for q in self.ids(scored)],
                                scored.column("answer").to_pylist()).astype(np.float64)
        subset = np.array(scored.column("subset").to_pylist())
        head, tail = (subset == "head").astype(np.float64), (subset == "tail").astype(np.float64)
        return Resampling(*self.clusters(scored), {
            "acc_all": Ratio(correct, np.ones_like(correct)), "acc_head": Ratio(correct * head, head),
            "acc_tail": Ratio(correct * tail, tail)},
            {"delta_tail_head": lambda v: 100 * (v["acc_head"] - v["acc_tail"]) / v["acc_tail"]})

    def report(self, metrics: dict, title: str) -> tuple[str, list[LinePlot]]:
        alphas = [row["alpha"] for row in metrics["acc_tail_by_alpha"]]
        x = [1 + a for a in alphas]
        cov = metrics["coverage"]
        matrix = metrics["reasoning_labels"]
        md = [f"# GQA-OOD evaluation: {title}", "",
              f"Scored {cov['scored']:,} of {cov['expected']:,} questions"
              + (f" ({cov['ignored_extra']:,} predictions for questions outside the split ignored)"
                 if cov["ignored_extra"] else "") + ".", "",
              "## Table 3 layout (scores in %)", "",
              report_table(["acc-all", "acc-tail", "acc-head", "Δ(tail, head)"],
                             [[metrics["acc_all"], metrics["acc_tail"], metrics["acc_head"],
                               metrics["delta_tail_head"]]]), "",
              "## acc-tail and head/tail confusion over alpha (Fig. 3)", "",
              report_table(["alpha", "tail questions", "acc-tail", "head/tail confusion"],
                             [[a["alpha"], a["questions"], a["acc_tail"], c["confusion"]] for a, c in
                              zip(metrics["acc_tail_by_alpha"], metrics["head_tail_confusion_by_alpha"])]), "",
              "![acc-tail over alpha](acc_tail_by_alpha.png) ![confusion over alpha](head_tail_confusion.png)", "",
              "## Reasoning labels (Fig. 5a): rows predicted, columns ground truth, % of questions", "",
              report_table(["predicted \\ GT", *(f"{g} {cw}" for g in m.LABELS for cw in ("C", "W"))],
                             [[p, *(matrix[p][g][cw] for g in m.LABELS for cw in ("C", "W"))] for p in m.LABELS]),
              ""]
        plots = [
            LinePlot("acc_tail_by_alpha.png", "acc-tail over the tail size (Fig. 3a)", x,
                     {title: [r["acc_tail"] for r in metrics["acc_tail_by_alpha"]]}, "1 + alpha (log scale)",
                     "acc-tail (%)", logx=True),
            LinePlot("head_tail_confusion.png", "head/tail confusion (Fig. 3b)", x,
                     {title: [r["confusion"] for r in metrics["head_tail_confusion_by_alpha"]]},
                     "1 + alpha (log scale)", "tail questions answered with a head answer (%)", logx=True),
        ]
        return "\n".join(md), plots
