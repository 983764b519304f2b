"""Scoring workers of the challenge service: each claims a queued submission (pipelines/serve/store.py), scores it
with the code of `vlbench evaluate` (evaluator.run.evaluate, on the phase's build with its sealed answers), and
records the metrics (for the hosts) and what the team is shown. A submission `evaluate` refuses gets its one line
and costs the team nothing. A worker renews its lease while it scores; one killed mid-score leaves the submission
to another once the lease lapses."""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
import time
import traceback
from contextlib import ExitStack
from pathlib import Path

from core.errors import VlbenchError
from evaluator.stats.bootstrap import value_at
from pipelines.serve.config import Config, Phase
from pipelines.serve.store import Store, StoreUnavailable, now_utc
from pipelines.serve.stored import checked_copy, clean_copies, stored_path
from pipelines.serve.views import private_view, shown, split_parts

POLL_SECONDS = 0.5
UNAVAILABLE_WAIT_SECONDS = 5.0  # a worker whose records cannot be used waits this long before it asks again
BEAT_SECONDS = 2.0  # a worker's heartbeat (store.WORKER_STALE_SECONDS: how long before it is not counted alive)
LOG_CHARS = 20_000  # of a refusal's or a fault's log, kept for the hosts


def score(config: Config, phase: Phase, path: Path,
          best: tuple[dict, Path] | None = None) -> tuple[dict, dict, dict | None, dict | None]:
    """(metrics, what the team is shown, the team's Ladder state after it, its private part's scores) of a stored
    submission: `vlbench evaluate` of the file on the phase's split, its answers joined from the sealed file (with
    each ratio metric's rows in scope, and each part of the split where the phase has a private one). Under the
    Ladder, `best` is the team's Ladder state and the file of its best submission (None before its first)."""
    from evaluator.request import ScoringRequest
    from evaluator.run import evaluate
    from evaluator.sealed import read_answers
    from evaluator.tasks import get_task

    request = ScoringRequest(phase.benchmark, str(phase.data), phase.split, answers=phase.answers)
    parts = split_parts(phase, read_answers(phase.answers).salt) if phase.private else None
    metrics = evaluate(request, path, scope=True, parts=parts)
    task = get_task(phase.benchmark)
    views = (shown(task, phase, metrics), None, private_view(task, phase, metrics)) if phase.ladder is None else \
        (*laddered(task, phase, metrics, path, best), None)
    metrics.pop("parts", None)  # what the views read beyond `vlbench evaluate`'s record, which the hosts keep
    metrics.get("intervals", {}).pop("scope", None)
    return (metrics, *views)


def _resampling(task, phase: Phase, path: Path):
    """A submission's resampling on the phase's split (the task's per-cluster terms of its metrics)."""
    from evaluator.interop import load_submission
    from evaluator.splits import open_split, task_options
    from evaluator.submission import match_ids

    folder, split, table = open_split(task, str(phase.data), phase.split, phase.answers)
    predictions, _ = load_submission(task, path, "auto", task.ids(table), build=(folder, split, table))
    match_ids(path, predictions, task.ids(table), task.id_field, False, False)
    return task.resampling(table, predictions, task_options(task, []))


def laddered(task, phase: Phase, metrics: dict, path: Path, best: tuple[dict, Path] | None) -> tuple[dict, dict]:
    """(what a team is shown, its Ladder state) under the Ladder (evaluator/stats/ladder.py): the phase's first
    metric only, its best released score, and whether this submission moved it; no interval (an interval would
    show the new score)."""
    from evaluator.stats.ladder import paired_standard_error, release, rounding_step

    key = (phase.metrics or tuple(h.key for h in task.headline))[0]
    headline = next(h for h in task.headline if h.key == key)
    value = value_at(metrics, key)
    state = None if best is None else best[0]
    if phase.ladder == "step":
        threshold, step = phase.ladder_step, phase.ladder_step
    else:
        new = _resampling(task, phase, path)
        step = rounding_step(new, key, 100.0 if headline.scale == "%" else 1.0)
        threshold = 0.0 if state is None else paired_standard_error(_resampling(task, phase, best[1]), new, key)
    out = release(None if state is None else state["best"], None if state is None else state["best_score"], value,
                  headline.higher_is_better, threshold, step)
    view = {"ladder": {"mechanism": phase.ladder, "metric": key, "improved": out.improved},
            "scores": [{"metric": key, "label": headline.label, "value": None if out.shown is None else
                        round(out.shown, phase.rounding), "interval": None}],
            "rounding": phase.rounding}
    return view, {"best": out.shown, "best_score": out.best, "threshold": out.threshold, "step": out.step,
                  "best_of": None if out.improved or state is None else state["best_of"]}


def _team_line(message: str, path: Path, filename: str, config: Config) -> str:
    """A refusal as the team sees it: their file's name for the stored one, the phase's folders unnamed."""
    message = message.splitlines()[0].replace(str(path), filename)
    for phase in config.phases:
        for folder, words in ((phase.answers, "the sealed answers"), (phase.data, f"phase {phase.name}'s data")):
            if folder is not None:
                message = message.replace(str(folder), words)
    return message[:500]


