"""Masked-LM adapters for CounterBias (Zhang, Wang, Sang, ACM MM 2022, §3): log-probabilities of chosen
words at the [MASK] of a text, with an image (`ViltForMaskedLM`, e.g. `hf:dandelin/vilt-b32-mlm`) or without one (any
transformers masked LM, e.g. `hf:bert-base-uncased`, for Table 3's comparison).

Images are tensors in [0, 1] after the model's own resize and rescale (the space the L-infinity
attack budget is measured in); normalisation happens inside the forward pass, so gradients reach
the pixels. A word is scored by its first word piece (the authors' code does the same); `word_ids`
reports how many pieces each word has.
"""

from __future__ import annotations

import hashlib
import json
from abc import ABC, abstractmethod

import numpy as np

from builders.model_files import load_pretrained
from core.errors import ModelError
from evaluator.models.inference import Runner
from evaluator.models.options import ModelOptions
from evaluator.models.spec import hf_config, load_py_model, parse_spec

MASK = "[MASK]"


def pad_images(images: list):
    """(B, 3, H, W) zero-padded to the largest height and width, and the (B, H, W) pixel mask."""
    import torch

    h, w = max(x.shape[1] for x in images), max(x.shape[2] for x in images)
    batch = torch.zeros(len(images), 3, h, w, dtype=images[0].dtype)
    mask = torch.zeros(len(images), h, w, dtype=torch.long)
    for i, x in enumerate(images):
        batch[i, :, : x.shape[1], : x.shape[2]] = x
        mask[i, : x.shape[1], : x.shape[2]] = 1
    return batch, mask


def fingerprint(model, extra: dict) -> str:
    """sha256 of the model class, its configuration, `extra` (e.g. the image processor) and every
    weight: a changed checkpoint never reuses cached counterfactual images."""
    import torch

    digest = hashlib.sha256(type(model).__name__.encode())
    digest.update(json.dumps([model.config.to_dict(), extra], sort_keys=True, default=str).encode())
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().view(-1).view(dtype=torch.uint8).numpy())
    return digest.hexdigest()


class MaskedLM(ABC):
    """A CounterBias model: `score(queries, ids)` gives full-vocabulary log-probabilities of the token
    `ids` at each query's [MASK]; `word_ids` the first word piece of each word. `vision`: it reads
    images (`VisionMaskedLM`), so Eq. 3's attack and the visual measures apply. `fingerprint` names the
    weights and processor (the counterfactual cache's key), `bf16` whether it runs in bfloat16. Shared
    text handling: the [MASK] placeholder becomes the tokenizer's mask token, exactly one per text."""

    vision = False
    fingerprint: str
    bf16 = False

    def __init__(self, options: ModelOptions):
        self.runner = Runner(options)
        self.bf16 = options.bf16

    @abstractmethod
    def score(self, queries: list[tuple[str, object]], ids: list[int]) -> np.ndarray:
        """(len(queries), len(ids)) log-probabilities at the mask of each (text, image or None) query."""

    def word_ids(self, words) -> dict[str, tuple[int, int]]:
        """word -> (id of its first word piece, number of pieces)."""
        out = {}
        for word in words:
            ids = self.tokenizer(" " + word, add_special_tokens=False)["input_ids"]
            if not ids:
                raise ModelError(f"{self.name}: the tokenizer gives no token for '{word}'")
            out[word] = (ids[0], len(ids))
        return out

    def tokenize(self, texts: list[str]) -> dict:
        texts = [t.replace(MASK, self.tokenizer.mask_token) for t in texts]
        enc = self.tokenizer(texts, padding=True, truncation=True, max_length=self.max_length, return_tensors="pt")
        positions = enc["input_ids"] == self.tokenizer.mask_token_id
        counts = positions.sum(dim=1)
        if (counts != 1).any():
            bad = texts[int((counts != 1).nonzero()[0, 0])]
            raise ModelError(f"{self.name}: text '{bad}' must have exactly one mask token")
        enc["mask_index"] = positions.float().argmax(dim=1)
        return dict(enc)

    @staticmethod
    def gather(logits, mask_index, ids):
        """Full-vocabulary log-softmax at each row's mask position, at the token `ids`."""
        import torch

        rows = torch.arange(logits.shape[0], device=logits.device)
        return torch.log_softmax(logits[rows, mask_index].float(), dim=-1)[:, ids]


class VisionMaskedLM(MaskedLM):
    """A masked LM that reads an image: what the PGD attack (Eq. 3) and the blank image of Eq. 12 need."""

    vision = True

    @abstractmethod
    def image_tensor(self, image):
        """A PIL image as the model sees it: (3, H, W) float32 in [0, 1] (the attack's pixel space)."""

    @abstractmethod
    def blank_image(self):
        """V_none of Eq. 12."""

    @abstractmethod
    def log_probs_at_mask(self, pixels, pixel_mask, text: dict, ids):
        """Differentiable (B, len(ids)) log-probabilities at the mask for pixels in [0, 1]."""


