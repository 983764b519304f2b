"""An exported task's `vlbench_task.json`: what `vlbench export-task` wrote (vlbench's version, the benchmark,
the split, the build's manifest SHA-256, the form, the prompt template, the decoding, the metrics), which also
marks the folder as this command's."""

from __future__ import annotations

import json
from pathlib import Path

from core.errors import VlbenchError

META = "vlbench_task.json"


def read_meta(folder: Path) -> dict:
    """An exported task's `vlbench_task.json`."""
    try:
        meta = json.loads((Path(folder) / META).read_bytes())
    except (OSError, ValueError) as exc:
        raise VlbenchError(f"{folder}: not a task folder written by `vlbench export-task` ({META}: {exc})") from None
    if not isinstance(meta, dict) or meta.get("written_by") != "vlbench export-task":
        raise VlbenchError(f"{folder}: {META} was not written by `vlbench export-task`")
    return meta


def is_task_folder(folder: Path) -> bool:
    try:
        read_meta(folder)
    except VlbenchError:
        return False
    return True
