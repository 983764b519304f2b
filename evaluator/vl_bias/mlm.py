"""Masked-LM bias probes for CounterBias (Zhang, Wang, Sang, ACM MM 2022, §3): full-vocabulary
log-probabilities of candidate words at the [MASK] of a text, with an image (`ViltForMaskedLM`, e.g.
`hf:dandelin/vilt-b32-mlm`) or without one (any transformers masked LM, e.g. `hf:bert-base-uncased`,
for Table 3's comparison).

Images are tensors in [0, 1] after the model's own resize and rescale (the space the L-infinity
attack budget is measured in); normalisation happens inside the forward pass, so gradients reach
the pixels. A word is scored by its first word piece (the authors' code does the same); `notes`
reports words of several pieces and words that share their first piece.
"""

from __future__ import annotations

from abc import abstractmethod

import numpy as np

from core.errors import ModelError
from core.model_files import load_part, load_pretrained
from evaluator.models.inference import Runner
from evaluator.models.options import ModelOptions
from evaluator.vl_bias.probe import MASK, BiasProbe, VisionBiasProbe, fingerprint, pad_images


class MaskedLM(BiasProbe):
    """Shared text handling of masked LMs: the [MASK] placeholder becomes the tokenizer's mask token,
    exactly one per text; a word is its first word piece."""

    def __init__(self, options: ModelOptions):
        self.runner = Runner(options)
        self.bf16 = options.bf16
        self.batch_size = options.batch_size

    @property
    def device(self):
        return self.runner.device

    @abstractmethod
    def log_probs(self, queries: list[tuple[str, object]], ids: list[int]) -> np.ndarray:
        """(len(queries), len(ids)) full-vocabulary log-probabilities at each query's mask."""

    def word_ids(self, words) -> dict[str, tuple[int, int]]:
        """word -> (id of its first word piece, number of pieces)."""
        out = {}
        for word in words:
            ids = self.tokenizer(" " + word, add_special_tokens=False)["input_ids"]
            if not ids:
                raise ModelError(f"{self.name}: the tokenizer gives no token for '{word}'")
            out[word] = (ids[0], len(ids))
        return out

    def notes(self, words: list[str]) -> dict:
        pieces = self.word_ids(words)
        shared: dict[int, list[str]] = {}
        for word, (i, _) in pieces.items():
            shared.setdefault(i, []).append(word)
        return {"multi_piece": {w: n for w, (_, n) in sorted(pieces.items()) if n > 1},
                "shared_first_piece": sorted(sorted(ws) for ws in shared.values() if len(ws) > 1),
                "scoring": ["P(word) at the [MASK]: the full-vocabulary probability of its first word piece"]}

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

    def score(self, queries: list[tuple[str, object]], candidates: list[tuple[str, ...]]) -> list[np.ndarray]:
        """Each query's candidates' log-probabilities, from one pass gathering every candidate's first piece."""
        words = sorted({w for c in candidates for w in c})
        pieces = self.word_ids(words)
        ids = sorted({i for i, _ in pieces.values()})
        column = {w: ids.index(pieces[w][0]) for w in words}
        matrix = self.log_probs(queries, ids) if queries else np.zeros((0, len(ids)))
        index: dict[tuple, np.ndarray] = {}
        return [matrix[k, index.setdefault(c, np.array([column[w] for w in c], dtype=np.int64))]
                for k, c in enumerate(candidates)]


class ViltMaskedLM(MaskedLM, VisionBiasProbe):
    """`ViltForMaskedLM`: one transformer over text tokens and image patches; the MLM head scores the
    text positions."""

    def __init__(self, path: str, options: ModelOptions):
        import torch
        from transformers import AutoImageProcessor, AutoTokenizer, ViltForMaskedLM

        super().__init__(options)
        self.name = f"hf:{path}"
        self.tokenizer = load_part(AutoTokenizer, path, self.name, "tokenizer")
        self.processor = load_part(AutoImageProcessor, path, self.name, "image processor")
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

    def logits(self, pixels, pixel_mask, text: dict):
        """Differentiable (B, tokens, vocab) MLM logits for pixels in [0, 1] (B, 3, H, W) and a tokenized text."""
        import torch

        device = self.runner.device
        x = (pixels.to(device) - self.mean.to(device)) / self.std.to(device)
        x = x * pixel_mask.to(device).unsqueeze(1)  # padding is zero after normalisation, as the processor pads
        with torch.random.fork_rng(devices=[]), torch.autocast(device.type, dtype=torch.bfloat16, enabled=self.bf16):
            torch.manual_seed(0)  # ViLT permutes its patches with torch.multinomial: fixed, so runs repeat exactly
            return self.model(input_ids=text["input_ids"].to(device),
                              attention_mask=text["attention_mask"].to(device),
                              token_type_ids=text["token_type_ids"].to(device) if "token_type_ids" in text else None,
                              pixel_values=x, pixel_mask=pixel_mask.to(device)).logits

    def log_probs_at_mask(self, pixels, pixel_mask, text: dict, ids):
        """Differentiable (B, len(ids)) log-probabilities at the mask for pixels in [0, 1] (B, 3, H, W)."""
        import torch

        device = self.runner.device
        return self.gather(self.logits(pixels, pixel_mask, text), text["mask_index"].to(device),
                           torch.as_tensor(ids, device=device))

    def attack_objective(self, pixels, pixel_mask, text: str, words: tuple[str, ...]):
        pieces = self.word_ids(words)
        ids = [pieces[w][0] for w in words]
        enc = self.tokenize([text] * len(pixels))
        mask = pixel_mask.to(self.runner.device)
        return lambda x: self.log_probs_at_mask(x, mask, enc, ids)

    def _collate(self, items: list) -> dict:
        pixels, mask = pad_images([image for _, image in items])
        return {"text": self.tokenize([t for t, _ in items]), "pixels": pixels, "mask": mask}

    def log_probs(self, queries: list[tuple[str, object]], ids: list[int]) -> np.ndarray:
        """A query is (text, image tensor)."""
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
        self.tokenizer = load_part(AutoTokenizer, path, self.name, "tokenizer")
        try:
            model = load_pretrained(AutoModelForMaskedLM, path, self.name)
        except ModelError as exc:
            if "Unrecognized configuration class" not in str(exc):
                raise
            raise ModelError(f"hf:{path}: not a masked language model (AutoModelForMaskedLM does not know its "
                             "config), nor a generative VLM, CLIP or SigLIP") from None
        self.model = self.runner.place(model).requires_grad_(False)
        self.max_length = min(self.tokenizer.model_max_length, 512)
        self.fingerprint = fingerprint(self.model, {})

    def log_probs(self, queries: list[tuple[str, object]], ids: list[int]) -> np.ndarray:
        import torch

        def forward(text: dict) -> np.ndarray:
            inputs = {k: v.to(self.runner.device) for k, v in text.items() if k != "mask_index"}
            logits = self.model(**inputs).logits
            return self.gather(logits, text["mask_index"].to(self.runner.device),
                               torch.as_tensor(ids, device=self.runner.device)).cpu().numpy()

        batches = self.runner.map([t for t, _ in queries], lambda t: t, self.tokenize, forward)
        return np.concatenate(batches) if batches else np.zeros((0, len(ids)))
