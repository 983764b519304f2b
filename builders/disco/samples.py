"""Synthetic DISCO sources in the authors' layout: small street-scene JPEGs with people drawn as dots,
Gaussian-blob density maps summing to the head count (`.mat`, key "map"), and 1 s WAV clips whose
loudness grows with the crowd (the dataset's premise)."""

from __future__ import annotations

import io
import random
from pathlib import Path

import numpy as np

WIDTH, HEIGHT, RATE = 64, 48, 8000


def _scene(rng: random.Random, people: int) -> tuple[bytes, np.ndarray, np.ndarray]:
    from PIL import Image, ImageDraw

    img = Image.new("RGB", (WIDTH, HEIGHT), tuple(rng.randint(60, 200) for _ in range(3)))
    draw = ImageDraw.Draw(img)
    density = np.zeros((HEIGHT, WIDTH))
    yy, xx = np.mgrid[0:HEIGHT, 0:WIDTH]
    for _ in range(people):
        x, y = rng.uniform(2, WIDTH - 3), rng.uniform(2, HEIGHT - 3)
        draw.ellipse([x - 1.5, y - 1.5, x + 1.5, y + 1.5], fill=(20, 20, 20))
        blob = np.exp(-((xx - x) ** 2 + (yy - y) ** 2) / (2 * 1.5 ** 2))
        density += blob / blob.sum()  # each head adds exactly one person to the map's sum
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=90)
    noise = np.random.default_rng(rng.randint(0, 2 ** 31)).normal(0, 1, RATE)
    audio = (noise * min(0.9, 0.02 + 0.01 * people)).astype(np.float32)
    return buf.getvalue(), density, audio


def write_disco(folder: Path, sizes: dict[str, int], seed: int = 0) -> list[Path]:
    import soundfile
    from scipy.io import savemat

    rng = random.Random(seed)
    for sub in ("imgs", "auds", *(f"density/{s}" for s in sizes)):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    written, k = [], 0
    for split, n in sizes.items():
        for _ in range(n):
            k += 1
            image_id = f"{k:04d}"
            jpeg, density, audio = _scene(rng, rng.randint(1, 40))
            (folder / "imgs" / f"{image_id}.jpg").write_bytes(jpeg)
            soundfile.write(folder / "auds" / f"{image_id}.wav", audio, RATE, subtype="PCM_16")
            buf = io.BytesIO()
            savemat(buf, {"map": density})
            # MATLAB 5 files open with 116 bytes of text that carry the creation time: fixed here so
            # that the samples are byte-identical between runs.
            header = b"MATLAB 5.0 MAT-file, written by vlbench sample-sources".ljust(116)
            (folder / "density" / split / f"{image_id}.mat").write_bytes(header + buf.getvalue()[116:])
            written += [folder / "imgs" / f"{image_id}.jpg", folder / "auds" / f"{image_id}.wav",
                        folder / "density" / split / f"{image_id}.mat"]
    return written


def write_disco_samples(root: Path, scale: int = 1) -> list[Path]:
    return write_disco(root / "disco", {"train": 12 * scale, "val": 4 * scale, "test": 8 * scale})
