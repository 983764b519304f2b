"""Draw a build's figures in a helper process started when the build starts.

Importing matplotlib and drawing a card's bar charts costs about a second, as much as reading a
val-size GQA file. The helper imports matplotlib (and draws one throw-away chart, which loads the
fonts) on a second core while the build reads its sources; it is sent the FigureSpecs as soon as the
builder knows them (`RunStage.figures_known`, else when the tables exist) and draws them while the
build goes on. It runs at the build's own CPU priority: the build waits for its figures at export,
and a helper at a lower priority is starved on a busy machine, so the build would stall behind it
(`scripts/bench_gqa_ood_build.py` measures the build beside two CPU-bound processes).
It sends back PNG bytes: the files are written
by the build, into its staging folder. `evaluator.publish.report.draw_bars` draws in both places, so the bytes
are the same. When the helper cannot be started or fails, the figures are drawn in this process, so a
failure surfaces with its real error.

A helper costs a process start and matplotlib's import (about a second of CPU), so it is started
only when that work would otherwise be on the build's path: the inputs are large enough for their
reading to hide it, and this process has not imported matplotlib already (a library caller or a test
run that drew before draws cheaply here).

    python -m pipelines.figure_process   # the helper: pickled [FigureSpec] on stdin, [PNG bytes] out
"""

from __future__ import annotations

import io
import os
import pickle
import subprocess
import sys
from pathlib import Path

from core.figures import FigureSpec

_PACKAGE_ROOT = str(Path(__file__).resolve().parents[1])
HELPER_MIN_INPUT_BYTES = 16 << 20  # about 0.2 s of reading


def helper_worthwhile(input_bytes: int) -> bool:
    """Whether a build reading `input_bytes` should draw its figures in a helper process."""
    return input_bytes >= HELPER_MIN_INPUT_BYTES and "matplotlib.pyplot" not in sys.modules


def draw_pngs(specs: list[FigureSpec]) -> list[bytes]:
    """Each spec drawn as a PNG, in this process."""
    from core.figures import draw_bars

    pngs = []
    for spec in specs:
        buffer = io.BytesIO()
        draw_bars(spec, buffer)
        pngs.append(buffer.getvalue())
    return pngs


class FigureProcess:
    """`with FigureProcess() as figures: figures.start(specs); ...; figures.pngs(specs)`; the helper
    never outlives the block."""

    def __init__(self, start_helper: bool = True) -> None:
        self._proc: subprocess.Popen | None = None
        self._sent: list[FigureSpec] | None = None
        if not start_helper:
            return
        paths = [_PACKAGE_ROOT] + [p for p in [os.environ.get("PYTHONPATH")] if p]
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "pipelines.figure_process"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": os.pathsep.join(paths)})
        except OSError:
            self._proc = None

    def __enter__(self) -> FigureProcess:
        return self

    def __exit__(self, *exc) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
            for stream in (self._proc.stdin, self._proc.stdout):
                stream.close()
            self._proc = None

    def start(self, specs: list[FigureSpec]) -> None:
        """Hand the specs to the helper, which draws them while the caller goes on. Only the first
        call sends (a builder may hand its figures early, `RunStage.figures_known`)."""
        if self._proc is None or self._proc.stdin.closed:
            return
        try:
            self._proc.stdin.write(pickle.dumps(specs))
            self._proc.stdin.close()
            self._sent = list(specs)
        except OSError:  # the helper died (a broken pipe): pngs() draws here
            self._sent = None

    def pngs(self, specs: list[FigureSpec]) -> list[bytes]:
        """The PNG bytes of `specs` (those given to start(), or drawn here)."""
        if self._proc is not None and self._sent == list(specs):
            proc, self._proc = self._proc, None
            out = proc.stdout.read()
            proc.stdout.close()
            if proc.wait() == 0:
                pngs = pickle.loads(out)
                if len(pngs) == len(specs):
                    return pngs
        return draw_pngs(specs)


def _warm_up() -> None:
    """Draw one chart and throw it away: the first drawing loads fonts and caches."""
    draw_pngs([FigureSpec(filename="warm-up.png", title="warm-up", categories=["a", "b"],
                          series={"x": [1.0, 2.0]}, xlabel="x", ylabel="y")])


def main() -> int:
    _warm_up()
    payload = sys.stdin.buffer.read()
    if not payload:
        return 0
    sys.stdout.buffer.write(pickle.dumps(draw_pngs(pickle.loads(payload))))
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    os._exit(code)  # the build waits for this exit: matplotlib's teardown (about 0.1 s) is skipped
