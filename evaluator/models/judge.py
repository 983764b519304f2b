"""A pinned local judge for answer extraction (`--judge SPEC`): in letter choice, an answer that the rules of
`parse_letter` cannot read (no letter, no option's text) is shown, with its question and options, to a
judge model that names the option it chooses, as MMBench's choice extractor does with an LLM (Liu et al.,
ECCV 2024) but with a model the user pins instead of a paid API whose verdicts drift.

- The judge is any generative model vlbench runs: `openai:` (any served LLM; `--judge-base-url`, else
  `--base-url`), `hf:` or `vllm:` (an image-text-to-text checkpoint). It sees text only.
- A fixed extraction prompt (JUDGE_PROMPT), greedy decoding, at most JUDGE_MAX_NEW_TOKENS tokens; its
  thinking, if any, is removed like any reasoning model's; its reply is read as one letter, `Z` meaning
  "none of the options".
- Its verdicts are cached in the response cache (keyed by the judge, its revision, the prompt and the
  decoding), so a rerun asks it nothing again.
- The record names the judge and pins its weights (`pinned`): a local folder's content SHA-256, a hub
  checkpoint's commit, or the model name and fingerprint a server reported (kept with each cached verdict, so
  a rerun answered from the cache names them too); then the prompt, how many answers it was asked and
  decided, and its agreement with the rule parser, measured on a seeded sample of answers the rules did read:
  the AGREEMENT_SAMPLE of them with the smallest SHA-256 of (seed, question, answer) over the run. The sample is
  defined by content alone, so a run split into shards (evaluator/shards.py) measures it on the same answers: each
  shard asks its own smallest ones, and the merge keeps the smallest of all. A judge that answers none of those
  in the expected form is one error line: it cannot be trusted with the others. A judge that decides none of the
  answers it is asked (replies outside the letters, empty, unreadable, or its own thinking cut off) leaves them
  unread (scored wrong) and says so in one line naming it.

Off by default: the benchmarks' metrics are rule-based unless `--judge` is given, and the record says so
when it is.
"""

from __future__ import annotations

import hashlib
import json
import re
import string
import sys

from core.errors import ModelError

JUDGE_PROMPT = ("Below is a multiple-choice question with its options, then a model's answer to it.\n\n"
                "{question}\n\nThe model's answer: {answer}\n\n"
                "Which option does the model's answer choose? Reply with the option's letter alone. Reply Z if it "
                "chooses none of the options or more than one.")
JUDGE_MAX_NEW_TOKENS = 8
AGREEMENT_SAMPLE = 50  # answers the rules read, asked of the judge too
NONE_LETTER = "Z"


def judge_reply(text: str, options: int) -> int | None | str:
    """An option index, None ("none of them": Z), or "unread" when the reply is not one letter."""
    match = re.fullmatch(r"\s*\(?([A-Z])\)?[.:]?\s*", text)
    if not match:
        return "unread"
    letter = match.group(1)
    if letter == NONE_LETTER:
        return None
    index = string.ascii_uppercase.index(letter)
    return index if index < options else "unread"


