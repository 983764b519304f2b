"""Reading a small file vlbench wrote into one of its own folders (a suite's marker, card and kept-result keys, a
prediction record) as untrusted: the folder may be shared, copied or tampered with, so the file is
opened without following a link and without waiting on a FIFO, and is refused unread unless it is a regular
file of at most `limit` bytes."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from core.errors import VlbenchError

_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def kind_of_mode(mode: int) -> str:
    """A file mode's kind in words (`a folder`, `a FIFO`, ...; `a regular file`)."""
    if stat.S_ISREG(mode):
        return "a regular file"
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def kind_of(path: Path) -> str:
    """What is at PATH, in words, for a refusal that must say what it found: `no such file`, `a folder`, `a FIFO`,
    `a character device`, ..., `a regular file` (a link is followed: what it points to)."""
    try:
        return kind_of_mode(os.stat(path).st_mode)
    except FileNotFoundError:
        return "no such file"
    except OSError as exc:
        return f"not readable ({exc.strerror})"


class OwnFileError(VlbenchError):
    """A file of vlbench's own folder that is not what vlbench writes there (one line, naming it)."""


def read_own_file(path: Path, limit: int) -> bytes | None:
    """PATH's bytes, or None when there is no such file. A symbolic link, a FIFO, a device, a folder, or a file
    larger than `limit` bytes is OwnFileError, without reading it; other OS errors are raised as they are."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise OwnFileError(f"{path}: is a symbolic link, not the file vlbench wrote; refused unread") from None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OwnFileError(f"{path}: is {kind_of_mode(info.st_mode)}, not the file vlbench wrote; refused unread")
        if info.st_size > limit:
            raise OwnFileError(f"{path}: is {info.st_size:,} bytes, more than the {limit:,} vlbench writes there; "
                               "refused unread")
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:  # it grew while being read
            raise OwnFileError(f"{path}: grew past {limit:,} bytes while being read; refused")
        return b"".join(chunks)
    finally:
        os.close(fd)
