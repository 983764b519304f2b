"""The service's stored submissions: `<storage>/submissions/<sha256><suffix>`, content-addressed, each file created
exclusively and read without following a link, its bytes checked against the SHA-256 it is stored under every time
they are used (scored, used as a Ladder's best, revealed). A link, a folder or changed bytes planted at a
submission's address are never scored nor published in the team's place: an upload replaces what is planted with
the team's bytes, and a stored file whose bytes no longer match is refused as the service's fault (logged for the
hosts, costing the team nothing)."""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import secrets
import stat
from contextlib import contextmanager
from pathlib import Path

from core.ownfiles import kind_of_mode

SUFFIXES = (".json", ".jsonl", ".eval", ".xlsx", ".tsv", ".csv")  # the formats `evaluate` reads, by suffix
SCORING = "scoring"  # `<storage>/scoring/`: a worker's checked copy of the file it scores
BLOCK = 1 << 20
STALE_COPY_SECONDS = 86_400  # a copy this old was left by a killed worker


class StoredFileChanged(Exception):
    """A stored submission is not the bytes it was accepted as (a link, another kind of file, or changed bytes): a
    fault of the service's storage, never the team's."""


def stored_path(storage: Path, sha256: str, filename: str) -> Path:
    """Where a submission's bytes lie: content-addressed by SHA-256, with the suffix `evaluate` reads its format by
    (.json when the upload's name has none of them)."""
    suffix = Path(filename).suffix.lower()
    return Path(storage) / "submissions" / f"{sha256}{suffix if suffix in SUFFIXES else '.json'}"


def _open_stored(path: Path) -> int:
    """A descriptor of the stored regular file PATH, opened without following a link or waiting on a FIFO."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise StoredFileChanged(f"{path.name}: the stored file is missing") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise StoredFileChanged(f"{path.name}: a symbolic link lies where the stored file was") from None
        raise
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise StoredFileChanged(f"{path.name}: {kind_of_mode(mode)} lies where the stored file was")
    return fd


def copy_checked(source: Path, sha256: str, destination: Path) -> None:
    """Copy the stored file SOURCE to DESTINATION (created exclusively), its bytes hashed as they are copied: bytes
    that are not `sha256`'s are StoredFileChanged, and DESTINATION is removed."""
    fd = _open_stored(source)
    digest = hashlib.sha256()
    try:
        out = os.open(destination, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            while block := os.read(fd, BLOCK):
                digest.update(block)
                os.write(out, block)
        finally:
            os.close(out)
    finally:
        os.close(fd)
    if digest.hexdigest() != sha256:
        destination.unlink(missing_ok=True)
        raise StoredFileChanged(f"{source.name}: the stored file's bytes no longer match the SHA-256 it was "
                                "accepted with")


def matches(path: Path, sha256: str) -> bool:
    """PATH is a regular file (not a link) whose bytes are `sha256`'s."""
    try:
        fd = _open_stored(path)
    except StoredFileChanged:
        return False
    digest = hashlib.sha256()
    try:
        while block := os.read(fd, BLOCK):
            digest.update(block)
    finally:
        os.close(fd)
    return digest.hexdigest() == sha256


def store_upload(staged: Path, target: Path, sha256: str) -> None:
    """Put the finished upload STAGED (its bytes are `sha256`'s) at its address TARGET: linked there exclusively
    (never through or over an existing entry); where a file of the same bytes lies already (an identical earlier
    upload), kept as it is; where anything else lies (a link, a folder's name taken, changed bytes), replaced by the
    team's bytes and logged for the hosts. STAGED is left for the caller to remove."""
    try:
        os.link(staged, target)
        return
    except FileExistsError:
        pass
    if matches(target, sha256):
        return
    if target.is_dir() and not target.is_symlink():
        raise StoredFileChanged(f"{target.name}: a folder lies at the submission's address")
    logging.getLogger("vlbench.serve").warning("stored submission %s was not its bytes (a link or changed file "
                                               "planted there); replaced by the upload", target.name)
    os.replace(staged, target)


@contextmanager
def checked_copy(storage: Path, sha256: str, filename: str):
    """A private copy of a stored submission, checked against its SHA-256 (copy_checked), for the time it is scored:
    under the stored file's own name (what `evaluate` records of it), in a folder of its own; removed afterwards."""
    source = stored_path(storage, sha256, filename)
    folder = Path(storage) / SCORING / secrets.token_hex(8)
    folder.mkdir(parents=True)
    copy = folder / source.name
    try:
        copy_checked(source, sha256, copy)
        yield copy
    finally:
        copy.unlink(missing_ok=True)
        folder.rmdir()


def clean_copies(storage: Path) -> None:
    """Remove the copies killed workers left (older than STALE_COPY_SECONDS: a live worker's copy is younger)."""
    import time

    for folder in (Path(storage) / SCORING).glob("*"):
        if folder.is_dir() and not folder.is_symlink() and time.time() - folder.stat().st_mtime > STALE_COPY_SECONDS:
            for left in folder.iterdir():
                if left.is_file() and not left.is_symlink():
                    left.unlink(missing_ok=True)
            try:
                folder.rmdir()
            except OSError:  # something else lies there: left to the hosts
                pass