class Judge:
    """The judge of one run: loaded on first use, asked in batches, counting what it decided."""

    def __init__(self, spec: str, load, seed: int = 0, pinned: dict | None = None):
        """`load()` builds the backend; `pinned` names the weights, known before any are loaded (None: the
        backend's `provenance` once it answered, a served judge's)."""
        self.spec, self._load, self._backend, self.seed, self._pinned = spec, load, None, seed, pinned
        self.asked = self.decided = self.unread = 0
        # the agreement sample so far: [key, the judge read what the rules read], the smallest keys kept
        self.candidates: list[list] = []

    @property
    def backend(self):
        if self._backend is None:
            self._backend = self._load()
        return self._backend

    def _ask(self, questions: list[str], answers: list[str], sizes: list[int]) -> list[int | None | str]:
        from evaluator.models.backend import Turn

        turns = [Turn(JUDGE_PROMPT.format(question=q, answer=a)) for q, a in zip(questions, answers)]
        outputs = self.backend.generate(turns, names=[f"judge {k + 1}" for k in range(len(turns))])
        replies = self.backend.replies(outputs)
        return ["unread" if r.unfinished else judge_reply(r.answer, n) for r, n in zip(replies, sizes)]

    def decide(self, questions: list[str], answers: list[str], sizes: list[int], read: list[int | None],
               ) -> list[int | None]:
        """`read` (per answer, the option the rules read, None where they read none) with the judge's verdicts
        in place of the unread ones; first the agreement sample of the read ones is asked."""
        keys = {k: self._key(questions[k], answers[k]) for k, r in enumerate(read) if r is not None}
        sample = sorted(sorted(keys, key=lambda k: (keys[k], k))[:AGREEMENT_SAMPLE])
        unread = [k for k, r in enumerate(read) if r is None]
        todo = sample + unread
        if not todo:
            return read
        verdicts = dict(zip(todo, self._ask([questions[k] for k in todo], [answers[k] for k in todo],
                                            [sizes[k] for k in todo])))
        if sample and all(verdicts[k] == "unread" for k in sample):
            raise ModelError(f"--judge {self.spec}: answers nothing parseable (asked {len(sample)} answers the rules "
                             "read, it replied with no single option letter to any); pick another judge")
        self.candidates = sorted([*self.candidates, *([keys[k], verdicts[k] == read[k]] for k in sample)]
                                 )[:AGREEMENT_SAMPLE]
        out = list(read)
        for k in unread:
            verdict = verdicts[k]
            self.asked += 1
            self.unread += verdict == "unread"
            if isinstance(verdict, int):
                out[k] = verdict
                self.decided += 1
        return out

    def _key(self, question: str, answer: str) -> str:
        """An answer's place in the agreement sample: SHA-256 of (seed, question, answer)."""
        return hashlib.sha256(json.dumps([self.seed, question, answer]).encode()).hexdigest()

    def note_if_undecided(self) -> None:
        """One line when the judge was asked and decided none of the answers of the whole run."""
        if self.asked and not self.decided:
            print(f"note: --judge {self.spec} decided none of the {self.asked:,} answers the rules could not read "
                  f"({self.unread:,} replies with no option letter, {self.asked - self.unread:,} 'none of the "
                  "options'); they stay unread and are scored wrong", file=sys.stderr)

    def record(self) -> dict:
        """The prediction record's `judge` entry."""
        described = self._backend.describe() if self._backend is not None else {}
        pinned = self._pinned if self._pinned is not None else \
            self._backend.provenance() if self._backend is not None else {}
        return {"model": self.spec, "revision": described.get("revision") or described.get("served_model"),
                "pinned": pinned,
                "prompt": JUDGE_PROMPT, "max_new_tokens": JUDGE_MAX_NEW_TOKENS, "decoding": "greedy",
                "asked": self.asked, "decided": self.decided, "replied_none": self.asked - self.decided - self.unread,
                "unread_replies": self.unread,
                "agreement": agreement(self.candidates, f"answers the rules read (the {AGREEMENT_SAMPLE} of the run "
                                                        f"with the smallest SHA-256 of (seed {self.seed}, question, "
                                                        "answer)) also asked of the judge: the share it read the "
                                                        "same")}


def agreement(candidates: list[list], what: str) -> dict:
    """The record's `agreement` from the candidates ([key, agreed]) of a run, or of every shard of one: the
    AGREEMENT_SAMPLE with the smallest keys."""
    sample = sorted(candidates)[:AGREEMENT_SAMPLE]
    agreed = sum(bool(a) for _, a in sample)
    return {"sample": len(sample), "agreed": agreed, "rate": round(agreed / len(sample), 4) if sample else None,
            "what": what}
