"""An exported task's `vlbench_task.json`: what `vlbench export-task` wrote (vlbench's version, the benchmark,
the split, the build's manifest SHA-256, the form, the prompt template, the decoding, the metrics), which also
marks the folder as this command's. Its split and task name are checked when it is read: a task folder may
come from anyone, and both reach file names and generated code."""

from __future__ import annotations

import json
from pathlib import Path

from core.errors import ParamsError, VlbenchError
from core.names import check_identifier, check_split_name

META = "vlbench_task.json"


def read_meta(folder: Path) -> dict:
    """An exported task's `vlbench_task.json`."""
    try:
        meta = json.loads((Path(folder) / META).read_bytes())
    except (OSError, ValueError) as exc:
        raise VlbenchError(f"{folder}: not a task folder written by `vlbench export-task` ({META}: {exc})") from None
    if not isinstance(meta, dict) or meta.get("written_by") != "vlbench export-task":
        raise VlbenchError(f"{folder}: {META} was not written by `vlbench export-task`")
    try:  # both reach file names and generated code (the Hub layer, the docs' path)
        check_split_name(meta.get("split"), f"{folder}: {META}")
        check_identifier(meta.get("task"), f"{folder}: {META}: task")
    except ParamsError as exc:
        raise VlbenchError(str(exc)) from None
    return meta


def is_task_folder(folder: Path) -> bool:
    try:
        read_meta(folder)
    except VlbenchError:
        return False
    return True
