"""A reasoning model for real: a tiny LLaVA trained in the test (tests/thinking_model.py, 300 full-batch steps on
CPU) to think (`hm</think>`) and then answer `yes`, under a chat template in the shape of Qwen3's thinking
ones (its generation prompt opens the `<think>` block unless `enable_thinking=false`). Asked the VQA v2
rows it was trained on through `hf:`, `vllm:` (the offline engine) and vLLM's own server with its
`deepseek_r1` reasoning parser (which returns the thinking as `reasoning_content`), every backend reads
the answer after the thinking: the score equals that of a prediction file answering `yes` everywhere
(scored by `vlbench evaluate`, no model involved), and equals the score with thinking switched off. A
budget too small to finish the thinking leaves every answer unfinished: counted, and scored wrong.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from helpers import assert_one_error_line
from served_helpers import vllm_env, vllm_serve
from thinking_model import ANSWER, THINKING, write_tiny_thinking_llava

ROOT = Path(__file__).resolve().parents[1]
VLLM_PYTHON = os.environ.get("VLBENCH_VLLM_PYTHON")
needs_vllm = pytest.mark.skipif(not VLLM_PYTHON, reason="no vLLM venv: `make test` builds it (scripts/vllm_venv.sh) "
                                                        "and passes its Python as VLBENCH_VLLM_PYTHON")
ROWS = 12
pytestmark = [pytest.mark.slow, pytest.mark.allow_hosts(["127.0.0.1"])]


@pytest.fixture(autouse=True)
def _no_network():
    """Overrides conftest's: sockets may be made, and connect to loopback only (the module's mark)."""
    yield


@pytest.fixture(scope="module")
def thinker(built, sample_sources, tmp_path_factory):
    """(checkpoint, the vqa-v2 build, its images): the model trained on the build's first ROWS rows, each asked
    with the benchmark's default prompt and its picture."""
    from evaluator.models.ask import SHORT_ANSWER_PROMPT
    from evaluator.models.images import ImageFolder, image_sources, open_image

    folder, images = built("vqa-v2"), sample_sources / "coco"
    table = pq.read_table(next(folder.glob("default/validation-*.parquet"))).slice(0, ROWS)
    rows = [(SHORT_ANSWER_PROMPT.format(question=q), open_image(s)) for q, s in
            zip(table.column("question").to_pylist(), image_sources(table, "image_id", ImageFolder(images)))]
    return write_tiny_thinking_llava(tmp_path_factory.mktemp("thinker") / "model", rows), folder, images


def run(*args, python: str = sys.executable, env: dict | None = None) -> tuple[int, str, str]:
    done = subprocess.run([python, "-m", "pipelines.cli", *map(str, args)], capture_output=True, text=True,
                          timeout=900, cwd=ROOT, env={**os.environ, **(env or {})})
    return done.returncode, done.stdout, done.stderr


def predict(thinker, model: str, out: Path, *extra, python: str = sys.executable, env: dict | None = None) -> dict:
    """Predict the trained rows, then score them; (accuracy, record, samples)."""
    _, folder, images = thinker
    code, _, err = run("predict", "vqa-v2", "--data", folder, "--images", images, "--model", model, "--limit", ROWS,
                       "--out", out, "--log-samples", *extra, python=python, env=env)
    assert code == 0, err
    return {"accuracy": accuracy(folder, out), "record": json.loads(out.with_suffix(".meta.json").read_text()),
            "samples": [json.loads(x) for x in out.with_suffix(".samples.jsonl").read_text().splitlines()]}


def accuracy(folder: Path, predictions: Path) -> float:
    code, stdout, err = run("evaluate", "vqa-v2", "--data", folder, "--predictions", predictions, "--allow-partial",
                            "--bootstrap", "0")
    assert code == 0, err
    return json.loads(stdout)["accuracy"]


@pytest.fixture(scope="module")
def yes_everywhere(thinker, tmp_path_factory) -> float:
    """The golden: VQA accuracy of a file answering `yes` to the trained rows, with no model involved."""
    _, folder, _ = thinker
    table = pq.read_table(next(folder.glob("default/validation-*.parquet"))).slice(0, ROWS)
    path = tmp_path_factory.mktemp("golden") / "yes.json"
    path.write_text(json.dumps([{"question_id": q, "answer": ANSWER} for q in table.column("question_id").to_pylist()]))
    return accuracy(folder, path)


