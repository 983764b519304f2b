"""The tests' sweep of what a killed vLLM run leaves in /dev/shm (served_helpers.shm_swept): a segment
that appeared during the block and that no process holds is removed; one held open or mapped, or one
that was there before, is kept."""

from __future__ import annotations

import mmap
import os
import uuid
from pathlib import Path

import pytest
from served_helpers import shm_swept

SHM = Path("/dev/shm")
pytestmark = pytest.mark.skipif(not SHM.is_dir(), reason="no /dev/shm on this system")


def _segment(tag: str) -> Path:
    path = SHM / f"psm_vlbench_test_{tag}_{uuid.uuid4().hex[:8]}"
    path.write_bytes(b"\0" * 4096)
    return path


def test_orphaned_segments_go_held_and_older_ones_stay():
    older = _segment("older")
    held_open = held_mapped = None
    try:
        with shm_swept():
            orphan = _segment("orphan")
            held_open = open(_segment("open"), "rb")  # noqa: SIM115 - held across the block's end
            mapped = _segment("mapped")
            with open(mapped, "r+b") as fh:
                held_mapped = mmap.mmap(fh.fileno(), 4096)  # the file closed, the mapping kept
        assert not orphan.exists()
        assert Path(held_open.name).exists() and mapped.exists() and older.exists()
    finally:
        if held_mapped is not None:
            held_mapped.close()
        if held_open is not None:
            held_open.close()
            os.unlink(held_open.name)
        for path in SHM.glob("psm_vlbench_test_*"):
            path.unlink()
