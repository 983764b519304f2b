"""Reasoning models: the thinking a model writes before its answer, separated from the answer before any
benchmark reads it (every backend: `hf:`, `vllm:`, `openai:`, and the answers of lmms-eval / VLMEvalKit
logs).

A thinking block lies between an opening and a closing marker. The markers of today's families:

- `<think>` ... `</think>`: Qwen3-VL-Thinking, Qwen3.5, GLM-4.1V / 4.5V-Thinking, InternVL3.5, MiMo-VL,
  Keye-VL, Phi-4-reasoning, DeepSeek-R1 distillations;
- `◁think▷` ... `◁/think▷`: Kimi-VL-Thinking;
- `<thinking>` ... `</thinking>`, `<reasoning>` ... `</reasoning>`, `<thought>` ... `</thought>`: other
  fine-tunes (the names lmms-eval's and VLMEvalKit's strippers know).

`--reasoning-tags OPEN,CLOSE` (repeatable) replaces that list. Where a chat template opens the block itself
(Qwen3-VL-Thinking's generation prompt ends with `<think>`), the output begins inside it: the backend
says so (`opened`) and the output is read as if it began with the marker. A server that separates the
thinking itself (vLLM's and SGLang's `reasoning_content`, OpenRouter's `reasoning`) has it put back in
front of the answer between the first pair of markers (evaluator/models/served.py), so every backend's
raw output reads alike and `--log-samples` keeps all of it.

The answer is what follows the last closing marker. An output whose block is opened and never closed (the
token budget ran out while thinking) is **unfinished**: it has no answer, is never parsed as one, is
scored as an unparsed answer (wrong) and is counted (`unfinished_answers` in the prediction record and
on the report card). Inside the answer, GLM's `<answer>` ... `</answer>` and `<|begin_of_box|>` ...
`<|end_of_box|>` wrappers are taken off.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.errors import ParamsError

DEFAULT_TAGS: tuple[tuple[str, str], ...] = (
    ("<think>", "</think>"), ("\u25c1think\u25b7", "\u25c1/think\u25b7"), ("<thinking>", "</thinking>"),
    ("<reasoning>", "</reasoning>"), ("<thought>", "</thought>"))
# GLM-4.1V-Thinking writes <answer>...</answer> after its thinking; GLM-4.5V boxes the final answer
ANSWER_WRAPPERS: tuple[tuple[str, str], ...] = (("<answer>", "</answer>"), ("<|begin_of_box|>", "<|end_of_box|>"))
THINKING_MAX_NEW_TOKENS = 4096  # --max-new-tokens when thinking is on and the option is not given (lmms-eval's
# thinking examples' budget); a short answer's default is ANSWER_MAX_NEW_TOKENS
ANSWER_MAX_NEW_TOKENS = 16
MAX_TAG_CHARACTERS = 64
# chat-template switches that turn thinking on (Qwen3 / Qwen3.5 / InternVL3.5: enable_thinking; GLM, DeepSeek:
# thinking)
THINKING_SWITCHES = ("enable_thinking", "thinking")


@dataclass(frozen=True)
class Reply:
    """One raw output read: the answer (None: unfinished, cut off inside its thinking) and the thinking
    (None: the output has no thinking block)."""

    answer: str | None
    thinking: str | None = None

    @property
    def unfinished(self) -> bool:
        return self.answer is None


def parse_reasoning_tags(values) -> tuple[tuple[str, str], ...] | None:
    """`--reasoning-tags OPEN,CLOSE` (repeatable) -> the marker pairs, in order; None when none is given
    (the defaults). Each side is non-empty text without control characters, the two sides differ, and
    neither is a part of the other."""
    pairs = []
    for value in values or ():
        parts = value.split(",")
        if len(parts) != 2 or not all(p.strip() for p in parts):
            raise ParamsError(f"--reasoning-tags {value!r}: expected OPEN,CLOSE, two non-empty markers such as "
                              "'<think>,</think>'")
        opening, closing = (p.strip() for p in parts)
        if any(len(p) > MAX_TAG_CHARACTERS or any(ord(c) < 32 or ord(c) == 127 for c in p)
               for p in (opening, closing)):
            raise ParamsError(f"--reasoning-tags {value[:80]!r}: a marker is at most {MAX_TAG_CHARACTERS} printable "
                              "characters")
        if opening in closing or closing in opening:
            raise ParamsError(f"--reasoning-tags {value!r}: the opening and closing markers must differ and neither "
                              "may contain the other")
        if (opening, closing) in pairs:
            raise ParamsError(f"--reasoning-tags {value!r}: given twice")
        pairs.append((opening, closing))
    return tuple(pairs) or None


@dataclass(frozen=True)
class Reasoning:
    """The markers a run separates thinking by (`--reasoning-tags`, or the families' own)."""

    tags: tuple[tuple[str, str], ...] = DEFAULT_TAGS

    def opened_by(self, prompt: str) -> str | None:
        """The opening marker a prompt ends with (a chat template that opens the thinking block itself), or
        None."""
        tail = prompt.rstrip()
        return next((opening for opening, _ in self.tags if tail.endswith(opening)), None)

    def split(self, text: str, opened: str | None = None) -> Reply:
        """An output read into its answer and its thinking (the module docstring): the pair is the one whose
        marker comes first in the output (or the one `opened`, the marker the prompt ended with); the answer
        follows that pair's last closing marker; a block opened after it, or never closed, is unfinished."""
        pair = next((p for p in self.tags if p[0] == opened), None) if opened else None
        if pair is not None:
            text = pair[0] + text
        else:
            found = [(text.find(marker), p) for p in self.tags for marker in p if marker in text]
            if not found:
                return Reply(unwrap(text))
            pair = min(found, key=lambda f: f[0])[1]
        opening, closing = pair
        close = text.rfind(closing)
        if close == -1 or text.rfind(opening) > close:
            start = text.rfind(opening)
            return Reply(None, text[start + len(opening):])
        before = text[:close]
        thinking = before[before.find(opening) + len(opening):] if opening in before else before
        return Reply(unwrap(text[close + len(closing):]), thinking)

    def record(self) -> dict:
        """What the prediction record (and a response-cache key) says about how thinking was separated."""
        return {"tags": [list(p) for p in self.tags], "default_tags": self.tags == DEFAULT_TAGS}


def unwrap(answer: str) -> str:
    """The answer inside GLM's `<answer>` / box wrappers, when it is wrapped (an unclosed wrapper: what
    follows it)."""
    for opening, closing in ANSWER_WRAPPERS:
        start = answer.find(opening)
        if start != -1:
            inner = answer[start + len(opening):]
            end = inner.find(closing)
            answer = inner if end == -1 else inner[:end]
    return answer


def answer_budget(options, thinking: bool, context: int | None = None) -> int:
    """`--max-new-tokens`, or its default: ANSWER_MAX_NEW_TOKENS for a short answer, THINKING_MAX_NEW_TOKENS when
    thinking is on (the thinking counts against the budget on every backend), at most half the model's
    context where it is known (the prompt needs the rest)."""
    if options.max_new_tokens is not None:
        return options.max_new_tokens
    if not thinking:
        return ANSWER_MAX_NEW_TOKENS
    return THINKING_MAX_NEW_TOKENS if context is None else max(ANSWER_MAX_NEW_TOKENS, min(THINKING_MAX_NEW_TOKENS,
                                                                                         context // 2))


def thinking_switched_on(kwargs: dict) -> bool:
    """Whether `--chat-template-kwarg`s turn a template's thinking on (`enable_thinking=true`, `thinking=true`)."""
    return any(kwargs.get(k) is True for k in THINKING_SWITCHES)


def served_output(content: str, reasoning: str | None, finished: bool, tags: tuple[tuple[str, str], ...]) -> str:
    """A served answer whose thinking came in a separate field, as one raw output: the thinking between the
    first pair of markers, then the answer. A response cut off by its token budget with thinking and no
    answer is unfinished whatever the thinking holds: its block is left open, and any closing marker inside
    the thinking (a model that wrote `</think> B` in its reasoning before the budget ran out) is taken out, so
    that nothing in it is ever read as the answer."""
    if not reasoning:
        return content
    opening, closing = tags[0]
    if not content and not finished:
        for _, marker in tags:
            reasoning = reasoning.replace(marker, "")
        return f"{opening}{reasoning}"
    return f"{opening}{reasoning}{closing}{content}"
