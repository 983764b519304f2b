"""vLLM's runs split into shards and merged (evaluator/shards.py): the bytes of one process. In a file of its own so
that the test workers run it beside tests/test_vllm.py (4 engine starts)."""

from __future__ import annotations

import pytest
from vllm_helpers import needs_vllm, vllm_cli

pytestmark = pytest.mark.allow_hosts(["127.0.0.1"])


@pytest.fixture(autouse=True)
def _no_network():
    """Overrides conftest's: sockets may be made, and connect to loopback only (the module's mark)."""
    yield


@pytest.fixture(scope="module")
def llava(tmp_path_factory) -> str:
    from pipelines.tiny_models import write_tiny_llava_for_vllm

    return str(write_tiny_llava_for_vllm(tmp_path_factory.mktemp("vllm-models") / "llava"))


@needs_vllm
@pytest.mark.slow
def test_vllm_shards_merge_into_one_process_s_bytes(llava, built, sample_sources, cli, tmp_path):
    """`vllm:` generating greedily over VQA v2's 400 sample rows (the samples logged), whole and as 3 shards of
    unequal size (134, 133, 133) merged (evaluator/shards.py): the prediction file, record and samples are the whole
    run's bytes. The engine batches the rows it is given, so a shard's batches hold other rows than the whole run's
    (docs/guides/scale.md); the golden is the whole run's own output, made here. (hf: shards are merged at more
    counts in tests/test_shards.py; the merge is the same code.)"""
    args = ["predict", "vqa-v2", "--data", built("vqa-v2"), "--images", sample_sources / "coco", "--model",
            f"vllm:{llava}", "--enforce-eager", "--max-new-tokens", "4", "--log-samples", "--no-cache"]
    whole = tmp_path / "whole" / "p.json"
    code, _, err = vllm_cli(*args, "--out", whole, cache=tmp_path / "cache")
    assert code == 0, err
    golden = {s: whole.with_name("p" + s).read_bytes() for s in (".json", ".meta.json", ".samples.jsonl")}
    out = tmp_path / "in-3" / "p.json"
    for index in range(3):
        code, _, err = vllm_cli(*args, "--out", out, "--shard", f"{index}/3", cache=tmp_path / "cache")
        assert code == 0, err
    code, _, err = cli("merge", *[out.with_name(f"p.shard-{i}-of-3.json") for i in range(3)], "--out", out)
    assert code == 0, err
    assert {s: out.with_name("p" + s).read_bytes() for s in golden} == golden
