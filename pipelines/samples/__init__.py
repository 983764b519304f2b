"""Embedded sample sources: small raw files of every benchmark in their native formats."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from builders.errors import ParamsError
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
    """Write every benchmark's sample sources under ROOT/<source_dir>/ (deterministic).

    The files are written into a staging folder first; an existing file under ROOT is never
    overwritten with other content (the same bytes, from an earlier run, are left as they are)."""
    root = Path(os.path.abspath(root))
    if root.exists() and not root.is_dir():
        raise ParamsError(f"--out {root}: a file with this name exists; sample sources are written into a folder")
    try:
        root.parent.mkdir(parents=True, exist_ok=True)
    except OSError:
        raise ParamsError(f"--out {root}: cannot create its parent folder (a file stands in the way?)") from None
    staging = Path(tempfile.mkdtemp(prefix=f".{root.name}.samples-", dir=root.parent))
    try:
        rels = []
        for name in sorted(SAMPLE_WRITERS):
            rels += [p.relative_to(staging) for p in SAMPLE_WRITERS[name](staging, scale)]
        for rel in rels:
            target = root / rel
            if target.is_dir() or (target.exists() and target.read_bytes() != (staging / rel).read_bytes()):
                raise ParamsError(f"--out {root}: {rel.as_posix()} exists with other content; sample-sources never "
                                  "overwrites files (choose a new folder)")
        for rel in rels:
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            os.replace(staging / rel, root / rel)
        return [root / rel for rel in rels]
    finally:
        shutil.rmtree(staging, ignore_errors=True)