class ViltMaskedLM(VisionMaskedLM):
    """`ViltForMaskedLM`: one transformer over text tokens and image patches; the MLM head scores the
    text positions."""

    def __init__(self, path: str, options: ModelOptions):
        import torch
        from transformers import AutoImageProcessor, AutoTokenizer, ViltForMaskedLM

        super().__init__(options)
        self.name = f"hf:{path}"
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.processor = AutoImageProcessor.from_pretrained(path)
        self.model = self.runner.place(load_pretrained(ViltForMaskedLM, path, self.name)).requires_grad_(False)
        self.max_length = self.model.config.max_position_embeddings
        self.mean = torch.tensor(self.processor.image_mean, dtype=torch.float32).view(1, 3, 1, 1)
        self.std = torch.tensor(self.processor.image_std, dtype=torch.float32).view(1, 3, 1, 1)
        self.fingerprint = fingerprint(self.model, self.processor.to_dict())

    def image_tensor(self, image):
        """A PIL image resized and rescaled by the model's processor: (3, H, W) float32 in [0, 1]."""
        out = self.processor(images=[image], do_normalize=False, do_pad=False, return_tensors="pt")
        return out["pixel_values"][0].float()

    def blank_image(self):
        """V_none of Eq. 12: a square image of the processor's size at the mean pixel value (zero after
        normalisation), since ViLT needs image patches."""
        side = self.processor.size["shortest_edge"]
        return self.mean.view(3, 1, 1).expand(3, side, side).clone()

    def log_probs_at_mask(self, pixels, pixel_mask, text: dict, ids):
        """Differentiable (B, len(ids)) log-probabilities at the mask for pixels in [0, 1] (B, 3, H, W)."""
        import torch

        device = self.runner.device
        x = (pixels.to(device) - self.mean.to(device)) / self.std.to(device)
        x = x * pixel_mask.to(device).unsqueeze(1)  # padding is zero after normalisation, as the processor pads
        with torch.random.fork_rng(devices=[]), torch.autocast(device.type, dtype=torch.bfloat16, enabled=self.bf16):
            torch.manual_seed(0)  # ViLT permutes its patches with torch.multinomial: fixed, so runs repeat exactly
            logits = self.model(input_ids=text["input_ids"].to(device),
                                attention_mask=text["attention_mask"].to(device),
                                token_type_ids=text["token_type_ids"].to(device) if "token_type_ids" in text else None,
                                pixel_values=x, pixel_mask=pixel_mask.to(device)).logits
        return self.gather(logits, text["mask_index"].to(device), torch.as_tensor(ids, device=device))

    def _collate(self, items: list) -> dict:
        pixels, mask = pad_images([image for _, image in items])
        return {"text": self.tokenize([t for t, _ in items]), "pixels": pixels, "mask": mask}

    def score(self, queries: list[tuple[str, object]], ids: list[int]) -> np.ndarray:
        """(len(queries), len(ids)) full-vocabulary log-probabilities; a query is (text, image tensor)."""
        def forward(b):
            return self.log_probs_at_mask(b["pixels"], b["mask"], b["text"], ids).cpu().numpy()

        batches = self.runner.map(queries, lambda q: q, self._collate, forward)
        return np.concatenate(batches) if batches else np.zeros((0, len(ids)))


class TextMaskedLM(MaskedLM):
    """A text-only masked LM (`AutoModelForMaskedLM`): only Eq. 12-13's language-only bias applies."""

    def __init__(self, path: str, options: ModelOptions):
        from transformers import AutoModelForMaskedLM, AutoTokenizer

        super().__init__(options)
        self.name = f"hf:{path}"
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        try:
            model = load_pretrained(AutoModelForMaskedLM, path, self.name)
        except ModelError as exc:
            if "Unrecognized configuration class" not in str(exc):
                raise
            raise ModelError(f"hf:{path}: not a masked language model (AutoModelForMaskedLM does not know its "
                             "config)") from None
        self.model = self.runner.place(model).requires_grad_(False)
        self.max_length = min(self.tokenizer.model_max_length, 512)
        self.fingerprint = fingerprint(self.model, {})

    def score(self, queries: list[tuple[str, object]], ids: list[int]) -> np.ndarray:
        import torch

        def forward(text: dict) -> np.ndarray:
            inputs = {k: v.to(self.runner.device) for k, v in text.items() if k != "mask_index"}
            logits = self.model(**inputs).logits
            return self.gather(logits, text["mask_index"].to(self.runner.device),
                               torch.as_tensor(ids, device=self.runner.device)).cpu().numpy()

        batches = self.runner.map([t for t, _ in queries], lambda t: t, self.tokenize, forward)
        return np.concatenate(batches) if batches else np.zeros((0, len(ids)))


def load_masked_lm(spec: str, options: ModelOptions):
    """`hf:` ViLT MLM or text masked LM, or `py:module:factory` returning a `MaskedLM`."""
    kind, name = parse_spec(spec)
    if kind == "py":
        model = load_py_model(name, "score", "score(queries, ids)")
        if not isinstance(model, MaskedLM):
            raise ModelError(f"--model {spec}: the factory's object is not an evaluator.models.mlm.MaskedLM")
        return model
    if kind != "hf":
        raise ModelError(f"--model {spec}: CounterBias measures a masked LM: hf:<hub id or path> or "
                         "py:<module>:<factory>")
    config = hf_config(name)
    if config.model_type == "vilt":
        if "ViltForMaskedLM" not in (config.architectures or []):
            raise ModelError(f"hf:{name}: a ViLT checkpoint without its masked-LM head "
                             f"({', '.join(config.architectures or ['no architecture'])}); "
                             "use e.g. dandelin/vilt-b32-mlm")
        return ViltMaskedLM(name, options)
    return TextMaskedLM(name, options)
