"""The challenge service's web application (Starlette, served by uvicorn): a small JSON API.

- `GET /api/v1/status`: the challenge, its phases (open or not) and the queue's counts; no token needed.
- `POST /api/v1/phases/{phase}/submissions`: the request body is the file (any format `vlbench evaluate` reads;
  its name in `X-Vlbench-Filename`), streamed to disk under the upload limit while its SHA-256 is taken, stored
  content-addressed, then recorded as queued (202): a submission is accepted only once stored and recorded. Over
  a limit of the phase: 429; over the size limit: 413; the phase closed: 403.
- `GET /api/v1/submissions` and `/api/v1/submissions/{id}`: a team's own submissions with their status (queued,
  scoring, scored, refused), the refusal's line, and what the phase shows of the scores; a host token sees every
  submission with its full metrics, worker, attempts and timings. `?wait=SECONDS` on one submission answers once
  it is scored or refused (or after that long, at most a minute), so a client need not poll.

Every request names its team by `Authorization: Bearer <token>`; a missing or wrong token is 401, a submission of
another team 404. No response holds a sealed answer: scores are computed by the workers and only their recorded
view is returned."""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import os
import secrets
import time
from pathlib import Path

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from core.errors import ParamsError
from pipelines.serve.config import Config
from pipelines.serve.store import LimitReached, Team, now_utc
from pipelines.serve.worker import stored_path

FILENAME_HEADER = "x-vlbench-filename"
MAX_WAIT_SECONDS = 60.0  # the longest a `?wait=` request is held
WAIT_POLL_SECONDS = 0.02
STALE_UPLOAD_SECONDS = 3600
CHUNK = 1 << 16


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


def _filename(raw: str | None) -> str:
    """The upload's name as shown to its team: its last path part, printable, at most 120 characters."""
    name = Path((raw or "submission.json").replace("\\", "/")).name
    name = "".join(c for c in name if c.isprintable())[:120]
    return name or "submission.json"


def _record(row, host: bool) -> dict:
    """A submission as the API returns it: a team sees its status, refusal and shown scores; a host all."""
    out = {"id": row["id"], "phase": row["phase"], "team": row["team_name"], "filename": row["filename"],
           "bytes": row["bytes"], "sha256": row["sha256"], "status": row["status"], "submitted": row["submitted"],
           "finished": row["finished"], "error": row["error"],
           "shown": None if row["shown"] is None else json.loads(row["shown"])}
    if host:
        out.update(metrics=None if row["metrics"] is None else json.loads(row["metrics"]),
                   ladder=None if row["ladder"] is None else json.loads(row["ladder"]), worker=row["worker"],
                   attempts=row["attempts"], started=row["started"], seconds=row["seconds"])
    return out


class RateLimit:
    """A token bucket per key (a token's id, or a client's address without one): `per_minute` requests a minute,
    in bursts of at most that many. Kept in this web process (each process enforces its own)."""

    def __init__(self, per_minute: int, keys: int = 100_000):
        self.rate, self.capacity, self.keys = per_minute / 60.0, float(per_minute), keys
        self.buckets: dict[str, tuple[float, float]] = {}

    def wait(self, key: str) -> float:
        """0 when a request may go now (and takes a token), else the seconds until it may."""
        now = time.monotonic()
        if len(self.buckets) >= self.keys:  # bounded memory: forget full buckets
            self.buckets = {k: v for k, v in self.buckets.items() if v[0] + (now - v[1]) * self.rate < self.capacity}
        tokens, seen = self.buckets.get(key, (self.capacity, now))
        tokens = min(self.capacity, tokens + (now - seen) * self.rate)
        if tokens < 1.0:
            self.buckets[key] = (tokens, now)
            return (1.0 - tokens) / self.rate
        self.buckets[key] = (tokens - 1.0, now)
        return 0.0


