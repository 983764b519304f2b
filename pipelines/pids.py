"""Whether the process that owns a temporary file or folder (named with its PID) is still alive."""

from __future__ import annotations

import os


def pid_alive(pid: int) -> bool:
    """True while a process with this PID exists (a PID we may not signal counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
