"""VCR-Visor scoring: submissions `[{"id": "<pair_id>/<k>", "scores": [s0, s1]}]`."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from builders.errors import SubmissionError
from builders.result import FigureSpec
from evaluator.base import Task
from evaluator.models import ModelOptions
from evaluator.models.ask import Ask
from evaluator.perceptual import Modality
from evaluator.report import markdown_table
from evaluator.submission import Coverage, is_score_list
from evaluator.vcr_visor import metrics as m

TYPES = ("causal", "temporal", "explanatory")


def _pct(values: np.ndarray) -> float | None:
    return round(100.0 * float(values.mean()), 4) if values.size else None


class ResponseLikelihood(Ask):
    """Each response's log-likelihood given the image and the query: the two scores of a sub-question,
    so APQ and HPQ (the VCR-Visor paper, §3.4, Eq. 2-6) apply unchanged."""

    mode = "score"
    default_prompt = "{query}"
    fields = ("query",)
    input_columns = ("img_fn", "metadata_fn", "query", "choices")
    image_column = "img_fn"

    def values(self, table: pa.Table) -> list[dict[str, str]]:
        return [{"query": q} for q in table.column("query").to_pylist()]

    def continuations(self, table: pa.Table) -> list[list[str]]:
        return table.column("choices").to_pylist()

    def prediction(self, scores: list[float]) -> list[float]:
        return list(scores)


class VCRVisorTask(Task):
    name = "vcr-visor"
    config = "default"
    default_split = "val"
    id_field, value_field, id_type = "id", "scores", str
    value_check, value_desc = staticmethod(is_score_list(2)), "lists of 2 finite numbers"
    models_help = "hf:<CLIP dual encoder>, hf:<sequence-classification cross-encoder>, baseline:random"
    # Image (file names, or the embedded image of a build with --images), query, and the two
    # responses; the label (which response is right) stays with its sample.
    modalities = (Modality("image", ("img_fn", "metadata_fn", "image")), Modality("query", ("query",)),
                  Modality("response", ("choices", "rewritten")))
    metric_labels = {"accuracy": "Acc"}
    layout = "by-modality"
    generative = ResponseLikelihood()
    majority = None  # VCR-Visor is built from VCR val only: no training split for Z_D

    def ids(self, table: pa.Table) -> list[str]:
        return table.column("id").to_pylist()

    def adapter(self, kind: str, name: str, spec: str, options: ModelOptions):
        from evaluator.models import vcr

        return vcr.make_scorer(kind, name, options)

    def predictions_file(self, table: pa.Table, predictions: list) -> list[dict]:
        return [{"id": i, "scores": [float(s) for s in scores]} for i, scores in zip(self.ids(table), predictions)]

    def per_sample(self, table: pa.Table, predictions: list, options=None) -> dict:
        """Sub-question accuracy: the correct response has the larger score (Eq. 2's P > 0.5)."""
        scores = np.asarray(predictions, dtype=np.float64).reshape(-1, 2)
        labels = table.column("label").to_numpy().astype(np.int64)
        return {"accuracy": m.sub_question_accuracy(m.correct_probability(scores, labels))}

    def score(self, table: pa.Table, predictions: dict, coverage: Coverage, options=None) -> dict:
        """APQ and HPQ per pair (both sub-questions must be scored), accuracy per sub-question."""
        rows = table.select(["id", "pair_id", "sub_question", "reasoning_type", "label"]).to_pylist()
        scored = [r for r in rows if r["id"] in predictions]
        p = m.correct_probability(np.array([predictions[r["id"]] for r in scored]).reshape(-1, 2),
                                  np.array([r["label"] for r in scored], dtype=np.int64))
        prob = {r["id"]: float(v) for r, v in zip(scored, p)}
        pairs = {}
        for r in rows:
            pairs.setdefault(r["pair_id"], {"type": r["reasoning_type"]})[r["sub_question"]] = r["id"]
        complete = [(pid, d) for pid, d in sorted(pairs.items()) if d[1] in prob and d[2] in prob]
        if not complete:
            raise SubmissionError("no pair has scores for both of its sub-questions")
        kinds = np.array([d["type"] for _, d in complete])
        p1 = np.array([prob[d[1]] for _, d in complete])
        p2 = np.array([prob[d[2]] for _, d in complete])
        apq, hpq = m.apq(p1, p2), m.hpq(p1, p2)
        acc = m.sub_question_accuracy(p)
        sub_kinds = np.array([r["reasoning_type"] for r in scored])
        by_type = {k: {"pairs": int((kinds == k).sum()), "apq": _pct(apq[kinds == k]), "hpq": _pct(hpq[kinds == k]),
                       "accuracy": _pct(acc[sub_kinds == k])} for k in TYPES if (kinds == k).any()}
        mean = {key: round(float(np.mean([v[key] for v in by_type.values()])), 4) for key in ("apq", "hpq", "accuracy")}
        return {"apq": _pct(apq), "hpq": _pct(hpq), "accuracy": _pct(acc), "pairs": len(complete),
                "mean_over_types": mean, "by_type": by_type, "coverage": coverage.as_dict()}

    def report(self, metrics: dict, title: str):
        types = list(metrics["by_type"])
        cov = metrics["coverage"]
        header = ["metric", "Mean", *(t.capitalize() for t in types), "All pairs"]
        table = [[name, metrics["mean_over_types"][key], *(metrics["by_type"][t][key] for t in types), metrics[key]]
                 for name, key in (("APQ", "apq"), ("HPQ", "hpq"), ("Accuracy (sub-questions)", "accuracy"))]
        md = [f"# VCR-Visor evaluation: {title}", "",
              f"Scored {cov['scored']:,} of {cov['expected']:,} sub-questions ({metrics['pairs']:,} complete pairs). "
              "Mean = the average over reasoning types, as the paper's tables.", "",
              markdown_table(header, table), "", "![APQ and HPQ per reasoning type](scores_by_type.png)", ""]
        plot = FigureSpec(filename="scores_by_type.png", title=f"{title}: VCR-Visor (Fig. 2 layout)",
                          categories=["Mean", *(t.capitalize() for t in types)], ylabel="%",
                          series={name: [metrics["mean_over_types"][key], *(metrics["by_type"][t][key] for t in types)]
                                  for name, key in (("APQ", "apq"), ("HPQ", "hpq"), ("Accuracy", "accuracy"))})
        return "\n".join(md), [plot]
