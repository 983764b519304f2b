"""Synthetic VL-Bias sources in the folder layout `vl_bias/{activity,occupation}/<target>/<gender>/<n>.jpg`:
small drawn scenes, a figure whose size and colours depend on the gender word (adults taller than
children) holding a prop whose shape and colour depend on the target, on a random background."""

from __future__ import annotations

import io
import random
import zlib
from pathlib import Path

TARGETS = {"activity": ("cooking", "fishing", "reading", "running", "sewing", "shopping"),
           "occupation": ("chef", "doctor", "engineer", "nurse")}
GENDERS = ("man", "woman", "boy", "girl")
WIDTH, HEIGHT = 48, 40


def _scene(rng: random.Random, target: str, gender: str) -> bytes:
    from PIL import Image, ImageDraw

    img = Image.new("RGB", (WIDTH, HEIGHT), tuple(rng.randint(90, 230) for _ in range(3)))
    draw = ImageDraw.Draw(img)
    height = 30 if gender in ("man", "woman") else 20
    x, top = rng.randint(8, 20), HEIGHT - height - 2
    body = (40, 60, 160) if gender in ("man", "boy") else (170, 50, 90)
    draw.ellipse([x, top, x + 8, top + 8], fill=(230, 190, 150))
    if gender in ("woman", "girl"):
        draw.rectangle([x - 1, top, x + 9, top + 12], outline=(60, 30, 10))  # long hair
    draw.rectangle([x + 1, top + 8, x + 7, HEIGHT - 2], fill=body)
    h = zlib.crc32(target.encode())
    prop = ((h >> 16) & 255, (h >> 8) & 255, h & 255)
    px, py = x + 12 + rng.randint(0, 10), rng.randint(8, HEIGHT - 14)
    shape = draw.ellipse if h % 2 else draw.rectangle
    shape([px, py, px + 6 + h % 7, py + 6 + (h >> 3) % 5], fill=prop)
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=90)
    return buf.getvalue()


def write_vl_bias(folder: Path, per_gender: int, seed: int = 0) -> list[Path]:
    rng = random.Random(seed)
    written = []
    for target_type, targets in TARGETS.items():
        for target in targets:
            for gender in GENDERS:
                out = folder / target_type / target / gender
                out.mkdir(parents=True, exist_ok=True)
                for n in range(per_gender):
                    path = out / f"{target}_{gender}_{n:02d}.jpg"
                    path.write_bytes(_scene(rng, target, gender))
                    written.append(path)
    return written


def write_vl_bias_samples(root: Path, scale: int = 1) -> list[Path]:
    return write_vl_bias(root / "vl_bias", per_gender=2 * scale)
