"""Benchmark: CounterBias likelihoods of a generative VLM (Zhang, Wang, Sang, ACM MM 2022, Eq. 1-2), shared prefix.

What one image asks in a CounterBias run (evaluator/vl_bias/run.py): the factual and counterfactual
caption of each of Table 1's four templates (P(T | V, L) over the 52 activities) and the bias prompt
(P(B | V) over the gender pair). `GenerativeProbe.score` runs the image's user turn once with its
key/value cache and extends it with every caption in one batch; the baseline asks one template at a
time (then the bias prompt), each question re-running the image and the user turn, as code without a
shared prefix does. Target, measured in the same run on CPU with the tiny random LLaVA and Qwen2-VL:
the shared prefix is at least 3x faster per image, with the same values (to float noise).

    python scripts/bench_counterbias_likelihoods.py [--images 32] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchlib import verdict

ROOT = Path(__file__).resolve().parents[1]
TARGET = 3.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    import numpy as np
    from PIL import Image

    from builders.vl_bias.samples import write_vl_bias
    from builders.vl_bias.words import ACTIVITIES, BIAS_PROMPT, TEMPLATES
    from evaluator.models.options import ModelOptions
    from evaluator.vl_bias.families import load_probe
    from pipelines.tiny_models import write_tiny_llava, write_tiny_qwen2_vl

    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        write_vl_bias(tmp / "src", per_gender=max(1, -(-args.images // 40)))
        paths = sorted((tmp / "src").rglob("*.jpg"))[: args.images]
        for name, writer in (("tiny-llava", write_tiny_llava), ("tiny-qwen2-vl", write_tiny_qwen2_vl)):
            probe = load_probe(f"hf:{writer(tmp / name)}", ModelOptions(device="cpu", batch_size=32))
            prompt = probe.bias_prompt(BIAS_PROMPT)
            xs = [probe.image_tensor(Image.open(p).convert("RGB")) for p in paths]

            def questions(x, templates):
                return [(TEMPLATES[t].caption(w), x) for t in templates for w in ("man", "woman")]

            def shared() -> list:
                out = []
                for x in xs:
                    asked = questions(x, TEMPLATES) + [(prompt, x)]
                    out.append(probe.score(asked, [tuple(ACTIVITIES)] * 8 + [("man", "woman")]))
                return out

            def one_template_at_a_time() -> list:
                out = []
                for x in xs:
                    values = []
                    for t in TEMPLATES:
                        values += probe.score(questions(x, [t]), [tuple(ACTIVITIES)] * 2)
                    out.append(values + probe.score([(prompt, x)], [("man", "woman")]))
                return out

            shared(), one_template_at_a_time()  # warm-up
            times = {"shared": [], "one": []}
            for _ in range(args.repeats):
                for key, fn in (("shared", shared), ("one", one_template_at_a_time)):
                    start = time.perf_counter()
                    result = fn()
                    times[key].append(time.perf_counter() - start)
                    if key == "shared":
                        first = result
                    else:
                        diff = max(float(np.abs(a - b).max()) for ra, rb in zip(first, result) for a, b in zip(ra, rb))
            fast, slow = statistics.median(times["shared"]), statistics.median(times["one"])
            print(f"{name}: {len(xs)} images x (4 templates x 2 captions over 52 activities + the bias prompt), "
                  f"median of {args.repeats}: shared prefix {1000 * fast / len(xs):.2f} ms/image, one template at "
                  f"a time {1000 * slow / len(xs):.2f} ms/image; max |difference| {diff:.1e}")
            ok &= verdict(f"CounterBias likelihoods, {name}, shared image prefix vs one template at a time",
                          slow / fast, TARGET, "x", at_least=True, detail=f"max |diff| {diff:.1e}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
