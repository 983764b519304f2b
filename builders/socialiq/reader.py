"""Readers for Social-IQ 1.0 (Zadeh et al., CVPR 2019): per-video QA text files and the standard folds.

QA files are `<video_id>.txt` with lines `q<k>: question`, `a<k>: correct answer` (4 per question) and
`i<k>: incorrect answer` (3 per question), split on the first ':' (the format the CMU-MultimodalSDK
feature files were made from). The folds file is `{"standard_train_fold": [ids], "standard_valid_fold":
[ids]}` (CMU-MultimodalSDK socialiq_std_folds; there is no public test fold).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from builders.sources.files import decode_utf8, expect_file, list_folder, load_json, read_bytes, read_text
from core.errors import SourceError

CORRECT, INCORRECT = 4, 3
FOLD_KEYS = {"train": "standard_train_fold", "validation": "standard_valid_fold"}
_LINE = re.compile(r"^([qai])(\d*)\s*:(.*)$")
_VIDEO_ID = re.compile(r"[^/\\\0]{1,255}")  # a file name: <video_id>.txt must stay inside qa/


@dataclass(frozen=True)
class QAItem:
    question: str
    correct: tuple[str, ...]
    incorrect: tuple[str, ...]


def read_qa(path: Path) -> list[QAItem]:
    """The questions of one video, each with its 4 correct and 3 incorrect answers."""
    lines = decode_utf8(path, read_bytes(path)).splitlines()
    items: list[list] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        m = _LINE.match(line.strip())
        if m is None:
            raise SourceError(path, "expected 'q<k>: ...', 'a<k>: ...' or 'i<k>: ...'", record=f"line {number}")
        kind, text = m.group(1), m.group(3).strip()
        if not text:
            raise SourceError(path, "empty text", record=f"line {number}", field=kind)
        if kind == "q":
            items.append([text, [], [], number])
        elif not items:
            raise SourceError(path, "answer before any question", record=f"line {number}", field=kind)
        else:
            items[-1][1 if kind == "a" else 2].append(text)
    if not items:
        raise SourceError(path, "no questions")
    out = []
    for question, correct, incorrect, number in items:
        if len(correct) != CORRECT or len(incorrect) != INCORRECT:
            raise SourceError(path, f"{len(correct)} correct and {len(incorrect)} incorrect answers, expected "
                                    f"{CORRECT} and {INCORRECT}", record=f"question at line {number}")
        out.append(QAItem(question, tuple(correct), tuple(incorrect)))
    return out


def read_folds(path: Path) -> dict[str, list[str]]:
    """{"train": [video ids], "validation": [video ids]}, disjoint."""
    data = load_json(path, read_text(path))
    folds = {}
    for split, key in FOLD_KEYS.items():
        ids = data.get(key) if isinstance(data, dict) else None
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise SourceError(path, "expected a list of video id strings", field=key)
        for video in ids:
            if not _VIDEO_ID.fullmatch(video) or video in (".", ".."):
                raise SourceError(path, f"'{video[:80]}' is not a video id (a file name without folders)",
                                  record=video[:80], field=key)
        folds[split] = ids
    common = set(folds["train"]) & set(folds["validation"])
    if common:
        raise SourceError(path, "video in both folds", record=sorted(common)[0])
    return folds


def qa_files(folder: Path) -> dict[str, Path]:
    """{video id: QA file} of every `<video_id>.txt` under qa/ (sub-folders included); a video id
    found twice is an error naming both files, never a silent replacement."""
    if not folder.exists():
        return {}
    list_folder(folder)  # a file where the qa/ folder belongs is an error
    files: dict[str, Path] = {}
    for path in sorted(folder.rglob("*.txt")):
        expect_file(path, "a QA text file")
        if path.stem in files:
            raise SourceError(path, f"video '{path.stem}' also has {files[path.stem]}", record=path.stem)
        files[path.stem] = path
    return files
