"""The challenge service's web application (Starlette, served by uvicorn): a small JSON API, and the pages
(pipelines/serve/pages.py: status, sign-in, a team's submissions and upload form, the host view, the public
leaderboard), every response with the security headers.

- `GET /api/v1/status`: the challenge, its phases (open or not) and the queue's counts; no token needed.
- `POST /api/v1/phases/{phase}/submissions`: the request body is the file (any format `vlbench evaluate` reads;
  its name in `X-Vlbench-Filename`), streamed to disk under the upload limit while its SHA-256 is taken, stored
  content-addressed, then recorded as queued (202): a submission is accepted only once stored and recorded. Over
  a limit of the phase: 429; over the size limit: 413; the phase closed: 403.
- `GET /api/v1/submissions` and `/api/v1/submissions/{id}`: a team's own submissions with their status (queued,
  scoring, scored, refused), the refusal's line, and what the phase shows of the scores (its private part's once
  the phase has ended); a host token sees every submission with its full metrics, worker, attempts, timings and
  log. `?wait=SECONDS` on one submission answers once
  it is scored or refused (or after that long, at most a minute), so a client need not poll.

Every API request names its team by `Authorization: Bearer <token>` (the pages by their session's cookie); a
missing or wrong token is 401, a submission of another team 404. No response holds a sealed answer: scores are
computed by the workers and only their recorded view is returned."""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool as threaded
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from core.errors import ParamsError
from pipelines.serve.board import write_board
from pipelines.serve.config import Config
from pipelines.serve.pages import COOKIE, SecurityHeaders, page_routes
from pipelines.serve.store import WEB_BUSY_SECONDS, LimitReached, StoreUnavailable, Team, now_utc
from pipelines.serve.uploads import (
    BadForm,
    InFlight,
    SlowUpload,
    TooLarge,
    TooManyUploads,
    Upload,
    accept,
    address,
    bounded_body,
    clean_incoming,
    display_name,
    sent_name,
)
from pipelines.serve.views import private_if_shown, workers_seen

FILENAME_HEADER = "x-vlbench-filename"
MAX_WAIT_SECONDS = 60.0  # the longest a `?wait=` request is held
WAIT_POLL_SECONDS = 0.02


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


def _record(row, host: bool, config: Config) -> dict:
    """A submission as the API returns it: a team sees its status, refusal and shown scores (its private part's once
    the phase has ended); a host all."""
    phase = next((p for p in config.phases if p.name == row["phase"]), None)
    out = {"id": row["id"], "phase": row["phase"], "team": row["team_name"], "filename": row["filename"],
           "bytes": row["bytes"], "sha256": row["sha256"], "status": row["status"], "submitted": row["submitted"],
           "finished": row["finished"], "error": row["error"],
           "shown": None if row["shown"] is None else json.loads(row["shown"]),
           "private": private_if_shown(phase, row, host, now_utc())}
    if host:
        out.update(metrics=None if row["metrics"] is None else json.loads(row["metrics"]),
                   ladder=None if row["ladder"] is None else json.loads(row["ladder"]), worker=row["worker"],
                   attempts=row["attempts"], started=row["started"], seconds=row["seconds"], log=row["log"])
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


def unavailable(request: Request, exc: StoreUnavailable):
    """The one line of a request the records cannot serve now (store.StoreUnavailable): 503 (507 for a full disk)
    with Retry-After, as JSON on the API and as text on the pages; nothing was accepted."""
    from starlette.responses import PlainTextResponse

    logging.getLogger("vlbench.serve").error("%s %s: %s", request.method, request.url.path, exc)
    message = f"the service cannot keep records now: {exc}"
    response = _error(exc.status, message) if request.url.path.startswith("/api/") else \
        PlainTextResponse(message, status_code=exc.status)
    response.headers["Retry-After"] = "30"
    return response


def proxied(config: Config) -> list:
    """The middleware that believes X-Forwarded-For and X-Forwarded-Proto from the config's `trusted_proxies` only
    (uvicorn's own ProxyHeadersMiddleware, given that list); none when the list is empty: every caller is then known
    by the address it connects from, whatever headers it sends (uvicorn's default, believing any loopback peer, is
    switched off in pipelines/serve/run.py)."""
    if not config.trusted_proxies:
        return []
    from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

    return [Middleware(ProxyHeadersMiddleware, trusted_hosts=list(config.trusted_proxies))]


