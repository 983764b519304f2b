"""A task's model menu, declared as data: the `baseline:` models it builds and the families of `hf:`
checkpoints it loads. `Task.make_model` hands every spec to evaluator/models/resolve.py, which resolves it
against the menu in one place (an `hf:` config is read once); `Task.models_help` lists it, for the help of
the model flags (pipelines/cli/models.py) and the errors."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from core.errors import ModelError
from evaluator.models.options import ModelOptions


@dataclass(frozen=True)
class Baseline:
    """`baseline:<name>`: `build(task, options, spec)` returns the Model."""

    name: str
    build: Callable[..., Any]
    note: str = ""  # what a user should know, for --help: "fitted on the train split", "needs --train-file"


@dataclass(frozen=True)
class HfFamily:
    """The `hf:` checkpoints of one kind: `accepts(config)` says whether a transformers config is one,
    `build(task, name, options)` loads it."""

    label: str  # what the checkpoint is, for --help and errors: "CLIP dual encoder"
    accepts: Callable[[Any], bool]
    build: Callable[..., Any]
    note: str = ""


def has_architecture(suffix: str, model_type: str | None = None) -> Callable[[Any], bool]:
    """A config test: one of its architectures ends with `suffix` (and its model_type is `model_type`)."""

    def accepts(config) -> bool:
        return ((model_type is None or config.model_type == model_type)
                and any(a.endswith(suffix) for a in (config.architectures or [])))

    return accepts


def is_model_type(model_type: str) -> Callable[[Any], bool]:
    return lambda config: config.model_type == model_type


def on_train_split(model_class, **kwargs) -> Callable[..., Any]:
    """A baseline's build: `model_class(train, **kwargs)`, fitted on the train split of the dataset
    being predicted."""
    return lambda task, options, spec: model_class(train_split(options, task.config, spec), **kwargs)


def menu_entry(spec: str, note: str) -> str:
    return f"{spec} ({note})" if note else spec


def train_split(options: ModelOptions, config: str, spec: str):
    """The train split of the dataset being predicted, for models fitted on it."""
    from core.data import load_table

    if options.data is None:
        raise ModelError(f"{spec} is fitted on the dataset's train split; no dataset folder was given")
    return load_table(options.data, config, "train")
