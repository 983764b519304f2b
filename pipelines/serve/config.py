"""A challenge's configuration (`vlbench serve CONFIG`): YAML read safely and checked field by field, every problem
one line naming the key (`phases[1].limits.per_day`). Paths in it are relative to the file's folder."""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass, field
from pathlib import Path

from core.errors import ParamsError

NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")  # a phase's name: it reaches URLs and file names
NAME_RULE = "lower-case letters, digits, '-' and '_', starting with a letter or digit, at most 63 characters"
MAX_UPLOAD_MB = 512
MIN_SUBSET = 100  # rows: a hidden phase's default minimum subset size
# the slow-client and scoring bounds (Config): key -> (default, least, most)
SERVICE_BOUNDS = {"header_seconds": (20, 1, 600), "upload_idle_seconds": (30, 1, 3600),
                      "upload_seconds": (3600, 10, 86_400), "uploads_per_token": (2, 1, 100),
                      "uploads_per_address": (8, 1, 10_000), "score_seconds": (3600, 1, 86_400),
                      "score_memory_mb": (4096, 1, 1_000_000)}
SITE = "site"  # `<storage>/site/`: the leaderboards the service publishes (pipelines/serve/board.py)


@dataclass(frozen=True)
class Limits:
    """How many submissions a team may make: per UTC day, in all, and at once (queued or scoring). A refused
    submission counts against none of them."""

    per_day: int | None = None
    total: int | None = None
    concurrent: int | None = 1


@dataclass(frozen=True)
class Phase:
    """One phase of a challenge: the benchmark and its build (the public half of a sealed build with its answer
    file where the phase is hidden), the split scored, when it is open, what a team is shown and its limits."""

    name: str
    benchmark: str
    data: Path
    answers: Path | None
    split: str | None
    starts: datetime.datetime | None
    ends: datetime.datetime | None
    hidden: bool
    limits: Limits
    metrics: tuple[str, ...]  # the headline keys shown (empty: the benchmark's headline)
    rounding: int  # decimals of every score shown
    ladder: str | None = None  # "parameter-free" or "step" (Blum and Hardt's Ladder), None: every score shown
    ladder_step: float | None = None  # the step of `ladder: {step: ETA}`
    private: float | None = None  # the share of the split's clusters held private until the end (views.py)
    min_subset: int = MIN_SUBSET  # a hidden phase shows no score computed over fewer rows (but the whole split)

    def open_at(self, now: datetime.datetime) -> bool:
        return (self.starts is None or now >= self.starts) and (self.ends is None or now < self.ends)

    def ended_at(self, now: datetime.datetime) -> bool:
        """The phase has an end and it has passed: its private part's scores are shown."""
        return self.ends is not None and now >= self.ends


@dataclass(frozen=True)
class Config:
    path: Path
    challenge: str
    storage: Path  # the database (SQLite by default) and the stored submissions
    database: str | None  # a PostgreSQL URL; None: SQLite in `storage`
    max_upload_bytes: int
    lease_seconds: int  # how long a worker's claim lasts unrenewed: a dead worker's submission waits this long
    requests_per_minute: int  # per token (per client address without one), in each web process
    phases: tuple[Phase, ...] = field(default_factory=tuple)
    # the reverse proxies (addresses or networks) whose X-Forwarded-For and X-Forwarded-Proto are believed; from any
    # other peer those headers are ignored, and the rate limit keys a caller by the address it connects from
    trusted_proxies: tuple[str, ...] = ()
    # a slow client's bounds: a request's head within `header_seconds` of the connection (or of the last answer);
    # an upload's body with no pause over `upload_idle_seconds` and whole within `upload_seconds`; at most
    # `uploads_per_token` / `uploads_per_address` uploads in progress at once
    header_seconds: int = 20
    upload_idle_seconds: int = 30
    upload_seconds: int = 3600
    uploads_per_token: int = 2
    uploads_per_address: int = 8
    # a score's bounds: a worker scoring one submission longer than `score_seconds`, or past `score_memory_mb` of
    # memory, is replaced and the submission refused in a line (pipelines/serve/run.py's supervisor)
    score_seconds: int = 3600
    score_memory_mb: int = 4096

    def store(self, busy_seconds: float = 30.0):
        """The challenge's records (pipelines/serve/store.py): SQLite in `storage`, or the PostgreSQL `database`; a
        call waits at most `busy_seconds` on a lock another process holds."""
        from pipelines.serve.store import Store

        return Store(self.storage, self.database, busy_seconds)

    def phase(self, name: str) -> Phase:
        for phase in self.phases:
            if phase.name == name:
                return phase
        raise ParamsError(f"phase {name!r}: the challenge has {', '.join(p.name for p in self.phases)}")


