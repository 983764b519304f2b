"""Open a built split: a local folder in the hub layout, or a dataset repo id on the hub."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from builders.errors import ParamsError


def resolve_data(data: str) -> Path:
    """A local built folder as is; anything else is downloaded as a hub dataset repo."""
    path = Path(data)
    if path.is_dir():
        return path
    if path.exists() or data.count("/") != 1:
        raise ParamsError(f"--data {data}: not a built folder nor a hub dataset repo id (ORG/NAME)")
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(repo_id=data, repo_type="dataset"))


def available_splits(folder: Path, config: str) -> list[str]:
    return sorted({p.name.split("-")[0] for p in (folder / config).glob("*.parquet")})


def pick_split(folder: Path, config: str, split: str | None, preferred: str) -> str:
    splits = available_splits(folder, config)
    if not splits:
        raise ParamsError(f"{folder}: no '{config}' tables (is this a built folder?)")
    if split is None:
        return preferred if preferred in splits else splits[0]
    if split not in splits:
        raise ParamsError(f"--split {split}: {folder} has {', '.join(splits)}")
    return split


def load_table(folder: Path, config: str, split: str) -> pa.Table:
    """All parquet shards of one config/split, in shard order."""
    shards = sorted((folder / config).glob(f"{split}-*.parquet"))
    if not shards:
        raise ParamsError(f"{folder}: no {config}/{split} tables")
    return pa.concat_tables(pq.read_table(p) for p in shards)
