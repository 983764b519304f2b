"""Run by the vLLM venv's Python (tests/test_vllm.py): a `vllm:` backend on a tiny LLaVA, asked directly.
Prints one JSON object: the token ids vLLM ran for a prompt with an image beside the ids the checkpoint's
own processor gives transformers, and each continuation's log-likelihood from the prefix-cached trie
(`score`) and from one full sequence with vLLM's prompt log-probabilities (`score_full`).

Usage: python tests/vllm_probe.py MODEL_DIR"""

from __future__ import annotations

import io
import json
import sys


def main(model: str) -> None:
    import numpy as np
    from PIL import Image
    from vllm import SamplingParams

    from evaluator.models.backend import Turn
    from evaluator.models.images import open_image
    from evaluator.models.options import ModelOptions
    from evaluator.models.spec import hf_config
    from evaluator.models.vllm_engine import VllmVLM

    rng = np.random.default_rng(0)
    images = []
    for h, w in ((40, 50), (90, 30), (33, 33)):
        buffer = io.BytesIO()
        Image.fromarray((rng.random((h, w, 3)) * 255).astype("uint8")).save(buffer, format="PNG")
        images.append(buffer.getvalue())
    questions = ["What color is it?", "How many dogs are there in the picture?", "Why?"]
    turns = [Turn(q, (im,)) for q, im in zip(questions, images)]
    # shared prefixes, uneven lengths and a duplicate: the trie branches at several depths
    options = ["yes", "yes, two", "no", "two dogs", "two dogs and a cat", "a cat", "no", "on the left side"]

    vlm = VllmVLM(model, hf_config(model), ModelOptions(batch_size=2, enforce_eager=True))  # no compile
    trie = vlm.score(turns, [options] * len(turns))
    full = [vlm.score_full([t] * len(options), options) for t in turns]
    prompt = vlm.prompt_text(turns[0])
    ran = vlm._run([vlm._request(turns[0], vlm._prompt_ids(turns[0]), [open_image(images[0])])],
                   SamplingParams(max_tokens=1, temperature=0.0))[0].prompt_token_ids
    processor_ids = vlm.processor(text=[prompt], images=[[open_image(images[0])]], return_tensors="np")["input_ids"]
    print(json.dumps({"trie": trie, "full": full, "vllm_prompt_ids": list(ran),
                      "processor_ids": [int(t) for t in processor_ids[0]], "describe": vlm.describe()}))


if __name__ == "__main__":  # vLLM starts its workers with spawn: the guard keeps them from running this again
    main(sys.argv[1])
