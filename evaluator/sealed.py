"""Sealed splits: a built split cut into a public half (what a participant sees: the Task's `Sealing.public`
columns) and a sealed answer file (every other column), bound by a salted SHA-256 commitment that the public card
and manifest carry. The engine under `vlbench seal` (evaluator/seal.py), the scoring commands' `--answers` (a
sealed split read back whole, `open_split`) and `vlbench verify`.

The answer file is a ZIP archive of stored (uncompressed) members, written with fixed dates:
- `salt`: 64 hex digits (32 random bytes), which keeps the commitment from testing guesses offline;
- `seal.json`: the benchmark, its config, the column order of the built tables, the sealed columns, whether ids
  were made opaque, and per split its row count;
- `<split>.parquet`: per sealed split, `vlbench_row` (the row's place in the built table), `vlbench_public_id`
  (the row's id in the public half, so that halves that do not belong together are refused), the original ids
  where the public half names rows by keyed hashes, and the sealed columns, in the public half's row order;
- `<config>/<split>.parquet`: the split's table in each other config of the build, whole (GQA-OOD's head and tail,
  Social-IQ's pairs: row subsets or recombinations that give answers away), so that the two halves give back every
  table of the sealed splits and `verify` runs the benchmark's invariants on them.

The commitment is SHA-256 over the `salt` member's bytes followed by the `sha256sum` listing of every other member
("<sha256 hex>  <name>\\n", by name): anyone holding the file can recompute it with `unzip` and `sha256sum`."""

from __future__ import annotations

import hashlib
import hmac
import io
import json
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from core.data import parquet_from_bytes
from core.errors import ParamsError

FORMAT = "vlbench-sealed-answers/1"
SALT, RECORD = "salt", "seal.json"
ROW = "vlbench_row"  # a sealed table's column: each row's place in the built table
NAME = "vlbench_public_id"  # a sealed table's column: the id the public half gives the row (checked on joining)
ALGORITHM = "SHA-256 of the `salt` member (64 hex digits) followed by the `sha256sum` listing of the other members, " \
    "sorted by name"
MAX_MEMBERS = 64  # seal.json, the salt and a table per split
MAX_ANSWER_FILE_BYTES = 4 << 30  # an answer file larger than this is refused unread (VQA-CP's test split: ~10 MB)
ZIP_DATE = (1980, 1, 1, 0, 0, 0)


@dataclass(frozen=True)
class Answers:
    """A sealed answer file read back: its record, its tables by split and its commitment (recomputed)."""

    path: Path
    record: dict
    tables: dict[str, pa.Table]  # split -> the sealed half of the task's config
    others: dict[str, dict[str, pa.Table]]  # config -> split -> the whole table of another config
    commitment: str
    salt: bytes


def commitment(members: dict[str, bytes]) -> str:
    """The commitment to an answer file's members (the module docstring's rule: the `salt` member as stored, its 64
    hex digits, then the others' `sha256sum` listing)."""
    listing = "".join(f"{hashlib.sha256(data).hexdigest()}  {name}\n" for name, data in sorted(members.items())
                      if name != SALT)
    return hashlib.sha256(members[SALT] + listing.encode()).hexdigest()


def opaque_id(salt: bytes, row_id: str) -> str:
    """A row's public name where the benchmark's ids give answers away: HMAC-SHA-256 of the id keyed by the salt,
    its first 20 hex digits (80 bits; the seal checks that the names it gives are distinct)."""
    return "s" + hmac.new(salt, row_id.encode(), hashlib.sha256).hexdigest()[:20]


def id_columns(task) -> tuple[str, ...]:
    return task.id_field if isinstance(task.id_field, tuple) else (task.id_field,)


def public_names(task, table: pa.Table) -> pa.Array:
    """Each row's submission id, as text (a composite id as its JSON list): a single id column cast by Arrow."""
    if isinstance(task.id_field, str) and task.id_field in table.column_names:
        return table.column(task.id_field).cast(pa.string()).combine_chunks()
    return pa.array([json.dumps(list(i)) if isinstance(i, tuple) else str(i) for i in task.ids(table)], pa.string())


