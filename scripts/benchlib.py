"""Shared harness of the benchmark scripts: run one measurement in a fresh interpreter (so that one
measurement's memory does not count against another's peak RSS) and read back its JSON line."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path


def report(seconds: float) -> None:
    """Print what a child measured: {"seconds", "peak_rss_mb"} of this process, as one JSON line."""
    print(json.dumps({"seconds": seconds, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


def measure(script: str, mode: str, *args: Path) -> dict:
    """Run `script --child MODE ARGS...` in a fresh Python and return the dict it reported."""
    done = subprocess.run([sys.executable, script, "--child", mode, *map(str, args)],
                          check=True, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])
