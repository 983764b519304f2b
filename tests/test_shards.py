"""A run split into shards (`predict --shard I/N`, evaluator/shards.py) and merged again (`vlbench merge`): the
merged prediction file, record, samples and rotations are byte for byte the ones one process writes (the golden is
that process's own output, made in the same test), for every benchmark's baselines, `py:` models, tiny `hf:` VLMs in
every scoring mode, and served models, with N = 1, 2, 3 and 7; the merge refuses what is not one run's shards in
one line naming the file."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import assert_one_error_line, sharded_suite_args
from served_helpers import LoopbackServer

from builders.registry import get_benchmark
from evaluator.tasks import get_task, task_names

COUNTS = (1, 2, 3, 7)
ROOT = Path(__file__).resolve().parents[1]


def _files(out: Path) -> dict[str, bytes]:
    """The files one run writes for OUT, by suffix."""
    found = {}
    for suffix in (".json", ".meta.json", ".samples.jsonl", ".rotations.json"):
        path = out.with_name(out.name.removesuffix(".json") + suffix)
        if path.is_file():
            found[suffix] = path.read_bytes()
    return found


def sharded_equals_whole(cli, tmp_path: Path, args: list, counts=COUNTS) -> dict[str, bytes]:
    """Run `predict ARGS` once whole and, for each N, as N shards merged; every merge must write the whole run's
    bytes. Returns the whole run's files."""
    whole = tmp_path / "whole" / "preds.json"
    code, _, err = cli("predict", *args, "--out", whole)
    assert code == 0, err
    golden = _files(whole)
    assert golden[".json"] and golden[".meta.json"]
    for n in counts:
        out = tmp_path / f"n{n}" / "preds.json"
        for i in range(n):
            code, stdout, err = cli("predict", *args, "--out", out, "--shard", f"{i}/{n}")
            assert code == 0, err
            assert f"preds.shard-{i}-of-{n}.json" in stdout
        shards = sorted(out.parent.glob("preds.shard-*.json"))
        shards = [s for s in shards if s.name.count(".") == 2]  # the prediction files, not .meta/.shard
        assert len(shards) == n
        merged = tmp_path / f"n{n}" / "merged" / "preds.json"
        code, stdout, err = cli("merge", *shards, "--out", merged)
        assert code == 0, err
        assert f"merged {n} shards" in stdout
        assert _files(merged) == golden, f"N = {n}"
    return golden


def _baselines() -> list[tuple[str, str]]:
    """(benchmark, model) for every benchmark's demo models (the baselines, with the demo's train file)."""
    return [(bench, model) for bench in task_names() for model in get_benchmark(bench).demo.models]


@pytest.mark.parametrize("bench,model", _baselines())
def test_baseline_shards_merge_into_one_process_s_bytes(bench, model, cli, built, sample_sources, tmp_path):
    train = get_benchmark(bench).demo.train_file
    sharded_equals_whole(cli, tmp_path, [bench, "--data", built(bench), "--model", model, "--seed", 3,
                                         *(("--train-file", sample_sources / train) if train else ())])


def test_the_shard_rule_is_content_defined_and_keeps_clusters_whole(built):
    """Every row in exactly one shard; the rule depends on the row's cluster alone (a shuffled table puts each row
    in the same shard), and one image's rows share a shard."""
    import hashlib

    import pyarrow as pa

    from core.data import load_table
    from evaluator.shards import row_shards

    task = get_task("gqa-ood")
    table = load_table(built("gqa-ood"), task.config, task.default_split)
    shards = row_shards(task, table, 7)
    assert shards.min() >= 0 and shards.max() < 7 and len(shards) == table.num_rows
    images = table.column("imageId").to_pylist()
    for image in set(images):
        assert len({int(s) for s, i in zip(shards, images) if i == image}) == 1
    order = np.random.default_rng(0).permutation(table.num_rows)
    shuffled = row_shards(task, table.take(pa.array(order)), 7)
    assert shuffled.tolist() == shards[order].tolist()
    # the rule itself, computed here from its statement: the image's smallest question id, hashed
    first = min(json.dumps(i) for i, image in zip(task.ids(table), images) if image == images[0])
    assert shards[0] == int.from_bytes(hashlib.sha256(f"vlbench-shard:{first}".encode()).digest()[:8], "big") % 7


