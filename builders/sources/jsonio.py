"""Typed JSON decoding with errors that name the file, the record, the field path and the line."""

from __future__ import annotations

import re
from pathlib import Path

import msgspec

from builders.errors import SourceError

_PATH = re.compile(r"at `\$((?:\.\w+)*)\[(\d+)\]\.?([^`]*)`")  # at `$.annotations[4].answers[0].answer`


def decode_typed(path: Path, data: bytes, kind, record_key: str = "question_id"):
    """Typed msgspec decode of a JSON file; a failure names the record (its `record_key` value, else
    its list position), the field path inside it, and for malformed JSON the line."""
    try:
        return msgspec.json.decode(data, type=kind)
    except msgspec.ValidationError as exc:
        message = str(exc)
        m = _PATH.search(message)
        if m is None:
            raise SourceError(path, message.split(" - at ")[0]) from None
        prefix, index, field = m.groups()
        items = msgspec.json.decode(data)
        for key in prefix.split(".")[1:]:
            items = items[key]
        item = items[int(index)]
        record = item.get(record_key) if isinstance(item, dict) else None
        record = record if isinstance(record, int) else f"#{index}"
        raise SourceError(path, message.split(" - at ")[0], record=record, field=field or None) from None
    except msgspec.DecodeError as exc:
        m = re.search(r"byte (\d+)", str(exc))
        line = data.count(b"\n", 0, int(m.group(1)) if m else len(data)) + 1  # truncated: the last line
        raise SourceError(path, f"not valid JSON ({exc}) at line {line}") from None
