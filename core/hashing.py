"""SHA-256 of files: the manifest's input and output checksums, the stage cache's and the text
cache's entries."""

from __future__ import annotations

import hashlib
from pathlib import Path

_CHUNK = 1 << 22


def sha256_file(path: Path) -> str:
    """Read in chunks into one buffer (a fresh chunk each time would be fresh memory each time)."""
    digest = hashlib.sha256()
    buffer = memoryview(bytearray(_CHUNK))
    with open(path, "rb", buffering=0) as fh:
        while n := fh.readinto(buffer):
            digest.update(buffer[:n])
    return digest.hexdigest()
