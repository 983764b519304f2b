"""Embedded sample sources: small raw files of every benchmark in their native formats."""

from __future__ import annotations

from pathlib import Path

from pipelines.samples.gqa import write_gqa_samples
from pipelines.samples.vcr import write_vcr_samples

# source folder name (as builders declare `source_dir`) -> writer(root, scale) -> written paths
SAMPLE_WRITERS = {
    "gqa": write_gqa_samples,
    "vcr": write_vcr_samples,
}


def write_samples(root: Path, scale: int = 1) -> list[Path]:
    """Write every benchmark's sample sources under ROOT/<source_dir>/ (deterministic)."""
    written = []
    for name in sorted(SAMPLE_WRITERS):
        written += SAMPLE_WRITERS[name](root, scale)
    return written
