"""Run by the vLLM venv's Python (tests/test_families.py): each tiny family checkpoint named on the command line
asked through a `vllm:` backend, the engine in this process (`distributed_executor_backend=uni`; the test sets
VLLM_ENABLE_V1_MULTIPROCESSING=0), one after another. Prints one JSON object per family: the token ids vLLM ran
for a prompt with an image (its placeholders expanded by vLLM), the greedy answer and two continuations'
log-likelihoods; or the one error line.

Usage: python tests/vllm_family_probe.py IMAGE QUESTION MODEL_DIR[:DTYPE]..."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(image: str, question: str, models: list[str]) -> None:
    from vllm import SamplingParams

    from core.errors import VlbenchError
    from evaluator.models.backend import Turn
    from evaluator.models.images import open_image
    from evaluator.models.options import ModelOptions
    from evaluator.models.spec import hf_config
    from evaluator.models.vllm_engine import VllmVLM, shutdown_engines

    turn = Turn(question, (Path(image),))
    for spec in models:
        model, _, dtype = spec.partition(":")
        options = ModelOptions(max_new_tokens=6, enforce_eager=True, dtype=dtype or "auto",
                               engine_args=(("distributed_executor_backend", "uni"),))
        try:
            vlm = VllmVLM(model, hf_config(model), options)
            ran = vlm._run([vlm._request(turn, vlm._prompt_ids(turn), [open_image(Path(image))])],
                           SamplingParams(max_tokens=1, temperature=0.0))[0].prompt_token_ids
            print(json.dumps({"model": spec, "ids": list(ran), "answer": vlm.generate([turn])[0],
                              "scores": vlm.score([turn], [["two", "three"]])[0]}), flush=True)
        except VlbenchError as exc:
            print(json.dumps({"model": spec, "error": str(exc)}), flush=True)
        shutdown_engines()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
