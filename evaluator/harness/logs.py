"""A harness's log of a task `vlbench export-task` wrote, read back as a submission, by id.

Every sample of the log holds the record of its prompt (`ExportedRun.record`, evaluator/harness/run.py):
the benchmark, the first 16 hex digits of the build's manifest SHA-256, the split, the form, the row's vlbench
id, the prompt's place and the raw output.
- lmms-eval's `--log_samples` file (`samples_<task>.jsonl`): under each metric of the task, the record
  `process_results` returned.
- Inspect's `.eval` log: a zip file (its members compressed with zstd since Inspect 0.3.1xx, with deflate
  before) whose `samples/*.json` hold each sample's scores; the `vlbench` scorer's metadata holds the record
  (a run of the Hub's task, `inspect eval hf/ORG/NAME/TASK`: the sample's `vlbench` metadata and its output).
  Members are read with a bound on their decompressed size (a log is data from outside).
The log is checked against the split it is scored on (benchmark, build, split, every id a prompt of it)
before anything is scored; any mismatch is one error line. Its outputs become predictions as in the harness
(evaluator/harness/outputs.py).
"""

from __future__ import annotations

from pathlib import Path

from core.errors import SubmissionError
from core.hashing import sha256_file
from core.manifest import MANIFEST
from evaluator.harness.docs import FORMS, parse_id
from evaluator.harness.run import RECORD


def exported_record(sample) -> dict | None:
    """The vlbench record a logged sample carries (None: not a sample of an exported task)."""
    if not isinstance(sample, dict):
        return None
    return next((v[RECORD] for v in sample.values() if isinstance(v, dict) and isinstance(v.get(RECORD), dict)),
                None)


def is_exported_log(samples: list) -> bool:
    return bool(samples) and exported_record(samples[0]) is not None


def read_exported_log(task, path: Path, records: list, build: tuple, reasoning_tags: tuple | None = None,
                      harness: str = "lmms-eval") -> tuple[dict, dict]:
    """({id: prediction}, how it was read) of the records of a harness's log of an exported task (None: a sample
    without one); `build` is (the built folder, its split, the split's table) it is scored against."""
    from core.names import shown
    from evaluator.harness.outputs import PromptOutput, predictions_of, prompt_choices, prompts_per_row

    folder, split, table = build
    manifest = sha256_file(Path(folder) / MANIFEST)
    choices = prompt_choices(task, table)
    per_row = prompts_per_row(choices)
    outputs, forms = [], set()
    for n, record in enumerate(records):
        where = f"{path}: sample {n}"
        if record is None:
            raise SubmissionError(f"{where}: carries no vlbench record; every sample of an exported task's log has one")
        if record.get("benchmark") != task.name:
            raise SubmissionError(f"{where}: is a log of the exported {shown(record.get('benchmark'), 40)} task, not "
                                  f"{task.name}'s")
        if record.get("build") != manifest[:16]:
            raise SubmissionError(f"{where}: was made on the build whose manifest SHA-256 begins "
                                  f"{shown(record.get('build'), 16)}, not on --data's ({manifest[:16]}); export the "
                                  "task from this build and run it again")
        if record.get("split") != split:
            raise SubmissionError(f"{where}: is of split {shown(record.get('split'), 40)}, not {split}")
        if record.get("form") not in FORMS:
            raise SubmissionError(f"{where}: form {shown(record.get('form'), 20)} is not one of {', '.join(FORMS)}")
        forms.add(record["form"])
        key = (record.get("id"), record.get("prompt_index"))
        if not isinstance(key[0], str) or type(key[1]) is not int or key not in choices:
            raise SubmissionError(f"{where}: id {shown(key[0])} (prompt {shown(key[1], 10)}) is not a prompt of "
                                  f"the {split} split of --data")
        if record.get("prompts") != per_row[key[0]] or type(record.get("prompts")) is not int:
            raise SubmissionError(f"{where}: `prompts` is {shown(record.get('prompts'), 20)}, but the split asks "
                                  f"{per_row[key[0]]} of id {shown(key[0])}")
        outputs.append(PromptOutput(parse_id(key[0]), key[1], per_row[key[0]], record.get("output"), choices[key]))
    if len(forms) > 1:
        raise SubmissionError(f"{path}: mixes samples of several forms ({', '.join(sorted(forms))})")
    form = forms.pop() if forms else "generate"
    predictions, counts = predictions_of(task.generative, form, outputs, str(path), reasoning_tags)
    return predictions, {"format": harness, "exported_task": True, "form": form, "build": manifest[:16],
                         "samples": len(records), **counts}