def public_features(table: pa.Table, columns: list[str]):
    """The Hugging Face features of the kept columns, read from the built table's own schema (an embedded image
    column included), so the public half's schema names nothing it does not hold."""
    from datasets import Features

    found = Features.from_arrow_schema(table.schema)
    return Features({c: found[c] for c in columns})


def split_table(task, table: pa.Table, salt: bytes, where: str) -> tuple[pa.Table, pa.Table]:
    """(public half, sealed half) of one built split by the task's `sealing`: the public half keeps the declared
    columns (rows named and ordered by `opaque_id` where the task says its ids give answers away); the sealed half
    holds every other column with each row's place in the built table, in the public half's row order."""
    sealing = task.sealing
    if sealing.one_row_per is not None:
        values = table.column(sealing.one_row_per).to_pylist()
        if len(set(values)) != len(values):
            raise ParamsError(f"{where}: a sealed {task.name} split holds one row per {sealing.one_row_per}, and this "
                              f"one has {len(values) - len(set(values)):,} more: {sealing.one_row_why} "
                              f"(`vlbench build {task.name} --param {sealing.build_param}`)")
    public = [c for c in table.column_names if c in sealing.public]
    sealed = [c for c in table.column_names if c not in sealing.public]
    order = list(range(table.num_rows))
    columns = {ROW: pa.array(order, pa.int64())}
    if sealing.opaque_ids:
        (id_column,) = id_columns(task)
        names = [opaque_id(salt, i) for i in table.column(id_column).to_pylist()]
        if len(set(names)) != len(names):
            raise ParamsError(f"{where}: two ids share a keyed hash; seal again (a new salt)")
        order = sorted(order, key=names.__getitem__)
        columns = {ROW: pa.array(order, pa.int64()), id_column: table.column(id_column).take(order)}
        table = table.take(order).set_column(table.column_names.index(id_column), id_column,
                                             pa.array([names[k] for k in order], pa.string()))
    columns.update({c: table.column(c) for c in sealed if c not in columns})
    public_table = table.select(public)
    public_table = public_table.cast(public_features(table, public).arrow_schema)
    columns[NAME] = public_names(task, public_table)
    return public_table, pa.table(columns)


def _parquet(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink)
    return sink.getvalue()


def answer_file(record: dict, tables: dict[str, pa.Table], others: dict[str, dict[str, pa.Table]],
                salt: bytes) -> tuple[bytes, str]:
    """(the answer file's bytes, its commitment)."""
    members = {SALT: salt.hex().encode(), RECORD: (json.dumps(record, indent=1, sort_keys=True) + "\n").encode()}
    for split, table in sorted(tables.items()):
        members[f"{split}.parquet"] = _parquet(table.replace_schema_metadata(None))
    for config, by_split in sorted(others.items()):
        for split, table in sorted(by_split.items()):
            members[f"{config}/{split}.parquet"] = _parquet(table)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as archive:
        for name, data in sorted(members.items()):
            info = zipfile.ZipInfo(name, ZIP_DATE)
            info.external_attr = 0o644 << 16
            archive.writestr(info, data)
    return out.getvalue(), commitment(members)


def read_answers(path: Path) -> Answers:
    """A sealed answer file, checked: a ZIP of stored members (nothing to inflate), the members the format names,
    a well-formed record, a table per split it lists. Anything else is one line naming the file."""
    import os
    import stat

    from core.ownfiles import kind_of, kind_of_mode

    path = Path(path)
    try:  # never waiting on a FIFO, never reading a device or a file larger than any answer file
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        found = kind_of(path)
        raise ParamsError(f"--answers {path}: " + ("no such file (the sealed answer file `vlbench seal` wrote)"
                                                   if found == "no such file" else
                                                   f"cannot be read ({exc.strerror})")) from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise ParamsError(f"--answers {path}: is {kind_of_mode(info.st_mode)}, not the sealed answer file "
                          "`vlbench seal` wrote")
    with os.fdopen(fd, "rb") as handle:
        if info.st_size > MAX_ANSWER_FILE_BYTES:
            raise ParamsError(f"--answers {path}: is {info.st_size:,} bytes, more than any sealed answer file "
                              f"({MAX_ANSWER_FILE_BYTES >> 30} GiB); refused unread")
        try:
            data = handle.read(MAX_ANSWER_FILE_BYTES + 1)
        except OSError as exc:
            raise ParamsError(f"--answers {path}: cannot be read ({exc.strerror})") from None
    if len(data) > MAX_ANSWER_FILE_BYTES:
        raise ParamsError(f"--answers {path}: grew past {MAX_ANSWER_FILE_BYTES >> 30} GiB while being read")
    return read_answers_bytes(data, path)


