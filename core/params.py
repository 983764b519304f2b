"""Typed `KEY=VALUE` overrides of a params dataclass: `build --param` (builder parameters) and
`evaluate/perceptual --option` (scoring options)."""

from __future__ import annotations

import dataclasses
import json
import math
import types
import typing

from core.errors import ParamsError

MAX_ARGUMENT_DEPTH = 32  # lists and objects inside a command-line value (an engine or template argument)


def json_or_text(text: str, where: str):
    """A command-line value read as JSON where it is JSON (numbers, true/false, null, lists, objects; NaN and
    infinities stay text), else the text itself; nested more than MAX_ARGUMENT_DEPTH deep is one line naming
    `where` (before Python's parser runs out of stack)."""
    depth = deepest = 0
    for char in text:  # an upper bound of the nesting (brackets inside strings count too): refused before parsing
        depth += char in "[{"
        deepest = max(deepest, depth)
        depth -= char in "]}"
    if deepest > MAX_ARGUMENT_DEPTH:
        raise ParamsError(f"{where}: nested more than {MAX_ARGUMENT_DEPTH} lists or objects deep")
    try:
        value = json.loads(text)
    except ValueError:
        return text
    if isinstance(value, float) and not math.isfinite(value):
        return text
    return value


def _convert(name: str, raw: str, annotation, option: str = "--param"):
    """Parse `raw` as a value of `annotation` (bool, int, float, str, list[...], unions, Literal)."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        errors = []
        for choice in typing.get_args(annotation):
            try:
                return _convert(name, raw, choice, option)
            except ParamsError as exc:
                errors.append(str(exc))
        raise ParamsError(f"{option} {name}={raw}: not a valid value ({'; '.join(errors)})")
    if origin is typing.Literal:
        choices = typing.get_args(annotation)
        if raw in choices:
            return raw
        raise ParamsError(f"{option} {name}={raw}: expected one of {', '.join(map(str, choices))}")
    if origin in (list, tuple):
        (item,) = typing.get_args(annotation)[:1]
        text = raw.strip()
        parts = json_or_text(text, f"{option} {name}") if text.startswith("[") else \
            [p for p in text.split(",") if p.strip()]
        if not isinstance(parts, (list, tuple)):
            raise ParamsError(f"{option} {name}={raw[:80]}: not a JSON list")
        return tuple(_convert(name, str(p).strip(), item, option) for p in parts)
    if annotation is bool:
        lowered = raw.strip().lower()
        if lowered in ("true", "1", "yes"):
            return True
        if lowered in ("false", "0", "no"):
            return False
        raise ParamsError(f"{option} {name}={raw}: expected true or false")
    if annotation in (int, float):
        try:
            value = annotation(raw)
        except ValueError:
            raise ParamsError(f"{option} {name}={raw}: expected {annotation.__name__}") from None
        if not math.isfinite(value):
            raise ParamsError(f"{option} {name}={raw}: expected a finite number")
        return value
    if annotation is str:
        return raw
    raise ParamsError(f"{option} {name}: unsupported parameter type {annotation!r}")


def param(default, help: str):
    """A params dataclass field with its meaning (shown by `vlbench params`)."""
    return dataclasses.field(default=default, metadata={"help": help})


def describe(params_class) -> list[dict]:
    """name, type, default and meaning of every field of a params dataclass, in declaration order."""
    hints = typing.get_type_hints(params_class)
    return [{"name": f.name, "type": _type_name(hints[f.name]), "default": f.default,
             "help": f.metadata.get("help", "")} for f in dataclasses.fields(params_class)]


def _type_name(annotation) -> str:
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return "|".join(map(str, typing.get_args(annotation)))
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(annotation))
    if origin in (list, tuple):
        return f"list of {_type_name(typing.get_args(annotation)[0])}"
    return getattr(annotation, "__name__", str(annotation))


def apply_overrides(params, assignments: list[str], option: str = "--param"):
    """Return a copy of the params dataclass with `KEY=VALUE` assignments applied and checked."""
    hints = typing.get_type_hints(type(params))
    fields = {f.name for f in dataclasses.fields(params)}
    changes = {}
    for assignment in assignments:
        key, sep, value = assignment.partition("=")
        key = key.strip()
        if not sep:
            raise ParamsError(f"{option} {assignment}: expected KEY=VALUE")
        if key not in fields:
            known = f"known: {', '.join(sorted(fields))}" if fields else "there are no parameters to set"
            raise ParamsError(f"{option} {key}: unknown parameter; {known}")
        changes[key] = _convert(key, value, hints[key], option)
    try:
        return dataclasses.replace(params, **changes)
    except ParamsError as exc:  # the params' own range checks (__post_init__) name no option
        message = str(exc)
        raise ParamsError(message if message.startswith(option) else
                          f"{option} {', '.join(a for a in assignments)}: {message}") from None


def params_to_dict(params) -> dict:
    """JSON-ready view of a params dataclass (tuples become lists)."""
    return json.loads(json.dumps(dataclasses.asdict(params)))

