"""What a builder returns: tables per config and split, statistics, figures and legacy files."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from core.figures import FigureSpec

if TYPE_CHECKING:  # the figure helper (pipelines.figure_process) imports this module without Arrow
    import pyarrow as pa


@dataclass
class BuildResult:
    """Tables are `{config: {split: table}}`; legacy files are `{relative path: bytes producer}`."""

    tables: dict[str, dict[str, pa.Table]]
    features: object  # datasets.Features of every config not in `config_features`
    statistics: dict
    card_fields: dict[str, str]
    figures: list[FigureSpec] = field(default_factory=list)
    legacy_files: dict[str, Callable[[], bytes]] = field(default_factory=dict)
    run_info: dict = field(default_factory=dict)  # varies between runs (model calls, cache hits): manifest "run"
    config_features: dict = field(default_factory=dict)  # {config: datasets.Features} where a config differs

    def features_of(self, config: str):
        return self.config_features.get(config, self.features)


StageFn = Callable[[], "dict[str, pa.Table]"]


class RunStage:
    """What `Builder.build` is handed to run its stages: `run_stage(name, key, inputs, compute)` gives a
    stage's tables. This base computes every stage (library callers and unit tests use it as is);
    `pipelines.stages.StageRunner` caches them by key and input checksums."""

    text_cache = None  # builders.nlp.TextCache for per-text model outputs, where the pipeline keeps one

    def __call__(self, name: str, key: dict, inputs: list, compute: StageFn) -> dict[str, pa.Table]:
        return compute()

    def figures_known(self, specs: list[FigureSpec]) -> None:
        """A builder that knows its figures before its tables are done hands them over here, so that the
        pipeline draws them while the build goes on. They must equal the result's `figures` (others are
        drawn at export). Nothing to do here."""


run_uncached = RunStage()  # the trivial stage runner
