"""`vlbench build`: params -> sources -> staged, cached build -> atomic export with manifest."""

from __future__ import annotations

import gc
import time
from contextlib import contextmanager
from pathlib import Path

from builders.errors import ParamsError
from builders.params import apply_overrides, params_to_dict
from builders.registry import get_builder
from pipelines.export import export
from pipelines.manifest import library_versions
from pipelines.stages import StageRunner, default_cache_dir


def build_command(bench: str, splits: list[str], assignments: list[str], legacy_json: bool,
                  images: bool = False) -> str:
    """The command line that reproduces a build (paths left out: they differ between machines)."""
    parts = [f"vlbench build {bench} --source SOURCE --out OUT"] + (["--images IMAGES"] if images else [])
    parts += [f"--split {s}" for s in splits] + [f"--set {a}" for a in assignments]
    return " ".join(parts + (["--legacy-json"] if legacy_json else []))


@contextmanager
def gc_paused():
    """The stages allocate millions of short-lived, acyclic objects; cyclic GC passes over them
    only cost time (reference counting still frees everything)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def source_folder(builder, source: Path, params) -> Path:
    """SOURCE may be the benchmark's own folder or a sources root holding it (as sample-sources writes);
    a builder whose raw format depends on its params names the folder with `source_dir_for(params)`."""
    name = builder.source_dir_for(params) if hasattr(builder, "source_dir_for") else builder.source_dir
    nested = source / name
    return nested if nested.is_dir() else source


def input_files(sources: dict) -> list[tuple[str, Path]]:
    """(source key, path) of every raw file; a source key maps to one path or a tuple of paths."""
    return [(key, path) for key, paths in sorted(sources.items())
            for path in (paths if isinstance(paths, tuple) else (paths,))]


def run_build(bench: str, source: Path, out: Path, splits: list[str] | None = None,
              assignments: list[str] | None = None, legacy_json: bool = False, use_cache: bool = True,
              images: Path | None = None) -> dict:
    """Build one benchmark into OUT; returns the manifest. Nothing is written when it fails."""
    started = time.perf_counter()
    builder = get_builder(bench)
    assignments = list(assignments or [])
    params = apply_overrides(builder.params_class(), assignments)
    source = source_folder(builder, Path(source), params)
    sources = builder.locate_sources(source, list(splits or []), params)
    runner = StageRunner(default_cache_dir() if use_cache else None)
    extra = {}
    if images is not None:
        if not getattr(builder, "supports_images", False):
            raise ParamsError(f"--images: {bench} has no images to embed")
        if not Path(images).is_dir():
            raise ParamsError(f"--images {images}: not a folder")
        extra["images"] = Path(images)
    with gc_paused():
        result = builder.build(sources, params, runner, **extra)
    root = Path(source) if Path(source).is_dir() else Path(source).parent
    manifest = {
        "benchmark": bench,
        "command": build_command(bench, sorted(splits or []), assignments, legacy_json, images is not None),
        "params": params_to_dict(params),
        "splits": sorted({split for by_split in result.tables.values() for split in by_split}),
        "legacy_json": legacy_json,
        "inputs": [{"source": key, "path": path.resolve().relative_to(root.resolve()).as_posix(),
                    "bytes": path.stat().st_size, "sha256": runner.digest(path)}
                   for key, path in input_files(sources)],
        "versions": library_versions(),
        "code_version": runner.code,
        "statistics": result.statistics,
    }
    manifest["run"] = {**result.run_info, "stage_seconds": runner.timings, "stage_cached": runner.cached,
                       "build_seconds": round(time.perf_counter() - started, 3)}
    return export(result, builder, out, manifest, legacy_json)
