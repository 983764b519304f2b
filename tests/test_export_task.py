"""`vlbench export-task` (evaluator/harness/): what an exported task folder holds, checked without the
harness. Running the tasks in the real lmms-eval, and their logs read back, is tests/test_harness_runs.py."""

from __future__ import annotations

import hashlib
import json

import pyarrow.parquet as pq
import pytest
import yaml
from helpers import assert_one_error_line, write_row_images

from builders.registry import benchmarks
from core.data import load_table
from evaluator.harness.docs import id_text
from evaluator.models.ask import LETTER_INSTRUCTION, letter_prompt
from evaluator.tasks import get_task, task_names

EXPORTABLE = [name for name in task_names() if get_task(name).generative is not None]


class _Loader(yaml.SafeLoader):
    """PyYAML with lmms-eval's `!function` tag read as the function's dotted name."""


_Loader.add_constructor("!function", lambda loader, node: ("function", loader.construct_scalar(node)))


def _export(cli, bench, data, out, *args):
    code, stdout, stderr = cli("export-task", bench, "--data", data, "--harness", "lmms-eval", "--out", out, *args)
    assert code == 0, stderr
    return out


def test_every_benchmark_with_an_ask_is_exportable():
    # every registered benchmark with a Task declares an Ask but vl-bias, which has no Task
    assert sorted(EXPORTABLE) == sorted(b.name for b in benchmarks() if b.name != "vl-bias")


@pytest.mark.parametrize("bench", EXPORTABLE)
def test_export_folder(bench, built, cli, tmp_path):
    """The documents are the Ask's prompts, in its order, each with its row's vlbench id (multiple choice by
    letter where the benchmark can be asked so, lmms-eval's default); the YAML names functions utils.py defines
    and one metric per headline metric; vlbench_task.json names the build."""
    data = built(bench)
    task = get_task(bench)
    ask = task.generative
    images = write_row_images(bench, data, tmp_path / "images")
    out = _export(cli, bench, data, tmp_path / "task", "--images", images)
    meta = json.loads((out / "vlbench_task.json").read_text())
    table = load_table(data, task.config, meta["split"])
    values, continuations, rows = ask.prompts(table)
    docs = pq.read_table(out / "docs" / f"{meta['split']}.parquet").to_pydict()
    form = "generate" if ask.mode == "generate" else "loglik" if ask.letter_reason else "letter"
    shown = [ask.default_prompt.format(**v) for v in values]
    if form == "letter":
        shown = [letter_prompt(t, c) for t, c in zip(shown, continuations)]
    assert docs["prompt"] == shown
    assert docs["vlbench_id"] == [id_text(task.ids(table)[r]) for r in rows]
    assert docs["choices"] == continuations
    assert all(len(i) == (ask.image_column is not None) for i in docs["images"])
    assert meta["manifest_sha256"] == hashlib.sha256((data / "manifest.json").read_bytes()).hexdigest()
    assert meta["form"] == form  # lmms-eval's auto: by letter where the benchmark can be asked so
    config = yaml.load((out / f"{meta['task']}.yaml").read_text(), Loader=_Loader)
    assert config["task"] == meta["task"] and config["test_split"] == meta["split"]
    assert config["output_type"] == ("multiple_choice" if form == "loglik" else "generate_until")
    assert [m["metric"] for m in config["metric_list"]] == [h.key for h in task.headline]
    utils = (out / "utils.py").read_text()
    named = [v[1] for v in config.values() if isinstance(v, tuple)] + [m["aggregation"][1]
                                                                       for m in config["metric_list"]]
    for name in named:
        assert name.startswith("utils.") and f"\n{name[len('utils.'):]} = " in utils
    assert (out / "scored" / task.config / f"{meta['split']}-00000-of-00001.parquet").read_bytes() == \
        (data / task.config / f"{meta['split']}-00000-of-00001.parquet").read_bytes()