def read_answers_bytes(data: bytes, path: Path) -> Answers:
    """`read_answers` of the file's bytes (`path` names it in errors)."""
    from core.names import check_split_name

    where = f"--answers {path}"
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except (OSError, zipfile.BadZipFile, ValueError) as exc:
        raise ParamsError(f"{where}: not a sealed answer file ({exc})") from None
    with archive:
        infos = archive.infolist()
        if len(infos) > MAX_MEMBERS or any(i.compress_type != zipfile.ZIP_STORED for i in infos):
            raise ParamsError(f"{where}: not a sealed answer file (its members are compressed or too many)")
        if sum(i.file_size for i in infos) > len(data):  # stored members cannot hold more than the file does
            raise ParamsError(f"{where}: not a sealed answer file (its members overlap: they name more bytes than "
                              "the file holds)")
        names = [i.filename for i in infos]
        if len(set(names)) != len(names) or not {SALT, RECORD} <= set(names):
            raise ParamsError(f"{where}: not a sealed answer file (it needs one '{SALT}' and one '{RECORD}' member)")
        try:
            members = {i.filename: archive.read(i) for i in infos}
        except (OSError, zipfile.BadZipFile, ValueError) as exc:
            raise ParamsError(f"{where}: a damaged member ({exc})") from None
    try:
        salt = bytes.fromhex(members[SALT].decode("ascii"))
        record = json.loads(members[RECORD])
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise ParamsError(f"{where}: its salt or {RECORD} is not readable") from None
    if len(salt) != 32:
        raise ParamsError(f"{where}: its salt is not 32 bytes")
    if not isinstance(record, dict) or record.get("format") != FORMAT or not isinstance(record.get("splits"), dict) \
            or not all(isinstance(record.get(k), str) for k in ("benchmark", "config")) \
            or not all(isinstance(i, dict) and isinstance(i.get("columns"), list)
                       and all(isinstance(c, str) for c in i["columns"]) for i in record["splits"].values()):
        raise ParamsError(f"{where}: {RECORD} is not a {FORMAT} record")
    others = record.get("other_configs", {})
    if not isinstance(others, dict) or not all(isinstance(v, dict) for v in others.values()):
        raise ParamsError(f"{where}: {RECORD}'s other_configs is not a record of configs")
    tables, whole, read = {}, {}, set()

    def table(name: str, info) -> pa.Table:
        data = members.get(name)
        if data is None or not isinstance(info, dict) or not isinstance(info.get("rows"), int):
            raise ParamsError(f"{where}: {RECORD} lists {name}, whose table or row count is missing")
        try:
            found = parquet_from_bytes(data)
        except (OSError, pa.ArrowException) as exc:
            raise ParamsError(f"{where}: {name} is not a readable table ({str(exc).splitlines()[0]})") from None
        if found.num_rows != info["rows"]:
            raise ParamsError(f"{where}: {name} does not hold the {info['rows']:,} rows {RECORD} lists")
        read.add(name)
        return found

    for split, info in record["splits"].items():
        tables[check_split_name(split, where)] = table(f"{split}.parquet", info)
        if not {ROW, NAME} <= set(tables[split].column_names):
            raise ParamsError(f"{where}: {split}.parquet has no {ROW} or {NAME} column")
    for config, by_split in others.items():
        check_split_name(config, where)
        whole[config] = {check_split_name(s, where): table(f"{config}/{s}.parquet", info)
                         for s, info in by_split.items()}
    extra = set(members) - {SALT, RECORD} - read
    if extra:
        raise ParamsError(f"{where}: holds {sorted(extra)[0]!r}, which its record does not list")
    return Answers(path, record, tables, whole, commitment(members), salt)


