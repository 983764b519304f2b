"""PMR-P scoring: submissions `[{"id": "<pair_id>/<k>", "scores": [s0, s1, s2, s3]}]`, APQ and HPQ over
pairs (evaluator/paired.py, the VCR-Visor paper, §3.4)."""

from __future__ import annotations

from evaluator.base import Modality
from evaluator.paired import ChoiceLikelihood, PairedTask


class PMRPairsTask(PairedTask):
    name = "pmr-p"
    title = "PMR-P"
    images_folder = "pmr"
    choices = 4
    text_columns = ("premise",)
    # The image (file names), the premise and the four actions; the label stays.
    modalities = (Modality("image", ("img_fn", "metadata_fn")), Modality("premise", ("premise",)),
                  Modality("choices", ("choices", "rewritten")))
    # Each action's log-likelihood given the image and the premise.
    generative = ChoiceLikelihood("{premise}", ("premise",), ("img_fn", "metadata_fn", "premise", "choices"))
