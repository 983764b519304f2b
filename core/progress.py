"""Progress bars: on a terminal only, with items per second; quiet in logs, pipes and CI.

tqdm's `disable=None` rule shows a bar only when stderr is a terminal; TQDM_DISABLE=1 silences
vlbench's bars everywhere. Inside `reported_to(listener)` (a shard running as a Ray task, evaluator/ray_shards.py)
every bar draws nothing and hands its state to the listener instead, as often as a terminal bar would redraw.
`quiet_library_bars` extends the rule to the libraries' own bars
(transformers' weight loading, huggingface_hub's transfers), which would otherwise print into logs.
"""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from functools import lru_cache

_listener = None  # reported_to's listener: (description, done, total or None) -> None


def progress_shown() -> bool:
    """True when progress bars are drawn: stderr is a terminal and TQDM_DISABLE is not set."""
    return sys.stderr.isatty() and os.environ.get("TQDM_DISABLE", "").lower() not in ("1", "true")


def progress(iterable=None, *, desc: str, unit: str, total: int | None = None, leave: bool = False,
             bar_format: str | None = None):
    """A tqdm bar over `iterable` (or updated by hand), shown on a terminal only. Disabled, tqdm
    hands back the plain iterable's items at no cost per item."""
    from tqdm import tqdm

    if _listener is not None:
        return _reported_bar()(iterable, desc=desc, unit=unit, total=total, listener=_listener)
    return tqdm(iterable, desc=desc, unit=unit, total=total, leave=leave, disable=None, dynamic_ncols=True,
                bar_format=bar_format)


@contextmanager
def reported_to(listener):
    """Within it, progress bars report to `listener(description, done, total)` (at most once a second, and when a
    bar closes) instead of drawing."""
    global _listener
    previous, _listener = _listener, listener
    try:
        yield
    finally:
        _listener = previous


@lru_cache(maxsize=1)
def _reported_bar():
    from tqdm import tqdm

    class ReportedBar(tqdm):
        """A bar that draws into nothing and reports each redraw (tqdm redraws at most every `mininterval`)."""

        def __init__(self, *args, listener, **kwargs):
            self._report = listener
            super().__init__(*args, file=open(os.devnull, "w"), mininterval=1.0, disable=False, **kwargs)

        def display(self, msg=None, pos=None):
            self._report(self.desc, self.n, self.total)
            return True

        def close(self):
            file = self.fp
            try:
                super().close()
            finally:
                file.close()

    return ReportedBar


def quiet_library_bars() -> None:
    """When stderr is not a terminal, silence third-party progress bars (an explicit setting of the
    user's is kept). Call before transformers or huggingface_hub are imported."""
    if not sys.stderr.isatty():
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        os.environ.setdefault("TQDM_DISABLE", "1")