@pytest.mark.parametrize("env,expected", [
    ({"SLURM_ARRAY_TASK_ID": "3", "SLURM_ARRAY_TASK_MIN": "0", "SLURM_ARRAY_TASK_COUNT": "8"}, (3, 8)),
    ({"SLURM_ARRAY_TASK_ID": "5", "SLURM_ARRAY_TASK_MIN": "1", "SLURM_ARRAY_TASK_COUNT": "7"}, (4, 7)),
])
def test_shard_slurm_reads_the_array_task(env, expected):
    from evaluator.shards import parse_shard

    shard = parse_shard("slurm", env)
    assert (shard.index, shard.count) == expected


@pytest.mark.parametrize("text,env,needle", [
    ("3/3", {}, "0 <= I < N"),
    ("a/b", {}, "expected I/N"),
    ("slurm", {}, "SLURM_ARRAY_TASK_ID is not set"),
    ("slurm", {"SLURM_ARRAY_TASK_ID": "9", "SLURM_ARRAY_TASK_MIN": "0", "SLURM_ARRAY_TASK_COUNT": "4"}, "not within"),
    ("slurm", {"SLURM_ARRAY_TASK_ID": "x", "SLURM_ARRAY_TASK_MIN": "0", "SLURM_ARRAY_TASK_COUNT": "4"}, "integers"),
    # a 40-digit count was an OverflowError traceback (the shard rule's int64 array)
    ("slurm", {"SLURM_ARRAY_TASK_ID": "0", "SLURM_ARRAY_TASK_MIN": "0", "SLURM_ARRAY_TASK_COUNT": "1" * 40},
     "is not a shard count (1 to 999,999)"),
])
def test_a_bad_shard_is_one_line(text, env, needle, cli, built, tmp_path, monkeypatch):
    for name in ("SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_MIN", "SLURM_ARRAY_TASK_COUNT"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    code, _, err = cli("predict", "gqa-ood", "--data", built("gqa-ood"), "--model", "baseline:random", "--out",
                       tmp_path / "p.json", "--shard", text)
    assert_one_error_line(code, err, [needle])
    assert not any(tmp_path.iterdir())


def test_a_slurm_array_run_as_the_docs_give_it(cli, built, tmp_path, monkeypatch):
    """The array's tasks, each with the variables Slurm sets (here by hand), then the merge step: one process's
    bytes."""
    data = built("gqa-ood")
    args = ["gqa-ood", "--data", data, "--model", "baseline:random"]
    code, _, err = cli("predict", *args, "--out", tmp_path / "whole.json")
    assert code == 0, err
    for task in range(1, 4):  # sbatch --array=1-3
        monkeypatch.setenv("SLURM_ARRAY_TASK_ID", str(task))
        monkeypatch.setenv("SLURM_ARRAY_TASK_MIN", "1")
        monkeypatch.setenv("SLURM_ARRAY_TASK_COUNT", "3")
        code, _, err = cli("predict", *args, "--out", tmp_path / "run" / "whole.json", "--shard", "slurm")
        assert code == 0, err
    code, _, err = cli("merge", *sorted((tmp_path / "run").glob("whole.shard-?-of-3.json")), "--out",
                       tmp_path / "merged" / "whole.json")
    assert code == 0, err
    assert _files(tmp_path / "merged" / "whole.json") == _files(tmp_path / "whole.json")


@pytest.fixture
def three_shards(cli, built, tmp_path):
    """A GQA-OOD random baseline's run in 3 shards: (data, [shard files], args)."""
    data = built("gqa-ood")
    args = ["gqa-ood", "--data", data, "--model", "baseline:random"]
    out = tmp_path / "run" / "p.json"
    for i in range(3):
        code, _, err = cli("predict", *args, "--out", out, "--shard", f"{i}/3")
        assert code == 0, err
    return data, [tmp_path / "run" / f"p.shard-{i}-of-3.json" for i in range(3)], args


def test_merge_refuses_what_is_not_one_run_s_shards(cli, built, sample_sources, three_shards, tmp_path):
    data, shards, args = three_shards
    merged = tmp_path / "m" / "p.json"

    def refused(files, needles, *extra):
        code, _, err = cli("merge", *files, "--out", merged, *extra)
        assert_one_error_line(code, err, needles)
        assert not merged.parent.exists()

    refused(shards[:2], ["shard 2 of 3 is missing", "--shard 2/3"])
    # a whole run's file is no shard
    code, _, err = cli("predict", *args, "--out", tmp_path / "plain.json")
    assert code == 0, err
    refused([*shards, tmp_path / "plain.json"], ["plain.json", "not a shard"])
    # another seed, another model, another split into shards: each named with its file and field
    for extra, name, needles in ((("--seed", "1"), "seed", ["another run", "options.seed"]),
                                 (("--model", "baseline:prior", "--train-file",
                                   sample_sources / "gqa" / "train_balanced_questions.json"),
                                  "model", ["another run", "model"])):
        other = tmp_path / name / "p.json"
        command = [*args, *extra] if name == "seed" else [args[0], "--data", data, *extra]
        code, _, err = cli("predict", *command, "--out", other, "--shard", "1/3")
        assert code == 0, err
        refused([shards[0], other.with_name("p.shard-1-of-3.json"), shards[2]], [str(other.parent), *needles])
    code, _, err = cli("predict", *args, "--out", tmp_path / "four" / "p.json", "--shard", "1/4")
    assert code == 0, err
    refused([shards[0], tmp_path / "four" / "p.shard-1-of-4.json"], ["another split into shards", "shard.count"])
    # one index twice: the same bytes are one shard; other bytes are refused
    copy = tmp_path / "copy"
    copy.mkdir()
    for suffix in (".json", ".meta.json", ".shard.json"):
        name = f"p.shard-1-of-3{suffix}"
        (copy / name).write_bytes((shards[1].parent / name).read_bytes())
    code, _, err = cli("merge", *shards, copy / "p.shard-1-of-3.json", "--out", tmp_path / "ok" / "p.json")
    assert code == 0, err
    state = json.loads((copy / "p.shard-1-of-3.shard.json").read_text())
    state["predictions"][0] = "a tampered answer"
    (copy / "p.shard-1-of-3.shard.json").write_text(json.dumps(state))
    refused([*shards, copy / "p.shard-1-of-3.json"], ["copy/p.shard-1-of-3.json", "other bytes"])
    # a shard whose state lost a row
    state["predictions"].pop()
    (copy / "p.shard-1-of-3.shard.json").write_text(json.dumps(state))
    refused([shards[0], copy / "p.shard-1-of-3.json", shards[2]], ["copy/p.shard-1-of-3.json", "rows where shard 1"])
    # a state file that is not one
    (copy / "p.shard-1-of-3.shard.json").write_text("[1, 2")
    refused([shards[0], copy / "p.shard-1-of-3.json", shards[2]], ["p.shard-1-of-3.shard.json", "not a shard state"])


def test_shards_whose_threads_were_chosen_otherwise_merge_and_the_record_says_each(cli, three_shards, tmp_path):
    """Who chose a shard's threads (core/threads.py) is no reason to refuse it (nodes differ); where the shards
    differ, the merged record names each shard's, in their order, instead of the first one's. Where they agree
    (every other merge test), the merged record is one process's, byte for byte."""
    _, shards, _ = three_shards
    meta = shards[2].with_name("p.shard-2-of-3.meta.json")
    record = json.loads(meta.read_text())
    ours = record["threads"]
    meta.write_text(json.dumps({**record, "threads": "the user: OMP_NUM_THREADS=4"}))
    merged = tmp_path / "m" / "p.json"
    code, _, err = cli("merge", *shards, "--out", merged)
    assert code == 0, err
    threads = json.loads(merged.with_name("p.meta.json").read_text())["threads"]
    assert threads == {"shards": [ours, ours, "the user: OMP_NUM_THREADS=4"]}


def test_merge_refuses_shards_of_another_build(cli, built, three_shards, tmp_path):
    """The shards ran on one build; the merge is pointed at a copy of it whose split has one row less."""
    import shutil

    import pyarrow.parquet as pq

    data, shards, _ = three_shards
    other = tmp_path / "other"
    shutil.copytree(data, other)
    task = get_task("gqa-ood")
    table_file = next((other / task.config).glob(f"{task.default_split}-*.parquet"))
    table = pq.read_table(table_file)
    pq.write_table(table.slice(1), table_file)
    code, _, err = cli("merge", *shards, "--out", tmp_path / "m" / "p.json", "--data", other)
    assert_one_error_line(code, err, ["p.shard-0-of-3.json", "another build"])


def test_a_killed_shard_is_rerun_alone_and_the_merge_is_unchanged(cli, built, three_shards, tmp_path):
    """Shard 1 killed (SIGKILL) while it predicts leaves none of its files; run again, the merge equals the whole
    run."""
    data, shards, args = three_shards
    for suffix in (".json", ".meta.json", ".shard.json"):
        shards[1].with_name(f"p.shard-1-of-3{suffix}").unlink()
    factory = tmp_path / "killer.py"
    factory.write_text("import os, signal\n\nclass Killed:\n    def predict(self, table):\n"
                       "        os.kill(os.getpid(), signal.SIGKILL)\n\ndef make():\n    return Killed()\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    done = subprocess.run([sys.executable, "-m", "pipelines.cli", "predict", "gqa-ood", "--data", str(data),
                           "--model", "py:killer:make", "--out", str(shards[1].with_name("p.json")),
                           "--shard", "1/3"], env=env, capture_output=True, timeout=300)
    assert done.returncode == -signal.SIGKILL
    assert sorted(p.name for p in shards[1].parent.iterdir() if "shard-1" in p.name) == []
    code, _, err = cli("predict", *args, "--out", shards[1].with_name("p.json"), "--shard", "1/3")
    assert code == 0, err
    code, _, err = cli("merge", *shards, "--out", tmp_path / "m" / "p.json")
    assert code == 0, err
    code, _, err = cli("predict", *args, "--out", tmp_path / "whole" / "p.json")
    assert code == 0, err
    assert _files(tmp_path / "m" / "p.json") == _files(tmp_path / "whole" / "p.json")


