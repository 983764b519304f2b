"""`vlbench submit`: a file streamed to a challenge service's API with a team's token (read from an environment
variable, never a flag), then, with `--wait`, its status polled until it is scored or refused."""

from __future__ import annotations

import os
import time
from pathlib import Path

from core.errors import ParamsError, SubmissionError

TOKEN_VARIABLE = "VLBENCH_TOKEN"


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
    token = os.environ.get(variable, "").strip()
    if not token:
        raise ParamsError(f"{variable}: not set; put the team's token there (`vlbench serve team add` printed it)")
    return token


def _check(response, what: str) -> dict:
    try:
        body = response.json()
    except ValueError:
        body = {}
    if response.status_code >= 400:
        message = body.get("error") if isinstance(body, dict) else None
        raise SubmissionError(f"{what}: the server answered {response.status_code}"
                              + (f": {str(message)[:500]}" if message else ""))
    if not isinstance(body, dict):
        raise SubmissionError(f"{what}: the server's answer is not a JSON object")
    return body


def submit(server: str, phase: str, path: Path, wait: float = 0.0, token_variable: str = TOKEN_VARIABLE) -> dict:
    """Upload PATH to PHASE; returns the submission's record (after it is scored or refused when `wait` > 0)."""
    import httpx

    path = Path(path)
    if not path.is_file():
        raise ParamsError(f"{path}: no such file")
    headers = {"Authorization": f"Bearer {_token(token_variable)}", "X-Vlbench-Filename": path.name}
    base = server.rstrip("/")

    def chunks():
        with open(path, "rb") as handle:
            while block := handle.read(1 << 16):
                yield block

    try:
        with httpx.Client(timeout=httpx.Timeout(60.0, connect=10.0)) as client:
            record = _check(client.post(f"{base}/api/v1/phases/{phase}/submissions", content=chunks(),
                                        headers=headers), f"{path}")
            deadline = time.monotonic() + wait
            while wait > 0 and record.get("status") in ("queued", "scoring") and time.monotonic() < deadline:
                left = min(max(deadline - time.monotonic(), 0.0), 60.0)  # the server holds the request until then
                record = _check(client.get(f"{base}/api/v1/submissions/{record['id']}", headers=headers,
                                           params={"wait": f"{left:.1f}"}, timeout=left + 30), f"{path}")
    except httpx.HTTPError as exc:
        raise ParamsError(f"--server {server}: {type(exc).__name__}: {str(exc)[:200]}") from None
    return record
