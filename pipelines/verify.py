"""`vlbench verify`: manifest hashes, the benchmark's invariants, and published checksums where known."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from builders.base import schema_problem
from builders.registry import get_builder
from builders.sources.files import check_relative
from core.data import load_table
from core.errors import VlbenchError
from core.hashing import sha256_file
from core.manifest import MANIFEST, read_manifest, read_manifest_file
from evaluator.harness.hub import LAYER, layer_problems
from evaluator.sealed import sealed_record


def git_blob_id(path: Path) -> str:
    """What `git hash-object FILE` prints: sha1 of 'blob <size>\\0' + content."""
    data = path.read_bytes()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass
class Verification:
    problems: list[str] = field(default_factory=list)
    checked: list[str] = field(default_factory=list)
    published: dict[str, bool] = field(default_factory=dict)  # legacy file -> identical to the published one
    notes: list[str] = field(default_factory=list)  # what may explain a difference from a published build


def non_finite_columns(tables: dict[str, dict[str, pa.Table]]) -> list[str]:
    """`config/split: column` of every floating-point value that is NaN or infinite (counts, scores,
    probabilities and entropies are finite numbers in every benchmark), nested lists and structs included."""
    def floats(array):
        kind = array.type
        if pa.types.is_floating(kind):
            yield array
        elif pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
            yield from floats(array.flatten())
        elif pa.types.is_struct(kind):
            for i in range(kind.num_fields):
                yield from floats(array.field(i))

    found = []
    for config, by_split in sorted(tables.items()):
        for split, table in sorted(by_split.items()):
            for name, column in zip(table.column_names, table.columns):
                if any(pc.all(pc.is_finite(a)).as_py() is False for chunk in column.chunks for a in floats(chunk)):
                    found.append(f"{config}/{split}: column '{name}' holds NaN or infinite values")
    return found


def table_problems(builder, tables: dict[str, dict[str, pa.Table]], params: dict) -> list[str]:
    """The one validation path of a benchmark's tables: `build` runs it before publishing OUT and
    `verify` runs it on the published parquet. Columns first (the invariants read them)."""
    columns = [f"{config}/{split}: {problem}" for config, by_split in sorted(tables.items())
               for split, table in sorted(by_split.items())
               if (problem := schema_problem(builder, config, table)) is not None]
    return columns or builder.check_invariants(tables, params) + non_finite_columns(tables)


def folder_entries(folder: Path) -> dict[str, str]:
    """{path relative to the folder: "file" for a regular file, else what the entry is} of every entry under the
    folder but its sub-folders, read without following a link (a link loop, a link out of the folder, a FIFO
    that would block a read are each reported, never followed or opened)."""
    import os
    import stat

    entries = {}
    for root, folders, files in os.walk(folder, followlinks=False):
        for name in [*files, *folders]:
            path = Path(root) / name
            mode = path.lstat().st_mode
            rel = path.relative_to(folder).as_posix()
            if stat.S_ISLNK(mode):
                entries[rel] = "a symbolic link"
            elif stat.S_ISREG(mode):
                entries[rel] = "file"
            elif not stat.S_ISDIR(mode):
                entries[rel] = "a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else \
                    "a device file"
    return entries


def verify(folder: Path, answers: Path | None = None) -> Verification:
    """What `vlbench verify FOLDER` checks; the public half of a sealed build is checked by `_verify_sealed`
    (`answers`: its sealed answer file)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise VlbenchError(f"{folder}: " + ("is a file, expected a folder written by `vlbench build`"
                                            if folder.exists() else "no such folder"))
    if not (folder / MANIFEST).is_file():
        raise VlbenchError(f"{folder}: no {MANIFEST} (not a folder written by `vlbench build`)")
    manifest = read_manifest(folder)
    report = Verification()
    if not isinstance(manifest.get("outputs"), list) or not all(
            isinstance(i, dict) and isinstance(i.get("path"), str) and isinstance(i.get("sha256"), str)
            for i in manifest["outputs"]) or not isinstance(manifest.get("splits"), list):
        raise VlbenchError(f"{folder / MANIFEST}: not a vlbench manifest (outputs, splits)")
    if not isinstance(manifest.get("benchmark"), str):
        raise VlbenchError(f"{folder / MANIFEST}: field 'benchmark' missing")
    listed = {item["path"]: item for item in manifest["outputs"]}
    for rel in listed:
        check_relative(rel, folder / MANIFEST, field="outputs")
    layered: set[str] = set()  # a repo pushed with --inspect-task: its layer's files are checked by its record
    if (folder / LAYER).is_file():
        layer_report, layered = layer_problems(folder, listed)
        report.problems += layer_report
        report.checked.append(f"the Inspect layer's {len(layered) - 1} files against {LAYER}")
    entries = folder_entries(folder)
    for rel, item in sorted(listed.items()):
        if rel in layered:
            continue
        kind = entries.get(rel)
        if kind is None:
            report.problems.append(f"{rel}: listed in the manifest but missing")
        elif kind == "file" and sha256_file(folder / rel) != item["sha256"]:
            report.problems.append(f"{rel}: sha256 differs from the manifest")
    for rel, kind in sorted(entries.items()):
        if kind != "file":
            report.problems.append(f"{rel}: {kind}, not a regular file (a build holds regular files and folders only)")
        elif rel != MANIFEST and rel not in listed and rel not in layered:
            report.problems.append(f"{rel}: not listed in the manifest")
    report.checked.append(f"{len(listed)} files against the manifest's sha256")
    builder = get_builder(manifest["benchmark"])
    record = sealed_record(folder)
    if record is not None:
        _verify_sealed(folder, manifest, builder, record, answers, report)
    elif answers is not None:
        raise VlbenchError(f"--answers {answers}: {folder} is not the public half of a sealed build (`vlbench seal`)")
    elif not report.problems:
        tables = {c: {s: load_table(folder, c, s) for s in manifest["splits"]} for c in builder.configs}
        report.problems += table_problems(builder, tables, manifest["params"])
        report.checked.append("invariants of " + manifest["benchmark"] + " and finite numbers in every table")
    published = builder.published_blob_ids
    for rel in sorted(listed):
        if rel in published:
            report.published[rel] = (folder / rel).is_file() and git_blob_id(folder / rel) == published[rel]
    return report


