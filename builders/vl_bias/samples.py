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


def write_vl_bias(folder: Path, per_gender: int | dict[str, int], seed: int = 0,
                  targets: dict[str, tuple[str, ...]] = TARGETS) -> list[Path]:
    """`per_gender` images of each target (of each target type, when a dict) and gender word."""
    rng = random.Random(seed)
    written = []
    for target_type, names in targets.items():
        count = per_gender[target_type] if isinstance(per_gender, dict) else per_gender
        for target in names:
            for gender in GENDERS:
                out = folder / target_type / target / gender
                out.mkdir(parents=True, exist_ok=True)
                for n in range(count):
                    path = out / f"{target}_{gender}_{n:02d}.jpg"
                    path.write_bytes(_scene(rng, target, gender))
                    written.append(path)
    return written


def write_vl_bias_samples(root: Path, scale: int = 1) -> list[Path]:
    return write_vl_bias(root / "vl_bias", per_gender=2 * scale)


CONCEPT_TARGETS = ("horse", "cow")
BACKGROUNDS = {"grass": (60, 150, 50), "ground": (140, 100, 60)}


def _animal(rng: random.Random, animal: str, background: str) -> bytes:
    from PIL import Image, ImageDraw

    img = Image.new("RGB", (WIDTH, HEIGHT), tuple(c + rng.randint(-20, 20) for c in BACKGROUNDS[background]))
    draw = ImageDraw.Draw(img)
    x, y = rng.randint(4, 16), rng.randint(12, 20)
    body = (120, 70, 30) if animal == "horse" else (240, 240, 235)
    draw.rectangle([x, y, x + 22, y + 10], fill=body)
    draw.rectangle([x + 20, y - 6, x + 26, y + 2], fill=body)  # head
    for leg in (x + 2, x + 18):
        draw.rectangle([leg, y + 10, leg + 2, y + 18], fill=(40, 30, 20))
    if animal == "cow":
        draw.ellipse([x + 6, y + 2, x + 12, y + 7], fill=(20, 20, 20))  # a patch
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=90)
    return buf.getvalue()


def write_animal_background(folder: Path, per_pair: int, seed: int = 0) -> Path:
    """Another concept pair (Zhang, Wang, Sang, ACM MM 2022, §6, Fig. 9): drawn horses and cows on grass or
    on bare ground, listed in `annotations.csv` (image, target, target_type, bias) -- the bias word is
    the background. Returns the annotation file."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    lines = ["image,target,target_type,bias"]
    for animal in CONCEPT_TARGETS:
        for background in BACKGROUNDS:
            for n in range(per_pair):
                name = f"images/{animal}_{background}_{n:02d}.jpg"
                (folder / name).parent.mkdir(exist_ok=True)
                (folder / name).write_bytes(_animal(rng, animal, background))
                lines.append(f"{name},{animal},animal,{background}")
    (folder / "annotations.csv").write_text("\n".join(lines) + "\n")
    return folder / "annotations.csv"
