"""Every registered benchmark meets the contracts of the bases, end to end: build -> verify -> predict
(the registry's first demo model) -> evaluate -> the bad-input basics. Nothing here names a benchmark:
the list, the build parameters, the models, the submission fields and the headline metrics come from
the registry and the bases. A throwaway benchmark defined in this file (a tiny builder, task, sample
writer and card) is registered at run time and passes the same checks, so adding a benchmark needs no
edit to a shared file."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import msgspec
import numpy as np
import pyarrow as pa
import pytest
from helpers import assert_one_error_line, offline_flags

from builders.base import Builder
from builders.registry import Benchmark, Demo, benchmarks, get_benchmark, get_builder, register
from builders.result import BuildResult, RunStage, run_uncached
from builders.sources.jsonio import read_jsonl
from core.params import describe, param
from evaluator.base import Headline, Task
from evaluator.models.menu import Baseline
from evaluator.models.model import Model
from evaluator.submission import Coverage, is_finite_number
from evaluator.tasks import TaskEntry, get_task, get_task_entry, has_task, register_task


def tree_digest(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): (b"dir" if p.is_dir() else p.read_bytes()) for p in sorted(root.rglob("*"))}


def check_declarations(entry: Benchmark) -> Builder:
    """What a registry entry declares: its builder, sample writer and task load and subclass the bases,
    and agree with each other."""
    builder = get_builder(entry.name)
    assert isinstance(builder, Builder) and builder.name == entry.name
    assert builder.default_config in builder.configs and callable(entry.load(entry.samples))
    assert all(row["help"] for row in describe(builder.params_class)), "every build parameter says what it means"
    scoring = get_task_entry(entry.name)  # every benchmark has the evaluator's half of its entry
    if scoring.task is None:
        assert scoring.no_task_reason and not entry.demo.models
        return builder
    task = get_task(entry.name)
    assert isinstance(task, Task) and task.name == entry.name and task.config in builder.configs
    assert task.default_split in builder.splits and task.headline and entry.demo.models
    assert all(f"baseline:{b.name}" in task.models_help() for b in task.baselines)
    return builder


def check_benchmark(cli, entry: Benchmark, sources: Path, data: Path, tmp_path: Path) -> None:
    """The contract of one registered benchmark, whose sample sources are under SOURCES and which is
    built (with its offline parameters) in DATA."""
    from pipelines.build import source_folder

    builder = check_declarations(entry)
    manifest = json.loads((data / "manifest.json").read_text())
    assert manifest["benchmark"] == entry.name and (data / "README.md").read_text().startswith("---\n")
    code, stdout, err = cli("verify", data)
    assert code == 0 and "ok" in stdout, err

    # bad input, build side: a parameter the builder does not have; a raw file (the first it reads) of binary junk
    out = tmp_path / "bad-out"
    code, _, err = cli("build", entry.name, "--source", sources, "--out", out, "--param", "no_such_param=1")
    assert_one_error_line(code, err, ("--param", "no_such_param"))
    copy = tmp_path / "sources"
    shutil.copytree(sources, copy)
    params = builder.params_class()
    located = builder.locate_sources(source_folder(builder, copy, params), [], params)
    first = sorted(p for paths in located.values() for p in (paths if isinstance(paths, tuple) else (paths,)))[0]
    first.write_bytes(bytes(range(256)) * 4)  # no reader accepts these bytes
    before = tree_digest(copy)
    code, _, err = cli("build", entry.name, "--source", copy, "--out", out, *offline_flags(entry.name))
    assert_one_error_line(code, err, (first.name,))
    assert not out.exists() and tree_digest(copy) == before

    if not has_task(entry.name):
        return
    task = get_task(entry.name)

    predictions = tmp_path / "p.json"
    train = () if entry.demo.train_file is None else ("--train-file", sources / entry.demo.train_file)
    code, _, err = cli("predict", entry.name, "--data", data, "--model", entry.demo.models[0], "--out", predictions,
                       *train)
    assert code == 0, err
    from core.data import load_table, pick_split

    table = load_table(data, task.config, pick_split(data, task.config, None, task.default_split))
    entries = json.loads(predictions.read_text())
    id_fields = (task.id_field,) if isinstance(task.id_field, str) else task.id_field
    value_fields = (task.value_field,) if isinstance(task.value_field, str) else task.value_field
    ids = [e[id_fields[0]] if len(id_fields) == 1 else tuple(e[f] for f in id_fields) for e in entries]
    check = task.value_check[0] if isinstance(task.value_check, tuple) else task.value_check
    assert ids == task.ids(table) and all(check(e[value_fields[0]]) for e in entries)
    code, _, err = cli("evaluate", entry.name, "--data", data, "--predictions", predictions, "--report",
                       tmp_path / "report", "--bootstrap", "50")
    assert code == 0, err
    metrics = json.loads((tmp_path / "report" / "metrics.json").read_text())
    for headline in task.headline:
        value = metrics
        for part in headline.key.split("."):
            value = value[part]
        assert value is None or isinstance(value, (int, float)), headline

    # bad input, scoring side: a model the task does not have; a submission short of an entry; a value
    # of the wrong type
    code, _, err = cli("predict", entry.name, "--data", data, "--model", "baseline:no-such-model", "--out",
                       tmp_path / "q.json")
    assert_one_error_line(code, err, ("baseline:no-such-model", "predictions come from"))
    short = tmp_path / "short.json"
    short.write_text(json.dumps(entries[1:]))
    code, stdout, err = cli("evaluate", entry.name, "--data", data, "--predictions", short)
    assert_one_error_line(code, err, ("short.json",))
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps([{**entries[0], value_fields[0]: {"a": 1}}, *entries[1:]]))
    code, stdout, err = cli("evaluate", entry.name, "--data", data, "--predictions", wrong)
    assert_one_error_line(code, err, ("wrong.json",))


@pytest.mark.parametrize("bench", [b.name for b in benchmarks()])
def test_every_registered_benchmark_declares_its_contract(bench):
    check_declarations(get_benchmark(bench))


@pytest.mark.slow  # every benchmark end to end (the builds are the session's shared ones)
@pytest.mark.parametrize("bench", [b.name for b in benchmarks()])
def test_every_registered_benchmark_meets_the_contract(bench, cli, sample_sources, built, tmp_path):
    check_benchmark(cli, get_benchmark(bench), sample_sources, built(bench), tmp_path)


# ---------------------------------------------------------------------------------------------
# A throwaway benchmark, kept in this file: counts of things in one-line texts.

@dataclass(frozen=True)
class TinyParams:
    offset: int = param(0, "added to every count (a stand-in for a recipe's parameter)")


class TinyBuilder(Builder):
    name = "tiny-count"
    params_class = TinyParams
    configs = ("default",)
    default_config = "default"
    splits = ("test",)
    source_dir = "tiny"
    card_template = "tiny-count.md"
    description = "a throwaway benchmark of the registry contract test"
    sources_help = "tiny/items.jsonl"

    def card_template_text(self) -> str:
        return "---\npretty_name: Tiny count\nlicense: other\n---\n# Tiny count\n\n${statistics}\n\n${figures}\n"

    def locate_sources(self, source: Path, splits: list[str], params) -> dict:
        from builders.sources.files import expect_file

        return {"test": expect_file(source / "items.jsonl", "the tiny items file")}

    def build(self, sources: dict, params: TinyParams, run_stage: RunStage = run_uncached) -> BuildResult:
        def rows():
            records = [r for _, r in read_jsonl(sources["test"], TinyRecord, "the tiny items file")]
            return {"test": pa.table({"id": [r.id for r in records], "text": [r.text for r in records],
                                      "count": [r.count + params.offset for r in records]})}

        tables = run_stage("rows", {"offset": params.offset}, [sources["test"]], rows)
        return BuildResult(tables={"default": tables}, features=self.table_features("default"),
                           statistics={"rows": tables["test"].num_rows},
                           card_fields={"statistics": f"{tables['test'].num_rows} rows"})

    def table_features(self, config: str):
        from datasets import Features, Value

        return Features({"id": Value("string"), "text": Value("string"), "count": Value("int64")})

    def check_invariants(self, tables, params: dict) -> list[str]:
        ids = tables["default"]["test"].column("id").to_pylist()
        return [] if len(set(ids)) == len(ids) else ["test: duplicate ids"]


class TinyRecord(msgspec.Struct):
    id: str
    text: str
    count: int


class Zero(Model):
    input_columns = ()

    def predict(self, table: pa.Table) -> list:
        return [0.0] * table.num_rows


class TinyTask(Task):
    name = "tiny-count"
    config = "default"
    default_split = "test"
    id_field, value_field, id_type = "id", "count", str
    value_check, value_desc = staticmethod(is_finite_number), "finite numbers"
    metric_labels = {"correct": "Acc"}
    layout = "by-subset"
    headline = (Headline("accuracy", "accuracy"), Headline("MAE", "mae", higher_is_better=False))
    baselines = (Baseline("zero", lambda task, options, spec: Zero(), "counts nothing"),)

    def ids(self, table: pa.Table) -> list:
        return table.column("id").to_pylist()

    def predictions_file(self, table: pa.Table, predictions: list) -> list[dict]:
        return [{"id": i, "count": float(c)} for i, c in zip(self.ids(table), predictions)]

    def per_sample(self, table: pa.Table, predictions: list, options=None) -> dict:
        return {"correct": (np.asarray(predictions) == table.column("count").to_numpy()).astype(np.float64)}

    def score(self, table: pa.Table, predictions: dict, coverage: Coverage, options=None) -> dict:
        scored = [(predictions[i], c) for i, c in zip(self.ids(table), table.column("count").to_pylist())
                  if i in predictions]
        predicted, truth = np.array([p for p, _ in scored]), np.array([c for _, c in scored])
        return {"accuracy": round(100 * float((predicted == truth).mean()), 4),
                "mae": round(float(np.abs(predicted - truth).mean()), 4), "coverage": coverage.as_dict()}

    def report(self, metrics: dict, title: str):
        return f"# Tiny count: {title}\n\naccuracy {metrics['accuracy']}, MAE {metrics['mae']}\n", []


def write_tiny_samples(root: Path, scale: int = 1) -> list[Path]:
    """The throwaway benchmark's raw file: five counted texts."""
    path = root / "tiny" / "items.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"id": f"t{k}", "text": "x " * k, "count": k}) + "\n" for k in range(5)))
    return [path]


