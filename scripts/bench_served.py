"""Benchmark: a served model's client (`openai:MODEL`, evaluator/models/served.py) against a local
stub endpoint that answers every chat completion after a fixed latency (100 ms by default).

Targets, each measured in this run:

1. concurrency 16 reaches >= 12x the requests per second of concurrency 1 (the latency is the
   server's; the client must keep 16 requests in flight);
2. client-side time per request (building the message, encoding a 640x480 JPEG as a data URL, the
   request's cache key, reading the answer) <= 5 ms;
3. a rerun of 10,000 requests answered from the response cache alone takes < 5 s.

    python scripts/bench_served.py [--latency 0.1] [--cached 10000]
"""

from __future__ import annotations

import argparse
import io
import json
import socket
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from benchlib import verdict

ROOT = Path(__file__).resolve().parents[1]
CONCURRENCY_TARGET, CLIENT_MS_TARGET, CACHED_SECONDS_TARGET = 12.0, 5.0, 5.0


def stub_endpoint(latency: float) -> ThreadingHTTPServer:
    """A chat-completions endpoint on loopback: every request is answered "yes" after `latency` s."""
    answer = json.dumps({"id": "stub", "object": "chat.completion", "model": "stub", "choices": [
        {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "yes"}}]}).encode()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def setup(self):
            super().setup()  # the headers and the body leave in two writes: no Nagle delay between them
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            time.sleep(latency)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def jpeg(width: int, height: int, seed: int) -> bytes:
    """A photo-like JPEG (smooth gradients and noise), about the size of a real one."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    base = np.stack([x * 255 / width, y * 255 / height, (x + y) * 127 / (width + height)], axis=-1)
    pixels = np.clip(base + rng.normal(0, 12, base.shape), 0, 255).astype(np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="JPEG", quality=90)
    return buffer.getvalue()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency", type=float, default=0.1, help="the stub's seconds per request")
    parser.add_argument("--cached", type=int, default=10_000, help="requests of the cached rerun")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from evaluator.models.backend import Turn
    from evaluator.models.options import ModelOptions
    from evaluator.models.served import ServedVLM

    server = stub_endpoint(args.latency)
    url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    photo = jpeg(640, 480, 0)
    with tempfile.TemporaryDirectory(prefix="bench-served-") as tmp:
        # 1. requests per second at concurrency 1 and 16, the same small turns
        turns = [Turn(f"Is there a dog in picture {k}?", (photo,)) for k in range(320)]
        rates = {}
        for concurrency, n in ((1, 32), (16, 320)):
            vlm = ServedVLM("stub", ModelOptions(base_url=url, concurrency=concurrency, retries=0))
            vlm.generate(turns[:2])  # connection set-up out of the timing
            start = time.perf_counter()
            vlm.generate(turns[:n])
            rates[concurrency] = n / (time.perf_counter() - start)
        print(f"requests/s with a {1000 * args.latency:.0f} ms server: concurrency 1 {rates[1]:.1f}, "
              f"concurrency 16 {rates[16]:.1f}")
        ok = verdict("served requests/s, concurrency 16 vs 1", rates[16] / rates[1], CONCURRENCY_TARGET, "x",
                     at_least=True, detail=f"{1000 * args.latency:.0f} ms per request at the server")

        # 2. client-side work per request: message and data URL, its cache key, the body as JSON, reading
        # the answer
        vlm = ServedVLM("stub", ModelOptions(base_url=url))
        answer = json.loads(json.dumps({"model": "stub", "choices": [
            {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "yes"}}]}))
        n = 200
        start = time.perf_counter()
        for k in range(n):
            body, _ = vlm.request(Turn(f"Question {k}?", (photo,)), 16)
            json.dumps(body).encode()
            vlm._content(answer, f"row {k}")
        per_request_ms = 1000 * (time.perf_counter() - start) / n
        print(f"640x480 JPEG of {len(photo) / 1024:.0f} KB")
        ok &= verdict("served client-side time per request (640x480 JPEG)", per_request_ms, CLIENT_MS_TARGET, " ms")

        # 3. a rerun answered from the cache alone: the entries are stored as a run stores them
        cache = Path(tmp) / "responses.sqlite3"
        small = jpeg(64, 48, 1)
        many = [Turn(f"Question {k}: what is on the table?", (small,)) for k in range(args.cached)]
        filling = ServedVLM("stub", ModelOptions(base_url=url, response_cache=cache))
        for turn in many:
            filling.cache.put(filling.request(turn, 16)[1], {"content": "yes"})
        filling.cache.close()
        rerun = ServedVLM("stub", ModelOptions(base_url=url, response_cache=cache))
        start = time.perf_counter()
        answers = rerun.generate(many)
        seconds = time.perf_counter() - start
        assert answers == ["yes"] * len(many) and rerun.requests == 0 and rerun.cache.hits == len(many)
        ok &= verdict(f"served rerun of {args.cached:,} cached requests", seconds, CACHED_SECONDS_TARGET, " s")
    server.shutdown()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
