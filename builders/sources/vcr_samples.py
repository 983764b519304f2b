"""Synthetic VCR v1.0 `val.jsonl` records in the native format (23 fields, the release's key order).

Questions come from paraphrase clusters ("Why is [x] smiling?" / "Why is [x] smiling right now?")
spread over many movies, answers and rationales from varied pools, so pair mining finds pairs;
every record satisfies the release's invariants (adversarial-matching order, sources, indices).
"""

from __future__ import annotations

import random
from pathlib import Path

import msgspec

from builders.sources.pictures import write_pictures

# (cluster of paraphrased questions, answers, rationales); X and Y are person references.
CLUSTERS = [
    (["Why is X smiling ?", "Why is X smiling right now ?", "Why does X smile ?"],
     ["X just heard a funny joke .", "X is happy to see Y .", "X won the card game .", "X got good news on the phone .",
      "X is laughing at the dog .", "X is proud of the painting ."],
     ["X is laughing with Y at the table .", "X is holding a phone and looks relieved .",
      "There are cards on the table in front of X .", "Y is hugging X warmly ."]),
    (["What will X do next ?", "What is X going to do next ?", "What will X do after this ?"],
     ["X will open the door .", "X will sit down on the couch .", "X will drink the coffee .",
      "X will leave the room .", "X will answer the phone .", "X will shake hands with Y ."],
     ["X is reaching for the door handle .", "X is standing next to the couch and looks tired .",
      "X is holding a cup and raising it .", "X has a coat on and faces the exit ."]),
    (["Why is X running ?", "Why is X running so fast ?", "Why is X in a hurry ?"],
     ["X is late for the train .", "X is chasing the thief .", "X is running away from the police .",
      "X is trying to catch the bus .", "X is escaping the fire ."],
     ["The train is about to leave the station .", "A man ahead of X is carrying a stolen bag .",
      "Police officers are behind X .", "Smoke is coming out of the building ."]),
    (["How did X get hurt ?", "How was X injured ?", "How did X hurt his arm ?"],
     ["X fell off the horse .", "X was in a fight with Y .", "X crashed the car .", "X slipped on the ice ."],
     ["X has mud on his clothes and a horse is nearby .", "Y has bruised knuckles .",
      "There is a wrecked car behind X .", "The road is covered with ice ."]),
    (["What is X holding ?", "What does X have in his hand ?"],
     ["X is holding a letter .", "X is holding a gun .", "X is holding flowers for Y .", "X is holding a map ."],
     ["X is reading the paper in his hand .", "X is pointing it at Y .", "Y is smiling at the bouquet .",
      "X is studying the streets on the paper ."]),
]
OTHERS = ["chair", "cup", "dog", "car", "tie", "bottle", "book", "horse"]
# Phrases appended to responses (and some queries) so that, like real VCR text, most strings are distinct.
PLACES = ["in the kitchen", "at the party", "on the street", "in the office", "near the window", "at the bar",
          "in the hallway", "on the train", "by the river", "in the courtroom", "at the table", "in the garden"]
MANNERS = ["quietly", "slowly", "with a grin", "without looking back", "in a rush", "nervously", "calmly",
           "with both hands", "for a long time", "again", "as usual", "in front of everyone"]


def _vary(text: str, rng: random.Random, chance: float) -> str:
    """Insert a place and/or manner phrase before the final punctuation, with the given chance."""
    if rng.random() >= chance:
        return text
    body, end = text[:-2], text[-2:]
    extra = [rng.choice(PLACES)] + ([rng.choice(MANNERS)] if rng.random() < 0.7 else [])
    return f"{body} {' '.join(extra)}{end}"


def _tokens(text: str, people: dict[str, int]) -> list:
    return [[people[w]] if w in people else w for w in text.split()]


