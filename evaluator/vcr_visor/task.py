"""VCR-Visor scoring: submissions `[{"id": "<pair_id>/<k>", "scores": [s0, s1]}]`, APQ and HPQ per
reasoning type (evaluator/paired.py, the VCR-Visor paper, §3.4)."""

from __future__ import annotations

from evaluator.base import Modality
from evaluator.paired import ChoiceLikelihood, PairedTask


class VCRVisorTask(PairedTask):
    name = "vcr-visor"
    title = "VCR-Visor"
    images_folder = "vcr1images"
    choices = 2
    types = ("causal", "temporal", "explanatory")
    # Image (file names, or the embedded image of a build with --images), query, and the two
    # responses; the label (which response is right) stays with its sample.
    modalities = (Modality("image", ("img_fn", "metadata_fn", "image")), Modality("query", ("query",)),
                  Modality("response", ("choices", "rewritten")))
    label_source = "vcr"  # each sub-question is a VCR val item

    def source_label_keys(self, table):
        """Causal and temporal sub-questions come from VCR's Q->A, explanatory ones from its QA->R."""
        return [(a, "qa_r" if t == "explanatory" else "q_a") for a, t in
                zip(table.column("annot_id").to_pylist(), table.column("reasoning_type").to_pylist())]

    # Each response's log-likelihood given the image and the query.
    generative = ChoiceLikelihood("{query}", ("query",), ("img_fn", "metadata_fn", "query", "choices"))
