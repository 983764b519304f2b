"""COSIM-Q and COSIM-C scoring: submissions `[{"id": "<pair_id>/<k>", "scores": [s0, s1, s2, s3]}]`,
APQ and HPQ over pairs (evaluator/paired.py, the VCR-Visor paper, §3.4)."""

from __future__ import annotations

from evaluator.base import Modality
from evaluator.paired import ChoiceLikelihood, PairedTask

CHANGE_PROMPT = "Imagine this change to the scene: {change}\n{question}"


class CoSImPairsTask(PairedTask):
    choices = 4
    text_columns = ("change", "question")
    images_folder = "cosim"
    # The image, the question, the counterfactual change and the four choices; the label stays.
    modalities = (Modality("image", ("img_fn",)), Modality("question", ("question",)),
                  Modality("change", ("change",)), Modality("choices", ("choices", "rewritten")))
    # Each choice's log-likelihood given the image, the change and the question.
    generative = ChoiceLikelihood(CHANGE_PROMPT, ("change", "question"), ("img_fn", "question", "change", "choices"))


class CoSImQuestionTask(CoSImPairsTask):
    name = "cosim-q"
    title = "COSIM-Q"


class CoSImChangeTask(CoSImPairsTask):
    name = "cosim-c"
    title = "COSIM-C"
