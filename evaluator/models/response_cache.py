"""The response cache that makes a long run resumable (a served model's requests; an `hf:` or `vllm:`
model's answers and scores with `predict --resume`; every backend reads and writes it through the
backend contract's `cached` and `keep`, evaluator/models/backend.py): one SQLite file in WAL mode, one row per request,
written the moment its response arrives, so a run killed by Ctrl-C or SIGKILL loses at most the
requests in flight and the rerun asks only what is missing.

A row is keyed by the SHA-256 of the request's whole identity (the endpoint, the model name, the
request body with its images and generation settings, and vlbench's version); its value carries its
own SHA-256, checked on every read: a damaged row is dropped and asked again, with one warning. Only
deterministic requests are cached (the caller decides: greedy decoding), and only successful,
non-empty responses: an error is never replayed."""

from __future__ import annotations

import functools
import hashlib
import json
import math
import sqlite3
import sys
import threading
from pathlib import Path

from core.errors import ModelError


@functools.cache
def vlbench_version() -> str:
    """vlbench's version, part of every key (read once per process)."""
    from importlib import metadata

    try:
        return metadata.version("vlbench")
    except metadata.PackageNotFoundError:
        return "unknown"


def folder_identity(path: str) -> list | None:
    """A local model folder's files as (name, size, mtime_ns): a changed checkpoint never reuses an
    answer. None for a hub id, which its revision names."""
    folder = Path(path).expanduser()
    if not folder.is_dir():
        return None
    return [(p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(folder.iterdir()) if p.is_file()]


def weights_pin(name: str, revision: str | None = None) -> dict:
    """What names a checkpoint's exact weights: a local folder's content (`folder_sha256`: the SHA-256 of every
    file's relative path and SHA-256, in name order), or the commit of a hub id's copy in the local hub cache
    (`commit`); empty when neither is known."""
    from core.hashing import sha256_file

    folder = Path(name).expanduser()
    if folder.is_dir():
        digest = hashlib.sha256()
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            digest.update(f"{path.relative_to(folder).as_posix()}\0{sha256_file(path)}\n".encode())
        return {"folder_sha256": digest.hexdigest()}
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(name, "config.json", revision=revision)
    return {"commit": Path(found).parent.name} if isinstance(found, str) else {}


def image_digest(source) -> str:
    """The SHA-256 of an image a turn shows: a file's bytes, embedded bytes, or a decoded frame's pixels."""
    from core.hashing import sha256_file

    if isinstance(source, Path):
        return sha256_file(source)
    if isinstance(source, (bytes, bytearray)):
        return hashlib.sha256(source).hexdigest()
    return hashlib.sha256(f"{source.mode}{source.size}".encode() + source.tobytes()).hexdigest()


def request_key(identity: dict) -> str:
    """The SHA-256 of a request's canonical JSON (sorted keys, no whitespace)."""
    return hashlib.sha256(json.dumps(identity, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def well_formed(field: str, value, size: int | None = None) -> bool:
    """Whether a cached value has the shape vlbench writes for `field` (an entry of another shape, from
    another version or an edit that kept its checksum right, is asked again rather than believed):
    `content` text; `loglik` and `token_logprobs` finite numbers (`size` of them where given);
    `prompt_token_ids` whole numbers."""
    if field == "content":
        return isinstance(value, str)
    if not isinstance(value, list) or (size is not None and len(value) != size):
        return False
    if field == "prompt_token_ids":
        return bool(value) and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in value)


class ResponseCache:
    """Thread-safe: one connection, one lock (SQLite serialises writers anyway; a row is small). A file that
    is not a vlbench response cache (not SQLite, another table layout) and a cache that cannot be written
    (read-only, a write lock held past the timeout) are one error line; an entry that cannot be read (a
    corrupt page, a lock held past the timeout) or is not what was written is one warning, and asked again."""

    COLUMNS = ("key", "value", "digest")

    def __init__(self, path: Path):
        self.path = Path(path)
        self.hits = self.stored = self.damaged = 0
        self._lock = threading.Lock()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, timeout=30, check_same_thread=False, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")  # WAL: a committed row survives a killed process
            self._db.execute("CREATE TABLE IF NOT EXISTS responses (key TEXT PRIMARY KEY, value TEXT NOT NULL, "
                             "digest TEXT NOT NULL)")
            columns = tuple(row[1] for row in self._db.execute("PRAGMA table_info(responses)"))
        except (sqlite3.Error, OSError) as exc:
            raise ModelError(f"response cache {self.path}: {exc} (move the file away, or pass --no-cache)") from None
        if columns != self.COLUMNS:
            raise ModelError(f"response cache {self.path}: its responses table has the columns "
                             f"{', '.join(columns)}, not vlbench's (move the file away, or pass --no-cache)")

    def get(self, key: str) -> dict | None:
        with self._lock:
            try:
                row = self._db.execute("SELECT value, digest FROM responses WHERE key = ?", (key,)).fetchone()
            except sqlite3.Error:
                self._damaged(None)
                return None
            if row is None:
                return None
            value, digest = row
            try:
                found = json.loads(value) if hashlib.sha256(str(value).encode()).hexdigest() == digest else None
            except (ValueError, RecursionError):
                found = None
            if not isinstance(found, dict):
                self._damaged(key)
                return None
            self.hits += 1
        return found

    def _damaged(self, key: str | None) -> None:
        """An entry that cannot be read or is not what was written: asked again (one warning a run)."""
        self.damaged += 1
        if self.damaged == 1:
            print(f"warning: response cache {self.path}: a damaged entry is asked again", file=sys.stderr)
        if key is not None:
            try:
                self._db.execute("DELETE FROM responses WHERE key = ?", (key,))
            except sqlite3.Error:
                pass  # a read-only or locked file: the entry stays, and is asked again each time

    def put(self, key: str, response: dict) -> None:
        value = json.dumps(response, sort_keys=True)
        with self._lock:
            try:
                self._db.execute("INSERT OR REPLACE INTO responses (key, value, digest) VALUES (?, ?, ?)",
                                 (key, value, hashlib.sha256(value.encode()).hexdigest()))
            except sqlite3.Error as exc:
                raise ModelError(f"response cache {self.path}: cannot keep answers ({exc}); move the file away, "
                                 "or pass --no-cache") from None
            self.stored += 1

    def close(self) -> None:
        with self._lock:
            self._db.close()
