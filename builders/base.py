"""The build contract of a benchmark: a `Builder` subclass declares its configs, splits, sources and
card, finds its raw files, builds typed tables, and states the invariants `verify` checks.

Required: the class attributes below without a default, and `locate_sources`, `build`,
`check_invariants`. Optional (defaults here): `source_dir_for` (a raw format chosen by the params),
`card_template_text` (the card template, read from data_cards/),
`supports_images` (`build --images DIR` embeds images, passed to `build` as `images=`), and
`published_blob_ids` (git blob ids of the published legacy files that `verify` compares with).
`floats` states, for the card, how every floating-point value the build writes is computed so that
it is the same on any CPU and thread count (its precision, its summation order, a tie rule).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import ClassVar

import pyarrow as pa

from builders.result import BuildResult, RunStage

NO_COMPUTED_FLOATS = "This build computes no floating-point value: every column is copied or counted from the sources."


class Builder(ABC):
    name: ClassVar[str]  # the benchmark's registry name
    params_class: ClassVar[type]  # a frozen dataclass whose defaults are the published recipe
    configs: ClassVar[tuple[str, ...]]  # hub configs (one folder of parquet shards each)
    default_config: ClassVar[str]
    splits: ClassVar[tuple[str, ...]]
    source_dir: ClassVar[str]  # the raw sources' folder under a sources root (as sample-sources writes)
    card_template: ClassVar[str]  # file name in data_cards/ (`card_template_text` reads it)
    description: ClassVar[str]  # one line for `vlbench list`
    sources_help: ClassVar[str]  # the raw files it reads, for `vlbench list`
    floats: ClassVar[str] = NO_COMPUTED_FLOATS  # the card's sentence on the precision of its floats
    supports_images: ClassVar[bool] = False
    published_blob_ids: ClassVar[dict[str, str]] = {}

    def card_template_text(self) -> str:
        """The card template: data_cards/<card_template>. A builder kept outside the project (a plug-in
        registered with `builders.registry.register`) returns its own."""
        from importlib import resources

        return resources.files("data_cards").joinpath(self.card_template).read_text()

    def source_dir_for(self, params) -> str:
        """The raw sources' folder for these params (a builder that reads two formats overrides it)."""
        return self.source_dir

    @abstractmethod
    def locate_sources(self, source: Path, splits: list[str], params) -> dict:
        """{source key: path or tuple of paths} of the raw files to read; missing files are SourceErrors."""

    @abstractmethod
    def build(self, sources: dict, params, run_stage: RunStage, **extra) -> BuildResult:
        """Tables, statistics, card fields, figures and legacy files, each stage through `run_stage`."""

    @abstractmethod
    def check_invariants(self, tables: dict[str, dict[str, pa.Table]], params: dict) -> list[str]:
        """What must hold in the built tables; `build` refuses and `verify` reports any problem."""

    @abstractmethod
    def table_features(self, config: str):
        """The `datasets.Features` of the columns every build of CONFIG holds whatever its params (an optional
        column, an embedded image, left out): a built table is checked against them (`schema_problem`) by
        `build` and `verify`, and before a build read back is scored or exported (a build may come from anyone)."""


def schema_problem(builder: Builder, config: str, table: pa.Table) -> str | None:
    """What in TABLE's columns is not as every build of CONFIG writes them: a column missing, or of another type;
    extra columns are allowed (an embedded image, a later vlbench's addition). None when it is as written."""
    expected = builder.table_features(config).arrow_schema
    missing = [f.name for f in expected if f.name not in table.column_names]
    if missing:
        return (f"has no column {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''} (every {builder.name} "
                f"build's {config} table has {', '.join(expected.names)})")
    for field in expected:
        found = table.schema.field(field.name).type
        if not found.equals(field.type):
            return f"column {field.name} is {found}, not {field.type} as every {builder.name} build writes it"
    return None
