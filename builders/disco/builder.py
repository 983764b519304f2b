"""DISCO audio-visual crowd counting (Hu et al. 2020; used by Gat et al., NeurIPS 2021, §4.4): one row per (image,
quality) with the image, its 1 s audio clip and the people count. Low-quality images are made as the
authors' code does for its extreme conditions (datasets/AC/AC.py with is_noise, fixed parameters):
brightness scaled by `low_brightness`, then Gaussian noise of standard deviation `low_noise_sigma`
grey levels, rounded and clipped; the noise is seeded per image, so builds are deterministic."""

from __future__ import annotations

import io
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import pyarrow as pa

from builders.base import Builder
from builders.disco import reader as disco
from builders.result import BuildResult, RunStage, run_uncached
from builders.sources.files import list_folder
from builders.splits import check_splits
from core.errors import ParamsError, SourceError
from core.markdown import table
from core.params import param

Quality = Literal["high", "low"]


@dataclass(frozen=True)
class DiscoParams:
    """Defaults are the degradation parameters of the authors' AC dataset class."""

    qualities: tuple[Quality, ...] = param(("high", "low"), "image qualities, one row per image each")
    low_brightness: float = param(0.3, "low quality: brightness factor in [0, 1]")
    low_noise_sigma: float = param(25.0, "low quality: Gaussian noise std in grey levels")
    seed: int = param(0, "seed of the noise")

    def __post_init__(self):
        if not self.qualities or len(set(self.qualities)) != len(self.qualities):
            raise ParamsError(f"qualities={self.qualities}: expected distinct values among high, low")
        if not 0.0 <= self.low_brightness <= 1.0 or self.low_noise_sigma < 0:
            raise ParamsError("low_brightness must be in [0, 1] and low_noise_sigma >= 0")


def features():
    from datasets import Audio, Features, Image, Value

    string = Value("string")
    return Features({"id": string, "image_id": string, "quality": string, "image": Image(),
                     "audio": Audio(decode=False), "count": Value("float64"),
                     "sample_rate": Value("int32"), "audio_frames": Value("int64")})


def degrade(data: bytes, brightness: float, sigma: float, seed: int) -> bytes:
    """Brightness enhancement by `brightness`, then round(N(0, sigma / 255) * 255) added and clipped."""
    from PIL import Image, ImageEnhance

    with Image.open(io.BytesIO(data)) as img:
        img = img.convert("RGB")
        dark = np.asarray(ImageEnhance.Brightness(img).enhance(brightness), dtype=np.float64)
    noise = np.round(np.random.default_rng(seed).normal(0.0, sigma / 255.0, dark.shape) * 255)
    out = Image.fromarray(np.uint8(np.clip(dark + noise, 0, 255)))
    buf = io.BytesIO()
    out.save(buf, format="JPEG", quality=95)
    return buf.getvalue()


def rows(samples: list[disco.Sample], params: DiscoParams) -> pa.Table:
    cols: dict[str, list] = {name: [] for name in features()}
    for s in sorted(samples, key=lambda s: s.image_id):
        count, _ = disco.read_count(s.density)
        sound, rate, frames = disco.read_audio(s.audio)
        image = disco.read_image(s.image)
        audio = {"bytes": sound, "path": s.audio.name}
        for quality in sorted(params.qualities):
            pixels = image if quality == "high" else degrade(
                image, params.low_brightness, params.low_noise_sigma,
                params.seed * 1_000_003 + zlib.crc32(s.image_id.encode()))
            for name, value in (("id", f"{s.image_id}/{quality}"), ("image_id", s.image_id), ("quality", quality),
                                ("image", {"bytes": pixels, "path": f"{s.image_id}.jpg"}), ("audio", audio),
                                ("count", count), ("sample_rate", rate), ("audio_frames", frames)):
                cols[name].append(value)
    return pa.table(cols, schema=features().arrow_schema)


