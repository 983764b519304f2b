"""`vlbench serve CONFIG`: the web application on uvicorn in this process and the scoring workers in their own
processes (spawned: none inherits the server's sockets or threads), stopped together."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

from pipelines.serve.config import load_config


def _worker_main(config_path: str, wake=None) -> None:  # pragma: no cover (runs in the worker processes)
    import signal

    from pipelines.serve.worker import run_worker

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C stops the server, which stops the workers
    run_worker(load_config(Path(config_path)), wake=wake)


def _start_workers(config_path: Path, workers: int, wake=None) -> list:
    context = multiprocessing.get_context("spawn")
    processes = [context.Process(target=_worker_main, args=(str(config_path), wake), name=f"vlbench-worker-{k}",
                                 daemon=True) for k in range(workers)]
    for process in processes:
        process.start()
    return processes


def _stop_workers(processes: list) -> None:
    for process in processes:
        process.terminate()
    for process in processes:
        process.join(10)


def work(config_path: Path, workers: int) -> None:
    """Scoring workers only (`vlbench serve worker`): on another machine than the web process, against the same
    PostgreSQL database and storage folder; until interrupted."""
    import time

    config = load_config(config_path)
    config.store()  # a database that cannot be reached is one line now, not in each worker
    processes = _start_workers(config.path, workers)
    try:
        while all(p.is_alive() for p in processes):
            time.sleep(1)
    finally:
        _stop_workers(processes)


def serve(config_path: Path, host: str, port: int, workers: int) -> None:
    """Run the service until interrupted: `workers` scoring processes (0: none here, e.g. they run on other
    machines) and the web application on HOST:PORT."""
    import uvicorn

    from pipelines.serve.app import create_app

    config = load_config(config_path)
    wake = multiprocessing.get_context("spawn").Event() if workers else None  # set by the app on each submission
    app = create_app(config, wake)
    processes = _start_workers(config.path, workers, wake)
    try:
        # forwarding headers are the app's to believe, from the config's trusted_proxies only (app.proxied)
        uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False, proxy_headers=False)
    finally:
        _stop_workers(processes)
