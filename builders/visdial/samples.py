"""Synthetic VisDial v1.0 files in the release format: dialogs with pooled questions and answers,
100 answer options per round, and dense relevance for one round per val image.

The pools grow as the release's do: most VisDial answers are free-form phrases said once, so a split's
answer pool holds hundreds of thousands of strings and the option indices run to six digits. A round's
100 options have the shape of the release's candidates (Das et al., CVPR 2017, the task's evaluation
protocol): the ground truth, 30 popular answers and 69 answers of other rounds (the release takes 50 of
those from the rounds of similar questions and 19 at random; here all are drawn at random).
"""

from __future__ import annotations

import random
from pathlib import Path

import msgspec

from builders.sources.pictures import write_pictures

NOUNS = ["dog", "cat", "man", "woman", "car", "bus", "tree", "table", "plate", "kite", "boat", "horse", "sign", "cup"]
COLORS = ["white", "black", "red", "blue", "green", "brown", "gray", "yellow"]
QUESTIONS = ([f"is the {n} {c}" for n in NOUNS for c in COLORS[:3]] + [f"what color is the {n}" for n in NOUNS]
             + [f"how many {n}s are there" for n in NOUNS] + [f"is there a {n}" for n in NOUNS]
             + ["is it sunny", "is this indoors", "are there people", "can you see the sky", "is it daytime"])
ANSWERS = (["yes", "no", "yes it is", "no it is not", "i think so", "i can't tell", "not sure", "nope", "yep"]
           + [str(k) for k in range(13)] + [f"{k} {n}s" for k in range(2, 6) for n in NOUNS]
           + [f"it is {c}" for c in COLORS] + [c for c in COLORS]
           + [f"{c} and {d}" for c in COLORS for d in COLORS if c < d]
           + [f"there is a {n}" for n in NOUNS] + [f"no {n}s" for n in NOUNS])
YES_NO = set(ANSWERS[:9])
PLACES = ["on the left", "near the window", "in the back", "by the road", "on the grass", "under the tree",
          "next to the table", "in the water", "behind the fence", "in the corner", "on the street", "far away"]
SIZES = ["big", "small", "old", "young", "tall", "short", "little", "large", "tiny", "huge"]
LEADS = ["i think", "it looks like", "maybe", "i see", "there is", "probably", "it seems", "looks like", "just"]
POPULAR, FREE_FORM = 30, 0.3  # popular options per round; share of rounds whose answer is a phrase of its own


def _free_question(rng: random.Random) -> str:
    return (f"{rng.choice(['is the', 'what is the', 'where is the', 'does the', 'can you see the'])} "
            f"{rng.choice(SIZES)} {rng.choice(COLORS)} {rng.choice(NOUNS)} {rng.choice(PLACES)}")


def _free_answer(rng: random.Random) -> str:
    return f"{rng.choice(LEADS)} a {rng.choice(COLORS)} {rng.choice(NOUNS)} {rng.choice(PLACES)} {rng.randrange(100)}"


def _dialog(rng: random.Random, image_id: int, questions: dict, answers: dict) -> dict:
    noun, color = rng.choice(NOUNS), rng.choice(COLORS)
    popular = [answers.setdefault(x, len(answers)) for x in ANSWERS]
    rounds = []
    for _ in range(10):
        q = rng.choice(QUESTIONS) if rng.random() < 0.3 else _free_question(rng)
        if rng.random() < FREE_FORM:
            a = _free_answer(rng)
        else:
            a = rng.choice(ANSWERS[:9]) if q.startswith(("is", "are", "can", "does")) else rng.choice(ANSWERS[9:])
        qi, ai = questions.setdefault(q, len(questions)), answers.setdefault(a, len(answers))
        options = {ai, *rng.sample(popular, POPULAR)}
        while len(options) < 100:
            options.add(rng.randrange(len(answers)))
        options = sorted(options)
        rng.shuffle(options)
        rounds.append({"question": qi, "answer": ai, "answer_options": options, "gt_index": options.index(ai)})
    return {"image_id": image_id, "caption": f"a {color} {noun} in a busy street", "dialog": rounds}


def _dense(rng: random.Random, dialog: dict, answer_text: list[str]) -> dict:
    """One round's relevance: the ground truth and answers of the same kind score, the rest 0."""
    r = rng.randint(1, 10)
    rnd = dialog["dialog"][r - 1]
    gt_yes_no = answer_text[rnd["answer"]] in YES_NO
    relevance = []
    for k, option in enumerate(rnd["answer_options"]):
        same_kind = (answer_text[option] in YES_NO) == gt_yes_no
        relevance.append(1.0 if k == rnd["gt_index"] else rng.choice([0.0, 0.2, 0.4, 0.6]) if same_kind and
                         rng.random() < 0.3 else 0.0)
    return {"image_id": dialog["image_id"], "round_id": r, "gt_relevance": relevance}


def write_visdial(folder: Path, images: dict[str, int], seed: int = 0) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    written = []
    first = 1000
    for split, n in images.items():
        questions: dict[str, int] = {}
        answers: dict[str, int] = {}
        dialogs = [_dialog(rng, first + 7 * i, questions, answers) for i in range(n)]
        first += 7 * n + 1
        answer_text = sorted(answers, key=answers.get)
        content = {"version": "1.0", "split": f"{split}2018",
                   "data": {"dialogs": dialogs, "questions": sorted(questions, key=questions.get),
                            "answers": answer_text}}
        path = folder / f"visdial_1.0_{split}.json"
        path.write_bytes(msgspec.json.encode(content))
        written.append(path)
        if split == "val":
            dense = folder / "visdial_1.0_val_dense_annotations.json"
            dense.write_bytes(msgspec.json.encode([_dense(rng, d, answer_text) for d in dialogs]))
            written.append(dense)
            # the release's val images: VisualDialog_val2018/VisualDialog_val2018_<image id:012d>.jpg
            written += write_pictures(folder / "VisualDialog_val2018",
                                      [f"VisualDialog_val2018_{d['image_id']:012d}.jpg" for d in dialogs])
    return written


def write_visdial_samples(root: Path, scale: int = 1) -> list[Path]:
    return write_visdial(root / "visdial", {"train": 30 * scale, "val": 20 * scale})
