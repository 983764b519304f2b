"""The one exception hierarchy of vlbench.

Every error a user can cause derives from `VlbenchError`; the CLI prints its message on one
line and exits with code 2. Anything else is an internal error (exit 1).
"""

from __future__ import annotations

import errno


class VlbenchError(Exception):
    """A user-facing error: bad input, bad parameters or a bad submission."""


class SourceError(VlbenchError):
    """A raw source file is malformed. The message names file, record and field."""

    def __init__(self, path, message: str, record: str | None = None, field: str | None = None):
        where = [str(path)]
        if record is not None:
            where.append(f"record {record}")
        if field is not None:
            where.append(f"field '{field}'")
        super().__init__(f"{': '.join(where)}: {message}")
        self.path, self.record, self.field = str(path), record, field


class ParamsError(VlbenchError):
    """A builder parameter or command-line option has an unknown name or a bad value."""


class SubmissionError(VlbenchError):
    """A prediction file does not match the split it is scored against."""


class ModelError(VlbenchError):
    """A model spec cannot be resolved or the model cannot run on the given inputs."""


class WriteError(VlbenchError):
    """The environment refused a write (a full disk, a file too large, a read-only or forbidden folder): a
    command that runs several benchmarks stops on it, never records it as one benchmark's failure."""


STOP_NOTES: list[str] = []  # what a stop by Ctrl-C or SIGTERM would leave now, besides nothing half-written (the
# suite's run: its card marked unfinished); a block that would leave it adds its note and takes it back when it
# ends well; the command line starts each command with none


def stopped_line(signum: int) -> str:
    """The one line of a command stopped by Ctrl-C (SIGINT) or SIGTERM, with the notes of what it left."""
    import signal

    word = "interrupted" if signum == signal.SIGINT else "terminated"
    return f"error: {word}; " + "; ".join(["nothing half-written was left behind", *STOP_NOTES])


WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EFBIG, errno.EROFS, errno.EACCES, errno.EPERM, errno.EDQUOT})


def write_error(message: str, exc: OSError) -> VlbenchError:
    """The error of a failed write: a WriteError where the environment refused it, else a VlbenchError."""
    return (WriteError if exc.errno in WRITE_ERRNOS else VlbenchError)(f"{message} ({exc.strerror or exc})")


def os_problem(exc: OSError) -> str:
    """A user-facing reason for an OSError (no Python class names, no addresses)."""
    if isinstance(exc, IsADirectoryError):
        return "is a folder, expected a file"
    if isinstance(exc, NotADirectoryError):
        return "is a file, expected a folder"
    if isinstance(exc, FileNotFoundError):
        return "not found"
    if isinstance(exc, PermissionError):
        return "cannot be read (permission denied)"
    if exc.errno == errno.ENOSPC:
        return "no space left on the device"
    return f"cannot be read ({exc.strerror or exc})"