def _fail(path: Path, key: str, problem: str):
    raise ParamsError(f"{path}: {key}: {problem}")


def _known(path: Path, key: str, found: dict, allowed: set[str]) -> None:
    extra = sorted(set(found) - allowed, key=str)
    if extra:
        _fail(path, f"{key}{'.' if key else ''}{extra[0]}", f"not a key of this section ({', '.join(sorted(allowed))})")


def _text(path, key, value, required=True) -> str | None:
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value.strip() or len(value) > 200 or any(ord(c) < 32 for c in value):
        _fail(path, key, "a line of text of at most 200 characters")
    return value


def _count(path, key, value, minimum: int, maximum: int = 10 ** 9) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not minimum <= value <= maximum:
        _fail(path, key, f"an integer from {minimum} to {maximum:,}")
    return value


def _when(path, key, value) -> datetime.datetime | None:
    if value is None:
        return None
    if isinstance(value, datetime.datetime):
        moment = value
    elif isinstance(value, datetime.date):
        moment = datetime.datetime(value.year, value.month, value.day)
    elif isinstance(value, str):
        try:
            moment = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            _fail(path, key, "a date or time as YYYY-MM-DD or YYYY-MM-DDTHH:MM:SSZ")
    else:
        _fail(path, key, "a date or time as YYYY-MM-DD or YYYY-MM-DDTHH:MM:SSZ")
    return moment.replace(tzinfo=datetime.timezone.utc) if moment.tzinfo is None else \
        moment.astimezone(datetime.timezone.utc)


def _path(path: Path, key, value, must_exist=True) -> Path:
    if not isinstance(value, str) or not value:
        _fail(path, key, "a path")
    found = (path.parent / value) if not Path(value).is_absolute() else Path(value)
    if must_exist and not found.exists():
        _fail(path, key, f"{value}: no such file or folder")
    return found


def _inside(inner: Path, outer: Path) -> bool:
    """INNER is OUTER or lies inside it, links resolved."""
    inner, outer = inner.resolve(), outer.resolve()
    return inner == outer or outer in inner.parents


def _check_answers(path: Path, key: str, data: Path, sealed: dict, answers: Path) -> None:
    """The answer file is the one the phase's public half commits to (evaluator.sealed.check_pair): another build's
    answers would refuse every good submission once the service runs."""
    from evaluator.sealed import check_pair, read_answers

    try:
        check_pair(data, sealed, read_answers(answers))
    except ParamsError as exc:
        _fail(path, key, str(exc).removeprefix(f"--answers {answers}: "))


def _proxies(path: Path, value) -> tuple[str, ...]:
    """`trusted_proxies`: a list of addresses or networks (`127.0.0.1`, `192.168.0.0/16`, `::1`); a network of every
    address (a /0) is refused as `*` is: every client could then forge its address."""
    import ipaddress

    if value is None:
        return ()
    if not isinstance(value, list):
        _fail(path, "trusted_proxies", "a list of the reverse proxies' addresses or networks (e.g. [127.0.0.1])")
    for k, entry in enumerate(value):
        try:
            every = ipaddress.ip_network(entry if isinstance(entry, str) else "", strict=False).prefixlen == 0
        except ValueError:
            every = True
        if every:
            _fail(path, f"trusted_proxies[{k}]", "an IP address or network (127.0.0.1, 192.168.0.0/16, ::1); never "
                                                 "'*' or a network of every address")
    return tuple(value)


