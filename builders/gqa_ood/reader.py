"""Reader for GQA v1.2 `*_balanced_questions.json` (a JSON object keyed by question id).

Two passes, each decoding only what its stage needs:

* `read_index` splits the file into records without building Python objects for them
  (`msgspec.Raw` views into the file's bytes), checks that the records tile the file exactly --
  which is how a repeated question id, silently collapsed by any JSON parser, is caught -- and
  decodes only answer, groups, image id and types of each record.
* `read_records` turns the selected records (by byte offset) into typed Arrow columns with
  Arrow's C++ JSON reader, keeping each record's original JSON text as well.

Every problem is a `SourceError` naming the file, the question id and the field.
"""

from __future__ import annotations

import io
import itertools
import json
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.json as pa_json

from builders.sources.files import read_bytes, utf8_problem
from core.errors import SourceError
from core.progress import progress

SPLIT_FILES = {
    "train": "train_balanced_questions.json",
    "val": "val_balanced_questions.json",
    "testdev": "testdev_balanced_questions.json",
}


class _Groups(msgspec.Struct, gc=False):
    local: str | None
    global_: str | None = msgspec.field(name="global")


class _Types(msgspec.Struct, gc=False):
    structural: str
    semantic: str
    detailed: str


class _IndexRecord(msgspec.Struct, gc=False):
    """The fields the grouping stages read; the rest of the record is skipped unparsed."""

    answer: str
    imageId: str
    groups: _Groups
    types: _Types


class _AnnotationParts(msgspec.Struct, gc=False):
    answer: dict[str, str]
    question: dict[str, str]
    fullAnswer: dict[str, str]


class _Annotations(msgspec.Struct, gc=False):
    annotations: _AnnotationParts


INDEX_SCHEMA = pa.schema([
    ("question_id", pa.string()), ("offset", pa.int64()), ("length", pa.int64()),
    ("answer", pa.string()), ("local_group", pa.string()), ("global_group", pa.string()),
    ("image_id", pa.string()), ("structural", pa.string()), ("semantic", pa.string()),
])

_ANNOTATION_KEYS = ("answer", "question", "fullAnswer")
_SPAN = pa.struct([("span", pa.string()), ("object", pa.string())])
_OPERATION = pa.struct([("operation", pa.string()), ("argument", pa.string()),
                        ("dependencies", pa.list_(pa.int64()))])
# Typed columns of a GQA record, in the order they appear in every output table.
RECORD_SCHEMA = pa.schema([
    ("question", pa.string()), ("answer", pa.string()), ("fullAnswer", pa.string()),
    ("imageId", pa.string()), ("isBalanced", pa.bool_()),
    ("groups", pa.struct([("global", pa.string()), ("local", pa.string())])),
    ("types", pa.struct([("structural", pa.string()), ("semantic", pa.string()), ("detailed", pa.string())])),
    ("semantic", pa.list_(_OPERATION)), ("semanticStr", pa.string()),
    ("entailed", pa.list_(pa.string())), ("equivalent", pa.list_(pa.string())),
])
ANNOTATIONS_TYPE = pa.struct([(k, pa.list_(_SPAN)) for k in _ANNOTATION_KEYS])
_NULLABLE = {"groups.global", "groups.local"}
_PARSE_BLOCKS = 8  # Arrow parses blocks on its threads; at least 1 MiB each

_WS = rb"[ \t\r\n]*"
_KEY = rb'"((?:[^"\\]|\\.)*)"'
_FIRST_KEY = re.compile(_WS + rb"\{" + _WS + _KEY + _WS + rb":" + _WS)
_NEXT_KEY = re.compile(_WS + rb"," + _WS + _KEY + _WS + rb":" + _WS)
_END = re.compile(_WS + rb"\}" + _WS + rb"\Z")
_LAYOUTS = ((b", ", b": "), (b",", b":"))  # top-level separators of json.dump's default and compact output
_AT = re.compile(r"\s*-\s*at `\$(.*)`$")
_MISSING = re.compile(r"missing required field `(.*)`")


