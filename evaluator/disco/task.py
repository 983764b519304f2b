"""DISCO scoring: submissions `[{"id": "<image_id>/<quality>", "count": float}]`; MAE, RMSE, MAPE and
1 - MAPE overall and per image quality (Table 5 compares low- and high-quality images)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from core.figures import FigureSpec
from core.markdown import report_table
from evaluator.base import Headline, Modality, Sealing, Task
from evaluator.disco.metrics import counting_errors, counting_metrics
from evaluator.models.ask import CLEANING, Ask, parse_count
from evaluator.models.menu import Baseline, on_train_split
from evaluator.models.model import Model
from evaluator.submission import Coverage, is_finite_number


class TrainMeanCount(Model):
    """The blind regression baseline: the mean count of the dataset's train split for every image."""

    input_columns = ()

    def __init__(self, train: pa.Table):
        per_image = dict(zip(train.column("image_id").to_pylist(), train.column("count").to_pylist()))
        self.mean = float(np.mean(list(per_image.values())))

    def predict(self, table: pa.Table) -> list[float]:
        return [self.mean] * table.num_rows


def _rounded(metrics: dict) -> dict:
    return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in metrics.items()}


class PeopleCount(Ask):
    """The count of people in the image, generated and parsed to a number (the audio is not read)."""

    mode = "generate"
    default_prompt = "How many people are in this image? Answer with a number."
    fields = ()
    input_columns = ("id", "image")
    image_column = "id"
    cleaning = (CLEANING + "; then the first number (digits, or a number word up to twenty); an output "
                "without one predicts 0 and is counted under unparsed_outputs")
    note = "image only: the audio is not read"
    reference_column = "count"

    def reference_text(self, value) -> str:
        """The count to the nearest whole person (halves up): the annotated counts are density sums."""
        return str(int(value + 0.5))

    def values(self, table: pa.Table) -> list[dict[str, str]]:
        return [{} for _ in range(table.num_rows)]

    def prediction(self, output: str) -> float | None:
        return parse_count(output)


class DiscoTask(Task):
    headline = (Headline("1 - MAPE", "one_minus_mape", scale="0-1"), Headline("MAE", "mae", higher_is_better=False))
    # The image and the audio of a scene; the crowd count stays sealed.
    sealing = Sealing(("id", "image_id", "quality", "image", "audio", "sample_rate", "audio_frames"),
                      "DISCO's images and audio, without their counts")
    name = "disco"
    config = "default"
    default_split = "test"
    id_field, value_field, id_type = "id", "count", str
    value_check, value_desc = staticmethod(is_finite_number), "finite numbers"
    baselines = tuple(Baseline(name, on_train_split(TrainMeanCount), "the train split's mean count")
                      for name in ("mean", "majority"))
    feature_heads = True
    # Gat et al., NeurIPS 2021, §4.4 / Table 5: image and audio. An image's content is named by the row id (the same
    # image_id has a high- and a low-quality version); the audio clip is named by image_id.
    modalities = (Modality("image", ("id", "image")),
                  Modality("audio", ("image_id", "audio", "sample_rate", "audio_frames")))
    metric_labels = {"one_minus_mape": "1 - MAPE"}
    layout = "by-subset"  # Table 5: rows are image qualities
    generative = PeopleCount()
    head_target, head_kind = "count", "regression"

    def ids(self, table: pa.Table) -> list[str]:
        return table.column("id").to_pylist()

    def predictions_file(self, table: pa.Table, predictions: list) -> list[dict]:
        return [{"id": i, "count": float(c)} for i, c in zip(self.ids(table), predictions)]

    def per_sample(self, table: pa.Table, predictions: list, options=None) -> dict:
        """1 - APE per image (MAPE's complement); NaN for a zero count, which has no relative error."""
        errors = counting_errors(np.asarray(predictions), table.column("count").to_numpy())
        return {"one_minus_mape": 1.0 - errors["ape"]}

    def majority(self, train: pa.Table) -> TrainMeanCount:
        """The regression analogue of the majority vote: the training mean count."""
        return TrainMeanCount(train)

    def score(self, table: pa.Table, predictions: dict, coverage: Coverage, options=None) -> dict:
        ids = self.ids(table)
        keep = [i for i, k in enumerate(ids) if k in predictions]
        predicted = np.array([predictions[ids[i]] for i in keep])
        truth = table.column("count").to_numpy()[keep]
        quality = np.array(table.column("quality").to_pylist(), dtype=object)[keep]
        out = _rounded(counting_metrics(predicted, truth))
        out["by_quality"] = {q: _rounded(counting_metrics(predicted[quality == q], truth[quality == q]))
                             for q in sorted(set(quality.tolist()))}
        return {**out, "coverage": coverage.as_dict()}

    def clusters(self, table: pa.Table):
        from evaluator.stats.bootstrap import cluster_codes

        return cluster_codes(table.column("image_id").to_pylist()), "image"

    def resampling(self, table: pa.Table, predictions: dict, options=None):
        """MAE, RMSE, MAPE and 1 - MAPE, overall and per image quality; clustered by source image (its
        high- and low-quality rows show the same scene)."""
        from evaluator.stats.bootstrap import Ratio, Resampling

        ids = self.ids(table)
        keep = [i for i, k in enumerate(ids) if k in predictions]
        errors = counting_errors(np.array([predictions[ids[i]] for i in keep]), table.column("count").to_numpy()[keep])
        quality = np.array(table.column("quality").to_pylist(), dtype=object)[keep]
        valid = ~np.isnan(errors["ape"])
        ape = np.where(valid, errors["ape"], 0.0)
        ratios, derived = {}, {}
        for prefix, inside in [("", np.ones(len(keep))),
                               *((f"by_quality.{q}.", (quality == q).astype(np.float64))
                                 for q in sorted(set(quality.tolist())))]:
            ratios[f"{prefix}mae"] = Ratio(errors["ae"] * inside, inside, 1.0)
            ratios[f"_{prefix}mse"] = Ratio(errors["se"] * inside, inside, 1.0)
            ratios[f"{prefix}mape"] = Ratio(ape * inside, valid * inside, 1.0)
            derived[f"{prefix}rmse"] = lambda v, p=prefix: np.sqrt(v[f"_{p}mse"])
            derived[f"{prefix}one_minus_mape"] = lambda v, p=prefix: 1.0 - v[f"{p}mape"]
        return Resampling(*self.clusters(table.take(keep)), ratios, derived)

    def report(self, metrics: dict, title: str):
        cov = metrics["coverage"]
        rows = [[name, m["mae"], m["rmse"], m["mape"], m["one_minus_mape"]]
                for name, m in [("all", metrics), *metrics["by_quality"].items()]]
        md = [f"# DISCO evaluation: {title}", "", f"{cov['scored']:,} of {cov['expected']:,} images counted.", "",
              report_table(["Images", "MAE", "RMSE", "MAPE", "1 - MAPE"], rows), "",
              "MAPE is a fraction; images with a zero count have no relative error and are left out of it.", "",
              "![1 - MAPE per image quality](disco_quality.png)", ""]
        names = ["all", *metrics["by_quality"]]
        plot = FigureSpec(filename="disco_quality.png", title=f"{title}: DISCO 1 - MAPE", categories=names,
                          series={"1 - MAPE": [(m["one_minus_mape"] or 0.0) for m in
                                               [metrics, *metrics["by_quality"].values()]]})
        return "\n".join(md), [plot]
