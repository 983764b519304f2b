"""Split bookkeeping shared by the builders: `--split` values and question ids across splits."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from builders.sources.files import expect_file
from core.errors import ParamsError, SourceError


def check_splits(bench: str, splits: list[str], known: tuple[str, ...]) -> list[str]:
    """The `--split` values, each checked against the benchmark's splits; all of them when none is given."""
    for split in splits:
        if split not in known:
            raise ParamsError(f"--split {split}: {bench} has splits {', '.join(known)}")
    return list(splits) or list(known)


def locate_val_file(bench: str, source: Path, splits: list[str], file_name: str, dataset: str) -> dict[str, Path]:
    """{"val": path} of a benchmark built from one validation file: SOURCE is that file or the folder
    holding `file_name`; any other split is a ParamsError, a missing file a SourceError."""
    if any(s != "val" for s in splits):
        raise ParamsError(f"--split {', '.join(splits)}: {bench} is built from {dataset} val only (split 'val')")
    path = source / file_name if source.is_dir() else source
    if not (path.exists() or path.is_symlink()):
        raise SourceError(path, f"{dataset} source file not found (expected {file_name})")
    expect_file(path, f"the {dataset} {file_name} file")
    return {"val": path}


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
