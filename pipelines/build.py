"""`vlbench build`: params -> sources -> staged, cached build -> atomic export with manifest."""

from __future__ import annotations

import gc
import os
import time
from contextlib import contextmanager
from pathlib import Path

from builders.registry import get_builder
from builders.sources.files import expect_file
from core.errors import ParamsError, SourceError, VlbenchError
from core.manifest import library_versions
from core.outdir import check_out
from core.params import apply_overrides, params_to_dict
from core.threads import recorded as recorded_threads
from core.threads import torch_threads
from pipelines.export import export
from pipelines.figure_process import FigureProcess, helper_worthwhile
from pipelines.stages import StageRunner, code_version, default_cache_dir
from pipelines.verify import table_problems


def build_command(bench: str, splits: list[str], assignments: list[str], legacy_json: bool,
                  images: bool = False) -> str:
    """The command line that reproduces a build (paths left out: they differ between machines)."""
    parts = [f"vlbench build {bench} --source SOURCE --out OUT"] + (["--images IMAGES"] if images else [])
    parts += [f"--split {s}" for s in splits] + [f"--param {a}" for a in assignments]
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
    nested = source / builder.source_dir_for(params)
    return nested if nested.is_dir() else source


def input_files(sources: dict) -> list[tuple[str, Path]]:
    """(source key, path) of every raw file; a source key maps to one path or a tuple of paths."""
    return [(key, path) for key, paths in sorted(sources.items())
            for path in (paths if isinstance(paths, tuple) else (paths,))]


def _relative(path: Path, root: Path) -> str:
    """PATH relative to the source ROOT as the user laid it out (symlinks not resolved, so a source
    file that links outside the folder is recorded under its name in the folder)."""
    path, root = Path(os.path.abspath(path)), Path(os.path.abspath(root))
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return path.name


def _signature(path: Path) -> tuple:
    st = Path(path).stat()
    return st.st_size, st.st_mtime_ns, st.st_ino


def check_inputs(files: list[tuple[str, Path]]) -> dict[Path, tuple]:
    """Every raw file must be a readable regular file; returns their (size, mtime, inode)."""
    signatures = {}
    for _, path in files:
        expect_file(path, "a source file")
        signatures[path] = _signature(path)
    return signatures


def check_unchanged(signatures: dict[Path, tuple]) -> None:
    """The manifest hashes what was read: a source file changed while the build ran is an error."""
    for path, before in signatures.items():
        try:
            now = _signature(path)
        except OSError:
            now = None
        if now != before:
            raise SourceError(path, "changed while the build was reading it; nothing was written, build again")


def run_build(bench: str, source: Path, out: Path, *, splits: list[str] | None = None,
              assignments: list[str] | None = None, legacy_json: bool = False, use_cache: bool = True,
              images: Path | None = None, overwrite: bool = False) -> dict:
    """Build one benchmark into OUT; returns the manifest. Nothing is written when it fails.

    OUT is checked before any work (core.outdir.check_out) and again before it is replaced;
    the built tables pass the same checks as `vlbench verify` before they are published."""
    started = time.perf_counter()
    builder = get_builder(bench)
    assignments = list(assignments or [])
    params = apply_overrides(builder.params_class(), assignments)
    given = Path(source)
    if not given.exists():
        raise SourceError(given, "no such file or folder")
    source = source_folder(builder, given, params)
    extra = {}
    if images is not None:
        if not builder.supports_images:
            raise ParamsError(f"--images: {bench} has no images to embed")
        if not Path(images).is_dir():
            raise ParamsError(f"--images {images}: " + ("is a file, expected a folder" if Path(images).exists()
                                                         else "no such folder"))
        extra["images"] = Path(images)
    root = source if source.is_dir() else source.parent
    sources = builder.locate_sources(source, list(splits or []), params)
    files = input_files(sources)
    # A source folder is protected whole; a single source file, and every input file, itself.
    protected = {"--source": [given, source] + [path for _, path in files],
                 **({"--images": [Path(images)]} if images is not None else {})}
    check_out(out, protected, overwrite)
    signatures = check_inputs(files)
    with (FigureProcess(helper_worthwhile(sum(size for size, *_ in signatures.values()))) as figures,
          gc_paused()):
        runner = StageRunner(default_cache_dir() if use_cache else None, code_version(type(builder).__module__),
                             on_figures=figures.start)
        runner.clean_stale()
        runner.hash_soon([path for _, path in files])
        result = builder.build(sources, params, runner, **extra)
        figures.start(result.figures)
        params_dict = params_to_dict(params)

        def check_tables() -> None:
            problems = table_problems(builder, result.tables, params_dict)
            if problems:
                raise VlbenchError(f"{bench}: the built tables fail `vlbench verify`'s checks, nothing was written: "
                                   f"{problems[0]}" + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""))

        manifest = {
            "benchmark": bench,
            "command": build_command(bench, sorted(splits or []), assignments, legacy_json, images is not None),
            "params": params_dict,
            "splits": sorted({split for by_split in result.tables.values() for split in by_split}),
            "legacy_json": legacy_json,
            "inputs": [{"source": key, "path": _relative(path, root), "bytes": signatures[path][0],
                        "sha256": runner.digest(path)} for key, path in files],
            "versions": library_versions(),
            "code_version": runner.code,
            "statistics": result.statistics,
        }
        check_unchanged(signatures)
        manifest["run"] = {**result.run_info, "stage_seconds": runner.timings, "stage_cached": runner.cached,
                           "build_seconds": round(time.perf_counter() - started, 3),
                           "threads": {"chosen_by": recorded_threads(), "count": torch_threads()}}
        return export(result, builder, out, manifest, legacy_json, figures.pngs, check=check_tables,
                      recheck=lambda: check_out(out, protected, overwrite))
