"""Ending a rank of a multi-process run (evaluator.models.distributed); the runs themselves are tested with
two gloo processes in test_shortcuts, test_perceptual_cli and test_generative."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def test_a_rank_that_left_its_group_exits_with_its_streams_flushed():
    """A process that left its process group ends through exit_after_group: the given exit status,
    buffered output written, the rest of the interpreter's finalization skipped (an atexit handler
    does not run); a process that never joined one goes on."""
    root = Path(__file__).resolve().parents[1]
    script = ("import atexit, evaluator.models.distributed as d\n"
              "d.exit_after_group(5)\n"  # never joined a group: returns
              "print('still here', end='')\n"
              "atexit.register(print, ' finalized')\n"
              "d._left_group = True\n"
              "d.exit_after_group(3)\n"
              "print(' not reached')\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=root, capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == (3, "still here"), done.stderr
