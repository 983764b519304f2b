"""Progress bars: shown on a terminal (with items per second), silent in pipes and logs."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios

import pytest

import core.progress
from core.progress import progress, quiet_library_bars


def _run_on_a_terminal(args: list[str]) -> str:
    """Run a command with stdout and stderr on a pseudo-terminal of 120 columns; return what it showed."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("TQDM_DISABLE", "HF_HUB_DISABLE_PROGRESS_BARS")}
    proc = subprocess.Popen(args, stdin=follower, stdout=follower, stderr=follower, env=env)
    os.close(follower)
    shown = b""
    while True:
        try:
            chunk = os.read(leader, 1 << 16)
        except OSError:  # the follower side closed
            break
        if not chunk:
            break
        shown += chunk
    os.close(leader)
    assert proc.wait() == 0, shown.decode(errors="replace")
    return shown.decode(errors="replace")


@pytest.mark.slow
def test_a_build_on_a_terminal_shows_stages_reading_and_writing(sample_sources, tmp_path):
    vlbench = [sys.executable, "-m", "pipelines.cli"]
    shown = _run_on_a_terminal(vlbench + ["build", "gqa-ood", "--source", str(sample_sources), "--out",
                                          str(tmp_path / "out"), "--split", "val", "--no-cache"])
    assert "stage index-val:" in shown
    assert "reading val_balanced_questions.json" in shown and "record/s" in shown
    assert "writing out" in shown and "file/s" in shown


@pytest.mark.slow
def test_a_build_in_a_pipe_shows_no_bars(sample_sources, tmp_path):
    done = subprocess.run([sys.executable, "-m", "pipelines.cli", "build", "gqa-ood", "--source",
                           str(sample_sources), "--out", str(tmp_path / "out"), "--split", "val", "--no-cache"],
                          capture_output=True, text=True, check=True)
    assert "stage" not in done.stderr and "record/s" not in done.stderr and "%|" not in done.stderr
    assert "built gqa-ood" in done.stdout


def test_disabled_bars_pass_items_through(monkeypatch):
    monkeypatch.setattr(sys, "stderr", open(os.devnull, "w"))  # not a terminal
    items = [1, 2, 3]
    bar = progress(items, desc="x", unit="item")
    assert bar.disable and list(bar) == items


def test_library_bars_are_quieted_off_a_terminal_keeping_the_users_choice(monkeypatch):
    monkeypatch.setattr(core.progress.sys, "stderr", open(os.devnull, "w"))
    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "0")  # the user's explicit setting wins
    quiet_library_bars()
    assert os.environ["TQDM_DISABLE"] == "1"
    assert os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] == "0"