# -- models that run: py:, hf: in every scoring mode, openai: with a judge ----------------------------------------

@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from pipelines.tiny_models import write_tiny_llava, write_tiny_llava_answering

    root = tmp_path_factory.mktemp("shard-models")
    return {"llava": write_tiny_llava(root / "llava"), "says-q": write_tiny_llava_answering(root / "says-q", "Q"),
            "says-b": write_tiny_llava_answering(root / "says-b", "B")}


def test_a_py_model_s_shards_merge_into_one_process_s_bytes(cli, built, tmp_path, monkeypatch):
    """A user's model whose answer reads the split as a whole (`fit_split`: the most common first word of the
    split's questions, given to every question that starts with it) and each row alone."""
    (tmp_path / "first_words.py").write_text(
        "from collections import Counter\n\nclass FirstWords:\n    common = None\n"
        "    def fit_split(self, table):\n"
        "        words = Counter(q.split()[0] for q in table.column('question').to_pylist())\n"
        "        self.common = words.most_common(1)[0][0]\n"
        "    def predict(self, table):\n"
        "        return [self.common if q.split()[0] == self.common else q.split()[-1]\n"
        "                for q in table.column('question').to_pylist()]\n\n"
        "def make():\n    return FirstWords()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    sharded_equals_whole(cli, tmp_path / "runs", ["gqa-ood", "--data", built("gqa-ood"), "--model",
                                                  "py:first_words:make"])


