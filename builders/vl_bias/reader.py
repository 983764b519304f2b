"""Reader for VL-Bias annotated images (Zhang, Wang, Sang, ACM MM 2022, §4.1): either the folder layout
`ROOT/{activity,occupation}/<target>/<gender>/<image>` or an annotation file (CSV with a header, or
JSONL) with the fields image (a path relative to the file's folder), target, target_type, gender.
Targets must be among the 52 activities / 13 occupations of their type, genders among the words of
the configured gender pairs; anything else is an error naming the file."""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path

from builders.sources.files import decode_image, decode_utf8, expect_file, inside, list_folder, load_json, read_bytes
from builders.vl_bias.words import TARGETS
from core.errors import SourceError

ANNOTATION_SUFFIXES = (".csv", ".jsonl")
FIELDS = ("image", "target", "target_type", "gender")


@dataclass(frozen=True)
class Sample:
    image_id: str  # the image's path relative to the source root (posix)
    path: Path
    target: str
    target_type: str
    gender: str


def _check(where: Path, target: str, target_type: str, gender: str, genders, record: str | None = None) -> None:
    if target_type not in TARGETS:
        raise SourceError(where, f"unknown target type '{target_type}' (expected activity or occupation)",
                          record=record, field="target_type" if record else None)
    if target not in TARGETS[target_type]:
        raise SourceError(where, f"target '{target}' is not one of the {len(TARGETS[target_type])} VL-Bias "
                          f"{target_type} words", record=record, field="target" if record else None)
    if gender not in genders:
        raise SourceError(where, f"unknown gender word '{gender}' (expected one of {', '.join(sorted(genders))}; "
                          "add a pair with --param gender_pairs=...)", record=record,
                          field="gender" if record else None)


def find_annotation_file(source: Path) -> Path | None:
    """SOURCE itself when it is a .csv/.jsonl file, else the one `annotations.{csv,jsonl}` in SOURCE."""
    if source.is_file():
        return source if source.suffix.lower() in ANNOTATION_SUFFIXES else None
    found = [source / f"annotations{s}" for s in ANNOTATION_SUFFIXES if (source / f"annotations{s}").is_file()]
    if len(found) > 1:
        raise SourceError(source, "both annotations.csv and annotations.jsonl are present; pass one as --source")
    return found[0] if found else None


def _visible(folder: Path) -> list[Path]:
    return [p for p in list_folder(folder) if not p.name.startswith(".")]


def scan_folders(root: Path, genders) -> list[Sample]:
    """Every file under ROOT/<type>/<target>/<gender>/ (hidden files left out), checked by name."""
    samples = []
    for type_dir in [p for p in _visible(root) if p.is_dir()]:
        for target_dir in _visible(type_dir):
            for gender_dir in _visible(target_dir):
                if not gender_dir.is_dir():
                    raise SourceError(gender_dir, "expected a gender folder (ROOT/<type>/<target>/<gender>/<image>)")
                _check(gender_dir, target_dir.name.lower(), type_dir.name.lower(), gender_dir.name.lower(), genders)
                for image in _visible(gender_dir):
                    expect_file(image, "an image file (ROOT/<type>/<target>/<gender>/<image>)")
                    samples.append(Sample(image.relative_to(root).as_posix(), image, target_dir.name.lower(),
                                          type_dir.name.lower(), gender_dir.name.lower()))
    return samples


def _records(path: Path) -> list[tuple[str, dict]]:
    """(record label, fields) of a CSV (header row) or JSONL annotation file."""
    text = decode_utf8(path, read_bytes(path))
    if path.suffix.lower() == ".csv":
        reader = csv.DictReader(io.StringIO(text))
        try:
            missing = [f for f in FIELDS if f not in (reader.fieldnames or [])]
            if missing:
                raise SourceError(path, f"the header lacks the column(s) {', '.join(missing)}", field=missing[0])
            return [(f"line {reader.line_num}", row) for row in reader]
        except csv.Error as exc:
            raise SourceError(path, f"not valid CSV ({exc})", record=f"line {reader.line_num + 1}") from None
    out = []
    for i, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        record = load_json(path, line, record=f"line {i}")
        if not isinstance(record, dict):
            raise SourceError(path, "expected a JSON object", record=f"line {i}")
        out.append((f"line {i}", record))
    return out


def read_annotations(path: Path, genders) -> list[Sample]:
    """The samples an annotation file lists; image paths are relative to the file's folder."""
    samples = []
    for record, fields in _records(path):
        for name in FIELDS:
            if not isinstance(fields.get(name), str) or not fields[name].strip():
                raise SourceError(path, "missing or empty", record=record, field=name)
        target, target_type, gender = (fields[k].strip().lower() for k in ("target", "target_type", "gender"))
        _check(path, target, target_type, gender, genders, record=record)
        image = inside(path.parent, fields["image"].strip(), path, record=record, field="image")
        if not image.is_file():
            raise SourceError(path, f"image file {image} not found", record=record, field="image")
        samples.append(Sample(image.relative_to(path.parent).as_posix(), image, target, target_type, gender))
    return samples


def locate(source: Path, genders) -> tuple[Path | None, list[Sample]]:
    """(annotation file or None, samples) of a source folder or file; (image, target) must be unique."""
    annotation = find_annotation_file(source)
    if annotation is not None:
        samples = read_annotations(annotation, genders)
    elif source.is_dir() and any((source / t).is_dir() for t in TARGETS):
        samples = scan_folders(source, genders)
    else:
        raise SourceError(source, "no VL-Bias images: expected activity/ or occupation/ folders "
                          "(<type>/<target>/<gender>/<image>) or an annotations.csv / .jsonl file")
    if not samples:
        raise SourceError(annotation or source, "no annotated images")
    seen: dict[tuple[str, str], str] = {}
    for s in samples:
        key = (s.image_id, s.target)
        if key in seen:
            raise SourceError(annotation or s.path, f"image annotated twice with target '{s.target}'",
                              record=s.image_id)
        seen[key] = s.gender
    return annotation, samples


def read_image(sample: Sample) -> bytes:
    """The image's bytes, fully decoded once to prove they are an image."""
    data = read_bytes(sample.path)
    decode_image(sample.path, data)
    return data
