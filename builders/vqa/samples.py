"""Synthetic VQA v2 files in the official format (headers, questions, 10-answer annotations) and a
VQA-CP v2 pair in the published flat format, for samples, tests and benchmarks.

Each question type has its own skewed answer prior (as in VQA, where "how many" is mostly "2"), the
ten human answers agree with varying strength and use spelling variants that the official
normalisation folds ("Yes", "yes.", "two" for "2").

`release_shape=True` gives what benchmarks time at the real release's shape (Goyal et al., CVPR 2017, §3: 5.4
questions per image, questions of about 6.2 words, yes/no 38%, number 12%, other 50%; thousands of distinct
answers, the 1,000 most frequent covering about 97% of the questions): half of an "other" question's answers come
from its type's prior, half from a long tail of `TAIL_ANSWERS` words shared by every type (Zipf, exponent
`TAIL_EXPONENT`), numbers run to 60, and questions name a place. The samples and tests use the default shape.
"""

from __future__ import annotations

import random
from itertools import accumulate
from pathlib import Path

import msgspec

from builders.sources.pictures import write_picture
from builders.vqa.reader import cp_files, v2_files

YES_NO = ["yes", "no"]
NUMBERS = ["0", "1", "2", "3", "4", "5", "6", "8", "10", "12"]
COLORS = ["white", "black", "red", "blue", "green", "yellow", "brown", "gray", "orange", "pink"]
OBJECTS = ["pizza", "frisbee", "umbrella", "kite", "skateboard", "surfboard", "laptop", "banana", "clock", "bench"]
SPORTS = ["tennis", "baseball", "soccer", "skiing", "surfing", "frisbee"]
ROOMS = ["kitchen", "bathroom", "living room", "bedroom", "office"]
ANIMALS = ["dog", "cat", "horse", "giraffe", "elephant", "zebra", "sheep", "cow", "bird", "bear"]
PLACES = ["on table", "on wall", "in sky", "on street", "in water", "on plate", "on ground", "in field"]
NOUNS = ["man", "woman", "bus", "train", "dog", "cat", "plate", "table", "wall", "sky", "field", "street", "car",
         "boat", "horse", "shirt", "hat", "umbrella", "kite", "sign", "building", "tree", "grass", "water", "bench",
         "clock", "pizza", "cake", "bowl", "cup", "bird", "giraffe", "elephant", "zebra", "person", "child", "girl",
         "boy", "laptop", "phone", "window", "door", "fence", "truck", "motorcycle", "bike", "plane", "snow", "beach"]
# question type -> (answer type, answer pool)
TYPES = {
    "is the": ("yes/no", YES_NO), "is this": ("yes/no", YES_NO), "are there": ("yes/no", YES_NO),
    "does the": ("yes/no", YES_NO), "is there a": ("yes/no", YES_NO), "are the": ("yes/no", YES_NO),
    "is it": ("yes/no", YES_NO), "is this a": ("yes/no", YES_NO), "do": ("yes/no", YES_NO),
    "how many": ("number", NUMBERS), "how many people are": ("number", NUMBERS),
    "what number is": ("number", NUMBERS),
    "what color is the": ("other", COLORS), "what color are the": ("other", COLORS), "what color": ("other", COLORS),
    "what is the man": ("other", OBJECTS), "what is on the": ("other", OBJECTS), "what is in the": ("other", OBJECTS),
    "what sport is": ("other", SPORTS), "what room is": ("other", ROOMS), "what animal is": ("other", ANIMALS),
    "where is the": ("other", PLACES), "what kind of": ("other", ANIMALS + OBJECTS), "what type of": ("other", OBJECTS),
}
VARIANTS = {"yes": ["Yes", "yes.", "YES"], "no": ["No", "no.", "nope"], "2": ["two", "2 "], "1": ["one"],
            "3": ["three"], "0": ["none", "zero"], "white": ["White", "white."], "red": ["Red"],
            "living room": ["the living room", "living-room"], "on table": ["on the table", "table"]}
INFO = {"description": "This is v2.0 of the VQA dataset.", "url": "http://visualqa.org", "version": "2.0",
        "year": 2017, "contributor": "VQA Team", "date_created": "2017-04-26 17:07:13"}
TAIL_ANSWERS, TAIL_EXPONENT, TAIL_SHARE = 20_000, 1.2, 0.5  # release_shape: the long tail of "other" answers
_SYLLABLES = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]
LICENSE = {"url": "http://creativecommons.org/licenses/by/4.0/",
           "name": "Creative Commons Attribution 4.0 International License"}


def _answers(rng: random.Random, answer: str, pool: list[str]) -> list[str]:
    """Ten human answers: most say `answer` (sometimes spelled differently), some disagree."""
    agreement = rng.choice([10, 9, 8, 7, 6, 4])
    out = []
    for i in range(10):
        if i < agreement:
            variants = VARIANTS.get(answer)
            out.append(rng.choice(variants) if variants and rng.random() < 0.15 else answer)
        else:
            out.append(rng.choice(pool))
    rng.shuffle(out)
    return out


