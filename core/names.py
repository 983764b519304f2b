"""Names that come from data and end up in generated files: what they may hold.

A built folder chooses its split names (its shard files are named `<split>-0000i-of-0000N.parquet`), and a
built folder may come from anyone (the Hub, a shared folder). A split name reaches file names, YAML, the
Python task file `vlbench export-task` writes and the Hub layer, so it is checked where it is read, against
the rule `datasets` itself holds split names to (`\\w+(\\.\\w+)*`, here ASCII only): letters, digits and
underscores, in words joined by single dots. A task name built from it must be a Python identifier (Inspect
calls the task's function by that name), and a path written into a file must be text (no control
characters, valid UTF-8). Each refusal is one line naming the value and what is allowed.
"""

from __future__ import annotations

import keyword
import re

from core.errors import ParamsError
from core.sanitise import CONTROL

_SPLIT = re.compile(r"[A-Za-z0-9_]+(?:\.[A-Za-z0-9_]+)*")
SPLIT_RULE = "letters, digits and underscores, in words joined by single dots (as datasets' split names)"


def shown(value: object, limit: int = 60) -> str:
    """A name as an error line shows it: as it is when it is printable ASCII, else its `ascii()` repr (control
    characters and bytes that are not UTF-8 escaped); bounded."""
    text = str(value)
    if not (text.isascii() and text.isprintable()):
        text = ascii(text)
    return text if len(text) <= limit else text[:limit] + "..."


def check_split_name(split: object, where: str) -> str:
    """`split` when it is a valid split name; else ParamsError naming `where`."""
    if not isinstance(split, str) or not _SPLIT.fullmatch(split) or len(split) > 100:
        raise ParamsError(f"{where}: split name {shown(split)} is not allowed: a split name holds {SPLIT_RULE}, "
                          "at most 100 characters")
    return split


def check_identifier(name: object, where: str) -> str:
    """`name` when it is a Python identifier (ASCII, not a keyword); else ParamsError naming `where`."""
    if not isinstance(name, str) or not name.isascii() or not name.isidentifier() or keyword.iskeyword(name):
        raise ParamsError(f"{where}: {shown(name)} is not a Python identifier (ASCII letters, digits and "
                          "underscores, not starting with a digit)")
    return name


def check_path_text(path: object, option: str) -> str:
    """The text of a path that is written into a file (a YAML, a README): refused when it holds control
    characters or is not valid UTF-8 (a name from another system)."""
    text = str(path)
    if CONTROL.search(text):
        raise ParamsError(f"{option} {shown(text)}: holds control characters; choose a path without them")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ParamsError(f"{option} {shown(text)}: is not valid UTF-8, and this path is written into the "
                          "files made; choose a UTF-8 path") from None
    return text
