"""`features:<folder>`: a model over precomputed per-modality features (e.g. the released Social-IQ
or DISCO feature files) with a small trainable head.

The folder holds `<modality>.parquet` for the modalities the model reads, each with columns `key`
(string: the value of the modality's first column, e.g. a video_id, a question or answer text, a
DISCO row id) and `features` (list of floats, one length per file). The head is fitted on the
built dataset's train split: standardised concatenated features, then a linear layer trained
full-batch with Adam from a fixed seed (classification: softmax over the most frequent training
answers; binary: logistic, score = logit; regression: least squares). It is a late-fusion model:
each modality's features are one encoder, so the perceptual score re-indexes them.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from core.errors import ModelError
from evaluator.models.model import LateFusion
from evaluator.models.options import ModelOptions

MAX_CLASSES = 3129  # the answer vocabulary size of the common VQA heads
STEPS, LEARNING_RATE, WEIGHT_DECAY = 300, 0.05, 1e-4


def feature_head(folder: str, task, options: ModelOptions, spec: str) -> "FeatureHead":
    """`features:<folder>` for a task: the head is fitted on the dataset's train split."""
    from evaluator.models.menu import train_split

    return FeatureHead(folder, task, train_split(options, task.config, spec), options)


def _key(value) -> str:
    return "\n".join(map(str, value)) if isinstance(value, list) else str(value)


def read_feature_file(path: Path) -> tuple[dict[str, int], np.ndarray]:
    """key -> row, and the (keys, dim) float32 matrix; errors name the file and the offending key."""
    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowInvalid) as exc:
        raise ModelError(f"{path}: not a readable parquet file ({exc})") from None
    for column in ("key", "features"):
        if column not in table.column_names:
            raise ModelError(f"{path}: no '{column}' column (expected key, features)")
    keys = [str(k) for k in table.column("key").to_pylist()]
    vectors = table.column("features").to_pylist()
    dims = {len(v) if v is not None else -1 for v in vectors}
    if len(dims) != 1 or -1 in dims:
        bad = next(k for k, v in zip(keys, vectors) if v is None or len(v) != len(vectors[0]))
        raise ModelError(f"{path}: key '{bad}': every features list must have the same length")
    index: dict[str, int] = {}
    for i, k in enumerate(keys):
        if k in index:
            raise ModelError(f"{path}: key '{k}' appears twice")
        index[k] = i
    matrix = np.asarray(vectors, dtype=np.float32)
    if not np.isfinite(matrix).all():
        raise ModelError(f"{path}: key '{keys[int(np.argwhere(~np.isfinite(matrix))[0, 0])]}': non-finite feature")
    return index, matrix


class FeatureHead(LateFusion):
    def __init__(self, folder: str, task, train: pa.Table, options: ModelOptions):
        root = Path(folder)
        if not root.is_dir():
            raise ModelError(f"features:{folder}: not a folder")
        modalities = [m for m in task.modalities if (root / f"{m.name}.parquet").is_file()]
        if not modalities:
            raise ModelError(f"features:{folder}: no feature file; expected any of "
                             + ", ".join(f"{m.name}.parquet" for m in task.modalities))
        self.files = {m.name: root / f"{m.name}.parquet" for m in modalities}
        self.encoders = {m.name: (m.columns[0],) for m in modalities}
        self.features = {name: read_feature_file(path) for name, path in self.files.items()}
        self.kind = task.head_kind
        self._fit(train, task.head_target, options.seed)

    def encode(self, name: str, table: pa.Table) -> np.ndarray:
        index, matrix = self.features[name]
        column = self.encoders[name][0]
        rows = []
        for value in table.column(column).to_pylist():
            row = index.get(_key(value))
            if row is None:
                raise ModelError(f"{self.files[name]}: no features for {column} '{_key(value)}'")
            rows.append(row)
        return matrix[np.array(rows, dtype=np.int64)]

    def _design(self, encodings: dict) -> np.ndarray:
        x = np.concatenate([encodings[name] for name in self.encoders], axis=1)
        return (x - self.mean) / self.scale

    def _fit(self, train: pa.Table, target: str, seed: int) -> None:
        import torch

        y_raw = train.column(target).to_pylist()
        if self.kind == "classification":
            counts = Counter(y_raw)
            self.classes = sorted(counts, key=lambda a: (-counts[a], a))[:MAX_CLASSES]
            where = {c: i for i, c in enumerate(self.classes)}
            keep = np.array([y in where for y in y_raw], dtype=bool)
            train = train.filter(pa.array(keep))
            y = torch.tensor([where[v] for v, k in zip(y_raw, keep) if k], dtype=torch.long)
        else:
            y = torch.tensor(y_raw, dtype=torch.float32)
        x = np.concatenate([self.encode(name, train) for name in self.encoders], axis=1)
        self.mean, self.scale = x.mean(axis=0), x.std(axis=0) + 1e-6
        x = torch.from_numpy((x - self.mean) / self.scale)
        if self.kind == "regression":  # least squares with an intercept, closed form
            design = torch.cat([x, torch.ones(len(x), 1)], dim=1).double()
            solution = torch.linalg.lstsq(design, y.double()[:, None]).solution[:, 0]
            self.weight, self.bias = solution[:-1].float().numpy()[:, None], solution[-1:].float().numpy()
            return
        outputs = len(self.classes) if self.kind == "classification" else 1
        generator = torch.Generator().manual_seed(seed)
        layer = torch.nn.Linear(x.shape[1], outputs)
        with torch.no_grad():
            layer.weight.copy_(torch.randn(layer.weight.shape, generator=generator) * 0.01)
            layer.bias.zero_()
        optimiser = torch.optim.Adam(layer.parameters(), lr=LEARNING_RATE, weight_decay=WEIGHT_DECAY)
        loss_fn = torch.nn.CrossEntropyLoss() if self.kind == "classification" else torch.nn.BCEWithLogitsLoss()
        target_t = y if self.kind == "classification" else y[:, None]
        for _ in range(STEPS):
            optimiser.zero_grad()
            loss_fn(layer(x), target_t).backward()
            optimiser.step()
        self.weight, self.bias = layer.weight.detach().numpy().T, layer.bias.detach().numpy()

    def fuse(self, encodings: dict, table: pa.Table) -> list:
        out = self._design(encodings) @ self.weight + self.bias
        if self.kind == "classification":
            return [self.classes[i] for i in out.argmax(axis=1).tolist()]
        return out[:, 0].astype(np.float64).tolist()