def _record_near(data: bytes, offset: int) -> str | None:
    """The question id of the record that contains byte `offset` (for syntax errors)."""
    found = None
    for m in re.finditer(rb'"([0-9]+)"' + _WS + rb":" + _WS + rb"\{", data[max(0, offset - 200_000):offset]):
        found = m.group(1).decode()
    return found


def _decode_error(path: Path, data: bytes, exc: msgspec.DecodeError) -> SourceError:
    text = str(exc)
    if utf8_problem(data):
        return SourceError(path, utf8_problem(data))
    if not data.strip():
        return SourceError(path, "empty file (expected a JSON object keyed by question id)")
    m = re.search(r"byte (\d+)", text)
    if "truncated" in text:
        return SourceError(path, f"truncated JSON ({len(data)} bytes)", record=_last_record_name(data))
    if m:
        near = _record_near(data, int(m.group(1)))
        return SourceError(path, f"malformed JSON at byte {m.group(1)}", record=near)
    return SourceError(path, f"not a JSON object keyed by question id ({text})")


def _last_record_name(data: bytes) -> str | None:
    return _record_near(data, len(data))


def _validation_error(path: Path, qid: str, exc: msgspec.ValidationError) -> SourceError:
    text = str(exc)
    field = None
    m = _AT.search(text)
    if m:
        field = m.group(1).lstrip(".").replace("[", "/").replace("]", "") or None
        text = text[: m.start()]
    missing = _MISSING.search(text)
    if missing:
        prefix = f"{field}." if field else ""
        return SourceError(path, "missing", record=qid, field=prefix + missing.group(1))
    if field is None and text.startswith("Expected `object`"):
        return SourceError(path, f"record is not a JSON object ({text.split(', ')[-1]})", record=qid)
    return SourceError(path, text.strip(), record=qid, field=field)


def _duplicate_error(path: Path, data: bytes) -> SourceError:
    """Slow path, reached only when the records do not tile the file: name the repeated id."""
    seen: dict[str, int] = {}

    def pairs_hook(pairs):
        return pairs

    top = json.loads(data, object_pairs_hook=pairs_hook)
    for position, (key, _value) in enumerate(top):
        if key in seen:
            return SourceError(path, f"question id appears twice (records {seen[key] + 1} and {position + 1})",
                               record=key)
        seen[key] = position
    return SourceError(path, "records do not tile the file (unexpected text between records)")


def _tiles_as_written(data: bytes, qids: list[str], raws: list, comma: bytes, colon: bytes) -> list[int] | None:
    """`_tiles_walk` for a file whose top level is `{"id":record<comma>"id":record...}` with these
    separators (json.dump's default or compact ones): each key is compared as bytes where it must be.
    None when the file is laid out otherwise."""
    offsets, pos, lead = [], 0, b'{"'
    for qid, raw in zip(qids, raws):
        head = lead + qid.encode() + b'"' + colon
        if not data.startswith(head, pos):
            return None
        pos += len(head)
        offsets.append(pos)
        pos += len(raw)
        lead = comma + b'"'
    return offsets if _END.match(data, pos) else None


def _tiles_walk(path: Path, data: bytes, qids: list[str], raws: list) -> np.ndarray:
    """Byte offsets of the records, checking that they tile the file: each key must follow the
    previous record (any whitespace layout), so a key the decoder collapsed cannot go unseen."""
    for comma, colon in _LAYOUTS if qids else ():
        offsets = _tiles_as_written(data, qids, raws, comma, colon)
        if offsets is not None:
            return np.array(offsets, dtype=np.int64)
    offsets = np.empty(len(qids), dtype=np.int64)
    pos, pattern = 0, _FIRST_KEY
    for i, (qid, raw) in enumerate(zip(qids, raws)):
        m = pattern.match(data, pos)
        key = m.group(1) if m else None
        if key is None or (key != qid.encode() and (b"\\" not in key or json.loads(b'"' + key + b'"') != qid)):
            raise _duplicate_error(path, data)
        offsets[i] = m.end()
        pos = m.end() + len(raw)
        pattern = _NEXT_KEY
    if not _END.match(data, pos if qids else data.index(b"{") + 1):
        raise _duplicate_error(path, data)
    return offsets


