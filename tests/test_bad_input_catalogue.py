"""The bad-input catalogue: every case is a user mistake or a damaged input, never a bug.

Each case asserts what vlbench promises for bad input: exit code 2, exactly one `error:` line on
stderr naming the file (and the record and field where there is one), no traceback, no OUT folder
or staging folder left behind, and the source folder byte-for-byte untouched. Cases cover every
registered benchmark's raw files (generic damage to each JSON file and to one file of each media kind,
found through the builder's `locate_sources`) and field-level damage per format, every registered
task's submission format, builder parameters, and paths and environments.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest
from helpers import assert_one_error_line, offline_flags

from core.errors import VlbenchError

# Every table of this file that concerns all benchmarks is read off the registry and the bases: the
# source folders, the offline build parameters, the raw files, the baselines, the submission fields.


def tree_digest(root: Path) -> dict[str, str]:
    """Every path under ROOT with the sha256 of its content (folders map to 'dir')."""
    out = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        out[rel] = "dir" if path.is_dir() else hashlib.sha256(path.read_bytes()).hexdigest()
    return out


# ---------------------------------------------------------------------------------------------
# Damage applied to a raw file

def _bytes(path: Path) -> bytes:
    return path.read_bytes()


def empty(path: Path) -> None:
    path.write_bytes(b"")


def truncated(path: Path) -> None:
    path.write_bytes(_bytes(path)[: len(_bytes(path)) // 2])


def non_utf8(path: Path) -> None:
    """Latin-1 bytes inside the first string value after the start of the file."""
    data = _bytes(path)
    at = data.index(b'"', min(20, len(data) - 1)) + 1 if b'"' in data[20:] else len(data) // 2
    path.write_bytes(data[:at] + b"caf\xe9 \xff" + data[at:])


def folder_in_place(path: Path) -> None:
    path.unlink()
    path.mkdir()
    (path / "stray.txt").write_text("a folder where a file belongs")


def deeply_nested(path: Path) -> None:
    path.write_bytes(b"[" * 100_000 + b"]" * 100_000)


def json_null(path: Path) -> None:
    path.write_bytes(b"null")


def json_empty_object(path: Path) -> None:
    path.write_bytes(b"{}")


def binary(path: Path) -> None:
    path.write_bytes(bytes(range(256)) * 4)


JSON_DAMAGE = [empty, truncated, non_utf8, folder_in_place, deeply_nested, json_null, json_empty_object, binary]
MEDIA_DAMAGE = [empty, truncated, folder_in_place, binary]

JSON_SUFFIXES = (".json", ".jsonl")
MEDIA_SUFFIXES = (".jpg", ".jpeg", ".png", ".wav", ".mat")


def raw_files() -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(benchmark, file relative to its source folder) of the registered benchmarks' sample files: every
    JSON file, and the first file of each media kind. A file that several benchmarks read (one raw
    format) is damaged once, under the first benchmark registered."""
    from conftest import sample_sources_folder

    from builders.registry import benchmarks, get_builder
    from pipelines.build import source_folder

    seen, json_files, media_files = set(), [], []
    for entry in benchmarks():
        builder = get_builder(entry.name)
        params = builder.params_class()
        folder = source_folder(builder, sample_sources_folder(), params)
        located = builder.locate_sources(folder, [], params)
        kinds = set()
        for path in sorted({p for v in located.values() for p in (v if isinstance(v, tuple) else (v,))}):
            rel = path.relative_to(folder).as_posix()
            if (builder.source_dir, rel) in seen:
                continue
            seen.add((builder.source_dir, rel))
            if path.suffix in JSON_SUFFIXES:
                json_files.append((entry.name, rel))
            elif path.suffix.lower() in MEDIA_SUFFIXES and path.suffix.lower() not in kinds:
                kinds.add(path.suffix.lower())
                media_files.append((entry.name, rel))
    return json_files, media_files


JSON_FILES, MEDIA_FILES = raw_files()


@dataclass
class SourceCase:
    id: str
    bench: str
    mutate: Callable[[Path], None]  # called with the benchmark's copied source folder
    needles: tuple[str, ...]
    args: tuple = ()


def _on(rel: str, damage) -> Callable[[Path], None]:
    return lambda root: damage(root / rel)


# What the line must say beyond the file's name, where the damage has one clear name.
DAMAGE_WORDS = {non_utf8: ("not UTF-8",), folder_in_place: ("is a folder",)}

GENERIC = [SourceCase(f"{b}:{rel}:{d.__name__}", b, _on(rel, d), (Path(rel).name, *DAMAGE_WORDS.get(d, ())))
           for files, damages in ((JSON_FILES, JSON_DAMAGE), (MEDIA_FILES, MEDIA_DAMAGE))
           for b, rel in files for d in damages]


# ---------------------------------------------------------------------------------------------
# Field-level damage per format

def _edit_json(rel: str, edit) -> Callable[[Path], None]:
    def mutate(root: Path) -> None:
        path = root / rel
        data = json.loads(path.read_text())
        data = edit(data) or data
        path.write_text(json.dumps(data))
    return mutate


def _replace_text(rel: str, old: str, new: str, count: int = 1) -> Callable[[Path], None]:
    def mutate(root: Path) -> None:
        path = root / rel
        text = path.read_text()
        assert old in text, (rel, old)
        path.write_text(text.replace(old, new, count))
    return mutate


def _edit_jsonl(rel: str, line: int, edit) -> Callable[[Path], None]:
    def mutate(root: Path) -> None:
        path = root / rel
        lines = path.read_text().splitlines()
        record = json.loads(lines[line])
        edit(record)
        lines[line] = json.dumps(record)
        path.write_text("\n".join(lines) + "\n")
    return mutate


def _pmr_first(edit) -> Callable[[Path], None]:
    """Edit the first line of PMR's val-ori.jsonl."""
    def mutate(root: Path) -> None:
        path = root / "val-ori.jsonl"
        lines = path.read_text().splitlines()
        record = json.loads(lines[0])
        edit(record)
        path.write_text("\n".join([json.dumps(record)] + lines[1:]) + "\n")
    return mutate


def _cosim_first(edit) -> Callable[[Path], None]:
    """Edit the first example of CoSIm's val.json."""
    def on_list(data):
        edit(data[0])
    return _edit_json("val.json", on_list)


def _set(key, value):
    def edit(record):
        record[key] = value
    return edit


def _first_question(key: str, value):
    def edit(data):
        items = data["questions"] if isinstance(data, dict) else data
        items[0][key] = value
    return edit


def _first_annotation(key: str, value):
    def edit(data):
        items = data["annotations"] if isinstance(data, dict) else data
        items[0][key] = value
    return edit


def _raw_int(rel: str, key: str, literal: str) -> Callable[[Path], None]:
    """Replace the first `"key":<int>` by a literal JSON number (too large for any integer type)."""
    def mutate(root: Path) -> None:

        path = root / rel
        text = path.read_text()
        new, n = re.subn(rf'"{key}":\s*-?\d+', f'"{key}":{literal}', text, count=1)
        assert n == 1, (rel, key)
        path.write_text(new)
    return mutate


def _gqa_first(edit):
    def mutate(root: Path) -> None:
        path = root / "testdev_balanced_questions.json"
        data = json.loads(path.read_text())
        first = next(iter(data))
        edit(data[first])
        path.write_text(json.dumps(data))
    return mutate


def _visdial_round(key, value):
    def edit(data):
        data["data"]["dialogs"][0]["dialog"][0][key] = value
    return edit


