"""Scorers for multiple-choice paired benchmarks (VCR-Visor: two choices; PMR-P, COSIM-Q/C: four): each
returns one score per choice.

The sub-question's text is its task's `text_columns` joined by spaces (VCR-Visor: the query; COSIM:
the change, then the question).

* `hf:` CLIP-style dual encoders (`CLIPModel`, evaluator/models/clip.py): score = CLIP's image-text
  logit of the image with "text response" (the VCR-Visor paper's CLIP baseline);
* `hf:` sequence-classification cross-encoders over (text, response), a text-only "blind" scorer:
  score = the single logit, or the logit of the label named entailment/positive, else the last one;
* `baseline:random`: uniform random scores.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from core.model_files import load_part, load_pretrained
from core.torch_runtime import torch_device
from evaluator.models.model import Model, row_random
from evaluator.models.options import ModelOptions


class RandomScores(Model):
    """Uniform random scores, seeded by the sub-question's id (independent of the other rows)."""

    input_columns = ("id",)

    def __init__(self, seed: int, choices: int):
        self.seed, self.choices = seed, choices

    def predict(self, table: pa.Table) -> list:
        return row_random(self.seed, table.column("id").to_pylist(), self.choices).tolist()


def sub_question_texts(table: pa.Table, text_columns: tuple[str, ...]) -> list[str]:
    """Per row, the sub-question's text: its `text_columns` joined by spaces."""
    columns = [table.column(c).to_pylist() for c in text_columns]
    return [" ".join(parts) for parts in zip(*columns)]


class CrossEncoderScorer(Model):
    def __init__(self, path: str, options: ModelOptions, choices: int, text_columns: tuple[str, ...]):
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        self.device, self.batch_size, self.choices = torch_device(options.device), options.batch_size, choices
        self.text_columns, self.input_columns = text_columns, (*text_columns, "choices")
        self.model = load_pretrained(AutoModelForSequenceClassification, path, f"hf:{path}").to(self.device).eval()
        self.tokenizer = load_part(AutoTokenizer, path, f"hf:{path}", "tokenizer")
        labels = {int(k): str(v).lower() for k, v in self.model.config.id2label.items()}
        named = [k for k, v in labels.items() if v.startswith(("entail", "positive"))]
        self.column = 0 if len(labels) == 1 else named[0] if named else max(labels)

    def predict(self, table: pa.Table) -> list:
        import torch

        texts = sub_question_texts(table, self.text_columns)
        pairs = [(t, c) for t, choices in zip(texts, table.column("choices").to_pylist()) for c in choices]
        scores = []
        with torch.inference_mode():
            for b in range(0, len(pairs), self.batch_size):
                batch = pairs[b:b + self.batch_size]
                enc = self.tokenizer([q for q, _ in batch], [r for _, r in batch], padding=True, truncation=True,
                                     return_tensors="pt").to(self.device)
                scores += self.model(**enc).logits[:, self.column].float().cpu().tolist()
        return np.array(scores).reshape(-1, self.choices).tolist()
