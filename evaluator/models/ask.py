"""How a benchmark asks a generative VLM, and the model adapter that asks it.

A Task declares `generative = <Ask subclass>()`: per row, the values of its prompt template's fields,
the image (if any), and either nothing (the model generates an answer, `mode = "generate"`) or the
continuations to score (`mode = "score"`: answers, responses, dialogue options); then how a raw
output or the continuations' log-likelihoods become the row's prediction in the benchmark's format.
`GenerativeAdapter` runs that over a table with a backend (evaluator/models/backend.py: `hf:`,
`vllm:` or `openai:`), and sees nothing of a backend but that contract. A multiple-choice
Ask (`mode = "score"`) may also be asked by letter (`--choice-mode letter`): the continuations listed
as `A. ...`, `B. ...` after the prompt, the model asked for the letter (`letter_prompt`), the answer
read by `parse_letter`'s rules; the chosen option scores 1, the others 0, and an answer naming no
option scores every option 0 (a tie, which the benchmarks count as wrong).
"""

from __future__ import annotations

import re
import string
from abc import ABC, abstractmethod

import pyarrow as pa

from core.errors import ModelError
from core.progress import progress
from evaluator.models.images import ImageFolder, image_sources
from evaluator.models.model import Model
from evaluator.models.options import ModelOptions
from evaluator.models.videos import VideoFolder, read_frames

