"""The OUT folder of `vlbench build`: never a source, replaced only when it is vlbench's own, written
atomically, safe under concurrent builds and kills.

* `check_out` refuses an OUT that is, contains or lies inside a protected folder (the sources, the
  images) and an existing OUT that vlbench did not write, unless `--overwrite` (never a source).
* `atomic_folder` stages the build beside OUT in `.OUT.vlbench-partial-PID-TOKEN` and publishes it with two
  renames under an exclusive lock on OUT's parent folder, so two builds into one OUT end with one
  complete build. Staging folders and partial files of dead processes in OUT's parent are cleaned up
  (a backup whose publish was cut short is put back), and SIGTERM unwinds like SIGINT (see
  `pipelines.cli`).
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import shutil
import signal
import threading
from contextlib import contextmanager
from pathlib import Path

from core.errors import ParamsError, VlbenchError, os_problem
from core.manifest import MANIFEST
from core.tempfiles import create_exclusively, parse_temp_name, pid_alive, temp_name


def _same_or_inside(a: Path, b: Path) -> bool:
    return a == b or b in a.parents


def is_vlbench_output(path: Path) -> bool:
    """A folder holding a manifest.json that vlbench wrote (benchmark, outputs, inputs)."""
    try:
        manifest = json.loads((path / MANIFEST).read_text())
    except (OSError, ValueError, RecursionError):
        return False
    return isinstance(manifest, dict) and {"benchmark", "outputs", "inputs"} <= manifest.keys()


def check_out(out: Path, protected: dict[str, list[Path]], overwrite: bool, owned=is_vlbench_output,
              writer: str = "`vlbench build` (no vlbench manifest)") -> None:
    """Refuse an unsafe OUT (exit 2): see the module docstring. `protected` maps an option name
    (--source, --images) to the paths it covers (folders and files, symlinks resolved here); `owned`
    tells an existing OUT that `writer` wrote (and may replace)."""
    target = Path(os.path.abspath(out))
    resolved = target.resolve()
    for option, paths in protected.items():
        for path in paths:
            real = Path(path).resolve()
            for candidate in {target, resolved}:
                if _same_or_inside(candidate, real):
                    raise ParamsError(f"--out {out}: is or lies inside the {option} folder {path}; "
                                      "choose an output folder outside it")
                if _same_or_inside(real, candidate):
                    raise ParamsError(f"--out {out}: contains the {option} {path}; replacing it would delete "
                                      "your sources; choose another output folder")
    if target.is_symlink():
        if not overwrite:
            raise ParamsError(f"--out {out}: is a symbolic link; pass --overwrite to replace the link "
                              "(its target is left alone)")
    elif target.is_dir():
        if any(target.iterdir()) and not owned(target) and not overwrite:
            raise ParamsError(f"--out {out}: exists and was not written by {writer}; pass --overwrite to replace it")
    elif target.exists() and not overwrite:
        raise ParamsError(f"--out {out}: a file with this name exists; pass --overwrite to replace it")


def _remove(path: Path) -> None:
    if path.is_symlink() or not path.is_dir():
        path.unlink(missing_ok=True)
    else:
        shutil.rmtree(path, ignore_errors=True)


def clean_stale(parent: Path) -> None:
    """Remove what dead vlbench processes left in PARENT (`.NAME.vlbench-partial-PID-TOKEN` staging folders
    and files); a dead build's backup `.NAME.vlbench-old-PID-TOKEN` is put back when NAME is missing (the
    build was killed between its two renames), else removed. Other names are never touched."""
    for stale in sorted(parent.iterdir(), key=lambda p: p.name):
        parsed = parse_temp_name(stale.name)
        if parsed is None or parsed[2] == os.getpid() or pid_alive(parsed[2]):
            continue
        target = parent / parsed[0]
        if parsed[1] == "old" and not (target.exists() or target.is_symlink()):
            stale.rename(target)
        else:
            _remove(stale)


@contextmanager
def parent_lock(folder: Path):
    """An exclusive flock on a folder (released when the process dies, leaves no file behind)."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _make_parent(out: Path) -> None:
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        problem = "a file stands where a folder belongs" if isinstance(exc, (FileExistsError, NotADirectoryError)) \
            else exc.strerror or str(exc)
        raise VlbenchError(f"--out {out}: cannot create its parent folder {out.parent}: {problem}") from None
    if not os.access(out.parent, os.W_OK):
        raise VlbenchError(f"--out {out}: the folder {out.parent} is not writable")


@contextmanager
def interrupts_held():
    """Ctrl-C and SIGTERM wait until the block ends. For starting writer threads into a staging folder:
    an interrupt raised while `Thread.start` waits for its thread leaves a running writer that its
    pool does not know of, so does not join, and that writes into the folder while it is removed.

    The Python-level handlers are replaced for the block by one that notes the signal, and the noted
    signal is handed to the previous handler when the block ends. Masking the signal in the main
    thread alone would not hold it: the kernel gives a process's signal to any thread that does not
    block it (a hashing or import thread started earlier), and Python then runs the handler in the
    main thread at once."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    noted: list[int] = []
    # a handler installed outside Python (getsignal: None) cannot be put back, so it is left in place
    signals = [s for s in (signal.SIGINT, signal.SIGTERM) if signal.getsignal(s) is not None]
    previous = {s: signal.signal(s, lambda signum, frame: noted.append(signum)) for s in signals}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        if noted:
            handler = previous[noted[0]]
            if callable(handler):
                handler(noted[0], None)
            elif handler == signal.SIG_DFL:
                signal.raise_signal(noted[0])


@contextmanager
def atomic_folder(out: Path, recheck=None):
    """Yield a staging folder that replaces OUT only when the block finishes without error.
    `recheck()` runs under the publish lock (OUT may have changed while the build ran)."""
    out = Path(os.path.abspath(out))
    _make_parent(out)
    with parent_lock(out.parent):
        clean_stale(out.parent)
    staging = out.parent / temp_name(out.name)
    try:
        staging.mkdir()  # exclusive: fails on anything already there, a link included
        yield staging
        with parent_lock(out.parent):
            if recheck is not None:
                recheck()
            backup = out.parent / temp_name(out.name, "old")
            had_out = out.exists() or out.is_symlink()
            if had_out:
                out.rename(backup)
            staging.rename(out)
            if had_out:
                _remove(backup)
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise VlbenchError(f"--out {out}: no space left on the device (nothing was written)") from None
        raise VlbenchError(f"--out {out}: cannot write ({exc.strerror or os_problem(exc)}; nothing was written)") \
            from None
    finally:
        _remove(staging)


def write_together(files: dict[Path, bytes]) -> None:
    """Several files that belong together (predictions and their record): every one is written beside its
    place first (created exclusively under a name nobody can guess, core/tempfiles.py), and only when all are
    written are they renamed into place, so that a full disk or a kill never leaves a new one beside an old
    one."""
    staged = []
    try:
        for path, data in files.items():
            path = Path(path)
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(temp_name(path.name))
            create_exclusively(tmp)
            staged.append((tmp, path))
            tmp.write_bytes(data)  # by the name just created, which nobody could guess
        for tmp, path in staged:
            tmp.replace(path)
    finally:
        for tmp, _ in staged:
            tmp.unlink(missing_ok=True)


def write_atomically(path: Path, data: bytes) -> None:
    """Write beside PATH and rename into place: a failure or a kill never leaves a half file (or the
    temporary one) behind."""
    write_together({Path(path): data})