def test_letter_form(built, cli, tmp_path):
    """--choice-mode letter: each prompt lists its options by letter with LLaVA's instruction, and the task
    generates; --choice-mode loglik makes it lmms-eval's multiple choice over the same options."""
    data = built("cosim-q")
    images = write_row_images("cosim-q", data, tmp_path / "i")
    out = _export(cli, "cosim-q", data, tmp_path / "task", "--images", images, "--choice-mode", "letter",
                  "--max-new-tokens", "5")
    meta = json.loads((out / "vlbench_task.json").read_text())
    docs = pq.read_table(out / "docs" / "val.parquet").to_pydict()
    lines, options = docs["prompt"][0].split("\n"), docs["choices"][0]
    assert lines[-1] == LETTER_INSTRUCTION
    assert lines[-1 - len(options):-1] == [f"{'ABCD'[i]}. {c}" for i, c in enumerate(options)]
    config = yaml.load((out / f"{meta['task']}.yaml").read_text(), Loader=_Loader)
    assert config["output_type"] == "generate_until" and config["generation_kwargs"]["max_new_tokens"] == 5
    out = _export(cli, "cosim-q", data, tmp_path / "loglik", "--images", tmp_path / "i", "--choice-mode", "loglik")
    config = yaml.load((out / f"{meta['task']}.yaml").read_text(), Loader=_Loader)
    assert config["output_type"] == "multiple_choice" and config["target_delimiter"] == ""
    first = pq.read_table(out / "docs" / "val.parquet").column("prompt")[0].as_py()
    assert first == docs["prompt"][0].split("\nA. ")[0]


def test_scoring_inside_the_harness_equals_evaluate(built, cli, tmp_path):
    """The functions lmms-eval calls (utils.py's process_results, then each metric's aggregation) give the
    metrics `vlbench evaluate` gives the same answers: records made by process_results from answers written
    here (the golden: the split's own answers, capitalised with a period, so every accuracy is 100%)."""
    import importlib.util

    data = built("gqa-ood")
    images = write_row_images("gqa-ood", data, tmp_path / "i")
    out = _export(cli, "gqa-ood", data, tmp_path / "task", "--images", images)
    spec = importlib.util.spec_from_file_location("exported_utils", out / "utils.py")
    utils = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(utils)
    docs = pq.read_table(out / "docs" / "testdev.parquet",
                         columns=["vlbench_id", "prompt_index", "prompts"]).to_pylist()
    table = load_table(data, "all", "testdev")
    answers = dict(zip(table.column("question_id").to_pylist(), table.column("answer").to_pylist()))
    results = [utils.process_results(d, [answers[json.loads(d["vlbench_id"])].capitalize() + "."]) for d in docs]
    harness = {key: getattr(utils, f"aggregate_{n}")([r[key] for r in results])
               for n, key in enumerate(("acc_all", "acc_tail", "acc_head"))}
    predictions = tmp_path / "p.json"
    predictions.write_text(json.dumps([{"questionId": i, "prediction": a} for i, a in answers.items()]))
    code, stdout, _ = cli("evaluate", "gqa-ood", "--data", data, "--predictions", predictions, "--bootstrap", "0")
    evaluated = json.loads(stdout)
    assert harness == {k: evaluated[k] for k in harness} == {"acc_all": 100.0, "acc_tail": 100.0, "acc_head": 100.0}


def test_refusals(built, cli, tmp_path):
    data = built("visdial")
    code, _, err = cli("export-task", "visdial", "--data", data, "--harness", "lmms-eval", "--out", tmp_path / "t",
                       "--choice-mode", "letter")
    assert_one_error_line(code, err, ["--choice-mode letter"])
    code, _, err = cli("export-task", "vl-bias", "--data", data, "--harness", "lmms-eval", "--out", tmp_path / "t")
    assert_one_error_line(code, err, ["vl-bias"])
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    code, _, err = cli("export-task", "visdial", "--data", data, "--harness", "lmms-eval", "--out", tmp_path / "mine")
    assert_one_error_line(code, err, ["--out", "not written by `vlbench export-task`"])
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"
    code, _, err = cli("export-task", "visdial", "--data", data, "--harness", "lmms-eval", "--out", data / "x")
    assert_one_error_line(code, err, ["--out", "--data"])
    code, _, err = cli("export-task", "gqa-ood", "--data", built("gqa-ood"), "--harness", "lmms-eval",
                       "--out", tmp_path / "g", "--images", tmp_path / "nowhere")
    assert_one_error_line(code, err, ["nowhere"])
    assert not (tmp_path / "g").exists()