def _socialiq_qa(edit):
    def mutate(root: Path) -> None:
        path = sorted((root / "qa").glob("*.txt"))[0]
        edit(path)
    return mutate


def _vl_bias_annotations(rows_of, suffix=".csv", encoding="utf-8"):
    """Turn the folder layout into an annotation file (image paths relative to it), edited."""
    def mutate(root: Path) -> None:
        rows = []
        for image in sorted(p for p in root.rglob("*") if p.is_file()):
            kind, target, gender, _ = image.relative_to(root).parts
            rows.append({"image": image.relative_to(root).as_posix(), "target": target, "target_type": kind,
                         "gender": gender})
        rows = rows_of(rows)
        if suffix == ".csv":
            import csv
            import io

            buf = io.StringIO()
            writer = csv.DictWriter(buf, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
            (root / "annotations.csv").write_bytes(buf.getvalue().encode(encoding))
        else:
            (root / "annotations.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return mutate


def _first_row(key, value):
    def edit(rows):
        rows[0][key] = value
        return rows
    return edit


def _disco_map(values):
    def mutate(root: Path) -> None:
        import numpy as np
        from scipy.io import savemat

        savemat(root / "density" / "train" / "0001.mat", {"map": np.asarray(values, dtype=np.float64)})
    return mutate


def _socialiq_duplicate(root: Path) -> None:
    first = sorted((root / "qa").glob("*.txt"))[0]
    (root / "qa" / "sub").mkdir()
    shutil.copy(first, root / "qa" / "sub" / first.name)


def _socialiq_folds(edit):
    return _edit_json("socialiq_std_folds.json", edit)


def _stray_file_for_folder(rel: str) -> Callable[[Path], None]:
    def mutate(root: Path) -> None:
        path = root / rel
        shutil.rmtree(path)
        path.write_text("a file where a folder belongs")
    return mutate


def _symlink_outside(rel: str) -> Callable[[Path], None]:
    """A record path that climbs out of the source folder (`..`) to a real file."""
    def mutate(root: Path) -> None:
        (root.parent / "outside.jpg").write_bytes((root / rel).read_bytes())
    return mutate


VQA_Q = "v2_OpenEnded_mscoco_val2014_questions.json"
VQA_A = "v2_mscoco_val2014_annotations.json"
CP_Q, CP_A = "vqacp_v2_test_questions.json", "vqacp_v2_test_annotations.json"
VD = "visdial_1.0_val.json"
VD_DENSE = "visdial_1.0_val_dense_annotations.json"

FIELD_CASES = [
    # GQA
    SourceCase("gqa:answer-number", "gqa-ood", _gqa_first(_set("answer", 1e999)), ("testdev", "record", "answer")),
    SourceCase("gqa:groups-list", "gqa-ood", _gqa_first(_set("groups", [])), ("testdev", "record", "groups")),
    SourceCase("gqa:types-missing", "gqa-ood", _gqa_first(lambda r: r.pop("types")), ("testdev", "record", "types")),
    SourceCase("gqa:image-null", "gqa-ood", _gqa_first(_set("imageId", None)), ("testdev", "record", "imageId")),
    SourceCase("gqa:top-level-list", "gqa-ood",
               _edit_json("testdev_balanced_questions.json", lambda d: list(d.values())),
               ("testdev",)),
    # VQA v2
    SourceCase("vqa-v2:qid-2**63", "vqa-v2", _raw_int(VQA_Q, "question_id", str(2**63)), (VQA_Q, "question_id")),
    SourceCase("vqa-v2:qid-5000-digits", "vqa-v2", _raw_int(VQA_Q, "question_id", "9" * 5000), (VQA_Q, "question_id")),
    SourceCase("vqa-v2:qid-1e999", "vqa-v2", _raw_int(VQA_Q, "question_id", "1e999"), (VQA_Q, "question_id")),
    SourceCase("vqa-v2:image-2**64", "vqa-v2", _raw_int(VQA_A, "image_id", str(2**64)), (VQA_A, "image_id")),
    SourceCase("vqa-v2:answer-id-2**63", "vqa-v2", _raw_int(VQA_A, "answer_id", str(2**63)), (VQA_A, "answer_id")),
    SourceCase("vqa-v2:question-not-string", "vqa-v2", _edit_json(VQA_Q, _first_question("question", 7)),
               (VQA_Q, "question")),
    SourceCase("vqa-v2:nine-answers", "vqa-v2",
               _edit_json(VQA_A, lambda d: [d["annotations"][0]["answers"].pop()] and None),
               (VQA_A, "answers")),
    SourceCase("vqa-v2:empty-split", "vqa-v2", lambda root: [
        _edit_json(VQA_Q, lambda d: d.update(questions=[]))(root),
        _edit_json(VQA_A, lambda d: d.update(annotations=[]))(root)], (VQA_Q, "no questions")),
    SourceCase("vqa-v2:subtype-mismatch", "vqa-v2", _edit_json(VQA_A, lambda d: d.update(data_subtype="train2014")),
               (VQA_A, "data_subtype")),
    SourceCase("vqa-v2:question-in-train-and-val", "vqa-v2", lambda root: _copy_first_question(root), ("question",)),
    SourceCase("vqa-v2:annotations-object", "vqa-v2", _edit_json(VQA_A, lambda d: d.update(annotations={})),
               (VQA_A, "annotations")),
    # VQA-CP
    SourceCase("vqa-cp:coco-split-foo", "vqa-cp", lambda root: [
        _edit_json(CP_Q, _first_question("coco_split", "foo"))(root),
        _edit_json(CP_A, _first_annotation("coco_split", "foo"))(root)], (CP_Q, "coco_split", "foo")),
    SourceCase("vqa-cp:coco-split-differs", "vqa-cp", _edit_json(CP_A, _first_annotation("coco_split", "val2014x")),
               (CP_A, "coco_split")),
    SourceCase("vqa-cp:qid-2**64", "vqa-cp", _raw_int(CP_Q, "question_id", str(2**64)), (CP_Q, "question_id")),
    SourceCase("vqa-cp:qid-negative-huge", "vqa-cp", _raw_int(CP_Q, "question_id", "-" + "9" * 40),
               (CP_Q, "question_id")),
    SourceCase("vqa-cp:question-in-train-and-test", "vqa-cp", lambda root: _cp_in_both(root), ("question",)),
    SourceCase("vqa-cp:top-level-object", "vqa-cp", _edit_json(CP_Q, lambda d: {"questions": d}), (CP_Q,)),
    # VisDial
    SourceCase("visdial:image-2**63", "visdial", _raw_int(VD, "image_id", str(2**63)), (VD, "image_id")),
    SourceCase("visdial:gt-index-1e999", "visdial", _raw_int(VD, "gt_index", "1e999"), (VD, "gt_index")),
    SourceCase("visdial:option-out-of-pool", "visdial", _edit_json(VD, _visdial_round("answer_options", [10**6] * 100)),
               (VD, "answer_options")),
    SourceCase("visdial:relevance-1e999", "visdial", _replace_text(VD_DENSE, "0.4", "1e999"),
               (VD_DENSE, "gt_relevance")),
    SourceCase("visdial:round-2**63", "visdial", _raw_int(VD_DENSE, "round_id", str(2**63)), (VD_DENSE, "round_id")),
    SourceCase("visdial:split-file-is-folder", "visdial", _on(VD, folder_in_place), (VD,)),
    SourceCase("visdial:dialogs-not-list", "visdial", _edit_json(VD, lambda d: d["data"].update(dialogs={})),
               (VD, "dialogs")),
    # VCR
    SourceCase("vcr:img_fn-parent", "vcr-visor", _edit_jsonl("val.jsonl", 0, _set("img_fn", "../../etc/passwd")),
               ("val.jsonl", "line 1", "img_fn")),
    SourceCase("vcr:img_fn-absolute", "vcr-visor", _edit_jsonl("val.jsonl", 2, _set("img_fn", "/etc/passwd")),
               ("val.jsonl", "line 3", "img_fn")),
    SourceCase("vcr:img_fn-empty", "vcr-visor", _edit_jsonl("val.jsonl", 1, _set("img_fn", "")),
               ("val.jsonl", "line 2", "img_fn")),
    SourceCase("vcr:answer-label-2**63", "vcr-visor", _edit_jsonl("val.jsonl", 0, _set("answer_label", 2**63)),
               ("val.jsonl", "line 1", "answer_label")),
    SourceCase("vcr:match-index-1e999", "vcr-visor", _raw_int("val.jsonl", "match_index", "1e999"),
               ("val.jsonl", "line 1", "match_index")),
    SourceCase("vcr:object-index-huge", "vcr-visor",
               _edit_jsonl("val.jsonl", 0, lambda r: r["question"].insert(0, [2**70])), ("val.jsonl", "line 1")),
    SourceCase("vcr:record-is-list", "vcr-visor", lambda root: (root / "val.jsonl").write_text("[1, 2]\n"),
               ("val.jsonl", "line 1")),
    SourceCase("vcr:deep-record", "vcr-visor",
               lambda root: (root / "val.jsonl").write_text("[" * 50_000 + "]" * 50_000),
               ("val.jsonl", "line 1")),
    # Social-IQ
    SourceCase("socialiq:same-video-twice", "socialiq", _socialiq_duplicate, ("qa/sub/", "also")),
    SourceCase("socialiq:qa-non-utf8", "socialiq", _socialiq_qa(non_utf8), (".txt", "UTF-8")),
    SourceCase("socialiq:qa-empty", "socialiq", _socialiq_qa(empty), (".txt",)),
    SourceCase("socialiq:qa-folder", "socialiq", _socialiq_qa(folder_in_place), (".txt",)),
    SourceCase("socialiq:qa-binary", "socialiq", _socialiq_qa(binary), (".txt",)),
    SourceCase("socialiq:three-correct", "socialiq",
               _socialiq_qa(lambda p: p.write_text(p.read_text().replace("a1:", "i1:", 1))), (".txt", "question")),
    SourceCase("socialiq:fold-video-traversal", "socialiq",
               _socialiq_folds(lambda d: d["standard_train_fold"].append("../../etc/passwd")),
               ("socialiq_std_folds.json", "standard_train_fold")),
    SourceCase("socialiq:fold-video-absolute", "socialiq",
               _socialiq_folds(lambda d: d["standard_valid_fold"].append("/tmp/x")),
               ("socialiq_std_folds.json", "standard_valid_fold")),
    SourceCase("socialiq:fold-not-list", "socialiq", _socialiq_folds(lambda d: d.update(standard_train_fold="abc")),
               ("socialiq_std_folds.json", "standard_train_fold")),
    SourceCase("socialiq:fold-ints", "socialiq", _socialiq_folds(lambda d: d.update(standard_valid_fold=[2**80])),
               ("socialiq_std_folds.json", "standard_valid_fold")),
    SourceCase("socialiq:qa-is-file", "socialiq", _stray_file_for_folder("qa"), ("qa",)),
    # CoSIm
    SourceCase("cosim:three-choices", "cosim-q", _cosim_first(lambda r: r["answer_choices"].pop()),
               ("val.json", "#0", "answer_choices", "expected 4")),
    SourceCase("cosim:label-4", "cosim-c", _cosim_first(_set("answer_label", 4)), ("val.json", "#0", "answer_label")),
    SourceCase("cosim:label-text", "cosim-q", _cosim_first(_set("answer_label", "1")),
               ("val.json", "#0", "answer_label")),
    SourceCase("cosim:question-missing", "cosim-q", _cosim_first(lambda r: r.pop("question")),
               ("val.json", "#0", "question")),
    SourceCase("cosim:change-empty", "cosim-c", _cosim_first(_set("change", "  ")), ("val.json", "#0", "change")),
    SourceCase("cosim:folder-parent", "cosim-q", _cosim_first(_set("folder", "../..")),
               ("val.json", "#0", "folder", "leaves its folder")),
    SourceCase("cosim:img-absolute", "cosim-q", _cosim_first(_set("img_fn", "/etc/hostname")),
               ("val.json", "#0", "img_fn", "absolute path")),
    SourceCase("cosim:example-twice", "cosim-q", _edit_json("val.json", lambda d: d + [d[0]]),
               ("val.json", "repeated")),
    SourceCase("cosim:not-a-list", "cosim-c", _edit_json("val.json", lambda d: {"examples": d}), ("val.json",)),
    SourceCase("cosim:empty-list", "cosim-q", lambda root: (root / "val.json").write_text("[]"),
               ("val.json", "no examples")),
    # PMR
    SourceCase("pmr:three-choices", "pmr-p", _pmr_first(lambda r: r["answer_choices"].pop()),
               ("val-ori.jsonl", "line 1", "answer_choices", "expected 4")),
    SourceCase("pmr:label-4", "pmr-p", _pmr_first(_set("answer_label", 4)),
               ("val-ori.jsonl", "line 1", "answer_label")),
    SourceCase("pmr:object-index", "pmr-p", _pmr_first(lambda r: r["premise"].append([99])),
               ("val-ori.jsonl", "line 1", "premise", "object index")),
    SourceCase("pmr:img-parent", "pmr-p", _pmr_first(_set("img_fn", "../../x.jpg")),
               ("val-ori.jsonl", "line 1", "img_fn")),
    SourceCase("pmr:premise-missing", "pmr-p", _pmr_first(lambda r: r.pop("premise")),
               ("val-ori.jsonl", "line 1", "premise")),
    SourceCase("pmr:total-id-text", "pmr-p", _pmr_first(_set("total_id", "98")),
               ("val-ori.jsonl", "line 1", "total_id")),
    SourceCase("pmr:total-id-twice", "pmr-p", lambda root: (root / "val-ori.jsonl").write_text(
        (root / "val-ori.jsonl").read_text().splitlines()[0] + "\n" + (root / "val-ori.jsonl").read_text()),
               ("val-ori.jsonl", "line 2", "total_id", "also on line 1")),
    # DISCO
    SourceCase("disco:density-1e308", "disco", _disco_map([[1e308, 1e308], [1e308, 1e308]]), ("0001.mat", "map")),
    SourceCase("disco:density-nan", "disco", _disco_map([[float("nan"), 1.0]]), ("0001.mat", "map")),
    SourceCase("disco:density-negative", "disco", _disco_map([[-1.0, 1.0]]), ("0001.mat", "map")),
    SourceCase("disco:density-3d", "disco", _disco_map([[[1.0]]]), ("0001.mat", "map")),
    SourceCase("disco:no-map-key", "disco", lambda root: __import__("scipy.io").io.savemat(
        root / "density" / "train" / "0001.mat", {"other": [[1.0]]}), ("0001.mat", "map")),
    SourceCase("disco:image-missing", "disco", lambda root: (root / "imgs" / "0002.jpg").unlink(), ("0002.jpg",)),
    SourceCase("disco:audio-missing", "disco", lambda root: (root / "auds" / "0003.wav").unlink(), ("0003.wav",)),
    SourceCase("disco:density-is-file", "disco", _stray_file_for_folder("density"), ("density",)),
    SourceCase("disco:imgs-is-file", "disco", _stray_file_for_folder("imgs"), ("imgs",)),
    SourceCase("disco:jpeg-cut-short", "disco", lambda root: _cut_jpeg(root / "imgs" / "0005.jpg"), ("0005.jpg",)),
    # VL-Bias
    SourceCase("vl-bias:annotation-parent", "vl-bias", _vl_bias_annotations(_first_row("image", "../outside.jpg")),
               ("annotations.csv", "line 2", "image")),
    SourceCase("vl-bias:annotation-absolute", "vl-bias", _vl_bias_annotations(_first_row("image", "/etc/hostname")),
               ("annotations.csv", "line 2", "image")),
    SourceCase("vl-bias:annotation-jsonl-parent", "vl-bias",
               _vl_bias_annotations(_first_row("image", "../../x.jpg"), suffix=".jsonl"),
               ("annotations.jsonl", "line 1", "image")),
    SourceCase("vl-bias:csv-latin-1", "vl-bias",
               _vl_bias_annotations(_first_row("gender", "homme é"), encoding="latin-1"),
               ("annotations.csv", "UTF-8")),
    SourceCase("vl-bias:csv-field-over-128kb", "vl-bias", _vl_bias_annotations(_first_row("target", "x" * 200_000)),
               ("annotations.csv", "line 2")),
    SourceCase("vl-bias:csv-missing-column", "vl-bias",
               _vl_bias_annotations(lambda rows: [{k: v for k, v in r.items() if k != "gender"} for r in rows]),
               ("annotations.csv", "gender")),
    SourceCase("vl-bias:unknown-target", "vl-bias", _vl_bias_annotations(_first_row("target", "juggling")),
               ("annotations.csv", "line 2", "target")),
    SourceCase("vl-bias:jsonl-deep", "vl-bias", lambda root: (root / "annotations.jsonl").write_text(
        "[" * 100_000 + "]" * 100_000 + "\n"), ("annotations.jsonl", "line 1")),
    SourceCase("vl-bias:jsonl-non-utf8", "vl-bias", lambda root: (root / "annotations.jsonl").write_bytes(
        b'{"image": "caf\xe9.jpg"}\n'), ("annotations.jsonl",)),
    SourceCase("vl-bias:unknown-gender-folder", "vl-bias",
               lambda root: (root / "activity" / "cooking" / "man").rename(root / "activity" / "cooking" / "robot"),
               ("robot", "bias word")),
    SourceCase("vl-bias:stray-file-for-target", "vl-bias", _stray_file_for_folder("activity/fishing"), ("fishing",)),
]


def _copy_first_question(root: Path) -> None:
    """A val2014 question id also in train2014 (VQA question ids are unique across the release)."""
    train_q = root / "v2_OpenEnded_mscoco_train2014_questions.json"
    train_a = root / "v2_mscoco_train2014_annotations.json"
    val_q, val_a = json.loads((root / VQA_Q).read_text()), json.loads((root / VQA_A).read_text())
    tq, ta = json.loads(train_q.read_text()), json.loads(train_a.read_text())
    tq["questions"][0]["question_id"] = val_q["questions"][0]["question_id"]
    qid_old = ta["annotations"][0]["question_id"]
    ta["annotations"][0]["question_id"] = val_q["questions"][0]["question_id"]
    assert qid_old != ta["annotations"][0]["question_id"]
    tq["questions"].sort(key=lambda q: q["question_id"])
    del val_a
    train_q.write_text(json.dumps(tq))
    train_a.write_text(json.dumps(ta))


def _cp_in_both(root: Path) -> None:
    test_q, test_a = json.loads((root / CP_Q).read_text()), json.loads((root / CP_A).read_text())
    train_q = json.loads((root / "vqacp_v2_train_questions.json").read_text())
    train_a = json.loads((root / "vqacp_v2_train_annotations.json").read_text())
    train_q.append(test_q[0])
    train_a.append(next(a for a in test_a if a["question_id"] == test_q[0]["question_id"]))
    (root / "vqacp_v2_train_questions.json").write_text(json.dumps(train_q))
    (root / "vqacp_v2_train_annotations.json").write_text(json.dumps(train_a))


def _cut_jpeg(path: Path) -> None:
    """A JPEG cut short after its header: Pillow opens it, decoding fails."""
    data = path.read_bytes()
    path.write_bytes(data[: max(200, len(data) // 3)])


SOURCE_CASES = GENERIC + FIELD_CASES


@pytest.fixture
def source_copy(sample_sources, tmp_path):
    def copy(bench: str) -> Path:
        from builders.registry import get_builder

        source_dir = get_builder(bench).source_dir
        dst = tmp_path / "src" / source_dir
        shutil.copytree(sample_sources / source_dir, dst)
        return dst
    return copy


@pytest.mark.slow  # the whole matrix takes about 9 s; tests/test_bad_input.py keeps representative cases fast
@pytest.mark.parametrize("case", SOURCE_CASES, ids=[c.id for c in SOURCE_CASES])
def test_bad_source(case: SourceCase, cli, source_copy, tmp_path):
    root = source_copy(case.bench)
    case.mutate(root)
    before = tree_digest(tmp_path / "src")
    out = tmp_path / "out"
    code, _, stderr = cli("build", case.bench, "--source", root, "--out", out, *offline_flags(case.bench),
                          *case.args)
    assert_one_error_line(code, stderr, case.needles)
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.")]
    assert tree_digest(tmp_path / "src") == before


# ---------------------------------------------------------------------------------------------
# Submissions: every registered task's format

def _tasks() -> dict:
    from evaluator.tasks import get_task, task_names

    return {name: get_task(name) for name in task_names()}


def _fields(field) -> tuple[str, ...]:
    return (field,) if isinstance(field, str) else tuple(field)


TASKS = _tasks()
VALUE_FIELDS = {f for task in TASKS.values() for f in _fields(task.value_field)}


@pytest.fixture(scope="module")
def scored(built, sample_sources, tmp_path_factory):
    """{bench: (built folder, the entries of its first demo model's predictions)}, each predicted the
    first time a test asks for it."""
    return _Scored(built, sample_sources, tmp_path_factory.mktemp("scored"))


class _Scored(dict):
    def __init__(self, built, sources, root):
        super().__init__()
        self.built, self.sources, self.root = built, sources, root

    def __missing__(self, bench):
        from builders.registry import get_benchmark
        from evaluator.models.options import ModelOptions
        from evaluator.run import predict

        entry, folder = get_benchmark(bench), self.built(bench)
        train = None if entry.demo.train_file is None else self.sources / entry.demo.train_file
        predictions = self.root / f"{bench}.json"
        predict(bench, str(folder), entry.demo.models[0], predictions, options=ModelOptions(train_file=train))
        self[bench] = (folder, json.loads(predictions.read_text()))
        return self[bench]


def _id_fields(entry: dict) -> list[str]:
    return [k for k in entry if k not in VALUE_FIELDS]


def _value_field(entry: dict) -> str:
    return next(k for k in entry if k in VALUE_FIELDS)


def _dump(entries) -> bytes:
    return json.dumps(entries).encode()


def _first_id_as(value):
    def make(entries):
        entries[0][_id_fields(entries[0])[0]] = value
        return _dump(entries)
    return make


def _first_value_raw(literal: str):
    def make(entries):
        marker = "__VALUE__"
        entries[0][_value_field(entries[0])] = marker
        return _dump(entries).replace(f'"{marker}"'.encode(), literal.encode())
    return make


def _first_value_huge(entries):
    """The first entry's value (or the first number of its list) set to 10**400: an int Python can
    read but no float can hold (catalogue round two: evaluate crashed on it in three formats)."""
    marker, field = "__VALUE__", _value_field(entries[0])
    if isinstance(entries[0][field], list):
        entries[0][field][0] = marker
    else:
        entries[0][field] = marker
    return _dump(entries).replace(f'"{marker}"'.encode(), b"1" + b"0" * 400)


SUBMISSION_DAMAGE = {
    "not-json": lambda e: b"[{not json",
    "non-utf8": lambda e: _dump(e)[:20] + b"\xff\xfe" + _dump(e)[20:],
    "empty-file": lambda e: b"",
    "deeply-nested": lambda e: b"[" * 100_000 + b"]" * 100_000,
    "object-not-list": lambda e: json.dumps({"predictions": e}).encode(),
    "entry-without-id": lambda e: _dump([{k: v for k, v in e[0].items() if k not in _id_fields(e[0])}] + e[1:]),
    "id-2**70": _first_id_as(2**70),
    "id-wrong-type": _first_id_as([1, 2]),
    "id-5000-digits": lambda e: _dump(e).replace(json.dumps(e[0][_id_fields(e[0])[0]]).encode(), b"9" * 5000, 1),
    "value-nan": _first_value_raw("NaN"),
    "value-1e999": _first_value_raw("1e999"),
    "value-wrong-type": _first_value_raw('{"a": 1}'),
    "value-10**400": _first_value_huge,
    "duplicate-entry": lambda e: _dump(e + [e[0]]),
    "unknown-id": lambda e: _dump(e + [{**e[0], _id_fields(e[0])[0]: ("zz-unknown" if isinstance(
        e[0][_id_fields(e[0])[0]], str) else 2**62)}]),
    "missing-entry": lambda e: _dump(e[1:]),
}
SUBMISSION_CASES = [(b, name) for b in TASKS for name in SUBMISSION_DAMAGE]


@pytest.mark.slow  # the whole matrix takes about 9 s; tests/test_evaluator.py keeps representative cases fast
@pytest.mark.parametrize("bench,damage", SUBMISSION_CASES, ids=[f"{b}:{d}" for b, d in SUBMISSION_CASES])
def test_bad_submission(bench, damage, scored, cli, tmp_path):
    folder, entries = scored[bench]
    path = tmp_path / "p.json"
    path.write_bytes(SUBMISSION_DAMAGE[damage](json.loads(json.dumps(entries))))
    code, stdout, stderr = cli("evaluate", bench, "--data", folder, "--predictions", path,
                               "--report", tmp_path / "report")
    assert_one_error_line(code, stderr, ("p.json",))
    assert stdout == "" and not (tmp_path / "report").exists()


@pytest.mark.slow  # scores every benchmark's sample (the submission matrix's fixture)
@pytest.mark.parametrize("bench", sorted(TASKS))
def test_submission_with_no_overlap_is_refused_even_when_partial(bench, scored, cli, tmp_path):
    """--allow-partial with zero overlap used to print NaN scores: now an error naming the file."""
    folder, entries = scored[bench]
    path = tmp_path / "p.json"
    path.write_bytes(_dump([]))
    code, stdout, stderr = cli("evaluate", bench, "--data", folder, "--predictions", path, "--allow-partial")
    assert_one_error_line(code, stderr, ("p.json", "none of the"))


@pytest.mark.slow  # needs the submission matrix's fixture (every benchmark built and scored)
@pytest.mark.parametrize("bench", ["gqa-ood", "disco"])
def test_submission_that_is_a_folder_or_missing(bench, scored, cli, tmp_path):
    folder, _ = scored[bench]
    (tmp_path / "p.json").mkdir()
    code, _, stderr = cli("evaluate", bench, "--data", folder, "--predictions", tmp_path / "p.json")
    assert_one_error_line(code, stderr, ("p.json", "is a folder"))
    code, _, stderr = cli("evaluate", bench, "--data", folder, "--predictions", tmp_path / "missing.json")
    assert_one_error_line(code, stderr, ("missing.json", "not found"))


# ---------------------------------------------------------------------------------------------
# Parameters

PARAM_CASES = [
    ("gqa-ood", "alpha=inf", "finite"), ("gqa-ood", "alpha=nan", "finite"), ("gqa-ood", "alpha=-inf", "finite"),
    ("gqa-ood", "group_threshold=nan", "group_threshold"), ("gqa-ood", "legacy_alphas=0.2,inf", "finite"),
    ("gqa-ood", "alpha=" + "9" * 5000, "alpha"), ("gqa-ood", "tail_comparison=", "tail_comparison"),
    ("disco", "low_noise_sigma=nan", "finite"), ("disco", "low_brightness=inf", "finite"),
    ("disco", "low_brightness=2", "low_brightness"), ("disco", "low_noise_sigma=-1", "low_noise_sigma"),
    ("disco", "qualities=medium", "qualities"), ("disco", "seed=1.5", "seed"),
    ("vcr-visor", "query_threshold=nan", "finite"), ("vcr-visor", "response_threshold=inf", "finite"),
    ("vcr-visor", "query_threshold=1.5", "query_threshold"), ("vcr-visor", "seed=x", "seed"),
    ("vqa-cp", "test_fraction=nan", "finite"), ("vqa-cp", "test_fraction=1.5", "test_fraction"),
    ("vqa-cp", "mode=foo", "mode"), ("vqa-v2", "alpha=0.2", "unknown parameter"),
    ("vl-bias", "bias_pairs=man", "bias_pairs"), ("socialiq", "nothing", "KEY=VALUE"),
]


@pytest.mark.parametrize("bench,assignment,needle", PARAM_CASES, ids=[f"{b}:{a[:30]}" for b, a, _ in PARAM_CASES])
def test_bad_parameter(bench, assignment, needle, cli, sample_sources, tmp_path):
    out = tmp_path / "out"
    code, _, stderr = cli("build", bench, "--source", sample_sources, "--out", out, "--param", assignment)
    assert_one_error_line(code, stderr, ("--param", needle))
    assert not out.exists()


@pytest.mark.parametrize("args,needle", [
    (("--split", "test"), "--split test"),
    (("--images", "IMAGES_FILE"), "--images"),
    (("--images", "MISSING"), "no such folder"),
])
def test_bad_build_option(args, needle, cli, sample_sources, tmp_path):
    (tmp_path / "IMAGES_FILE").write_text("x")
    args = tuple(str(tmp_path / a) if a in ("IMAGES_FILE", "MISSING") else a for a in args)
    code, _, stderr = cli("build", "vcr-visor", "--source", sample_sources, "--out", tmp_path / "out",
                          *offline_flags("vcr-visor"), *args)
    assert_one_error_line(code, stderr, (needle,))
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("bench,assignment,needle", [
    ("vqa-v2", "rule=foo", "rule"), ("gqa-ood", "rule=pre-2021", "no scoring options"), ("vqa-v2", "x", "KEY=VALUE"),
])
def test_bad_scoring_option(bench, assignment, needle, scored, cli, tmp_path):
    folder, entries = scored[bench]
    path = tmp_path / "p.json"
    path.write_bytes(_dump(entries))
    code, _, stderr = cli("evaluate", bench, "--data", folder, "--predictions", path, "--option", assignment)
    assert_one_error_line(code, stderr, (needle,))


# ---------------------------------------------------------------------------------------------
# Paths and environments

def _gqa(sample_sources: Path, tmp_path: Path) -> Path:
    src = tmp_path / "g1"
    shutil.copytree(sample_sources / "gqa", src)
    return src


OUT_CASES = {
    "out-is-source": (lambda src, tmp: src, "inside the --source folder"),
    "out-inside-source": (lambda src, tmp: src / "built", "inside the --source folder"),
    "out-is-parent-of-source": (lambda src, tmp: tmp, "contains the --source"),
    "out-is-dot": (lambda src, tmp: Path("."), "inside the --source folder"),
    "out-is-unrelated-folder": (lambda src, tmp: _mk(tmp / "mine", {"notes.txt": "keep"}), "not written by"),
    "out-is-a-file": (lambda src, tmp: _mk_file(tmp / "result.txt"), "a file with this name exists"),
    "out-symlink-to-source": (lambda src, tmp: _link(tmp / "link", src), "inside the --source folder"),
    "out-symlink-to-folder": (lambda src, tmp: _link(tmp / "link", _mk(tmp / "mine", {"a": "b"})), "symbolic link"),
    "out-parent-is-a-file": (lambda src, tmp: _mk_file(tmp / "afile") / "out", "afile"),
}


def _mk(folder: Path, files: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text)
    return folder


def _mk_file(path: Path) -> Path:
    path.write_text("the user's file")
    return path


def _link(link: Path, target: Path) -> Path:
    link.symlink_to(target, target_is_directory=True)
    return link


@pytest.mark.parametrize("case", sorted(OUT_CASES))
def test_out_is_sacred(case, cli, sample_sources, tmp_path, monkeypatch):
    src = _gqa(sample_sources, tmp_path)
    make, needle = OUT_CASES[case]
    monkeypatch.chdir(src)
    out = make(src, tmp_path)
    before = tree_digest(tmp_path)
    code, _, stderr = cli("build", "gqa-ood", "--source", src, "--out", out)
    assert_one_error_line(code, stderr, ("--out", needle))
    assert tree_digest(tmp_path) == before


def test_out_that_is_a_source_is_refused_even_with_overwrite(cli, sample_sources, tmp_path):
    src = _gqa(sample_sources, tmp_path)
    before = tree_digest(src)
    code, _, stderr = cli("build", "gqa-ood", "--source", src, "--out", src, "--overwrite")
    assert_one_error_line(code, stderr, ("--source",))
    assert tree_digest(src) == before


def test_out_that_is_the_images_folder_is_refused(cli, sample_sources, tmp_path):
    images = _mk(tmp_path / "images", {"x.jpg": "not used"})
    code, _, stderr = cli("build", "vcr-visor", "--source", sample_sources, "--out", images / "built",
                          "--images", images, *offline_flags("vcr-visor"))
    assert_one_error_line(code, stderr, ("--images",))
    assert sorted(p.name for p in images.iterdir()) == ["x.jpg"]


def test_disk_full_while_writing(cli, sample_sources, tmp_path, monkeypatch):
    import errno

    import pipelines.export

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(pipelines.export, "_write_shard", full)
    code, _, stderr = cli("build", "gqa-ood", "--source", sample_sources, "--out", tmp_path / "out")
    assert_one_error_line(code, stderr, ("no space left",))
    assert list(tmp_path.iterdir()) == []


@pytest.fixture
def built_gqa(scored):
    return scored["gqa-ood"][0]


def test_evaluate_data_typo_is_not_taken_for_a_hub_id(built_gqa, cli, tmp_path):
    (tmp_path / "out").mkdir()
    p = tmp_path / "p.json"
    p.write_text("[]")
    code, _, stderr = cli("evaluate", "gqa-ood", "--data", f"{tmp_path}/out/typo", "--predictions", p)
    assert_one_error_line(code, stderr, ("out/typo", "no such folder"))
    code, _, stderr = cli("evaluate", "gqa-ood", "--data", p, "--predictions", p)
    assert_one_error_line(code, stderr, ("p.json", "is a file"))


def test_hub_id_offline_is_one_line(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    p = tmp_path / "p.json"
    p.write_text("[]")
    code, _, stderr = cli("evaluate", "gqa-ood", "--data", "someorg/some-dataset", "--predictions", p)
    assert_one_error_line(code, stderr, ("someorg/some-dataset", "could not be fetched"))


def test_report_that_is_an_existing_file(scored, cli, tmp_path):
    folder, entries = scored["disco"]
    p = tmp_path / "p.json"
    p.write_bytes(_dump(entries))
    (tmp_path / "report").write_text("my notes")
    code, _, stderr = cli("evaluate", "disco", "--data", folder, "--predictions", p, "--report", tmp_path / "report")
    assert_one_error_line(code, stderr, ("--report", "a file with this name exists"))
    assert (tmp_path / "report").read_text() == "my notes"


def test_predict_out_that_is_a_folder(built_gqa, cli, tmp_path):
    (tmp_path / "p").mkdir()
    code, _, stderr = cli("predict", "gqa-ood", "--data", built_gqa, "--model", "baseline:random", "--out",
                          tmp_path / "p")
    assert_one_error_line(code, stderr, ("--out", "is a folder"))
    assert [p.name for p in tmp_path.iterdir()] == ["p"]


def test_predict_out_under_a_file(built_gqa, cli, tmp_path):
    (tmp_path / "afile").write_text("x")
    code, _, stderr = cli("predict", "gqa-ood", "--data", built_gqa, "--model", "baseline:random", "--out",
                          tmp_path / "afile" / "p.json")
    assert_one_error_line(code, stderr, ("afile", "not a folder"))


def _copy_built(folder: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "built"
    shutil.copytree(folder, dst)
    return dst


@pytest.mark.parametrize("damage,needle", [
    (lambda f: (f / "manifest.json").write_text("{corrupt"), "corrupt manifest"),
    (lambda f: (f / "manifest.json").write_text("[1, 2]"), "corrupt manifest"),
    (lambda f: (f / "manifest.json").write_text('{"outputs": 3}'), "not a vlbench manifest"),
    (lambda f: (f / "manifest.json").write_bytes(b"[" * 100_000), "corrupt manifest"),
    (lambda f: (f / "manifest.json").unlink(), "no manifest.json"),
    (lambda f: (f / "manifest.json").write_text(json.dumps({**json.loads((f / "manifest.json").read_text()),
        "outputs": [{"path": "../../etc/passwd", "sha256": "0"}]})), "leaves its folder"),
])
def test_verify_with_a_damaged_manifest(damage, needle, built_gqa, cli, tmp_path):
    folder = _copy_built(built_gqa, tmp_path)
    damage(folder)
    code, _, stderr = cli("verify", folder)
    assert_one_error_line(code, stderr, ("manifest", needle) if "manifest" not in needle else (needle,))


def test_evaluate_on_a_truncated_parquet(built_gqa, scored, cli, tmp_path):
    folder = _copy_built(built_gqa, tmp_path)
    shard = next((folder / "all").glob("testdev-*.parquet"))
    shard.write_bytes(shard.read_bytes()[:500])
    p = tmp_path / "p.json"
    p.write_bytes(_dump(scored["gqa-ood"][1]))
    code, _, stderr = cli("evaluate", "gqa-ood", "--data", folder, "--predictions", p)
    assert_one_error_line(code, stderr, (shard.name, "parquet"))


def test_perceptual_where_with_a_value_of_the_wrong_type(scored, cli):
    folder, _ = scored["disco"]
    code, _, stderr = cli("perceptual", "disco", "--data", folder, "--model", "baseline:mean", "--where",
                          "count=abc", "--repeats", "1", "--permutations", "1")
    assert_one_error_line(code, stderr, ("--where count=abc", "count"))


@pytest.mark.slow
def test_sample_sources_into_an_existing_file_or_changed_folder(cli, tmp_path):
    (tmp_path / "s").write_text("mine")
    code, _, stderr = cli("sample-sources", "--out", tmp_path / "s")
    assert_one_error_line(code, stderr, ("--out", "a file with this name exists"))
    assert (tmp_path / "s").read_text() == "mine"
    (tmp_path / "t" / "gqa").mkdir(parents=True)
    (tmp_path / "t" / "gqa" / "val_balanced_questions.json").write_text("my own GQA file")
    code, _, stderr = cli("sample-sources", "--out", tmp_path / "t")
    assert_one_error_line(code, stderr, ("val_balanced_questions.json", "never overwrites"))
    assert (tmp_path / "t" / "gqa" / "val_balanced_questions.json").read_text() == "my own GQA file"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s", "t"]


@pytest.mark.parametrize("repo_id,needle", [("not a repo id", "not a valid hub repo id"),
                                            ("a/b/c", "not a valid hub repo id"),
                                            ("org/name", "push to datasets/org/name failed")])
def test_push_bad_repo_id_or_no_network(repo_id, needle, built_gqa, cli, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_dummy_token_for_tests")
    code, _, stderr = cli("push", built_gqa, "--repo-id", repo_id)
    assert_one_error_line(code, stderr, (needle,))


@pytest.mark.parametrize("command", ["build", "verify"])
def test_missing_or_file_paths_are_named_as_such(command, cli, tmp_path):
    (tmp_path / "afile").write_text("x")
    for path, needle in ((tmp_path / "missing", "no such"), (tmp_path / "afile", "is a file")):
        args = ("build", "visdial", "--source", path, "--out", tmp_path / "out") if command == "build" \
            else ("verify", path)
        code, _, stderr = cli(*args)
        assert_one_error_line(code, stderr, (path.name, needle))


def test_cache_folder_that_is_a_file(cli, sample_sources, tmp_path, monkeypatch):
    (tmp_path / "cachefile").write_text("x")
    monkeypatch.setenv("VLBENCH_CACHE", str(tmp_path / "cachefile" / "vlbench"))
    code, _, stderr = cli("build", "gqa-ood", "--source", sample_sources, "--out", tmp_path / "out")
    assert_one_error_line(code, stderr, ("VLBENCH_CACHE", "cachefile"))
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("bench,spec,needle", [
    ("gqa-ood", "hf:NOT_A_MODEL", "not a model folder (no config.json)"),
    pytest.param("vcr-visor", "hf:NOT_A_MODEL", "not a model folder", marks=pytest.mark.slow),  # builds vcr-visor
    ("gqa-ood", "hf:MISSING", "no such model folder"),
    ("gqa-ood", "py:no_such_module_xyz:factory", "no_such_module_xyz"),
    ("gqa-ood", "py:os:getcwd", "predict(table)"), ("gqa-ood", "nothing", "--model nothing"),
    ("disco", "baseline:nope", "baseline:nope"),
    ("gqa-ood", "openai:", "openai:<served model>"), ("gqa-ood", "openai: ", "openai:<served model>"),
    ("gqa-ood", "openai:m\x1b[31m", "cannot be printed"), ("gqa-ood", "hf:m\udcff", "cannot be printed"),
])
def test_bad_model_spec(bench, spec, needle, scored, cli, tmp_path):
    (tmp_path / "NOT_A_MODEL").mkdir()
    spec = spec.replace("NOT_A_MODEL", str(tmp_path / "NOT_A_MODEL")).replace("MISSING", str(tmp_path / "missing"))
    folder, _ = scored[bench]
    code, _, stderr = cli("predict", bench, "--data", folder, "--model", spec, "--out", tmp_path / "p.json")
    assert_one_error_line(code, stderr, (needle,))
    assert not (tmp_path / "p.json").exists() and not list(tmp_path.glob(".p.json*"))


def test_list_sources_present_missing_folder(cli, tmp_path):
    code, _, stderr = cli("list", "--sources-present", tmp_path / "missing")
    assert_one_error_line(code, stderr, ("--sources-present", "no such folder"))


@pytest.mark.parametrize("args,needle", [
    (("build", "gqa-ood", "--source"), "requires an argument"),
    (("build", "gqa-ood", "--bogus", "1"), "No such option: --bogus"),
    (("build",), "Missing argument"),
    (("frobnicate",), "No such command 'frobnicate'"),
    (("predict", "gqa-ood", "--data", "d", "--model", "m", "--out", "o", "--batch-size", "0"), "--batch-size"),
    (("perceptual", "socialiq", "--data", "d", "--model", "m", "--permutations", "many"), "--permutations"),
    (("counterbias", "--data", "d", "--model", "m", "--attack", "fgsm"), "'fgsm' is not one of 'pgd', 'none'"),
    (("counterbias", "--data", "d", "--model", "m", "--b0", "other side"), "--b0"),
])
def test_command_line_usage_errors_are_one_line(args, needle, cli):
    code, stdout, stderr = cli(*args)
    assert_one_error_line(code, stderr, (needle,))


def test_density_map_that_is_not_numeric(cli, source_copy, tmp_path):
    from scipy.io import savemat

    root = source_copy("disco")
    savemat(root / "density" / "train" / "0001.mat", {"map": {"a": [[1.0]]}})  # a MATLAB struct, not an array
    code, _, stderr = cli("build", "disco", "--source", root, "--out", tmp_path / "out")
    assert_one_error_line(code, stderr, ("0001.mat", "field 'map'", "numeric"))


def test_disk_full_while_writing_a_report_or_predictions(scored, cli, tmp_path, monkeypatch):
    import errno

    folder, entries = scored["disco"]
    p = tmp_path / "p.json"
    p.write_bytes(_dump(entries))
    real = Path.write_bytes

    def full(self, data):
        if ".vlbench-partial-" in self.name:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, data)

    monkeypatch.setattr(Path, "write_bytes", full)
    code, _, stderr = cli("evaluate", "disco", "--data", folder, "--predictions", p, "--report", tmp_path / "r")
    assert_one_error_line(code, stderr, ("--report", "No space left"))
    code, _, stderr = cli("predict", "disco", "--data", folder, "--model", "baseline:mean",
                          "--out", tmp_path / "q.json")
    assert_one_error_line(code, stderr, ("--out", "No space left"))
    assert not list(tmp_path.rglob(".*")) and not (tmp_path / "q.json").exists()


def test_no_home_folder_for_the_cache(cli, sample_sources, tmp_path, monkeypatch):
    monkeypatch.delenv("VLBENCH_CACHE")
    monkeypatch.setattr(Path, "home", classmethod(lambda cls: (_ for _ in ()).throw(RuntimeError("no home"))))
    code, _, stderr = cli("build", "gqa-ood", "--source", sample_sources, "--out", tmp_path / "out")
    assert_one_error_line(code, stderr, ("VLBENCH_CACHE",))


# ---------------------------------------------------------------------------------------------
# Round two: the cases that still ended in a traceback, exit 0 or a hang (the catalogue's second round);
# the leaderboard and publishing cases are in tests/test_publishing_safety.py, the model folders in
# tests/test_model_safety.py.

def _predicted_with_record(built_gqa, tmp_path: Path, edit) -> Path:
    """A valid gqa-ood submission whose prediction record (`.meta.json`) is rewritten by EDIT."""
    from evaluator.run import predict

    path = tmp_path / "p.json"
    predict("gqa-ood", str(built_gqa), "baseline:random", path)
    record = path.with_suffix(".meta.json")
    record.write_bytes(edit(json.loads(record.read_text())))
    return path


@pytest.mark.parametrize("edit,needle", [
    (lambda r: b"[" * 100_000 + b"]" * 100_000, "JSON nested too deeply"),
    (lambda r: json.dumps(r).encode().replace(b'"model"', b'"n": ' + b"7" * 5000 + b', "model"', 1),
     "integer of more than 4300 digits"),
    (lambda r: json.dumps({**r, "asked": ["a list"]}).encode(), "field 'asked' is not a dict"),
    (lambda r: json.dumps({**r, "asked": {"unparsed_outputs": "many"}}).encode(),
     "field 'asked.unparsed_outputs' is not a int"),
], ids=["deep", "huge-int", "asked-not-a-dict", "asked-field-type"])
def test_a_damaged_prediction_record(edit, needle, built_gqa, cli, tmp_path):
    path = _predicted_with_record(built_gqa, tmp_path, edit)
    code, _, stderr = cli("evaluate", "gqa-ood", "--data", built_gqa, "--predictions", path, "--report",
                          tmp_path / "report")
    assert_one_error_line(code, stderr, ("p.meta.json", needle))
    assert not (tmp_path / "report").exists()


@pytest.mark.parametrize("tasks,needle", [("[1, 2]", "task 0 of `tasks`"), ("[{config: all}]", "task 0 of `tasks`"),
                                          ("[" * 5000, "not valid YAML")])
def test_a_malformed_eval_yaml(tasks, needle, built_gqa, cli, tmp_path):
    folder = _copy_built(built_gqa, tmp_path)
    (folder / "eval.yaml").write_text(f"name: gqa-ood\ndescription: x\ntasks: {tasks}\n")
    predictions = _predicted_with_record(built_gqa, tmp_path, lambda r: json.dumps(r).encode())
    code, _, stderr = cli("evaluate", "gqa-ood", "--data", folder, "--predictions", predictions, "--bootstrap", "0",
                          "--hub-results", tmp_path / "repo", "--hub-dataset", "org/gqa-ood")
    assert_one_error_line(code, stderr, ("eval.yaml", needle))
    assert not (tmp_path / "repo" / ".eval_results").exists()


@pytest.mark.parametrize("seed, needle", [("-1", "greater than or equal to 0"),
                                         # 2^32: numpy's and scikit-learn's seeds are 32-bit (the stress test's
                                         # forests raised a ValueError traceback)
                                         ("4294967296", "less than or equal to 4294967295")])
@pytest.mark.parametrize("command", ["evaluate", "predict", "compare", "leaderboard", "stress-test"])
def test_a_seed_out_of_range(command, seed, needle, built_gqa, cli, tmp_path):
    args = {"evaluate": ("--predictions", tmp_path / "p.json"), "predict": ("--model", "baseline:random", "--out",
                                                                            tmp_path / "p.json"),
            "compare": ("--predictions", tmp_path / "a.json", "--predictions", tmp_path / "b.json"),
            "leaderboard": ("--submissions", tmp_path, "--out", tmp_path / "site"),
            "stress-test": ("--out", tmp_path / "stress")}[command]
    code, _, stderr = cli(command, "gqa-ood", "--data", built_gqa, *args, "--seed", seed)
    assert_one_error_line(code, stderr, ("--seed", needle))


@pytest.mark.parametrize("column", ["entailed", "groups"])
def test_by_a_column_of_lists_or_records(column, built_gqa, cli, tmp_path):
    predictions = _predicted_with_record(built_gqa, tmp_path, lambda r: json.dumps(r).encode())
    code, _, stderr = cli("evaluate", "gqa-ood", "--data", built_gqa, "--predictions", predictions, "--by", column,
                          "--report", tmp_path / "report")
    assert_one_error_line(code, stderr, (f"--by {column}", "groups rows by a column of single values"))
    assert not (tmp_path / "report").exists()


def test_an_unreadable_vcr_file(cli, source_copy, tmp_path, monkeypatch):
    src = source_copy("vcr")
    path = src / "val.jsonl"
    if os.geteuid() != 0:
        path.chmod(0)
    else:  # root reads any file: the read itself fails as it would for another user
        import builders.sources.jsonio as jsonio

        # root also hashes it, so a stage another test cached would skip the read: an empty cache
        monkeypatch.setenv("VLBENCH_CACHE", str(tmp_path / "cache"))

        def denied(file, *args, **kwargs):
            if Path(file) == path:
                raise PermissionError(13, "Permission denied", str(file))
            return open(file, *args, **kwargs)
        monkeypatch.setattr(jsonio, "open", denied, raising=False)
    code, _, stderr = cli("build", "vcr", "--source", src, "--out", tmp_path / "out")
    assert_one_error_line(code, stderr, ("val.jsonl", "permission denied"))
    assert not (tmp_path / "out").exists()


@pytest.mark.slow  # two DISCO builds and a verify
def test_a_disco_sample_in_two_splits_fails_build_and_verify(cli, source_copy, tmp_path, monkeypatch):
    src = source_copy("disco")
    density = src / "density"
    train = sorted((density / "train").glob("*.mat"))[0]
    shutil.copy(train, density / "test" / train.name)  # the same sample id (image, audio, map) in test
    code, _, stderr = cli("build", "disco", "--source", src, "--out", tmp_path / "out")
    assert_one_error_line(code, stderr, (f"sample {train.stem} is in both the test and the train split",))
    assert not (tmp_path / "out").exists()
    # a folder built without the check (an older vlbench) fails verify
    from builders.disco.builder import DiscoBuilder

    check = DiscoBuilder.check_invariants
    monkeypatch.setattr(DiscoBuilder, "check_invariants", lambda self, tables, params: [])
    assert cli("build", "disco", "--source", src, "--out", tmp_path / "out")[0] == 0
    monkeypatch.setattr(DiscoBuilder, "check_invariants", check)
    code, stdout, stderr = cli("verify", tmp_path / "out")
    assert code != 0 and f"sample {train.stem} is in both" in stdout + stderr


def test_videos_twice_or_not_regular_are_refused(tmp_path):
    pytest.importorskip("av")
    from evaluator.models.videos import VideoFolder

    root = tmp_path / "videos"
    (root / "a").mkdir(parents=True)
    (root / "b").mkdir()
    (root / "a" / "vid1.mp4").write_bytes(b"x")
    (root / "b" / "vid1.mkv").write_bytes(b"y")
    with pytest.raises(VlbenchError, match=r"two files for 'vid1' \(a/vid1.mp4, b/vid1.mkv\); keep one"):
        VideoFolder(root).path("vid1")
    (root / "b" / "vid1.mkv").unlink()
    os.mkfifo(root / "b" / "vid2.mp4")  # opening a FIFO blocks until a writer comes: never opened
    with pytest.raises(VlbenchError, match=r"b/vid2.mp4 is not a regular file"):
        VideoFolder(root).path("vid2")
    assert VideoFolder(root).path("vid1") == root / "a" / "vid1.mp4"


@pytest.mark.parametrize("prompt", ["{question:>999999999}", "{question!r}", "{question:{question}}"])
def test_a_prompt_field_with_a_format_spec(prompt):
    from evaluator.models.ask import template_fields

    with pytest.raises(VlbenchError, match="has a format spec or conversion; a prompt field is a plain"):
        template_fields(prompt)
    assert template_fields("Q: {question} A:") == ["question"]
