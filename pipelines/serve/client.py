"""`vlbench submit`: a file streamed to a challenge service's API with a team's token (read from an environment
variable, never a flag), then, with `--wait`, its status polled until it is scored or refused.

The server is a stranger's as far as the client knows: every exchange is bounded in time and size
(core.http_exchange: a server trickling its answer, an endless body or a gzip bomb is one line), a redirect is
never followed (the token would go with it), and anything but the API's documented answer (a JSON object with an
integer id and one of the four statuses) is one line and exit 2, never "submission None: None". What the server
says reaches the terminal only cleaned (core.sanitise): no escape sequence, no forged line. The file's name is
sent as an RFC 8187 ext-value (`UTF-8''` and its UTF-8 bytes percent-encoded), so any name travels in an HTTP
header."""

from __future__ import annotations

import os
import time
from pathlib import Path
from urllib.parse import quote, urljoin

from core.errors import ParamsError, SubmissionError
from core.http_exchange import bounded_exchange, checked_url, shown_url
from core.sanitise import looks_like_credential, sanitise

TOKEN_VARIABLE = "VLBENCH_TOKEN"
ANSWER_BYTES = 1 << 20  # the API answers with one small JSON object: a longer answer is refused unread
REQUEST_SECONDS = 600.0  # the default bound of one request: the upload and the whole answer
REDIRECTS = frozenset({301, 302, 303, 307, 308})
STATUSES = ("queued", "scoring", "scored", "refused")  # pipelines/serve/store.py's, the API's documented statuses


def wait_for_service(url: str, running=lambda: True, seconds: float = 120.0) -> bool:
    """Wait, at most `seconds`, until the service at URL answers its status route: True; False when it does not in
    time, or as soon as `running()` says the process meant to serve it has died."""
    import httpx

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/api/v1/status", timeout=2).status_code == 200:
                return True
        except httpx.HTTPError:
            if not running():
                return False
            time.sleep(0.2)
    return False


def _token(variable: str) -> str:
    """The team's token from `variable`: printable ASCII (what `serve team add` prints), never shown."""
    token = os.environ.get(variable, "").strip()
    if not token:
        raise ParamsError(f"{variable}: not set; put the team's token there (`vlbench serve team add` printed it)")
    if any(not 33 <= ord(c) < 127 for c in token):
        raise ParamsError(f"{variable}: not a token (it holds spaces, control or non-ASCII characters, which no token "
                          "has; not shown)")
    return token


def _phase(phase: str, token: str) -> str:
    """`--phase` as the request's path will carry it: a phase's name (pipelines/serve/config.py's rule); a token
    given there is refused unsent."""
    from pipelines.serve.config import NAME, NAME_RULE

    if looks_like_credential(phase, (token,)):
        raise ParamsError("--phase: that is a token, not a phase's name; not sent (the token goes in VLBENCH_TOKEN)")
    if not NAME.fullmatch(phase):
        raise ParamsError(f"--phase {sanitise(phase, (token,), 60)!r}: not a phase's name ({NAME_RULE})")
    return phase


def sent_filename(name: str) -> str:
    """A file's name as the X-Vlbench-Filename header carries it: an RFC 8187 ext-value, `UTF-8''` then the name's
    UTF-8 bytes percent-encoded (pipelines/serve/uploads.py decodes it)."""
    return "UTF-8''" + quote(name, safe="")


def _answer(response, what: str, server: str, token: str, expected: int) -> dict:
    """The API's answer to one request: a JSON object with an integer `id` and a known `status`, under the
    `expected` status code. An error status is one line with the server's cleaned message; a redirect one line
    naming where it points (never followed); anything else one line saying it is not the API's answer."""
    status = response.status_code
    if status in REDIRECTS:
        location = response.headers.get("location")
        where = f" to {shown_url(urljoin(server + '/', location))}" if location else ""
        raise SubmissionError(f"{what}: the server answered {status}, a redirect{where}; not followed (the token "
                              "would go with it): give --server the address it redirects to")
    try:
        body = response.json()
    except ValueError:
        body = None
    if status >= 400:
        message = body.get("error") if isinstance(body, dict) else None
        raise SubmissionError(f"{what}: the server answered {status}"
                              + (f": {sanitise(message, (token,), 300)}" if isinstance(message, str) and message
                                 else ""))
    record_id = body.get("id") if isinstance(body, dict) else None
    if status != expected or not isinstance(record_id, int) or isinstance(record_id, bool) or record_id < 0 or \
            body.get("status") not in STATUSES:
        kind = sanitise(response.headers.get("content-type") or "no content type", (token,), 60)
        raise SubmissionError(f"{what}: the answer is not the challenge API's (HTTP {status}, {kind}, "
                              f"{len(response.content)} bytes): is --server the service's address?")
    return body


def submit(server: str, phase: str, path: Path, wait: float = 0.0, token_variable: str = TOKEN_VARIABLE,
           seconds: float = REQUEST_SECONDS) -> dict:
    """Upload PATH to PHASE; returns the submission's record (after it is scored or refused when `wait` > 0). Each
    request, the upload included, has `seconds` for its whole answer."""
    import httpx

    path = Path(path)
    base = checked_url(server, "--server", ParamsError, "put the team's token in VLBENCH_TOKEN",
                       "https://challenge.example.org")
    token = _token(token_variable)
    phase = _phase(phase, token)
    if not path.is_file():
        from core.ownfiles import kind_of

        raise ParamsError(f"{sanitise(path, (), 200)}: {kind_of(path)}, not a prediction file")
    headers = {"Authorization": f"Bearer {token}", "X-Vlbench-Filename": sent_filename(path.name)}
    what = sanitise(path, (token,), 200)

    def chunks():
        with open(path, "rb") as handle:
            while block := handle.read(1 << 16):
                yield block

    def too_large() -> Exception:
        return SubmissionError(f"{what}: the server's answer is over {ANSWER_BYTES >> 20} MiB; not read: is --server "
                               "the service's address?")

    try:
        with httpx.Client(follow_redirects=False) as client:
            record = _answer(bounded_exchange(client, "POST", f"{base}/api/v1/phases/{phase}/submissions",
                                              seconds, ANSWER_BYTES, too_large, content=chunks(), headers=headers),
                             what, base, token, 202)
            deadline = time.monotonic() + wait
            while wait > 0 and record.get("status") in ("queued", "scoring") and time.monotonic() < deadline:
                left = min(max(deadline - time.monotonic(), 0.0), 60.0)  # the server holds the request until then
                record = _answer(bounded_exchange(client, "GET", f"{base}/api/v1/submissions/{record['id']}",
                                                  left + 30, ANSWER_BYTES, too_large, headers=headers,
                                                  params={"wait": f"{left:.1f}"}), what, base, token, 200)
    except httpx.HTTPError as exc:
        raise ParamsError(f"--server {shown_url(server)}: {type(exc).__name__}: {sanitise(exc, (token,), 200)}") \
            from None
    return record


def record_lines(record: dict) -> list[str]:
    """What `vlbench submit` prints of a record: its id and status (checked by _answer), then the scores shown as
    JSON (escaped: no control character reaches the terminal)."""
    import json

    lines = [f"submission {record['id']}: {record['status']}"]
    if record.get("shown") is not None:
        lines.append(json.dumps(record["shown"], indent=1, sort_keys=True))
    return lines
