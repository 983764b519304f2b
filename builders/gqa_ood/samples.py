"""Synthetic GQA v1.2 balanced-question files in the native format.

The records carry every field of the real release (semantic program, entailed/equivalent ids,
groups, types, annotations, ...) in the release's key order. Local groups are drawn from a
Zipf law over question families x concepts and each group has its own, more or less skewed,
answer distribution, so that the GQA-OOD entropy filter keeps a realistic minority of groups.
The same generator serves the embedded samples (`vlbench sample-sources`) and the val-size
benchmark input (`scripts/bench_gqa_ood_build.py`).
"""

from __future__ import annotations

import bisect
import itertools
import random
import zlib
from dataclasses import dataclass
from pathlib import Path

import msgspec

from builders.sources.pictures import write_pictures

OBJECTS = (
    "table chair shirt car tree man woman building window sign pole wall door plate cup bag "
    "horse dog cat bike bus train truck boat umbrella bench lamp bowl bottle pillow couch bed "
    "fence grass sky cloud water road sidewalk helmet jacket hat glove shoe skateboard surfboard "
    "kite giraffe zebra elephant cow sheep bird pizza cake donut banana orange apple sandwich "
    "laptop phone keyboard mouse clock vase flower plant rock mountain beach field snow leaf "
    "branch wheel tire mirror curtain towel sink toilet shelf book box basket blanket rug"
).split()
COLORS = "white black blue brown red green gray yellow silver orange pink tan purple gold beige dark".split()
MATERIALS = "wood metal plastic glass concrete brick stone leather".split()
RELATIONS = "on in near behind wearing holding above under beside".split()
PLACES = "street field beach kitchen bedroom room park parking lot living room ocean".split()
CATEGORIES = {
    "furniture": "chair table couch bed shelf desk cabinet drawer".split(),
    "vehicle": "car bus truck train bike motorcycle boat van".split(),
    "animal": "dog cat horse cow sheep bird giraffe zebra elephant".split(),
    "clothing": "shirt jacket hat glove coat pants dress shorts".split(),
    "food": "pizza cake donut banana sandwich apple bread salad".split(),
}


@dataclass(frozen=True)
class _Family:
    """A question template: one GQA detailed type with its group naming and answer vocabulary."""

    name: str
    weight: float
    structural: str
    semantic: str
    detailed: str


FAMILIES = (
    _Family("color", 6.0, "query", "attr", "objColor"),
    _Family("rel", 5.0, "query", "rel", "relS"),
    _Family("category", 4.0, "query", "cat", "categoryThat"),
    _Family("material", 2.0, "query", "attr", "materialObj"),
    _Family("place", 0.6, "query", "global", "place"),
    _Family("verify", 4.0, "verify", "attr", "verifyAttr"),
    _Family("choose", 3.0, "choose", "attr", "chooseAttr"),
    _Family("logical", 2.0, "logical", "obj", "logicOr"),
    _Family("compare", 1.0, "compare", "attr", "sameColor"),
)


class _Zipf:
    """Draws indices 0..n-1 with probability proportional to 1 / (k + 1) ** s."""

    def __init__(self, n: int, s: float):
        self.cum = list(itertools.accumulate(1.0 / (k + 1) ** s for k in range(n)))

    def draw(self, rng: random.Random) -> int:
        return bisect.bisect_left(self.cum, rng.random() * self.cum[-1])


