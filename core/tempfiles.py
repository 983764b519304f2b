"""Names of vlbench's in-progress files and folders, and whether the process that owns one is alive.

A file or folder being written beside its final PATH is named `.NAME.vlbench-partial-PID` (a build's
staging folder, a report or prediction file), the previous OUT set aside while a build is published
`.NAME.vlbench-old-PID`. The `vlbench-` marker is what makes cleaning up after dead processes safe:
nothing the user named themselves (`.config.old-20240101`) matches.
"""

from __future__ import annotations

import os
import re

_TEMP = re.compile(r"^\.(?P<name>.+)\.vlbench-(?P<kind>partial|old)-(?P<pid>\d+)$")


def temp_name(name: str, kind: str = "partial") -> str:
    """This process's in-progress name for NAME (`kind`: partial or old)."""
    return f".{name}.vlbench-{kind}-{os.getpid()}"


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
