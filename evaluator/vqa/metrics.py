"""The official VQA accuracy (Antol et al. 2015; VQA v2 evaluation code, GT-Vision-Lab/VQA vqaEval.py).

A prediction scores min(#humans who gave it / 3, 1) averaged over the ten leave-one-out subsets of
nine human answers. Answers are compared after the official normalisation:

* rule "current" (the official code since 2021): every answer is stripped of newlines, tabs and outer
  spaces; when the ten human answers are not all identical, the human answers and the prediction are
  both passed through `process_punctuation` and `process_digit_article`; otherwise none of them is.
* rule "pre-2021": the prediction is always normalised, the human answers only get
  `process_punctuation`, and only when they are not all identical.

`score_question` is the rule for one question, written as the official loop; `vqa_accuracy` gives the
same numbers for a whole split by normalising each distinct string once and counting matches on
integer codes.
"""

from __future__ import annotations

import math
import re
from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

Rule = Literal["current", "pre-2021"]
RULES = ("current", "pre-2021")

# The official tables (ASCII apostrophes, as the current release).
CONTRACTIONS = dict(pair.split("=") for pair in """
aint=ain't arent=aren't cant=can't couldve=could've couldnt=couldn't couldn'tve=couldn't've couldnt've=couldn't've
didnt=didn't doesnt=doesn't dont=don't hadnt=hadn't hadnt've=hadn't've hadn'tve=hadn't've hasnt=hasn't
havent=haven't hed=he'd hed've=he'd've he'dve=he'd've hes=he's howd=how'd howll=how'll hows=how's Id've=I'd've
I'dve=I'd've Im=I'm Ive=I've isnt=isn't itd=it'd itd've=it'd've it'dve=it'd've itll=it'll let's=let's maam=ma'am
mightnt=mightn't mightnt've=mightn't've mightn'tve=mightn't've mightve=might've mustnt=mustn't mustve=must've
neednt=needn't notve=not've oclock=o'clock oughtnt=oughtn't ow's'at='ow's'at 'ows'at='ow's'at 'ow'sat='ow's'at
shant=shan't shed've=she'd've she'dve=she'd've she's=she's shouldve=should've shouldnt=shouldn't
shouldnt've=shouldn't've shouldn'tve=shouldn't've somebody'd=somebodyd somebodyd've=somebody'd've
somebody'dve=somebody'd've somebodyll=somebody'll somebodys=somebody's someoned=someone'd someoned've=someone'd've
someone'dve=someone'd've someonell=someone'll someones=someone's somethingd=something'd
somethingd've=something'd've something'dve=something'd've somethingll=something'll thats=that's thered=there'd
thered've=there'd've there'dve=there'd've therere=there're theres=there's theyd=they'd theyd've=they'd've
they'dve=they'd've theyll=they'll theyre=they're theyve=they've twas='twas wasnt=wasn't wed've=we'd've
we'dve=we'd've weve=we've werent=weren't whatll=what'll whatre=what're whats=what's whatve=what've whens=when's
whered=where'd wheres=where's whereve=where've whod=who'd whod've=who'd've who'dve=who'd've wholl=who'll
whos=who's whove=who've whyll=why'll whyre=why're whys=why's wont=won't wouldve=would've wouldnt=wouldn't
wouldnt've=wouldn't've wouldn'tve=wouldn't've yall=y'all yall'll=y'all'll y'allll=y'all'll yall'd've=y'all'd've
y'alld've=y'all'd've y'all'dve=y'all'd've youd=you'd youd've=you'd've you'dve=you'd've youll=you'll
youre=you're youve=you've
""".split())
NUMBER_WORDS = {"none": "0", "zero": "0", "one": "1", "two": "2", "three": "3", "four": "4", "five": "5",
                "six": "6", "seven": "7", "eight": "8", "nine": "9", "ten": "10"}
ARTICLES = frozenset({"a", "an", "the"})
PUNCTUATION = (";", "/", "[", "]", '"', "{", "}", "(", ")", "=", "+", "\\", "_", "-", ">", "<", "@", "`", ",", "?",
               "!")
_COMMA_BETWEEN_DIGITS = re.compile(r"(\d)(,)(\d)")
_PERIOD_NOT_BEFORE_DIGIT = re.compile(r"(?!<=\d)(\.)(?!\d)")  # the official pattern, lookbehind typo included
_PERIOD_STRIP_COUNT = re.UNICODE  # the official code passes re.UNICODE (32) as sub()'s count argument
_MARKS = frozenset(PUNCTUATION)


def process_punctuation(text: str) -> str:
    """Each punctuation mark is deleted when it touches a space (or the text has a digit,digit comma),
    otherwise replaced by a space; then periods not followed by a digit are deleted (32 at most)."""
    if _MARKS.isdisjoint(text):  # most answers: no mark to delete or replace (the loop below would change nothing)
        return _PERIOD_NOT_BEFORE_DIGIT.sub("", text, _PERIOD_STRIP_COUNT) if "." in text else text
    out = text
    glued = _COMMA_BETWEEN_DIGITS.search(text) is not None
    for p in PUNCTUATION:
        if glued or p + " " in text or " " + p in text:
            out = out.replace(p, "")
        else:
            out = out.replace(p, " ")
    return _PERIOD_NOT_BEFORE_DIGIT.sub("", out, _PERIOD_STRIP_COUNT)


