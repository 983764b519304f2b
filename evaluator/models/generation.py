"""How a generative VLM generates an answer: greedy by default, as lmms-eval's and the VLM papers'
short-answer evaluations do; `--gen-kwargs` sets transformers' decoding arguments, `--stop` the strings
that end an answer. The prediction record says what was used (`Generation.record`).

lmms-eval's rules are kept: `temperature > 0` turns sampling on unless `do_sample` is given; an answer
is cut before the first stop string (its `until`). Sampling draws from the torch generator seeded with
`--seed` before the first batch.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from core.errors import ParamsError

# name: (type, check, what the check asks)
GEN_KWARGS = {
    "temperature": (float, lambda v: v >= 0, ">= 0"),
    "top_p": (float, lambda v: 0 < v <= 1, "in (0, 1]"),
    "top_k": (int, lambda v: v >= 0, ">= 0"),
    "num_beams": (int, lambda v: 1 <= v <= 64, "in 1..64"),
    "do_sample": (bool, lambda v: True, "true or false"),
    "repetition_penalty": (float, lambda v: v > 0, "> 0"),
    "length_penalty": (float, lambda v: True, "a number"),
    "no_repeat_ngram_size": (int, lambda v: v >= 0, ">= 0"),
}
_SAMPLING_ONLY = ("temperature", "top_p", "top_k")  # passed only when sampling (greedy ignores them)


def _value(name: str, text: str):
    kind, check, wanted = GEN_KWARGS[name]
    try:
        if kind is bool:
            if text.lower() not in ("true", "false", "1", "0"):
                raise ValueError
            value = text.lower() in ("true", "1")
        else:
            value = kind(text)
            if kind is float and not math.isfinite(value):
                raise ValueError
    except ValueError:
        raise ParamsError(f"--gen-kwargs {name}={text}: expected {'a whole number' if kind is int else wanted}") \
            from None
    if not check(value):
        raise ParamsError(f"--gen-kwargs {name}={text}: expected {wanted}")
    return value


def parse_gen_kwargs(text: str | None) -> tuple[tuple[str, object], ...]:
    """`temperature=0.2,top_p=0.9,num_beams=3` -> ((name, typed value), ...), each name once."""
    if not text:
        return ()
    out: dict[str, object] = {}
    for part in text.split(","):
        name, sep, value = (p.strip() for p in part.partition("="))
        if not sep or not name or not value:
            raise ParamsError(f"--gen-kwargs {part.strip()!r}: expected NAME=VALUE pairs separated by commas")
        if name not in GEN_KWARGS:
            raise ParamsError(f"--gen-kwargs {name}: not a decoding argument vlbench passes (known: "
                              f"{', '.join(GEN_KWARGS)}; the answer length is --max-new-tokens)")
        if name in out:
            raise ParamsError(f"--gen-kwargs {name}: given twice")
        out[name] = _value(name, value)
    if out.get("do_sample") is True and "temperature" in out and out["temperature"] == 0:
        raise ParamsError("--gen-kwargs do_sample=true,temperature=0: sampling at temperature 0 is undefined; give "
                          "temperature > 0 to sample, or drop do_sample for greedy answers")
    return tuple(out.items())


STOP_ESCAPES = {"\\n": "\n", "\\t": "\t", "\\\\": "\\"}


def parse_stop(values) -> tuple[str, ...]:
    """`--stop TEXT` (repeatable): each a non-empty string; `\\n`, `\\t` and `\\\\` in it are a newline, a tab
    and a backslash (a shell passes `--stop '\\n'` as two characters, and a newline is the usual stop)."""
    out = []
    for value in values:
        text = re.sub(r"\\\\|\\n|\\t", lambda m: STOP_ESCAPES[m.group()], value)
        if not text:
            raise ParamsError("--stop: an empty string would end every answer before it starts")
        out.append(text)
    return tuple(out)


@dataclass(frozen=True)
class Generation:
    """The decoding of one run: answer length, `--gen-kwargs`, `--stop`."""

    max_new_tokens: int = 16
    kwargs: tuple[tuple[str, object], ...] = ()
    stop: tuple[str, ...] = ()

    @property
    def sampling(self) -> bool:
        given = dict(self.kwargs)
        return bool(given["do_sample"]) if "do_sample" in given else given.get("temperature", 0.0) > 0

    @property
    def greedy(self) -> bool:
        return not self.sampling and dict(self.kwargs).get("num_beams", 1) == 1

    def generate_kwargs(self) -> dict:
        """transformers' `generate` arguments (stop strings apart: they need the tokenizer)."""
        given = {k: v for k, v in self.kwargs if k != "do_sample"}
        if not self.sampling:
            given = {k: v for k, v in given.items() if k not in _SAMPLING_ONLY}
        return {"max_new_tokens": self.max_new_tokens, "do_sample": self.sampling, "num_beams": 1, **given}

    def cut(self, text: str) -> str:
        """The answer before the first stop string (all of it when none occurs)."""
        for stop in self.stop:
            text = text.split(stop, 1)[0]
        return text

    def record(self) -> dict:
        """What the prediction record says about decoding."""
        return {"greedy": self.greedy, "max_new_tokens": self.max_new_tokens, **dict(self.kwargs),
                "do_sample": self.sampling, **({"stop": list(self.stop)} if self.stop else {})}
