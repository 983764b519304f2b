"""CLI surface: lazy imports, list, demo on the embedded samples."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def test_help_imports_no_heavy_module():
    code = ("import sys; from pipelines.cli import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "heavy = [m for m in ('datasets', 'pyarrow', 'matplotlib', 'torch', 'numpy') if m in sys.modules]\n"
            "print('HEAVY', heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "HEAVY []" in out
    for command in ("list", "sample-sources", "build", "verify", "push", "predict", "evaluate", "perceptual",
                    "counterbias", "demo"):
        assert command in out


def test_the_console_command_leaves_its_objects_to_the_os_a_caller_keeps_its_collector(sample_sources, tmp_path):
    # `vlbench build` as a process of its own skips the cyclic collections a build does not need (and
    # the interpreter's final ones); main(argv) called by a program changes nothing in its process.
    args = ["build", "gqa-ood", "--source", str(sample_sources), "--split", "val", "--no-cache", "--out"]
    code = (f"import gc, sys\nfrom pipelines.cli import main\nmain({args + [str(tmp_path / 'a')]!r})\n"
            "print('CALLER', gc.isenabled(), gc.get_freeze_count())\n"
            f"sys.argv = {['vlbench'] + args + [str(tmp_path / 'b')]!r}\nmain()\n"
            "print('CONSOLE', gc.isenabled(), gc.get_freeze_count() > 0)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "CALLER True 0" in out and "CONSOLE False True" in out, out
    assert (tmp_path / "a" / "manifest.json").is_file() and (tmp_path / "b" / "manifest.json").is_file()


def test_list(cli, sample_sources, tmp_path):
    code, stdout, _ = cli("list")
    assert code == 0 and "gqa-ood:" in stdout and "configs: all, head, tail" in stdout
    from builders.registry import benchmarks

    # every registered benchmark has sample sources, listed by name
    listed = cli("list", "--sources-present", sample_sources, "--names")[1].split()
    assert listed == sorted(b.name for b in benchmarks())
    assert cli("list", "--sources-present", tmp_path, "--names")[1].split() == []


def test_unknown_benchmark(cli, tmp_path):
    code, _, err = cli("build", "nope", "--source", tmp_path, "--out", tmp_path / "o")
    assert code == 2 and "unknown benchmark 'nope'" in err


@pytest.mark.slow
def test_demo_end_to_end(demo_run):
    """`vlbench demo` (run once for the session by conftest's demo_run, as `make demo` runs it)."""
    code, stdout, err, out = demo_run.code, demo_run.stdout, demo_run.stderr, demo_run.folder / "demo_out"
    assert code == 0, err
    from builders.registry import benchmarks
    from evaluator.tasks import get_task, task_names

    assert stdout.count("verify: ok") == len(benchmarks()) and "baseline:prior" in stdout and "APQ" in stdout
    # the answer-sentiment baseline reads the answer only: its video and question scores are exactly 0
    assert "perceptual socialiq baseline:answer-sentiment: P_video/Z_D 0.000  P_question/Z_D 0.000" in stdout
    reports = out / "reports"
    metrics = json.loads((reports / "gqa-ood-prior" / "metrics.json").read_text())
    assert metrics["coverage"]["fraction"] == 1.0
    # A blind prior does worse on rare answers than on frequent ones (the paper's Table 3a pattern).
    assert metrics["acc_tail"] < metrics["acc_head"]
    # ... and loses its prior on the VQA-CP re-split; calling every Social-IQ answer correct scores 4/7.
    vqa = {b: json.loads((reports / f"{b}-prior" / "metrics.json").read_text())["accuracy"]
           for b in ("vqa-v2", "vqa-cp")}
    assert vqa["vqa-cp"] < vqa["vqa-v2"]
    siq = json.loads((reports / "socialiq-majority" / "metrics.json").read_text())
    assert abs(siq["accuracy"] - 100 * 4 / 7) < 1e-3
    # CounterBias of the tiny random ViLT: the attack moves the bias prompt towards B' inside its budget
    assert "counterbias vl-bias hf:tiny-vilt-mlm" in stdout
    for name in ("tiny-vilt-mlm", "tiny-llava"):  # a masked LM and a generative VLM
        cb = json.loads((reports / f"counterbias-{name}" / "metrics.json").read_text())
        assert cb["attack"]["raised_b_prime"] > 0.75 and cb["attack"]["max_linf"] <= 8 / 255 + 1e-6
    assert "| Avg. |" in (reports / "counterbias-vilt-vs-llava" / "report.md").read_text()
    # The report cards: the tiny LLaVA reads the sample sources' pictures, so every benchmark is scored;
    # baseline:random on those whose menu has it
    card = json.loads((out / "card-tiny-llava" / "card.json").read_text())
    assert {b for b, r in card["benchmarks"].items() if r["status"] == "scored"} == set(task_names())
    scored = len(task_names())
    with_random = sum(any(b.name == "random" for b in get_task(n).baselines) for n in task_names())
    assert f"report card of tiny-llava: {scored} of {scored} benchmarks scored" in stdout
    assert f"report card of baseline-random: {with_random} of {scored} benchmarks scored" in stdout
    assert (out / "card-compare" / "index.html").is_file()
    assert "suite-compare card-baseline-random vs card-tiny-llava" in stdout


@pytest.mark.slow
def test_regenerate_all_builds_what_is_present(sample_sources, tmp_path):
    """The script over a sources folder holding GQA's and VCR's raw files only: it builds and verifies the three
    benchmarks made from them (a benchmark's --param overrides reaching its build), and no other."""
    import os
    import shutil
    from pathlib import Path

    from builders.registry import benchmarks

    script = Path(__file__).resolve().parents[1] / "scripts" / "regenerate_all.sh"
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    present = tmp_path / "sources"
    for source in ("gqa", "vcr"):
        shutil.copytree(sample_sources / source, present / source)
    done = subprocess.run(["bash", str(script), str(present), str(tmp_path / "out"),
                           *(f"{b.name}:{p}" for b in benchmarks() for p in b.offline_build)], env=env,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert [line for line in done.stdout.splitlines() if line.startswith("== ")] == \
        ["== gqa-ood", "== vcr", "== vcr-visor"]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["gqa-ood", "vcr", "vcr-visor"]
    assert (tmp_path / "out" / "gqa-ood" / "legacy" / "ood_val_all.json").exists()
    card = (tmp_path / "out" / "vcr-visor" / "README.md").read_text()
    assert "nli_model=none" in card
    missing = subprocess.run(["bash", str(script), str(tmp_path / "none"), str(tmp_path / "o2")], env=env,
                             capture_output=True, text=True)
    assert missing.returncode == 2 and "--sources-present" in missing.stderr and "no such folder" in missing.stderr
    (tmp_path / "empty").mkdir()
    empty = subprocess.run(["bash", str(script), str(tmp_path / "empty"), str(tmp_path / "o2")], env=env,
                           capture_output=True, text=True)
    assert empty.returncode == 2 and "no raw sources" in empty.stderr


def test_params_lists_every_parameter_with_type_default_and_meaning(cli):
    code, stdout, _ = cli("params", "gqa-ood")
    assert code == 0
    assert "alpha                float                  default 0.2" in stdout
    assert "gqa-ood scoring options (vlbench evaluate/perceptual gqa-ood --option KEY=VALUE): none" in stdout
    code, stdout, _ = cli("params", "vqa-v2")
    assert code == 0 and "rule                 current|pre-2021       default current" in stdout


def test_param_values_reach_the_manifest_and_bad_ones_are_one_error(cli, sample_sources, tmp_path):
    """`build --param` (the old `--set` spelling is gone: a usage error)."""
    code, _, err = cli("build", "gqa-ood", "--source", sample_sources, "--out", tmp_path / "a", "--param", "alpha=0.3")
    assert code == 0, err
    manifest = (tmp_path / "a" / "manifest.json").read_text()
    assert '"alpha": 0.3' in manifest and "--param alpha=0.3" in manifest
    code, _, err = cli("build", "gqa-ood", "--source", sample_sources, "--out", tmp_path / "b", "--param", "alpha=inf")
    assert code == 2 and err.strip().splitlines()[-1] == "error: --param alpha=inf: expected a finite number"
    code, _, err = cli("build", "gqa-ood", "--source", sample_sources, "--out", tmp_path / "c", "--set", "alpha=0.3")
    assert code == 2 and "No such option: --set" in err


# Flags several commands declare with a meaning of their own, each declared by its command; every other
# flag is declared once (pipelines/cli/options.py, or the one command that takes it).
OWN_MEANINGS = {
    "--out": "each command's own output: a file, a dataset folder, a site, a task folder",
    "--split": "build: the splits to build (a list); the others read one built split (options.split_option)",
    "--no-cache": "three caches: the build's stages, the response cache, CounterBias's counterfactual images",
    "--data": "suite: a folder of builds or a Hub organisation; the others one build (options.DATA)",
    "--model": "shortcuts: text-only models (a list); counterbias: a bias probe; the others a spec of the menus",
    "--seed": "shortcuts: the training seeds (a list); the others one seed (options.seed_option)",
    "--predictions": "evaluate: a file; compare: several files; suite: a folder of them",
    "--answers": "seal: the sealed answer file it writes; the others the one they read (options.answers_option)",
    "--host": "serve: the address it listens on; serve team add: the new team is a host",
    "--workers": "serve: workers beside the web process (0: none); serve worker: the workers it runs (1 or more)",
}


def test_each_shared_option_is_declared_once():
    """Read off the CLI's source with `ast`: a flag declared in two places is a second declaration that can
    drift (a different minimum, default or help), unless it means something else there (OWN_MEANINGS)."""
    import ast
    from collections import Counter
    from pathlib import Path

    declared = Counter()
    for path in sorted((Path(__file__).resolve().parents[1] / "pipelines" / "cli").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "Option":
                declared.update(a.value for a in node.args if isinstance(a, ast.Constant)
                                and isinstance(a.value, str) and a.value.startswith("--"))
    assert {"--bootstrap", "--seed", "--split", "--option", "--report", "--by", "--overwrite"} <= set(declared)
    assert sorted(flag for flag, n in declared.items() if n > 1 and flag not in OWN_MEANINGS) == []