def _tail_word(j: int) -> str:
    """The J-th answer of the long tail: three syllables (70^3 distinct words, none a VQA normalisation folds)."""
    n = len(_SYLLABLES)
    return _SYLLABLES[j // (n * n) % n] + _SYLLABLES[j // n % n] + _SYLLABLES[j % n]


def generate_vqa(n: int, seed: int, subtype: str, first_image: int,
                 release_shape: bool = False) -> tuple[dict, dict]:
    """(questions file, annotations file) of `n` questions in the official VQA v2 layout (`release_shape`: the
    module's docstring)."""
    rng = random.Random(seed)
    type_names = sorted(TYPES)
    # A skewed answer prior per question type: weights 1/rank over a shuffled pool.
    priors = {}
    for t in type_names:
        pool = list(TYPES[t][1])
        if release_shape and TYPES[t][0] == "number":
            pool += [str(k) for k in range(61) if str(k) not in pool]
        rng.shuffle(pool)
        priors[t] = (pool, list(accumulate(1.0 / (r + 1) ** (1.5 if release_shape else 1.0)
                                           for r in range(len(pool)))))
    tail = [_tail_word(j) for j in range(TAIL_ANSWERS)] if release_shape else []
    tail_weights = list(accumulate(1.0 / (r + 1) ** TAIL_EXPONENT for r in range(len(tail))))
    per_image = [5, 5, 6] if release_shape else [3, 4, 5]
    questions, annotations = [], []
    image, k = first_image, 0
    for _ in range(n):
        if k == 0 or k >= rng.choice(per_image):
            image, k = image + rng.randint(1, 7), 0
        qid = image * 1000 + k
        k += 1
        t = rng.choice(type_names)
        pool, weights = priors[t]
        if release_shape and TYPES[t][0] == "other" and rng.random() < TAIL_SHARE:
            pool, weights = tail, tail_weights
        answer = rng.choices(pool, cum_weights=weights)[0]
        text = f"{t.capitalize()} {rng.choice(NOUNS)}{rng.choice(['', ' ' + rng.choice(NOUNS)])}"
        text += (f" in the {rng.choice(NOUNS)}" if rng.random() < 0.6 else "") if release_shape else ""
        text += "?"
        questions.append({"image_id": image, "question": text, "question_id": qid})
        answers = _answers(rng, answer, pool)
        annotations.append({
            "question_type": t, "multiple_choice_answer": answer,
            "answers": [{"answer": a, "answer_confidence": rng.choice(["yes", "yes", "maybe", "no"]),
                         "answer_id": i + 1} for i, a in enumerate(answers)],
            "image_id": image, "answer_type": TYPES[t][0], "question_id": qid})
    header = {"info": INFO, "license": LICENSE, "data_subtype": subtype}
    return ({"info": INFO, "task_type": "Open-Ended", "data_type": "mscoco", "license": LICENSE,
             "data_subtype": subtype, "questions": questions}, {**header, "annotations": annotations})


def write_vqa_v2(folder: Path, n_train: int, n_val: int, seed: int = 0, release_shape: bool = False) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for subtype, n, offset in (("train2014", n_train, 0), ("val2014", n_val, 1)):
        q, a = generate_vqa(n, seed + offset, subtype, first_image=offset * 10 * (n_train + n_val),
                            release_shape=release_shape)
        for name, content in zip(v2_files(subtype), (q, a)):
            (folder / name).write_bytes(msgspec.json.encode(content))
            written.append(folder / name)
    return written


def write_vqa_cp(folder: Path, v2_folder: Path) -> list[Path]:
    """A VQA-CP v2-format pair made from the v2 sample: a group goes to test when its answer's first
    letter is in the second half of the alphabet (a stand-in split; the format is what matters)."""
    folder.mkdir(parents=True, exist_ok=True)
    split_q: dict[str, list] = {"train": [], "test": []}
    split_a: dict[str, list] = {"train": [], "test": []}
    for subtype in ("train2014", "val2014"):
        qname, aname = v2_files(subtype)
        qs = msgspec.json.decode((v2_folder / qname).read_bytes())["questions"]
        ans = msgspec.json.decode((v2_folder / aname).read_bytes())["annotations"]
        for q, a in zip(qs, ans):
            split = "test" if a["multiple_choice_answer"][:1] >= "m" else "train"
            split_q[split].append({**q, "coco_split": subtype})
            split_a[split].append({**a, "coco_split": subtype})
    written = []
    for split in ("train", "test"):
        for name, content in zip(cp_files(split), (split_q[split], split_a[split])):
            (folder / name).write_bytes(msgspec.json.encode(content))
            written.append(folder / name)
    return written


def write_coco_images(folder: Path, v2_folder: Path) -> list[Path]:
    """Small pictures in the COCO layout (`<subtype>/COCO_<subtype>_<image id:012d>.jpg`) for every image
    of the v2 sample, so that models reading images (`--images`) run on the samples."""
    written = []
    for subtype in ("train2014", "val2014"):
        questions = msgspec.json.decode((v2_folder / v2_files(subtype)[0]).read_bytes())["questions"]
        for image_id in sorted({q["image_id"] for q in questions}):
            written.append(write_picture(folder / subtype / f"COCO_{subtype}_{image_id:012d}.jpg", image_id))
    return written


def write_vqa_samples(root: Path, scale: int = 1) -> list[Path]:
    written = write_vqa_v2(root / "vqa_v2", 800 * scale, 400 * scale)
    written += write_coco_images(root / "coco", root / "vqa_v2")
    return written + write_vqa_cp(root / "vqa_cp", root / "vqa_v2")