def _cosim_args(cosim, model: str) -> list:
    folder, images, _ = cosim
    return ["cosim-q", "--data", folder, "--images", images, "--model", model]


@pytest.mark.parametrize("mode", ["generate", "loglik", "two-prompts", "letter", "circular", "judge"])
def test_hf_shards_merge_into_one_process_s_bytes(mode, tiny, cli, built, cosim, tmp_path):
    """A tiny LLaVA in-process in each scoring mode: generation (GQA-OOD, its samples logged), log-likelihood and
    letter choice (COSIM-Q, samples logged), VCR's two prompts per row (Q->A, then QA->R), CircularEval (the
    rotations file) and a judge (a tiny LLaVA that always says B reads the answers of one that always says Q, which
    no rule reads)."""
    from helpers import write_row_images

    if mode == "generate":
        data = built("gqa-ood")
        args = ["gqa-ood", "--data", data, "--images", write_row_images("gqa-ood", data, tmp_path / "img"),
                "--model", f"hf:{tiny['llava']}", "--max-new-tokens", 3, "--log-samples"]
    elif mode == "two-prompts":
        data = built("vcr")
        args = ["vcr", "--data", data, "--images", write_row_images("vcr", data, tmp_path / "img"),
                "--model", f"hf:{tiny['llava']}", "--choice-mode", "loglik", "--log-samples"]
    elif mode == "judge":
        args = [*_cosim_args(cosim, f"hf:{tiny['says-q']}"), "--choice-mode", "letter", "--judge",
                f"hf:{tiny['says-b']}", "--max-new-tokens", 2, "--log-samples"]
    else:
        args = [*_cosim_args(cosim, f"hf:{tiny['llava']}"), *{
            "loglik": ["--choice-mode", "loglik"], "letter": ["--choice-mode", "letter", "--max-new-tokens", 2],
            "circular": ["--circular", "--max-new-tokens", 2]}[mode], "--log-samples", "--batch-size", 4]
    golden = sharded_equals_whole(cli, tmp_path, args)
    record = json.loads(golden[".meta.json"])
    if mode == "circular":
        assert ".rotations.json" in golden and record["asked"]["circular"]["asks"] > record["rows"]
    if mode == "judge":
        judge = record["asked"]["judge"]
        assert judge["asked"] == judge["decided"] == record["rows"], judge


