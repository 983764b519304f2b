"""manifest.json: inputs, params, versions, outputs; run timings kept apart under "run"."""

from __future__ import annotations

import json
import platform
from importlib import metadata
from pathlib import Path

from core.hashing import sha256_file
from core.jsonout import dumps

# The libraries whose versions shape a build's bytes: the tables (pyarrow, datasets, numpy), the
# models' floats (torch, transformers, tokenizers, sentence-transformers, safetensors), images and
# audio (pillow's JPEG encoder, scipy's .mat reader, soundfile), figures (matplotlib) and the card's
# metadata (PyYAML). `vlbench verify --against` names those that differ from a published build.
LIBRARIES = ("vlbench", "datasets", "huggingface_hub", "pyarrow", "numpy", "msgspec", "torch", "transformers",
             "tokenizers", "sentence-transformers", "safetensors", "pillow", "scipy", "soundfile", "matplotlib",
             "pyyaml")
MANIFEST = "manifest.json"


def library_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in LIBRARIES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def describe_outputs(folder: Path, rows: dict[str, int]) -> list[dict]:
    """Every file under the folder (but the manifest) with its sha256 and, for tables, its rows."""
    outputs = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and p.name != MANIFEST):
        rel = path.relative_to(folder).as_posix()
        outputs.append({"path": rel, "sha256": sha256_file(path), "bytes": path.stat().st_size,
                        **({"rows": rows[rel]} if rel in rows else {})})
    return outputs


def build_identity(folder: Path) -> str:
    """What the build in FOLDER holds, as one SHA-256: its benchmark and every output file's path and
    SHA-256 (its manifest's `outputs`). Two byte-identical builds (a rebuild, another machine, another day)
    share it, where the manifest's own SHA-256 differs with its run record (timings, cache hits). A
    manifest whose outputs are not such a list is a one-line error."""
    import hashlib

    from core.errors import VlbenchError

    manifest = read_manifest(folder)
    outputs = manifest.get("outputs")
    if not isinstance(outputs, list) or not all(
            isinstance(o, dict) and isinstance(o.get("path"), str) and isinstance(o.get("sha256"), str)
            for o in outputs):
        raise VlbenchError(f"{Path(folder) / MANIFEST}: outputs is not a list of files with path and sha256 "
                           "(rebuild the folder)")
    content = {"benchmark": manifest.get("benchmark"), "outputs": sorted((o["path"], o["sha256"]) for o in outputs)}
    return hashlib.sha256(json.dumps(content, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def write_manifest(folder: Path, manifest: dict) -> None:
    (folder / MANIFEST).write_text(dumps(manifest, note_key="undefined", indent=2, sort_keys=True) + "\n")


def read_manifest(folder: Path) -> dict:
    """The manifest of a built folder; an unreadable or corrupt one is a one-line error."""
    return read_manifest_file(Path(folder) / MANIFEST)


def read_manifest_file(path: Path) -> dict:
    """A manifest.json; an unreadable or corrupt one is a one-line error."""
    from core.errors import VlbenchError, os_problem

    path = Path(path)
    try:
        manifest = json.loads(path.read_bytes())
    except OSError as exc:
        raise VlbenchError(f"{path}: {os_problem(exc)}") from None
    except (ValueError, RecursionError) as exc:
        raise VlbenchError(f"{path}: corrupt manifest (not valid JSON: {str(exc)[:120]})") from None
    if not isinstance(manifest, dict):
        raise VlbenchError(f"{path}: corrupt manifest (expected a JSON object)")
    return manifest
