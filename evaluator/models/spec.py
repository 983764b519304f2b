"""Model specs: the one parser of `baseline:`, `py:`, `hf:`, `vllm:`, `openai:` and `features:` specs, an
`hf:` / `vllm:` spec's config (read once, before any weight), and a `py:` factory's object. Which Model a
spec becomes is decided in evaluator/models/resolve.py."""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

from core.errors import ModelError

SPEC_KINDS = ("baseline", "py", "hf", "vllm", "openai", "features")


def parse_spec(spec: str) -> tuple[str, str]:
    """(kind, name) of a model spec: `baseline:<name>`, `py:<module>:<factory>`, `hf:<hub id or path>`,
    `vllm:<hub id or path>`, `openai:<model served at --base-url>`, `features:<folder>`."""
    kind, sep, name = spec.partition(":")
    if not spec.isprintable():  # a control character, or a byte of a name that is not UTF-8 (a surrogate)
        raise ModelError(f"--model {ascii(spec)[:200]}: holds characters that cannot be printed")
    if not sep or kind not in SPEC_KINDS or not name.strip():
        raise ModelError(f"--model {spec[:200]}: expected baseline:<name>, py:<module>:<factory>, hf:<hub id or path>, "
                         "vllm:<hub id or path>, openai:<served model> or features:<folder>")
    return kind, name


def hf_config(name: str, revision: str | None = None):
    """The transformers config of an `hf:` spec; a missing, non-model or unknown checkpoint, or a
    folder vlbench will not load (core.model_files: pickle weights, its own code, a damaged
    safetensors header), is a one-line ModelError, before any weight is read."""
    from transformers import AutoConfig

    from core.model_files import load_kwargs

    local = Path(name).expanduser()
    if not local.exists() and (name.startswith((".", "/", "~")) or ("/" in name and local.parent.is_dir())):
        raise ModelError(f"hf:{name}: no such model folder (and not a hub model id ORG/NAME)")
    load_kwargs(name, f"hf:{name}")
    if revision is not None and local.exists():
        raise ModelError(f"--revision {revision}: hf:{name} is a local folder; a revision names a hub checkpoint's "
                         "branch, tag or commit")
    from huggingface_hub.errors import StrictDataclassError

    try:
        return AutoConfig.from_pretrained(name, **({"revision": revision} if revision else {}))
    except (OSError, ValueError, TypeError, StrictDataclassError) as exc:  # the last: the config's strict validation
        reason = " ".join(str(exc).split()) or type(exc).__name__
        raise ModelError(f"hf:{name}: cannot load ({reason[:300]})") from None


def load_py_model(target: str, method: str = "predict", signature: str = "predict(table)"):
    """`module:factory` -> factory(); the object must have the callable `method` (a task model's
    `predict(table) -> list`, CounterBias's `score(queries, ids)`)."""
    module, sep, factory = target.partition(":")
    if not sep:
        raise ModelError(f"--model py:{target}: expected py:<module>:<factory>")
    cwd = os.getcwd()
    added = cwd not in sys.path
    if added:  # `python -m` would find a module in the current folder; so does vlbench
        sys.path.insert(0, cwd)
    try:
        model = getattr(importlib.import_module(module), factory)()
    except (ImportError, AttributeError) as exc:
        raise ModelError(f"--model py:{target}: {exc}") from None
    finally:
        if added:
            sys.path.remove(cwd)
    if not callable(getattr(model, method, None)):
        raise ModelError(f"--model py:{target}: the factory's object has no {signature} method")
    return model
