"""VisDial v1.0 scoring: EvalAI submissions `[{"image_id": int, "round_id": int, "ranks": [100]}]`
(ranks[i] = rank of option i, a permutation of 1..100)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from core.figures import FigureSpec
from core.markdown import report_table
from evaluator.base import Headline, Modality, Sealing, Task
from evaluator.models.ask import Ask
from evaluator.models.menu import Baseline, on_train_split
from evaluator.models.model import Model, row_random
from evaluator.submission import Coverage, is_rank_permutation
from evaluator.visdial import metrics as m

OPTIONS = 100


class RandomRanks(Model):
    """Uniformly random option order per round (chance: MRR about 0.052, mean rank 50.5), seeded by
    the round's id so that a round's ranking does not depend on the other rows."""

    input_columns = ("id",)

    def __init__(self, seed: int = 0):
        self.seed = seed

    def predict(self, table: pa.Table) -> list[list[int]]:
        return m.scores_to_ranks(row_random(self.seed, table.column("id").to_pylist(), OPTIONS)).tolist()


class AnswerFrequencyRanks(Model):
    """Gat et al. (NeurIPS 2021) §4.3's majority ranking: options ordered by how often they are the answer in the
    training split (ties keep option order)."""

    input_columns = ("options",)

    def __init__(self, train: pa.Table):
        self.counts: dict[str, int] = {}
        for a in train.column("answer").to_pylist():
            self.counts[a] = self.counts.get(a, 0) + 1

    def predict(self, table: pa.Table) -> list[list[int]]:
        scores = np.array([[self.counts.get(o, 0) for o in options] for options in table.column("options").to_pylist()],
                          dtype=np.float64).reshape(-1, OPTIONS)
        return m.scores_to_ranks(scores).tolist()


class OptionLikelihood(Ask):
    """The 100 options of a round ranked by their log-likelihood given the image, the caption, the
    dialogue so far and the question (the image and dialogue run once; evaluator.models.transformers_vlm)."""

    mode = "score"
    default_prompt = ("Caption: {caption}\nDialogue so far:\n{history}\nQuestion: {question}?\n"
                      "Answer the question using a single word or phrase.")
    fields = ("caption", "history", "question")
    input_columns = ("image_id", "caption", "history", "question", "options")
    image_column = "image_id"
    letter_reason = ("VisDial ranks a round's 100 options by their log-likelihood; a letter names one option, "
                     "not a ranking")

    def values(self, table: pa.Table) -> list[dict[str, str]]:
        return [{"caption": c, "history": "\n".join(h) if h else "(none)", "question": q}
                for c, h, q in zip(*(table.column(k).to_pylist() for k in ("caption", "history", "question")))]

    def continuations(self, table: pa.Table) -> list[list[str]]:
        return table.column("options").to_pylist()

    def answers(self, table: pa.Table) -> list[int]:
        return table.column("gt_index").to_pylist()

    def prediction(self, scores: list[float]) -> list[int]:
        return m.scores_to_ranks(np.asarray([scores]))[0].tolist()


class VisDialTask(Task):
    headline = (Headline("MRR", "mrr", scale="0-1"), Headline("R@10", "r@10"), Headline("NDCG", "ndcg"))
    # VisDial v1.0's test split asks one round per dialog, its history up to that round (Das et al., CVPR 2017,
    # §4.1); the answer, its index among the options and the dense relevance stay sealed.
    sealing = Sealing(("id", "image_id", "round_id", "caption", "history", "question", "options"),
                      "VisDial v1.0's test dialogs", one_row_per="image_id",
                      one_row_why="a later round's history holds the earlier rounds' answers; build one round per "
                                  "dialog, as VisDial v1.0's test split asks", build_param="rounds=dense")
    name = "visdial"
    config = "default"
    default_split = "val"
    id_field, value_field, id_type = ("image_id", "round_id"), "ranks", int
    value_check, value_desc = staticmethod(is_rank_permutation(OPTIONS)), "permutations of 1..100"
    baselines = (Baseline("random", lambda task, options, spec: RandomRanks(options.seed)),
                 Baseline("majority", on_train_split(AnswerFrequencyRanks),
                          "options ranked by train-split answer frequency"))
    # Gat et al., NeurIPS 2021, §4.3 / Table 4: image, question, caption and dialog history; options and labels stay.
    images_folder = "visdial"
    modalities = (Modality("image", ("image_id",)), Modality("question", ("question",)),
                  Modality("caption", ("caption",)), Modality("history", ("history",)))
    metric_labels = {"mrr": "MRR", "ndcg": "NDCG"}
    layout = "by-modality"  # Table 4
    generative = OptionLikelihood()

    def ids(self, table: pa.Table) -> list[tuple[int, int]]:
        return list(zip(table.column("image_id").to_pylist(), table.column("round_id").to_pylist()))

    def predictions_file(self, table: pa.Table, predictions: list) -> list[dict]:
        return [{"image_id": i, "round_id": r, "ranks": [int(x) for x in ranks]}
                for (i, r), ranks in zip(self.ids(table), predictions)]

    def per_sample(self, table: pa.Table, predictions: list, options=None) -> dict:
        """MRR (1 / rank of the ground truth) per round; NDCG per densely annotated round, NaN elsewhere."""
        ranks = np.asarray(predictions, dtype=np.int64).reshape(-1, OPTIONS)
        mrr = 1.0 / m.gt_ranks(ranks, table.column("gt_index").to_numpy())
        relevance = table.column("relevance").to_pylist()
        dense = [i for i, r in enumerate(relevance) if r is not None]
        ndcg = np.full(len(ranks), np.nan)
        if dense:
            ndcg[dense] = m.ndcg(ranks[dense], np.array([relevance[i] for i in dense]))
        return {"mrr": mrr.astype(np.float64), "ndcg": ndcg}

    def majority(self, train: pa.Table) -> AnswerFrequencyRanks:
        return AnswerFrequencyRanks(train)

    def score(self, table: pa.Table, predictions: dict, coverage: Coverage, options=None) -> dict:
        """R@k, mean rank and MRR over every scored round; NDCG over the densely annotated ones."""
        ids = self.ids(table)
        keep = np.array([k in predictions for k in ids], dtype=bool)
        scored = table.filter(pa.array(keep))
        ranks = np.array([predictions[k] for k, kept in zip(ids, keep) if kept], dtype=np.int64).reshape(-1, OPTIONS)
        out = {key: round(v, 4) for key, v in
               m.retrieval_metrics(m.gt_ranks(ranks, scored.column("gt_index").to_numpy())).items()}
        relevance = scored.column("relevance").to_pylist()
        dense = [i for i, r in enumerate(relevance) if r is not None]
        if dense:
            values = m.ndcg(ranks[dense], np.array([relevance[i] for i in dense]))
            valid = ~np.isnan(values)
            out["ndcg"] = round(100 * float(values[valid].mean()), 4) if valid.any() else None
            out["ndcg_rounds"] = int(valid.sum())
            out["ndcg_all_zero_relevance"] = int((~valid).sum())  # no ideal DCG: left out of the mean
        else:
            out.update(ndcg=None, ndcg_rounds=0, ndcg_all_zero_relevance=0)
        return {**out, "rounds": int(keep.sum()), "coverage": coverage.as_dict()}

    def clusters(self, table: pa.Table):
        from evaluator.stats.bootstrap import cluster_codes

        return cluster_codes(table.column("image_id").to_pylist()), "dialog"

    def resampling(self, table: pa.Table, predictions: dict, options=None):
        """R@k, mean rank and MRR over the scored rounds, NDCG over the densely annotated ones whose
        relevance is not all zero; rounds clustered by dialog (image)."""
        from evaluator.stats.bootstrap import Ratio, Resampling

        scored = table.filter(pa.array([k in predictions for k in self.ids(table)], pa.bool_()))
        ranks = np.array([predictions[k] for k in self.ids(scored)], dtype=np.int64).reshape(-1, OPTIONS)
        gt = m.gt_ranks(ranks, scored.column("gt_index").to_numpy()).astype(np.float64)
        ones = np.ones(len(gt))
        ratios = {f"r@{k}": Ratio((gt <= k).astype(np.float64), ones) for k in (1, 5, 10)}
        ratios["mean_rank"] = Ratio(gt, ones, 1.0)
        ratios["mrr"] = Ratio(1.0 / gt, ones, 1.0)
        ndcg = self.per_sample(scored, ranks.tolist())["ndcg"]
        valid = ~np.isnan(ndcg)
        ratios["ndcg"] = Ratio(np.where(valid, ndcg, 0.0), valid.astype(np.float64))
        return Resampling(*self.clusters(scored), ratios)

    def report(self, metrics: dict, title: str):
        cov = metrics["coverage"]
        md = [f"# VisDial v1.0 evaluation: {title}", "",
              f"{cov['scored']:,} of {cov['expected']:,} rounds ranked; NDCG over {metrics['ndcg_rounds']:,} densely "
              f"annotated rounds ({metrics['ndcg_all_zero_relevance']} with all-zero relevance left out).", "",
              report_table(["NDCG", "MRR", "R@1", "R@5", "R@10", "Mean rank"],
                             [[metrics["ndcg"], 100 * metrics["mrr"], metrics["r@1"], metrics["r@5"], metrics["r@10"],
                               metrics["mean_rank"]]]),
              "", "MRR is shown in % as in the paper's Table 4.", "", "![Retrieval metrics](visdial_metrics.png)", ""]
        names = ["NDCG", "MRR", "R@1", "R@5", "R@10"]
        values = [metrics["ndcg"] or 0.0, 100 * metrics["mrr"], metrics["r@1"], metrics["r@5"], metrics["r@10"]]
        plot = FigureSpec(filename="visdial_metrics.png", title=f"{title}: VisDial v1.0", categories=names,
                          series={"%": values}, ylabel="%")
        return "\n".join(md), [plot]