def read_raw_records(path: Path, data: bytes) -> tuple[list[str], list[msgspec.Raw], np.ndarray]:
    """Split the top-level object into (question ids, raw record views, byte offsets)."""
    try:
        top = msgspec.json.decode(data, type=dict[str, msgspec.Raw])
    except msgspec.ValidationError as exc:
        raise SourceError(path, f"expected a JSON object keyed by question id ({exc})") from None
    except msgspec.DecodeError as exc:
        raise _decode_error(path, data, exc) from None
    except RecursionError:
        raise SourceError(path, "JSON nested too deeply") from None
    except UnicodeDecodeError as exc:
        raise SourceError(path, f"not UTF-8 text (byte offset {exc.start})") from None
    qids = list(top)
    raws = list(top.values())
    return qids, raws, _tiles_walk(path, data, qids, raws)


def read_index(path: Path, data: bytes | None = None) -> pa.Table:
    """One row per question: id, byte span in the file, and the fields the grouping reads."""
    data = read_bytes(path) if data is None else data
    qids, raws, offsets = read_raw_records(path, data)
    if not qids:
        raise SourceError(path, "no questions (an empty JSON object)")
    decode = msgspec.json.Decoder(_IndexRecord).decode
    try:
        recs = [decode(raw) for raw in progress(raws, desc=f"reading {path.name}", unit="record")]
    except msgspec.ValidationError:
        for qid, raw in zip(qids, raws):  # find the first bad record for the message
            try:
                decode(raw)
            except msgspec.ValidationError as exc:
                raise _validation_error(path, qid, exc) from None
        raise
    columns = [[r.answer for r in recs], [r.groups.local for r in recs], [r.groups.global_ for r in recs],
               [r.imageId for r in recs], [r.types.structural for r in recs], [r.types.semantic for r in recs]]
    lengths = np.fromiter(map(len, raws), dtype=np.int64, count=len(raws))
    return pa.table([pa.array(qids, pa.string()), pa.array(offsets), pa.array(lengths)]
                    + [pa.array(c, pa.string()) for c in columns], schema=INDEX_SCHEMA)


def _annotation_column(path: Path, qids: list[str], records: list) -> pa.Array:
    """GQA `annotations` ({part: {token span: object id}}) as lists of (span, object) per part."""
    decode = msgspec.json.Decoder(list[_Annotations]).decode
    try:
        parsed = decode(b"[" + b",".join(records) + b"]")
    except msgspec.ValidationError:
        single = msgspec.json.Decoder(_Annotations).decode
        for qid, rec in zip(qids, records):
            try:
                single(rec)
            except msgspec.ValidationError as exc:
                raise _validation_error(path, qid, exc) from None
        raise
    children = []
    for k in _ANNOTATION_KEYS:
        parts = [getattr(p.annotations, k) for p in parsed]
        offsets = np.zeros(len(parts) + 1, dtype=np.int32)
        np.cumsum(np.fromiter(map(len, parts), dtype=np.int32, count=len(parts)), out=offsets[1:])
        spans = pa.array(list(itertools.chain.from_iterable(parts)), pa.string())
        objects = pa.array(list(itertools.chain.from_iterable(p.values() for p in parts)), pa.string())
        children.append(pa.ListArray.from_arrays(pa.array(offsets), pa.StructArray.from_arrays(
            [spans, objects], fields=list(_SPAN))))
    return pa.StructArray.from_arrays(children, fields=list(ANNOTATIONS_TYPE))


