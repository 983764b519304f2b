"""`vlbench verify`: manifest hashes, the benchmark's invariants, and published checksums where known."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from builders.errors import VlbenchError
from builders.registry import get_builder
from evaluator.data import load_table
from pipelines.manifest import MANIFEST, read_manifest
from pipelines.stages import sha256_file


def git_blob_id(path: Path) -> str:
    """What `git hash-object FILE` prints: sha1 of 'blob <size>\\0' + content."""
    data = path.read_bytes()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass
class Verification:
    problems: list[str] = field(default_factory=list)
    checked: list[str] = field(default_factory=list)
    published: dict[str, bool] = field(default_factory=dict)  # legacy file -> identical to the published one


def verify(folder: Path) -> Verification:
    folder = Path(folder)
    if not (folder / MANIFEST).is_file():
        raise VlbenchError(f"{folder}: no {MANIFEST} (not a folder written by `vlbench build`)")
    manifest = read_manifest(folder)
    report = Verification()
    listed = {item["path"]: item for item in manifest["outputs"]}
    for rel, item in sorted(listed.items()):
        path = folder / rel
        if not path.is_file():
            report.problems.append(f"{rel}: listed in the manifest but missing")
        elif sha256_file(path) != item["sha256"]:
            report.problems.append(f"{rel}: sha256 differs from the manifest")
    extra = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*")
                   if p.is_file() and p.name != MANIFEST and p.relative_to(folder).as_posix() not in listed)
    report.problems += [f"{rel}: not listed in the manifest" for rel in extra]
    report.checked.append(f"{len(listed)} files against the manifest's sha256")
    builder = get_builder(manifest["benchmark"])
    if not report.problems:
        tables = {c: {s: load_table(folder, c, s) for s in manifest["splits"]} for c in builder.configs}
        report.problems += builder.check_invariants(tables, manifest["params"])
        report.checked.append("invariants of " + manifest["benchmark"])
    published = getattr(builder, "published_blob_ids", {})
    for rel in sorted(listed):
        if rel in published:
            report.published[rel] = (folder / rel).is_file() and git_blob_id(folder / rel) == published[rel]
    return report
