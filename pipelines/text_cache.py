"""Disk-backed (model, text) cache for the builders' models (builders.nlp.TextCache).

Each namespace (e.g. "sbert/<model>") is a folder of Arrow files of (key, value) rows; a store
adds one file, written beside and renamed into place, so concurrent or interrupted builds never
leave a partial file. A file's name ends with the sha256 of its content: a file that does not match
its name (edited, truncated) is never used; it is removed with one warning line and its texts are
recomputed.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa

from core.hashing import sha256_file
from core.tempfiles import create_exclusively, temp_name


class DiskTextCache:
    def __init__(self, root: Path):
        self.root = Path(root) / "text"
        self._index: dict[str, dict[str, object]] = {}

    def _folder(self, namespace: str) -> Path:
        return self.root / hashlib.sha1(namespace.encode()).hexdigest()[:16]

    def _load(self, namespace: str) -> dict[str, object]:
        if namespace not in self._index:
            index: dict[str, object] = {}
            for path in sorted(self._folder(namespace).glob("*.arrow")):
                table = _checked_table(path)
                if table is None:
                    continue
                values = table.column("value")
                if pa.types.is_list(values.type) or pa.types.is_fixed_size_list(values.type):
                    flat = values.combine_chunks().flatten().to_numpy(zero_copy_only=False)
                    vectors = flat.reshape(table.num_rows, -1) if table.num_rows else flat
                    index.update(zip(table.column("key").to_pylist(), vectors))
                else:
                    index.update(zip(table.column("key").to_pylist(), values.to_pylist()))
            self._index[namespace] = index
        return self._index[namespace]

    def lookup(self, namespace: str, keys: list[str]) -> dict[str, object]:
        index = self._load(namespace)
        return {k: index[k] for k in keys if k in index}

    def store(self, namespace: str, values: dict[str, object]) -> None:
        if not values:
            return
        keys = list(values)
        first = values[keys[0]]
        if isinstance(first, np.ndarray):
            array = pa.FixedSizeListArray.from_arrays(
                pa.array(np.concatenate([np.asarray(values[k], np.float32) for k in keys])), first.shape[0])
        else:
            array = pa.array([values[k] for k in keys], pa.string())
        table = pa.table({"key": keys, "value": array})
        folder = self._folder(namespace)
        name = hashlib.sha1("".join(keys).encode()).hexdigest()[:16]
        tmp = folder / temp_name(name)
        try:
            folder.mkdir(parents=True, exist_ok=True)
            create_exclusively(tmp)
            with pa.ipc.new_file(str(tmp), table.schema) as writer:
                writer.write_table(table)
            tmp.replace(folder / f"{name}-{sha256_file(tmp)[:32]}.arrow")
        except OSError:  # a full or read-only cache disk: the values are still used for this build
            pass
        finally:
            tmp.unlink(missing_ok=True)
        self._load(namespace).update(values)


def _checked_table(path: Path) -> pa.Table | None:
    """The file's table when its content matches the checksum in its name, else None (warned, removed)."""
    expected = path.stem.rpartition("-")[2]
    try:
        if len(expected) != 32 or sha256_file(path)[:32] != expected:
            raise ValueError("content differs from its checksum")
        return pa.ipc.open_file(pa.memory_map(str(path))).read_all()
    except (OSError, ValueError, pa.ArrowException) as exc:
        print(f"warning: cached model outputs {path} are damaged ({str(exc).splitlines()[0][:160]}); "
              "recomputing them", file=sys.stderr)
        path.unlink(missing_ok=True)
        return None
