"""Progress bars: on a terminal only, with items per second; quiet in logs, pipes and CI.

tqdm's `disable=None` rule shows a bar only when stderr is a terminal; TQDM_DISABLE=1 silences
vlbench's bars everywhere. `quiet_library_bars` extends the rule to the libraries' own bars
(transformers' weight loading, huggingface_hub's transfers), which would otherwise print into logs.
"""

from __future__ import annotations

import os
import sys


def progress_shown() -> bool:
    """True when progress bars are drawn: stderr is a terminal and TQDM_DISABLE is not set."""
    return sys.stderr.isatty() and os.environ.get("TQDM_DISABLE", "").lower() not in ("1", "true")


def progress(iterable=None, *, desc: str, unit: str, total: int | None = None, leave: bool = False,
             bar_format: str | None = None):
    """A tqdm bar over `iterable` (or updated by hand), shown on a terminal only. Disabled, tqdm
    hands back the plain iterable's items at no cost per item."""
    from tqdm import tqdm

    return tqdm(iterable, desc=desc, unit=unit, total=total, leave=leave, disable=None, dynamic_ncols=True,
                bar_format=bar_format)


def quiet_library_bars() -> None:
    """When stderr is not a terminal, silence third-party progress bars (an explicit setting of the
    user's is kept). Call before transformers or huggingface_hub are imported."""
    if not sys.stderr.isatty():
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        os.environ.setdefault("TQDM_DISABLE", "1")