def test_inspect_export(built, cli, tmp_path):
    """--harness inspect: the same documents (by letter for multiple choice), a task file whose @task function is
    named like the task; a benchmark scored by log-likelihood only is refused with the reason (Inspect's models
    score no log-likelihoods)."""
    data = built("vcr")
    images = write_row_images("vcr", data, tmp_path / "i")
    out = tmp_path / "task"
    code, _, err = cli("export-task", "vcr", "--data", data, "--harness", "inspect", "--out", out, "--images", images)
    assert code == 0, err
    meta = json.loads((out / "vlbench_task.json").read_text())
    assert meta["harness"] == "inspect" and meta["form"] == "letter" and not list(out.glob("*.yaml"))
    assert f"\ndef {meta['task']}():\n" in (out / f"{meta['task']}.py").read_text()
    docs = pq.read_table(out / "docs" / "val.parquet", columns=["vlbench_id", "prompt_index", "prompts"]).to_pylist()
    assert [d["prompt_index"] for d in docs[:4]] == [0, 1, 0, 1] and {d["prompts"] for d in docs} == {2}
    for bench, reason in (("visdial", "100 options"), ("socialiq", "--harness inspect")):
        code, _, err = cli("export-task", bench, "--data", built(bench), "--harness", "inspect", "--out",
                           tmp_path / bench, "--images", images)
        assert_one_error_line(code, err, ["--harness inspect", "no log-likelihoods", reason])
    code, _, err = cli("export-task", "cosim-q", "--data", built("cosim-q"), "--harness", "inspect", "--out",
                       tmp_path / "c", "--choice-mode", "loglik")
    assert_one_error_line(code, err, ["--choice-mode letter asks it by letter"])


def _records(bench, built, tmp_path, harness="lmms-eval"):
    """(the exported task's ExportedRun, a record per document in the documents' order, each answering the
    first option: the letter A, option 0's log-likelihood highest, or the text "2")."""
    from evaluator.harness.export import export_task
    from evaluator.harness.run import ExportedRun

    data = built(bench)
    images = write_row_images(bench, data, tmp_path / "images")
    out = export_task(bench, str(data), harness, tmp_path / "task", split=None, template=None, choice_mode="auto",
                      images=images, videos=None, frames=2, max_new_tokens=None)
    run = ExportedRun(out)
    docs = pq.read_table(next((out / "docs").glob("*.parquet")), columns=["vlbench_id", "prompt_index",
                                                                           "prompts", "choices"]).to_pylist()
    form = run.meta["form"]
    return run, [run.record(d, [0.0] + [-1.0] * (len(d["choices"]) - 1) if form == "loglik" else
                            "A" if form == "letter" else "2") for d in docs]


