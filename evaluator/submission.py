"""Load and validate prediction files: every problem names the first ids and the count."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from core.errors import SubmissionError, os_problem

_SHOW = 3


def _first(ids: list, n: int = _SHOW) -> str:
    return ", ".join(repr(i) for i in ids[:n]) + (", ..." if len(ids) > n else "")


@dataclass
class Coverage:
    scored: int
    expected: int
    missing: int
    ignored_extra: int

    def as_dict(self) -> dict:
        return {"scored": self.scored, "expected": self.expected, "missing": self.missing,
                "ignored_extra": self.ignored_extra,
                "fraction": round(self.scored / self.expected, 6) if self.expected else 0.0}


def is_string(value) -> bool:
    return isinstance(value, str)


def is_finite_number(value) -> bool:
    """A JSON number that is finite as a float (an integer such as 10**400 is not: it has no float)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def is_rank_permutation(length: int):
    """Checker for a list holding each rank 1..length once (VisDial's EvalAI format)."""
    target = list(range(1, length + 1))

    def check(value) -> bool:
        return (isinstance(value, list) and len(value) == length
                and all(isinstance(v, int) and not isinstance(v, bool) for v in value) and sorted(value) == target)
    return check


def is_score_list(length: int):
    """Checker for a list of `length` finite numbers (scores per choice)."""
    def check(value) -> bool:
        return isinstance(value, list) and len(value) == length and all(is_finite_number(v) for v in value)
    return check


def is_score_grid(rows: int, length: int):
    """Checker for `rows` lists of `length` finite numbers (VCR's rationale scores given each answer)."""
    row = is_score_list(length)

    def check(value) -> bool:
        return isinstance(value, list) and len(value) == rows and all(row(v) for v in value)
    return check


def either(*checks):
    """Checker for a value any of `checks` accepts."""
    def check(value) -> bool:
        return any(c(value) for c in checks)
    return check


def read_json(path: Path):
    """A JSON file's content; unreadable or malformed is a one-line SubmissionError naming the file."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise SubmissionError(f"{path}: {os_problem(exc)}") from None
    return parse_json(data, str(path))


def parse_json(data: bytes | str, where: str):
    """One JSON document (a file's bytes, or a line of a JSON-lines file); anything it cannot be is a
    one-line SubmissionError starting with WHERE."""
    try:  # Python's parser: files written by Python may hold NaN/Infinity, reported as not finite later
        return json.loads(data)
    except json.JSONDecodeError as exc:
        raise SubmissionError(f"{where}: not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") \
            from None
    except UnicodeDecodeError as exc:
        raise SubmissionError(f"{where}: not UTF-8 text (byte offset {exc.start})") from None
    except RecursionError:
        raise SubmissionError(f"{where}: JSON nested too deeply") from None
    except ValueError:  # Python refuses integers of more than 4300 digits
        raise SubmissionError(f"{where}: holds an integer of more than 4300 digits") from None


def check_entries(path: Path, items, id_field, value_field, id_type: type, value_check, value_desc: str,
                  entry_name: str = "entry numbers") -> dict:
    """`[{id_field: id, value_field: value}, ...]` -> {id: value}; types, duplicates, NaN/inf checked,
    on entries already read (a vlbench submission, or rows of another harness's output converted by
    evaluator.interop, whose `load_submission` reads every format).

    `id_field` may be a tuple of fields (VisDial's image_id + round_id): the id is then the tuple.
    `value_field` may be a tuple of fields (VCR's answer_scores + rationale_scores), each checked by
    `value_check` (or by its own, where `value_check` is a tuple of one check per field): the value is then the
    tuple of their values."""
    fields = id_field if isinstance(id_field, tuple) else (id_field,)
    values = value_field if isinstance(value_field, tuple) else (value_field,)
    checks = value_check if isinstance(value_check, tuple) else (value_check,) * len(values)
    id_name = "/".join(fields)
    wanted = ", ".join(f'"{f}"' for f in (*fields, *values))
    if not isinstance(items, list):
        raise SubmissionError(f"{path}: expected a JSON list of {{{wanted}}} objects")
    problems: dict[str, list] = {}
    out: dict = {}
    for n, item in enumerate(items):
        if not isinstance(item, dict) or any(f not in item for f in (*fields, *values)):
            problems.setdefault(f"entries without {wanted} ({entry_name})", []).append(n)
            continue
        parts = tuple(item[f] for f in fields)
        key = parts if len(fields) > 1 else parts[0]
        if any(not isinstance(k, id_type) or isinstance(k, bool) for k in parts):
            problems.setdefault(f"'{id_name}' values that are not {id_type.__name__}", []).append(key)
            continue
        wrong = next((f for f, check in zip(values, checks) if not check(item[f])), None)
        if wrong is not None:
            problems.setdefault(f"'{wrong}' values that are not {value_desc}", []).append(key)
            continue
        if key in out:
            problems.setdefault(f"duplicate '{id_name}'", []).append(key)
            continue
        out[key] = tuple(item[f] for f in values) if isinstance(value_field, tuple) else item[value_field]
    if problems:
        what, ids = next(iter(problems.items()))
        raise SubmissionError(f"{path}: {len(ids):,} {what}: {_first(ids)}")
    return out


PARTIAL_HINT = "pass --allow-partial to score what is there"


def match_ids(path: Path, predictions: dict, expected: list, id_field: str, allow_partial: bool,
              allow_extra: bool, partial_hint: str = PARTIAL_HINT) -> Coverage:
    """Check the prediction ids against the split's ids; unknown and missing ids are errors unless allowed
    (`partial_hint`: what the error of missing ids says to do)."""
    id_field = "/".join(id_field) if isinstance(id_field, tuple) else id_field
    expected_set = set(expected)
    extra = sorted(k for k in predictions if k not in expected_set)
    if extra and not allow_extra:
        raise SubmissionError(f"{path}: {len(extra):,} unknown '{id_field}' (not in the split): {_first(extra)}"
                              " (pass --allow-extra to ignore them)")
    missing = [k for k in expected if k not in predictions]
    if expected and len(missing) == len(expected):
        raise SubmissionError(f"{path}: none of the {len(expected):,} '{id_field}' of the split has a prediction "
                              f"(first expected: {_first(expected)}); is this the right benchmark and split?")
    if missing and not allow_partial:
        raise SubmissionError(f"{path}: {len(missing):,} of {len(expected):,} '{id_field}' have no prediction:"
                              f" {_first(missing)} ({partial_hint})")
    return Coverage(scored=len(expected) - len(missing), expected=len(expected), missing=len(missing),
                    ignored_extra=len(extra))