SHORT_ANSWER_PROMPT = "{question}\nAnswer the question using a single word or phrase."
# LLaVA's and lmms-eval's instruction for multiple choice by letter
LETTER_INSTRUCTION = "Answer with the option's letter from the given choices directly."
CHOICE_MODES = ("auto", "loglik", "letter")
CLEANING = "first line of the output, trimmed, one trailing period removed"
_NUMBER_WORDS = {w: i for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen twenty".split())}


def clean_answer(text: str) -> str:
    """A generated short answer as the benchmark scores it: the first line, trimmed, without one
    trailing period ("Yes.\\nBecause..." -> "Yes")."""
    first = text.strip().split("\n", 1)[0].strip()
    return first[:-1].rstrip() if first.endswith(".") else first


def parse_count(text: str) -> float | None:
    """The first number of a cleaned answer (digits, or a number word up to twenty), else None."""
    answer = clean_answer(text).lower()
    match = re.search(r"-?\d+(?:\.\d+)?", answer.replace(",", ""))
    if match:
        return float(match.group())
    words = re.findall(r"[a-z]+", answer)
    return next((float(_NUMBER_WORDS[w]) for w in words if w in _NUMBER_WORDS), None)


def template_fields(template: str) -> list[str]:
    """The {field} names a prompt template uses. A field is a plain name: a format spec or a
    conversion ({question:>999999999}, {question!r}) is refused, since it could render a prompt of any
    length from one field."""
    try:
        parsed = [(name, spec, conversion) for _, name, spec, conversion in string.Formatter().parse(template)
                  if name is not None]
    except ValueError as exc:
        raise ModelError(f"--prompt {template!r}: not a template ({exc}); write literal braces as {{{{ }}}}") \
            from None
    for name, spec, conversion in parsed:
        if spec or conversion:
            shown = f"{{{name}{'!' + conversion if conversion else ''}{':' + spec if spec else ''}}}"
            raise ModelError(f"--prompt: {shown[:60]} has a format spec or conversion; a prompt field is a plain "
                             f"{{{name}}}")
    return [name for name, _, _ in parsed]


def prompt_template(options: ModelOptions, ask: Ask, benchmark: str, family=None) -> str:
    """`--prompt` (or the default: the family's prefix format where it has one, evaluator/models/families.py, else
    the benchmark's), checked: every {field} must be one the benchmark has."""
    default = ask.default_prompt if family is None else family.default_prompt(ask)
    template = options.prompt if options.prompt is not None else default
    unknown = [f for f in template_fields(template) if f not in ask.fields]
    if unknown:
        known = ", ".join("{" + f + "}" for f in ask.fields) or "none"
        raise ModelError(f"--prompt: unknown field {{{unknown[0]}}} for {benchmark} (fields: {known})")
    return template


def letter_question(text: str, options: list[str]) -> str:
    """The prompt and its options as `A. text` lines (what a judge is shown)."""
    return "\n".join([text, *(f"{string.ascii_uppercase[i]}. {o}" for i, o in enumerate(options))])


def letter_prompt(text: str, options: list[str]) -> str:
    """A multiple-choice prompt asked by letter: the prompt, the options as `A. text` lines, the
    instruction."""
    return f"{letter_question(text, options)}\n{LETTER_INSTRUCTION}"


def parse_letter(output: str, options: list[str]) -> int | None:
    """The option a letter-mode answer names, by the first rule that applies (None: unparsed):
    1. the answer (trimmed) starts with an option's letter alone (on its first line), or followed by
       `.`, `:` or `)`, or in parentheses: "B", "B\\nThe man is sad.", "B.", "B) a dog", "(B)";
    2. an option's letter in parentheses anywhere, or after "answer is" / "answer:": "I think (B)",
       "The answer is B";
    3. the text of exactly one option inside the answer (case-insensitive): "a dog".
    A bare capital A starting a sentence ("A dog is ...") is not read as a letter."""
    letters = string.ascii_uppercase[:len(options)]
    text = output.strip()
    first = re.match(r"\(([A-Z])\)|([A-Z])(?:[.:)]|[ \t]*(?:\n|$))", text)
    if first and (first.group(1) or first.group(2)) in letters:
        return letters.index(first.group(1) or first.group(2))
    for pattern in (r"\(([A-Z])\)", r"(?i:answer)(?:\s+is)?\s*:?\s*\(?([A-Z])\b"):
        found = next((m.group(1) for m in re.finditer(pattern, text) if m.group(1) in letters), None)
        if found:
            return letters.index(found)
    lowered = text.lower()
    named = [i for i, o in enumerate(options) if o.strip().rstrip(".").lower() and
             o.strip().rstrip(".").lower() in lowered]
    return named[0] if len(named) == 1 else None


def rotated(options: list[str], r: int) -> list[str]:
    """Rotation r of a prompt's options: option r listed first (as A), then the next ones in order."""
    return options[r:] + options[:r]


def _unrotated(letter: int | None, r: int, n: int) -> int | None:
    """The original index of the option at position `letter` of rotation r."""
    return None if letter is None else (letter + r) % n


def letter_choice(ask: "Ask | None") -> bool:
    """Whether a benchmark's Ask is multiple choice that can be asked by letter (and so rotated)."""
    return ask is not None and ask.mode == "score" and not ask.letter_reason


def check_circular(ask: "Ask", choice_mode: str) -> None:
    """`--circular` asks multiple-choice prompts by letter; anything else is one error line."""
    if ask.mode != "score":
        raise ModelError("--circular: the benchmark is not multiple choice (its model generates an answer)")
    if ask.letter_reason:
        raise ModelError(f"--circular: {ask.letter_reason}")
    if choice_mode != "letter":
        raise ModelError("--circular rotates the options of a letter choice; log-likelihood scoring scores each "
                         "option alone, so their order cannot matter: pass --choice-mode letter (or leave "
                         "--choice-mode auto)")


class Ask(ABC):
    """A benchmark's way of asking a generative VLM (declared by its Task as `generative`)."""

    mode: str  # "generate" (an answer per row) or "score" (log-likelihoods of continuations)
    default_prompt: str  # the user prompt template; {field}s from `fields`
    fields: tuple[str, ...]  # the fields a template may use
    input_columns: tuple[str, ...]  # the columns read (the perceptual score permutes these)
    image_column: str | None = None  # the row's image key (an embedded `image` is used first)
    video_column: str | None = None  # the row's video id: with --videos DIR the model sees frames of it
    cleaning: str = ""  # how a raw output becomes the prediction, for the record
    note: str = ""  # what the model is not shown, for the record
    letter_reason: str | None = None  # why a "score" Ask cannot be asked by letter (None: it can)
    reference_column: str | None = None  # generating: the column of the reference answer (`references`)

    @abstractmethod
    def values(self, table: pa.Table) -> list[dict[str, str]]:
        """Per row, the value of every field in `fields`."""

    def continuations(self, table: pa.Table) -> list[list[str]]:
        """Per row, the texts whose log-likelihood is scored (`mode = "score"`)."""
        raise NotImplementedError(f"{type(self).__name__} generates; it scores no continuations")

    def answers(self, table: pa.Table) -> list[int]:
        """Per prompt (in `prompts`' order), the index of the right continuation: what `--circular`'s report
        reads (never shown to a model)."""
        raise NotImplementedError(f"{type(self).__name__} has no right continuation per prompt")

    def right_options(self, table: pa.Table, continuations: list[list[str]]) -> list[list[int]]:
        """Per prompt (its CONTINUATIONS as `prompts` gives them), per continuation 1 where it is right and 0 where
        not (the test-set stress test's targets, evaluator/stress/): by default the one right continuation of
        `answers`; a prompt with one continuation that may be right or not (Social-IQ's answer) says so itself."""
        return [[int(k == right) for k in range(len(cs))] for right, cs in zip(self.answers(table), continuations)]

    def references(self, table: pa.Table) -> list[str]:
        """Per prompt (in `prompts`' order), the reference answer as text, for a harness's built-in scorer
        (the Hub's Inspect task, evaluator/harness/hub.py): asked by letter, the right option's letter;
        generating, the declared `reference_column` (None: the benchmark declares none)."""
        if self.mode == "score":
            return [string.ascii_uppercase[k] for k in self.answers(table)]
        if self.reference_column is None:
            raise NotImplementedError(f"{type(self).__name__} declares no reference answer")
        return [self.reference_text(v) for v in table.column(self.reference_column).to_pylist()]

    def reference_text(self, value) -> str:
        """A reference answer's value as the text a built-in scorer compares with."""
        return str(value)

    @abstractmethod
    def prediction(self, output):
        """The row's prediction from its raw output (generate) or its continuations' scores (score)."""

    def prompts(self, table: pa.Table) -> tuple[list[dict[str, str]], list[list[str]], list[int]]:
        """Every prompt asked for the rows: (field values, continuations ([] when generating), row). One
        per row by default (`values`, `continuations`); a benchmark that asks twice per row (VCR: Q->A,
        then QA->R) overrides this and `combine`."""
        rows = list(range(table.num_rows))
        continuations = self.continuations(table) if self.mode == "score" else [[] for _ in rows]
        return self.values(table), continuations, rows

    def combine(self, outputs: list):
        """The row's prediction from the outputs of its prompts, in order (one prompt: `prediction`)."""
        return self.prediction(outputs[0])


class ShortAnswer(Ask):
    """VQA-style questions (GQA-OOD, VQA v2, VQA-CP): a short generated answer, cleaned, then scored by
    the benchmark's own metric."""

    mode = "generate"
    default_prompt = SHORT_ANSWER_PROMPT
    fields = ("question",)
    cleaning = CLEANING

    def __init__(self, image_column: str):
        self.image_column = image_column
        self.input_columns = ("question", image_column)

    def values(self, table: pa.Table) -> list[dict[str, str]]:
        return [{"question": q} for q in table.column("question").to_pylist()]

    def prediction(self, output: str) -> str:
        return clean_answer(output)


class GenerativeAdapter(Model):
    """A task model over a generative VLM: `predict(table)` asks every row as the task's Ask says.
    `load_vlm()` loads the model on the first `predict`, once every image and video file its rows
    show has been found: a missing `--images` folder or file is reported before any weight is read."""

    def __init__(self, load_vlm, ask: Ask, template: str, options: ModelOptions, videos: VideoFolder | None = None,
                 choice_mode: str = "loglik", judge=None):
        if ask.mode == "score" and choice_mode == "letter" and ask.letter_reason:
            raise ModelError(f"--choice-mode letter: {ask.letter_reason}")
        if options.circular:
            check_circular(ask, choice_mode)
        if options.no_image and videos is not None:
            raise ModelError("--no-image with --videos: a blind run shows no picture, and a video's frames are "
                             "pictures")
        if judge is not None and (ask.mode != "score" or choice_mode != "letter"):
            raise ModelError("--judge reads letter answers the rules cannot: it applies to multiple choice asked by "
                             "letter (--choice-mode letter, or openai: models)")
        self.judge = judge  # evaluator.models.judge.Judge, or None
        self._load_vlm, self._vlm = load_vlm, None
        self.ask, self.template, self.options, self.videos = ask, template, options, videos
        self.choice_mode = None if ask.mode == "generate" else choice_mode
        self.images = ImageFolder(options.images)
        self.input_columns = tuple(c for c in ask.input_columns if not (options.no_image and c == ask.image_column)) \
            + ((ask.video_column,) if self.videos else ())
        self.samples: list[dict] = []  # per row of the last predict: prompt, raw output, prediction
        self.circular = bool(options.circular)
        # per row of the last predict with --circular: per prompt, the option chosen in each rotation (None: none)
        self.rotations: list | None = [] if self.circular else None

    def _row_images(self, table: pa.Table) -> list[tuple]:
        """Per row, the images its turn shows (paths or bytes, opened batch by batch); none in a blind run."""
        if self.ask.image_column is None or self.options.no_image:
            return [()] * table.num_rows
        return [(source,) for source in image_sources(table, self.ask.image_column, self.images)]

    @property
    def vlm(self):
        if self._vlm is None:
            self._vlm = self._load_vlm()
        return self._vlm

    def predict(self, table: pa.Table) -> list:
        predictions = self._predict(table)
        if self.judge is not None:
            self.judge.note_if_undecided()
        return predictions

    def _predict(self, table: pa.Table) -> list:
        if self.videos is None:
            images = self._row_images(table)  # every file found before the weights load
            predictions, self.samples = self._ask(table, images)
            if self.circular:
                self.rotations = [s["rotation_choices"] for s in self.samples]
            return predictions
        # One video at a time: its frames are decoded once and shown to every row that asks about it.
        rows_of: dict[str, list[int]] = {}
        for row, video in enumerate(table.column(self.ask.video_column).to_pylist()):
            rows_of.setdefault(video, []).append(row)
        paths = {video: self.videos.path(video) for video in rows_of}  # every file found before the weights load
        predictions, self.samples = [None] * table.num_rows, [None] * table.num_rows
        for video, rows in progress(rows_of.items(), desc="videos", unit="video"):
            frames = tuple(read_frames(paths[video], self.options.frames))
            part_predictions, part_samples = self._ask(table.take(rows), [frames] * len(rows))
            for row, prediction, sample in zip(rows, part_predictions, part_samples):
                predictions[row], self.samples[row] = prediction, {**sample, "frames": len(frames)}
        if self.circular:
            self.rotations = [s["rotation_choices"] for s in self.samples]
        return predictions

    def _ask(self, table: pa.Table, images: list[tuple]) -> tuple[list, list[dict]]:
        """(predictions, samples) of the rows, each prompt asked with its row's images."""
        from evaluator.models.backend import Turn

        values, continuations, row_of = self.ask.prompts(table)
        turns = [Turn(self.template.format(**v), images[row]) for v, row in zip(values, row_of)]
        names = [f"row {row}" for row in row_of]
        letter = self.choice_mode == "letter"
        generate = self.ask.mode == "generate"
        if letter:
            # each prompt asked once per rotation of its options with --circular (else once, as listed)
            asks = [(k, r) for k, c in enumerate(continuations) for r in range(len(c) if self.circular else 1)]
            texts = [letter_prompt(turns[k].text, rotated(continuations[k], r)) for k, r in asks]
            asked = self.vlm.generate([Turn(t, turns[k].images) for t, (k, _) in zip(texts, asks)],
                                      names=[names[k] + (f" rotation {r + 1}" if self.circular else "")
                                             for k, r in asks])
            # the thinking separated from each answer; an unfinished one (cut off while thinking) names no option
            ask_replies = self.vlm.replies(asked)
            letters = [None if reply.unfinished else parse_letter(reply.answer, rotated(continuations[k], r))
                       for reply, (k, r) in zip(ask_replies, asks)]
            if self.judge is not None:  # the answers the rules cannot read go to the judge (never unfinished ones)
                open_ = [n for n, reply in enumerate(ask_replies) if not reply.unfinished]
                decided = self.judge.decide(
                    [letter_question(turns[asks[n][0]].text, rotated(continuations[asks[n][0]], asks[n][1]))
                     for n in open_], [ask_replies[n].answer for n in open_],
                    [len(continuations[asks[n][0]]) for n in open_], [letters[n] for n in open_])
                for n, verdict in zip(open_, decided):
                    letters[n] = verdict
            picked = [_unrotated(letter, r, len(continuations[k])) for letter, (k, r) in zip(letters, asks)]
            asks_of: list[list[int]] = [[] for _ in turns]
            for n, (k, _) in enumerate(asks):
                asks_of[k].append(n)
            raw = [asked[ns[0]] for ns in asks_of]
            replies = [ask_replies[ns[0]] for ns in asks_of]
            unfinished_of = [sum(ask_replies[n].unfinished for n in ns) for ns in asks_of]
            rotation_choices = [[picked[n] for n in ns] for ns in asks_of]
            # a prompt is answered only when every rotation chose the same option (VLMEvalKit's CircularEval)
            chosen = [cs[0] if cs[0] is not None and all(c == cs[0] for c in cs) else None for cs in rotation_choices]
            turns = [Turn(texts[ns[0]], turns[k].images) for k, ns in enumerate(asks_of)]
        elif generate:
            raw = self.vlm.generate(turns, names=names)
            replies = self.vlm.replies(raw)
            unfinished_of = [int(r.unfinished) for r in replies]
        else:
            raw, replies = self.vlm.score(turns, continuations, names=names), None
        answers = ["" if r.unfinished else r.answer for r in replies] if replies else None
        outputs = ([[1.0 if i == k else 0.0 for i in range(len(c))] for k, c in zip(chosen, continuations)]
                   if letter else answers if generate else raw)
        prompts_of: list[list[int]] = [[] for _ in range(table.num_rows)]
        for k, row in enumerate(row_of):
            prompts_of[row].append(k)
        predictions, samples = [], []
        for ks in prompts_of:
            parsed = self.ask.combine([outputs[k] for k in ks])
            prediction = 0.0 if parsed is None else parsed
            fields = ({"prompt": "prompts", "output": "outputs"} if generate else
                      {"prompt": "prompts", "continuations": "continuations", "output": "outputs", "choice": "choices"}
                      if letter else {"prompt": "prompts", "continuations": "continuations", "loglik": "loglik"})
            per_prompt = {"prompt": [turns[k].text for k in ks], "output": [raw[k] for k in ks],
                          "continuations": [continuations[k] for k in ks], "loglik": [outputs[k] for k in ks],
                          "choice": [None if chosen[k] is None else string.ascii_uppercase[chosen[k]] for k in ks]
                          if letter else []}
            sample = {(key if len(ks) == 1 else plural): (per_prompt[key][0] if len(ks) == 1 else per_prompt[key])
                      for key, plural in fields.items()}
            unfinished = sum(unfinished_of[k] for k in ks) if replies else 0
            read = (parsed is not None and not unfinished) if generate else \
                all(chosen[k] is not None for k in ks) if letter else None
            if letter and self.circular:
                sample["rotation_choices"] = [rotation_choices[k] for k in ks]
            thinking = {"answer": [answers[k] for k in ks] if len(ks) > 1 else answers[ks[0]],
                        "unfinished": bool(unfinished)} if replies and any(
                replies[k].thinking is not None for k in ks) else {}
            samples.append({**sample, **thinking, "prediction": prediction,
                            **({} if read is None else {"parsed": read})})
            predictions.append(prediction)
        return predictions, samples

    def note(self) -> str | None:
        """What the model was not shown, and caveats of its predictions, for the record."""
        seen = ""
        if self.ask.video_column is not None:
            seen = (f"video: {self.options.frames} frames per video, spread evenly from the first to the last, "
                    "shown as images; the audio is not heard" if self.videos else
                    "blind: the video is not read (--videos DIR shows the model its frames)")
        return "; ".join(part for part in (seen, self.ask.note) if part) or None

    def metadata(self) -> dict:
        """What the prediction's metadata file records about how the model was asked."""
        asked = {"mode": self.ask.mode, "prompt_template": self.template,
                 "prompt_is_default": self.options.prompt is None,
                 "images": self.ask.image_column is not None and not self.options.no_image,
                 "note": self.note()}
        unfinished = {"unfinished_answers": sum(bool(s.get("unfinished")) for s in self.samples)}
        if self.judge is not None:
            unfinished["judge"] = self.judge.record()
        if self.circular:
            unfinished["circular"] = {
                "method": "VLMEvalKit's CircularEval: each prompt asked once per rotation of its options (option k "
                          "listed first in rotation k); a prompt counts as answered only when every rotation chose "
                          "the same option, else it scores every option 0 (wrong)",
                "asks": sum(len(cs) for row in self.rotations for cs in row),
                "consistent_prompts": sum(all(c is not None and c == cs[0] for c in cs) for row in self.rotations
                                          for cs in row),
                "prompts": sum(len(row) for row in self.rotations)}
        if self.ask.mode == "generate":
            asked |= {"generation": self.vlm.generation.record(),
                      "cleaning": self.ask.cleaning, **unfinished,
                      "unparsed_outputs": sum(not s["parsed"] for s in self.samples)}
        elif self.choice_mode == "letter":
            asked |= {"choice_mode": "letter", "letter_instruction": LETTER_INSTRUCTION,
                      "generation": self.vlm.generation.record(), **unfinished,
                      "unparsed_outputs": sum(not s["parsed"] for s in self.samples),
                      "scores": "1 for the option the answer names, 0 for the others (all 0: unparsed, counted wrong)"}
        else:
            asked |= {"choice_mode": "loglik", "loglik": self.options.loglik, "cleaning": self.ask.cleaning or None}
        return {**self.vlm.describe(), "asked": asked}
