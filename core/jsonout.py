"""JSON that every parser accepts: NaN and infinities (undefined metrics, overflowing sums) become
null, and the paths of the values that did are listed so the output can say so."""

from __future__ import annotations

import json
import math


def finite(value, path: str = "$", undefined: list[str] | None = None):
    """A copy of VALUE with every non-finite float replaced by None; paths recorded in `undefined`."""
    if isinstance(value, float) and not math.isfinite(value):
        if undefined is not None:
            undefined.append(path)
        return None
    if isinstance(value, dict):
        return {k: finite(v, f"{path}.{k}", undefined) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v, f"{path}[{i}]", undefined) for i, v in enumerate(value)]
    if hasattr(value, "item") and getattr(value, "ndim", None) == 0:  # numpy scalars
        return finite(value.item(), path, undefined)
    return value


def dumps(value, note_key: str | None = None, **kwargs) -> str:
    """`json.dumps` with NaN/Infinity written as null; with `note_key`, a dict VALUE gains that key
    listing the JSON paths that were undefined (left out when none were)."""
    undefined: list[str] = []
    clean = finite(value, undefined=undefined)
    if note_key is not None and undefined and isinstance(clean, dict):
        clean[note_key] = [f"{p}: undefined (NaN or infinite), written as null" for p in undefined]
    return json.dumps(clean, allow_nan=False, **kwargs)