def _first_null(path: Path, table: pa.Table, qids: list[str]) -> None:
    """Required fields that Arrow's reader left null are reported as missing."""
    def walk(name: str, array):
        if name not in _NULLABLE and array.null_count:
            row = int(np.flatnonzero(np.asarray(array.is_null()))[0])
            raise SourceError(path, "missing or null", record=qids[row], field=name)
        if pa.types.is_struct(array.type):
            for i, f in enumerate(array.type):
                walk(f"{name}.{f.name}", array.field(i))

    for name in table.column_names:
        walk(name, table.column(name).combine_chunks())


def _read_json_lines(lines: bytes, blocks: int) -> pa.Table:
    """RECORD_SCHEMA columns of JSON lines, parsed by Arrow in `blocks` blocks on its thread pool."""
    return pa_json.read_json(
        io.BytesIO(lines),
        read_options=pa_json.ReadOptions(block_size=max(1 << 20, len(lines) // blocks + 1), use_threads=True),
        parse_options=pa_json.ParseOptions(explicit_schema=RECORD_SCHEMA, unexpected_field_behavior="ignore"),
    )


def _read_as_one_block(path: Path, lines: bytes, qids: list[str]) -> pa.Table:
    """The lines parsed again as one block, after a parse in blocks failed: a record longer than a
    block is read this way, and otherwise the first record Arrow rejects is named (the row number
    in Arrow's message then counts from the first record)."""
    try:
        return _read_json_lines(lines, blocks=1)
    except pa.ArrowInvalid as exc:
        m = re.search(r"Column\((.*?)\).*?in row (\d+)", str(exc))
        if m and int(m.group(2)) < len(qids):
            field = m.group(1).strip("/").replace("/", ".")
            raise SourceError(path, f"wrong type ({str(exc).splitlines()[0]})", record=qids[int(m.group(2))],
                              field=field) from None
        raise SourceError(path, f"malformed record ({str(exc).splitlines()[0]})") from None


def read_records(path: Path, data: bytes, qids: list[str], offsets, lengths) -> pa.Table:
    """Typed columns of the given records (RECORD_SCHEMA + annotations) and their JSON text."""
    view = memoryview(data)
    records = [view[o:o + n] for o, n in zip(offsets.tolist(), lengths.tolist())]
    lines = b"\n".join(records)
    if b"\r" in lines or lines.count(b"\n") != max(0, len(records) - 1):
        # Pretty-printed sources: structural newlines become spaces (strings cannot hold raw ones).
        lines = b"\n".join(bytes(r).replace(b"\r", b" ").replace(b"\n", b" ") for r in records)
    with ThreadPoolExecutor(max_workers=1) as pool:
        # Arrow parses the typed columns on its threads, the GIL released, while this thread decodes
        # the annotations; problems are still reported in that order.
        parsing = pool.submit(_read_json_lines, lines, _PARSE_BLOCKS)
        try:
            annotations, annotation_problem = _annotation_column(path, qids, records), None
        except SourceError as exc:
            annotations, annotation_problem = None, exc
        try:
            table = parsing.result()
        except pa.ArrowInvalid:
            table = _read_as_one_block(path, lines, qids)
    # one chunk per column, as a one-block parse gives: parquet pages, so the files' bytes, follow chunks
    table = table.combine_chunks().select(RECORD_SCHEMA.names)
    _first_null(path, table, qids)
    if annotation_problem is not None:
        raise annotation_problem
    table = table.append_column("annotations", annotations)
    lengths_arr = np.asarray(lengths, dtype=np.int64)
    value_offsets = np.zeros(len(records) + 1, dtype=np.int64)
    np.cumsum(lengths_arr, out=value_offsets[1:])
    record_json = pa.LargeStringArray.from_buffers(
        len(records), pa.py_buffer(value_offsets), pa.py_buffer(b"".join(records)))
    try:
        record_json.validate(full=True)
    except pa.ArrowInvalid:
        raise SourceError(path, "a record is not valid UTF-8 text") from None
    return table.append_column("record_json", record_json)
