"""`vlbench leaderboard`: score every submission in a folder against one built split and publish a
static site (leaderboard.csv / .json, index.html with a sortable table, a detail page per submission
with its report and plots).

A bad submission is listed with its one-line error and never stops the others: a file the scorer
refuses, a symbolic link that leads out of --submissions (its content is never read), a name that
cannot be a submission's (nothing before the extension, longer than `MAX_NAME`, not UTF-8), two
files with one name (`model.json` and `model.jsonl`), a folder or a FIFO with a submission's
extension. Each submission's result is kept in SITE/cache/<key>/, the key hashing the file's bytes
(and its prediction record's), the dataset's manifest, the scoring settings and vlbench's evaluation
code, so a rerun scores only what is new or changed; an entry is reused only when its files match
the sha256 sums its `DONE` file lists (a damaged or edited entry is scored again, with one warning).
The site is rebuilt in a staging folder and replaces SITE atomically (core.outdir); SITE must
be missing, empty, or a site this command wrote, proven by the marker file `SITE_MARKER` (never by
the shape of a user's file), unless --overwrite.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import io
import json
import os
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from builders.registry import get_benchmark
from core.data import resolve_data
from core.errors import ParamsError, VlbenchError
from core.hashing import sha256_file
from core.jsonout import dumps
from evaluator.interop import TABLE_SUFFIXES
from evaluator.models.prediction_record import metadata_path
from evaluator.publish.site import write_site
from evaluator.request import ScoringRequest
from evaluator.stats.bootstrap import value_at
from evaluator.tasks import get_task

RECORD = "leaderboard.json"
SITE_MARKER = ".vlbench-site.json"
MARKER_TEXT = "written by `vlbench leaderboard`; the site may be replaced by it"
CACHE = "cache"
DONE = "DONE"
MAX_NAME = 200  # characters of a submission's file name: NAME.meta.json beside it must fit in 255 bytes
_PAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")
_HASHED_PAGE = re.compile(r"s-[0-9a-f]{16}")
# OWASP, "CSV Injection": a cell starting with one of these is a formula to a spreadsheet
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _is_site(folder: Path) -> bool:
    """SITE holds the marker file this command writes (a regular file, not a link)."""
    marker = folder / SITE_MARKER
    try:
        if marker.is_symlink():
            return False
        record = json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return False
    return isinstance(record, dict) and record.get("marker") == MARKER_TEXT


def _check_site(out: Path, protected: dict[str, Path], overwrite: bool) -> None:
    from core.outdir import check_out

    check_out(out, {option: [path] for option, path in protected.items()}, overwrite, owned=_is_site,
              writer=f"`vlbench leaderboard` (no {SITE_MARKER})")


@dataclass
class Submission:
    """One file of --submissions: its name on the leaderboard, its page's folder name under
    submissions/, and why it cannot be scored (None when it can)."""

    path: Path
    name: str
    page: str
    error: str | None = None


def _leaves(path: Path, root: Path) -> bool:
    """A symbolic link (or a file reached through one) whose target is not inside ROOT."""
    if not path.is_symlink():
        return False
    target = path.resolve()
    return target != root and root not in target.parents


def _page(name: str, file_name: str) -> str:
    """The page's folder: the name itself when it is a plain file name, else a hash of the file name.
    A plain name shaped like a hashed page (`s-` and 16 hex digits) is hashed too, so that no two
    submissions can be given one folder."""
    if _PAGE.fullmatch(name) and name.strip(".") and not _HASHED_PAGE.fullmatch(name):
        return name
    return "s-" + hashlib.sha256(file_name.encode("utf-8", "surrogateescape")).hexdigest()[:16]


def _problem(path: Path, root: Path) -> str | None:
    name = path.name
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return f"{name.encode('utf-8', 'surrogateescape').decode('utf-8', 'replace')}: a file name that is not " \
               "UTF-8 text"
    if len(name) > MAX_NAME:
        return f"{name[:40]}...: a file name of {len(name)} characters (at most {MAX_NAME}, so that the record " \
               "vlbench writes beside it fits)"
    if not path.stem.strip("."):
        return f"{name}: no submission name before the extension"
    if _leaves(path, root):
        return f"{name}: a symbolic link that leads outside --submissions (not read)"
    if not path.is_file():
        return f"{name}: " + ("a folder" if path.is_dir() else "not a regular file") + ", not a submission (not read)"
    record = metadata_path(path)
    if _leaves(record, root):
        return f"{name}: its prediction record {record.name} is a symbolic link that leads outside --submissions " \
               "(not read)"
    return None


def submission_files(folder: Path) -> list[Submission]:
    """The submissions of a folder: its *.json files, less the records `vlbench predict` writes
    beside a prediction file (*.meta.json), and other harnesses' outputs (evaluator.interop: lmms-eval
    *.jsonl, VLMEvalKit *.xlsx / *.tsv / *.csv, Inspect *.eval logs of exported tasks), each read in the format
    it is detected to have. Only
    regular files are read (a FIFO or a device is never opened); see the module docstring for the
    files listed with an error."""
    if not folder.is_dir():
        raise ParamsError(f"--submissions {folder}: " + ("is a file, expected a folder" if folder.exists()
                                                         else "no such folder"))
    root = folder.resolve()
    suffixes = {".json", ".jsonl", ".eval", *TABLE_SUFFIXES}
    found = []
    for path in sorted(folder.iterdir(), key=lambda p: p.name):
        if path.suffix.lower() not in suffixes or path.name.endswith(".meta.json"):
            continue
        found.append(Submission(path, path.stem, _page(path.stem, path.name), _problem(path, root)))
    by_name: dict[str, list[Submission]] = {}
    for s in found:
        by_name.setdefault(s.name.casefold(), []).append(s)
    for same in by_name.values():
        if len(same) > 1:
            files = ", ".join(s.path.name for s in same)
            for s in same:
                s.error = s.error or f"{s.path.name}: {len(same)} submissions share the name '{s.name}' ({files}); " \
                                     "rename all but one"
    return found


def _code_version() -> str:
    """A hash of the evaluation code (the evaluator package), so a changed metric re-scores."""
    digest = hashlib.sha256()
    root = Path(__file__).resolve().parents[1]  # the whole evaluator package
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def _cache_key(path: Path, dataset: str, settings: dict, code: str) -> str:
    """The file's bytes, its prediction record's (the report shows it), and what else decides the score."""
    digest = hashlib.sha256(path.read_bytes())
    record = metadata_path(path)
    digest.update(b"\0record\0" + (record.read_bytes() if record.is_file() else b""))
    digest.update(json.dumps({"dataset": dataset, "settings": settings, "code": code}, sort_keys=True).encode())
    return digest.hexdigest()[:32]


def _dataset_digest(folder: Path) -> str:
    """What identifies the built split: its manifest (inputs, params and output checksums)."""
    try:
        return hashlib.sha256((folder / "manifest.json").read_bytes()).hexdigest()
    except OSError:
        raise ParamsError(f"--data {folder}: no manifest.json (not a built vlbench folder)") from None


def _entry_files(entry: Path) -> dict[str, Path] | None:
    """Every file of a cache entry by its relative path (DONE left out); None when the entry holds
    anything but folders and regular files (a link is never followed into the site)."""
    files = {}
    for top, dirs, names in os.walk(entry):
        for name in dirs + names:
            path = Path(top) / name
            if path.is_symlink() or not (path.is_dir() or path.is_file()):
                return None
            if path.is_file() and path != entry / DONE:
                files[path.relative_to(entry).as_posix()] = path
    return files


def _seal(entry: Path) -> None:
    """DONE: the sha256 of every file of a finished cache entry."""
    sums = {rel: sha256_file(path) for rel, path in sorted(_entry_files(entry).items())}
    (entry / DONE).write_text(json.dumps(sums, indent=1, sort_keys=True) + "\n")


def _intact(entry: Path) -> str | None:
    """Why a cache entry cannot be reused (None: every file matches DONE's sums, none is missing or
    added, and its result.json is a result)."""
    try:
        if not entry.is_dir() or entry.is_symlink():
            return "missing"
        sums = json.loads((entry / DONE).read_text())
        files = _entry_files(entry)
        if files is None:
            return "holds a link or a special file"
        if not isinstance(sums, dict) or set(sums) != set(files) or "result.json" not in files:
            return "its files are not the ones DONE lists"
        changed = next((rel for rel, path in files.items() if sha256_file(path) != sums[rel]), None)
        if changed is not None:
            return f"{changed} does not match its checksum"
        result = json.loads((entry / "result.json").read_text())
    except (OSError, ValueError, RecursionError) as exc:
        return f"unreadable ({type(exc).__name__})"
    if not isinstance(result, dict) or result.get("status") not in ("scored", "invalid"):
        return "result.json is not a result"
    return None


def _score(request: ScoringRequest, submission: Submission, entry: Path) -> bool:
    """Score one submission into ENTRY (result.json, report/, DONE). False when vlbench itself failed
    on it: that row is shown, but not cached, so that a fixed vlbench scores it."""
    from evaluator.run import evaluate

    entry.mkdir()
    cache = True
    try:
        metrics = evaluate(request, submission.path, report=entry / "report")
        result = {"status": "scored", "metrics": metrics}
    except VlbenchError as exc:  # the file named as in --submissions, never by the maintainer's folder
        result = {"status": "invalid", "error": str(exc).replace(f"{submission.path.parent}{os.sep}", "")}
    except Exception as exc:  # noqa: BLE001 -- one submission never stops the others
        print(f"warning: {submission.path.name}: vlbench failed on this file ({type(exc).__name__}); listed as "
              "invalid, not cached (please report it)", file=sys.stderr)
        result = {"status": "invalid", "error": f"{submission.path.name}: vlbench could not score this file "
                                                f"({type(exc).__name__})"}
        cache = False
    if result["status"] != "scored":
        shutil.rmtree(entry / "report", ignore_errors=True)
    (entry / "result.json").write_text(dumps(result, note_key="undefined", indent=2, sort_keys=True))
    _seal(entry)
    return cache


def run_leaderboard(request: ScoringRequest, submissions: Path, out: Path, *, overwrite: bool = False) -> dict:
    """Score every submission (cached by file hash and dataset manifest) and write the site. Every
    submission is scored whole: the request's allow_partial / allow_extra rules apply as `evaluate`'s."""
    from core.outdir import atomic_folder
    from evaluator.splits import task_options

    bench, data, split = request.bench, request.data, request.split
    benchmark = get_benchmark(bench)
    task_options(get_task(bench), list(request.options))  # a bad --option is one error, not one per submission
    folder = resolve_data(data)
    found = submission_files(Path(submissions))
    if not found:
        raise ParamsError(f"--submissions {submissions}: no submission files (*.json, *.jsonl, *.xlsx, *.tsv, *.csv)")
    out = Path(out)
    protected = {"--data": folder, "--submissions": Path(submissions)}
    _check_site(out, protected, overwrite)
    settings = {"benchmark": bench, "split": split, "options": sorted(request.options), "bootstrap": request.resamples,
                "seed": request.seed, **({"harness_data": request.harness_data} if request.harness_data else {})}
    scoring = dataclasses.replace(request, data=str(folder))
    dataset, code = _dataset_digest(folder), _code_version()
    old_cache = out / CACHE if _is_site(out) else None
    rows, uncached = [], []
    with atomic_folder(out, recheck=lambda: _check_site(out, protected, overwrite)) as staging:
        (staging / CACHE).mkdir()
        for submission in found:
            if submission.error is not None:
                rows.append({"submission": submission.name, "file": submission.path.name, "page": None, "key": None,
                             "cached": False, "status": "invalid", "error": submission.error})
                continue
            key = _cache_key(submission.path, dataset, settings, code)
            entry = staging / CACHE / key
            reused = entry.is_dir()  # the same bytes were scored in this run (another file)
            if not reused and old_cache is not None and (old_cache / key).exists():
                why = _intact(old_cache / key)
                if why is None:
                    shutil.copytree(old_cache / key, entry)
                    reused = True
                else:
                    print(f"warning: cached result {old_cache / key} is damaged ({why}); scoring "
                          f"{submission.path.name} again", file=sys.stderr)
            if not reused and not _score(scoring, submission, entry):
                uncached.append(entry)
            result = json.loads((entry / "result.json").read_text())
            rows.append({"submission": submission.name, "file": submission.path.name, "page": submission.page,
                         "key": key, "cached": reused, **result})
        columns = _columns(benchmark, rows)
        table = [_row(r, columns) for r in rows]
        splits = {r["metrics"]["split"] for r in rows if r["status"] == "scored"}
        record = {"benchmark": bench, "data": str(data), "split": splits.pop() if len(splits) == 1 else split,
                  "dataset_manifest_sha256": dataset, "settings": settings, "columns": columns, "submissions": table}
        (staging / RECORD).write_text(dumps(record, note_key="undefined", indent=2, sort_keys=True) + "\n")
        (staging / "leaderboard.csv").write_text(_csv(table, columns))
        write_site(staging, benchmark, folder, record, rows)
        for entry in uncached:
            shutil.rmtree(entry)
        (staging / SITE_MARKER).write_text(json.dumps({"marker": MARKER_TEXT, "benchmark": bench}) + "\n")
    return record


def _columns(benchmark, rows: list[dict]) -> list[str]:
    """The headline metrics first (the task's), then every other metric with an interval (the
    benchmark's subsets), in the order of the first scored submission."""
    head = [h.key for h in get_task(benchmark.name).headline]
    scored = [r["metrics"] for r in rows if r["status"] == "scored"]
    subsets = [p for p in (scored[0].get("intervals", {}).get("metrics", {}) if scored else {}) if p not in head]
    return head + subsets


def _row(result: dict, columns: list[str]) -> dict:
    row = {"submission": result["submission"], "file": result["file"], "page": result["page"],
           "status": result["status"], "cached": result["cached"], "error": result.get("error")}
    metrics = result.get("metrics") or {}
    bounds = metrics.get("intervals", {}).get("metrics", {})
    row["values"] = {c: {"value": value_at(metrics, c), "interval": bounds.get(c)} for c in columns}
    return row


def csv_cell(value) -> object:
    """A cell as a spreadsheet shows it, never runs it: text that starts like a formula gets a leading
    apostrophe (OWASP, "CSV Injection"); numbers pass as they are."""
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return value


def _csv(table: list[dict], columns: list[str]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow([csv_cell(h) for h in ("submission", "file", "status",
                                           *(f"{c}{s}" for c in columns for s in ("", "_low", "_high")), "error")])
    for row in table:
        cells = []
        for c in columns:
            v = row["values"][c]
            cells += [v["value"], *(v["interval"] or [None, None])]
        writer.writerow([csv_cell(x) for x in (row["submission"], row["file"], row["status"],
                                               *("" if x is None else x for x in cells), row["error"] or "")])
    return buffer.getvalue()
