"""Names of vlbench's in-progress files and folders, and whether the process that owns one is alive.

A file or folder being written beside its final PATH is named `.NAME.vlbench-partial-PID-TOKEN` (a build's
staging folder, a report or prediction file), the previous OUT set aside while a build is published
`.NAME.vlbench-old-PID-TOKEN`. The `vlbench-` marker is what makes cleaning up after dead processes safe:
nothing the user named themselves (`.config.old-20240101`) matches. The PID says whose it is (its owner's
death frees it); TOKEN, 16 random hex digits drawn per name, makes the name impossible to guess from the
PID, so nobody sharing the folder can plant a link or a file there before vlbench creates it (it is
created exclusively: `O_EXCL`, never through a link). A name without TOKEN (a vlbench before it) is still
recognised for cleaning up.
"""

from __future__ import annotations

import os
import re
import secrets

_TEMP = re.compile(r"^\.(?P<name>.+)\.vlbench-(?P<kind>partial|old)-(?P<pid>\d+)(?:-[0-9a-f]{16})?$")


def temp_name(name: str, kind: str = "partial") -> str:
    """A new in-progress name of this process for NAME (`kind`: partial or old), not guessable."""
    return f".{name}.vlbench-{kind}-{os.getpid()}-{secrets.token_hex(8)}"


def parse_temp_name(name: str) -> tuple[str, str, int] | None:
    """(final name, kind, owner PID) of an in-progress name, or None for any other name."""
    m = _TEMP.match(name)
    return None if m is None else (m["name"], m["kind"], int(m["pid"]))


def pid_alive(pid: int) -> bool:
    """True while a process with this PID exists (a PID we may not signal counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def create_exclusively(path) -> None:
    """Create PATH as a new empty file, never through a link and never over anything already there
    (`O_EXCL | O_NOFOLLOW`); a writer then opens it by name (its name, from `temp_name`, cannot be guessed)."""
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666))