def _whole_tables(folder: Path, builder, record: dict, found) -> dict[str, dict[str, pa.Table]]:
    """Every table of the sealed splits again, from the public half and the answer file: the task's config with
    the built ids, the others as the file holds them."""
    from evaluator.sealed import joined
    from evaluator.tasks import get_task

    task = get_task(builder.name)
    config = record["config"]
    tables = {config: {split: joined(task, load_table(folder, config, split), found.tables[split],
                                     found.record["splits"][split]["columns"], False)
                       for split in record["splits"]}}
    return {**tables, **found.others}


def _verify_sealed(folder: Path, manifest: dict, builder, record: dict, answers: Path | None,
                   report: Verification) -> None:
    """The public half of a sealed build holds its tables, card and manifest only; its tables only the columns a
    participant sees (evaluator/sealed.py's `public_problems`), typed as every build writes them; its card the
    commitment its manifest records. With `answers`: the answer file is the one committed to, and the two halves
    give back tables the benchmark's invariants hold on."""
    from evaluator.sealed import check_pair, public_problems, read_answers
    from evaluator.tasks import get_task

    task = get_task(builder.name)
    config, opened = record.get("config"), record.get("open_splits") or []
    if config != task.config or not isinstance(opened, list) or \
            sorted([*record["splits"], *opened]) != sorted(manifest["splits"]):
        report.problems.append(f"{MANIFEST}: its sealed record names config {config} and splits "
                               f"{sorted(record['splits'])} + {opened}, not {task.config} and {manifest['splits']}")
        return
    allowed = {"README.md"} | {p["path"] for p in manifest["outputs"]
                               if p["path"].startswith(f"{config}/") and p["path"].split("/")[1].split("-")[0]
                               in manifest["splits"] and p["path"].count("/") == 1}
    report.problems += [f"{rel}: the public half of a sealed build holds only its tables, card and manifest"
                        for rel in sorted(p["path"] for p in manifest["outputs"]) if rel not in allowed]
    card = (folder / "README.md").read_text(errors="replace") if (folder / "README.md").is_file() else ""
    if record["commitment"] not in card:
        report.problems.append(f"README.md: does not state the commitment {record['commitment']} its manifest holds")
    if report.problems:
        return
    tables = {split: load_table(folder, config, split) for split in record["splits"]}
    report.problems += public_problems(task, record, tables)
    expected = builder.table_features(config).arrow_schema
    for split, table in sorted(tables.items()):
        for name in table.column_names:
            if name in expected.names and not table.schema.field(name).type.equals(expected.field(name).type):
                report.problems.append(f"{config}/{split}: column {name} is {table.schema.field(name).type}, not "
                                       f"{expected.field(name).type} as every {builder.name} build writes it")
        info = record["splits"][split]
        if not isinstance(info, dict) or info.get("rows") != table.num_rows:
            report.problems.append(f"{config}/{split}: {table.num_rows:,} rows, not the {info.get('rows')} its sealed "
                                   "record lists")
    for split in opened:
        problem = schema_problem(builder, config, load_table(folder, config, split))
        if problem is not None:
            report.problems.append(f"{config}/{split} (open): {problem}")
    report.checked.append(f"the public half's sealed splits hold only the columns a participant sees "
                          f"({', '.join(task.sealing.public)}), and its card the commitment")
    if answers is None or report.problems:
        return
    found = read_answers(answers)
    check_pair(folder, record, found)
    report.checked.append(f"{answers}: the answer file committed to ({record['commitment']})")
    report.problems += table_problems(builder, _whole_tables(folder, builder, record, found), manifest["params"])
    report.checked.append(f"invariants of {builder.name} and finite numbers in every table of the two halves joined")


