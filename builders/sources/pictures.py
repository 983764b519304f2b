"""Small generated pictures: the sample sources' stand-ins for a release's photographs, written where
the release keeps its images (COCO, GQA, VCR, CoSIm, PMR, VisDial) so that a model reading images runs
on every benchmark's samples (`vlbench suite --images-root SOURCES`)."""

from __future__ import annotations

import random
from pathlib import Path


def write_picture(path: Path, seed: int | str) -> Path:
    """A 48 x 40 JPEG drawn from `seed`: a coloured background and an ellipse of another colour."""
    from PIL import Image, ImageDraw

    rng = random.Random(seed)
    img = Image.new("RGB", (48, 40), tuple(rng.randint(0, 255) for _ in range(3)))
    ImageDraw.Draw(img).ellipse([rng.randint(0, 20), rng.randint(0, 16), rng.randint(28, 47), rng.randint(24, 39)],
                                fill=tuple(rng.randint(0, 255) for _ in range(3)))
    path.parent.mkdir(parents=True, exist_ok=True)
    img.save(path, format="JPEG", quality=90)
    return path


def write_pictures(folder: Path, names) -> list[Path]:
    """One picture per relative file name under FOLDER (each name seeds its own picture), in sorted order."""
    return [write_picture(folder / name, name) for name in sorted(set(names))]
