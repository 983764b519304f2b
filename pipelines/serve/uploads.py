"""A submission's bytes, received: streamed into a staging file of `<storage>/incoming/` under the upload limit while
their SHA-256 is taken, then stored content-addressed and recorded as queued (pipelines/serve/store.py): a submission
is accepted only once both are done. The JSON API sends the file as the request body; the team page's form sends it
as one part of a multipart/form-data body, parsed as a stream (python-multipart's push parser: the file is never held
whole in memory nor spooled anywhere else, its other fields are bounded)."""

from __future__ import annotations

import hashlib
import os
import secrets
import time
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import unquote

from core.errors import ParamsError
from pipelines.serve.store import LimitReached, StoreUnavailable, now_utc, unavailable_from
from pipelines.serve.stored import StoredFileChanged, store_upload, stored_path

STALE_UPLOAD_SECONDS = 3600
LIMIT_WAIT_SECONDS = 60.0  # how long an upload over a limit waits for the counted submissions still being scored
LIMIT_POLL_SECONDS = 0.5
FIELD_BYTES = 4096  # a form field other than the file (the CSRF token, the phase's name)
FORM_FIELDS = 8


class TooLarge(ParamsError):
    """An upload over the configured size limit (HTTP 413)."""


class BadForm(ParamsError):
    """A form body that is not the page's upload form (HTTP 400)."""


class SlowUpload(ParamsError):
    """A body that stopped coming (no byte for `upload_idle_seconds`) or did not end within `upload_seconds` (HTTP
    408): a client trickling it would hold a staging file and two descriptors for ever."""


class TooManyUploads(ParamsError):
    """More uploads in progress from one token or one address than the config allows (HTTP 429)."""


def address(request) -> str:
    """The caller's address: the peer's, or the one a trusted proxy forwarded (pipelines/serve/app.py, proxied)."""
    return getattr(request.client, "host", "") or ""


class InFlight:
    """The uploads in progress in this web process, counted per key (a team's token, the caller's address): one
    over a key's bound is refused before its body is read."""

    def __init__(self, per_token: int, per_address: int):
        self.bounds = {"team": per_token, "address": per_address}
        self.counts: dict[tuple[str, str], int] = {}

    @contextmanager
    def held(self, team, address: str):
        keys = [("address", address), *((("team", str(team.id)),) if team is not None else ())]
        full = next((k for k in keys if self.counts.get(k, 0) >= self.bounds[k[0]]), None)
        if full is not None:
            what = "this team's token" if full[0] == "team" else "this address"
            raise TooManyUploads(f"{self.bounds[full[0]]} upload(s) from {what} are in progress already; send one "
                                 "once they are done")
        for key in keys:
            self.counts[key] = self.counts.get(key, 0) + 1
        try:
            yield
        finally:
            for key in keys:
                self.counts[key] -= 1
                if not self.counts[key]:
                    del self.counts[key]


async def bounded_body(request, idle_seconds: float, total_seconds: float):
    """The request's body, chunk by chunk, each within `idle_seconds` of the last and the whole within
    `total_seconds` (SlowUpload past either)."""
    import asyncio

    loop = asyncio.get_running_loop()
    deadline = loop.time() + total_seconds
    chunks = request.stream().__aiter__()
    while True:
        left = deadline - loop.time()
        try:
            chunk = await asyncio.wait_for(chunks.__anext__(), max(0.0, min(idle_seconds, left)))
        except StopAsyncIteration:
            return
        except asyncio.TimeoutError:
            raise SlowUpload(f"the upload was too slow: no byte for {idle_seconds:g} s, or not whole within "
                             f"{total_seconds:g} s; send it again") from None
        yield chunk


def sent_name(raw: str | None) -> str | None:
    """The X-Vlbench-Filename header's name: an RFC 8187 ext-value (`UTF-8''` then percent-encoded UTF-8, what
    `vlbench submit` sends) decoded; a bare value is the header's bytes read as UTF-8 (HTTP gives them as Latin-1),
    or as they came when they are not UTF-8."""
    if raw is None:
        return None
    if raw[:7].lower() == "utf-8''":
        return unquote(raw[7:], errors="replace")
    try:
        return raw.encode("latin-1").decode("utf-8")
    except UnicodeError:
        return raw


def display_name(raw: str | None) -> str:
    """An upload's name as shown to its team: its last path part, printable, at most 120 characters."""
    name = Path((raw or "submission.json").replace("\\", "/")).name
    name = "".join(c for c in name if c.isprintable())[:120]
    return name or "submission.json"


def clean_incoming(incoming: Path) -> None:
    """Remove uploads a killed server never finished (never recorded); another process's upload in progress is
    younger than STALE_UPLOAD_SECONDS."""
    incoming.mkdir(parents=True, exist_ok=True)
    for left in incoming.glob(".upload-*"):
        if time.time() - left.stat().st_mtime > STALE_UPLOAD_SECONDS:
            left.unlink(missing_ok=True)


@contextmanager
def _kept(where: Path):
    """A write of the storage folder: a full disk or a read-only file system is StoreUnavailable (507, 503), and so
    is a folder planted at a submission's address (503: nothing is accepted that could not be kept)."""

    try:
        yield
    except StoredFileChanged as exc:
        raise StoreUnavailable(f"{where}: {exc}; the upload cannot be kept until the hosts remove it") from None
    except OSError as exc:
        found = unavailable_from(exc, str(where), 0)
        if found is None:
            raise
        raise found from None