def _chat(content: str) -> bytes:
    return json.dumps({"id": "x", "object": "chat.completion", "model": "m", "choices": [
        {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}]}).encode()


class HalfWordy(LoopbackServer):
    """A served model that answers some prompts by letter and others in words no rule reads (by the prompt's hash),
    or a judge (`judge`) that reads "the second one" as B and anything else as Z."""

    def __init__(self, judge: bool = False):
        super().__init__()
        self.judge = judge

    def answer(self, path, body, headers):
        import hashlib

        text = json.loads(body)["messages"][-1]["content"][-1]["text"]
        if self.judge:
            return 200, _chat("B" if "the second one" in text else "Z"), {}
        digest = hashlib.sha256(text.encode()).digest()
        return 200, _chat("ABCD"[digest[0] % 2] if digest[1] % 3 else "I pick the second one"), {}


@pytest.mark.allow_hosts(["127.0.0.1"])
@pytest.mark.parametrize("circular", [False, True])
def test_served_shards_merge_into_one_process_s_bytes(circular, cli, cosim, tmp_path, socket_enabled):
    """`openai:` models on a loopback server, by letter with a served judge (and CircularEval): the record's request
    counts and the judge's counts and agreement sample are the whole run's."""
    with HalfWordy() as model, HalfWordy(judge=True) as judge:
        golden = sharded_equals_whole(cli, tmp_path, [*_cosim_args(cosim, "openai:m"), "--base-url", model.url,
                                                      "--judge", "openai:j", "--judge-base-url", judge.url,
                                                      "--no-cache", "--log-samples",
                                                      *(("--circular",) if circular else ())])
    record = json.loads(golden[".meta.json"])
    assert record["requests"] > 0 and record["asked"]["judge"]["asked"] > 0


LOOKS = ("class Looks:\n"
         "    def predict(self, table):\n"
         "        if 'imageId' not in table.column_names:\n"
         "            return ['no'] * table.num_rows\n"
         "        return ['yes' if int(i[-1]) % 2 else 'no' for i in table.column('imageId').to_pylist()]\n\n"
         "def make():\n    return Looks()\n")  # a py: model whose answer is its row's image (id), 'no' without one


