"""A run split into deterministic shards (`predict --shard I/N`) and the shards merged again (`vlbench merge`) into
the bytes one process writes.

The shard rule (SHARD_RULE) is content-defined: a row's shard is a hash of its cluster (the bootstrap's: one image's
questions, one video's, one dialog's; a row alone where the benchmark declares none) taken modulo N, so a shard holds
the same rows for a given build on any machine, and an image's or a video's rows are asked together (its frames are
decoded once). A row's prompts, their rotations and options belong to the row, so they never split either.

A shard writes what one process writes, for its rows: the prediction file (a partial submission, scored with
`evaluate --allow-partial`), its record, its samples and rotations; and beside them OUT.shard.json, what `merge`
needs to write one process's bytes: the raw predictions in row order, the rotations, and the judge's agreement
sample (its smallest keys, evaluator/models/judge.py). The record names the shard (`shard`: index, count, rule and
the SHA-256 of the split's files). `merge` checks that every shard is one of the same run (the same split, model,
revision, seed and settings: every field of the record but the counts over rows), that each index is there once,
and that each holds the rows the rule gives it, its state bound to them (the count and SHA-256 of its rows' ids, in
order, and the SHA-256 of its prediction file and samples, which the state's predictions must render again byte for
byte); then it writes the prediction file, record, samples and rotations
one process would have, with the counts over rows summed (prediction_record.ROW_COUNTS)."""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from core.errors import ParamsError, SubmissionError

SHARD_RULE = ("sha256('vlbench-shard:' + the smallest JSON id of the row's cluster (the row's own where the benchmark "
              "has no clusters)), its first 8 bytes as a big-endian integer, modulo the shard count")
MAX_SHARDS = 999_999  # `--shard I/N` takes six digits; a Slurm array as large
SHARD_FORMAT = "vlbench-shard-2"  # -1 (before the state bound its rows and files) is refused: rerun the shard
JUDGE_AGREEMENT = "asked.judge.agreement"  # a count over rows that is a record (its sample), merged by the judge
SHARD_FILE_LIMIT = 1 << 34  # bytes: a shard's state, prediction or samples file larger than this is refused unread


@dataclass(frozen=True)
class Shard:
    """Shard `index` (0-based) of `count`."""

    index: int
    count: int

    def path(self, out: Path) -> Path:
        """The files a shard writes, named after the merged OUT: preds.json -> preds.shard-1-of-3.json."""
        out = Path(out)
        return out.with_name(f"{out.stem}.shard-{self.index}-of-{self.count}{out.suffix or '.json'}")

    def record(self, fingerprint: str) -> dict:
        """The record's `shard` entry."""
        return {"index": self.index, "count": self.count, "rule": SHARD_RULE, "split_sha256": fingerprint}


def parse_shard(text: str, environ=os.environ) -> Shard:
    """`--shard I/N` (0 <= I < N), or `slurm`: the array task's place in its array (SLURM_ARRAY_TASK_ID minus
    SLURM_ARRAY_TASK_MIN, of SLURM_ARRAY_TASK_COUNT), so one sbatch array script serves any array size."""
    if text == "slurm":
        names = ("SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_MIN", "SLURM_ARRAY_TASK_COUNT")
        missing = [n for n in names if not environ.get(n)]
        if missing:
            raise ParamsError(f"--shard slurm: {missing[0]} is not set (run it as a task of an sbatch --array job)")
        try:
            task, first, count = (int(environ[n]) for n in names)
        except ValueError:
            raise ParamsError(f"--shard slurm: {', '.join(f'{n}={environ[n]!r}' for n in names)} are not "
                              "integers") from None
        index = task - first
        if not 0 < count <= MAX_SHARDS:
            raise ParamsError(f"--shard slurm: SLURM_ARRAY_TASK_COUNT {environ['SLURM_ARRAY_TASK_COUNT'][:20]} is not "
                              f"a shard count (1 to {MAX_SHARDS:,})")
        if not 0 <= index < count:
            raise ParamsError(f"--shard slurm: SLURM_ARRAY_TASK_ID {task} is not within the array's {count} tasks "
                              f"from {first} (an array with steps, --array=0-9:2, is not a shard array)")
        return Shard(index, count)
    match = re.fullmatch(r"(\d{1,6})/(\d{1,6})", text)
    if not match or not int(match.group(1)) < int(match.group(2)):
        raise ParamsError(f"--shard {text[:40]!r}: expected I/N with 0 <= I < N (I counts from 0, as a Kubernetes "
                          "indexed Job's JOB_COMPLETION_INDEX does), or slurm")
    return Shard(int(match.group(1)), int(match.group(2)))


