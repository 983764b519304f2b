"""Embedded sample sources: small raw files of every benchmark in their native formats."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from builders.registry import benchmarks
from core.errors import ParamsError


def sample_writers() -> list:
    """The registry's sample writers, each once (vqa-v2 and vqa-cp share one): writer(root, scale)
    writes under ROOT/<source_dir>/ and returns the written paths."""
    refs = sorted({bench.samples: bench for bench in benchmarks()}.items())
    return [bench.load(ref) for ref, bench in refs]


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
        for writer in sample_writers():
            rels += [p.relative_to(staging) for p in writer(staging, scale)]
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
