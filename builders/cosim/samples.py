"""Synthetic CoSIm `val.json` in the authors' format (a JSON list; each example with question, change,
answer_choices, answer_label, answer_orig, img_fn, folder, type).

Questions and changes repeat across images (CoSIm reuses generic ones: "Is the man happy?"), and
answers name varied objects and reasons, so both COSIM-Q (equivalent questions) and COSIM-C
(equivalent changes) find pairs whose correct answers differ.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from builders.sources.pictures import write_pictures

QUESTIONS = ["Is the man happy?", "Is it safe to cross the street?", "Will the dog get wet?",
             "Can the children play outside?", "Is the woman going to eat?", "Is the room warm?",
             "Will the bus stop here?", "Is the kitchen clean?"]
CHANGES = ["Add heavy rain falling from the sky.", "Remove all the people from the scene.",
           "Replace the sun with a full moon.", "Add a large fire in the background.",
           "Make the floor covered with snow.", "Add a red traffic light at the corner.",
           "Remove the food from the table.", "Turn off every lamp in the room."]
SUBJECTS = ["the old fisherman", "a tired waiter", "the little girl", "a police officer", "the baker",
            "a tourist with a camera", "the farmer", "a nurse in scrubs", "the bus driver", "a street musician"]
REASONS = ["is holding a broken umbrella", "is standing next to a pile of wet leaves", "has a blanket on the bench",
           "is looking at an empty plate", "points at the dark window", "sits beside a warm oven",
           "is waving at the crowded station", "carries a bucket of sand", "is reading a soaked newspaper",
           "wears a thick wool coat", "is cleaning the greasy stove", "leans on a muddy bicycle"]


def _answer(rng: random.Random, yes: bool) -> str:
    return f"{'yes' if yes else 'no'}, because {rng.choice(SUBJECTS)} {rng.choice(REASONS)}."


def generate_cosim(n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    examples = []
    for k in range(n):
        choices: list[str] = []
        while len(choices) < 4:
            text = _answer(rng, len(choices) % 2 == 0)
            if text not in choices:
                choices.append(text)
        rng.shuffle(choices)
        examples.append({"answer_choices": choices, "answer_label": rng.randrange(4),
                         "answer_orig": _answer(rng, rng.random() < 0.5).capitalize(),
                         "change": rng.choice(CHANGES), "folder": f"genome_{1 + k % 12}",
                         "img_fn": f"{2300000 + 37 * k}.jpg", "question": rng.choice(QUESTIONS), "type": "hamlet"})
    return examples


def write_cosim_samples(root: Path, scale: int = 1) -> list[Path]:
    out = root / "cosim"
    out.mkdir(parents=True, exist_ok=True)
    path = out / "val.json"
    examples = generate_cosim(60 * scale, seed=11)
    path.write_text(json.dumps(examples, indent=1) + "\n")
    # the authors' image layout: <folder>/<img_fn>, here beside val.json
    return [path] + write_pictures(out, [f"{e['folder']}/{e['img_fn']}" for e in examples])
