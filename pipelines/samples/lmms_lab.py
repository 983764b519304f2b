"""The embedded VQA v2 and GQA samples in the layout of lmms-lab's Hub datasets (`lmms-lab-encoder/VQAv2` and
`lmms-lab-encoder/GQA` in lmms-eval 0.7.3's task files; `lmms-lab/...` before), which lmms-eval's `vqav2_val`
and `gqa` tasks read: what `--harness-data` points at to map an lmms-eval log's `doc_id`
(the row of the task's split) to the benchmark's id, and what `scripts/make_lmms_eval_fixtures.py`
gives lmms-eval itself.

* VQAv2: `data/validation-00000-of-00001.parquet`, one row per question in the
  raw question file's order: question_type, multiple_choice_answer, answers (a list of {answer,
  answer_confidence, answer_id}), image_id, answer_type, question_id, question, image (the COCO file's
  bytes).
* GQA: config `testdev_balanced_instructions` (`testdev-00000-of-00001.parquet`: id,
  imageId, question, answer, fullAnswer, isBalanced, in the raw file's order) and config
  `testdev_balanced_images` (id, image). The GQA sample has no image files, so each image id gets a
  plain 32 px image of a colour derived from it. A README.md declares the two configs, as the Hub
  repository's does, so that `datasets.load_dataset(folder, config)` finds them offline.
"""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path

VQAV2_SPLIT = "data/validation-00000-of-00001.parquet"
GQA_QUESTIONS = "testdev_balanced_instructions/testdev-00000-of-00001.parquet"
GQA_IMAGES = "testdev_balanced_images/testdev-00000-of-00001.parquet"
GQA_README = """---
configs:
- config_name: testdev_balanced_instructions
  data_files:
  - split: testdev
    path: testdev_balanced_instructions/testdev-*.parquet
- config_name: testdev_balanced_images
  data_files:
  - split: testdev
    path: testdev_balanced_images/testdev-*.parquet
---
GQA test-dev (balanced) in lmms-lab/GQA's layout, written by vlbench from its embedded samples.
"""


def _image(value: bytes | None, path: str) -> dict:
    return {"bytes": value, "path": path}


def _write(rows: list[dict], path: Path, images: tuple[str, ...] = ("image",)) -> None:
    """Rows as parquet with the datasets Features in the schema (an `Image` column is decoded to a
    PIL image when lmms-eval reads it, as from the Hub)."""
    from datasets import Dataset, Image

    dataset = Dataset.from_list(rows)
    for column in images:
        dataset = dataset.cast_column(column, Image())
    path.parent.mkdir(parents=True, exist_ok=True)
    dataset.to_parquet(str(path))


def write_vqav2(sources: Path, out: Path) -> Path:
    """SOURCES: the sample sources (vqa_v2/ and coco/); OUT: the dataset folder."""
    questions = json.loads((sources / "vqa_v2" / "v2_OpenEnded_mscoco_val2014_questions.json").read_text())
    annotations = json.loads((sources / "vqa_v2" / "v2_mscoco_val2014_annotations.json").read_text())
    by_id = {a["question_id"]: a for a in annotations["annotations"]}
    rows = []
    for q in questions["questions"]:
        a = by_id[q["question_id"]]
        name = f"COCO_val2014_{q['image_id']:012d}.jpg"
        rows.append({"question_type": a["question_type"], "multiple_choice_answer": a["multiple_choice_answer"],
                     "answers": a["answers"], "image_id": q["image_id"], "answer_type": a["answer_type"],
                     "question_id": q["question_id"], "question": q["question"],
                     "image": _image((sources / "coco" / "val2014" / name).read_bytes(), name)})
    _write(rows, out / VQAV2_SPLIT)
    return out


def _plain_image(image_id: str) -> bytes:
    from PIL import Image

    colour = tuple(hashlib.sha256(image_id.encode()).digest()[:3])
    buffer = io.BytesIO()
    Image.new("RGB", (32, 32), colour).save(buffer, format="PNG")
    return buffer.getvalue()


def write_gqa(sources: Path, out: Path) -> Path:
    """SOURCES: the sample sources (gqa/); OUT: the dataset folder."""
    records = json.loads((sources / "gqa" / "testdev_balanced_questions.json").read_text())
    rows = [{"id": qid, "imageId": r["imageId"], "question": r["question"], "answer": r["answer"],
             "fullAnswer": r["fullAnswer"], "isBalanced": r["isBalanced"]} for qid, r in records.items()]
    images = [{"id": i, "image": _image(_plain_image(i), f"{i}.png")}
              for i in sorted({r["imageId"] for r in rows})]
    _write(rows, out / GQA_QUESTIONS, images=())
    _write(images, out / GQA_IMAGES)
    (out / "README.md").write_text(GQA_README)
    return out