def normalize_prediction(text: str) -> str:
    """A generated answer in the form the official evaluation expects of a submission (the VQA
    challenge asks for lower-case answers): newlines and tabs as spaces, trimmed, `process_punctuation`,
    then `process_digit_article` (lower case, number words as digits, articles dropped). vqaEval.py does
    this to a prediction whenever the human answers differ; lmms-eval's `vqav2_process_results` (0.7.3)
    does it to every response, so that "Yes" against ten "yes" scores 1 in both."""
    return normalize_answer(_clean(text))


def process_digit_article(text: str) -> str:
    """Lower-case, number words to digits, articles dropped, contractions restored."""
    words = [NUMBER_WORDS.get(w, w) for w in text.lower().split()]
    return " ".join(CONTRACTIONS.get(w, w) for w in words if w not in ARTICLES)


def normalize_answer(text: str) -> str:
    return process_digit_article(process_punctuation(text))


def _clean(text: str) -> str:
    return text.replace("\n", " ").replace("\t", " ").strip()


def _mean_over_subsets(matches: int, n: int) -> float:
    """Mean over the n leave-one-out subsets of min(matches in the subset / 3, 1): the `matches`
    subsets that drop a matching answer hold matches - 1, the others hold matches. The sum is
    exactly rounded (fsum), so the result does not depend on where the matching answers sit."""
    per_subset = [min(1.0, (matches - 1) / 3)] * matches + [min(1.0, matches / 3)] * (n - matches)
    return math.fsum(per_subset) / n


def score_question(prediction: str, answers: list[str], rule: Rule = "current") -> float:
    """The VQA accuracy of one prediction against its human answers, as the official loop computes it."""
    if rule not in RULES:
        raise ValueError(f"unknown VQA accuracy rule {rule!r}; known: {', '.join(RULES)}")
    prediction = _clean(prediction)
    if rule == "current":
        answers = [_clean(a) for a in answers]
        if len(set(answers)) > 1:
            answers = [normalize_answer(a) for a in answers]
            prediction = normalize_answer(prediction)
    else:
        prediction = normalize_answer(prediction)
        if len(set(answers)) > 1:
            answers = [process_punctuation(a) for a in answers]
    accs = [min(1.0, sum(a == prediction for j, a in enumerate(answers) if j != i) / 3) for i in range(len(answers))]
    return math.fsum(accs) / len(accs)


def _encode(strings: pa.Array) -> tuple[np.ndarray, list[str]]:
    """Dictionary codes of the strings and the distinct strings they index."""
    encoded = pc.dictionary_encode(strings)
    return encoded.indices.to_numpy(zero_copy_only=False), encoded.dictionary.to_pylist()


def _as_list_array(answers) -> pa.ListArray:
    if isinstance(answers, pa.ChunkedArray):
        return answers.combine_chunks()
    if isinstance(answers, pa.Array):
        return answers
    return pa.array(answers, pa.list_(pa.string()))


def vqa_accuracy(predictions, answers, rule: Rule = "current") -> np.ndarray:
    """Per-question VQA accuracy in [0, 1] of `predictions[i]` against `answers[i]`: the numbers of
    `score_question`, computed by normalising each distinct string once and counting matches on
    integer codes. `answers` is a list of answer lists or an Arrow list column."""
    if rule not in RULES:
        raise ValueError(f"unknown VQA accuracy rule {rule!r}; known: {', '.join(RULES)}")
    answers = _as_list_array(answers)
    if len(predictions) != len(answers):
        raise ValueError(f"{len(predictions)} predictions for {len(answers)} questions")
    n = answers.value_lengths().to_numpy(zero_copy_only=False).astype(np.int64)
    if len(n) == 0:
        return np.zeros(0)
    if (n == 0).any():
        raise ValueError("a question without human answers cannot be scored")
    flat, distinct = _encode(answers.flatten())
    pred_idx, pred_distinct = _encode(pa.array(predictions, pa.string()))
    owner = np.repeat(np.arange(len(n)), n)
    starts = np.concatenate([[0], np.cumsum(n)[:-1]])
    table: dict[str, int] = {}

    def codes(strings: list[str], transform) -> np.ndarray:
        return np.array([table.setdefault(transform(s), len(table)) for s in strings], np.int64)

    # The all-identical test sees the answers as the official set() does (current: after cleaning).
    seen = codes(distinct, _clean if rule == "current" else str)[flat]
    identical = np.minimum.reduceat(seen, starts) == np.maximum.reduceat(seen, starts)
    if rule == "current":
        gt = np.where(identical[owner], seen, codes(distinct, lambda s: normalize_answer(_clean(s)))[flat])
        pred = np.where(identical, codes(pred_distinct, _clean)[pred_idx],
                        codes(pred_distinct, lambda s: normalize_answer(_clean(s)))[pred_idx])
    else:
        gt = np.where(identical[owner], seen, codes(distinct, process_punctuation)[flat])
        pred = codes(pred_distinct, lambda s: normalize_answer(_clean(s)))[pred_idx]
    matches = np.bincount(owner, weights=gt == pred[owner], minlength=len(n)).astype(np.int64)
    lookup = {size: np.array([_mean_over_subsets(m, size) for m in range(size + 1)]) for size in np.unique(n).tolist()}
    out = np.empty(len(n))
    for size, values in lookup.items():
        rows = n == size
        out[rows] = values[matches[rows]]
    return out
