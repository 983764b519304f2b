"""`vlbench submit` (pipelines/serve/client.py) against servers that are not the challenge service, or that misbehave:
a loopback listener of this file answers each request with the bytes a test scripts (a redirect to another host, an
HTML page, an empty or endless body, a gzip bomb, an answer trickled a byte a second, forged ids and statuses). Every
case is one line and exit 2 within its deadline, the token never printed and never sent where it should not go; the
real service's side (the name as sent, decoded) is in tests/test_serve.py."""

from __future__ import annotations

import gzip
import socket
import threading
import time

import pytest
from helpers import assert_one_error_line

pytestmark = pytest.mark.allow_hosts(["127.0.0.1"])  # the listeners are on loopback only
TOKEN = "vlb_0123456789ab_" + "S3cretPart" * 5


@pytest.fixture(autouse=True)
def _no_network():
    """Overrides conftest's: sockets may be made, and connect to loopback only (the module's mark)."""
    yield


class Scripted:
    """A loopback HTTP listener answering every request with `self.answer` (bytes, or a callable given the socket),
    recording each request's head. Bounded: each connection is served on a daemon thread for at most 30 s, and the
    listener is closed at the end of the test."""

    def __init__(self):
        self.socket = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.socket.getsockname()[1]}"
        self.heads: list[bytes] = []
        self.answer: bytes | object = b""
        self.stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.stop.is_set():
            try:
                connection, _ = self.socket.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(connection,), daemon=True).start()

    def _serve(self, connection):
        connection.settimeout(30)
        with connection:
            head = b""
            try:
                while b"\r\n\r\n" not in head and len(head) < 1 << 16:
                    chunk = connection.recv(4096)
                    if not chunk:
                        return
                    head += chunk
                self.heads.append(head.partition(b"\r\n\r\n")[0])
                if callable(self.answer):
                    self.answer(connection, self.stop)
                else:
                    connection.sendall(self.answer)
            except OSError:
                return

    def close(self):
        self.stop.set()
        self.socket.close()


@pytest.fixture
def server():
    listener = Scripted()
    yield listener
    listener.close()


@pytest.fixture
def predictions(tmp_path):
    path = tmp_path / "predictions.json"
    path.write_text('[{"question_id": "1", "answer": "yes"}]')
    return path


def _answer(status: str, body: bytes = b"", headers: str = "", content_type: str = "application/json") -> bytes:
    return (f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n{headers}"
            "Connection: close\r\n\r\n").encode() + body


def _submit(cli, monkeypatch, server_url: str, predictions, *extra, phase: str = "test", token: str = TOKEN):
    monkeypatch.setenv("VLBENCH_TOKEN", token)
    return cli("submit", predictions, "--server", server_url, "--phase", phase, *extra)


@pytest.mark.parametrize("status", ["301 Moved Permanently", "302 Found", "307 Temporary Redirect",
                                    "308 Permanent Redirect"])
def test_a_redirect_is_one_line_and_never_followed_with_the_token(cli, monkeypatch, server, predictions, status):
    other = Scripted()  # the host the redirect names: it must never be asked
    try:
        server.answer = _answer(status, headers=f"Location: {other.url}/api/v1/phases/test/submissions\r\n")
        code, out, err = _submit(cli, monkeypatch, server.url, predictions)
        line = assert_one_error_line(code, err, ["redirect", other.url, "not followed"])
        assert other.heads == [] and out == "" and TOKEN not in line
    finally:
        other.close()


