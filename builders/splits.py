"""Split bookkeeping shared by the builders: `--split` values and question ids across splits."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from builders.errors import ParamsError, SourceError


def check_splits(bench: str, splits: list[str], known: tuple[str, ...]) -> list[str]:
    """The `--split` values, each checked against the benchmark's splits; all of them when none is given."""
    for split in splits:
        if split not in known:
            raise ParamsError(f"--split {split}: {bench} has splits {', '.join(known)}")
    return list(splits) or list(known)


def _first(paths) -> Path:
    return paths[0] if isinstance(paths, tuple) else paths


def check_disjoint_ids(sources: dict, tables: dict[str, pa.Table], id_column: str = "question_id") -> None:
    """No id in two splits; the error names the later split's (first) source file and the id."""
    splits = sorted(tables)
    for i, a in enumerate(splits):
        for b in splits[i + 1:]:
            common = pc.is_in(tables[a].column(id_column), tables[b].column(id_column))
            if pc.any(common).as_py():
                qid = tables[a].column(id_column).filter(common)[0].as_py()
                raise SourceError(_first(sources[b]), f"{id_column.replace('_', ' ')} also in {_first(sources[a])} "
                                                      f"({a})", record=qid)
