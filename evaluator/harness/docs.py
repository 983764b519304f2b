"""A built split as a harness's documents: one per prompt `vlbench predict` asks a generative VLM.

Each document holds exactly what `GenerativeAdapter` (evaluator/models/ask.py) shows a model for that
prompt: the user text (the benchmark's template filled from the row, or `--prompt`; asked by letter, the
options listed as `A. ...` lines and LLaVA's letter instruction, `letter_prompt`), the row's images as their
file bytes (Social-IQ with `--videos`: the video's evenly spread frames, as lossless PNG), and the
continuations whose log-likelihood is scored. It also carries vlbench's id of its row (`vlbench_id`, the id
as JSON), the prompt's place among its row's prompts (VCR asks Q->A, then QA->R) and their number, so that a
harness's log maps back by id, never by row order.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from pathlib import Path

from core.errors import ModelError
from evaluator.models.ask import letter_prompt

FORMS = ("generate", "letter", "loglik")
DOC_COLUMNS = ("vlbench_id", "prompt_index", "prompts", "prompt", "choices", "images")


def choice_form(ask, choice_mode: str, auto: str) -> str:
    """How a benchmark's prompts are asked in the harness: `generate` (an answer), `letter` (the options by
    letter, an answer generated) or `loglik` (each option's log-likelihood). `--choice-mode auto` is the
    harness's `auto` form where the benchmark can be asked that way, else log-likelihood."""
    if ask.mode == "generate":
        if choice_mode == "letter":
            raise ModelError("--choice-mode letter: the benchmark is not multiple choice (its model generates an "
                             "answer)")
        return "generate"
    if choice_mode == "letter":
        if ask.letter_reason:
            raise ModelError(f"--choice-mode letter: {ask.letter_reason}")
        return "letter"
    return "letter" if choice_mode == "auto" and auto == "letter" and not ask.letter_reason else "loglik"


def id_text(value) -> str:
    """vlbench's id of a row as the JSON a document carries (VisDial's (image_id, round_id) as a list)."""
    return json.dumps(list(value) if isinstance(value, tuple) else value)


def parse_id(text: str):
    """A document's `vlbench_id` back into the Task's id (a list becomes the tuple it was)."""
    value = json.loads(text)
    return tuple(value) if isinstance(value, list) else value


@dataclass(frozen=True)
class Shown:
    """What the documents show: the prompt template, the form, the images and videos folders and the frame
    count (Social-IQ)."""

    template: str
    form: str
    images: Path | None = None
    videos: Path | None = None
    frames: int = 8


def _png(image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def _row_images(task, table, shown: Shown) -> list[list[bytes]]:
    """Per row, the bytes of the images its prompts show (what the adapter opens: the same files)."""
    from evaluator.models.images import ImageFolder, image_sources, open_image
    from evaluator.models.videos import VideoFolder, read_frames

    ask = task.generative
    if ask.video_column is not None and shown.videos is not None:
        folder = VideoFolder(shown.videos)
        frames: dict[str, list[bytes]] = {}
        for video in table.column(ask.video_column).to_pylist():
            if video not in frames:
                frames[video] = [_png(f) for f in read_frames(folder.path(video), shown.frames)]
        return [frames[v] for v in table.column(ask.video_column).to_pylist()]
    if ask.image_column is None:
        return [[] for _ in range(table.num_rows)]
    out = []
    for source in image_sources(table, ask.image_column, ImageFolder(shown.images)):
        data = source.read_bytes() if isinstance(source, Path) else source
        open_image(source)  # a file that does not decode is one line now, not a failure inside the harness
        out.append([data])
    return out


def harness_docs(task, table, shown: Shown) -> dict[str, list]:
    """The documents of a split, as columns (DOC_COLUMNS), in the order vlbench asks its prompts."""
    ask = task.generative
    values, continuations, row_of = ask.prompts(table)
    ids = task.ids(table)
    images = _row_images(task, table, shown)
    count = [0] * table.num_rows
    for row in row_of:
        count[row] += 1
    seen = [0] * table.num_rows
    docs: dict[str, list] = {c: [] for c in DOC_COLUMNS}
    for k, row in enumerate(row_of):
        text = shown.template.format(**values[k])
        if shown.form == "letter":
            text = letter_prompt(text, continuations[k])
        docs["vlbench_id"].append(id_text(ids[row]))
        docs["prompt_index"].append(seen[row])
        docs["prompts"].append(count[row])
        docs["prompt"].append(text)
        docs["choices"].append(list(continuations[k]))
        docs["images"].append(images[row])
        seen[row] += 1
    return docs
