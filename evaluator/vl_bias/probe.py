"""What CounterBias (Zhang, Wang, Sang, ACM MM 2022, §3) asks of a model: a *bias probe* gives, for a text
with one [MASK] (and an image, or none), a log-score for each candidate word at the mask.

Two kinds of scores. *Normalised* scores are full-vocabulary log-probabilities of each word's first
token (Eq. 1's [MASK] probability: a masked LM at its mask, a generative VLM's next token where the
mask ends the text); a renormalised variant over the candidates is `--softmax targets`. *Relative*
scores (a generative VLM's log-likelihood of the whole caption with the word filled in, where the mask
is mid-sentence; a dual encoder's image-caption similarity) are only a probability once renormalised
over the candidates: the row's target list for P(T | V, L), the row's bias pair for P(B | V).

Implementations: masked LMs (`evaluator.vl_bias.mlm`: ViLT, text-only), generative image-text-to-text
VLMs (`evaluator.vl_bias.generative`), CLIP / SigLIP (`evaluator.vl_bias.dual_encoder`); `py:` factories
return their own. `evaluator.vl_bias.families.load_probe` picks by the checkpoint's config.
"""

from __future__ import annotations

import hashlib
import json
from abc import ABC, abstractmethod

import numpy as np

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


def unpad(pixels, pixel_mask) -> list:
    """The images of a padded batch at their own sizes (the inverse of `pad_images`)."""
    out = []
    for x, m in zip(pixels, pixel_mask):
        h, w = int(m[:, 0].sum()), int(m[0].sum())
        out.append(x[:, :h, :w])
    return out


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


class BiasProbe(ABC):
    """A model CounterBias measures. `vision`: it reads images (`VisionBiasProbe`), so Eq. 3's attack and
    the visual measures apply. `fingerprint` names the weights and processing (the counterfactual
    cache's key), `bf16` whether it runs in bfloat16, `batch_size` the attack's batch."""

    vision = False
    fingerprint: str
    bf16 = False
    batch_size = 32
    name: str

    @abstractmethod
    def score(self, queries: list[tuple[str, object]], candidates: list[tuple[str, ...]]) -> list[np.ndarray]:
        """Per query (a text with one [MASK], and an image or None), the log-scores of its candidate words
        at the mask, in the order of `candidates[i]`."""

    def bias_prompt(self, split_prompt: str) -> str:
        """The prompt P(B | V) is read from (Eq. 2): the split's, unless the model asks it differently."""
        return split_prompt

    def normalised(self, text: str) -> bool:
        """Whether `score` gives full-vocabulary log-probabilities for this text (else relative scores,
        renormalised over the candidates)."""
        return True

    def notes(self, words: list[str]) -> dict:
        """How the words are scored, for the report: {"multi_piece": {word: pieces}, "shared_first_piece":
        [[words...]], "scoring": [sentences]}."""
        return {"multi_piece": {}, "shared_first_piece": [], "scoring": []}


class VisionBiasProbe(BiasProbe):
    """A probe that reads images: what the PGD attack (Eq. 3) and the image-free baseline of Eq. 12 need."""

    vision = True
    attack_unsupported: str | None = None  # why Eq. 3's attack cannot run on this model (None: it can)

    @property
    @abstractmethod
    def device(self):
        """The torch device the attack's tensors go to."""

    @abstractmethod
    def image_tensor(self, image):
        """A PIL image as the model sees it: (3, H, W) float32 in [0, 1] after the model's own resize (the
        attack's pixel space; normalisation happens inside the forward pass)."""

    @abstractmethod
    def blank_image(self):
        """V_none of Eq. 12: an image tensor, or None where the model can be asked without an image."""

    @abstractmethod
    def attack_objective(self, pixels, pixel_mask, text: str, words: tuple[str, ...]):
        """fn(x) -> differentiable (B, len(words)) log-scores of `words` at the mask of `text` for the
        padded batch x (pixels in [0, 1], `pixel_mask` marking the real pixels), as `score` gives them."""
