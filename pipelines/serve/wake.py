"""How the web process wakes its scoring workers when it records a submission: one pipe per worker, the web
process writing a 4-byte message to each without ever blocking (a full pipe already holds a wake; a dead worker's
pipe is skipped). A lock shared with the workers (a multiprocessing.Event) was held for ever by a worker killed
while waiting on it, and the next submission's `set()` stalled the web process's event loop, every route with it.
A worker that misses a wake still finds the submission: it asks the database every POLL_SECONDS."""

from __future__ import annotations

import os
import threading


class Wakers:
    """The web process's ends: `add(slot)` gives the end a new worker reads (WakeReader), replacing the slot's old
    pipe; `set()` wakes every worker."""

    def __init__(self, context):
        self.context, self.lock, self.writers = context, threading.Lock(), {}

    def add(self, slot: int) -> WakeReader:
        reader, writer = self.context.Pipe(duplex=False)
        os.set_blocking(writer.fileno(), False)
        with self.lock:
            old = self.writers.pop(slot, None)
            self.writers[slot] = writer
        if old is not None:
            old.close()
        return WakeReader(reader)

    def set(self) -> None:
        with self.lock:
            writers = list(self.writers.values())
        for writer in writers:
            try:
                writer.send_bytes(b"")
            except (BlockingIOError, BrokenPipeError, OSError):  # a wake is pending already, or the worker is gone
                pass


class WakeReader:
    """A worker's end, as the worker loop uses an event: clear() drops the wakes so far, wait(seconds) returns once
    woken or after `seconds`."""

    def __init__(self, connection):
        self.connection = connection

    def clear(self) -> None:
        while self.connection.poll(0):
            self.connection.recv_bytes()

    def wait(self, seconds: float) -> bool:
        return self.connection.poll(seconds)