def _publish(config: Config, store: Store, phase: Phase) -> None:
    """The phase's leaderboard written again with a new score (pipelines/serve/board.py); a failure to write it is
    the hosts' to see in the log, never a change to the recorded score."""
    from pipelines.serve.board import write_board

    try:
        write_board(config, store, phase)
    except Exception:
        logging.getLogger("vlbench.serve").exception("writing the leaderboard of phase %s failed", phase.name)


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


def score_one(config: Config, store: Store, name: str, lease: float, beat: Heartbeat | None = None) -> bool:
    """Claim and score one submission; False when none is waiting. `beat`: the worker's heartbeat, told what it
    scores."""
    row = store.claim(name, lease)
    if row is None:
        return False
    if beat is not None:
        beat.submission = row["id"]
    done = threading.Event()

    def renew():  # the lease outlives a long score, never a dead worker
        while not done.wait(lease / 3):
            if not store.renew(row["id"], name, lease):
                return

    keeper = threading.Thread(target=renew, name="vlbench-lease", daemon=True)
    keeper.start()
    started = time.perf_counter()
    path = stored_path(config.storage, row["sha256"], row["filename"])
    try:
        with ExitStack() as copies:  # the stored bytes, checked against their SHA-256, are what is scored
            phase = config.phase(row["phase"])
            best = None
            if phase.ladder is not None:
                state = store.ladder_state(row["team"], phase.name, before=row["id"])
                if state is not None and state.get("best_of") is not None:
                    best_row = store.submission(state["best_of"])
                    best = (state, copies.enter_context(checked_copy(config.storage, best_row["sha256"],
                                                                     best_row["filename"])))
            path = copies.enter_context(checked_copy(config.storage, row["sha256"], row["filename"]))
            metrics, view, ladder, private = score(config, phase, path, best)
        if ladder is not None and view["ladder"]["improved"]:
            ladder["best_of"] = row["id"]
        if store.finish(row["id"], name, metrics=metrics, shown=view, ladder=ladder, private=private,
                        seconds=time.perf_counter() - started):
            _publish(config, store, phase)
    except VlbenchError as exc:  # the submission's problem, as `evaluate` words it: shown to its team
        store.finish(row["id"], name, error=_team_line(str(exc), path, row["filename"], config),
                     log=str(exc)[:LOG_CHARS], seconds=time.perf_counter() - started)
    except Exception:  # a fault of the service, not of the submission: logged for the hosts, costs the team nothing
        logging.getLogger("vlbench.serve").exception("scoring submission %s failed", row["id"])
        store.finish(row["id"], name, error="scoring failed inside the service (logged for the hosts); this "
                                            "submission does not count against any limit",
                     log=traceback.format_exc()[-LOG_CHARS:], seconds=time.perf_counter() - started)
    finally:
        done.set()
        keeper.join()
        if beat is not None:
            beat.submission = None
    return True


def _warm(config: Config) -> None:
    """What scoring imports, imported before the first claim: a submission never waits for a worker's imports."""
    import evaluator.interop  # noqa: F401
    import evaluator.run  # noqa: F401
    from evaluator.tasks import get_task

    for phase in config.phases:
        get_task(phase.benchmark)


class Heartbeat:
    """A worker's beat in the database (Store.beat) every BEAT_SECONDS from a thread of its own, naming the
    submission it scores: the status and host pages show the workers alive and when each was last heard of, and
    the supervisor (pipelines/serve/run.py) reads what it scores to hold it to the scoring limits."""

    def __init__(self, store: Store, name: str):
        self.store, self.name, self.submission = store, name, None
        self.started = now_utc().isoformat(timespec="seconds")
        self.stop = threading.Event()
        self.store.beat(self.name, self.started, None)
        self.thread = threading.Thread(target=self._run, name="vlbench-heartbeat", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.wait(BEAT_SECONDS):
            try:
                self.store.beat(self.name, self.started, self.submission)
            except Exception:  # the database away for a moment: the next beat tries again
                logging.getLogger("vlbench.serve").exception("worker %s: heartbeat failed", self.name)

    def close(self) -> None:
        self.stop.set()
        self.thread.join()
        self.store.forget_worker(self.name)


def run_worker(config: Config, stop: threading.Event | None = None, wake=None, name: str | None = None) -> None:
    """Score submissions until `stop` is set (for ever, in a worker process), each claimed for the config's
    `lease_seconds` and renewed while it is scored, beating (Heartbeat) under `name` (worker_name() by default).
    `wake`: the worker's end of its wake pipe (pipelines/serve/wake.py), which the web process writes to when it
    records a submission (workers started beside it), so one is claimed at once; without it, or for one recorded
    by another machine's web process, the database is asked every POLL_SECONDS."""
    store, name = config.store(), name or worker_name()
    stop = stop or threading.Event()
    clean_copies(config.storage)
    _warm(config)
    beat = Heartbeat(store, name)
    try:
        while not stop.is_set():
            if wake is not None:
                wake.clear()  # before looking: a submission recorded after this sets it again, none is missed
            try:
                found = score_one(config, store, name, config.lease_seconds, beat)
            except StoreUnavailable as exc:  # the records away for now (busy, gone, full): asked again later
                logging.getLogger("vlbench.serve").error("worker %s: %s", name, exc)
                stop.wait(UNAVAILABLE_WAIT_SECONDS)
                continue
            if not found:
                if wake is not None:
                    wake.wait(POLL_SECONDS)
                else:
                    stop.wait(POLL_SECONDS)
    finally:
        beat.close()