class DiscoBuilder(Builder):
    name = "disco"
    params_class = DiscoParams
    configs = ("default",)
    default_config = "default"
    splits = disco.SPLITS
    source_dir = "disco"
    card_template = "disco.md"
    floats = ("`count` is the float64 sum of the density map in numpy's fixed pairwise order (the same on every "
              "CPU). The low-quality images are JPEG files (quality 95) written by Pillow's libjpeg-turbo, "
              "whose version `manifest.json` records: another Pillow may write other bytes.")
    description = "DISCO (Hu et al. 2020): audio-visual crowd counting, high- and low-quality images"
    sources_help = "imgs/<id>.jpg, auds/<id>.wav, density/{train,val,test}/<id>.mat"

    def locate_sources(self, source: Path, splits: list[str], params=None) -> dict:
        check_splits(self.name, splits, self.splits)
        list_folder(source) if source.exists() else None  # SOURCE itself must be a folder
        if (source / "density").exists():
            list_folder(source / "density")  # a file where the density/ folder belongs
        if not (source / "density").is_dir():
            raise SourceError(source / "density", "DISCO density folder not found")
        found = {split: samples for split, samples in disco.locate(source, list(splits or self.splits)).items()
                 if samples or split in splits}
        if not found:
            raise SourceError(source / "density", "no density maps (density/<split>/<id>.mat)")
        return {split: tuple(p for s in samples for p in (s.image, s.audio, s.density))
                for split, samples in found.items()}

    def table_features(self, config: str):
        return features()

    def check_invariants(self, tables, params: dict) -> list[str]:
        problems = []
        for split, t in sorted(tables["default"].items()):
            counts = t.column("count").to_numpy()
            if (counts < 0).any() or not np.isfinite(counts).all():
                problems.append(f"{split}: negative or non-finite counts")
            by_image: dict[str, set] = {}
            for image, quality in zip(t.column("image_id").to_pylist(), t.column("quality").to_pylist()):
                by_image.setdefault(image, set()).add(quality)
            if len({frozenset(q) for q in by_image.values()}) > 1:
                problems.append(f"{split}: images do not all come in the same qualities")
        seen: dict[str, str] = {}  # a sample in two splits leaks the test set into training
        for split, t in sorted(tables["default"].items()):
            for image in sorted(set(t.column("image_id").to_pylist())):
                if image in seen:
                    problems.append(f"sample {image} is in both the {seen[image]} and the {split} split")
                    break
                seen[image] = split
        return problems

    def build(self, sources: dict, params: DiscoParams, run_stage: RunStage = run_uncached) -> BuildResult:
        key = {"qualities": list(params.qualities), "low_brightness": params.low_brightness,
               "low_noise_sigma": params.low_noise_sigma, "seed": params.seed}
        tables = {}
        for split, files in sorted(sources.items()):
            samples = [disco.Sample(d.stem, i, a, d) for i, a, d in zip(files[0::3], files[1::3], files[2::3])]
            tables[split] = run_stage(f"rows-{split}", key, list(files),
                                      lambda samples=samples: {"rows": rows(samples, params)})["rows"]
        stats = statistics(tables)
        return BuildResult(tables={"default": tables}, features=features(), statistics=stats,
                           card_fields=card_fields(stats, params))


def statistics(tables: dict[str, pa.Table]) -> dict:
    out = {}
    for split, t in tables.items():
        per_image = dict(zip(t.column("image_id").to_pylist(), t.column("count").to_pylist()))
        counts = np.array(list(per_image.values()), dtype=np.float64)
        seconds = t.column("audio_frames").to_numpy() / t.column("sample_rate").to_numpy()
        describe = (lambda f: round(float(f(counts)), 2)) if counts.size else (lambda f: None)  # noqa: E731
        out[split] = {"images": len(per_image), "rows": t.num_rows, "people": describe(np.sum),
                      "count_mean": describe(np.mean), "count_min": describe(np.min), "count_max": describe(np.max),
                      "audio_seconds_mean": round(float(seconds.mean()), 3) if seconds.size else None}
    return {"splits": out}


def card_fields(stats: dict, params: DiscoParams) -> dict[str, str]:
    rows_ = [[s, v["images"], v["rows"], v["people"], v["count_mean"], v["count_min"], v["count_max"],
              v["audio_seconds_mean"]] for s, v in stats["splits"].items()]
    return {"statistics": table(["Split", "Images", "Rows", "People (sum of maps)", "Mean count", "Min", "Max",
                                 "Mean audio length (s)"], rows_),
            "qualities": ", ".join(params.qualities), "low_brightness": str(params.low_brightness),
            "low_noise_sigma": str(params.low_noise_sigma), "seed": str(params.seed)}