def row_shards(task, table, count: int) -> np.ndarray:
    """Per row of the split, its shard (SHARD_RULE): a cluster is named by the smallest of its rows' ids, so the
    rule reads the rows' content, not their order."""
    ids = [json.dumps(list(i) if isinstance(i, tuple) else i) for i in task.ids(table)]
    clusters = task.clusters(table)
    if clusters is None:
        keys = ids
    else:
        codes = clusters[0].tolist()
        name: dict = {}
        for code, key in zip(codes, ids):
            name[code] = min(name.get(code, key), key)
        keys = [name[c] for c in codes]
    shard_of = {key: int.from_bytes(hashlib.sha256(f"vlbench-shard:{key}".encode()).digest()[:8], "big") % count
                for key in set(keys)}
    return np.fromiter((shard_of[k] for k in keys), dtype=np.int64, count=len(keys))


def split_fingerprint(folder: Path, config: str, split: str) -> str:
    """SHA-256 over the split's table files (name and content, in order): the build a shard was run on."""
    from core.hashing import sha256_file

    digest = hashlib.sha256()
    for path in sorted((Path(folder) / config).glob(f"{split}-*.parquet")):
        digest.update(f"{path.name}\0{sha256_file(path)}\n".encode())
    return digest.hexdigest()


def state_path(shard_out: Path) -> Path:
    """preds.shard-1-of-3.json -> preds.shard-1-of-3.shard.json: what `merge` reads beside the shard's files."""
    return Path(shard_out).with_suffix(".shard.json")


def rows_digest(task, table) -> str:
    """SHA-256 over the JSON ids of a table's rows, in order: which rows a shard holds, and in which order."""
    ids = [list(i) if isinstance(i, tuple) else i for i in task.ids(table)]
    return hashlib.sha256(json.dumps(ids, separators=(",", ":")).encode()).hexdigest()


def predictions_bytes(task, table: pa.Table, predictions: list) -> bytes:
    """The prediction file's bytes for a table's rows (the task's format, one process's layout); a NaN or an
    infinite prediction is a ValueError."""
    return (json.dumps(task.predictions_file(table, predictions), indent=1, allow_nan=False) + "\n").encode()


def shard_state(task, table: pa.Table, predictions: list, rotations: list | None, judge, written: bytes,
                samples: bytes | None) -> bytes:
    """The shard's state file: its raw predictions in row order, rotations and the judge's agreement sample, bound
    to what they belong to: the number and digest of its rows (rows_digest) and the SHA-256 of the shard's
    prediction file (`written`) and samples (None when not logged), which `merge` checks."""
    from core.jsonout import dumps

    return (dumps({"format": SHARD_FORMAT, "rows": table.num_rows, "rows_sha256": rows_digest(task, table),
                   "predictions_sha256": hashlib.sha256(written).hexdigest(),
                   "samples_sha256": None if samples is None else hashlib.sha256(samples).hexdigest(),
                   "predictions": predictions, "rotations": rotations,
                   "judge_sample": None if judge is None else judge.candidates}) + "\n").encode()


@dataclass
class _Read:
    path: Path
    record: dict
    state: dict
    written: bytes  # the shard's prediction file
    bytes_: bytes


def _shard_file(path: Path, what: str) -> bytes:
    """A file of a shard, read without following a link or waiting on a FIFO (core/ownfiles.py): a missing one, a
    FIFO, a folder or a device is one line saying which."""
    from core.ownfiles import OwnFileError, read_own_file

    try:
        data = read_own_file(path, SHARD_FILE_LIMIT)
    except OwnFileError as exc:
        raise SubmissionError(str(exc)) from None
    except OSError as exc:
        raise SubmissionError(f"{path}: cannot read the shard's {what} ({exc.strerror or exc}); rerun the "
                              "shard") from None
    if data is None:
        raise SubmissionError(f"{path}: no such file (the shard's {what}); rerun the shard")
    return data


