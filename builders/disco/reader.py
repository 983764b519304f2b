"""Reader for DISCO (Hu et al., *Ambient Sound Helps: Audiovisual Crowd Counting in Extreme
Conditions*, 2020): `imgs/<id>.jpg`, `auds/<id>.wav` (1 s clips) and density maps
`density/<split>/<id>.mat` (MATLAB, key "map"; the people count is the map's sum), the layout of the
authors' code (datasets/AC). The density folder a map sits in gives its split."""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from builders.sources.files import decode_image, expect_file, list_folder, read_bytes
from core.errors import SourceError

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
        folder = root / "density" / split
        maps = [p for p in list_folder(folder) if p.suffix == ".mat"] if folder.exists() else []
        samples = []
        for density in maps:
            expect_file(density, "a MATLAB density map")
            image, audio = root / "imgs" / f"{density.stem}.jpg", root / "auds" / f"{density.stem}.wav"
            for path, what in ((image, "an image"), (audio, "an audio clip")):
                if not path.parent.is_dir():
                    list_folder(path.parent)  # names a file standing where the folder belongs
                if not path.exists():
                    raise SourceError(path, f"not found ({what} of density map {density.name})", record=density.stem)
                expect_file(path, what)
            samples.append(Sample(density.stem, image, audio, density))
        out[split] = samples
    return out


def read_count(path: Path) -> tuple[float, tuple[int, int]]:
    """People count (sum of the density map) and the map's shape."""
    from scipy.io import loadmat

    expect_file(path, "a MATLAB density map")
    try:
        content = loadmat(path)
    except OSError as exc:
        raise SourceError(path, f"not a readable MATLAB file ({exc.strerror or exc})") from None
    except Exception as exc:  # scipy raises several types for a file that is not a .mat
        raise SourceError(path, f"not a readable MATLAB file ({exc})") from None
    if "map" not in content:
        raise SourceError(path, "no density map (expected the key 'map')", field="map")
    raw = content["map"]
    if not (isinstance(raw, np.ndarray) and (np.issubdtype(raw.dtype, np.integer)
                                            or np.issubdtype(raw.dtype, np.floating))):
        kind = getattr(raw, "dtype", type(raw).__name__)
        raise SourceError(path, f"the density map must be a real numeric array, not {kind}", field="map")
    density = np.asarray(raw, dtype=np.float64)
    if density.ndim != 2 or not np.isfinite(density).all() or (density < 0).any():
        raise SourceError(path, "the density map must be a 2-D array of finite, non-negative values", field="map")
    with np.errstate(over="ignore"):
        count = float(density.sum())
    if not np.isfinite(count):
        raise SourceError(path, f"the density map sums to {count} (values too large)", field="map")
    return count, density.shape


def read_audio(path: Path) -> tuple[bytes, int, int]:
    """(bytes, sample rate, frames) of a readable, complete, non-empty audio clip. A RIFF/WAVE file
    whose size differs from its header's (cut short in a copy) is damaged, not a shorter clip."""
    import soundfile

    data = read_bytes(path)
    if data[:4] == b"RIFF" and data[8:12] == b"WAVE" and int.from_bytes(data[4:8], "little") + 8 != len(data):
        raise SourceError(path, f"damaged WAV file: its header says {int.from_bytes(data[4:8], 'little') + 8} bytes, "
                                f"the file has {len(data)}")
    try:
        info = soundfile.info(io.BytesIO(data))
    except Exception as exc:  # soundfile.LibsndfileError and RuntimeError for unreadable files
        reason = str(exc).splitlines()[0].rpartition(": ")[2] if str(exc).strip() else type(exc).__name__
        raise SourceError(path, f"not a readable audio file ({reason[:160]})") from None
    if info.frames == 0:
        raise SourceError(path, "the audio clip is empty")
    return data, info.samplerate, info.frames


def read_image(path: Path) -> bytes:
    """The image's bytes, fully decoded once so that a damaged file is caught here."""
    data = read_bytes(path)
    decode_image(path, data)
    return data
