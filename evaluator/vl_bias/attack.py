"""Counterfactual images by a model-specific adversarial attack (Zhang, Wang, Sang, ACM MM 2022, §3, Eq. 3): projected
gradient descent on the pixels of the factual image V_f, inside the L-infinity ball of radius eps
(and the valid pixel range [0, 1]), minimising the cross-entropy between the model's [MASK]
prediction for the bias prompt and the counterfactual gender word B'. Batched: the loss is a sum of
per-image losses, so each image's gradient is its own. Counterfactual images are cached on disk by
(image bytes, model fingerprint, prompt, B', attack parameters)."""

from __future__ import annotations

import hashlib
import io
import json
import os
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from core.errors import ParamsError


@dataclass(frozen=True)
class PGD:
    """eps and step size are in pixel units of [0, 1] (8/255: the common L-infinity budget); the step
    size defaults to 2.5 eps / steps (Madry et al.), so that the walk can reach the ball's surface."""

    eps: float = 8 / 255
    steps: int = 10
    step_size: float | None = None

    def __post_init__(self):
        if not self.eps > 0 or self.eps >= 1:
            raise ParamsError(f"--eps {self.eps}: the L-infinity budget must be in (0, 1) (pixels in [0, 1])")
        if self.steps < 1:
            raise ParamsError(f"--steps {self.steps}: expected at least 1")
        if self.step_size is not None and not 0 < self.step_size < float("inf"):
            raise ParamsError(f"--step-size {self.step_size}: expected a positive number")

    @property
    def alpha(self) -> float:
        return self.step_size if self.step_size is not None else 2.5 * self.eps / self.steps

    def describe(self) -> dict:
        return {**asdict(self), "step_size": self.alpha}


def pgd_attack(log_probs_fn, pixels, valid, target_ids, attack: PGD):
    """PGD (Eq. 3): x <- clip_{[0,1]}(clip_{x_f +- eps}(x - alpha sign(grad CE(log_probs_fn(x), B')))),
    starting at x_f; `valid` (B, H, W) marks real pixels (padding never moves). `log_probs_fn(x)` gives
    (B, vocab-or-candidates) log-probabilities, `target_ids` the column of each B'."""
    import torch

    x_f = pixels.detach()
    keep = valid.unsqueeze(1).to(x_f.dtype)
    rows = torch.arange(len(x_f), device=x_f.device)
    target = torch.as_tensor(target_ids, device=x_f.device)
    x = x_f.clone()
    for _ in range(attack.steps):
        x.requires_grad_(True)
        with torch.enable_grad():
            loss = -log_probs_fn(x)[rows, target].sum()
            (grad,) = torch.autograd.grad(loss, x)
        step = x.detach() - attack.alpha * grad.sign() * keep
        x = torch.clamp(x_f + torch.clamp(step - x_f, -attack.eps, attack.eps), 0.0, 1.0).detach()
    return x


class CounterfactualCache:
    """Counterfactual image tensors as .npy files under FOLDER/<key[:2]>/<key>-<sha256 of content>.npy,
    written atomically; a file that does not match its checksum is never used (warned, removed,
    recomputed)."""

    def __init__(self, folder: Path | None):
        self.folder = None if folder is None else Path(folder)
        self.hits = self.misses = 0

    @staticmethod
    def key(image_bytes: bytes, model_fingerprint: str, prompt: str, target: str, attack: PGD, bf16: bool) -> str:
        blob = json.dumps({"image": hashlib.sha256(image_bytes).hexdigest(), "model": model_fingerprint,
                           "prompt": prompt, "target": target, "attack": attack.describe(), "bf16": bf16},
                          sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()

    def _load(self, key: str):
        import numpy as np

        for path in sorted((self.folder / key[:2]).glob(f"{key}-*.npy")):
            try:
                data = path.read_bytes()
                if hashlib.sha256(data).hexdigest()[:32] != path.stem.rpartition("-")[2]:
                    raise ValueError("content differs from its checksum")
                return np.load(io.BytesIO(data), allow_pickle=False)
            except (OSError, ValueError) as exc:
                print(f"warning: cached counterfactual image {path} is damaged ({str(exc).splitlines()[0][:120]}); "
                      "recomputing it", file=sys.stderr)
                path.unlink(missing_ok=True)
        return None

    def get(self, key: str):
        import torch

        array = None if self.folder is None else self._load(key)
        if array is None:
            self.misses += 1
            return None
        self.hits += 1
        return torch.from_numpy(array)

    def put(self, key: str, tensor) -> None:
        import numpy as np

        if self.folder is None:
            return
        buf = io.BytesIO()
        np.save(buf, tensor.detach().cpu().float().numpy())
        data = buf.getvalue()
        folder = self.folder / key[:2]
        try:
            folder.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                os.replace(tmp, folder / f"{key}-{hashlib.sha256(data).hexdigest()[:32]}.npy")
            finally:
                Path(tmp).unlink(missing_ok=True)
        except OSError:  # a full or read-only cache disk: this run still uses the tensor
            pass