def vcr_record(k: int, rng: random.Random, n_movies: int, query_variation: float, split: str = "val") -> dict:
    cluster = CLUSTERS[rng.randrange(len(CLUSTERS))]
    questions, answers, rationales = cluster
    n_people = rng.randint(2, 4)
    objects = ["person"] * n_people + rng.sample(OTHERS, 2)
    rng.shuffle(objects)
    persons = [i for i, o in enumerate(objects) if o == "person"]
    people = {"X": persons[0], "Y": persons[1]}
    question = _vary(rng.choice(questions), rng, query_variation)
    answer_pool = [_vary(a, rng, 0.8) for a in rng.sample(answers, 4)]
    rationale_pool = [_vary(r, rng, 0.9) for r in rng.sample(rationales, 4)]
    answer_label, rationale_label = rng.randrange(4), rng.randrange(4)
    movie = f"{rng.randrange(n_movies):04d}_MOVIE_{rng.randrange(n_movies)}"
    match_index = k
    answer_match = [0] + rng.sample([1, 2, 3], 3)
    answer_match = answer_match[4 - answer_label:] + answer_match[:4 - answer_label]
    rationale_match = [0] + rng.sample([1, 2, 3], 3)
    rationale_match = rationale_match[4 - rationale_label:] + rationale_match[:4 - rationale_label]
    others = lambda: [rng.randrange(100000) for _ in range(4)]  # noqa: E731
    answer_sources, rationale_sources = others(), others()
    answer_sources[answer_label] = rationale_sources[rationale_label] = match_index
    plain = lambda t: t.replace("X", str(people["X"] + 1)).replace("Y", str(people["Y"] + 1))  # noqa: E731
    clip = f"lsmdc_{movie}/{movie}_{k:05d}@0"
    return {
        "movie": movie, "objects": objects, "interesting_scores": [rng.randrange(-1, 3)],
        "answer_likelihood": rng.choice(["likely", "possible"]),
        "img_fn": f"{clip}.jpg", "metadata_fn": f"{clip}.json",
        "answer_orig": plain(answer_pool[answer_label]), "question_orig": plain(question),
        "rationale_orig": plain(rationale_pool[rationale_label]),
        "question": _tokens(question, people), "answer_match_iter": answer_match, "answer_sources": answer_sources,
        "answer_choices": [_tokens(a, people) for a in answer_pool], "answer_label": answer_label,
        "rationale_choices": [_tokens(r, people) for r in rationale_pool], "rationale_sources": rationale_sources,
        "rationale_match_iter": rationale_match, "rationale_label": rationale_label,
        "img_id": f"{split}-{k // 3}", "question_number": k % 3, "annot_id": f"{split}-{k}",
        "match_fold": f"{split}-0",
        "match_index": match_index,
    }