def _is_count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _read_shard(path: Path) -> _Read:
    from evaluator.models.prediction_record import ROW_COUNTS, metadata_path, read_record
    from evaluator.submission import parse_json

    path = Path(path)
    written = _shard_file(path, "prediction file")
    record = read_record(path)
    if record is None or not isinstance(record.get("shard"), dict):
        raise SubmissionError(f"{path}: not a shard of a run (its record, {path.with_suffix('.meta.json').name}, "
                              "names no `shard`; it was written without --shard)")
    where = state_path(path)
    raw = _shard_file(where, "state")
    try:
        state = parse_json(raw, "")
    except SubmissionError as exc:
        raise SubmissionError(f"{where}: not a shard state file ({exc}); rerun the shard") from None
    if not isinstance(state, dict) or state.get("format") != SHARD_FORMAT or not isinstance(
            state.get("predictions"), list) or not _is_count(state.get("rows")) or not all(
            isinstance(state.get(k), str) for k in ("rows_sha256", "predictions_sha256")) or not isinstance(
            state.get("samples_sha256"), (str, type(None))):
        raise SubmissionError(f"{where}: not a shard state file of this version (format {SHARD_FORMAT}, its rows and "
                              "files named); rerun the shard")
    shard = record["shard"]
    if not all(isinstance(shard.get(k), int) and not isinstance(shard.get(k), bool) for k in ("index", "count")) \
            or not 0 <= shard["index"] < shard["count"]:
        raise SubmissionError(f"{path}: its record's `shard` entry is not an index below a count")
    bad = next((k for k in sorted(ROW_COUNTS - {JUDGE_AGREEMENT}) if _pick(record, k) is not None
                and not _is_count(_pick(record, k))), None)
    if bad is not None:
        raise SubmissionError(f"{metadata_path(path)}: its count {bad} is {_shown(_pick(record, bad))}, not a "
                              "count of rows (an integer, 0 or more); rerun the shard")
    if record.get("rows") != state["rows"]:
        raise SubmissionError(f"{metadata_path(path)}: its rows ({_shown(record.get('rows'))}) are not the "
                              f"{state['rows']:,} its state holds; rerun the shard")
    if hashlib.sha256(written).hexdigest() != state["predictions_sha256"]:
        raise SubmissionError(f"{path}: not the prediction file its state was written with (its SHA-256 differs: "
                              "edited or replaced); rerun the shard")
    return _Read(path, record, state, written, b"\0".join((written, _shard_file(metadata_path(path), "record"), raw)))


def _differing(a, b, path: str = "") -> str | None:
    """The first field (a dotted path) where two records differ, leaving out the counts over rows and the threads
    (shards on other machines are the same run)."""
    from evaluator.models.prediction_record import ROW_COUNTS

    if isinstance(a, dict) and isinstance(b, dict):
        for key in dict.fromkeys([*a, *b]):
            name = f"{path}.{key}" if path else key
            if name in ROW_COUNTS or name in ("shard.index", "predictions", "threads"):
                continue
            found = _differing(a.get(key), b.get(key), name)
            if found:
                return found
        return None
    return None if a == b else path or "(the record)"


