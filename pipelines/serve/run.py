"""`vlbench serve CONFIG`: the web application on uvicorn in this process and the scoring workers in their own
processes (spawned: none inherits the server's sockets or threads), supervised (pipelines/serve/supervisor.py),
woken through pipes (pipelines/serve/wake.py), stopped together; `vlbench serve worker`: the workers alone."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

from pipelines.serve.config import load_config


def _worker_main(config_path: str, wake=None, name: str | None = None) -> None:  # pragma: no cover (a worker)
    import signal

    from pipelines.serve.worker import run_worker

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C stops the server, which stops the workers
    run_worker(load_config(Path(config_path)), wake=wake, name=name)


def _supervised(config, workers: int, wakers=None):
    """The workers, started (spawned: none inherits the server's sockets or threads) and kept running within the
    config's bounds by a Supervisor (pipelines/serve/supervisor.py); each is named by its starter, so the
    supervisor reads what it scores, and given its end of a wake pipe (`wakers`, pipelines/serve/wake.py)."""
    import os
    import secrets
    import socket

    from pipelines.serve.supervisor import Supervisor

    context = multiprocessing.get_context("spawn")

    def start(index: int):
        name = f"{socket.gethostname()}:{os.getpid()}:w{index}:{secrets.token_hex(3)}"
        wake = None if wakers is None else wakers.add(index)
        process = context.Process(target=_worker_main, args=(str(config.path), wake, name),
                                  name=f"vlbench-worker-{index}", daemon=True)
        process.start()
        if wake is not None:
            wake.connection.close()  # the worker holds its own copy (duplicated when it was started)
        return process, name

    return Supervisor(config, config.store(), workers, start)


def head_bounded(seconds: float):
    """uvicorn's h11 protocol with a deadline on each request head: `seconds` from the connection, or from the last
    answer, for the whole head to come (uvicorn cancels its keep-alive timer on any byte, so a client sending its
    headers a byte at a time held a connection for ever). Past it, a connection with no request in progress is
    closed."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class HeadBounded(H11Protocol):
        head_timer = None

        def _arm(self) -> None:
            if self.head_timer is not None:
                self.head_timer.cancel()
            self.head_timer = self.loop.call_later(seconds, self._head_late)

        def _head_late(self) -> None:
            if (self.cycle is None or self.cycle.response_complete) and not self.transport.is_closing():
                self.transport.close()

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self._arm()

        def handle_events(self) -> None:
            super().handle_events()
            if self.cycle is not None and not self.cycle.response_complete and self.head_timer is not None:
                self.head_timer.cancel()  # a whole head came: the body has bounds of its own (uploads.py)
                self.head_timer = None

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._arm()

        def connection_lost(self, exc) -> None:
            if self.head_timer is not None:
                self.head_timer.cancel()
            super().connection_lost(exc)

    return HeadBounded


def work(config_path: Path, workers: int) -> None:
    """Scoring workers only (`vlbench serve worker`): on another machine than the web process, against the same
    PostgreSQL database and storage folder; until interrupted. A worker that dies is started again (bounded); one
    that dies too often stops them all, in one line (supervisor.WorkersFailed)."""
    config = load_config(config_path)
    config.store()  # a database that cannot be reached is one line now, not in each worker
    supervisor = _supervised(config, workers)
    try:
        supervisor.run(fail_when_down=True)
    finally:
        supervisor.stop()


def serve(config_path: Path, host: str, port: int, workers: int) -> None:
    """Run the service until interrupted: `workers` scoring processes (0: none here, e.g. they run on other
    machines), supervised from a thread of this process, and the web application on HOST:PORT."""
    import threading

    import uvicorn

    from pipelines.serve.app import create_app
    from pipelines.serve.wake import Wakers

    config = load_config(config_path)
    wakers = Wakers(multiprocessing.get_context("spawn")) if workers else None  # set by the app on each submission
    app = create_app(config, wakers)
    supervisor = _supervised(config, workers, wakers)
    watcher = threading.Thread(target=supervisor.run, name="vlbench-supervisor", daemon=True)
    watcher.start()
    try:
        # forwarding headers are the app's to believe, from the config's trusted_proxies only (app.proxied)
        uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False, proxy_headers=False,
                    http=head_bounded(config.header_seconds))
    finally:
        supervisor.stop()
        watcher.join(10)
