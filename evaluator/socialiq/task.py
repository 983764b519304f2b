"""Social-IQ scoring: submissions `[{"id": "<video>/q<k>/<a|i><j>", "score": float}]`, one score per
answer candidate; score > 0 means "this answer is correct", and higher means more likely correct."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from core.errors import SubmissionError
from core.figures import FigureSpec
from core.markdown import report_table
from evaluator.base import Headline, Modality, Sealing, Task
from evaluator.models.ask import Ask
from evaluator.models.menu import Baseline
from evaluator.models.model import Model
from evaluator.socialiq.metrics import binary_correct, pair_correct
from evaluator.submission import Coverage, is_finite_number


class AnswerSentiment(Model):
    """Gat et al. (NeurIPS 2021) Table 3's NLTK-Sentiment row, no training: the VADER compound polarity of the answer
    text (in [-1, 1]; > 0 reads as 'correct'). vaderSentiment ships the VADER lexicon NLTK downloads."""

    input_columns = ("answer",)

    def __init__(self):
        from vaderSentiment.vaderSentiment import SentimentIntensityAnalyzer

        self.analyzer = SentimentIntensityAnalyzer()

    def predict(self, table: pa.Table) -> list[float]:
        return [self.analyzer.polarity_scores(a)["compound"] for a in table.column("answer").to_pylist()]


class MajorityLabel(Model):
    """The majority vote: every answer gets the most frequent training label; Social-IQ has 4 correct
    and 3 incorrect answers per question, so every answer is called correct (57.14 %, Table 3's Acc_D)."""

    input_columns = ()

    def __init__(self, train: pa.Table | None = None):
        labels = [1] if train is None else train.column("label").to_pylist()
        self.score = 1.0 if 2 * sum(labels) >= len(labels) else -1.0

    def predict(self, table: pa.Table) -> list[float]:
        return [self.score] * table.num_rows


class AnswerLikelihood(Ask):
    """Each answer's log-likelihood given the question, and the video's frames with `--videos DIR`
    (otherwise the model is blind). A log-likelihood is negative, so the answer-level decision
    (score > 0: 'correct') calls every answer incorrect; the pairwise A2 accuracy compares the two
    answers' scores and is the measure."""

    mode = "score"
    default_prompt = "{question}"
    fields = ("question",)
    input_columns = ("question", "answer")
    video_column = "video_id"
    note = "scores are log-likelihoods (< 0), so answer-level accuracy (score > 0 = correct) is not meaningful, A2 is"
    letter_reason = ("Social-IQ scores each answer alone (four of a question's seven answers are correct), so there "
                     "are no options to name by letter")

    def values(self, table: pa.Table) -> list[dict[str, str]]:
        return [{"question": q} for q in table.column("question").to_pylist()]

    def continuations(self, table: pa.Table) -> list[list[str]]:
        return [[a] for a in table.column("answer").to_pylist()]

    def right_options(self, table: pa.Table, continuations: list[list[str]]) -> list[list[int]]:
        """The one answer of each prompt, right (label 1) or not."""
        return [[int(label)] for label in table.column("label").to_pylist()]

    def prediction(self, scores: list[float]) -> float:
        return scores[0]


class SocialIQTask(Task):
    headline = (Headline("accuracy", "accuracy"), Headline("A2", "a2"))
    # A question and one of its answers; the label, and the answer's index (a question has more correct answers
    # than incorrect ones), stay sealed. Ids name an answer correct (`a<j>`) or incorrect (`i<j>`) and rows list
    # the correct answers first: a sealed split's rows are named and ordered by keyed hashes instead.
    sealing = Sealing(("id", "video_id", "question_index", "question", "answer"), "Social-IQ's question and answer "
                      "lists, without their labels", opaque_ids=True)
    name = "socialiq"
    config = "answers"
    default_split = "validation"
    id_field, value_field, id_type = "id", "score", str
    value_check, value_desc = staticmethod(is_finite_number), "finite numbers"
    baselines = (Baseline("answer-sentiment", lambda task, options, spec: AnswerSentiment(),
                          "blind: the answer's VADER sentiment"),
                 Baseline("majority", lambda task, options, spec: MajorityLabel(), "every answer called correct"))
    feature_heads = True
    # Gat et al., NeurIPS 2021, §4.2 / Table 3: video, question and answer; the label stays with its sample.
    modalities = (Modality("video", ("video_id",)), Modality("question", ("question",)),
                  Modality("answer", ("answer",)))
    metric_labels = {"accuracy": "Acc"}
    layout = "by-modality"  # Table 3
    generative = AnswerLikelihood()
    head_target, head_kind = "label", "binary"

    def ids(self, table: pa.Table) -> list[str]:
        return table.column("id").to_pylist()

    def predictions_file(self, table: pa.Table, predictions: list) -> list[dict]:
        return [{"id": i, "score": float(s)} for i, s in zip(self.ids(table), predictions)]

    def per_sample(self, table: pa.Table, predictions: list, options=None) -> dict:
        return {"accuracy": binary_correct(np.asarray(predictions, dtype=np.float64), table.column("label").to_numpy())}

    def choice_questions(self, table: pa.Table):
        """One kind, `a4`: Zadeh et al. (CVPR 2019, §5)'s A4 task, one correct answer among three
        incorrect ones -- each correct answer of a question with the question's three incorrect
        answers (the correct candidate first; a multiple-choice head scores each candidate alone, so
        the order carries nothing). A question's four A4 examples decide the label of all its seven
        answer rows, so `--by` keeps whole questions together and decomposes A2 as well."""
        from evaluator.shortcuts.labels import ChoiceQuestions

        cols = table.select(["video_id", "question_index", "question", "answer", "label"]).to_pydict()
        questions: dict[tuple, dict] = {}
        for k, (video, index, question, answer, label) in enumerate(zip(*cols.values())):
            q = questions.setdefault((video, index), {"question": question, "rows": [], 1: [], 0: []})
            q["rows"].append(k)
            q[label].append(answer)
        contexts, candidates, examples_of = [], [], [None] * table.num_rows
        for q in questions.values():
            first = len(contexts)
            for answer in q[1]:
                contexts.append(q["question"])
                candidates.append([answer, *q[0]])
            for k in q["rows"]:
                examples_of[k] = tuple(range(first, len(contexts)))
        return {"a4": ChoiceQuestions(contexts, candidates, [0] * len(contexts), "A4, one correct of four answers",
                                      tuple(examples_of))}

    def majority(self, train: pa.Table) -> MajorityLabel:
        return MajorityLabel(train)

    def score(self, table: pa.Table, predictions: dict, coverage: Coverage, options=None) -> dict:
        """Answer-level accuracy over scored answers; A2 over the pairs whose two answers are scored."""
        rows = table.select(["id", "video_id", "question_index", "label"]).to_pylist()
        scored = [r for r in rows if r["id"] in predictions]
        answer_acc = binary_correct(np.array([predictions[r["id"]] for r in scored]),
                                    np.array([r["label"] for r in scored]))
        by_question: dict[tuple, dict[int, list[float]]] = {}
        for r in scored:
            by_question.setdefault((r["video_id"], r["question_index"]), {0: [], 1: []})[r["label"]].append(
                predictions[r["id"]])
        c = [x for q in by_question.values() for x in q[1] for _ in q[0]]
        i = [y for q in by_question.values() for _ in q[1] for y in q[0]]
        if not c:
            raise SubmissionError("no question has scores for both a correct and an incorrect answer")
        pairs = pair_correct(np.array(c), np.array(i))
        return {"accuracy": round(100 * float(answer_acc.mean()), 4), "a2": round(100 * float(pairs.mean()), 4),
                "answers": len(scored), "pairs": int(pairs.size), "tied_pairs": int((pairs == 0.5).sum()),
                "coverage": coverage.as_dict()}

    def clusters(self, table: pa.Table):
        from evaluator.stats.bootstrap import cluster_codes

        return cluster_codes(table.column("video_id").to_pylist()), "video"

    def resampling(self, table: pa.Table, predictions: dict, options=None):
        """Answer accuracy over the scored answers and A2 over the correct/incorrect pairs of each
        question, clustered by video (a video's questions share it). A correct answer's row carries
        its pairs: the sum of its pair scores over the question's scored incorrect answers."""
        from evaluator.stats.bootstrap import Ratio, Resampling

        scored = table.filter(pa.array([i in predictions for i in self.ids(table)], pa.bool_()))
        rows = scored.select(["id", "video_id", "question_index", "label"]).to_pylist()
        scores = np.array([predictions[r["id"]] for r in rows], dtype=np.float64)
        labels = np.array([r["label"] for r in rows])
        incorrect: dict[tuple, list[float]] = {}
        for r, x in zip(rows, scores):
            if r["label"] == 0:
                incorrect.setdefault((r["video_id"], r["question_index"]), []).append(x)
        a2_num, a2_den = np.zeros(len(rows)), np.zeros(len(rows))
        for k, (r, x) in enumerate(zip(rows, scores)):
            others = incorrect.get((r["video_id"], r["question_index"]), []) if r["label"] == 1 else []
            if others:
                a2_num[k] = pair_correct(np.full(len(others), x), np.array(others)).sum()
                a2_den[k] = len(others)
        return Resampling(*self.clusters(scored), {
            "accuracy": Ratio(binary_correct(scores, labels), np.ones(len(rows))), "a2": Ratio(a2_num, a2_den)})

    def report(self, metrics: dict, title: str):
        cov = metrics["coverage"]
        md = [f"# Social-IQ evaluation: {title}", "",
              f"{cov['scored']:,} of {cov['expected']:,} answers scored; {metrics['pairs']:,} correct/incorrect "
              f"pairs ({metrics['tied_pairs']:,} ties, counted as 0.5).", "",
              report_table(["Answer accuracy (score > 0 = correct)", "A2 (pair accuracy)"],
                             [[metrics["accuracy"], metrics["a2"]]]),
              "", "The majority vote (every answer correct) scores 57.14 % answer accuracy, A2 chance is 50 %.", "",
              "![Accuracy](socialiq_accuracy.png)", ""]
        plot = FigureSpec(filename="socialiq_accuracy.png", title=f"{title}: Social-IQ",
                          categories=["answer accuracy", "A2"], series={"%": [metrics["accuracy"], metrics["a2"]]},
                          ylabel="%")
        return "\n".join(md), [plot]