def create_app(config: Config, wake=None) -> Starlette:
    """The application; `wake` (an event the workers started beside it wait on) is set on each submission."""
    store = config.store()
    limiter = RateLimit(config.requests_per_minute)
    incoming = config.storage / "incoming"
    incoming.mkdir(parents=True, exist_ok=True)
    for left in incoming.glob(".upload-*"):  # an upload a killed server never finished (never recorded); another
        if time.time() - left.stat().st_mtime > STALE_UPLOAD_SECONDS:  # process's upload in progress is younger
            left.unlink(missing_ok=True)
    (config.storage / "submissions").mkdir(parents=True, exist_ok=True)

    def team_of(request: Request) -> Team | None:
        header = request.headers.get("authorization", "")
        return store.team_of(header[7:].strip() if header[:7].lower() == "bearer " else None)

    async def status(request: Request):
        now = now_utc()
        return JSONResponse({
            "challenge": config.challenge, "queue": store.counts(),
            "phases": [{"name": p.name, "benchmark": p.benchmark, "visibility": "hidden" if p.hidden else "public",
                        "open": p.open_at(now), "starts": p.starts.isoformat() if p.starts else None,
                        "ends": p.ends.isoformat() if p.ends else None} for p in config.phases]})

    async def submit(request: Request):
        team = team_of(request)
        if team is None:
            return _error(401, "a team's token is needed (Authorization: Bearer <token>)")
        try:
            phase = config.phase(request.path_params["phase"])
        except ParamsError as exc:
            return _error(404, str(exc))
        if not team.host and not phase.open_at(now_utc()):
            return _error(403, f"phase {phase.name} is not open for submissions")
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > config.max_upload_bytes:
            return _error(413, f"the file is over the upload limit of {config.max_upload_bytes >> 20} MB")
        filename = _filename(request.headers.get(FILENAME_HEADER))
        staging = incoming / f".upload-{secrets.token_hex(16)}"
        digest, size = hashlib.sha256(), 0
        try:
            descriptor = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
            with os.fdopen(descriptor, "wb") as handle:
                async for chunk in request.stream():
                    size += len(chunk)
                    if size > config.max_upload_bytes:
                        return _error(413, f"the file is over the upload limit of {config.max_upload_bytes >> 20} MB")
                    digest.update(chunk)
                    handle.write(chunk)
                handle.flush()
                os.fsync(handle.fileno())
            if size == 0:
                return _error(400, "the request body is empty: send the file")
            target = stored_path(config.storage, digest.hexdigest(), filename)
            if target.exists():
                staging.unlink()
            else:
                os.replace(staging, target)
            try:
                submission = store.submit(team, phase, digest.hexdigest(), filename, size, now_utc())
            except LimitReached as exc:
                return _error(429, str(exc))
            if wake is not None:
                wake.set()
        finally:
            staging.unlink(missing_ok=True)
        return JSONResponse({"id": submission, "status": "queued", "sha256": digest.hexdigest(), "bytes": size},
                            status_code=202)

    async def submissions(request: Request):
        team = team_of(request)
        if team is None:
            return _error(401, "a team's token is needed (Authorization: Bearer <token>)")
        rows = store.submissions(None if team.host else team, request.query_params.get("phase"))
        return JSONResponse({"submissions": [_record(r, team.host) for r in rows]})

    async def submission(request: Request):
        team = team_of(request)
        if team is None:
            return _error(401, "a team's token is needed (Authorization: Bearer <token>)")
        raw = request.path_params["id"]
        row = store.submission(int(raw)) if raw.isdigit() and len(raw) < 19 else None
        if row is None or (not team.host and row["team"] != team.id):
            return _error(404, f"no submission {raw[:20]} of team {team.name!r}")
        try:  # ?wait=SECONDS: answer once it is scored or refused, or after that long (at most MAX_WAIT_SECONDS)
            wait = min(max(float(request.query_params.get("wait", 0)), 0.0), MAX_WAIT_SECONDS)
        except ValueError:
            return _error(400, "wait: a number of seconds")
        deadline = time.monotonic() + wait
        while row["status"] in ("queued", "scoring") and time.monotonic() < deadline:
            await asyncio.sleep(WAIT_POLL_SECONDS)
            row = store.submission(row["id"])
        return JSONResponse(_record(row, team.host))

    def limited(handler):
        """The handler behind the rate limit: 429 with Retry-After when the caller's bucket is empty."""
        async def run(request: Request):
            team = team_of(request)  # a valid token's team; any other caller by its address
            key = f"team:{team.id}" if team is not None else f"address:{getattr(request.client, 'host', '')}"
            wait = limiter.wait(key)
            if wait > 0:
                response = _error(429, f"too many requests: at most {config.requests_per_minute} a minute; retry in "
                                       f"{math.ceil(wait)} s")
                response.headers["Retry-After"] = str(math.ceil(wait))
                return response
            return await handler(request)
        return run

    return Starlette(routes=[
        Route("/api/v1/status", limited(status), methods=["GET"]),
        Route("/api/v1/phases/{phase}/submissions", limited(submit), methods=["POST"]),
        Route("/api/v1/submissions", limited(submissions), methods=["GET"]),
        Route("/api/v1/submissions/{id}", limited(submission), methods=["GET"]),
    ])
