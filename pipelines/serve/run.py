"""`vlbench serve CONFIG`: the web application on uvicorn in this process and the scoring workers in their own
processes (spawned: none inherits the server's sockets or threads), stopped together."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

from pipelines.serve.config import load_config


def _worker_main(config_path: str) -> None:  # pragma: no cover (runs in the worker processes)
    import signal

    from pipelines.serve.worker import run_worker

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C stops the server, which stops the workers
    run_worker(load_config(Path(config_path)))


def serve(config_path: Path, host: str, port: int, workers: int) -> None:
    """Run the service until interrupted: `workers` scoring processes (0: none here, e.g. they run on other
    machines) and the web application on HOST:PORT."""
    import uvicorn

    from pipelines.serve.app import create_app

    config = load_config(config_path)
    app = create_app(config)
    context = multiprocessing.get_context("spawn")
    processes = [context.Process(target=_worker_main, args=(str(config.path),), name=f"vlbench-worker-{k}",
                                 daemon=True) for k in range(workers)]
    for process in processes:
        process.start()
    try:
        uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False)
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.join(10)