def test_a_blind_suite_in_shards_merges_the_blind_runs_too(cli, built, tmp_path, monkeypatch):
    """`suite --blind --shard I/2` predicts each shard of the blind run too (a py: model run blind is given the rows
    without their image columns); the run without --shard merges both runs' shards into one suite process's
    bytes and card."""
    (tmp_path / "looks.py").write_text(LOOKS)
    monkeypatch.syspath_prepend(str(tmp_path))
    data = tmp_path / "builds"
    data.mkdir()
    (data / "gqa-ood").symlink_to(built("gqa-ood"), target_is_directory=True)
    args = ["--model", "py:looks:make", "--data", data, "--bootstrap", 50, "--benchmarks", "gqa-ood",
            "--no-perceptual", "--blind"]
    code, _, err = cli("suite", *args, "--out", tmp_path / "whole")
    assert code == 0, err
    out = tmp_path / "sharded"
    for i in range(2):
        code, stdout, err = cli("suite", *args, "--out", out, "--shard", f"{i}/2")
        assert code == 0, err
        assert f"gqa-ood.blind shard {i} of 2:" in stdout
    code, stdout, err = cli("suite", *args, "--out", out)
    assert code == 0, err
    assert "gqa-ood    merged 2 shards" in stdout and "gqa-ood.blind merged 2 shards" in stdout
    for name in ("gqa-ood.json", "gqa-ood.meta.json", "gqa-ood.blind.json", "gqa-ood.blind.meta.json"):
        assert (out / "predictions" / name).read_bytes() == (tmp_path / "whole" / "predictions" / name).read_bytes()
    answers = {name: {p["prediction"] for p in json.loads((out / "predictions" / f"{name}.json").read_text())}
               for name in ("gqa-ood", "gqa-ood.blind")}
    assert answers == {"gqa-ood": {"yes", "no"}, "gqa-ood.blind": {"no"}}  # blind, the model saw no image id
    whole, sharded = (json.loads((o / "card.json").read_text())["benchmarks"]["gqa-ood"] for o in
                      (tmp_path / "whole", out))
    assert sharded["multimodal_gain"] == whole["multimodal_gain"] and "metrics" in whole["multimodal_gain"]


def test_a_suite_in_shards_resumes_shard_by_shard_and_merges_into_one_process_s_card(cli, built, tmp_path):
    """`suite --shard I/3` predicts each benchmark's shard (a rerun keeps what is done); the run without --shard
    merges them and scores: the predictions and records are one suite process's bytes, and so is the card's every
    benchmark row but whether its predictions were kept."""
    args = sharded_suite_args(built, tmp_path)
    code, _, err = cli("suite", *args, "--out", tmp_path / "whole")
    assert code == 0, err
    out = tmp_path / "sharded"
    for i in range(3):
        code, stdout, err = cli("suite", *args, "--out", out, "--shard", f"{i}/3")
        assert code == 0, err
        assert stdout.count(f"shard {i} of 3:") == 3 and not (out / "card.json").exists()
    code, stdout, err = cli("suite", *args, "--out", out, "--shard", "1/3")  # done already: kept
    assert code == 0 and stdout.count("shard 1 of 3 kept") == 3, err
    code, stdout, err = cli("suite", *args, "--out", out)
    assert code == 0, err
    assert stdout.count("merged 3 shards") == 3
    for bench in ("gqa-ood", "cosim-q", "visdial"):
        for suffix in (".json", ".meta.json"):
            name = f"{bench}{suffix}"
            assert (out / "predictions" / name).read_bytes() == (tmp_path / "whole" / "predictions" / name
                                                                  ).read_bytes()
    whole, sharded = (json.loads((o / "card.json").read_text())["benchmarks"] for o in (tmp_path / "whole", out))
    assert {b: {k: v for k, v in r.items() if k != "folder"} for b, r in sharded.items()} == \
        {b: {k: v for k, v in r.items() if k != "folder"} for b, r in whole.items()}


