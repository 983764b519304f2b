"""Synthetic Social-IQ QA files (`q/a/i` lines, 6 questions x (4 correct + 3 incorrect)) and a folds file
in the CMU-MultimodalSDK layout. Like the real data (Gat et al., NeurIPS 2021, §4.2.2), correct answers lean positive
and incorrect ones negative, more often than not."""

from __future__ import annotations

import json
import random
import string
from pathlib import Path

QUESTIONS = ["Why is the man smiling?", "How does the woman feel about the news?", "What is the mood of the room?",
             "Why does the speaker pause?", "How do the two friends react to each other?",
             "Is the host comfortable with the guest?", "Why does the girl look away?",
             "How does the audience respond to the joke?"]
POSITIVE = ["He is happy because his friend arrived.", "She is excited and grateful for the good news.",
            "The room feels warm and friendly.", "They laugh together and enjoy the moment.",
            "The host is relaxed and welcoming.", "The audience loves the joke and cheers.",
            "She feels proud of her work.", "He is calm and confident."]
NEGATIVE = ["He is angry and upset about the insult.", "She is uncomfortable and nervous.",
            "The room is tense and awkward.", "They argue and ignore each other.",
            "The host is annoyed by the rude guest.", "The audience is bored and silent.",
            "She feels ashamed and sad.", "He is afraid of being caught."]
NEUTRAL = ["He looks at the camera.", "She is talking about her trip.", "They are sitting at a table.",
           "The host asks another question.", "The girl looks at her phone.", "The man points at the screen."]


def _video_id(rng: random.Random) -> str:
    return "".join(rng.choice(string.ascii_letters + string.digits + "-_") for _ in range(11))


def _qa(rng: random.Random) -> str:
    lines = []
    for k, question in enumerate(rng.sample(QUESTIONS, 6), start=1):
        lines.append(f"q{k}: {question}")
        for _ in range(4):
            lines.append(f"a{k}: {rng.choice(POSITIVE if rng.random() < 0.6 else NEUTRAL + NEGATIVE)}")
        for _ in range(3):
            lines.append(f"i{k}: {rng.choice(NEGATIVE if rng.random() < 0.6 else NEUTRAL + POSITIVE)}")
    return "\n".join(lines) + "\n"


def write_socialiq(folder: Path, train: int, valid: int, unassigned: int, seed: int = 0) -> list[Path]:
    rng = random.Random(seed)
    ids = sorted({_video_id(rng) for _ in range(3 * (train + valid + unassigned))})[: train + valid + unassigned]
    rng.shuffle(ids)
    (folder / "qa").mkdir(parents=True, exist_ok=True)
    written = []
    for video in ids:
        path = folder / "qa" / f"{video}.txt"
        path.write_text(_qa(rng))
        written.append(path)
    folds = {"source": "vlbench synthetic sample", "standard_train_fold": ids[:train],
             "standard_valid_fold": ids[train:train + valid]}
    path = folder / "socialiq_std_folds.json"
    path.write_text(json.dumps(folds, indent=1) + "\n")
    return written + [path]


def write_socialiq_samples(root: Path, scale: int = 1) -> list[Path]:
    return write_socialiq(root / "socialiq", 24 * scale, 12 * scale, 3)