def _shown(value) -> str:
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def merge(paths: list[Path], out: Path, data: str | None = None) -> tuple[int, int]:
    """Write OUT, its record, samples and rotations from every shard of one run: the bytes one process writes.
    (shards, rows). Refused in one line naming the file: a file that is not a shard, shards of another run (any
    field of the record but the counts over rows: the build, model, revision, seed, settings), a missing index, one
    index given twice with other bytes, a shard whose rows are not the ones the rule gives it, a state that is not
    bound to its shard's rows and prediction file (edited, reordered, another shard's), a count over rows that is
    not a count, a samples file missing or changed, an OUT that would write over a shard's own files."""
    from evaluator.models.judge import agreement
    from evaluator.models.prediction_record import ROW_COUNTS, metadata_path, rotations_path, samples_path
    from evaluator.publish.report import check_output_file
    from evaluator.splits import open_split
    from evaluator.tasks import get_task

    outputs = (out, metadata_path(out), samples_path(out), rotations_path(out))
    inputs = {p.resolve() for shard in paths for p in (Path(shard), metadata_path(shard), samples_path(shard),
                                                        rotations_path(shard), state_path(shard))}
    clash = next((p for p in outputs if Path(p).resolve() in inputs), None)
    if clash is not None:
        raise ParamsError(f"--out {out}: would write {clash}, a file of a shard being merged; name another file")
    for path in outputs:
        check_output_file(path, "--out")
    shards: dict[int, _Read] = {}
    first = None
    for path in paths:
        read = _read_shard(path)
        if first is None:
            first = read
        field = _differing(first.record, read.record)
        if field is not None:
            value = lambda r: _pick(r.record, field)  # noqa: E731
            what = ("another build of the split" if field == "shard.split_sha256" else
                    "a shard of another split into shards" if field == "shard.count" else "another run")
            raise SubmissionError(f"{read.path}: {what}: its record's {field} is {_shown(value(read))}, "
                                  f"{first.path.name}'s is {_shown(value(first))}")
        index = read.record["shard"]["index"]
        if index in shards:
            if shards[index].bytes_ != read.bytes_:
                raise SubmissionError(f"{read.path}: shard {index} of {read.record['shard']['count']} again, with "
                                      f"other bytes than {shards[index].path}; keep one of them")
            continue
        shards[index] = read
    count = first.record["shard"]["count"]
    missing = [i for i in range(count) if i not in shards]
    if missing:
        raise SubmissionError(f"shard {missing[0]} of {count} is missing (given: "
                              f"{', '.join(str(i) for i in sorted(shards)) or 'none'}); run it with --shard "
                              f"{missing[0]}/{count}")
    record = first.record
    task = get_task(record.get("benchmark"))
    folder, split, table = open_split(task, data or record.get("data"), record.get("split"), truth=False)
    fingerprint = split_fingerprint(folder, task.config, split)
    if fingerprint != record["shard"]["split_sha256"]:
        raise SubmissionError(f"{first.path}: a shard of another build of {record.get('benchmark')}/{split} than "
                              f"{data or record.get('data')} (its split's files differ); pass --data with the build "
                              "the shards ran on")
    assignment = row_shards(task, table, count)
    predictions: list = [None] * table.num_rows
    rotations: list | None = [None] * table.num_rows if first.state.get("rotations") is not None else None
    logged = first.state["samples_sha256"] is not None
    samples: list = [None] * table.num_rows if logged else []
    candidates: list = []
    for index, read in sorted(shards.items()):
        rows = np.flatnonzero(assignment == index)
        state = read.state
        if len(state["predictions"]) != len(rows) or state["rows"] != len(rows) or (
                rotations is not None and len(state.get("rotations") or []) != len(rows)):
            raise SubmissionError(f"{read.path}: holds {len(state['predictions']):,} rows where shard {index} of "
                                  f"{count} of {record.get('benchmark')}/{split} has {len(rows):,}")
        _check_bound(task, table.take(pa.array(rows)), read)
        for k, row in enumerate(rows.tolist()):
            predictions[row] = state["predictions"][k]
            if rotations is not None:
                rotations[row] = state["rotations"][k]
        if (state["samples_sha256"] is not None) != logged:
            raise SubmissionError(f"{state_path(read.path)}: its shard was run {'without' if logged else 'with'} "
                                  f"--log-samples, {first.path.name}'s {'with' if logged else 'without'}; rerun it "
                                  "as the others")
        if logged:
            lines = _sample_lines(samples_path(read.path), len(rows), state["samples_sha256"])
            for k, row in enumerate(rows.tolist()):
                samples[row] = lines[k]
        candidates.extend(state.get("judge_sample") or [])
    merged = _summed(record, [r.record for _, r in sorted(shards.items())], ROW_COUNTS)
    merged["predictions"] = Path(out).name
    merged.pop("shard")
    threads = [r.record.get("threads") for _, r in sorted(shards.items())]
    if any(t != threads[0] for t in threads):  # shards run on other threads: each shard's, in their order
        merged["threads"] = {"shards": threads}
    judge = (merged.get("asked") or {}).get("judge")
    if isinstance(judge, dict) and first.state.get("judge_sample") is not None:
        judge["agreement"] = agreement(candidates, judge["agreement"]["what"])
    try:
        write_run(task, table, out, predictions, merged, b"".join(samples) if logged else None, rotations)
    except ValueError:
        raise SubmissionError(f"{first.path}: the shards hold NaN or infinite predictions") from None
    return len(shards), table.num_rows


