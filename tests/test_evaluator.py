"""GQA-OOD scoring on a hand-made split whose every number is computed by hand in the comments."""

from __future__ import annotations

import json

import pytest
from helpers import group, write_gqa

# g1: a x6, b x2, c x1, d x1 (n = 10, d = 4): tail iff count * 4 < 1.2 * 10 -> b, c, d tail; a head.
# g2: x x3, y x1 (n = 4, d = 2): tail iff count * 2 < 4.8 -> y tail; x head.
# g3: p, q (ne ~ 1 > 0.95) is dropped.


@pytest.fixture(scope="module")
def split(tmp_path_factory):
    """A small GQA-OOD testdev build, shared by the module's tests (they read it and write elsewhere)."""
    from pipelines.build import run_build

    root = tmp_path_factory.mktemp("evaluator-split")
    records = {**group("1", "g1", {"a": 6, "b": 2, "c": 1, "d": 1}, global_group="color"),
               **group("2", "g2", {"x": 3, "y": 1}, global_group=None),
               **group("3", "g3", {"p": 1, "q": 1})}
    write_gqa(root / "src" / "testdev_balanced_questions.json", records)
    run_build("gqa-ood", root / "src", root / "data", assignments=["group_threshold=0.95"])
    return root / "data"


def _submit(tmp_path, entries):
    path = tmp_path / "predictions.json"
    path.write_text(json.dumps(entries))
    return path


def _answers():
    # g1 always "a" (its head answer), g2 always "y" (its tail answer).
    return [{"questionId": f"1{k:04d}", "prediction": "a"} for k in range(10)] + \
           [{"questionId": f"2{k:04d}", "prediction": "y"} for k in range(4)]


def test_hand_computed_metrics(split, tmp_path, cli):
    report = tmp_path / "report"
    code, stdout, err = cli("evaluate", "gqa-ood", "--data", split, "--predictions", _submit(tmp_path, _answers()),
                            "--report", report)
    assert code == 0, err
    metrics = json.loads((report / "metrics.json").read_text())
    assert metrics["acc_all"] == pytest.approx(50.0)           # 7 / 14
    assert metrics["acc_head"] == pytest.approx(66.6667, abs=1e-4)  # 6 / 9 (a correct, x wrong)
    assert metrics["acc_tail"] == pytest.approx(20.0)          # 1 / 5 (only y)
    assert metrics["delta_tail_head"] == pytest.approx(233.3333, abs=1e-3)
    by_alpha = {r["alpha"]: r for r in metrics["acc_tail_by_alpha"]}
    confusion = {r["alpha"]: r for r in metrics["head_tail_confusion_by_alpha"]}
    assert by_alpha[0.2]["questions"] == 5 and confusion[0.2]["confusion"] == pytest.approx(80.0)  # 4 / 5
    # alpha = -0.5: tail iff count * d < 0.5 n -> c and d of g1 only; both answered "a" (head).
    assert by_alpha[-0.5]["questions"] == 2 and by_alpha[-0.5]["acc_tail"] == 0.0
    assert confusion[-0.5]["confusion"] == pytest.approx(100.0)
    assert by_alpha[9.0]["questions"] == 14 and by_alpha[9.0]["acc_tail"] == pytest.approx(50.0)
    # Fig. 5a: rareness a 2.4 head, b 0.8 borderline, c/d 0.4 tail, x 1.5 head, y 0.5 tail.
    matrix = metrics["reasoning_labels"]
    assert matrix["head"]["head"]["C"] == pytest.approx(100 * 6 / 14, abs=1e-4)
    assert matrix["head"]["borderline"]["W"] == pytest.approx(100 * 2 / 14, abs=1e-4)
    assert matrix["head"]["tail"]["W"] == pytest.approx(100 * 2 / 14, abs=1e-4)
    assert matrix["tail"]["head"]["W"] == pytest.approx(100 * 3 / 14, abs=1e-4)
    assert matrix["tail"]["tail"]["C"] == pytest.approx(100 * 1 / 14, abs=1e-4)
    assert sum(v for row in matrix.values() for col in row.values() for v in col.values()) == pytest.approx(100)
    md = (report / "report.md").read_text()
    assert "| 50.00 | 20.00 | 66.67 | 233.33 |" in md
    assert (report / "acc_tail_by_alpha.png").read_bytes()[:4] == b"\x89PNG"
    assert (report / "head_tail_confusion.png").exists()