class GQASampleGenerator:
    """Deterministic generator of GQA-like records for one split."""

    def __init__(self, seed: int, n_images: int, concept_scale: int):
        self.rng = random.Random(seed)
        self.seed = seed
        self.n_images = n_images
        suffixes = [""] + [f"{k}" for k in range(2, concept_scale + 1)]
        # Larger splits see more distinct concepts, like the real val split (~37K local groups).
        self.objects = [o + s for s in suffixes for o in OBJECTS]
        self.attrs = COLORS + MATERIALS
        self.obj_zipf = _Zipf(len(self.objects), 1.05)
        self.attr_zipf = _Zipf(len(self.attrs), 0.8)
        self.family_cum = list(itertools.accumulate(f.weight for f in FAMILIES))
        self.group_answers: dict[str, tuple[list[str], list[float]]] = {}

    def _answers_of(self, local: str, vocabulary: list[str]) -> tuple[list[str], list[float]]:
        """The group's own answer law: a permuted vocabulary with a group-specific Zipf skew."""
        cached = self.group_answers.get(local)
        if cached is None:
            grng = random.Random(zlib.crc32(f"{self.seed}/{local}".encode()))
            answers = list(vocabulary)
            grng.shuffle(answers)
            skew = grng.choice((0.2, 0.6, 1.0, 1.6, 2.5, 4.0))
            cached = (answers, list(itertools.accumulate(1.0 / (k + 1) ** skew for k in range(len(answers)))))
            self.group_answers[local] = cached
        return cached

    def _draw_answer(self, local: str, vocabulary: list[str]) -> str:
        answers, cum = self._answers_of(local, vocabulary)
        return answers[bisect.bisect_left(cum, self.rng.random() * cum[-1])]

    def record(self, qid: str) -> dict:
        rng = self.rng
        fam = FAMILIES[bisect.bisect_left(self.family_cum, rng.random() * self.family_cum[-1])]
        obj = self.objects[self.obj_zipf.draw(rng)]
        attr = self.attrs[self.attr_zipf.draw(rng)]
        oid = str(rng.randrange(100000, 3000000))
        glob: str | None = None
        if fam.name == "color":
            local, glob, q = f"10q-{obj}_color", "color", f"What color is the {obj}?"
            answer = self._draw_answer(local, COLORS)
            full = f"The {obj} is {answer}."
            program = [("select", f"{obj} ({oid})", []), ("query", "color", [0])]
        elif fam.name == "rel":
            rel = RELATIONS[rng.randrange(len(RELATIONS))]
            local, glob, q = f"14-{obj}_{rel},o", "thing", f"What is the {obj} {rel}?"
            answer = self._draw_answer(local, OBJECTS[:40])
            full = f"The {obj} is {rel} the {answer}."
            program = [("select", f"{obj} ({oid})", []), ("relate", f"_,{rel},o ({oid})", [0]),
                       ("query", "name", [1])]
        elif fam.name == "category":
            cat = list(CATEGORIES)[rng.randrange(len(CATEGORIES))]
            local, glob, q = f"12q-{cat}_{attr}", cat, f"What kind of {cat} is {attr}?"
            answer = self._draw_answer(local, CATEGORIES[cat])
            full = f"The {cat} is a {answer}."
            program = [("select", f"{cat} ({oid})", []), ("filter", attr, [0]), ("query", "name", [1])]
        elif fam.name == "material":
            local, glob, q = f"10q-{obj}_material", "material", f"What is the {obj} made of?"
            answer = self._draw_answer(local, MATERIALS)
            full = f"The {obj} is made of {answer}."
            program = [("select", f"{obj} ({oid})", []), ("query", "material", [0])]
        elif fam.name == "place":
            local, glob, q = "02q-place", "place", "Which place is it?"
            answer = self._draw_answer(local, PLACES)
            full = f"It is a {answer}."
            program = [("select", "scene", []), ("query", "place", [0])]
        elif fam.name in ("verify", "logical", "compare"):
            local = {"verify": f"06-{obj}_{attr}", "logical": f"05-{obj}_{attr}",
                     "compare": f"13-{obj}_color"}[fam.name]
            q = {"verify": f"Is the {obj} {attr}?",
                 "logical": f"Are there {obj}s or {attr} things in the picture?",
                 "compare": f"Do the {obj} and the wall have the same color?"}[fam.name]
            answer = self._draw_answer(local, ["yes", "no"])
            full = "Yes, it is." if answer == "yes" else "No, it is not."
            program = [("select", f"{obj} ({oid})", []), (fam.name, attr, [0])]
        else:  # choose
            other = COLORS[(COLORS.index(attr) + 1) % len(COLORS)] if attr in COLORS else "metal"
            local, glob, q = f"09-{obj}_{attr}", attr, f"Is the {obj} {attr} or {other}?"
            answer = self._draw_answer(local, [attr, other])
            full = f"The {obj} is {answer}."
            program = [("select", f"{obj} ({oid})", []), ("choose color", f"{attr}|{other}", [0])]
        if rng.random() < 0.002:  # the release has a few questions without a local group
            local = None
        semantic = [{"operation": op, "dependencies": deps, "argument": arg} for op, arg, deps in program]
        image = rng.randrange(self.n_images)
        return {
            "semantic": semantic,
            "entailed": [str(int(qid) + k) for k in (1, 2) if rng.random() < 0.5],
            "equivalent": [qid],
            "question": q,
            "imageId": f"n{image * 7 + 3:06d}" if image % 5 == 0 else str(2_300_000 + image),
            "isBalanced": True,
            "groups": {"global": glob, "local": local},
            "answer": answer,
            "semanticStr": "->".join(f"{op}: {arg} {deps}" for op, arg, deps in program),
            "annotations": {"answer": {"0": oid} if fam.structural == "query" else {},
                            "question": {"3": oid}, "fullAnswer": {"1": oid}},
            "types": {"detailed": fam.detailed, "semantic": fam.semantic, "structural": fam.structural},
            "fullAnswer": full,
        }


def question_id(split_index: int, k: int) -> str:
    """GQA-style string ids; every seventh id keeps a leading zero, as some real ids do."""
    qid = f"{split_index}{k:07d}"
    return "0" + qid if k % 7 == 3 else qid


def generate_split(split_index: int, n_questions: int, seed: int) -> dict[str, dict]:
    """Records of one split keyed by question id (a JSON object, as the release)."""
    concept_scale = max(1, n_questions // 1500)
    gen = GQASampleGenerator(seed=seed, n_images=max(8, n_questions // 13), concept_scale=concept_scale)
    return {qid: gen.record(qid) for qid in (question_id(split_index, k) for k in range(n_questions))}


SPLIT_SIZES = {"train": 6000, "val": 6000, "testdev": 3000}


def write_gqa_samples(root: Path, scale: int = 1) -> list[Path]:
    """Write `ROOT/gqa/{train,val,testdev}_balanced_questions.json` (compact, as the release) and a
    picture per image, `ROOT/gqa/images/<imageId>.jpg` (the release's images folder)."""
    out = root / "gqa"
    out.mkdir(parents=True, exist_ok=True)
    written, images = [], set()
    for index, (split, size) in enumerate(SPLIT_SIZES.items(), start=1):
        path = out / f"{split}_balanced_questions.json"
        records = generate_split(index, size * scale, seed=1000 + index)
        path.write_bytes(msgspec.json.encode(records))
        written.append(path)
        images.update(r["imageId"] for r in records.values())
    return written + write_pictures(out / "images", [f"{image}.jpg" for image in images])
