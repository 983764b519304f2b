"""What the vLLM test files share (tests/test_vllm.py, tests/test_vllm_shards.py, two files so that the test workers
run their vLLM engines side by side): the vLLM venv's Python, the tiny checkpoints, and vlbench's CLI run by it."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from served_helpers import vllm_env

VLLM_PYTHON = os.environ.get("VLBENCH_VLLM_PYTHON")
needs_vllm = pytest.mark.skipif(not VLLM_PYTHON, reason="no vLLM venv: `make test` builds it (scripts/vllm_venv.sh) "
                                                        "and passes its Python as VLBENCH_VLLM_PYTHON")
ROOT = Path(__file__).resolve().parents[1]


def write_vllm_models(root: Path) -> dict[str, str]:
    """The tiny checkpoints of the vLLM tests under ROOT: the LLaVA both vLLM and transformers load, two broken
    copies of it, one whose head size vLLM's CPU attention refuses, and a ViLT."""
    from pipelines.tiny_models import write_tiny_llava, write_tiny_llava_for_vllm, write_tiny_vilt_vqa

    unknown = write_tiny_llava_for_vllm(root / "unknown-architecture")
    config = json.loads((unknown / "config.json").read_text())
    (unknown / "config.json").write_text(json.dumps({**config, "architectures": ["LlavaOfAnotherKind"]}))
    zero_heads = write_tiny_llava_for_vllm(root / "zero-heads")
    config = json.loads((zero_heads / "config.json").read_text())
    config["text_config"]["num_attention_heads"] = 0
    (zero_heads / "config.json").write_text(json.dumps(config))
    return {"llava": str(write_tiny_llava_for_vllm(root / "llava")), "unknown-architecture": str(unknown),
            "zero-heads": str(zero_heads),
            "head-8": str(write_tiny_llava(root / "head-8")),  # hidden 32, 4 heads: head size 8
            "vilt": str(write_tiny_vilt_vqa(root / "vilt", ["yes", "no"]))}


def vllm_cli(*args, cache: Path, timeout: float = 600, env: dict | None = None) -> tuple[int, str, str]:
    """`vlbench ARGS` run by the vLLM venv's Python from this checkout."""
    env = {**vllm_env(), "VLBENCH_CACHE": str(cache), **(env or {})}
    done = subprocess.run([VLLM_PYTHON, "-m", "pipelines.cli", *map(str, args)], env=env, capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT)
    return done.returncode, done.stdout, done.stderr