def sealed_record(folder: Path) -> dict | None:
    """The `sealed` record of a public half's manifest; None for any other folder."""
    from core.manifest import MANIFEST, read_manifest

    if not (Path(folder) / MANIFEST).is_file():
        return None
    record = read_manifest(folder).get("sealed")
    if record is None:
        return None
    if not isinstance(record, dict) or not isinstance(record.get("commitment"), str) \
            or not isinstance(record.get("splits"), dict) or not isinstance(record.get("public_columns"), list):
        raise ParamsError(f"{folder}: its manifest's `sealed` record is not one `vlbench seal` writes")
    return record


def check_pair(folder: Path, record: dict, answers: Answers) -> None:
    """The answer file is the one the public half commits to (its commitment recomputed), for its benchmark."""
    if not hmac.compare_digest(answers.commitment, record["commitment"]):
        raise ParamsError(f"--answers {answers.path}: its commitment {answers.commitment[:16]}... is not the "
                          f"{record['commitment'][:16]}... that {folder}'s card and manifest hold (another seal's "
                          "answers, or a changed file)")


def joined(task, public: pa.Table, sealed: pa.Table, columns: list[str], public_ids: bool) -> pa.Table:
    """The built table again, row for row in the built order, from its public and sealed halves: every column in
    `columns` order; the ids the public half shows (`public_ids`, what a submission to the sealed split names) or
    the built ones (what `verify` compares)."""
    import numpy as np
    import pyarrow.compute as pc

    if public.num_rows != sealed.num_rows or NAME not in sealed.column_names:
        raise ParamsError(f"the public half has {public.num_rows:,} rows and the sealed one {sealed.num_rows:,}")
    shown, names = public_names(task, public), sealed.column(NAME).combine_chunks()
    same = pc.equal(shown, names)
    if len(same) and (same.null_count or not pc.all(same).as_py()):  # (`all` of no rows is null, not true)
        mismatch = next(k for k, v in enumerate(same.to_pylist()) if not v)
        raise ParamsError(f"row {mismatch} of the public half is {shown[mismatch].as_py()}, where the sealed half has "
                          f"{names[mismatch].as_py()} (halves of another seal, or a changed public half)")
    rows = sealed.column(ROW).to_numpy()
    order = np.argsort(rows, kind="stable")
    if not np.array_equal(rows[order], np.arange(len(rows))):
        raise ParamsError(f"the sealed half's {ROW} column is not a permutation of its rows")
    ordered = bool(np.array_equal(order, np.arange(len(order))))  # the public half in the built order: no take
    both = {}
    for name in columns:
        if name in sealed.column_names and not (public_ids and name in public.column_names):
            found = sealed.column(name)
        elif name in public.column_names:
            found = public.column(name)
        else:
            raise ParamsError(f"column {name} is in neither half")
        both[name] = found if ordered else found.take(pa.array(order))
    return pa.table(both)


def public_problems(task, record: dict, tables: dict[str, pa.Table]) -> list[str]:
    """The columns a public half holds that it must not: one the task does not show a participant, or one its
    record says is sealed."""
    problems = []
    sealed_columns = set()
    for split, info in record["splits"].items():
        if isinstance(info, dict) and isinstance(info.get("sealed_columns"), list):
            sealed_columns |= set(map(str, info["sealed_columns"]))
    for split, table in sorted(tables.items()):
        for column in table.column_names:
            if column not in task.sealing.public or column in sealed_columns:
                problems.append(f"{task.config}/{split}: column {column} is not one a participant sees "
                                f"({', '.join(task.sealing.public)})")
    return problems
