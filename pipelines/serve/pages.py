"""The challenge service's pages, rendered by the leaderboard site's templates (evaluator/publish/site.py: autoescaped,
one escaping path for team names, file names and refusal lines) with a Content-Security-Policy that loads the site's
own style sheet and script only and lets forms post to the service alone:

- `/`: the status page (the challenge, its phases, open or not, their limits, the queue's counts);
- `/login`: a team signs in with its token (sent once, in a form; the page then keeps a session cookie: HttpOnly,
  SameSite=Strict, Secure over https, its secret stored as a SHA-256 digest, pipelines/serve/store.py);
- `/team`: the team's submissions with their status (queued, scoring, scored, refused with its one line) and what
  the phase shows of their scores, and the upload form (streamed, pipelines/serve/uploads.py; the same limits and
  storage as the JSON API); `/team/submissions/{id}`: one submission;
- `/host`: a host's view: every submission, its worker, attempts, timings and log, and the queue by phase;
- `/leaderboard/<phase>/`: the public leaderboard (pipelines/serve/board.py), static files written after each score.

A form that changes anything (sign in, sign out, upload) is refused unless the browser says it comes from this site
(`Sec-Fetch-Site` and `Origin`, where sent) and, once signed in, unless it carries the session's CSRF token
(compared in constant time)."""

from __future__ import annotations

import hmac
import json
from pathlib import Path
from urllib.parse import parse_qs

from starlette.concurrency import run_in_threadpool as threaded
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from core.errors import ParamsError
from evaluator.publish.site import ASSETS, CSP, TEMPLATES, page
from pipelines.serve.config import Config
from pipelines.serve.store import SESSION_SECONDS, STATUSES, LimitReached, Team, now_utc
from pipelines.serve.uploads import (
    FIELD_BYTES,
    BadForm,
    InFlight,
    SlowUpload,
    TooLarge,
    TooManyUploads,
    accept,
    address,
    bounded_body,
    display_name,
    read_form,
)
from pipelines.serve.views import as_text, private_if_shown, workers_seen

PAGE_TEMPLATES = Path(__file__).resolve().parent / "templates"
COOKIE = "vlbench_session"
PAGE_CSP = CSP.replace("form-action 'none'", "form-action 'self'")  # the pages' <meta> policy
_KINDS = {"html": "text/html; charset=utf-8", "json": "application/json", "css": "text/css",
          "js": "text/javascript"}
REFRESH_SECONDS = 3  # the team page reloads while a submission of its is queued or scoring
# same-origin: a browser sends no referrer to another site, and its own forms' true Origin to this one (under
# no-referrer a form's Origin is "null", which the same-site check could not tell from another site's)
REFERRER = "same-origin"
HEADERS = {"Content-Security-Policy": f"{PAGE_CSP}; frame-ancestors 'none'", "X-Content-Type-Options": "nosniff",
           "Referrer-Policy": REFERRER,
           "X-Frame-Options": "DENY", "Cache-Control": "no-store"}