@pytest.mark.parametrize("answer", [
    _answer("200 OK", b"<html><body>Welcome to nginx!</body></html>", content_type="text/html"),
    _answer("202 Accepted"),  # an empty body
    _answer("304 Not Modified"),
    _answer("202 Accepted", b"not json at all"),
    _answer("202 Accepted", b'{"id": null, "status": null}'),
    _answer("202 Accepted", b'{"id": "1\\u001b[2J", "status": "queued"}'),  # an id that is no integer
    _answer("202 Accepted", b'{"id": 1, "status": "\\u001b]0;owned\\u0007scored"}'),  # a status of no known kind
    _answer("202 Accepted", b'{"id": true, "status": "queued"}'),
    _answer("202 Accepted", b"[1, 2]"),
], ids=["html-200", "empty", "304", "not-json", "nulls", "forged-id", "forged-status", "bool-id", "array"])
def test_anything_but_the_api_s_answer_is_one_line(cli, monkeypatch, server, predictions, answer):
    """Before the fix, each of these printed `submission None: None` (or the forged text raw) and exited 0."""
    server.answer = answer
    code, out, err = _submit(cli, monkeypatch, server.url, predictions)
    line = assert_one_error_line(code, err, ["not the challenge API's", "is --server the service's address"])
    assert out == "" and "\x1b" not in line and "\x07" not in line


def test_a_refusal_s_text_reaches_the_terminal_cleaned(cli, monkeypatch, server, predictions):
    """A server's refusal line with an escape sequence, a bell and a forged second line: one cleaned line."""
    server.answer = _answer("202 Accepted", b'{"id": 7, "status": "refused", "error": '
                                            b'"bad file\\u001b]0;owned\\u0007\\r\\nsubmission 8: scored"}')
    code, out, err = _submit(cli, monkeypatch, server.url, predictions)
    line = assert_one_error_line(code, err, ["submission 7 refused: bad file", "submission 8: scored"])
    assert out == "submission 7: refused\n"
    assert not any(c in line for c in "\x1b\x07\r")


def test_an_error_status_s_message_is_cleaned_and_bounded(cli, monkeypatch, server, predictions):
    server.answer = _answer("429 Too Many Requests", b'{"error": "slow down\\u001b[2J' + b"x" * 100_000 + b'"}')
    code, _, err = _submit(cli, monkeypatch, server.url, predictions)
    line = assert_one_error_line(code, err, ["the server answered 429: slow down"])
    assert "\x1b" not in line and len(line) < 600


def _trickle(connection, stop):
    connection.sendall(b"HTTP/1.1 202 Accepted\r\nContent-Type: application/json\r\n")
    for _ in range(60):  # a header byte a second, for at most a minute
        if stop.wait(1):
            return
        connection.sendall(b"X")


def test_a_server_trickling_its_answer_is_cut_at_the_deadline(cli, monkeypatch, server, predictions):
    """Each byte comes within httpx's read timeout, so only a deadline on the whole answer ends it."""
    server.answer = _trickle
    started = time.monotonic()
    code, _, err = _submit(cli, monkeypatch, server.url, predictions, "--timeout", "2")
    assert_one_error_line(code, err, ["--server", "ReadTimeout", "within 2 s"])
    assert time.monotonic() - started < 30


