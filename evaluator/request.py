"""What every scoring command is asked, declared once: `evaluate`, `compare`, `perceptual` and
`leaderboard` take a `ScoringRequest` (the benchmark and its built data, the split, the submission
rules, scoring options, the submission format, and the resamples of the 95% intervals with their seed)
beside what is their own (the files, a model, a report folder)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from evaluator.submission import PARTIAL_HINT

DEFAULT_RESAMPLES = 1000  # resamples of a 95% interval unless asked otherwise (light to import: the CLI's default)


@dataclass(frozen=True)
class ScoringRequest:
    bench: str
    data: str  # a built folder or a Hub dataset repo id
    split: str | None = None  # None: the benchmark's evaluation split
    allow_partial: bool = False  # score what is there when rows have no prediction
    partial_hint: str = PARTIAL_HINT  # what a refusal of missing rows says to do (the suite has no --allow-partial)
    allow_extra: bool = False  # ignore predictions for ids outside the split
    options: tuple[str, ...] = ()  # the task's scoring options, KEY=VALUE (`--option`)
    fmt: str = "auto"  # the submission format (evaluator.interop)
    harness_data: str | None = None  # the dataset an lmms-eval log without `doc` was made on
    reasoning_tags: tuple | None = None  # markers of a harness log's thinking (None: the families' own)
    resamples: int = DEFAULT_RESAMPLES  # cluster-bootstrap resamples of the 95% intervals (0: none)
    seed: int = 0  # of the resamples
    answers: Path | None = None  # the sealed answer file of a sealed build's public half (evaluator/sealed.py)
    train_file: Path | None = None  # the training source of a prior fitted outside the build (gqa-ood's GQA train)