def _ladder(path: Path, key: str, value) -> tuple[str | None, float | None]:
    """`ladder`: left out or false (none), `parameter-free` (Algorithm 2), or `{step: ETA}` (Algorithm 1)."""
    if value is None or value is False:
        return None, None
    if value == "parameter-free":
        return "parameter-free", None
    if isinstance(value, dict) and set(value) == {"step"} and isinstance(value["step"], (int, float)) and \
            not isinstance(value["step"], bool) and 0 < value["step"] <= 100:
        return "step", float(value["step"])
    _fail(path, key, "parameter-free, or {step: ETA} with ETA in (0, 100] in the metric's units, or false")


def _phase(path: Path, key: str, raw) -> Phase:
    from evaluator.sealed import sealed_record
    from evaluator.tasks import get_task

    if not isinstance(raw, dict):
        _fail(path, key, "a mapping (name, benchmark, data, ...)")
    _known(path, key, raw, {"name", "benchmark", "data", "answers", "split", "starts", "ends", "visibility", "limits",
                            "metrics", "rounding", "ladder", "private", "min_subset"})
    name = raw.get("name")
    if not isinstance(name, str) or not NAME.fullmatch(name):
        _fail(path, f"{key}.name", NAME_RULE)
    benchmark = _text(path, f"{key}.benchmark", raw.get("benchmark"))
    try:
        task = get_task(benchmark)
    except ParamsError as exc:
        _fail(path, f"{key}.benchmark", str(exc))
    data = _path(path, f"{key}.data", raw.get("data"))
    answers = _path(path, f"{key}.answers", raw["answers"]) if raw.get("answers") is not None else None
    visibility = raw.get("visibility", "hidden")
    if visibility not in ("hidden", "public"):
        _fail(path, f"{key}.visibility", "hidden or public")
    try:
        sealed = sealed_record(data)
    except ParamsError as exc:
        _fail(path, f"{key}.data", str(exc))
    if sealed is not None and answers is None:
        _fail(path, f"{key}.answers", "the phase's data is the public half of a sealed build: name its answer file")
    if visibility == "hidden" and sealed is None:
        _fail(path, f"{key}.data", "a hidden phase scores the public half of a sealed build (`vlbench seal`)")
    if answers is not None:
        if _inside(answers, data):
            _fail(path, f"{key}.answers", f"lies inside {key}.data, the public half that is published; keep the "
                                          "sealed answers apart from it")
        if sealed is None:
            _fail(path, f"{key}.answers", f"{key}.data is not the public half of a sealed build, so it has no "
                                          "answers to name")
        _check_answers(path, f"{key}.answers", data, sealed, answers)
    split = raw.get("split")
    if split is not None:
        from core.names import check_split_name

        try:
            check_split_name(split, f"{path}: {key}.split")
        except ParamsError as exc:
            raise ParamsError(str(exc)) from None
    limits = raw.get("limits") or {}
    if not isinstance(limits, dict):
        _fail(path, f"{key}.limits", "a mapping (per_day, total, concurrent)")
    _known(path, f"{key}.limits", limits, {"per_day", "total", "concurrent"})
    metrics = raw.get("metrics") or []
    headline = [h.key for h in task.headline]
    if not isinstance(metrics, list) or any(m not in headline for m in metrics):
        _fail(path, f"{key}.metrics", f"a list of {benchmark}'s headline metrics ({', '.join(headline)})")
    ladder, step = _ladder(path, f"{key}.ladder", raw.get("ladder"))
    if ladder is not None and limits.get("concurrent", 1) != 1:
        _fail(path, f"{key}.limits.concurrent", "1 under the Ladder (a team's submissions are laddered in turn)")
    private = raw.get("private")
    if private is not None:
        if isinstance(private, bool) or not isinstance(private, (int, float)) or not 0 < private < 1:
            _fail(path, f"{key}.private", "the share of the split held private until the phase ends, between 0 and 1 "
                                          "(0.5: half)")
        if visibility != "hidden":
            _fail(path, f"{key}.private", "a private part belongs to a hidden phase (a public one shows every score)")
        if ladder is not None:
            _fail(path, f"{key}.private", "a private part or the Ladder, not both (the Ladder is laddered on the whole "
                                          "split)")
        if raw.get("ends") is None:
            _fail(path, f"{key}.ends", "a phase with a private part needs an end: its private scores are shown then")
    starts, ends = _when(path, f"{key}.starts", raw.get("starts")), _when(path, f"{key}.ends", raw.get("ends"))
    if starts is not None and ends is not None and ends <= starts:
        _fail(path, f"{key}.ends", "after starts")
    return Phase(name=name, benchmark=benchmark, data=data, answers=answers, split=split, starts=starts, ends=ends,
                 hidden=visibility == "hidden",
                 limits=Limits(per_day=_count(path, f"{key}.limits.per_day", limits.get("per_day"), 1),
                               total=_count(path, f"{key}.limits.total", limits.get("total"), 1),
                               concurrent=_count(path, f"{key}.limits.concurrent", limits.get("concurrent", 1), 1)),
                 metrics=tuple(metrics), rounding=_count(path, f"{key}.rounding", raw.get("rounding", 2), 0, 6),
                 ladder=ladder, ladder_step=step, private=None if private is None else float(private),
                 min_subset=_count(path, f"{key}.min_subset", raw.get("min_subset", MIN_SUBSET), 0))