@pytest.mark.parametrize("mutate, needles", [
    (lambda e: e[:-3], ["3 of 14 'questionId' have no prediction", "'20001'", "--allow-partial"]),
    (lambda e: e + [{"questionId": "99", "prediction": "a"}, {"questionId": "98", "prediction": "a"}],
     ["2 unknown 'questionId'", "'98', '99'"]),
    (lambda e: e + [e[0], e[1]], ["2 duplicate 'questionId'", "'10000', '10001'"]),
    (lambda e: [{**x, "prediction": 1} if i < 2 else x for i, x in enumerate(e)],
     ["2 'prediction' values that are not strings", "'10000', '10001'"]),
    (lambda e: [{**x, "questionId": 10000} if i == 0 else x for i, x in enumerate(e)],
     ["1 'questionId' values that are not str"]),
    (lambda e: {"not": "a list"}, ["expected a JSON list"]),
])
def test_bad_submissions(split, tmp_path, cli, mutate, needles):
    code, _, err = cli("evaluate", "gqa-ood", "--data", split, "--predictions", _submit(tmp_path, mutate(_answers())))
    assert code == 2
    assert len(err.strip().splitlines()) == 1
    for needle in needles:
        assert needle in err, err


def test_allow_partial_reports_coverage(split, tmp_path, cli):
    entries = _answers()[:10]  # g1 only
    code, stdout, err = cli("evaluate", "gqa-ood", "--data", split, "--predictions", _submit(tmp_path, entries),
                            "--allow-partial", "--allow-extra")
    assert code == 0, err
    out = json.loads(stdout)
    assert out["coverage"] == {"scored": 10, "expected": 14, "missing": 4, "ignored_extra": 0, "fraction": 0.714286}
    assert out["acc_all"] == pytest.approx(60.0)  # 6 / 10


def test_allow_extra_ignores_questions_outside_the_split(split, tmp_path, cli):
    entries = _answers() + [{"questionId": "30000", "prediction": "p"}]  # g3 was dropped from GQA-OOD
    code, stdout, err = cli("evaluate", "gqa-ood", "--data", split, "--predictions", _submit(tmp_path, entries),
                            "--allow-extra")
    assert code == 0, err
    assert json.loads(stdout)["coverage"]["ignored_extra"] == 1


def test_question_prior_baseline(split, tmp_path, cli):
    # Training prior by global group: color -> red (3 vs 2); none -> tie yes/no -> "no" (alphabetical);
    # unseen groups -> the most frequent answer overall (red).
    train = {**group("7", "t1", {"red": 3, "blue": 2}, global_group="color"),
             **group("8", "t2", {"yes": 2, "no": 2}, global_group=None)}
    write_gqa(tmp_path / "train.json", train)
    out = tmp_path / "prior.json"
    code, _, err = cli("predict", "gqa-ood", "--data", split, "--model", "baseline:prior",
                       "--train-file", tmp_path / "train.json", "--out", out)
    assert code == 0, err
    preds = {e["questionId"]: e["prediction"] for e in json.loads(out.read_text())}
    assert {preds[f"1{k:04d}"] for k in range(10)} == {"red"}
    assert {preds[f"2{k:04d}"] for k in range(4)} == {"no"}


def test_prior_needs_a_training_file(split, tmp_path, cli):
    code, _, err = cli("predict", "gqa-ood", "--data", split, "--model", "baseline:prior", "--out", tmp_path / "p.json")
    assert code == 2 and "--train-file" in err


def test_random_baseline_is_seeded_and_guesses_within_the_group(split, tmp_path, cli):
    outs = []
    for name in ("r1", "r2"):
        out = tmp_path / f"{name}.json"
        code = cli("predict", "gqa-ood", "--data", split, "--model", "baseline:random", "--seed", 3, "--out", out)[0]
        assert code == 0
        outs.append(out.read_bytes())
    assert outs[0] == outs[1]
    preds = {e["questionId"]: e["prediction"] for e in json.loads(outs[0])}
    assert {preds[f"1{k:04d}"] for k in range(10)} <= {"a", "b", "c", "d"}
    assert {preds[f"2{k:04d}"] for k in range(4)} <= {"x", "y"}


