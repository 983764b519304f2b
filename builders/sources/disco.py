"""Reader for DISCO (Hu et al., *Ambient Sound Helps: Audiovisual Crowd Counting in Extreme
Conditions*, 2020): `imgs/<id>.jpg`, `auds/<id>.wav` (1 s clips) and density maps
`density/<split>/<id>.mat` (MATLAB, key "map"; the people count is the map's sum), the layout of the
authors' code (datasets/AC). The density folder a map sits in gives its split."""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from builders.errors import SourceError

SPLITS = ("train", "val", "test")


@dataclass(frozen=True)
class Sample:
    image_id: str
    image: Path
    audio: Path
    density: Path


def locate(root: Path, splits: list[str]) -> dict[str, list[Sample]]:
    """Every density map of the wanted splits with its image and audio file (a missing one is an error)."""
    out = {}
    for split in splits:
        maps = sorted((root / "density" / split).glob("*.mat"))
        samples = []
        for density in maps:
            image, audio = root / "imgs" / f"{density.stem}.jpg", root / "auds" / f"{density.stem}.wav"
            for path, what in ((image, "image"), (audio, "audio clip")):
                if not path.is_file():
                    raise SourceError(path, f"{what} of density map {density.name} not found", record=density.stem)
            samples.append(Sample(density.stem, image, audio, density))
        out[split] = samples
    return out


def read_count(path: Path) -> tuple[float, tuple[int, int]]:
    """People count (sum of the density map) and the map's shape."""
    from scipy.io import loadmat

    try:
        content = loadmat(path)
    except Exception as exc:  # scipy raises several types for a file that is not a .mat
        raise SourceError(path, f"not a readable MATLAB file ({exc})") from None
    if "map" not in content:
        raise SourceError(path, "no density map (expected the key 'map')", field="map")
    density = np.asarray(content["map"], dtype=np.float64)
    if density.ndim != 2 or not np.isfinite(density).all() or (density < 0).any():
        raise SourceError(path, "the density map must be a 2-D array of finite, non-negative values", field="map")
    return float(density.sum()), density.shape


def read_audio_info(path: Path) -> tuple[int, int]:
    """(sample rate, frames) of a readable, non-empty audio clip."""
    import soundfile

    try:
        info = soundfile.info(str(path))
    except Exception as exc:  # soundfile.LibsndfileError and RuntimeError for unreadable files
        raise SourceError(path, f"not a readable audio file ({exc})") from None
    if info.frames == 0:
        raise SourceError(path, "the audio clip is empty")
    return info.samplerate, info.frames


def check_image(path: Path) -> tuple[int, int]:
    from PIL import Image, UnidentifiedImageError

    data = path.read_bytes()
    try:
        with Image.open(io.BytesIO(data)) as img:
            img.verify()
            return img.size
    except (UnidentifiedImageError, OSError, SyntaxError) as exc:
        raise SourceError(path, f"not a readable image ({exc})") from None
