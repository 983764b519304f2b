"""The challenge service's records: teams, their tokens (stored hashed) and the submissions with their status, in one
SQLite file in WAL mode (nothing to install; several processes on one machine share it). Every change is one
transaction; a submission is claimed for scoring under a lease that its worker renews, so a worker killed
mid-score leaves it to another once the lease lapses, and only the worker that holds it can record its result:
scored exactly once, none lost.

A token is `vlb_<id>_<secret>`: the id finds its row, the secret's SHA-256 is compared with the stored one in
constant time (`hmac.compare_digest`); the secret itself is never stored, logged or shown again."""

from __future__ import annotations

import datetime
import hashlib
import hmac
import json
import secrets
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from core.errors import ParamsError

SCHEMA = """
CREATE TABLE IF NOT EXISTS teams (
    id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, host INTEGER NOT NULL, created TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS tokens (
    id TEXT PRIMARY KEY, team INTEGER NOT NULL REFERENCES teams(id), digest TEXT NOT NULL, created TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS submissions (
    id INTEGER PRIMARY KEY, team INTEGER NOT NULL REFERENCES teams(id), phase TEXT NOT NULL,
    sha256 TEXT NOT NULL, filename TEXT NOT NULL, bytes INTEGER NOT NULL, status TEXT NOT NULL,
    submitted TEXT NOT NULL, day TEXT NOT NULL, started TEXT, finished TEXT, worker TEXT, lease REAL,
    attempts INTEGER NOT NULL DEFAULT 0, seconds REAL, error TEXT, metrics TEXT, shown TEXT, ladder TEXT);
CREATE INDEX IF NOT EXISTS submissions_by_status ON submissions (status, id);
CREATE INDEX IF NOT EXISTS submissions_by_team ON submissions (team, phase, status);
"""
STATUSES = ("queued", "scoring", "scored", "refused")
TEAM_NAME_MAX = 80


class LimitReached(ParamsError):
    """A submission over one of the phase's limits (HTTP 429)."""


@dataclass(frozen=True)
class Team:
    id: int
    name: str
    host: bool


def now_utc() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def check_team_name(name: str) -> str:
    """A team's name: one line of printable text (it reaches pages through their escaping, and error lines)."""
    if not isinstance(name, str) or not name.strip() or len(name) > TEAM_NAME_MAX or \
            any(not c.isprintable() for c in name):
        raise ParamsError(f"team name {name[:40]!r}: one line of printable text, at most {TEAM_NAME_MAX} characters")
    return name