class Upload:
    """One upload in progress: a staging file created exclusively (never through a link) under a random name. A
    full disk or a read-only file system is StoreUnavailable."""

    def __init__(self, incoming: Path, limit: int):
        self.path, self.limit, self.size = incoming / f".upload-{secrets.token_hex(16)}", limit, 0
        self.sha256: str | None = None
        self._digest = hashlib.sha256()
        self._handle = None
        with _kept(incoming):
            descriptor = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0),
                                 0o600)
        self._handle = os.fdopen(descriptor, "wb")

    def write(self, chunk: bytes) -> None:
        self.size += len(chunk)
        if self.size > self.limit:
            raise TooLarge(f"the file is over the upload limit of {self.limit >> 20} MB")
        self._digest.update(chunk)
        with _kept(self.path.parent):
            self._handle.write(chunk)

    def finish(self) -> str:
        """The file on disk (flushed, synced); its SHA-256."""
        with _kept(self.path.parent):
            self._handle.flush()
            os.fsync(self._handle.fileno())
            self._handle.close()
        if self.size == 0:
            raise BadForm("the file is empty: send the predictions")
        self.sha256 = self._digest.hexdigest()
        return self.sha256

    def discard(self) -> None:
        if self._handle is not None and not self._handle.closed:
            try:
                self._handle.close()
            except OSError:  # a full disk refuses the buffered rest: the file is removed anyway
                pass
        try:
            self.path.unlink(missing_ok=True)
        except OSError:  # a read-only file system: clean_incoming removes it once it can
            pass


def accept(config, store, team, phase, upload: Upload, filename: str, wake=None) -> int:
    """Store a finished upload content-addressed and record it as queued (`store.submit`: LimitReached over a limit
    of the phase, the stored bytes kept for a later identical upload); wake the workers. The submission's id. Over a
    limit only because some of the submissions it counts are still queued or scoring (any may yet be refused, and a
    refused one costs nothing), it waits for them, up to LIMIT_WAIT_SECONDS, and counts again: a bad file followed
    at once by a good one is not 429. Runs on a worker thread (its waits never hold the event loop)."""
    sha256 = upload.finish()
    with _kept(config.storage / "submissions"):
        store_upload(upload.path, stored_path(config.storage, sha256, filename), sha256)
    upload.discard()
    deadline = time.monotonic() + LIMIT_WAIT_SECONDS
    while True:
        try:
            submission = store.submit(team, phase, sha256, filename, upload.size, now_utc())
            break
        except LimitReached as exc:
            if not exc.pending or time.monotonic() > deadline:
                raise
            if wake is not None:
                wake.set()
            time.sleep(LIMIT_POLL_SECONDS)
    if wake is not None:
        wake.set()
    return submission


async def read_form(request, incoming: Path, limit: int, body) -> tuple[dict[str, str], str | None, Upload | None]:
    """(fields, the file's name, its upload) of the upload form's multipart body, read as a stream: one file part,
    named `file`; at most FORM_FIELDS other fields of at most FIELD_BYTES each; `body`: the request's chunks
    (bounded_body). The upload is discarded on any problem (BadForm, TooLarge, SlowUpload)."""
    from python_multipart.multipart import MultipartParser, parse_options_header

    kind, options = parse_options_header(request.headers.get("content-type", ""))
    if kind != b"multipart/form-data" or not options.get(b"boundary"):
        raise BadForm("expected the upload form (multipart/form-data)")
    fields: dict[str, str] = {}
    part: dict = {}
    found: dict = {"upload": None, "filename": None}

    def on_part_begin():
        part.clear()
        part.update(headers={}, field=b"", value=b"", data=bytearray(), file=False)

    def on_header_field(data, start, end):
        part["field"] += data[start:end]

    def on_header_value(data, start, end):
        part["value"] += data[start:end]

    def on_header_end():
        part["headers"][part["field"].lower()] = part["value"]
        part["field"], part["value"] = b"", b""

    def on_headers_finished():
        _, disposition = parse_options_header(part["headers"].get(b"content-disposition", b""))
        part["name"] = disposition.get(b"name", b"").decode("utf-8", "replace")
        if b"filename" in disposition:
            if part["name"] != "file" or found["upload"] is not None:
                raise BadForm("the form sends one file, as its `file` field")
            part["file"] = True
            found["filename"] = disposition[b"filename"].decode("utf-8", "replace")
            found["upload"] = Upload(incoming, limit)

    def on_part_data(data, start, end):
        if part["file"]:
            found["upload"].write(data[start:end])
            return
        part["data"] += data[start:end]
        if len(part["data"]) > FIELD_BYTES:
            raise BadForm(f"form field {part['name'][:40]!r} is over {FIELD_BYTES} bytes")

    def on_part_end():
        if not part["file"]:
            if len(fields) >= FORM_FIELDS:
                raise BadForm(f"the form has more than {FORM_FIELDS} fields")
            fields[part["name"]] = bytes(part["data"]).decode("utf-8", "replace")

    callbacks = {"on_part_begin": on_part_begin, "on_header_field": on_header_field,
                 "on_header_value": on_header_value, "on_header_end": on_header_end,
                 "on_headers_finished": on_headers_finished, "on_part_data": on_part_data, "on_part_end": on_part_end}
    parser = MultipartParser(options[b"boundary"], callbacks)
    try:
        async for chunk in body:
            parser.write(chunk)
        parser.finalize()
    except ParamsError:
        if found["upload"] is not None:
            found["upload"].discard()
        raise
    except Exception as exc:  # the parser's own refusal of a malformed body
        if found["upload"] is not None:
            found["upload"].discard()
        raise BadForm(f"the form's body is malformed ({type(exc).__name__})") from None
    return fields, found["filename"], found["upload"]
