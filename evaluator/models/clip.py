"""CLIP-style dual encoders (`CLIPModel`) as late-fusion scorers: the image tower and the text tower
run separately and meet in a cosine similarity, so the perceptual score can permute cached image
and text embeddings instead of re-encoding them.

* `ClipChoiceScorer` (VCR-Visor, the paper's CLIP baseline): score of a response = CLIP's logit of
  the image with "query response";
* `ClipAnswerScorer` (VQA / VQA-CP): zero-shot answering, the answer is the training-answer candidate
  whose "question answer" text is closest to the image.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pyarrow as pa

from core.model_files import load_part, load_pretrained
from evaluator.models.images import ImageFolder, image_sources, open_image
from evaluator.models.inference import Runner
from evaluator.models.model import LateFusion
from evaluator.models.options import ModelOptions

CANDIDATES = 50  # VQA answer candidates: the most frequent training answers


class ClipTowers:
    """The two towers of a CLIP checkpoint, batched by a Runner; embeddings are L2-normalised."""

    def __init__(self, path: str, options: ModelOptions):
        from transformers import AutoImageProcessor, AutoTokenizer, CLIPModel

        self.runner = Runner(options)
        self.tokenizer = load_part(AutoTokenizer, path, f"hf:{path}", "tokenizer")
        self.processor = load_part(AutoImageProcessor, path, f"hf:{path}", "image processor")
        self.model = self.runner.place(load_pretrained(CLIPModel, path, f"hf:{path}"))
        self.images = ImageFolder(options.images, blind=options.no_image)

    @property
    def logit_scale(self) -> float:
        return float(self.model.logit_scale.detach().exp())

    def _collate_images(self, images: list):
        return self.processor(images=images, return_tensors="pt")["pixel_values"]

    def _image_forward(self, pixels):
        return _normalise(self.model.get_image_features(pixel_values=pixels.to(self.runner.device)))

    def image_embeddings(self, table: pa.Table, key_column: str):
        import torch

        sources = image_sources(table, key_column, self.images)
        return torch.cat(self.runner.map(sources, open_image, self._collate_images, self._image_forward))

    def _collate_texts(self, texts: list[str]):
        return dict(self.tokenizer(texts, padding="max_length", truncation=True,
                                   max_length=self.model.config.text_config.max_position_embeddings,
                                   return_tensors="pt"))

    def _text_forward(self, batch: dict):
        return _normalise(self.model.get_text_features(**self.runner.to_device(batch)))

    def text_embeddings(self, texts: list[str]):
        import torch

        return torch.cat(self.runner.map(texts, str, self._collate_texts, self._text_forward))


def _normalise(x):
    x = x if not hasattr(x, "pooler_output") else x.pooler_output
    return (x / x.norm(dim=-1, keepdim=True)).float()


class ClipChoiceScorer(LateFusion):
    """Paired sub-questions (VCR-Visor, PMR-P, COSIM): the image tower reads the image (`img_fn`, or the
    embedded `image` that moves with it); the text tower reads the sub-question's text and each choice
    together, so permuting either re-encodes text."""

    def __init__(self, path: str, options: ModelOptions, choices: int, text_columns: tuple[str, ...]):
        self.towers, self.choices, self.text_columns = ClipTowers(path, options), choices, text_columns
        self.encoders = {"image": ("img_fn",), "text": (*text_columns, "choices")}

    def encode(self, name: str, table: pa.Table):
        if name == "image":
            return self.towers.image_embeddings(table, "img_fn")
        from evaluator.models.choice_scorers import sub_question_texts

        queries, choice_lists = sub_question_texts(table, self.text_columns), table.column("choices").to_pylist()
        texts = [f"{q} {c}" for q, choices in zip(queries, choice_lists) for c in choices]
        return self.towers.text_embeddings(texts).reshape(table.num_rows, self.choices, -1)

    def fuse(self, encodings: dict, table: pa.Table) -> list:
        import torch

        logits = self.towers.logit_scale * torch.einsum("nd,nkd->nk", encodings["image"], encodings["text"])
        return logits.cpu().numpy().astype(np.float64).tolist()


class ClipAnswerScorer(LateFusion):
    """VQA: image tower over the image, text tower over "question answer" for every candidate answer
    (the CANDIDATES most frequent training answers); the prediction is the best-scoring candidate."""

    def __init__(self, path: str, options: ModelOptions, train: pa.Table, image_key: str = "image_id"):
        self.towers = ClipTowers(path, options)
        counts = Counter(train.column("multiple_choice_answer").to_pylist())
        self.candidates = sorted(counts, key=lambda a: (-counts[a], a))[:CANDIDATES]
        self.image_key = image_key
        self.encoders = {"image": (image_key,), "question": ("question",)}

    def encode(self, name: str, table: pa.Table):
        if name == "image":
            return self.towers.image_embeddings(table, self.image_key)
        questions = table.column("question").to_pylist()
        unique = sorted(set(questions))
        where = {q: i for i, q in enumerate(unique)}
        texts = [f"{q} {a}" for q in unique for a in self.candidates]
        embeddings = self.towers.text_embeddings(texts).reshape(len(unique), len(self.candidates), -1)
        return embeddings[np.array([where[q] for q in questions], dtype=np.int64)]

    def fuse(self, encodings: dict, table: pa.Table) -> list[str]:
        import torch

        scores = torch.einsum("nd,nkd->nk", encodings["image"], encodings["question"])
        return [self.candidates[i] for i in scores.argmax(dim=1).tolist()]