@pytest.mark.parametrize("bench", EXPORTABLE)
def test_harness_metrics_are_defined_on_any_subset(bench, built, tmp_path):
    """A harness scores the samples done so far (Inspect's live display does, about once a second, and marks
    the task `error` when a metric raises): every headline metric is a float on any prefix of the run, NaN
    while nothing is complete (a pair with one sub-question, a VCR row with its Q->A prompt alone, no prompt
    at all), and `incomplete_rows` counts the rows a prompt is missing from. On the whole run the values are
    those of the complete subset's own scoring (tests/test_harness_runs.py checks them against `evaluate`)."""
    import math

    from evaluator.harness.run import INCOMPLETE

    run, records = _records(bench, built, tmp_path)
    keys = [m["key"] for m in run.meta["metrics"]]
    for n in (0, 1, 2, 3, len(records)):
        metrics = run.metrics(records[:n])
        assert set(metrics) == {*keys, INCOMPLETE}
        assert all(isinstance(metrics[k], float) for k in keys), metrics
        prompts = {r["id"]: r["prompts"] for r in records[:n]}
        seen = [r["id"] for r in records[:n]]
        incomplete = sum(seen.count(i) < prompts[i] for i in prompts)
        assert metrics[INCOMPLETE] == incomplete
        if n == 0 or incomplete == len(prompts):
            assert all(math.isnan(metrics[k]) for k in keys), metrics
    assert metrics[INCOMPLETE] == 0 and not any(math.isnan(metrics[k]) for k in keys[:1]), metrics
    if bench in ("vcr-visor", "pmr-p", "cosim-q", "cosim-c"):  # one sub-question of a pair: no pair complete
        assert math.isnan(run.metrics(records[:1])["apq"])


def _renamed_split(data, tmp_path, config, split, new):
    """A copy of a build whose `split` shards are renamed to the split `new` (a build chooses its split names)."""
    import shutil

    copy = tmp_path / "build"
    shutil.copytree(data, copy)
    for shard in sorted((copy / config).glob(f"{split}-*.parquet")):
        shard.rename(shard.with_name(new + shard.name[len(split):]))
    return copy


@pytest.mark.parametrize("harness", ["lmms-eval", "inspect"])
def test_a_split_name_with_a_dot_exports_valid_files(harness, built, cli, tmp_path):
    """`val.v2` (a valid split name for datasets) gives a task named vlbench_cosim_q_val_v2 whose Python compiles
    and whose YAML holds the split as a value (before: `def vlbench_cosim_q_val.v2():`, exit 0)."""
    import ast

    data = _renamed_split(built("cosim-q"), tmp_path, "default", "val", "val.v2")
    images = write_row_images("cosim-q", built("cosim-q"), tmp_path / "i")
    out = tmp_path / "task"
    code, _, err = cli("export-task", "cosim-q", "--data", data, "--harness", harness, "--out", out, "--images", images)
    assert code == 0, err
    meta = json.loads((out / "vlbench_task.json").read_text())
    assert meta["split"] == "val.v2" and meta["task"] == "vlbench_cosim_q_val_v2"
    sources = [out / f"{meta['task']}.py"] if harness == "inspect" else [out / "utils.py"]
    for source in sources:
        tree = ast.parse(source.read_text())
        if harness == "inspect":
            assert [f.name for f in tree.body if isinstance(f, ast.FunctionDef)] == [meta["task"]]
    if harness == "lmms-eval":
        config = yaml.load((out / f"{meta['task']}.yaml").read_text(), Loader=_Loader)
        assert config["test_split"] == "val.v2" and list(config["dataset_kwargs"]["data_files"]) == ["val.v2"]
        assert config["doc_to_text"] == ("function", "utils.doc_to_text")


@pytest.mark.parametrize("split", ["my val", "x():\n    import os\n    os.system('touch pwned')\ndef y",
                                   'val"""', "val\x1b[2J", "..", "val\udcff"])
def test_a_split_name_that_could_become_code_is_refused(split, built, cli, tmp_path):
    """A split name outside the split-name rule (a crafted build from the Hub or a shared folder names its shards
    so) is one line naming the allowed characters, exit 2, nothing written: it never reaches the task's
    Python, YAML or file names. Before: the Inspect task file held the crafted function and ran it."""
    try:
        data = _renamed_split(built("cosim-q"), tmp_path, "default", "val", split)
    except OSError as exc:  # a file system that refuses the name cannot hold such a build either
        pytest.skip(f"this file system refuses the name: {exc}")
    images = write_row_images("cosim-q", built("cosim-q"), tmp_path / "i")
    for harness in ("inspect", "lmms-eval"):
        out = tmp_path / f"task-{harness}"
        code, _, err = cli("export-task", "cosim-q", "--data", data, "--harness", harness, "--out", out,
                           "--images", images)
        assert_one_error_line(code, err, ["split name", "letters, digits and underscores"])
        assert not out.exists() and not (tmp_path / "pwned").exists()