MEMBER_LIMIT = 256 * 1024 * 1024  # bytes a member of an .eval log may decompress to
TOTAL_LIMIT = 1024 * 1024 * 1024  # bytes all the members read of one .eval log may decompress to (a zip of many
# members at the member limit is a small file that fills the memory)
_ZSTD = 93  # the zip compression method number of zstd


def _member(path: Path, archive, info, limit: int = MEMBER_LIMIT) -> bytes:
    """One member of a zip file, decompressed (zstd, deflate or stored), at most `limit` bytes (MEMBER_LIMIT)."""
    import io
    import struct
    import zlib

    if info.file_size > limit:
        raise SubmissionError(f"{path}: member {info.filename[:60]} is {info.file_size:,} bytes (more than "
                              f"{limit:,}: {_limits()})")
    if info.compress_type != _ZSTD:
        try:
            with archive.open(info) as member:
                data = member.read(limit + 1)
        except (NotImplementedError, zlib.error, OSError, EOFError) as exc:
            raise SubmissionError(f"{path}: member {info.filename[:60]} cannot be read ({exc})") from None
    else:
        import zstandard

        with open(path, "rb") as fh:
            fh.seek(info.header_offset)
            header = fh.read(30)
            if len(header) < 30 or header[:4] != b"PK\x03\x04":
                raise SubmissionError(f"{path}: member {info.filename[:60]} has no local header")
            name_length, extra_length = struct.unpack("<HH", header[26:30])
            fh.seek(info.header_offset + 30 + name_length + extra_length)
            raw = fh.read(info.compress_size)
        try:
            data = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(raw)).read(limit + 1)
        except zstandard.ZstdError as exc:
            raise SubmissionError(f"{path}: member {info.filename[:60]} is not valid zstd ({exc})") from None
    if len(data) > limit:
        raise SubmissionError(f"{path}: member {info.filename[:60]} decompresses to more than {limit:,} bytes "
                              f"({_limits()})")
    return data


def _limits() -> str:
    return f"a member may hold {MEMBER_LIMIT >> 20} MiB, the members read {TOTAL_LIMIT >> 20} MiB in all"


def eval_members(path: Path, prefix: str) -> list:
    """The JSON members of an Inspect `.eval` log whose names begin with `prefix` (`header.json`, `samples/`),
    parsed, in the order of the zip file."""
    import zipfile

    from evaluator.submission import parse_json

    try:
        archive = zipfile.ZipFile(path)
    except (OSError, zipfile.BadZipFile) as exc:
        raise SubmissionError(f"{path}: not an Inspect .eval log (a zip file): {exc}") from None
    found, left = [], TOTAL_LIMIT
    with archive:
        for info in archive.infolist():
            if info.filename.startswith(prefix) and info.filename.endswith(".json"):
                data = _member(path, archive, info, min(MEMBER_LIMIT, left))
                left -= len(data)
                found.append(parse_json(data, f"{path}: {info.filename[:60]}"))
    return found


def inspect_records(path: Path) -> list:
    """The vlbench record of every sample of an Inspect `.eval` log (None for a sample without one), in the
    order of its members."""
    samples = eval_members(path, "samples/")
    if not samples:
        raise SubmissionError(f"{path}: holds no samples (an Inspect .eval log keeps them under samples/)")
    return [_sample_record(sample) for sample in samples]


def _sample_record(sample) -> dict | None:
    """The record of one sample of an `.eval` log: the `vlbench` scorer's (an exported task), or the sample's
    `vlbench` metadata and its output (the Hub's task over the `inspect` config, evaluator/harness/hub.py)."""
    if not isinstance(sample, dict):
        return None
    score = sample.get("scores", {}).get("vlbench") if isinstance(sample.get("scores"), dict) else None
    metadata = score.get("metadata") if isinstance(score, dict) else None
    record = metadata.get(RECORD) if isinstance(metadata, dict) else None
    if isinstance(record, dict):
        return record
    hub = sample.get("metadata", {}).get("vlbench") if isinstance(sample.get("metadata"), dict) else None
    output = sample.get("output", {}).get("completion") if isinstance(sample.get("output"), dict) else None
    return {**hub, "output": output} if isinstance(hub, dict) and isinstance(output, str) else None