def _check_bound(task, rows: pa.Table, read: _Read) -> None:
    """A shard's state belongs to the rows the rule gives its index, in their order, and its predictions are the
    ones its prediction file holds (rendered again, byte for byte): a state edited, reordered or of other rows is
    refused, never merged onto other rows."""
    if rows_digest(task, rows) != read.state["rows_sha256"]:
        raise SubmissionError(f"{state_path(read.path)}: its rows are not the ones the shard rule gives shard "
                              f"{read.record['shard']['index']} (another build or order); rerun the shard")
    try:
        rendered = predictions_bytes(task, rows, read.state["predictions"])
    except (ValueError, TypeError, KeyError, IndexError):
        rendered = None
    if rendered != read.written:
        raise SubmissionError(f"{state_path(read.path)}: its predictions are not the ones {read.path.name} holds "
                              "(edited or reordered); rerun the shard")


def write_run(task, table: pa.Table, out: Path, predictions: list, meta: dict, samples: bytes | None, rotations,
              state=None) -> None:
    """The files of one run (`predict`, or `merge` of its shards), written together, never new predictions beside
    an old record or the reverse: the prediction file in the task's format, its record, the samples (their lines,
    when logged), the rotations (--circular) and, for a shard, its state (`state(written)`: its bytes, given the
    prediction file's). A NaN or infinite prediction is a ValueError, before any file is written."""
    from core.errors import write_error
    from core.jsonout import dumps
    from core.outdir import write_together
    from evaluator.models.prediction_record import metadata_path, rotations_path, samples_path
    from evaluator.stats.circular import rotations_file

    written = predictions_bytes(task, table, predictions)
    files = {} if samples is None else {samples_path(out): samples}
    if rotations is not None:
        files[rotations_path(out)] = (dumps(rotations_file(task.ids(table), rotations)) + "\n").encode()
    files[metadata_path(out)] = (dumps(meta, indent=2) + "\n").encode()
    if state is not None:
        files[state_path(out)] = state(written)
    files[Path(out)] = written
    try:
        write_together(files)
    except OSError as exc:
        raise write_error(f"--out {out}: cannot write the predictions", exc) from None


def _pick(record: dict, dotted: str):
    value = record
    for key in dotted.split("."):
        value = value.get(key) if isinstance(value, dict) else None
    return value


def _summed(record: dict, records: list[dict], counts: frozenset[str]) -> dict:
    """`record` with each count over rows (dotted paths) summed over `records`."""
    merged = json.loads(json.dumps(record))
    for dotted in sorted(counts):
        values = [_pick(r, dotted) for r in records]
        if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
            *parents, last = dotted.split(".")
            holder = merged
            for key in parents:
                holder = holder[key]
            holder[last] = sum(values)
    return merged


def _sample_lines(path: Path, rows: int, sha256: str) -> list[bytes]:
    """A shard's samples file as its lines (one per row, in row order), the file its state names (`sha256`)."""
    data = _shard_file(path, "samples (it was run with --log-samples)")
    if hashlib.sha256(data).hexdigest() != sha256:
        raise SubmissionError(f"{path}: not the samples file its shard's state was written with (its SHA-256 "
                              "differs: edited or replaced); rerun the shard")
    lines = data.splitlines(keepends=True)
    if len(lines) != rows:
        raise SubmissionError(f"{path}: holds {len(lines):,} samples where its shard has {rows:,} rows; rerun the "
                              "shard")
    return lines
