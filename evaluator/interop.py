"""Outputs of other evaluation harnesses, read as vlbench submissions for the benchmarks they share.

* lmms-eval's `--log_samples` files: JSON lines of samples (`samples_<task>*.jsonl`), or the older
  JSON object `{"args", "model_configs" or "config", "logs": [samples]}`. A sample holds `doc_id`,
  `target`, `resps` and `filtered_resps`, the model's answer after the task's filters: the first
  filtered response is the prediction. Older versions also keep the task's `doc` (without its image),
  and the benchmark's id is a field of it (GQA: `id`; VQA v2: `question_id`). lmms-eval 0.7 drops `doc`
  (its tracker pops it before writing): `doc_id` is then the row of the task's dataset split, which
  `--harness-data` gives (lmms-lab's layout, a local parquet folder or a Hub dataset id; the Task
  declares which config, split and columns, `harness_split`). Each mapped row is checked against the
  sample: its question must be in the sample's `input` (the prompt lmms-eval built from it), and its
  target, where the task has one, must be the sample's `target`; the first mismatch is an error.
* lmms-eval's log or Inspect's `.eval` log of a task `vlbench export-task` wrote (any benchmark): each
  sample carries vlbench's record of its prompt (the row's id among it), so it is read by id and checked
  against the build by evaluator/harness/logs.py, whatever the benchmark's own harness counterparts.
* VLMEvalKit's prediction files (`<model>_<dataset>.xlsx`, or .tsv / .csv): the dataset's table with a
  `prediction` column added. The benchmark's id must be a column of it (VLMEvalKit's own `index` is a
  row number, not the benchmark's id, and is not used).

Which harness tasks map to a benchmark, and which of their fields holds its id, the `Task` declares
(`harness_tasks`, `harness_id_fields`). A harness's answers are raw generations, so each is put in the
form `vlbench predict` gives a generated answer (the Task's `generative.prediction`: VQA's official
normalisation, GQA's lower case), as lmms-eval's own scoring does before it compares; a reasoning
model's thinking is removed first (evaluator/models/reasoning.py; `--reasoning-tags` gives other
markers), and an answer cut off inside its thinking is an empty answer, counted `unfinished_answers`. Rows whose id
is not in the evaluated split (a whole GQA test-dev log scored on GQA-OOD's subset) are counted and
left out; missing rows follow the usual rule (`--allow-partial`). The conversion is reported with the
metrics (`input`).
"""

from __future__ import annotations

import csv
from pathlib import Path

from core.errors import ParamsError, SubmissionError, os_problem
from evaluator.base import HarnessSplit
from evaluator.models.reasoning import DEFAULT_TAGS, Reasoning
from evaluator.submission import check_entries, parse_json, read_json

FORMATS = ("auto", "vlbench", "lmms-eval", "vlmevalkit", "inspect")


def _parquet_files(folder: Path, spec: HarnessSplit) -> list[Path]:
    """The split's shards in a dataset folder, in the order datasets reads them (sorted by path)."""
    def wanted(path: Path) -> bool:
        rel = path.relative_to(folder).parts
        return (path.name.startswith((f"{spec.split}-", f"{spec.split}.")) and not any(p.startswith(".") for p in rel)
                and (spec.config is None or spec.config in rel[:-1]))
    return sorted(p for p in folder.rglob("*.parquet") if wanted(p))


