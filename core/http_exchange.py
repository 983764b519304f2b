"""One HTTP exchange with a whole-answer deadline and a size cap, shared by every client of vlbench that talks to a
server it does not control (a served model's endpoint, a challenge service): httpx's timeouts bound each read, not
the whole answer, so a server trickling its headers or body, or never ending it, would hold a command for ever, and
an endless body or a gzip bomb would fill the memory."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from urllib.parse import urlsplit

from core.sanitise import sanitise


class Answer:
    """A whole HTTP answer read within its deadline and cap: status, headers, body."""

    def __init__(self, status_code: int, headers, content: bytes):
        self.status_code, self.headers, self.content = status_code, headers, content

    def json(self):
        """The body as JSON; a ValueError for anything else (nested too deep for the parser included)."""
        import json

        try:
            return json.loads(self.content)
        except RecursionError:
            raise ValueError("nested too deep") from None


def bounded_exchange(client, method: str, url: str, seconds: float, cap: int, too_large: Callable[[], Exception],
                     **kwargs) -> Answer:
    """`method url` on the httpx `client`, its whole answer (headers and body) within `seconds` and at most `cap`
    bytes of body once decoded (`too_large()` is raised past it, before more is read). The exchange runs on a daemon
    thread that is abandoned at the deadline (a stuck connection ends with the process): past it,
    httpx.ReadTimeout. A redirect is never followed (the caller's client decides; vlbench's never follow)."""
    import httpx

    def exchange() -> Answer:
        with client.stream(method, url, timeout=seconds, **kwargs) as response:
            chunks, size = [], 0
            for chunk in response.iter_bytes():
                size += len(chunk)
                if size > cap:
                    raise too_large()
                chunks.append(chunk)
            return Answer(response.status_code, response.headers, b"".join(chunks))

    box: queue.Queue = queue.Queue(maxsize=1)

    def run() -> None:
        try:
            box.put((exchange(), None))
        except BaseException as exc:  # noqa: BLE001 -- handed to the waiting thread, which raises it
            box.put((None, exc))

    threading.Thread(target=run, name="vlbench-exchange", daemon=True).start()
    try:
        answer, exc = box.get(timeout=seconds)
    except queue.Empty:
        raise httpx.ReadTimeout(f"no whole answer within {seconds:g} s") from None
    if exc is not None:
        raise exc
    return answer


def shown_url(url: str) -> str:
    """A URL as an error line may show it: scheme, host, port and path only, control characters removed,
    bounded."""
    try:
        parts = urlsplit(url)
        host = parts.netloc.rpartition("@")[2]
        text = f"{parts.scheme}://{host}{parts.path}" if parts.scheme or host else parts.path
    except ValueError:
        text = url.partition("?")[0].partition("#")[0].rpartition("@")[2]
    return sanitise(text, (), 120)


def checked_url(url: str, option: str, error: type[Exception], secret_advice: str, example: str) -> str:
    """URL as given to `option`, checked, without a trailing slash: http(s)://HOST[:PORT][/PATH] that httpx can
    send; credentials, a query or a fragment (where a secret may sit, and would be sent in the request line or
    printed in an error line) are refused with `secret_advice`, never shown. Anything else is `error` in one line
    that shows the URL as shown_url does."""
    import httpx

    shown = shown_url(url)
    try:
        parts = urlsplit(url)
        port = parts.port
        httpx.URL(url)
    except (ValueError, httpx.InvalidURL) as exc:
        raise error(f"{option} {shown}: not a URL ({sanitise(exc, (url,), 120)})") from None
    if parts.username or parts.password:
        raise error(f"{option}: credentials in the URL are refused; {secret_advice}")
    if parts.query or parts.fragment:
        raise error(f"{option} {shown}: a query or fragment (not shown) is refused; {secret_advice}")
    if parts.scheme not in ("http", "https") or not parts.hostname or port == 0 or \
            any(ord(c) < 33 or ord(c) == 127 for c in url):
        raise error(f"{option} {shown}: expected http(s)://HOST[:PORT][/PATH], e.g. {example}")
    return url.rstrip("/")