def test_merge_checks_what_binds_each_shard_and_never_writes_over_one(cli, three_shards, tmp_path):
    """Before: an edited, negative, string or bool row count was summed into the merged record (1800 rows for an
    800-row split); a state whose predictions were reordered or edited merged with exit 0 (predictions landing on
    other rows); `--out` naming an input shard replaced its files; a shard's missing samples file gave a merged run
    without samples."""
    import hashlib

    data, shards, _ = three_shards
    meta, state = (shards[1].with_name(f"p.shard-1-of-3{s}") for s in (".meta.json", ".shard.json"))
    kept = {p: p.read_bytes() for p in (meta, state, shards[1])}
    merged = tmp_path / "m" / "p.json"

    def refused(needles, out=merged):
        before = {p: p.read_bytes() for p in shards[0].parent.iterdir() if p.is_file()}
        code, _, err = cli("merge", *shards, "--out", out)
        assert_one_error_line(code, err, needles)
        assert not merged.parent.exists()
        assert {p: p.read_bytes() for p in shards[0].parent.iterdir() if p.is_file()} == before  # nothing written
        for path, data in kept.items():
            path.write_bytes(data)

    record, saved = json.loads(kept[meta]), json.loads(kept[state])
    for rows in (record["rows"] + 1000, -5, str(record["rows"]), True):
        meta.write_text(json.dumps({**record, "rows": rows}))
        refused(["p.shard-1-of-3.meta.json", "rows"])
    meta.write_text(json.dumps({**record, "asked": {**record.get("asked", {}), "unparsed_outputs": -3}}))
    refused(["p.shard-1-of-3.meta.json", "asked.unparsed_outputs", "not a count"])
    reordered = saved["predictions"][1:] + saved["predictions"][:1]
    edited = ["a tampered answer", *saved["predictions"][1:]]
    assert reordered != saved["predictions"]
    for predictions in (reordered, edited):
        state.write_text(json.dumps({**saved, "predictions": predictions}))
        refused(["p.shard-1-of-3.shard.json", "its predictions are not the ones p.shard-1-of-3.json holds"])
    state.write_text(json.dumps({**saved, "rows_sha256": hashlib.sha256(b"other rows").hexdigest()}))
    refused(["p.shard-1-of-3.shard.json", "its rows are not the ones the shard rule gives shard 1"])
    shards[1].write_bytes(kept[shards[1]].replace(b"[", b"[ ", 1))
    refused(["p.shard-1-of-3.json", "not the prediction file its state was written with"])
    state.write_text(json.dumps({**saved, "format": "vlbench-shard-1"}))  # a state of the version before
    refused(["p.shard-1-of-3.shard.json", "not a shard state file of this version"])
    # --out naming a shard's own file: refused, the shard untouched
    refused(["--out", "a file of a shard being merged"], out=shards[1])
    refused(["--out", "a file of a shard being merged"], out=shards[0].with_name("p.shard-0-of-3.shard.json"))
    # samples: each state names its samples' SHA-256 (written here for a baseline, which logs none, one line a row)
    for shard in shards:
        where = shard.with_name(shard.name.replace(".json", ".shard.json"))
        content = json.loads(where.read_text())
        lines = b"".join(b'{"row": %d}\n' % k for k in range(content["rows"]))
        shard.with_name(shard.name.replace(".json", ".samples.jsonl")).write_bytes(lines)
        where.write_text(json.dumps({**content, "samples_sha256": hashlib.sha256(lines).hexdigest()}))
    kept[state] = state.read_bytes()
    samples = shards[1].with_name("p.shard-1-of-3.samples.jsonl")
    samples.unlink()
    refused(["p.shard-1-of-3.samples.jsonl", "no such file", "--log-samples"])
    samples.write_bytes(b'{"row": 0}\n')
    refused(["p.shard-1-of-3.samples.jsonl", "not the samples file"])
    os.mkfifo(samples.with_name("fifo"))
    samples.unlink()
    samples.with_name("fifo").rename(samples)
    refused(["p.shard-1-of-3.samples.jsonl", "is a FIFO"])


def test_an_empty_shard_merges(tiny, cli, cosim, tmp_path):
    """More shards than the split has clusters: a shard with no row writes no sample line (it wrote one, an empty
    line, and merge refused its own shards: "holds 1 samples where its shard has 0 rows")."""
    from evaluator.shards import row_shards

    _, _, table = cosim
    task = get_task("cosim-q")
    count = next(n for n in range(2, 64) if len(set(row_shards(task, table, n).tolist())) < n)
    args = [*_cosim_args(cosim, f"hf:{tiny['llava']}"), "--choice-mode", "letter", "--max-new-tokens", 1,
            "--log-samples"]
    golden = sharded_equals_whole(cli, tmp_path, args, counts=(count,))
    empty = next(i for i in range(count) if i not in set(row_shards(task, table, count).tolist()))
    assert (tmp_path / f"n{count}" / f"preds.shard-{empty}-of-{count}.samples.jsonl").read_bytes() == b""
    assert golden[".samples.jsonl"]
