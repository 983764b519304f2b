"""Typed JSON decoding with errors that name the file, the record, the field path and the line."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

import msgspec

from builders.sources.files import expect_file, utf8_problem
from core.errors import SourceError, os_problem

_PATH = re.compile(r"at `\$((?:\.\w+)*)\[(\d+)\]\.?([^`]*)`")  # at `$.annotations[4].answers[0].answer`
_TOP_FIELD = re.compile(r"at `\$\.([\w.]+)`")  # at `$.data.dialogs`

# An id stored in an int64 Arrow column: larger values (2**63, 5000-digit integers) are source errors.
Id = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]
ImageId = Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)]  # an image's number (COCO's): never negative


def _record_of(data: bytes, prefix: str, index: int, record_key: str):
    """The `record_key` value of the item at `$prefix[index]`, decoded lazily (the rest of the file
    may hold numbers no decoder accepts); None when it cannot be told."""
    try:
        node = msgspec.json.decode(data, type=msgspec.Raw)
        for key in prefix.split(".")[1:]:
            node = msgspec.json.decode(node, type=dict[str, msgspec.Raw])[key]
        item = msgspec.json.decode(node, type=list[msgspec.Raw])[index]
        value = msgspec.json.decode(item, type=dict[str, msgspec.Raw]).get(record_key)
        return None if value is None else msgspec.json.decode(value, type=int)
    except (msgspec.MsgspecError, KeyError, IndexError, RecursionError):
        return None


def read_jsonl(path: Path, kind, what: str):
    """(line number, typed record) of every non-blank line of a JSON-lines file (`kind`: a msgspec
    type); `what` names the file in the error when it is not a regular file."""
    decode = msgspec.json.Decoder(kind).decode
    try:
        with open(expect_file(path, what), "rb") as fh:  # unreadable (permissions, I/O errors): one line
            for number, line in enumerate(fh, start=1):
                if line.strip():
                    yield number, _decode_line(path, decode, line, number)
    except OSError as exc:
        raise SourceError(path, os_problem(exc)) from None


def _decode_line(path: Path, decode, line: bytes, number: int):
    """One line of a JSON-lines file, typed by `decode` (a msgspec Decoder's decode); a failure names
    the line and the field."""
    try:
        return decode(line)
    except msgspec.ValidationError as exc:
        text = str(exc)
        where = text.split(" - at `$.", 1)
        field = where[1].rstrip("`") if len(where) == 2 else None
        missing = text.split("missing required field `", 1)
        if len(missing) == 2:
            field = missing[1].rstrip("`")
        raise SourceError(path, where[0], record=f"line {number}", field=field) from None
    except msgspec.DecodeError as exc:
        raise SourceError(path, utf8_problem(line) or f"malformed JSON ({exc})", record=f"line {number}") from None
    except RecursionError:
        raise SourceError(path, "JSON nested too deeply", record=f"line {number}") from None
    except UnicodeDecodeError as exc:
        raise SourceError(path, f"not UTF-8 text (byte offset {exc.start})", record=f"line {number}") from None


def decode_typed(path: Path, data: bytes, kind, record_key: str = "question_id"):
    """Typed msgspec decode of a JSON file; a failure names the record (its `record_key` value, else
    its list position), the field path inside it, and for malformed JSON the line."""
    try:
        return msgspec.json.decode(data, type=kind)
    except msgspec.ValidationError as exc:
        message = str(exc)
        m = _PATH.search(message)
        if m is None:
            top = _TOP_FIELD.search(message)
            raise SourceError(path, message.split(" - at ")[0], field=top.group(1) if top else None) from None
        prefix, index, field = m.groups()
        record = _record_of(data, prefix, int(index), record_key)
        raise SourceError(path, message.split(" - at ")[0], record=record if record is not None else f"#{index}",
                          field=field or None) from None
    except msgspec.DecodeError as exc:
        if utf8_problem(data):
            raise SourceError(path, utf8_problem(data)) from None
        m = re.search(r"byte (\d+)", str(exc))
        line = data.count(b"\n", 0, int(m.group(1)) if m else len(data)) + 1  # truncated: the last line
        raise SourceError(path, f"not valid JSON ({exc}) at line {line}") from None
    except RecursionError:
        raise SourceError(path, "JSON nested too deeply") from None
    except UnicodeDecodeError as exc:
        raise SourceError(path, f"not UTF-8 text (byte offset {exc.start})") from None
