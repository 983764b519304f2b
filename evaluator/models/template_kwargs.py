"""Chat-template switches, `--chat-template-kwarg KEY=VALUE` (repeatable): variables a checkpoint's chat
template reads beside the messages (`enable_thinking` of Qwen3 / Qwen3.5 / InternVL3.5, `thinking` of
GLM and DeepSeek, a template's own). `hf:` and `vllm:` pass them to `apply_chat_template` and check
that the template reads each one; `openai:` sends them as the request's `chat_template_kwargs` (vLLM's
and SGLang's servers pass them to their template). They are recorded in the prediction record and are
part of every response-cache key."""

from __future__ import annotations

from core.errors import ModelError, ParamsError
from core.params import json_or_text

# what vlbench itself passes to apply_chat_template: never a switch
RESERVED = frozenset({"messages", "conversation", "add_generation_prompt", "tokenize", "continue_final_message",
                      "return_dict", "return_tensors", "padding", "truncation", "max_length", "chat_template",
                      "tools", "documents"})


def parse_template_kwargs(values) -> tuple[tuple[str, object], ...]:
    """`--chat-template-kwarg KEY=VALUE` (repeatable) -> ((key, typed value), ...), each key once."""
    out: dict[str, object] = {}
    for value in values or ():
        key, sep, text = value.partition("=")
        key = key.strip()
        if not sep or not key.isidentifier():
            raise ParamsError(f"--chat-template-kwarg {value[:80]!r}: expected KEY=VALUE, KEY a template variable "
                              "such as enable_thinking")
        if key in RESERVED:
            raise ParamsError(f"--chat-template-kwarg {key}: set by vlbench itself, not a template switch")
        if key in out:
            raise ParamsError(f"--chat-template-kwarg {key}: given twice")
        out[key] = json_or_text(text.strip(), f"--chat-template-kwarg {key}")
    return tuple(out.items())


def template_variables(template: str) -> set[str]:
    """The variables a Jinja chat template reads from outside (its undeclared names)."""
    from jinja2 import meta
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    return set(meta.find_undeclared_variables(ImmutableSandboxedEnvironment().parse(template)))


def check_template_reads(kwargs: dict, template: str, spec: str) -> None:
    """Every switch must be a variable the template reads: one naming nothing (a typo) would change nothing
    while the record says it was set."""
    if not kwargs:
        return
    known = template_variables(template)
    unread = [k for k in kwargs if k not in known]
    if unread:
        shown = ", ".join(sorted(v for v in known if v not in RESERVED and v != "raise_exception")) or "none"
        raise ModelError(f"--chat-template-kwarg {unread[0]}: {spec}'s chat template does not read it (it reads: "
                         f"{shown[:400]})")