class Store:
    """The records of one challenge, in `<storage>/serve.sqlite3`. One connection per thread."""

    def __init__(self, storage: Path):
        self.storage = Path(storage)
        self.path = self.storage / "serve.sqlite3"
        self._local = threading.local()
        self.storage.mkdir(parents=True, exist_ok=True)
        with self._connection() as db:
            db.executescript(SCHEMA)

    def _connection(self) -> sqlite3.Connection:
        db = getattr(self._local, "db", None)
        if db is None:
            db = sqlite3.connect(self.path, timeout=30, isolation_level=None, check_same_thread=True)
            db.row_factory = sqlite3.Row
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=FULL")  # a submission acknowledged is on disk
            db.execute("PRAGMA foreign_keys=ON")
            self._local.db = db
        return db

    def _write(self):
        """A write transaction, taken at once (BEGIN IMMEDIATE: two processes never both read then write)."""
        store = self

        class Transaction:
            def __enter__(self):
                self.db = store._connection()
                self.db.execute("BEGIN IMMEDIATE")
                return self.db

            def __exit__(self, kind, value, trace):
                self.db.execute("COMMIT" if kind is None else "ROLLBACK")
                return False

        return Transaction()

    # -- teams and tokens ------------------------------------------------------------------------------------
    def add_team(self, name: str, host: bool = False) -> str:
        """A new team (or host) and its token, returned once: only its digest is kept."""
        check_team_name(name)
        token_id, secret = secrets.token_hex(6), secrets.token_urlsafe(32)
        stamp = now_utc().isoformat()
        try:
            with self._write() as db:
                team = db.execute("INSERT INTO teams (name, host, created) VALUES (?, ?, ?)",
                                  (name, int(host), stamp)).lastrowid
                db.execute("INSERT INTO tokens (id, team, digest, created) VALUES (?, ?, ?, ?)",
                           (token_id, team, _digest(secret), stamp))
        except sqlite3.IntegrityError:
            raise ParamsError(f"team {name!r}: exists already") from None
        return f"vlb_{token_id}_{secret}"

    def team_of(self, token: str | None) -> Team | None:
        """The team a token belongs to, or None (no token, a malformed one, an unknown id, a wrong secret)."""
        if not token or not token.startswith("vlb_") or token.count("_") < 2:
            return None
        token_id, secret = token[4:].split("_", 1)
        row = self._connection().execute(
            "SELECT tokens.digest, teams.id, teams.name, teams.host FROM tokens JOIN teams ON teams.id = tokens.team "
            "WHERE tokens.id = ?", (token_id,)).fetchone()
        if row is None or not hmac.compare_digest(row["digest"], _digest(secret)):
            return None
        return Team(row["id"], row["name"], bool(row["host"]))

    def teams(self) -> list[Team]:
        return [Team(r["id"], r["name"], bool(r["host"]))
                for r in self._connection().execute("SELECT id, name, host FROM teams ORDER BY id")]

    # -- submissions -----------------------------------------------------------------------------------------
    def submit(self, team: Team, phase, sha256: str, filename: str, size: int, now: datetime.datetime) -> int:
        """Record a stored submission as queued, unless it is over a limit of the phase (counted over the team's
        submissions that were not refused: a refused one costs nothing). One transaction: two uploads at once
        cannot both pass a limit."""
        limits, day = phase.limits, now.date().isoformat()
        with self._write() as db:
            def count(where: str, *args) -> int:
                return db.execute(f"SELECT COUNT(*) FROM submissions WHERE team = ? AND phase = ? AND {where}",
                                  (team.id, phase.name, *args)).fetchone()[0]

            for limit, used, what in (
                    (limits.concurrent, lambda: count("status IN ('queued', 'scoring')"), "at once"),
                    (limits.per_day, lambda: count("status != 'refused' AND day = ?", day), f"on {day} (UTC)"),
                    (limits.total, lambda: count("status != 'refused'"), "in all")):
                if limit is not None and not team.host and used() >= limit:
                    raise LimitReached(f"phase {phase.name}: team {team.name!r} has made the {limit} submission(s) "
                                       f"allowed {what}; a refused submission does not count")
            return db.execute(
                "INSERT INTO submissions (team, phase, sha256, filename, bytes, status, submitted, day) "
                "VALUES (?, ?, ?, ?, ?, 'queued', ?, ?)",
                (team.id, phase.name, sha256, filename, size, now.isoformat(), day)).lastrowid

    def claim(self, worker: str, lease_seconds: float) -> sqlite3.Row | None:
        """The next submission to score, claimed by `worker` under a lease: a queued one, or one whose worker's
        lease lapsed (killed mid-score). Teams take turns: the oldest of the team with the fewest in scoring."""
        moment = time.time()
        with self._write() as db:
            row = db.execute(
                "SELECT s.id FROM submissions s WHERE s.status = 'queued' OR (s.status = 'scoring' AND s.lease < ?) "
                "ORDER BY (SELECT COUNT(*) FROM submissions o WHERE o.team = s.team AND o.status = 'scoring' "
                "AND o.lease >= ?), s.id LIMIT 1", (moment, moment)).fetchone()
            if row is None:
                return None
            db.execute("UPDATE submissions SET status = 'scoring', worker = ?, lease = ?, started = ?, "
                       "attempts = attempts + 1 WHERE id = ?",
                       (worker, moment + lease_seconds, now_utc().isoformat(), row["id"]))
            return db.execute("SELECT * FROM submissions WHERE id = ?", (row["id"],)).fetchone()

    def renew(self, submission: int, worker: str, lease_seconds: float) -> bool:
        with self._write() as db:
            return db.execute("UPDATE submissions SET lease = ? WHERE id = ? AND worker = ? AND status = 'scoring'",
                              (time.time() + lease_seconds, submission, worker)).rowcount == 1

    def finish(self, submission: int, worker: str, *, metrics: dict | None = None, shown: dict | None = None,
               ladder: dict | None = None, error: str | None = None, seconds: float = 0.0) -> bool:
        """Record a result, only by the worker holding the submission (a worker whose lease lapsed and was taken
        over records nothing): scored with its metrics, what the team is shown and the team's Ladder state after
        it (never shown: it holds the best's unrounded score), or refused with its line."""
        def text(value):
            return None if value is None else json.dumps(value, sort_keys=True)

        with self._write() as db:
            return db.execute(
                "UPDATE submissions SET status = ?, finished = ?, seconds = ?, metrics = ?, shown = ?, ladder = ?, "
                "error = ?, lease = NULL WHERE id = ? AND worker = ? AND status = 'scoring'",
                ("refused" if error is not None else "scored", now_utc().isoformat(), seconds, text(metrics),
                 text(shown), text(ladder), error, submission, worker)).rowcount == 1

    def submission(self, submission: int) -> sqlite3.Row | None:
        return self._connection().execute(
            "SELECT s.*, t.name AS team_name FROM submissions s JOIN teams t ON t.id = s.team WHERE s.id = ?",
            (submission,)).fetchone()

    def submissions(self, team: Team | None = None, phase: str | None = None) -> list[sqlite3.Row]:
        """Every submission (a host's view) or one team's, newest first."""
        where, args = [], []
        if team is not None:
            where.append("s.team = ?")
            args.append(team.id)
        if phase is not None:
            where.append("s.phase = ?")
            args.append(phase)
        clause = f"WHERE {' AND '.join(where)}" if where else ""
        return self._connection().execute(
            f"SELECT s.*, t.name AS team_name FROM submissions s JOIN teams t ON t.id = s.team {clause} "
            "ORDER BY s.id DESC", args).fetchall()

    def ladder_state(self, team: int, phase: str, before: int) -> dict | None:
        """The team's Ladder state in a phase before submission `before`: that of its latest scored submission
        (its best shown score and which submission it is of), or None before its first."""
        row = self._connection().execute(
            "SELECT ladder FROM submissions WHERE team = ? AND phase = ? AND status = 'scored' AND id < ? "
            "AND ladder IS NOT NULL ORDER BY id DESC LIMIT 1", (team, phase, before)).fetchone()
        return None if row is None else json.loads(row["ladder"])

    def counts(self) -> dict[str, int]:
        found = dict(self._connection().execute("SELECT status, COUNT(*) FROM submissions GROUP BY status").fetchall())
        return {status: found.get(status, 0) for status in STATUSES}