class SecurityHeaders:
    """ASGI middleware: every response of the service (pages, JSON, the leaderboard's files) carries HEADERS."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def sending(message):
            if message["type"] == "http.response.start":
                names = {k.lower() for k, _ in message.get("headers", [])}
                message = {**message, "headers": [*message.get("headers", []), *(
                    (k.lower().encode(), v.encode()) for k, v in HEADERS.items() if k.lower().encode() not in names)]}
            await send(message)
        return await self.app(scope, receive, sending)


def _time(stamp: str | None) -> str | None:
    return None if stamp is None else stamp[:19].replace("T", " ")


def _limits(phase) -> str:
    parts = [f"{n} {what}" for n, what in ((phase.limits.per_day, "a day"), (phase.limits.total, "in all"),
                                           (phase.limits.concurrent, "at once")) if n is not None]
    return ", ".join(parts) or "no limit"


def page_routes(config: Config, store, wake=None, limited=lambda handler: handler, uploads=None) -> list:
    """The pages' routes (`limited`: the JSON API's per-caller rate limit, around each; `uploads`: the uploads in
    progress, pipelines/serve/uploads.py's InFlight, shared with the API). Every database call runs on a worker
    thread, never on the event loop (a write waiting on a lock would stall every route): a handler without a body
    to stream is a plain function, which Starlette runs on its thread pool; one that streams a body (sign in, sign
    out, upload) reads it on the loop and hands the rest to `threaded`."""
    from evaluator.tasks import get_task
    from pipelines.serve.views import headline_scores

    incoming = config.storage / "incoming"
    phases = {p.name: p for p in config.phases}
    uploads = uploads or InFlight(config.uploads_per_token, config.uploads_per_address)

    def viewer(request: Request) -> dict | None:
        found = store.session(request.cookies.get(COOKIE))
        if found is None:
            return None
        team, csrf = found
        return {"id": team.id, "name": team.name, "host": team.host, "csrf": csrf}

    def render(template: str, request: Request, title: str, status: int = 200, **context) -> HTMLResponse:
        body = page(template, title=title, root="/assets/", csp=PAGE_CSP, templates=PAGE_TEMPLATES, referrer=REFERRER,
                    phases=config.phases, viewer=context.pop("viewer") if "viewer" in context else viewer(request),
                    refresh=context.pop("refresh", None), **context)
        return HTMLResponse(body, status_code=status)

    def same_site(request: Request) -> bool:
        """The browser says the form was sent from this site (a browser that sends neither header is let through:
        the session's CSRF token still guards every signed-in form)."""
        fetched = request.headers.get("sec-fetch-site")
        origin = request.headers.get("origin")
        return (fetched is None or fetched in ("same-origin", "none")) and \
            (origin is None or origin == f"{request.url.scheme}://{request.url.netloc}")

    def csrf_ok(request: Request, seen: dict | None, fields: dict) -> bool:
        return seen is not None and same_site(request) and \
            hmac.compare_digest(fields.get("csrf", "").encode(), seen["csrf"].encode())

    def scores_of(row, host: bool) -> list[dict]:
        """A submission's headline scores as its team sees them (rounded), or unrounded for a host."""
        if row["status"] != "scored":
            return []
        phase = phases.get(row["phase"])
        if phase is None:
            return []
        if host:
            return [as_text(s, None) for s in headline_scores(get_task(phase.benchmark), phase,
                                                             json.loads(row["metrics"]), exact=True)]
        shown = json.loads(row["shown"])
        listed = shown["scores"] if "scores" in shown else headline_scores(get_task(phase.benchmark), phase, shown)
        private = private_if_shown(phase, row, False, now_utc())
        if phase.private:  # the part each score is over; the private part's once the phase has ended
            listed = [{**x, "label": f"{x['label']} (public part)"} for x in listed] + \
                [{**x, "label": f"{x['label']} (private part)"} for x in (private or {}).get("scores", [])]
        return [as_text(x, phase.rounding) for x in listed]

    async def small_form(request: Request) -> dict[str, str]:
        """An url-encoded form of at most FIELD_BYTES (sign in, sign out), whole within `upload_idle_seconds`."""
        body = b""
        async for chunk in bounded_body(request, config.upload_idle_seconds, config.upload_idle_seconds):
            body += chunk
            if len(body) > FIELD_BYTES:
                raise BadForm(f"the form is over {FIELD_BYTES} bytes")
        return {k: v[0] for k, v in parse_qs(body.decode("utf-8", "replace"), max_num_fields=8).items()}

    def status(request: Request):
        now = now_utc()
        listed = [{"name": p.name, "benchmark": p.benchmark, "open": p.open_at(now), "limits": _limits(p),
                   "shown": ("hidden: headline scores, rounded" + (", under the Ladder" if p.ladder else ""))
                   if p.hidden else "public: every metric",
                   "starts": _time(p.starts.isoformat()) if p.starts else None,
                   "ends": _time(p.ends.isoformat()) if p.ends else None} for p in config.phases]
        return render("status.html", request, config.challenge, challenge=config.challenge, listed=listed,
                      queue=store.counts(), workers=workers_seen(store.workers()))

    async def login(request: Request):
        if request.method == "GET":
            return await threaded(render, "login.html", request, "Sign in", hours=SESSION_SECONDS // 3600,
                                  problem=None)
        if not same_site(request):
            return await threaded(render, "login.html", request, "Sign in", 403, hours=SESSION_SECONDS // 3600,
                                  problem="the form was not sent from this site's page")
        try:
            fields = await small_form(request)
        except (BadForm, SlowUpload) as exc:
            return await threaded(render, "login.html", request, "Sign in", 400, hours=SESSION_SECONDS // 3600,
                                  problem=str(exc))
        return await threaded(sign_in, request, fields)

    def sign_in(request: Request, fields: dict):
        team = store.team_of(fields.get("token", "").strip())
        if team is None:
            return render("login.html", request, "Sign in", 401, hours=SESSION_SECONDS // 3600,
                          problem="that token names no team")
        secret, _ = store.open_session(team)
        response = RedirectResponse("/host" if team.host else "/team", status_code=303)
        response.set_cookie(COOKIE, secret, max_age=SESSION_SECONDS, path="/", httponly=True, samesite="strict",
                            secure=request.url.scheme == "https")
        return response

    async def logout(request: Request):
        seen = await threaded(viewer, request)
        try:
            fields = await small_form(request)
        except (BadForm, SlowUpload):
            fields = {}
        if not csrf_ok(request, seen, fields):
            return Response("refused: the form did not come from this site's page", status_code=403)
        await threaded(store.close_session, request.cookies[COOKIE])
        response = RedirectResponse("/", status_code=303)
        response.delete_cookie(COOKIE, path="/")
        return response

    def team_page(request: Request, seen: dict, status: int = 200, problem: str | None = None) -> HTMLResponse:
        team = Team(seen["id"], seen["name"], seen["host"])
        rows = [{"id": r["id"], "phase": r["phase"], "filename": r["filename"], "status": r["status"],
                 "submitted": _time(r["submitted"]), "error": r["error"], "scores": scores_of(r, False)}
                for r in store.submissions(team)]
        now = now_utc()
        open_phases = [{"name": p.name, "benchmark": p.benchmark, "limits": _limits(p)} for p in config.phases
                       if seen["host"] or p.open_at(now)]
        received = request.query_params.get("received", "")
        waiting = any(r["status"] in ("queued", "scoring") for r in rows)
        return render("team.html", request, f"Submissions of {seen['name']}", status, viewer=seen, rows=rows,
                      open_phases=open_phases, max_mb=config.max_upload_bytes >> 20, problem=problem,
                      received=received if received.isdigit() and len(received) < 19 else None,
                      refresh=REFRESH_SECONDS if waiting and problem is None else None)

    def team(request: Request):
        seen = viewer(request)
        if seen is None:
            return RedirectResponse("/login", status_code=303)
        return team_page(request, seen)

    async def submit(request: Request):
        seen = await threaded(viewer, request)
        if seen is None:
            return RedirectResponse("/login", status_code=303)
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > config.max_upload_bytes + (1 << 20):
            return await threaded(team_page, request, seen, 413, f"the file is over the upload limit of "
                                                                 f"{config.max_upload_bytes >> 20} MB")
        try:
            with uploads.held(Team(seen["id"], seen["name"], seen["host"]), address(request)):
                fields, filename, upload = await read_form(request, incoming, config.max_upload_bytes, bounded_body(
                    request, config.upload_idle_seconds, config.upload_seconds))
        except (TooManyUploads, SlowUpload, TooLarge, BadForm) as exc:
            status = {TooManyUploads: 429, SlowUpload: 408, TooLarge: 413, BadForm: 400}[type(exc)]
            return await threaded(team_page, request, seen, status, str(exc))
        return await threaded(received, request, seen, fields, filename, upload)

    def received(request: Request, seen: dict, fields: dict, filename: str | None, upload):
        """The upload form's file read: checked (the session's CSRF token, the phase), stored and recorded."""
        try:
            if not csrf_ok(request, seen, fields):
                return team_page(request, seen, 403, "the form did not come from this site's page (sign in again)")
            if upload is None:
                return team_page(request, seen, 400, "choose a file to submit")
            try:
                phase = config.phase(fields.get("phase", ""))
            except ParamsError as exc:
                return team_page(request, seen, 404, str(exc))
            if not seen["host"] and not phase.open_at(now_utc()):
                return team_page(request, seen, 403, f"phase {phase.name} is not open for submissions")
            try:
                submission = accept(config, store, Team(seen["id"], seen["name"], seen["host"]), phase, upload,
                                    display_name(filename), wake)
            except LimitReached as exc:
                return team_page(request, seen, 429, str(exc))
            except BadForm as exc:
                return team_page(request, seen, 400, str(exc))
        finally:
            if upload is not None:
                upload.discard()
        return RedirectResponse(f"/team?received={submission}", status_code=303)

    def one(request: Request):
        seen = viewer(request)
        if seen is None:
            return RedirectResponse("/login", status_code=303)
        raw = request.path_params["id"]
        row = store.submission(int(raw)) if raw.isdigit() and len(raw) < 19 else None
        if row is None or (not seen["host"] and row["team"] != seen["id"]):
            return Response(f"no submission {raw[:20]} of this team", status_code=404, media_type="text/plain")
        phase = phases.get(row["phase"])
        values, note, title = [], None, "Scores"
        if row["status"] == "scored" and phase is not None:
            if seen["host"]:
                values, title = scores_of(row, True), "Scores (unrounded: the hosts' view)"
            elif phase.hidden:
                values = scores_of(row, False)
                note = (f"A hidden phase shows its headline metrics only, rounded to {phase.rounding} decimal(s)"
                        + (", released by the Ladder" if phase.ladder else "") + ".")
            else:
                values, title = _flat(json.loads(row["shown"])), "Every metric (a public phase)"
        record = {"id": row["id"], "phase": row["phase"], "team": row["team_name"], "filename": row["filename"],
                  "bytes": row["bytes"], "sha256": row["sha256"], "status": row["status"],
                  "submitted": _time(row["submitted"]), "finished": _time(row["finished"]), "error": row["error"]}
        return render("submission.html", request, f"Submission {row['id']}", row=record, values=values, note=note,
                      values_title=title, refresh=REFRESH_SECONDS if row["status"] in ("queued", "scoring") else None)

    def host(request: Request):
        seen = viewer(request)
        if seen is None:
            return RedirectResponse("/login", status_code=303)
        if not seen["host"]:
            return Response("the host view is for the challenge's hosts", status_code=403, media_type="text/plain")
        rows = store.submissions()
        per_phase = {p.name: {s: 0 for s in STATUSES} for p in config.phases}
        for r in rows:
            per_phase.setdefault(r["phase"], {s: 0 for s in STATUSES})[r["status"]] += 1
        listed = [{"id": r["id"], "team": r["team_name"], "phase": r["phase"], "filename": r["filename"],
                   "status": r["status"], "attempts": r["attempts"], "worker": r["worker"],
                   "submitted": _time(r["submitted"]), "started": _time(r["started"]),
                   "finished": _time(r["finished"]), "seconds": r["seconds"],
                   "seconds_shown": "\u2013" if r["seconds"] is None else f"{r['seconds']:.2f}",
                   "error": r["error"], "log": r["log"], "scores": scores_of(r, True)} for r in rows]
        return render("host.html", request, f"Host view: {config.challenge}", viewer=seen, challenge=config.challenge,
                      statuses=STATUSES, per_phase=list(per_phase.items()), rows=listed,
                      workers=[{**w, "seen": _time(w["seen"]), "started": _time(w["started"])}
                               for w in store.workers()],
                      refresh=REFRESH_SECONDS * 5)

    def asset(request: Request):
        name = request.path_params["name"]
        if name not in ASSETS:
            return Response("not found", status_code=404, media_type="text/plain")
        return Response((TEMPLATES / name).read_bytes(), media_type=_KINDS[name.rsplit(".", 1)[1]])

    from pipelines.serve.board import SITE, is_final, write_board

    def leaderboard(request: Request):
        """A phase's leaderboard files (index.html, board.json) as board.py wrote them, or the site's assets; a
        phase with a private part that has ended since its page was written is written again first (its final
        standing)."""
        phase, name = request.path_params.get("phase"), request.path_params.get("name") or "index.html"
        if phase is None:  # /leaderboard/site.css: the site's assets, as /assets/ serves them
            return asset(request)
        if phase not in phases or name not in ("index.html", "board.json"):
            return Response("not found", status_code=404, media_type="text/plain")
        folder = config.storage / SITE / phase
        if is_final(phases[phase]) and not json.loads((folder / "board.json").read_text()).get("final"):
            write_board(config, store, phases[phase])
        return Response((folder / name).read_bytes(), media_type=_KINDS[name.rsplit(".", 1)[1]])

    return [
        Route("/", limited(status), methods=["GET"]),
        Route("/login", limited(login), methods=["GET", "POST"]),
        Route("/logout", limited(logout), methods=["POST"]),
        Route("/team", limited(team), methods=["GET"]),
        Route("/team/submit", limited(submit), methods=["POST"]),
        Route("/team/submissions/{id}", limited(one), methods=["GET"]),
        Route("/host", limited(host), methods=["GET"]),
        Route("/assets/{name}", asset, methods=["GET"]),
        Route("/favicon.ico", lambda request: Response(status_code=204), methods=["GET"]),  # none: asked for anyway
        Route("/leaderboard/{name}", leaderboard, methods=["GET"]),
        Route("/leaderboard/{phase}/", leaderboard, methods=["GET"]),
        Route("/leaderboard/{phase}/{name}", leaderboard, methods=["GET"]),
    ]


def _flat(metrics: dict, prefix: str = "") -> list[dict]:
    """A public phase's metrics as rows (dotted keys; lists and intervals left to the report)."""
    rows = []
    for key, value in metrics.items():
        if key in ("intervals", "coverage", "settings"):
            continue
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            rows += _flat(value, f"{name}.")
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            rows.append(as_text({"label": name, "value": value, "interval": None}, None))
    return rows