def harness_docs(source: str, spec: HarnessSplit):
    """The rows of a harness task's split (id, question and target columns only): `source` is a local
    folder in lmms-lab's layout or a Hub dataset id (fetched through the Hub cache)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = Path(source).expanduser()
    if not folder.exists():
        if source.startswith((".", "/", "~")) or source.count("/") != 1:
            raise ParamsError(f"--harness-data {source}: no such folder (and not a Hub dataset id ORG/NAME)")
        folder = _fetch(source, spec)
    if not folder.is_dir():
        raise ParamsError(f"--harness-data {source}: not a folder")
    files = _parquet_files(folder, spec)
    where = f"{spec.config + '/' if spec.config else ''}{spec.split}"
    if not files:
        raise ParamsError(f"--harness-data {source}: no parquet files of the {where} split")
    columns = [spec.id_column, spec.question_column] + ([spec.target_column] if spec.target_column else [])
    try:
        tables = [pq.read_table(f, columns=columns) for f in files]
    except (OSError, pa.ArrowException) as exc:
        raise ParamsError(f"--harness-data {source}: cannot read the {where} split ({str(exc).splitlines()[0]})") \
            from None
    return pa.concat_tables(tables)


def _fetch(repo_id: str, spec: HarnessSplit) -> Path:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    pattern = f"{spec.config}/{spec.split}-*.parquet" if spec.config else f"*/{spec.split}-*.parquet"
    try:
        return Path(snapshot_download(repo_id, repo_type="dataset", allow_patterns=[pattern]))
    except (LocalEntryNotFoundError, HfHubHTTPError, OSError, ValueError) as exc:
        raise ParamsError(f"--harness-data {repo_id}: cannot fetch the dataset ({str(exc).splitlines()[0]})") \
            from None
TABLE_SUFFIXES = (".xlsx", ".tsv", ".csv")


def _json_format(data) -> str:
    """lmms-eval for a JSON object with a `logs` list or a list of samples (`doc_id`, `filtered_resps`),
    else vlbench (whose checks report a malformed submission)."""
    if isinstance(data, dict) and isinstance(data.get("logs"), list):
        return "lmms-eval"
    if isinstance(data, list) and data and isinstance(data[0], dict) and {"doc_id", "filtered_resps"} <= set(data[0]):
        return "lmms-eval"
    return "vlbench"


def _lmms_samples(path: Path, data=None) -> tuple[list, str | None]:
    """The samples of an lmms-eval log (`data`: the JSON file's content when already read) and the
    task it names (None when the file does not say)."""
    if path.suffix.lower() == ".jsonl":
        try:
            lines = path.read_bytes().splitlines()
        except OSError as exc:
            raise SubmissionError(f"{path}: {os_problem(exc)}") from None
        return [parse_json(line, f"{path}: line {n}") for n, line in enumerate(lines, start=1) if line.strip()], None
    data = read_json(path) if data is None else data
    if isinstance(data, dict):
        config = data.get("model_configs") or data.get("config") or {}
        if not isinstance(data.get("logs"), list):
            raise SubmissionError(f"{path}: an lmms-eval samples file has a `logs` list")
        return data["logs"], config.get("task") if isinstance(config, dict) else None
    if isinstance(data, list):
        return data, None
    raise SubmissionError(f"{path}: not an lmms-eval samples file (a `logs` object or JSON lines of samples)")


def _first_response(sample):
    value = sample.get("filtered_resps")
    while isinstance(value, list) and value:
        value = value[0]
    return value


class _DocMap:
    """doc_id -> the benchmark's id through --harness-data, each row checked against its sample."""

    def __init__(self, path: Path, task, source: str | None):
        self.path, self.task, self.source, self.docs = path, task, source, None

    def __call__(self, n: int, sample: dict):
        task, doc_id = self.task, sample.get("doc_id")
        if self.docs is None:
            spec = task.harness_split
            if self.source is None or spec is None:
                raise SubmissionError(
                    f"{self.path}: sample {n} (doc_id {doc_id}) has no doc field {' or '.join(task.harness_id_fields)}"
                    " naming the " + task.name + " id (lmms-eval 0.7 drops `doc`): " + (
                        "pass --harness-data, the task's dataset (lmms-lab's layout: a local parquet folder or a "
                        "Hub dataset id), to map doc_id to the question" if spec is not None else
                        f"{task.name} declares no lmms-eval dataset to map doc_id through"))
            docs = harness_docs(self.source, spec)
            self.docs = [docs.column(c).to_pylist() for c in (spec.id_column, spec.question_column)]
            self.targets = docs.column(spec.target_column).to_pylist() if spec.target_column else None
        ids, questions = self.docs
        if type(doc_id) is not int or not 0 <= doc_id < len(ids):
            raise SubmissionError(f"{self.path}: sample {n}: doc_id {str(doc_id)[:40]} is not a row of the "
                                  f"--harness-data split ({len(ids):,} rows)")
        prompt = sample.get("input")
        if not isinstance(prompt, str) or str(questions[doc_id]) not in prompt:
            raise SubmissionError(f"{self.path}: sample {n} (doc_id {doc_id}): its input does not hold the question "
                                  f"of row {doc_id} of --harness-data ({str(questions[doc_id])[:60]!r}); is this "
                                  "the dataset the log was made on?")
        if self.targets is not None and str(sample.get("target")) != str(self.targets[doc_id]):
            target = str(sample.get("target"))[:40]
            raise SubmissionError(f"{self.path}: sample {n} (doc_id {doc_id}): target {target!r} is not row {doc_id}'s "
                                  f"answer {str(self.targets[doc_id])[:40]!r} in --harness-data; is this the dataset "
                                  "the log was made on?")
        return ids[doc_id]


def _lmms_rows(path: Path, task, read: tuple[list, str | None], harness_data: str | None = None
               ) -> tuple[list[tuple], dict]:
    """(id, prediction) per sample, and the task the log names (`read`: `_lmms_samples`' answer). The id is
    the sample's `doc` field, else its `doc_id` mapped through `harness_data` (see the module docstring)."""
    samples, harness_task = read
    wanted = task.harness_tasks.get("lmms-eval", ())
    if harness_task is not None and harness_task not in wanted:
        raise SubmissionError(f"{path}: lmms-eval task '{harness_task}' is not {task.name}'s (expected "
                              f"{' or '.join(wanted)})")
    rows, mapped = [], _DocMap(path, task, harness_data)
    for n, sample in enumerate(samples):
        if not isinstance(sample, dict):
            raise SubmissionError(f"{path}: sample {n} is not a JSON object")
        doc = sample.get("doc")
        field = next((f for f in task.harness_id_fields if isinstance(doc, dict) and f in doc), None)
        rows.append((doc[field] if field is not None else mapped(n, sample), _first_response(sample)))
    return rows, {"task": harness_task, **({"harness_data": harness_data} if mapped.docs is not None else {})}


def _xlsx_cells(path: Path) -> list[list]:
    """The active sheet's values. A formula cell gives the value the spreadsheet saved with it; a
    formula without a saved value (a workbook written by a program that never computed it) is an
    error naming the cell, never an empty prediction."""
    import openpyxl

    try:
        formulas = openpyxl.load_workbook(path, read_only=True, data_only=False).active
        saved = openpyxl.load_workbook(path, read_only=True, data_only=True).active
        cells = []
        for raw, row in zip(formulas.iter_rows(), saved.iter_rows(values_only=True)):
            for cell, value in zip(raw, row):
                if getattr(cell, "data_type", None) == "f" and value is None:
                    raise SubmissionError(f"{path}: cell {cell.coordinate} holds a formula with no saved value "
                                          f"({str(cell.value)[:40]}); open and save the workbook in a spreadsheet "
                                          "program, or write the values themselves")
            cells.append(list(row))
    except SubmissionError:
        raise
    except Exception as exc:  # openpyxl raises many kinds for a damaged workbook
        raise SubmissionError(f"{path}: not a readable .xlsx workbook ({type(exc).__name__})") from None
    return cells


def _table_rows(path: Path) -> tuple[list[str], list[list]]:
    """The header and the non-empty rows of a VLMEvalKit table."""
    if path.suffix.lower() == ".xlsx":
        cells = _xlsx_cells(path)
    else:
        try:
            with open(path, newline="", encoding="utf-8") as fh:
                cells = list(csv.reader(fh, delimiter="\t" if path.suffix.lower() == ".tsv" else ","))
        except (OSError, UnicodeDecodeError, csv.Error) as exc:
            raise SubmissionError(f"{path}: cannot read ({exc})") from None
    if not cells:
        raise SubmissionError(f"{path}: empty table")
    header = [str(h) if h is not None else "" for h in cells[0]]
    return header, [r for r in cells[1:] if any(c not in (None, "") for c in r)]


def _vlmeval_rows(path: Path, task) -> tuple[list[tuple], dict]:
    """(id, prediction) per row, and the VLMEvalKit dataset the file name ends with (if known). A
    column read here that appears twice is an error (which one holds the answers is not knowable)."""
    header, table = _table_rows(path)
    field = next((f for f in task.harness_id_fields if f in header), None)
    if "prediction" not in header or field is None:
        raise SubmissionError(f"{path}: a VLMEvalKit prediction file with a `prediction` column and a column "
                              f"{' or '.join(task.harness_id_fields)} holding the {task.name} id (VLMEvalKit's "
                              "`index` is its own row number)")
    for column in ("prediction", field):
        if header.count(column) > 1:
            raise SubmissionError(f"{path}: {header.count(column)} columns are named `{column}`; keep one")
    at_id, at_prediction = header.index(field), header.index("prediction")
    dataset = next((d for d in task.harness_tasks.get("vlmevalkit", ()) if path.stem.endswith(f"_{d}")), None)
    cell = lambda row, k: row[k] if k < len(row) else None  # noqa: E731 -- a short CSV row
    return [(cell(r, at_id), cell(r, at_prediction)) for r in table], {"dataset": dataset}


def _as_id(value, id_type: type):
    """A harness's id as the benchmark's id type (spreadsheets turn numeric ids into numbers)."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if id_type is str:
        return None if value is None else str(value)
    if id_type is int and isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return value


def load_submission(task, path: Path, fmt: str, split_ids: list, harness_data: str | None = None,
                    reasoning_tags: tuple | None = None, build: tuple | None = None) -> tuple[dict, dict | None]:
    """{id: value} of a submission in any supported format, and how it was converted (None for
    vlbench's own format). Rows of ids outside the split are left out and counted; a harness's answers
    are put in the form of a generated answer (the module docstring). A log of a task `vlbench export-task`
    wrote is read by id and checked against `build`, (the built folder, the split, its table), by
    evaluator/harness/logs.py."""
    path = Path(path)
    if fmt not in FORMATS:
        raise ParamsError(f"--format {fmt}: expected one of {', '.join(FORMATS)}")
    data = None  # a JSON file is read once, to tell its format and to take its entries
    if fmt == "inspect" or (fmt == "auto" and path.suffix.lower() == ".eval"):
        from evaluator.harness.logs import inspect_records, read_exported_log

        if build is None:
            raise SubmissionError(f"{path}: an Inspect log of an exported vlbench task is read against a built split")
        if not path.is_file():
            raise SubmissionError(f"{path}: " + ("is a folder" if path.is_dir() else "not found"))
        return read_exported_log(task, path, inspect_records(path), build, reasoning_tags, harness="inspect")
    if fmt == "auto":
        suffix = path.suffix.lower()
        if suffix in TABLE_SUFFIXES:
            fmt = "vlmevalkit"
        elif suffix == ".jsonl":
            fmt = "lmms-eval"
        else:
            data = read_json(path)
            fmt = _json_format(data)
    if fmt == "vlbench":
        return check_entries(path, read_json(path) if data is None else data, task.id_field, task.value_field,
                             task.id_type, task.value_check, task.value_desc), None
    read = None
    if fmt == "lmms-eval" and path.is_file():
        from evaluator.harness.logs import exported_record, is_exported_log, read_exported_log

        read = _lmms_samples(path, data)
        if is_exported_log(read[0]):
            if build is None:
                raise SubmissionError(f"{path}: a log of an exported vlbench task is read against a built split")
            return read_exported_log(task, path, [exported_record(s) for s in read[0]], build, reasoning_tags)
    if fmt not in task.harness_tasks:
        from evaluator.tasks import get_task, task_names

        have = ", ".join(name for name in task_names() if fmt in get_task(name).harness_tasks)
        raise ParamsError(f"--format {fmt}: {task.name} has no {fmt} counterpart (these do: {have}; every benchmark "
                          "does through `vlbench export-task`)")
    if not path.is_file():
        raise SubmissionError(f"{path}: " + ("is a folder" if path.is_dir() else "not found"))
    rows, info = _lmms_rows(path, task, read, harness_data) if fmt == "lmms-eval" else _vlmeval_rows(path, task)
    ask = task.generative
    answer = ask.prediction if ask is not None and ask.mode == "generate" else str
    # a reasoning model's thinking is separated from its answer first; one cut off while thinking has none
    replies = [Reasoning(reasoning_tags or DEFAULT_TAGS).split("" if v is None else str(v)) for _, v in rows]
    entries = [{task.id_field: _as_id(i, task.id_type), task.value_field: answer(r.answer or "")}
               for (i, _), r in zip(rows, replies)]
    if ask is not None and ask.mode == "generate":
        markers = ", ".join(f"{o}...{c}" for o, c in (reasoning_tags or DEFAULT_TAGS))
        info["answers"] = f"thinking removed ({markers}); {ask.cleaning}"
        info["unfinished_answers"] = sum(r.unfinished for r in replies)
    predictions = check_entries(path, entries, task.id_field, task.value_field, task.id_type, task.value_check,
                                task.value_desc, entry_name="row numbers")
    inside = set(split_ids)
    outside = [k for k in predictions if k not in inside]
    for k in outside:
        del predictions[k]
    return predictions, {"format": fmt, **{k: v for k, v in info.items() if v is not None}, "rows": len(rows),
                         "in_split": len(predictions), "outside_split": len(outside),
                         **({"first_outside": outside[0]} if outside else {})}
