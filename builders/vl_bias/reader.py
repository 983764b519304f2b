"""Reader for VL-Bias annotated images (Zhang, Wang, Sang, ACM MM 2022, §4.1): either the folder layout
`ROOT/<target type>/<target>/<bias word>/<image>` or an annotation file (CSV with a header, or JSONL)
with the fields image (a path relative to the file's folder), target, target_type and the bias word
(`gender`, as VL-Bias names it, or `bias`). With the VL-Bias target lists, targets must be among the 52
activities / 13 occupations of their type; with `target_lists=annotations` (another concept pair, §6)
the file's own targets and types are the lists. Bias words must be among the configured pairs; anything
else is an error naming the file."""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path

from builders.sources.files import decode_image, decode_utf8, expect_file, inside, list_folder, load_json, read_bytes
from builders.vl_bias.words import TARGETS
from core.errors import SourceError

ANNOTATION_SUFFIXES = (".csv", ".jsonl")
FIELDS = ("image", "target", "target_type")
BIAS_FIELDS = ("gender", "bias")  # the bias word's field: VL-Bias's own name, or the general one


@dataclass(frozen=True)
class Sample:
    image_id: str  # the image's path relative to the source root (posix)
    path: Path
    target: str
    target_type: str
    bias_word: str


def _check_word(where: Path, what: str, word: str, record: str | None, field: str) -> None:
    if not word.replace("-", "").isalpha():
        raise SourceError(where, f"{what} '{word[:60]}' is not a word (letters and hyphens)", record=record,
                          field=field if record else None)


def _check(where: Path, target: str, target_type: str, bias_word: str, words, vl_bias_lists: bool,
           record: str | None = None, bias_field: str = "gender") -> None:
    if vl_bias_lists and target_type not in TARGETS:
        raise SourceError(where, f"unknown target type '{target_type}' (expected activity or occupation; another "
                          "concept's targets need --param target_lists=annotations)", record=record,
                          field="target_type" if record else None)
    if vl_bias_lists and target not in TARGETS[target_type]:
        raise SourceError(where, f"target '{target}' is not one of the {len(TARGETS[target_type])} VL-Bias "
                          f"{target_type} words", record=record, field="target" if record else None)
    _check_word(where, "target type", target_type, record, "target_type")
    _check_word(where, "target", target, record, "target")
    if bias_word not in words:
        raise SourceError(where, f"unknown bias word '{bias_word}' (expected one of {', '.join(sorted(words))}; "
                          "add a pair with --param bias_pairs=...)", record=record,
                          field=bias_field if record else None)


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


def scan_folders(root: Path, words, vl_bias_lists: bool) -> list[Sample]:
    """Every file under ROOT/<type>/<target>/<bias word>/ (hidden files left out), checked by name."""
    samples = []
    for type_dir in [p for p in _visible(root) if p.is_dir()]:
        for target_dir in _visible(type_dir):
            for word_dir in _visible(target_dir):
                if not word_dir.is_dir():
                    raise SourceError(word_dir, "expected a bias-word folder "
                                                "(ROOT/<type>/<target>/<bias word>/<image>)")
                _check(word_dir, target_dir.name.lower(), type_dir.name.lower(), word_dir.name.lower(), words,
                       vl_bias_lists)
                for image in _visible(word_dir):
                    expect_file(image, "an image file (ROOT/<type>/<target>/<bias word>/<image>)")
                    samples.append(Sample(image.relative_to(root).as_posix(), image, target_dir.name.lower(),
                                          type_dir.name.lower(), word_dir.name.lower()))
    return samples


def _bias_field(path: Path, names) -> str:
    present = [f for f in BIAS_FIELDS if f in names]
    if len(present) != 1:
        raise SourceError(path, "expected one bias-word column, gender or bias" if present else
                          "the header lacks the bias-word column (gender or bias)", field=present[-1] if present
                          else "gender")
    return present[0]


def _records(path: Path) -> list[tuple[str, dict]]:
    """(record label, fields) of a CSV (header row) or JSONL annotation file."""
    text = decode_utf8(path, read_bytes(path))
    if path.suffix.lower() == ".csv":
        reader = csv.DictReader(io.StringIO(text))
        try:
            missing = [f for f in FIELDS if f not in (reader.fieldnames or [])]
            if missing:
                raise SourceError(path, f"the header lacks the column(s) {', '.join(missing)}", field=missing[0])
            _bias_field(path, reader.fieldnames or [])
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


def read_annotations(path: Path, words, vl_bias_lists: bool) -> list[Sample]:
    """The samples an annotation file lists; image paths are relative to the file's folder."""
    samples = []
    for record, fields in _records(path):
        bias_field = next((f for f in BIAS_FIELDS if f in fields), "gender")
        for name in (*FIELDS, bias_field):
            if not isinstance(fields.get(name), str) or not fields[name].strip():
                raise SourceError(path, "missing or empty", record=record, field=name)
        target, target_type, word = (fields[k].strip().lower() for k in ("target", "target_type", bias_field))
        _check(path, target, target_type, word, words, vl_bias_lists, record=record, bias_field=bias_field)
        image = inside(path.parent, fields["image"].strip(), path, record=record, field="image")
        if not image.is_file():
            raise SourceError(path, f"image file {image} not found", record=record, field="image")
        samples.append(Sample(image.relative_to(path.parent).as_posix(), image, target, target_type, word))
    return samples


def locate(source: Path, words, vl_bias_lists: bool = True) -> tuple[Path | None, list[Sample]]:
    """(annotation file or None, samples) of a source folder or file; (image, target) must be unique."""
    annotation = find_annotation_file(source)
    if annotation is not None:
        samples = read_annotations(annotation, words, vl_bias_lists)
    elif source.is_dir() and (any((source / t).is_dir() for t in TARGETS) or not vl_bias_lists):
        samples = scan_folders(source, words, vl_bias_lists)
    else:
        raise SourceError(source, "no VL-Bias images: expected activity/ or occupation/ folders "
                          "(<type>/<target>/<bias word>/<image>) or an annotations.csv / .jsonl file")
    if not samples:
        raise SourceError(annotation or source, "no annotated images")
    seen: dict[tuple[str, str], str] = {}
    for s in samples:
        key = (s.image_id, s.target)
        if key in seen:
            raise SourceError(annotation or s.path, f"image annotated twice with target '{s.target}'",
                              record=s.image_id)
        seen[key] = s.bias_word
    return annotation, samples


def read_image(sample: Sample) -> bytes:
    """The image's bytes, fully decoded once to prove they are an image."""
    data = read_bytes(sample.path)
    decode_image(sample.path, data)
    return data
