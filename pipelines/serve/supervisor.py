"""The scoring workers' supervisor, in the process that starts them (`vlbench serve`, `vlbench serve worker`): it
looks at each worker every CHECK_SECONDS and

- starts again a worker that died (killed, as an OOM kill does, or crashed), at most MAX_RESTARTS times in
  RESTART_WINDOW_SECONDS per worker; past that the worker stays down (`serve`: logged, the status page counts the
  workers alive; `serve worker`: every worker is stopped and the command fails in one line);
- holds each score to the config's bounds: a worker that has scored one submission for longer than
  `score_seconds`, or whose memory (its resident set) has grown past `score_memory_mb`, is killed and replaced, and
  the submission is refused in a line that says which bound it passed (it costs the team nothing).

A worker killed outside these bounds leaves its submission to the next worker once its lease lapses; one that stops
its worker every time is refused after store.MAX_ATTEMPTS attempts (pipelines/serve/store.py)."""

from __future__ import annotations

import datetime
import logging
import threading
import time
from collections import deque

from core.errors import VlbenchError

CHECK_SECONDS = 0.5
MAX_RESTARTS = 5
RESTART_WINDOW_SECONDS = 600.0


class WorkersFailed(VlbenchError):
    """A worker died more than MAX_RESTARTS times in RESTART_WINDOW_SECONDS."""


def resident_mb(pid: int) -> float | None:
    """A process's resident memory in MiB (Linux's /proc/PID/status VmRSS), None when it cannot be read."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


class Slot:
    """One worker's place: its process (anything with pid, is_alive(), kill(), join()), the name it scores under,
    and when it was started again."""

    def __init__(self, index: int):
        self.index, self.process, self.name = index, None, None
        self.restarts: deque[float] = deque()
        self.down = False


class Supervisor:
    """Starts `count` workers with `start(index) -> (process, name)` and keeps them running within the config's
    bounds (the module docstring); `store`: the challenge's records, read for what each worker scores."""

    def __init__(self, config, store, count: int, start, clock=time.monotonic):
        self.config, self.store, self.start_worker, self.clock = config, store, start, clock
        self.slots = [Slot(k) for k in range(count)]
        self.stopped = threading.Event()
        self.lock = threading.Lock()  # a look and the stop never overlap: a stopped worker is not started again
        self.log = logging.getLogger("vlbench.serve")
        for slot in self.slots:
            slot.process, slot.name = self.start_worker(slot.index)

    def check(self) -> None:
        """One look at every worker: limits first (a worker over one is killed and its submission refused), then
        the dead started again (Slot.down past MAX_RESTARTS)."""
        with self.lock:
            if not self.stopped.is_set():
                self._check()

    def _check(self) -> None:
        for slot in self.slots:
            if not slot.down and slot.process.is_alive():
                self._hold_to_bounds(slot)
        for slot in self.slots:
            if slot.down or slot.process.is_alive():
                continue
            slot.process.join(1)
            moment = self.clock()
            while slot.restarts and moment - slot.restarts[0] > RESTART_WINDOW_SECONDS:
                slot.restarts.popleft()
            if len(slot.restarts) >= MAX_RESTARTS:
                slot.down = True
                self.log.error("scoring worker %s died %d times in %g s; not started again", slot.name,
                               MAX_RESTARTS + 1, RESTART_WINDOW_SECONDS)
                continue
            slot.restarts.append(moment)
            self.log.warning("scoring worker %s died (exit %s); started again", slot.name,
                             getattr(slot.process, "exitcode", None))
            slot.process, slot.name = self.start_worker(slot.index)

    def _hold_to_bounds(self, slot: Slot) -> None:
        held = self.store.held_by(slot.name)
        if held is None:
            return
        started = datetime.datetime.fromisoformat(held["started"])
        seconds = (datetime.datetime.now(datetime.timezone.utc) - started).total_seconds()
        memory = resident_mb(slot.process.pid)
        if seconds > self.config.score_seconds:
            why = f"scoring it took longer than the limit of {self.config.score_seconds} s"
        elif memory is not None and memory > self.config.score_memory_mb:
            why = f"scoring it took more memory than the limit of {self.config.score_memory_mb} MB"
        else:
            return
        slot.process.kill()
        slot.process.join(30)
        self.store.finish(held["id"], slot.name, error=f"{why}; refused (it does not count against any limit)",
                          log=f"worker {slot.name} killed after {seconds:.1f} s at "
                              f"{'unknown' if memory is None else f'{memory:.0f} MB'} resident", seconds=seconds)
        self.log.warning("submission %s: %s; worker %s replaced", held["id"], why, slot.name)
        slot.process, slot.name = self.start_worker(slot.index)

    def run(self, fail_when_down: bool = False) -> None:
        """check() every CHECK_SECONDS until stop(); with `fail_when_down` (`serve worker`), WorkersFailed once a
        worker stays down."""
        while not self.stopped.wait(CHECK_SECONDS):
            try:
                self.check()
            except Exception:  # the database away for a moment: the next look tries again
                self.log.exception("the scoring workers' supervisor could not look at them")
            down = [s for s in self.slots if s.down]
            if down and fail_when_down:
                raise WorkersFailed(f"scoring worker {down[0].index} died {MAX_RESTARTS + 1} times within "
                                    f"{RESTART_WINDOW_SECONDS:g} s; every worker was stopped (its log says why)")

    def stop(self) -> None:
        with self.lock:
            self.stopped.set()
            for slot in self.slots:
                if slot.process.is_alive():
                    slot.process.terminate()
            for slot in self.slots:
                slot.process.join(10)
