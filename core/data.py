"""Open a built split: a local folder in the hub layout, or a dataset repo id on the hub."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from core.errors import ParamsError, VlbenchError


def hub_errors() -> tuple[type[BaseException], ...]:
    """What a hub call raises for a bad repo id, a missing repo, no network or offline mode."""
    from huggingface_hub.errors import HFValidationError, HTTPError

    return (OSError, HTTPError, HFValidationError)


def resolve_data(data: str) -> Path:
    """A local built folder as is; ORG/NAME whose ORG is not a local folder is a hub dataset repo,
    downloaded; anything else (a missing local path, a file) is a one-line error."""
    path = Path(data)
    if path.is_dir():
        return path
    if path.exists():
        raise ParamsError(f"--data {data}: is a file, expected a built folder or a hub dataset repo id (ORG/NAME)")
    if data.count("/") != 1 or data.startswith((".", "/", "~")) or path.parent.is_dir():
        raise ParamsError(f"--data {data}: no such folder (and not a hub dataset repo id ORG/NAME)")
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(repo_id=data, repo_type="dataset"))
    except hub_errors() as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ParamsError(f"--data {data}: not a local folder, and the hub dataset could not be fetched ({reason})") \
            from None


def available_splits(folder: Path, config: str) -> list[str]:
    return sorted({p.name.split("-")[0] for p in (folder / config).glob("*.parquet")})


def pick_split(folder: Path, config: str, split: str | None, preferred: str) -> str:
    """The split to read: `split` (--split) when the folder has it, else `preferred`, else the first. A split
    name comes from the folder's file names (a build from anyone), so the one chosen is checked against the
    split-name rule (core/names.py) before it reaches a file name, a YAML or generated code."""
    from core.names import check_split_name, shown

    splits = available_splits(folder, config)
    if not splits:
        raise ParamsError(f"{folder}: no '{config}' tables (is this a built folder?)")
    if split is None:
        split = preferred if preferred in splits else splits[0]
    elif split not in splits:
        raise ParamsError(f"--split {shown(split)}: {folder} has {', '.join(shown(s) for s in splits)}")
    return check_split_name(split, f"{folder / config}")


def read_parquet(path: Path) -> pa.Table:
    """A parquet file, by its path where the path is UTF-8; else (a folder's name from another system, which
    Arrow cannot open and Python can) from its bytes read by Python (`parquet_from_bytes`). Never through a Python
    file object: Arrow's I/O threads would call back into Python and abort the process at interpreter exit
    ("terminate called without an active exception", apache/arrow#34314)."""
    try:
        str(path).encode("utf-8")
    except UnicodeEncodeError:
        return parquet_from_bytes(Path(path).read_bytes())
    return pq.read_table(str(path))


def parquet_from_bytes(data: bytes) -> pa.Table:
    """A parquet file's table from bytes Python holds, read in this thread: a pool's task may still hold the
    bytes (a Python buffer) after a threaded read returns, and if the interpreter ends before it lets them go, it
    needs the GIL to, and aborts the process (exit 134, "terminate called without an active exception"; seen in
    about 1 of 10 refusals of a sealed answer file, core dumps showing a dataset scan's and a column reader's
    task; 0 in 150 since)."""
    return pq.ParquetFile(pa.BufferReader(data)).read(use_threads=False)


def load_table(folder: Path, config: str, split: str) -> pa.Table:
    """All parquet shards of one config/split, in shard order."""
    shards = sorted((folder / config).glob(f"{split}-*.parquet"))
    if not shards:
        raise ParamsError(f"{folder}: no {config}/{split} tables")
    tables = []
    for shard in shards:
        try:
            tables.append(read_parquet(shard))
        except (OSError, pa.ArrowException) as exc:
            raise VlbenchError(f"{shard}: not a readable parquet file ({str(exc).splitlines()[0][:160]}); "
                               "rebuild the folder or check it with `vlbench verify`") from None
    try:
        return pa.concat_tables(tables)
    except pa.ArrowException:
        raise VlbenchError(f"{folder / config}: the {split} shards do not share one schema") from None