@pytest.mark.parametrize("name", ["task\nout", "task\x1b]0;title\x07", "task\udcff"])
def test_an_out_that_cannot_be_written_into_a_file_is_refused(name, built, cli, tmp_path):
    """--out is written into the lmms-eval YAML (an absolute path) and the README's commands: control
    characters and names that are not UTF-8 are refused in one line, nothing written."""
    data = built("cosim-q")
    images = write_row_images("cosim-q", data, tmp_path / "i")
    out = tmp_path / name
    code, _, err = cli("export-task", "cosim-q", "--data", data, "--harness", "lmms-eval", "--out", out,
                       "--images", images)
    assert_one_error_line(code, err, ["--out", "control characters" if "\udcff" not in name else "not valid UTF-8"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["i"]


def test_a_task_folder_whose_meta_names_another_path_is_refused(built, cli, tmp_path):
    """vlbench_task.json comes from the folder (anyone's): a split that is a path, or a task name that is not an
    identifier, is refused where it is read (push --inspect-task would write `inspect/<split>-...parquet`)."""
    from core.errors import VlbenchError
    from evaluator.harness.meta import read_meta

    run, _ = _records("cosim-q", built, tmp_path, harness="inspect")
    meta_path = run.folder / "vlbench_task.json"
    for field, value in (("split", "../../outside"), ("task", "x(): pass\nimport os\ndef y")):
        meta = json.loads(meta_path.read_text())
        meta[field] = value
        meta_path.write_text(json.dumps(meta))
        with pytest.raises(VlbenchError, match="split name|not a Python identifier"):
            read_meta(run.folder)
        meta[field] = run.meta[field]
        meta_path.write_text(json.dumps(meta))


@pytest.mark.parametrize("field, value, needle", [("prompts", 1, "the split asks 2"),
                                                  ("prompts", 10 ** 9, "the split asks 2"),
                                                  ("prompts", "2", "the split asks 2"),
                                                  ("prompt_index", True, "is not a prompt"),
                                                  ("id", {"$": "x"}, "is not a prompt"),
                                                  ("benchmark", "vcr\x1b[2J" + "x" * 10 ** 6, "not vcr's")])
def test_a_log_s_fields_are_checked_before_use(field, value, needle, built, cli, tmp_path):
    """A harness log is data from outside: a row's number of prompts comes from the split (a log claiming one
    prompt, or a billion, before: a row left out, or `list(range(10**9))`), and every field is checked for its
    type before it is used, each a bounded line with its control characters escaped. The log here is what the
    exported task's own process_results returns, one metric's record per sample, then one field changed."""
    run, records = _records("vcr", built, tmp_path)
    log = tmp_path / "samples_vcr.jsonl"
    log.write_text("".join(json.dumps({"doc_id": n, "q_a": {"vlbench": r}}) + "\n" for n, r in enumerate(records)))
    code, out, err = cli("evaluate", "vcr", "--data", built("vcr"), "--predictions", log, "--bootstrap", "0")
    assert code == 0 and json.loads(out)["coverage"]["missing"] == 0, err
    records[3] = {**records[3], field: value}
    log.write_text("".join(json.dumps({"doc_id": n, "q_a": {"vlbench": r}}) + "\n" for n, r in enumerate(records)))
    code, _, err = cli("evaluate", "vcr", "--data", built("vcr"), "--predictions", log, "--bootstrap", "0")
    line = assert_one_error_line(code, err, ["sample 3", needle])
    assert len(line) < 600 and "\x1b" not in line


def _tampered(built, tmp_path, edit):
    """A copy of the COSIM-Q sample build with its val table changed by `edit(table) -> table`."""
    import shutil

    copy = tmp_path / "build"
    shutil.copytree(built("cosim-q"), copy)
    shard = copy / "default" / "val-00000-of-00001.parquet"
    pq.write_table(edit(pq.read_table(shard)), shard)
    return copy


def _duplicate_id(table):
    import pyarrow as pa

    ids = table.column("id").to_pylist()
    return table.set_column(table.column_names.index("id"), "id", pa.array([ids[0], *ids[:-1]]))


def _id_as_number(table):
    import pyarrow as pa

    return table.set_column(table.column_names.index("label"), "label", pa.array(
        [str(v) for v in table.column("label").to_pylist()]))


@pytest.mark.parametrize("edit, needle", [
    (lambda t: t.drop(["question"]), "has no column question"),
    (_duplicate_id, "is on rows 0 and 1; a build's ids are unique"),
    (_id_as_number, "column label is string, not int8"),
])
@pytest.mark.parametrize("command", ["export-task", "predict"])
def test_a_build_that_is_not_as_built_is_refused(edit, needle, command, built, cli, tmp_path):
    """A build read back (from anyone) whose table lacks a column, holds an id twice or a column of another type:
    one line, exit 2, nothing written (before: a KeyError traceback, or a task and predictions made on it). The
    columns are those the builder declares (Builder.table_features), which `build` and `verify` check too."""
    data = _tampered(built, tmp_path, edit)
    images = write_row_images("cosim-q", built("cosim-q"), tmp_path / "i")
    args = ("--harness", "inspect", "--images", images) if command == "export-task" else ("--model",
                                                                                           "baseline:random")
    code, _, err = cli(command, "cosim-q", "--data", data, "--out", tmp_path / "out", *args)
    assert_one_error_line(code, err, ["default/val", needle])
    assert not (tmp_path / "out").exists()


def test_a_manifest_that_is_not_a_record_and_a_bomb_image_are_refused(built, cli, tmp_path):
    """export-task binds the build's manifest.json: one that is not a JSON object is one line; an image that decodes
    to billions of pixels (a 40000 x 40000 PNG of a few hundred bytes) is one line naming it, not Pillow's
    traceback. Nothing is written."""
    import shutil
    import struct
    import zlib

    data = tmp_path / "build"
    shutil.copytree(built("cosim-q"), data)
    (data / "manifest.json").write_text("[1, 2]")
    images = write_row_images("cosim-q", built("cosim-q"), tmp_path / "i")
    code, _, err = cli("export-task", "cosim-q", "--data", data, "--harness", "inspect", "--out", tmp_path / "o",
                       "--images", images)
    assert_one_error_line(code, err, ["manifest.json", "expected a JSON object"])

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    bomb = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 40000, 40000, 8, 0, 0, 0, 0)) + \
        chunk(b"IDAT", zlib.compress(b"\0" * 40001 * 4)) + chunk(b"IEND", b"")
    first = sorted(p for p in images.rglob("*") if p.is_file())[0]
    first.write_bytes(bomb)
    code, _, err = cli("export-task", "cosim-q", "--data", built("cosim-q"), "--harness", "inspect", "--out",
                       tmp_path / "o", "--images", images)
    assert_one_error_line(code, err, [first.name, "image too large to decode safely"])
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("flag", ["--chat-template-kwarg", "--engine-arg"])
def test_an_argument_nested_thousands_deep_is_one_line(flag, built, cli, tmp_path):
    """A KEY=VALUE argument read as JSON, nested 5,000 lists deep: one line naming it (before: Python's parser ran
    out of stack, a RecursionError traceback)."""
    model = "openai:m" if flag == "--chat-template-kwarg" else "vllm:m"
    code, _, err = cli("predict", "cosim-q", "--data", built("cosim-q"), "--model", model, "--out", tmp_path / "p",
                       flag, "x=" + "[" * 5000 + "]" * 5000, "--base-url", "http://127.0.0.1:9/v1")
    assert_one_error_line(code, err, [f"{flag} x: nested more than 32"])
