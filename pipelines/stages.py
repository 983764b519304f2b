"""Stage runner: content-addressed cache of stage outputs.

A stage's key is hash(stage name, code version, params, input file hashes); its output (a set of
Arrow tables) is written into a temporary folder and renamed into place, so a build killed
midway leaves only finished stages behind and the rerun reuses them. The folder's DONE file lists
the sha256 of every table file; an entry whose files are missing, extra, unreadable or differ from
their checksum is never used: it is recomputed with one warning line.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Callable

import pyarrow as pa

from builders.result import RunStage
from core.figures import FigureSpec
from core.hashing import sha256_file
from core.progress import progress
from core.tempfiles import parse_temp_name, pid_alive, temp_name


def _package_root() -> Path:
    """The folder holding the `builders` package (module names map to paths under it)."""
    import builders

    return Path(builders.__file__).parent.parent


PROJECT_LAYERS = ("core", "builders")  # what a builder may import of the project (tests/test_layers.py)


def builder_modules(module: str) -> list[Path]:
    """The source files of a builder module and of every `builders` and `core` module it imports,
    directly or not (read off the import statements, so the answer does not depend on what this process has
    imported)."""
    import ast

    root = _package_root()

    def path_of(name: str) -> Path | None:
        base = root.joinpath(*name.split("."))
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                return candidate
        if name == module:  # a builder registered from outside the project (a plug-in): its own file
            import importlib.util

            spec = importlib.util.find_spec(name)
            if spec is not None and spec.origin and Path(spec.origin).is_file():
                return Path(spec.origin)
        return None

    seen: dict[str, Path] = {}
    todo = [module, "builders"]
    while todo:
        name = todo.pop()
        path = path_of(name)
        if name in seen or path is None:
            continue
        seen[name] = path
        parts = name.split(".")
        for parent in range(1, len(parts)):
            todo.append(".".join(parts[:parent]))
        for node in ast.walk(ast.parse(path.read_bytes())):
            if isinstance(node, ast.Import):
                todo += [a.name for a in node.names if a.name.split(".")[0] in PROJECT_LAYERS]
            elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in PROJECT_LAYERS:
                todo.append(node.module)
                todo += [f"{node.module}.{a.name}" for a in node.names]  # `from builders.gqa_ood import reader as gqa`
    return sorted(set(seen.values()))


def code_version(module: str) -> str:
    """Hash of the source a builder runs: a change to one of its readers or rules invalidates its
    cached stages, and only its own (editing disco.py leaves GQA-OOD's cache valid)."""
    root = _package_root()
    digest = hashlib.sha256()
    for path in builder_modules(module):
        name = path.relative_to(root).as_posix() if path.is_relative_to(root) else path.name
        digest.update(name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def default_cache_dir() -> Path:
    """$VLBENCH_CACHE, else ~/.cache/vlbench; a file standing there is a one-line error."""
    from core.errors import ParamsError

    if os.environ.get("VLBENCH_CACHE"):
        folder = Path(os.environ["VLBENCH_CACHE"])
    else:
        try:
            folder = Path.home() / ".cache" / "vlbench"
        except RuntimeError:  # no HOME and no user entry
            raise ParamsError("no home folder for the cache: set VLBENCH_CACHE to a folder") from None
    for path in (folder, *folder.parents):
        if path.exists():
            if not path.is_dir():
                raise ParamsError(f"cache folder {folder} (VLBENCH_CACHE): {path} is a file, expected a folder")
            break
    return folder


class StageRunner(RunStage):
    """The builders' `RunStage` with a cache; records timings and cache hits, and hands figures known
    early to `on_figures` (the build's figure helper)."""

    def __init__(self, cache_dir: Path | None, code: str,
                 on_figures: Callable[[list[FigureSpec]], None] | None = None):
        from pipelines.text_cache import DiskTextCache

        self.on_figures = on_figures
        self.cache_dir = cache_dir
        # Builders' models look texts up here by (model, text); None when caching is off.
        self.text_cache = DiskTextCache(cache_dir) if cache_dir is not None else None
        self.code = code
        self.timings: dict[str, float] = {}
        self.cached: dict[str, bool] = {}
        self._digests: dict[Path, Future] = {}

    def hash_soon(self, paths: list[Path]) -> None:
        """Start hashing input files on a thread while the build reads them (hashlib releases the
        GIL): the cache keys and the manifest's checksums then wait only for what is not done. A
        daemon thread, so a build that fails early does not wait for it to exit."""
        todo = []
        for path in [Path(p).resolve() for p in paths]:
            if path not in self._digests:
                self._digests[path] = Future()
                todo.append(path)

        def work() -> None:
            for path in todo:
                try:
                    self._digests[path].set_result(sha256_file(path))
                except BaseException as exc:  # raised by digest(), in the build's own thread
                    self._digests[path].set_exception(exc)

        if todo:
            threading.Thread(target=work, name="vlbench-sha256", daemon=True).start()

    def digest(self, path: Path) -> str:
        path = Path(path).resolve()
        if path not in self._digests:
            done = Future()
            done.set_result(sha256_file(path))  # an unreadable file raises here, and is asked again next time
            self._digests[path] = done
        return self._digests[path].result()

    def figures_known(self, specs: list[FigureSpec]) -> None:
        if self.on_figures is not None:
            self.on_figures(specs)

    def key(self, name: str, params: dict, inputs: list) -> str:
        payload = {"stage": name, "code": self.code, "params": params,
                   "inputs": [self.digest(p) for p in inputs]}
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:24]

    def __call__(self, name: str, params: dict, inputs: list, compute) -> dict[str, pa.Table]:
        start = time.perf_counter()
        folder = (None if self.cache_dir is None
                  else self.cache_dir / "stages" / f"{name}-{self.key(name, params, inputs)}")
        tables = self._load(folder, name) if folder is not None and folder.exists() else None
        if tables is not None:
            self.cached[name] = True
        else:
            with progress(total=1, desc=f"stage {name}", unit="stage", leave=True,
                          bar_format="{desc}: {elapsed}") as bar:
                tables = compute()
                bar.update()
            if folder is not None:
                self._store(folder, tables)
            self.cached[name] = False
        self.timings[name] = round(time.perf_counter() - start, 3)
        return tables

    @staticmethod
    def _load(folder: Path, name: str) -> dict[str, pa.Table] | None:
        """The cached tables when every file matches the checksums in DONE; else None (one warning,
        the damaged entry is removed so that the recomputed one can take its place)."""
        try:
            listed = json.loads((folder / "DONE").read_text())["files"]
            present = {p.name for p in folder.glob("*.arrow")}
            if not isinstance(listed, dict) or set(listed) != present:
                raise ValueError(f"files {sorted(present)} differ from the {sorted(listed)} it was written with")
            for file, digest in sorted(listed.items()):
                if sha256_file(folder / file) != digest:
                    raise ValueError(f"{file} differs from its checksum")
            return {Path(file).stem: pa.ipc.open_file(pa.memory_map(str(folder / file))).read_all()
                    for file in sorted(listed)}
        except (OSError, ValueError, KeyError, TypeError, pa.ArrowException) as exc:
            reason = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
            print(f"warning: cached stage '{name}' at {folder} is damaged ({reason}); recomputing it", file=sys.stderr)
            shutil.rmtree(folder, ignore_errors=True)
            return None

    @staticmethod
    def _store(folder: Path, tables: dict[str, pa.Table]) -> None:
        tmp = folder.with_name(temp_name(folder.name))  # a name nobody can guess, made exclusively
        try:
            tmp.parent.mkdir(parents=True, exist_ok=True)
            tmp.mkdir()
            digests = {}
            for name, table in tables.items():
                with pa.ipc.new_file(tmp / f"{name}.arrow", table.schema) as writer:
                    writer.write_table(table)
                digests[f"{name}.arrow"] = sha256_file(tmp / f"{name}.arrow")
            (tmp / "DONE").write_text(json.dumps({"files": digests}, sort_keys=True))
            tmp.rename(folder)
        except OSError:  # another process finished the same stage first, or the cache's disk is full
            pass
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def clean_stale(self) -> None:
        """Temporary folders of stages whose process died (killed builds) are removed."""
        for tmp in (self.cache_dir / "stages").glob(".*") if self.cache_dir is not None else ():
            parsed = parse_temp_name(tmp.name)
            if parsed is not None and parsed[2] != os.getpid() and not pid_alive(parsed[2]):
                shutil.rmtree(tmp, ignore_errors=True)
