"""The figure helper process (pipelines.figure_process): same PNG bytes as drawing in-process, and a
helper that dies or is handed other specs never loses a figure."""

from __future__ import annotations

import pytest

import pipelines.build
from core.figures import FigureSpec
from pipelines.build import run_build
from pipelines.figure_process import HELPER_MIN_INPUT_BYTES, FigureProcess, draw_pngs, helper_worthwhile

SPECS = [
    FigureSpec(filename="a.png", title="answers per group", categories=["yes", "no", "red"],
               series={"val": [3.0, 2.0, 1.0]}, xlabel="answer", ylabel="questions",
               bar_colors=["tab:blue", "tab:orange", "tab:blue"], legend_colors={"head": "tab:blue"}),
    FigureSpec(filename="b.png", title="two series", categories=[f"c{i}" for i in range(9)],
               series={"x": [float(i) for i in range(9)], "y": [9.0 - i for i in range(9)]},
               errors={"x": [0.5] * 9}),
]


def test_the_helper_draws_the_bytes_drawn_here():
    # The golden is the in-process drawing of the same specs by the same function.
    with FigureProcess() as figures:
        figures.start(SPECS)
        from_helper = figures.pngs(SPECS)
    assert from_helper == draw_pngs(SPECS)
    assert all(png.startswith(b"\x89PNG\r\n\x1a\n") for png in from_helper)


def test_a_dead_helper_means_drawing_here():
    with FigureProcess() as figures:
        figures._proc.kill()
        figures._proc.wait()
        figures.start(SPECS)
        assert figures.pngs(SPECS) == draw_pngs(SPECS)


def test_specs_other_than_those_sent_are_drawn_here():
    with FigureProcess() as figures:
        figures.start(SPECS[:1])
        assert figures.pngs(SPECS) == draw_pngs(SPECS)


def test_no_helper_when_not_worth_it():
    assert not helper_worthwhile(HELPER_MIN_INPUT_BYTES - 1)
    with FigureProcess(start_helper=False) as figures:
        figures.start(SPECS)
        assert figures._proc is None
        assert figures.pngs(SPECS) == draw_pngs(SPECS)


@pytest.mark.slow
def test_a_build_drawing_in_the_helper_equals_one_drawing_here(sample_sources, built, tmp_path, monkeypatch):
    started = []
    original = FigureProcess.__init__

    def spy(self, start_helper=True):
        original(self, start_helper)
        started.append(self._proc is not None)

    monkeypatch.setattr(pipelines.build, "helper_worthwhile", lambda input_bytes: True)
    monkeypatch.setattr(FigureProcess, "__init__", spy)
    out = tmp_path / "helper"
    run_build("gqa-ood", sample_sources, out, legacy_json=True)
    assert started == [True]
    figures = sorted(p.relative_to(built("gqa-ood")) for p in (built("gqa-ood") / "figures").iterdir())
    assert figures
    for rel in figures:
        assert (out / rel).read_bytes() == (built("gqa-ood") / rel).read_bytes(), rel
    assert (out / "README.md").read_bytes() == (built("gqa-ood") / "README.md").read_bytes()


@pytest.mark.parametrize("input_bytes", [HELPER_MIN_INPUT_BYTES, 10 * HELPER_MIN_INPUT_BYTES])
def test_large_inputs_are_worth_a_helper_unless_matplotlib_is_loaded(input_bytes, monkeypatch):
    import sys

    monkeypatch.delitem(sys.modules, "matplotlib.pyplot", raising=False)
    assert helper_worthwhile(input_bytes)
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", object())
    assert not helper_worthwhile(input_bytes)


def test_figures_known_early_are_sent_before_the_build_returns(sample_sources, tmp_path, monkeypatch):
    # GQA-OOD hands its figures over after the selection (RunStage.figures_known), so the helper draws
    # them while the records are decoded; the specs sent are the result's, and export sends nothing more.
    from builders.gqa_ood.builder import GQAOODBuilder

    events = []
    original_build, original_start = GQAOODBuilder.build, FigureProcess.start

    def build(self, *args, **kwargs):
        result = original_build(self, *args, **kwargs)
        events.append(("built", result.figures))
        return result

    def start(self, specs):
        events.append(("sent" if self._proc is not None and not self._proc.stdin.closed else "no-op", specs))
        original_start(self, specs)

    monkeypatch.setattr(pipelines.build, "helper_worthwhile", lambda input_bytes: True)
    monkeypatch.setattr(GQAOODBuilder, "build", build)
    monkeypatch.setattr(FigureProcess, "start", start)
    run_build("gqa-ood", sample_sources, tmp_path / "out", use_cache=False)
    assert [kind for kind, _ in events] == ["sent", "built", "no-op"]
    assert events[0][1] == events[1][1] and len(events[0][1]) == 6  # 3 figures per split


def test_the_plain_stage_runner_computes_and_ignores_figures():
    from builders.result import run_uncached

    assert run_uncached("s", {}, [], lambda: {"t": "computed"}) == {"t": "computed"}
    assert run_uncached.figures_known(SPECS) is None and run_uncached.text_cache is None


def test_the_helper_runs_at_the_builds_priority():
    """The build waits for the helper's figures, so the helper must never run at a lower priority
    than the build (a niced helper starves on a busy machine and stalls the build). Sampled while it
    starts and warms up (importing matplotlib, drawing a throw-away chart: about a second)."""
    import os
    import time

    own = os.getpriority(os.PRIO_PROCESS, 0)
    with FigureProcess() as figures:
        pid = figures._proc.pid
        samples = []
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline and figures._proc.poll() is None:
            samples.append(os.getpriority(os.PRIO_PROCESS, pid))
            time.sleep(0.02)
        figures.start(SPECS)
        assert figures.pngs(SPECS) == draw_pngs(SPECS)
    assert len(samples) > 10 and set(samples) == {own}