def check_thinking_run(result: dict, yes_score: float) -> None:
    assert result["accuracy"] == yes_score > 0
    assert all(s["output"].startswith(THINKING) and "</think>" in s["output"] for s in result["samples"])
    assert all(s["prediction"] == ANSWER and s["unfinished"] is False for s in result["samples"])
    reasoning = result["record"]["reasoning"]
    assert result["record"]["asked"]["unfinished_answers"] == 0
    assert reasoning["thinking"] is True and reasoning["opened_by_template"] == "<think>"
    # the thinking budget's default: 4096 tokens, at most half the model's 2,048-token context
    assert result["record"]["asked"]["generation"]["max_new_tokens"] == 1024


def test_hf_reads_the_answer_after_the_thinking(thinker, yes_everywhere, tmp_path):
    model = f"hf:{thinker[0]}"
    check_thinking_run(predict(thinker, model, tmp_path / "on.json"), yes_everywhere)
    off = predict(thinker, model, tmp_path / "off.json", "--chat-template-kwarg", "enable_thinking=false")
    assert off["accuracy"] == yes_everywhere
    assert all(s["output"] == f" {ANSWER}" and "unfinished" not in s for s in off["samples"])
    assert off["record"]["reasoning"]["thinking"] is False
    assert off["record"]["reasoning"]["chat_template_kwargs"] == {"enable_thinking": False}
    assert off["record"]["asked"]["generation"]["max_new_tokens"] == 16


def test_a_budget_that_ends_inside_the_thinking_leaves_every_answer_unfinished(thinker, tmp_path):
    cut = predict(thinker, f"hf:{thinker[0]}", tmp_path / "cut.json", "--max-new-tokens", "2")
    assert cut["record"]["asked"]["unfinished_answers"] == ROWS
    assert all(s["output"] == THINKING and s["unfinished"] and s["prediction"] == "" for s in cut["samples"])
    assert cut["accuracy"] == 0


def test_a_switch_the_template_does_not_read_is_one_line(thinker, tmp_path):
    _, folder, images = thinker
    code, _, err = run("predict", "vqa-v2", "--data", folder, "--images", images, "--model", f"hf:{thinker[0]}",
                       "--limit", 2, "--out", tmp_path / "p.json", "--chat-template-kwarg", "enable_thinkng=false")
    line = assert_one_error_line(code, err, ["--chat-template-kwarg enable_thinkng", "enable_thinking"])
    assert "add_generation_prompt" not in line
    assert not any(tmp_path.iterdir())


@needs_vllm
def test_vllm_reads_the_answer_after_the_thinking(thinker, yes_everywhere, tmp_path):
    env = {**vllm_env(), "VLBENCH_CACHE": str(tmp_path / "cache")}
    check_thinking_run(predict(thinker, f"vllm:{thinker[0]}", tmp_path / "vllm.json", "--enforce-eager",
                               python=VLLM_PYTHON, env=env),
                       yes_everywhere)


@needs_vllm
def test_vllms_server_reasoning_content_is_read_as_thinking(thinker, yes_everywhere, tmp_path):
    """vLLM's server with `--reasoning-parser deepseek_r1` returns the thinking as `reasoning_content` and
    the answer alone as `content`; vlbench puts the thinking back before the answer for --log-samples."""
    with vllm_serve(VLLM_PYTHON, thinker[0], tmp_path / "log", ("--reasoning-parser", "deepseek_r1")) as url:
        result = predict(thinker, f"openai:{thinker[0]}", tmp_path / "served.json", "--base-url", url, "--no-cache")
        cut = predict(thinker, f"openai:{thinker[0]}", tmp_path / "cut.json", "--base-url", url, "--no-cache",
                      "--max-new-tokens", "2")
    assert result["accuracy"] == yes_everywhere
    assert all(s["output"] == f"<think>{THINKING}</think> {ANSWER}" and s["prediction"] == ANSWER
               for s in result["samples"])
    assert result["record"]["asked"]["unfinished_answers"] == 0
    assert cut["record"]["asked"]["unfinished_answers"] == ROWS and cut["accuracy"] == 0