def generate_vcr(n: int, seed: int = 0, query_variation: float = 0.3, split: str = "val") -> list[dict]:
    """`query_variation`: share of questions given a place/manner phrase. The samples keep many exact
    repeats (0.3) so a small file yields pairs; a val-size file needs most questions distinct (real VCR
    val gives ~1e5 candidate pairs per type, not the ~1e7 that 30% repeats over 26K items would)."""
    rng = random.Random(seed)
    return [vcr_record(k, rng, max(6, n // 40), query_variation, split) for k in range(n)]


def write_vcr_samples(root: Path, scale: int = 1) -> list[Path]:
    out = root / "vcr"
    out.mkdir(parents=True, exist_ok=True)
    encode = msgspec.json.encode
    written, images = [], []
    for name, records in (("val.jsonl", generate_vcr(160 * scale, seed=3)),
                          ("train.jsonl", generate_vcr(240 * scale, seed=5, split="train"))):
        (out / name).write_bytes(b"".join(encode(r) + b"\n" for r in records))
        written.append(out / name)
        images += [r["img_fn"] for r in records]
    # the release's image folder: vcr1images/<movie>/<clip>.jpg, beside the annotations folder
    return written + write_pictures(root / "vcr1images", images)


# The val-size generator (generate_vcr_matched): words from which every record composes its own question,
# answer and rationale, so that, as in VCR, almost every correct response is a text of its own and the
# distractors are other records' correct responses (Zellers et al., CVPR 2019, §4: adversarial matching).
_ING = ["smiling", "running", "crying", "shouting", "laughing", "frowning", "whispering", "hiding", "waiting",
        "dancing", "staring", "pointing", "kneeling", "sweating", "shaking", "walking", "yelling", "sitting",
        "leaning", "praying", "reading", "writing", "drinking", "eating", "singing", "knocking", "listening",
        "holding", "turning", "nodding"]
_BASE = ["open", "close", "grab", "drop", "read", "sign", "hide", "throw", "carry", "drink", "push", "pull",
         "check", "steal", "return", "examine", "clean", "break", "fix", "buy", "sell", "show", "give", "take",
         "find", "lose", "wrap", "pack", "light", "load"]
_PAST = ["opened", "closed", "grabbed", "dropped", "read", "signed", "hid", "threw", "carried", "drank", "pushed",
         "pulled", "checked", "stole", "returned", "examined", "cleaned", "broke", "fixed", "bought", "sold",
         "showed", "gave", "took", "found", "lost", "wrapped", "packed", "lit", "loaded"]
_OBJ = ["the letter", "a cup of coffee", "the gun", "the old map", "a bottle of wine", "the car keys", "his hat",
        "her purse", "the envelope", "a bouquet of flowers", "the phone", "a newspaper", "the suitcase",
        "the photograph", "a glass of water", "the knife", "the contract", "a cigarette", "the camera", "her coat",
        "the money", "a small box", "the book", "his glasses", "the ring", "a candle", "the bag", "the tray",
        "a piece of paper", "the umbrella", "the ticket", "a plate of food", "the badge", "the radio",
        "the bottle", "the file", "a sandwich", "the lamp", "his jacket", "the door key"]
_PLACE = ["in the kitchen", "at the party", "on the street", "in the office", "near the window", "at the bar",
          "in the hallway", "on the train", "by the river", "in the courtroom", "at the table", "in the garden",
          "at the station", "in the car", "on the stairs", "in the church", "at the hospital", "on the roof",
          "in the classroom", "at the restaurant", "in the bedroom", "on the beach", "in the shop",
          "at the airport", "in the alley"]
_ADJ = ["angry", "worried", "nervous", "happy", "surprised", "confused", "tired", "scared", "embarrassed",
        "relieved", "excited", "annoyed", "sad", "curious", "shocked", "proud", "bored", "suspicious", "calm",
        "upset"]
_MANNER = ["quietly", "slowly", "with a grin", "without looking back", "in a rush", "nervously", "calmly",
           "with both hands", "for a long time", "again", "as usual", "in front of everyone"]


def _pick(rng: random.Random, choices: list[tuple[float, str]]) -> str:
    """One template of `choices` (weight, template) by weight."""
    x, total = rng.random() * sum(w for w, _ in choices), 0.0
    for weight, template in choices:
        total += weight
        if x < total:
            return template
    return choices[-1][1]


def _fill(rng: random.Random, template: str) -> str:
    """Each slot of `template` ({ing}, {base}, {past}, {obj}, {obj2}, {place}, {adj}, {manner}) drawn."""
    return template.format(ing=rng.choice(_ING), base=rng.choice(_BASE), past=rng.choice(_PAST),
                           obj=rng.choice(_OBJ), obj2=rng.choice(_OBJ), place=rng.choice(_PLACE),
                           adj=rng.choice(_ADJ), manner=rng.choice(_MANNER))


# Question templates by reasoning type, weighted in VCR val's proportions (the VCR-Visor paper, Table 2:
# 9,848 causal and 1,548 temporal of 26,534 questions): short questions recur across movies, long ones
# are specific to their image, so causal and temporal queries have many paraphrases and explanatory
# ones (question + answer) few.
_QUESTIONS = [
    (0.20, "Why is X {ing} ?"), (0.06, "Why is X {ing} at Y ?"), (0.04, "How did X get so {adj} ?"),
    (0.07, "Why is X {ing} {place} while Y holds {obj} ?"),
    (0.04, "What will X do next ?"), (0.01, "What is X going to do next ?"),
    (0.01, "What will X do after Y {past} {obj} ?"), (0.01, "What did X do before Y came {place} ?"),
    (0.12, "What is X doing ?"), (0.10, "What is X thinking ?"), (0.08, "How is X feeling ?"),
    (0.05, "Where is X going ?"), (0.06, "What does X want from Y ?"), (0.05, "Who is X ?"),
    (0.11, "What is X doing with {obj} {place} ?"),
]
_ANSWERS = [
    (0.3, "X is {ing} {obj} {place} ."), (0.2, "X wants to {base} {obj} {manner} ."),
    (0.3, "X is {adj} because Y {past} {obj} ."), (0.2, "X will {base} {obj} {place} {manner} ."),
]
_RATIONALES = [
    (0.4, "X is holding {obj} {place} and looks {adj} , while Y {past} {obj2} ."),
    (0.3, "Y just {past} {obj} and X is {ing} {manner} ."),
    (0.3, "X has {obj} in hand and keeps {ing} at Y {place} ."),
]


def _matched_record(k: int, rng: random.Random, own: dict, answers: list[str], rationales: list[str],
                    n_movies: int, split: str) -> dict:
    """Record k: its own question, answer and rationale (`own`, with X and Y for two of its people) among
    three distractors each, the correct responses of records `answers` / `rationales` name (their X and Y
    re-tagged to this record's people, as VCR's adversarial matching does)."""
    objects = ["person"] * own["people"] + rng.sample(OTHERS, 2)
    rng.shuffle(objects)
    persons = [i for i, o in enumerate(objects) if o == "person"]
    x, y = rng.sample(persons, 2)
    people = {"X": x, "Y": y}
    plain = lambda t: t.replace("X", str(x + 1)).replace("Y", str(y + 1))  # noqa: E731
    scores, likelihood = [rng.randrange(-1, 3)], rng.choice(["likely", "possible"])
    movie = f"{rng.randrange(n_movies):04d}_MOVIE_{rng.randrange(n_movies)}"
    clip = f"lsmdc_{movie}/{movie}_{k:05d}@0"
    parts = {}
    for part, sources in (("answer", answers), ("rationale", rationales)):
        label = rng.randrange(4)
        order = [0] + rng.sample([1, 2, 3], 3)
        texts, indices = [t for t, _ in sources], [i for _, i in sources]
        texts.insert(label, own[part])
        indices.insert(label, k)
        parts[part] = (order[4 - label:] + order[:4 - label], indices, [_tokens(t, people) for t in texts], label)
    (a_iter, a_sources, a_choices, a_label), (r_iter, r_sources, r_choices, r_label) = parts.values()
    return {"movie": movie, "objects": objects, "interesting_scores": scores, "answer_likelihood": likelihood,
            "img_fn": f"{clip}.jpg", "metadata_fn": f"{clip}.json", "answer_orig": plain(own["answer"]),
            "question_orig": plain(own["question"]), "rationale_orig": plain(own["rationale"]),
            "question": _tokens(own["question"], people), "answer_match_iter": a_iter, "answer_sources": a_sources,
            "answer_choices": a_choices, "answer_label": a_label, "rationale_choices": r_choices,
            "rationale_sources": r_sources, "rationale_match_iter": r_iter, "rationale_label": r_label,
            "img_id": f"{split}-{k // 3}", "question_number": k % 3, "annot_id": f"{split}-{k}",
            "match_fold": f"{split}-0", "match_index": k}


def generate_vcr_matched(n: int, seed: int = 0, split: str = "val") -> list[dict]:
    """VCR records at the release's size and shape, for the full-size benches: each record composes its own
    question (in VCR val's mix of reasoning types), answer and rationale from word pools, and its
    distractors are three other records' correct answers (of a question of the same template, i.e.
    relevant to it) and three other records' correct rationales, re-tagged. Unlike `generate_vcr`'s samples,
    the responses of a val-size file are as distinct as VCR's, and the query paraphrases as frequent."""
    if n < 4:
        raise ValueError(f"generate_vcr_matched: {n} records; a record's three distractors come from three others")
    rng = random.Random(seed)
    own = []
    for _ in range(n):
        template = _pick(rng, _QUESTIONS)
        own.append({"template": template, "question": _fill(rng, template), "answer": _fill(rng, _pick(rng, _ANSWERS)),
                    "rationale": _fill(rng, _pick(rng, _RATIONALES)), "people": rng.randint(2, 6)})
    by_template: dict[str, list[int]] = {}
    for k, record in enumerate(own):
        by_template.setdefault(record["template"], []).append(k)

    def others(k: int, pool: list[int] | None, part: str) -> list[tuple[str, int]]:
        """Three distinct records other than k (from `pool` when it has more than three and a hundred draws
        have not failed, else any) whose `part` differs from k's."""
        picked: list[int] = []
        draws = 0
        while len(picked) < 3:
            draws += 1
            other = pool[rng.randrange(len(pool))] if pool and len(pool) > 3 and draws <= 100 else rng.randrange(n)
            if other != k and other not in picked and own[other][part] != own[k][part]:
                picked.append(other)
        return [(own[o][part], o) for o in picked]

    n_movies = max(6, n // 40)
    return [_matched_record(k, rng, own[k], others(k, by_template[own[k]["template"]], "answer"),
                            others(k, None, "rationale"), n_movies, split) for k in range(n)]
