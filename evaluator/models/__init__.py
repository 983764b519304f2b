"""Model specs (DESIGN §3): `baseline:<name>`, `py:<module>:<factory>`, `hf:<hub id or path>`."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path

from builders.errors import ModelError


@dataclass(frozen=True)
class ModelOptions:
    """What `vlbench predict` passes to a task's model factory."""

    train_file: Path | None = None
    seed: int = 0
    device: str = "auto"
    batch_size: int = 32
    images: Path | None = None
    data: Path | None = None  # the built folder being predicted (fitted baselines read its train split)


def parse_spec(spec: str) -> tuple[str, str]:
    kind, sep, name = spec.partition(":")
    if not sep or kind not in ("baseline", "py", "hf") or not name:
        raise ModelError(f"--model {spec}: expected baseline:<name>, py:<module>:<factory> or hf:<hub id or path>")
    return kind, name


def load_py_model(target: str):
    """`module:factory` -> factory(); the object must have `predict(table) -> list`."""
    module, sep, factory = target.partition(":")
    if not sep:
        raise ModelError(f"--model py:{target}: expected py:<module>:<factory>")
    try:
        model = getattr(importlib.import_module(module), factory)()
    except (ImportError, AttributeError) as exc:
        raise ModelError(f"--model py:{target}: {exc}") from None
    if not callable(getattr(model, "predict", None)):
        raise ModelError(f"--model py:{target}: the factory's object has no predict(table) method")
    return model


def train_split(options: ModelOptions, config: str, spec: str):
    """The train split of the dataset being predicted, for baselines fitted on it."""
    from evaluator.data import load_table

    if options.data is None:
        raise ModelError(f"{spec} is fitted on the dataset's train split; no dataset folder was given")
    return load_table(options.data, config, "train")