def test_py_model_spec(split, tmp_path, cli, monkeypatch):
    (tmp_path / "mymodel.py").write_text(
        "class Echo:\n    def predict(self, table):\n        return table.column('answer').to_pylist()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "p.json"
    assert cli("predict", "gqa-ood", "--data", split, "--model", "py:mymodel:Echo", "--out", out)[0] == 0
    code, stdout, _ = cli("evaluate", "gqa-ood", "--data", split, "--predictions", out)
    assert code == 0 and json.loads(stdout)["acc_all"] == 100.0


def test_unknown_model_spec(split, tmp_path, cli):
    code, _, err = cli("predict", "gqa-ood", "--data", split, "--model", "nonsense", "--out", tmp_path / "p.json")
    assert code == 2 and "baseline:<name>" in err


def test_py_model_in_the_current_folder_is_found(split, tmp_path, cli, monkeypatch):
    """As `python -m` would: a module beside the user, no PYTHONPATH needed (and sys.path is restored)."""
    import sys

    (tmp_path / "localmodel.py").write_text(
        "class Echo:\n    def predict(self, table):\n        return table.column('answer').to_pylist()\n")
    monkeypatch.chdir(tmp_path)
    before = list(sys.path)
    code, _, err = cli("predict", "gqa-ood", "--data", split, "--model", "py:localmodel:Echo", "--out", "p.json")
    assert code == 0, err
    assert sys.path == before and (tmp_path / "p.json").is_file()


@pytest.mark.slow
def test_sample_sources_prints_a_summary(tmp_path, cli):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real", target_is_directory=True)  # a folder the user linked
    code, stdout, err = cli("sample-sources", "--out", tmp_path / "link" / "s")
    lines = stdout.strip().splitlines()
    assert code == 0, err
    # one line per source folder, with the number of files written under it, then the total
    root = tmp_path / "real" / "s"
    folders = sorted(p.name for p in root.iterdir())
    assert lines[-1].startswith("wrote ") and len(lines) == len(folders) + 1
    for line, folder in zip(lines, folders):
        count = sum(1 for p in (root / folder).rglob("*") if p.is_file())
        assert line == f"{tmp_path / 'link' / 's' / folder}/: {count:,} file{'s' if count != 1 else ''}"
    assert (root / "gqa" / "val_balanced_questions.json").is_file() and (root / "gqa" / "images").is_dir()


def test_has_majority_reads_the_tasks_declaration():
    """Gat et al.'s majority vote (Eq. 4) exists where a task defines `majority`; a task that declares
    `majority = None` (the paired benchmarks: built from a validation split, no training split) has none."""
    from evaluator.tasks import get_task

    assert get_task("gqa-ood").has_majority and get_task("disco").has_majority
    assert not any(get_task(b).has_majority for b in ("vcr-visor", "cosim-q", "cosim-c", "pmr-p"))


def test_by_reads_a_column_any_command_added(built, tmp_path):
    """`--by COLUMN` (evaluator/splits.py:with_column) joins a column from whichever config of the folder holds it:
    a config a new command adds (written by evaluator/versions.py as `shortcuts` and `stress-test` write theirs) is
    found without being named anywhere; an unknown column's error lists what the folder's other configs add."""
    import pyarrow as pa

    from core.data import load_table
    from core.errors import ParamsError
    from evaluator.splits import with_column
    from evaluator.tasks import get_task
    from evaluator.versions import Config, write_version

    task, folder = get_task("gqa-ood"), built("gqa-ood")
    table = load_table(folder, task.config, "testdev")
    ids = task.ids(table)
    flags = [i % 3 == 0 for i in range(len(ids))]
    added = pa.table({task.id_field: ids, "made_up_flag": flags})
    out = tmp_path / "version"
    write_version(folder, out, [Config("made_up", "testdev", added.take(list(range(len(ids)))[::-1]))],
                  replaces=("made_up",), record_key="made_up", record={}, title="Made up", section="## Made up\n")
    joined = with_column(task, out, "testdev", table, "made_up_flag")
    assert joined.column("made_up_flag").to_pylist() == flags  # by id, whatever the added config's row order
    with pytest.raises(ParamsError, match=r"--by nothing: no such column \(table columns, or added: made_up_flag\)"):
        with_column(task, out, "testdev", table, "nothing")
    # the build itself: its head and tail configs hold testdev, with no column the task's table lacks
    with pytest.raises(ParamsError, match=r"--by made_up_flag: no such column \(table columns, or added: none\)"):
        with_column(task, folder, "testdev", table, "made_up_flag")
