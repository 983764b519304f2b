"""Synthetic PMR `val-ori.jsonl` samples in the authors' format (JSON lines: total_id, movie, objects,
img_fn, img_id, metadata_fn, premise and answer_choices as token lists whose integer lists index
`objects`, category, answer_types, answer_label, pal_id).

Premises (a premise template with one of `contexts` endings) repeat across movies, some with their
persons in another order, and actions come from varied pools, so PMR-P finds pairs whose correct
actions differ (and re-tags some paired actions). More contexts make premises rarer: the PMR-size
bench uses enough of them for a few thousand pairs, as Table 7's 3,502.
"""

from __future__ import annotations

import random
from pathlib import Path

import msgspec

from builders.sources.pictures import write_pictures

# (category, premise with P / Q for two persons); actions are built from VERBS and OBJECTS.
PREMISES = [("character", ["P", "is", "very", "angry", "with", "Q", "."]),
            ("character", ["P", "is", "a", "kind", "and", "generous", "person", "."]),
            ("relationship", ["P", "and", "Q", "are", "in", "a", "good", "relationship", "."]),
            ("mood", ["P", "is", "extremely", "tired", "after", "work", "."]),
            ("mood", ["P", "feels", "nervous", "about", "the", "meeting", "."]),
            ("relationship", ["P", "is", "the", "boss", "of", "Q", "."])]
VERBS = ["will hug", "will shout at", "will thank", "will ignore", "will follow", "will push", "will call",
         "will smile at", "will argue with", "will wave to"]
PLACES = ["in the kitchen", "near the door", "on the street", "at the party", "in the office", "by the window",
          "under the tree", "at the table"]
MOVIES = [f"{3000 + k}_MOVIE_{chr(65 + k)}" for k in range(20)]
CONTEXT_WORDS = ["today", "again", "at home", "at the station", "since the accident", "in the morning", "tonight",
                 "at the wedding", "after the phone call", "during the storm", "at school", "on the train"]


ALONE = ["will sit down", "will leave", "will fall asleep", "will start crying", "will read a letter"]


def _action(rng: random.Random, p: int, q: int) -> list:
    """An action of P towards Q, or of P alone (then a paired action may have its tag re-written)."""
    if rng.random() < 0.5:
        return [[p], *rng.choice(ALONE).split(), *rng.choice(PLACES).split(), "."]
    return [[p], *rng.choice(VERBS).split(), [q], *rng.choice(PLACES).split(), "."]


def _context(k: int) -> list[str]:
    """Ending number k of a premise: one of CONTEXT_WORDS, then pairs of them for larger k."""
    words = CONTEXT_WORDS
    if k < len(words):
        return words[k].split()
    a, b = divmod(k - len(words), len(words))
    return f"{words[a % len(words)]} and {words[b]}".split()


def generate_pmr(n: int, seed: int, contexts: int = 1) -> list[dict]:
    """n samples; each premise gets one of `contexts` endings (1: none, so premises repeat most)."""
    rng = random.Random(seed)
    records = []
    for k in range(n):
        movie = MOVIES[k % len(MOVIES)]
        objects = ["person", "person", rng.choice(["cup", "chair", "handbag", "dog"]), "person"]
        p, q = rng.choice([(0, 1), (1, 0), (3, 0)])
        category, premise = PREMISES[rng.randrange(len(PREMISES))]
        ending = rng.randrange(contexts)
        text = premise if ending == 0 else premise[:-1] + _context(ending - 1) + ["."]
        tokens = [[p] if t == "P" else [q] if t == "Q" else t for t in text]
        actions: list[list] = []
        while len(actions) < 4:
            action = _action(rng, p, q) if len(actions) < 2 else _action(rng, q, p)
            if action not in actions:
                actions.append(action)
        order = list(range(4))
        rng.shuffle(order)
        types = ["Action-True", "Action-False", "Distractor1", "Distractor2"]
        stem = f"lsmdc_{movie}/{movie}_00.{k:02d}.10.000-00.{k:02d}.12.000@0"
        records.append({"total_id": 500 + 7 * k, "movie": movie, "objects": objects, "img_fn": f"{stem}.jpg",
                        "img_id": f"val-{k}", "metadata_fn": f"{stem}.json", "premise": tokens, "category": category,
                        "answer_choices": [actions[i] for i in order], "answer_types": [types[i] for i in order],
                        "answer_label": order.index(0), "pal_id": -1})
    return records


def write_pmr_samples(root: Path, scale: int = 1) -> list[Path]:
    out = root / "pmr"
    out.mkdir(parents=True, exist_ok=True)
    path = out / "val-ori.jsonl"
    records = generate_pmr(72 * scale, seed=13)
    path.write_bytes(b"".join(msgspec.json.encode(r) + b"\n" for r in records))
    return [path] + write_pictures(out, [r["img_fn"] for r in records])  # VCR's images, by img_fn