def create_app(config: Config, wake=None) -> Starlette:
    """The application (the JSON API and the pages, pipelines/serve/pages.py, behind the security headers); `wake`
    (the workers started beside it: pipelines/serve/wake.py's Wakers) is set on each submission."""
    store = config.store(busy_seconds=WEB_BUSY_SECONDS)
    limiter = RateLimit(config.requests_per_minute)
    uploads = InFlight(config.uploads_per_token, config.uploads_per_address)
    incoming = config.storage / "incoming"
    clean_incoming(incoming)
    (config.storage / "submissions").mkdir(parents=True, exist_ok=True)

    def team_of(request: Request) -> Team | None:
        header = request.headers.get("authorization", "")
        return store.team_of(header[7:].strip() if header[:7].lower() == "bearer " else None)

    def status(request: Request):
        now = now_utc()
        return JSONResponse({
            "challenge": config.challenge, "queue": store.counts(), "workers": workers_seen(store.workers()),
            "phases": [{"name": p.name, "benchmark": p.benchmark, "visibility": "hidden" if p.hidden else "public",
                        "open": p.open_at(now), "starts": p.starts.isoformat() if p.starts else None,
                        "ends": p.ends.isoformat() if p.ends else None} for p in config.phases]})

    async def submit(request: Request):
        team = await threaded(team_of, request)
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
        filename = display_name(sent_name(request.headers.get(FILENAME_HEADER)))
        try:
            with uploads.held(team, address(request)):
                upload = Upload(incoming, config.max_upload_bytes)
                try:
                    async for chunk in bounded_body(request, config.upload_idle_seconds, config.upload_seconds):
                        upload.write(chunk)
                    submission = await threaded(accept, config, store, team, phase, upload, filename, wake)
                finally:
                    upload.discard()
        except TooLarge as exc:
            return _error(413, str(exc))
        except BadForm as exc:
            return _error(400, str(exc))
        except (LimitReached, TooManyUploads) as exc:
            return _error(429, str(exc))
        except SlowUpload as exc:
            response = _error(408, str(exc))
            response.headers["Connection"] = "close"
            return response
        return JSONResponse({"id": submission, "status": "queued", "sha256": upload.sha256, "bytes": upload.size},
                            status_code=202)

    def submissions(request: Request):
        team = team_of(request)
        if team is None:
            return _error(401, "a team's token is needed (Authorization: Bearer <token>)")
        rows = store.submissions(None if team.host else team, request.query_params.get("phase"))
        return JSONResponse({"submissions": [_record(r, team.host, config) for r in rows]})

    async def submission(request: Request):
        team = await threaded(team_of, request)
        if team is None:
            return _error(401, "a team's token is needed (Authorization: Bearer <token>)")
        raw = request.path_params["id"]
        row = await threaded(store.submission, int(raw)) if raw.isdigit() and len(raw) < 19 else None
        if row is None or (not team.host and row["team"] != team.id):
            return _error(404, f"no submission {raw[:20]} of team {team.name!r}")
        try:  # ?wait=SECONDS: answer once it is scored or refused, or after that long (at most MAX_WAIT_SECONDS)
            wait = min(max(float(request.query_params.get("wait", 0)), 0.0), MAX_WAIT_SECONDS)
        except ValueError:
            return _error(400, "wait: a number of seconds")
        deadline = time.monotonic() + wait
        while row["status"] in ("queued", "scoring") and time.monotonic() < deadline:
            await asyncio.sleep(WAIT_POLL_SECONDS)
            row = await threaded(store.submission, row["id"])
        return JSONResponse(_record(row, team.host, config))

    def caller(request: Request) -> str:
        """The rate limit's key: a valid token's team, a signed-in page's; any other caller by its address."""
        team = team_of(request)
        if team is None:
            found = store.session(request.cookies.get(COOKIE))
            team = None if found is None else found[0]
        return f"team:{team.id}" if team is not None else f"address:{address(request)}"

    def limited(handler):
        """The handler behind the rate limit: 429 with Retry-After when the caller's bucket is empty. A handler that
        is a plain function (it streams no body) runs on a worker thread, as its database calls must."""
        streams = asyncio.iscoroutinefunction(handler)

        async def run(request: Request):
            wait = limiter.wait(await threaded(caller, request))
            if wait > 0:
                response = _error(429, f"too many requests: at most {config.requests_per_minute} a minute; retry in "
                                       f"{math.ceil(wait)} s")
                response.headers["Retry-After"] = str(math.ceil(wait))
                return response
            return await handler(request) if streams else await threaded(handler, request)
        return run

    for phase in config.phases:  # the leaderboards exist before the first score
        write_board(config, store, phase)
    return Starlette(middleware=[*proxied(config), Middleware(SecurityHeaders)],
                     exception_handlers={StoreUnavailable: unavailable}, routes=[
        Route("/api/v1/status", limited(status), methods=["GET"]),
        Route("/api/v1/phases/{phase}/submissions", limited(submit), methods=["POST"]),
        Route("/api/v1/submissions", limited(submissions), methods=["GET"]),
        Route("/api/v1/submissions/{id}", limited(submission), methods=["GET"]),
        *page_routes(config, store, wake, limited, uploads),
    ])
