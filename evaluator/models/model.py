"""The model contract: every adapter is a `Model` (see evaluator/models/__init__.py)."""

from __future__ import annotations

from abc import ABC, abstractmethod


class Model(ABC):
    """A task model (see the module docstring)."""

    input_columns: tuple[str, ...] | None = None
    samples: list[dict] | None = None
    # per row, per prompt: the option chosen in each rotation (`--circular`; None: not asked that way)
    rotations: list[list[list[int | None]]] | None = None
    judge = None  # the run's judge (evaluator.models.judge.Judge, --judge), whose agreement sample a shard keeps

    @abstractmethod
    def predict(self, table) -> list:
        """One prediction per row of the table, in the task's prediction format."""

    def metadata(self) -> dict:
        """What the prediction record says about the model beyond its spec (nothing by default)."""
        return {}

    def fit_split(self, table) -> None:
        """Read what a row's prediction needs from the whole split, before `predict` is given a part of it (a shard,
        a rank's rows): a baseline that guesses among the split's own answers. Nothing by default: a row's
        prediction is the row's alone."""


class PyModel(Model):
    """The object a `py:` factory returned: its `predict`, and its `input_columns` and `fit_split` when it declares
    them."""

    def __init__(self, model):
        self.model = model
        columns = getattr(model, "input_columns", None)  # the one place a user's object is probed
        self.input_columns = None if columns is None else tuple(columns)
        self._fit_split = getattr(model, "fit_split", None)

    def predict(self, table) -> list:
        return self.model.predict(table)

    def fit_split(self, table) -> None:
        if self._fit_split is not None:
            self._fit_split(table)


class WithoutImages(Model):
    """A `py:` model run blind (`--no-image`): every table it is given lacks the benchmark's image and video columns
    (its perceptual-score modalities `image` and `video`: the image keys, DISCO's pixels and row ids), so nothing of
    a row's pictures reaches it."""

    def __init__(self, model: Model, hidden: tuple[str, ...]):
        self.model, self.hidden = model, hidden
        self.input_columns = None if model.input_columns is None else tuple(
            c for c in model.input_columns if c not in hidden)

    def _shown(self, table):
        return table.drop_columns([c for c in self.hidden if c in table.column_names])

    def predict(self, table) -> list:
        return self.model.predict(self._shown(table))

    def fit_split(self, table) -> None:
        self.model.fit_split(self._shown(table))

    def metadata(self) -> dict:
        return self.model.metadata()


def as_model(model) -> Model:
    """A `py:` factory's object as a Model (a Model already stays as it is)."""
    return model if isinstance(model, Model) else PyModel(model)


class LateFusion(Model):
    """Base of late-fusion adapters: `predict` encodes every modality of the rows and fuses."""

    encoders: dict[str, tuple[str, ...]] = {}

    @property
    def input_columns(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(c for cols in self.encoders.values() for c in cols))

    @abstractmethod
    def encode(self, name: str, table):
        """The encoding of one modality (`encoders[name]`'s columns) of the rows."""

    @abstractmethod
    def fuse(self, encodings: dict, table) -> list:
        """Predictions from every modality's encoding."""

    def predict(self, table) -> list:
        return self.fuse({name: self.encode(name, table) for name in self.encoders}, table)


def is_late_fusion(model) -> bool:
    return isinstance(model, LateFusion)


def input_columns(model: Model, table) -> tuple[str, ...]:
    """The columns a model reads: its declaration, else every column of the table."""
    return tuple(table.column_names) if model.input_columns is None else tuple(model.input_columns)


def row_random(seed: int, ids: list, size: int):
    """Uniform [0, 1) values per row, seeded by (seed, row id): a random baseline's prediction for a row
    does not depend on which other rows are predicted with it (sharding, subsets, order)."""
    import zlib

    import numpy as np

    return np.stack([np.random.default_rng([seed, zlib.crc32(str(i).encode())]).random(size) for i in ids]) \
        if ids else np.zeros((0, size))
