"""Shared text pieces: VCR tag rendering and detokenization, reasoning types (the VCR-Visor paper, Table 1)."""

from __future__ import annotations

import re
from typing import Sequence

# Token -> glued to the previous token (no space before it).
_NO_SPACE_BEFORE = {".", ",", "?", "!", ":", ";", ")", "%"}
# A lone apostrophe followed by one of these is a contraction or possessive: "can ' t" -> "can't".
_CLITICS = {"s", "t", "re", "ve", "ll", "d", "m"}


def render_reference(indices: Sequence[int], objects: Sequence[str]) -> str:
    """One VCR reference (a list of 0-based indices into `objects`) as text.

    A person is `[personK]` with K = its index in `objects` + 1 (the global index, as the VCR
    release numbers detections); any other object is its class name. Several referents are joined
    as "A and B", or "A, B and C" for more than two, in the order the annotation gives them.
    """
    names = [f"[person{i + 1}]" if objects[i] == "person" else objects[i] for i in indices]
    if len(names) <= 2:
        return " and ".join(names)
    return ", ".join(names[:-1]) + " and " + names[-1]


def render_tokens(tokens: Sequence, objects: Sequence[str]) -> str:
    """VCR tokens (words and index lists) as one string with tags, detokenized.

    Rules: no space before . , ? ! : ; ) %; a lone "'" followed by s/t/re/ve/ll/d/m is glued to both
    sides ("[person1] ' s" -> "[person1]'s", "can ' t" -> "can't"); "-" is glued to both sides.
    """
    words = [t if isinstance(t, str) else render_reference(t, objects) for t in tokens]
    out: list[str] = []
    glue_next = False
    for i, word in enumerate(words):
        is_clitic_mark = word == "'" and i + 1 < len(words) and words[i + 1] in _CLITICS
        if out and (glue_next or word in _NO_SPACE_BEFORE or is_clitic_mark or word == "-"):
            out[-1] += word
        else:
            out.append(word)
        glue_next = is_clitic_mark or word == "-"
    return " ".join(out)


def person_tags(text: str) -> list[str]:
    """Distinct `[personK]` tags of a rendered text, in order of first appearance."""
    return list(dict.fromkeys(re.findall(r"\[person\d+\]", text)))


_WORD = re.compile(r"[a-z]+")


def reasoning_types(question: str) -> set[str]:
    """Table 1: causal (why, how; not a question with both "how" and "feel"), temporal (before,
    after, when, "what will", earlier, later). Matching is on lower-cased words; "feel" matches as
    a substring (feel, feels, feeling), since those questions ask about sentiment."""
    lowered = question.lower()
    words = _WORD.findall(lowered)
    found = set()
    if ("why" in words or "how" in words) and not ("how" in words and "feel" in lowered):
        found.add("causal")
    pairs = set(zip(words, words[1:]))
    if {"before", "after", "when", "earlier", "later"} & set(words) or ("what", "will") in pairs:
        found.add("temporal")
    return found