@pytest.fixture
def tiny_registered(monkeypatch):
    """The throwaway benchmark in the registry for one test (the built-in entries as they were after)."""
    import builders.registry as registry
    import evaluator.tasks as tasks

    monkeypatch.setattr(registry, "BENCHMARKS", registry.BENCHMARKS)
    monkeypatch.setattr(registry, "_BY_NAME", dict(registry._BY_NAME))
    monkeypatch.setattr(tasks, "TASKS", tasks.TASKS)
    monkeypatch.setattr(tasks, "_BY_NAME", dict(tasks._BY_NAME))
    entry = Benchmark("tiny-count", f"{__name__}:TinyBuilder", f"{__name__}:write_tiny_samples",
                      demo=Demo(models=("baseline:zero",)))
    register(entry)
    register_task(TaskEntry("tiny-count", f"{__name__}:TinyTask"))
    return entry


def test_a_benchmark_registered_from_outside_meets_the_same_contract(tiny_registered, cli, tmp_path):
    sources = tmp_path / "src"
    code, _, err = cli("sample-sources", "--out", sources)
    assert code == 0, err
    assert (sources / "tiny" / "items.jsonl").is_file()
    data = tmp_path / "data"
    code, _, err = cli("build", "tiny-count", "--source", sources, "--out", data)
    assert code == 0, err
    assert "tiny-count" in cli("list", "--names")[1].split()
    check_benchmark(cli, tiny_registered, sources, data, tmp_path / "checks")
    # the menu the task declared is what --help lists
    code, stdout, _ = cli("predict", "--help")
    assert "baseline:zero (counts nothing)" in " ".join(stdout.split())


def test_registering_a_name_twice_is_refused(tiny_registered):
    from core.errors import ParamsError

    with pytest.raises(ParamsError, match="registered already"):
        register(tiny_registered)
    with pytest.raises(ParamsError, match="has a task entry already"):
        register_task(TaskEntry("tiny-count", f"{__name__}:TinyTask"))


def test_a_second_counterbias_benchmark_is_refused(tiny_registered):
    """The suite's card holds one CounterBias row: the registry names the benchmark it measures once."""
    from core.errors import ParamsError
    from evaluator.tasks import counterbias_benchmarks, task_entries

    assert counterbias_benchmarks() == [t.benchmark for t in task_entries() if t.counterbias] == ["vl-bias"]
    with pytest.raises(ParamsError, match="CounterBias row measures one benchmark, vl-bias, already"):
        register_task(TaskEntry("tiny-bias", counterbias=True))
