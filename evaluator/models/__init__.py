"""Model specs and the adapter protocol.

Specs: `baseline:<name>`, `py:<module>:<factory>`, `hf:<hub id or path>`, `features:<folder>`.

Every adapter is a `Model`: `predict(table) -> list` (one prediction per row, in the task's prediction
format), `input_columns` (the columns it reads, which the perceptual score checks; None: every
column), `samples` (per row of the last predict, what `--log-samples` writes; None: nothing to log)
and `metadata()` (what the prediction record says about it). A `py:` factory's object is wrapped in a
`PyModel` unless it is a `Model` already. A late-fusion model (subclass `LateFusion`) also
declares `encoders = {name: columns}` with `encode(name, table)` returning one encoding per row and
`fuse(encodings, table)`; the perceptual score then permutes cached encodings instead of re-encoding.
"""

from __future__ import annotations

import importlib
import os
import sys
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path

from core.errors import ModelError


@dataclass(frozen=True)
class ModelOptions:
    """What `vlbench predict` passes to a task's model factory."""

    train_file: Path | None = None
    seed: int = 0
    device: str = "auto"
    batch_size: int = 32
    images: Path | None = None
    data: Path | None = None  # the built folder being predicted (fitted baselines read its train split)
    bf16: bool = False  # autocast to bfloat16 (CUDA, or CPU where supported)
    workers: int = 0  # DataLoader workers decoding images
    # Generative VLMs (evaluator/models/generative.py):
    dtype: str = "auto"  # weights' dtype: auto (bfloat16 on CUDA, float32 on CPU), float32, bfloat16, float16
    max_new_tokens: int = 16  # greedy generation length (short answers, counts)
    prompt: str | None = None  # user prompt template with {field}s; None: the benchmark's default
    min_pixels: int | None = None  # image-size bounds, where the processor has them (Qwen2-VL family)
    max_pixels: int | None = None
    loglik: str = "sum"  # a scored continuation's log-likelihood: sum of token log-probs, or mean
    videos: Path | None = None  # video folder: the model sees `frames` frames of a row's video (Social-IQ)
    frames: int = 8  # frames per video, spread evenly from the first to the last (evaluator/videos.py)
    system_prompt: str | None = None  # a system turn before every user turn
    chat_template: Path | None = None  # a Jinja chat template replacing the processor's
    gen_kwargs: tuple = ()  # (name, value) decoding arguments (evaluator/models/generation.py)
    stop: tuple[str, ...] = ()  # strings that end a generated answer
    revision: str | None = None  # a hub checkpoint's branch, tag or commit
    attn_implementation: str | None = None  # eager, sdpa, flash_attention_2...: transformers' choice when None
    device_map: str | None = None  # auto, balanced, sequential: spread a model over the devices (accelerate)


class Model(ABC):
    """A task model (see the module docstring)."""

    input_columns: tuple[str, ...] | None = None
    samples: list[dict] | None = None

    @abstractmethod
    def predict(self, table) -> list:
        """One prediction per row of the table, in the task's prediction format."""

    def metadata(self) -> dict:
        """What the prediction record says about the model beyond its spec (nothing by default)."""
        return {}


class PyModel(Model):
    """The object a `py:` factory returned: its `predict`, and its `input_columns` when it declares them."""

    def __init__(self, model):
        self.model = model
        columns = getattr(model, "input_columns", None)  # the one place a user's object is probed
        self.input_columns = None if columns is None else tuple(columns)

    def predict(self, table) -> list:
        return self.model.predict(table)


def as_model(model) -> Model:
    """A `py:` factory's object as a Model (a Model already stays as it is)."""
    return model if isinstance(model, Model) else PyModel(model)


class LateFusion(Model):
    """Base of late-fusion adapters: `predict` encodes every modality of the rows and fuses."""

    encoders: dict[str, tuple[str, ...]] = {}

    @property
    def input_columns(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(c for cols in self.encoders.values() for c in cols))

    def encode(self, name: str, table):
        raise NotImplementedError

    def fuse(self, encodings: dict, table) -> list:
        raise NotImplementedError

    def predict(self, table) -> list:
        return self.fuse({name: self.encode(name, table) for name in self.encoders}, table)


def row_random(seed: int, ids: list, size: int):
    """Uniform [0, 1) values per row, seeded by (seed, row id): a random baseline's prediction for a row
    does not depend on which other rows are predicted with it (sharding, subsets, order)."""
    import zlib

    import numpy as np

    return np.stack([np.random.default_rng([seed, zlib.crc32(str(i).encode())]).random(size) for i in ids]) \
        if ids else np.zeros((0, size))


def is_late_fusion(model) -> bool:
    return isinstance(model, LateFusion)


def input_columns(model: Model, table) -> tuple[str, ...]:
    """The columns a model reads: its declaration, else every column of the table."""
    return tuple(table.column_names) if model.input_columns is None else tuple(model.input_columns)


def parse_spec(spec: str) -> tuple[str, str]:
    kind, sep, name = spec.partition(":")
    if not sep or kind not in ("baseline", "py", "hf", "features") or not name:
        raise ModelError(f"--model {spec}: expected baseline:<name>, py:<module>:<factory>, hf:<hub id or path> "
                         "or features:<folder>")
    return kind, name


def hf_config(name: str, revision: str | None = None):
    """The transformers config of an `hf:` spec; a missing, non-model or unknown checkpoint, or a
    folder vlbench will not load (builders.model_files: pickle weights, its own code, a damaged
    safetensors header), is a one-line ModelError, before any weight is read."""
    from transformers import AutoConfig

    from builders.model_files import load_kwargs

    local = Path(name).expanduser()
    if not local.exists() and (name.startswith((".", "/", "~")) or ("/" in name and local.parent.is_dir())):
        raise ModelError(f"hf:{name}: no such model folder (and not a hub model id ORG/NAME)")
    load_kwargs(name, f"hf:{name}")
    if revision is not None and local.exists():
        raise ModelError(f"--revision {revision}: hf:{name} is a local folder; a revision names a hub checkpoint's "
                         "branch, tag or commit")
    try:
        return AutoConfig.from_pretrained(name, **({"revision": revision} if revision else {}))
    except (OSError, ValueError) as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ModelError(f"hf:{name}: cannot load ({reason})") from None


def load_py_model(target: str, method: str = "predict", signature: str = "predict(table)"):
    """`module:factory` -> factory(); the object must have the callable `method` (a task model's
    `predict(table) -> list`, CounterBias's `score(queries, ids)`)."""
    module, sep, factory = target.partition(":")
    if not sep:
        raise ModelError(f"--model py:{target}: expected py:<module>:<factory>")
    cwd = os.getcwd()
    added = cwd not in sys.path
    if added:  # `python -m` would find a module in the current folder; so does vlbench
        sys.path.insert(0, cwd)
    try:
        model = getattr(importlib.import_module(module), factory)()
    except (ImportError, AttributeError) as exc:
        raise ModelError(f"--model py:{target}: {exc}") from None
    finally:
        if added:
            sys.path.remove(cwd)
    if not callable(getattr(model, method, None)):
        raise ModelError(f"--model py:{target}: the factory's object has no {signature} method")
    return model


def train_split(options: ModelOptions, config: str, spec: str):
    """The train split of the dataset being predicted, for baselines fitted on it."""
    from core.data import load_table

    if options.data is None:
        raise ModelError(f"{spec} is fitted on the dataset's train split; no dataset folder was given")
    return load_table(options.data, config, "train")
