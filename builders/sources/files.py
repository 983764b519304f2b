"""Reading raw files as a user's input: every failure is a `SourceError` naming the file (and the
record and field where the caller knows them), never an OSError, a codec error or a recursion error.

Also the one containment rule for paths and ids read from data (VCR `img_fn`, VL-Bias annotation
`image`, Social-IQ video ids): a relative path that stays inside its root.
"""

from __future__ import annotations

import io
import json
import os
from pathlib import Path, PurePosixPath, PureWindowsPath

from core.errors import SourceError, os_problem


def read_bytes(path: Path) -> bytes:
    """A source file's bytes; a FIFO, a folder or a device is refused for what it is, never waited on nor read
    without end."""
    import stat

    from core.ownfiles import kind_of_mode

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise SourceError(path, os_problem(exc)) from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise SourceError(path, f"is {kind_of_mode(mode)}, not a file")
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=False) as handle:
            return handle.read()
    except OSError as exc:
        raise SourceError(path, os_problem(exc)) from None
    finally:
        os.close(fd)


def decode_utf8(path: Path, data: bytes, record: str | None = None) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise SourceError(path, utf8_problem(data), record=record) from None


def read_text(path: Path) -> str:
    return decode_utf8(path, read_bytes(path))


def load_json(path: Path, text: str | bytes, record: str | None = None):
    """Python's JSON parser with its failures as one-line source errors (used for small files)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise SourceError(path, f"not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})",
                          record=record) from None
    except RecursionError:
        raise SourceError(path, "JSON nested too deeply", record=record) from None
    except UnicodeDecodeError:
        raise SourceError(path, "not UTF-8 text", record=record) from None


def list_folder(path: Path) -> list[Path]:
    """The entries of a folder, sorted; a file or a missing path is a SourceError."""
    try:
        return sorted(Path(path).iterdir())
    except OSError as exc:
        raise SourceError(path, os_problem(exc) if not isinstance(exc, FileNotFoundError) else "folder not found") \
            from None


def expect_file(path: Path, what: str = "a file") -> Path:
    """PATH when it is a regular file (symlinks followed), else a SourceError saying what it is
    (`what` with its article: "an audio clip")."""
    path = Path(path)
    if path.is_file():
        return path
    if path.is_dir():
        raise SourceError(path, f"is a folder, expected {what}")
    if path.is_symlink() and not path.exists():
        raise SourceError(path, f"is a symbolic link to a missing file (expected {what})")
    if path.exists():
        raise SourceError(path, f"is not a regular file (expected {what})")
    raise SourceError(path, f"not found (expected {what})")


def utf8_problem(data: bytes) -> str | None:
    """'not UTF-8 text (...)' when DATA is not UTF-8, else None (asked on error paths only)."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        return f"not UTF-8 text (byte 0x{data[exc.start]:02x} at line {line}; save the file as UTF-8)"
    return None


def check_relative(relative: str, file: Path, record=None, field: str | None = None) -> str:
    """A path read from data must be relative and stay inside its folder: empty, absolute, drive,
    NUL and '..' are refused, naming the file, record and field. Returns the normalised path."""
    problem = None
    if not isinstance(relative, str) or not relative.strip():
        problem = "empty path"
    elif "\0" in relative:
        problem = "path contains a NUL character"
    else:
        posix, windows = PurePosixPath(relative), PureWindowsPath(relative)
        if posix.is_absolute() or windows.is_absolute() or windows.drive or relative.startswith(("/", "\\")):
            problem = f"absolute path '{relative[:200]}' (expected a path relative to its folder)"
        elif ".." in posix.parts or ".." in windows.parts:
            problem = f"path '{relative[:200]}' leaves its folder ('..')"
    if problem:
        raise SourceError(file, problem, record=record, field=field)
    return PurePosixPath(os.path.normpath(relative)).as_posix()


def inside(root: Path, relative: str, file: Path, record=None, field: str | None = None) -> Path:
    """ROOT / RELATIVE for a path read from data, after `check_relative`. The check is on the
    path's text, so symlinks the user placed inside ROOT are followed."""
    return Path(root) / check_relative(relative, file, record, field)


def decode_image(path: Path, data: bytes, record=None, field: str | None = None) -> tuple[int, int]:
    """Fully decode image bytes once (a truncated JPEG fails here, not later); returns (width, height)."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as img:
            img.load()
            return img.size
    except UnidentifiedImageError:
        raise SourceError(path, "not a readable image (not a format Pillow can identify)", record=record,
                          field=field) from None
    except Image.DecompressionBombError as exc:
        raise SourceError(path, f"image too large to decode safely ({exc})", record=record, field=field) from None
    except (OSError, SyntaxError, ValueError) as exc:
        raise SourceError(path, f"damaged image ({exc})", record=record, field=field) from None