def load_config(path: Path) -> Config:
    """The challenge's configuration, checked (one line naming the key for any problem)."""
    import yaml

    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ParamsError(f"{path}: cannot be read ({exc.strerror})") from None
    except (yaml.YAMLError, UnicodeDecodeError, RecursionError) as exc:
        raise ParamsError(f"{path}: not YAML ({str(exc).splitlines()[0][:160]})") from None
    if not isinstance(raw, dict):
        raise ParamsError(f"{path}: a mapping with challenge, storage and phases")
    _known(path, "", raw, {"challenge", "storage", "database", "max_upload_mb", "lease_seconds", "requests_per_minute",
                           "phases", "trusted_proxies", *SERVICE_BOUNDS})
    challenge = _text(path, "challenge", raw.get("challenge"))
    storage = _path(path, "storage", raw.get("storage", "serve-data"), must_exist=False)
    database = raw.get("database")
    if database is not None and (not isinstance(database, str) or not database.startswith(("postgresql://",
                                                                                           "postgres://"))):
        _fail(path, "database", "a PostgreSQL URL (postgresql://...), or left out for SQLite in the storage folder")
    mb = _count(path, "max_upload_mb", raw.get("max_upload_mb", 200), 1, MAX_UPLOAD_MB)
    phases = raw.get("phases")
    if not isinstance(phases, list) or not phases:
        _fail(path, "phases", "a list of at least one phase")
    found = tuple(_phase(path, f"phases[{k}]", p) for k, p in enumerate(phases))
    names = [p.name for p in found]
    if len(set(names)) != len(names):
        _fail(path, "phases", f"two phases are named {next(n for n in names if names.count(n) > 1)}")
    for k, phase in enumerate(found):
        if _inside(storage, phase.data):
            _fail(path, "storage", f"lies inside phases[{k}].data, the public half that is published (the database "
                                   "and every submission would be published with it)")
        if phase.answers is not None and _inside(phase.answers, storage / SITE):
            _fail(path, f"phases[{k}].answers", f"lies inside {storage / SITE}, the folder the service publishes")
    return Config(path=path, challenge=challenge, storage=storage, database=database, max_upload_bytes=mb << 20,
                  lease_seconds=_count(path, "lease_seconds", raw.get("lease_seconds", 60), 2, 3600),
                  requests_per_minute=_count(path, "requests_per_minute", raw.get("requests_per_minute", 120), 1,
                                             100_000), phases=found,
                  trusted_proxies=_proxies(path, raw.get("trusted_proxies")),
                  **{key: _count(path, key, raw.get(key, default), low, high)
                     for key, (default, low, high) in SERVICE_BOUNDS.items()})
