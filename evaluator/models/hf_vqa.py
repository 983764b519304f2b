"""`hf:` models that answer visual questions (VQA v2, VQA-CP, GQA-OOD): `ViltForQuestionAnswering`
checkpoints (e.g. dandelin/vilt-b32-finetuned-vqa) and CLIP dual encoders (zero-shot, see clip.py)."""

from __future__ import annotations

import pyarrow as pa

from builders.model_files import load_pretrained
from core.errors import ModelError
from evaluator.images import ImageFolder, image_sources, open_image
from evaluator.models import Model, ModelOptions, hf_config
from evaluator.models.inference import Runner


class ViltVQA(Model):
    """An early-fusion model: one transformer over question tokens and image patches; the answer is
    the label of the largest logit."""

    def __init__(self, path: str, options: ModelOptions, image_key: str):
        from transformers import AutoImageProcessor, AutoTokenizer, ViltForQuestionAnswering

        self.runner = Runner(options)
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.processor = AutoImageProcessor.from_pretrained(path)
        self.model = self.runner.place(load_pretrained(ViltForQuestionAnswering, path, f"hf:{path}"))
        self.labels = [self.model.config.id2label[i] for i in range(self.model.config.num_labels)]
        self.max_length = self.model.config.max_position_embeddings
        self.images, self.image_key = ImageFolder(options.images), image_key
        self.input_columns = ("question", image_key)

    def _load(self, item):
        question, source = item
        return question, open_image(source)

    def _collate(self, items: list) -> dict:
        text = self.tokenizer([q for q, _ in items], padding="max_length", truncation=True,
                              max_length=self.max_length, return_tensors="pt")
        pixels = self.processor(images=[im for _, im in items], return_tensors="pt")
        return {**text, **pixels}

    def _forward(self, batch: dict) -> list[int]:
        return self.model(**self.runner.to_device(batch)).logits.float().argmax(dim=1).tolist()

    def predict(self, table: pa.Table) -> list[str]:
        items = list(zip(table.column("question").to_pylist(), image_sources(table, self.image_key, self.images)))
        return [self.labels[i] for batch in self.runner.map(items, self._load, self._collate, self._forward)
                for i in batch]


def load_vqa_model(path: str, options: ModelOptions, train, image_key: str = "image_id"):
    """`train` returns the training split (CLIP's answer candidates), or is None where there is none."""
    config = hf_config(path)
    if config.model_type == "vilt" and "ViltForQuestionAnswering" in (config.architectures or []):
        return ViltVQA(path, options, image_key)
    if config.model_type == "clip":
        if train is None:
            raise ModelError(f"hf:{path}: a CLIP scorer takes its answer candidates from a training split; "
                             "this benchmark has none")
        from evaluator.models.clip import ClipAnswerScorer

        return ClipAnswerScorer(path, options, train(), image_key)
    raise ModelError(f"hf:{path}: a {config.model_type} model is neither a ViltForQuestionAnswering "
                     "checkpoint nor a CLIP dual encoder")
