"""`hf:` models that answer visual questions (VQA v2, VQA-CP, GQA-OOD): `ViltForQuestionAnswering`
checkpoints (e.g. dandelin/vilt-b32-finetuned-vqa) and CLIP dual encoders (zero-shot, see clip.py)."""

from __future__ import annotations

import pyarrow as pa

from core.model_files import load_part, load_pretrained
from evaluator.models.images import ImageFolder, image_sources, open_image
from evaluator.models.inference import Runner
from evaluator.models.menu import HfFamily, has_architecture, is_model_type, train_split
from evaluator.models.model import Model
from evaluator.models.options import ModelOptions


class ViltVQA(Model):
    """An early-fusion model: one transformer over question tokens and image patches; the answer is
    the label of the largest logit."""

    def __init__(self, path: str, options: ModelOptions, image_key: str):
        from transformers import AutoImageProcessor, AutoTokenizer, ViltForQuestionAnswering

        self.runner = Runner(options)
        self.tokenizer = load_part(AutoTokenizer, path, f"hf:{path}", "tokenizer")
        self.processor = load_part(AutoImageProcessor, path, f"hf:{path}", "image processor")
        self.model = self.runner.place(load_pretrained(ViltForQuestionAnswering, path, f"hf:{path}"))
        self.labels = [self.model.config.id2label[i] for i in range(self.model.config.num_labels)]
        self.max_length = self.model.config.max_position_embeddings
        self.images, self.image_key = ImageFolder(options.images, blind=options.no_image), image_key
        self.input_columns = ("question",) if options.no_image else ("question", image_key)

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


def vilt_vqa(image_key: str) -> HfFamily:
    """ViltForQuestionAnswering checkpoints, reading a row's image by `image_key`."""
    return HfFamily("ViltForQuestionAnswering", has_architecture("ViltForQuestionAnswering", "vilt"),
                    lambda task, name, options: ViltVQA(name, options, image_key), "needs --images")


def clip_answers(image_key: str) -> HfFamily:
    """CLIP dual encoders, zero-shot: the answer candidates are the train split's answers (clip.py)."""

    def build(task, name: str, options: ModelOptions):
        from evaluator.models.clip import ClipAnswerScorer

        return ClipAnswerScorer(name, options, train_split(options, task.config, f"hf:{name}"), image_key)

    return HfFamily("CLIP dual encoder", is_model_type("clip"), build, "answers from the train split; needs --images")
