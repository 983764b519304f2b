"""Embedded sample sources: small raw files of every benchmark in their native formats."""

from __future__ import annotations

from pathlib import Path

from pipelines.samples.disco import write_disco_samples
from pipelines.samples.gqa import write_gqa_samples
from pipelines.samples.socialiq import write_socialiq_samples
from pipelines.samples.vcr import write_vcr_samples
from pipelines.samples.visdial import write_visdial_samples
from pipelines.samples.vl_bias import write_vl_bias_samples
from pipelines.samples.vqa import write_vqa_samples

# name -> writer(root, scale) -> written paths, under ROOT/<source_dir>/ of the builders it serves
SAMPLE_WRITERS = {
    "disco": write_disco_samples,
    "gqa": write_gqa_samples,
    "socialiq": write_socialiq_samples,
    "vcr": write_vcr_samples,
    "visdial": write_visdial_samples,
    "vl_bias": write_vl_bias_samples,
    "vqa": write_vqa_samples,  # vqa_v2/ and vqa_cp/
}


def write_samples(root: Path, scale: int = 1) -> list[Path]:
    """Write every benchmark's sample sources under ROOT/<source_dir>/ (deterministic)."""
    written = []
    for name in sorted(SAMPLE_WRITERS):
        written += SAMPLE_WRITERS[name](root, scale)
    return written