def _endless(connection, stop):
    connection.sendall(b"HTTP/1.1 202 Accepted\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
    block = b"[" * 65536
    for _ in range(1000):  # 64 MiB at most, far past the client's 1 MiB cap
        if stop.is_set():
            return
        connection.sendall(b"10000\r\n" + block + b"\r\n")


def test_an_endless_body_and_a_gzip_bomb_are_refused_unread(cli, monkeypatch, server, predictions):
    server.answer = _endless
    code, _, err = _submit(cli, monkeypatch, server.url, predictions)
    assert_one_error_line(code, err, ["over 1 MiB", "not read"])
    bomb = gzip.compress(b" " * (200 << 20), 9)  # 200 MiB of JSON whitespace in about 200 KB
    server.answer = _answer("202 Accepted", bomb, headers="Content-Encoding: gzip\r\n")
    code, _, err = _submit(cli, monkeypatch, server.url, predictions)
    assert_one_error_line(code, err, ["over 1 MiB", "not read"])


@pytest.mark.parametrize("url, needles, secret", [
    ("http://team:Hunter2Secret@127.0.0.1:{port}", ["--server: credentials in the URL are refused"], "Hunter2"),
    ("http://127.0.0.1:{port}/?token=Hunter2Secret", ["a query or fragment (not shown)"], "Hunter2"),
    ("http://127.0.0.1:{port}/#Hunter2Secret", ["a query or fragment (not shown)"], "Hunter2"),
    ("http://[::1", ["--server", "not a URL"], None),
    ("http://256.1.1.1:80", ["--server", "256.1.1.1"], None),
    ("http://127.0.0.1:{port}/\x1b[31m", ["--server", "not a URL"], None),
    ("ftp://127.0.0.1:{port}", ["--server", "expected http(s)://HOST"], None),
])
def test_a_bad_server_url_is_one_line_never_showing_or_sending_a_secret(cli, monkeypatch, server, predictions, url,
                                                                          needles, secret):
    code, out, err = _submit(cli, monkeypatch, url.format(port=server.url.rsplit(":", 1)[1]), predictions)
    line = assert_one_error_line(code, err, needles)
    assert "\x1b" not in line and (secret is None or secret not in line)
    assert server.heads == []  # nothing was sent


@pytest.mark.parametrize("phase, needles", [
    (TOKEN, ["--phase: that is a token", "not sent"]),
    ("vlb_0123456789ab_" + "abcdefghij" * 4 + "xyz", ["--phase: that is a token", "not sent"]),
    ("test\x1b[2J", ["--phase", "not a phase's name"]),
    ("../../admin", ["--phase", "not a phase's name"]),
])
def test_a_bad_phase_is_one_line_and_nothing_is_sent(cli, monkeypatch, server, predictions, phase, needles):
    code, _, err = _submit(cli, monkeypatch, server.url, predictions, phase=phase)
    line = assert_one_error_line(code, err, needles)
    assert TOKEN not in line and "S3cret" not in line and "\x1b" not in line and server.heads == []


@pytest.mark.parametrize("token", ["vlb_0123456789ab_sécret" + "x" * 40, "vlb_0123456789ab_se cret" + "x" * 40,
                                   "vlb_0123\x1b[2J"])
def test_a_token_no_header_can_carry_is_one_line_never_shown(cli, monkeypatch, server, predictions, token):
    code, _, err = _submit(cli, monkeypatch, server.url, predictions, token=token)
    line = assert_one_error_line(code, err, ["VLBENCH_TOKEN: not a token", "not shown"])
    assert "cret" not in line and server.heads == []


def test_a_file_that_is_not_a_regular_file_is_named_for_what_it_is(cli, monkeypatch, server, tmp_path):
    import os

    fifo = tmp_path / "predictions.fifo"
    os.mkfifo(fifo)
    for path, kind in ((tmp_path, "a folder"), (fifo, "a FIFO"), (tmp_path / "none.json", "no such file")):
        code, _, err = _submit(cli, monkeypatch, server.url, path)
        assert_one_error_line(code, err, [f"{kind}, not a prediction file"])


def test_a_non_ascii_file_name_is_sent_percent_encoded(cli, monkeypatch, server, tmp_path):
    """RFC 8187's ext-value: `UTF-8''` and the name's UTF-8 bytes percent-encoded (before the fix: a traceback,
    UnicodeEncodeError, as httpx cannot put it in a header)."""
    path = tmp_path / "résultats été.json"
    path.write_text("[]")
    server.answer = _answer("202 Accepted", b'{"id": 3, "status": "queued"}')
    code, out, err = _submit(cli, monkeypatch, server.url, path)
    assert code == 0 and out == "submission 3: queued\n", err
    sent = {k.strip().lower(): v.strip() for k, _, v in (h.partition(b":") for h in server.heads[0].split(b"\r\n")[1:])}
    assert sent[b"x-vlbench-filename"] == b"UTF-8''r%C3%A9sultats%20%C3%A9t%C3%A9.json"