def compare_sealed(folder: Path, report: Verification, answers: Path, against: Path) -> None:
    """The two halves of a sealed build against the build it was sealed from, row for row: every table of the
    sealed splits, in every config."""
    from evaluator.sealed import read_answers

    against = Path(against)
    if not (against / MANIFEST).is_file():
        raise VlbenchError(f"--against {against}: no {MANIFEST} (the built folder the public half was sealed from)")
    if report.problems:
        return
    builder = get_builder(read_manifest(folder)["benchmark"])
    record = sealed_record(folder)
    whole = _whole_tables(folder, builder, record, read_answers(answers))
    for config, by_split in sorted(whole.items()):
        for split, table in sorted(by_split.items()):
            built = load_table(against, config, split)
            if table.equals(built):
                continue
            if table.column_names != built.column_names or table.num_rows != built.num_rows:
                report.problems.append(f"{config}/{split}: the two halves give {table.num_rows:,} rows of "
                                       f"{table.column_names}, the build {built.num_rows:,} of {built.column_names}")
                continue
            column = next(c for c in table.column_names if not table.column(c).equals(built.column(c)))
            row = next(k for k, (a, b) in enumerate(zip(table.column(column).to_pylist(),
                                                        built.column(column).to_pylist())) if a != b)
            report.problems.append(f"{config}/{split}: row {row}, column {column} differs from {against}")
    report.checked.append(f"every table of the sealed splits, row for row, against {against}")


def published_manifest(path: Path) -> dict:
    """The manifest of a published build: its folder (local, or downloaded from the hub) or the
    manifest.json itself."""
    path = Path(path)
    if path.is_dir():
        if not (path / MANIFEST).is_file():
            raise VlbenchError(f"--against {path}: no {MANIFEST} (not a folder written by `vlbench build`)")
        manifest = read_manifest(path)
    elif path.is_file():
        manifest = read_manifest_file(path)
    else:
        raise VlbenchError(f"--against {path}: no such file or folder")
    if not isinstance(manifest.get("outputs"), list) or not all(
            isinstance(i, dict) and isinstance(i.get("path"), str) and isinstance(i.get("sha256"), str)
            for i in manifest["outputs"]):
        raise VlbenchError(f"--against {path}: not a vlbench manifest (outputs)")
    return manifest


def _differences(ours: dict, theirs: dict) -> list[str]:
    """`key: here -> published` for each key whose value differs (keys only one side has included)."""
    ours, theirs = (d if isinstance(d, dict) else {} for d in (ours, theirs))
    return [f"{k} {ours.get(k, 'absent')} here, {theirs.get(k, 'absent')} published"
            for k in sorted(set(ours) | set(theirs), key=str) if ours.get(k) != theirs.get(k)]


def compare_with_published(folder: Path, report: Verification, published: dict) -> None:
    """Byte-compare a build with a published one by their manifests' sha256. Each file that differs,
    is missing or is extra is a problem; when any is, the notes say which library versions, params
    and inputs differ (what a rebuild must match to give the same bytes)."""
    ours = {item["path"]: item["sha256"] for item in read_manifest(folder)["outputs"]}
    theirs = {item["path"]: item["sha256"] for item in published["outputs"]}
    differing = sorted(p for p in set(ours) & set(theirs) if ours[p] != theirs[p])
    report.problems += [f"{p}: differs from the published build" for p in differing]
    report.problems += [f"{p}: in the published build, not in this one" for p in sorted(set(theirs) - set(ours))]
    report.problems += [f"{p}: in this build, not in the published one" for p in sorted(set(ours) - set(theirs))]
    report.checked.append(f"{len(theirs)} files against the published build's sha256")
    if ours == theirs:
        return
    manifest = read_manifest(folder)
    report.notes += [f"version: {d}" for d in _differences(manifest.get("versions"), published.get("versions"))]
    report.notes += [f"param: {d}" for d in _differences(manifest.get("params"), published.get("params"))]
    inputs = [{i["path"]: i.get("sha256") for i in (m.get("inputs") if isinstance(m.get("inputs"), list) else [])
               if isinstance(i, dict) and isinstance(i.get("path"), str)} for m in (manifest, published)]
    report.notes += [f"input {d.split(' ', 1)[0]} differs" for d in _differences(*inputs)]
    if not report.notes:
        report.notes.append("the library versions, params and inputs recorded are the same: another machine's "
                            "floats or a library the manifest does not name")
