"""CounterBias (Zhang, Wang, Sang, ACM MM 2022, §3) for dual encoders (CLIP, SigLIP): a dual encoder has no [MASK]
to fill, so a word's score is the image-caption similarity of the caption with the word in the mask's
place, logit_scale x cos(image, text), the logit CLIP's own zero-shot classification softmaxes.

- P(T | V, L): the softmax over the row's target list of the captions' logits (the paper's Eq. 1
  restricted to the targets, as `--softmax targets` is for a masked LM; a dual encoder has no
  full-vocabulary probability).
- P(B | V): the softmax over the image's bias pair of the bias prompt's logits ("A man is in the
  picture" against "A woman is in the picture").
- V_cf (Eq. 3): PGD through the image tower on the pixels after the processor's resize and crop, its
  normalisation inside the differentiable forward.
- Eq. 12's image-free query: a dual encoder needs an image, so V_none is a blank image at the
  processor's mean pixel value (zero after normalisation), as for ViLT.
"""

from __future__ import annotations

import numpy as np

from core.model_files import load_part, load_pretrained
from evaluator.models.inference import Runner
from evaluator.models.options import ModelOptions
from evaluator.vl_bias.pixels import PlainPixels
from evaluator.vl_bias.probe import MASK, VisionBiasProbe, fingerprint, unpad


def _unit(x):
    x = (x if not hasattr(x, "pooler_output") else x.pooler_output).float()
    return x / x.norm(dim=-1, keepdim=True)


class DualEncoderProbe(VisionBiasProbe):
    """A CLIP or SigLIP checkpoint (`AutoModel`) with its tokenizer and image processor."""

    def __init__(self, path: str, config, options: ModelOptions):
        from transformers import AutoImageProcessor, AutoModel, AutoTokenizer

        self.name = f"hf:{path}"
        self.runner = Runner(options)
        self.bf16 = options.bf16
        self.batch_size = options.batch_size
        self.tokenizer = load_part(AutoTokenizer, path, self.name, "tokenizer")
        self.processor = load_part(AutoImageProcessor, path, self.name, "image processor")
        self.model = self.runner.place(load_pretrained(AutoModel, path, self.name)).requires_grad_(False)
        self.pixels = PlainPixels(self.processor)  # resize and crop outside, normalisation inside the forward
        self.max_length = config.text_config.max_position_embeddings
        self.fingerprint = fingerprint(self.model, self.processor.to_dict())
        self._texts: dict[str, object] = {}  # caption -> unit text embedding

    @property
    def device(self):
        return self.runner.device

    def normalised(self, text: str) -> bool:
        return False

    def notes(self, words: list[str]) -> dict:
        return {"multi_piece": {}, "shared_first_piece": [],
                "scoring": ["a word's score: logit_scale x cos(image, caption with the word in the [MASK]'s place); "
                            "probabilities: the softmax over the row's target list, or over the image's bias pair",
                            "no image (Eq. 12): a blank image at the processor's mean pixel value"]}

    # -- images ---------------------------------------------------------------------------------
    def image_tensor(self, image):
        return self.pixels.image_tensor(image)

    def blank_image(self):
        from PIL import Image

        side = self.image_tensor(Image.new("RGB", (8, 8))).shape[1:]
        return self.pixels.mean.expand(3, *side).clone()

    def _image_features(self, images: list):
        """Unit image embeddings of (3, H, W) images in [0, 1], normalised inside the forward pass."""
        import torch

        x = self.pixels.pixel_values([im.to(self.device) for im in images])
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16):
            return _unit(self.model.get_image_features(pixel_values=x))

    @property
    def _scale(self):
        return self.model.logit_scale.exp().float()

    # -- texts ----------------------------------------------------------------------------------
    def _text_embeddings(self, texts: list[str]):
        """Unit embeddings of the texts, each encoded once per run, in batches of exactly `batch_size` rows
        (a short batch is filled with copies of its last text): a text's embedding does not depend on
        which texts shared its batch, so a rerun whose counterfactual images come from the cache
        measures exactly what the first run did."""
        import torch

        todo = [t for t in dict.fromkeys(texts) if t not in self._texts]
        for start in range(0, len(todo), self.batch_size):
            batch = todo[start:start + self.batch_size]
            enc = self.tokenizer(batch + batch[-1:] * (self.batch_size - len(batch)), padding="max_length",
                                 truncation=True, max_length=self.max_length, return_tensors="pt")
            with torch.inference_mode():
                features = _unit(self.model.get_text_features(**self.runner.to_device(dict(enc))))
            self._texts.update(zip(batch, features))
        return torch.stack([self._texts[t] for t in texts])

    def score(self, queries: list[tuple[str, object]], candidates: list[tuple[str, ...]]) -> list[np.ndarray]:
        """Per query, its candidates' logits; each distinct image and caption is encoded once."""
        import torch

        groups: dict[int, list[int]] = {}
        for k, (_, image) in enumerate(queries):
            groups.setdefault(id(image), []).append(k)
        out: list = [None] * len(queries)
        with torch.inference_mode():
            order = list(groups.values())
            for start in range(0, len(order), self.batch_size):
                chunk = order[start:start + self.batch_size]
                features = self._image_features([queries[idx[0]][1] for idx in chunk])
                for feature, idx in zip(features, chunk):
                    for k in idx:
                        texts = self._text_embeddings([queries[k][0].replace(MASK, w) for w in candidates[k]])
                        out[k] = (self._scale * texts @ feature).double().cpu().numpy()
        return out

    def attack_objective(self, pixels, pixel_mask, text: str, words: tuple[str, ...]):
        texts = self._text_embeddings([text.replace(MASK, w) for w in words]).to(self.device)
        return lambda x: self._scale * self._image_features(unpad(x, pixel_mask)) @ texts.T
