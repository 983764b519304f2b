"""Benchmark: the cost of the judge pass (`predict --judge`) on the demo's COSIM-Q rows, letter choice through
`hf:`: the model is the demo's tiny random LLaVA (whose letter answers the rules mostly cannot read); the
judge, a tiny LLaVA whose decoding is biased to answer "B" (pipelines.tiny_models.write_tiny_llava_answering),
so that its replies parse.

Measured in this run: the share of the model's answers sent to the judge (reported: it depends on the model),
and the judge's cost per answer it is asked, from the same run with and without the judge (the baseline),
against the model's own cost per answer: target <= 2x (the judge reads a longer prompt, the question, its
options and the answer, without an image, and writes one letter).

    python scripts/bench_judge.py
"""

from __future__ import annotations

import dataclasses
import json
import sys
import tempfile
import time
from pathlib import Path

from benchlib import reported, verdict

ROOT = Path(__file__).resolve().parents[1]
BENCH = "cosim-q"
TARGET_PER_ANSWER = 2.0


def main() -> int:
    sys.path.insert(0, str(ROOT))
    from builders.registry import get_benchmark
    from evaluator.models.options import ModelOptions
    from evaluator.run import predict
    from evaluator.tasks import get_task
    from pipelines.build import run_build
    from pipelines.samples import write_samples
    from pipelines.tiny_models import write_tiny_llava, write_tiny_llava_answering

    with tempfile.TemporaryDirectory(prefix="bench-judge-") as tmp:
        tmp = Path(tmp)
        write_samples(tmp / "sources")
        run_build(BENCH, tmp / "sources", tmp / BENCH, assignments=get_benchmark(BENCH).demo_params)
        model = f"hf:{write_tiny_llava(tmp / 'llava')}"
        judge = f"hf:{write_tiny_llava_answering(tmp / 'judge', 'B')}"
        base = ModelOptions(images=tmp / "sources" / get_task(BENCH).images_folder, choice_mode="letter",
                            max_new_tokens=4)
        timings = {}
        for name, options in (("rules", base), ("judged", dataclasses.replace(base, judge=judge))):
            start = time.perf_counter()
            predict(BENCH, str(tmp / BENCH), model, tmp / f"{name}.json", options=options)
            timings[name] = time.perf_counter() - start
        rules = json.loads((tmp / "rules.meta.json").read_text())
        judged = json.loads((tmp / "judged.meta.json").read_text())["asked"]["judge"]
    share = judged["asked"] / rules["rows"]  # one prompt per COSIM-Q row
    print(f"{BENCH}: {rules['rows']:,} answers, {rules['asked']['unparsed_outputs']:,} unread by the rules; the judge "
          f"was asked {judged['asked']:,} and decided {judged['decided']:,}; agreement {judged['agreement']['agreed']} "
          f"of {judged['agreement']['sample']}; without the judge {timings['rules']:.1f} s, with it "
          f"{timings['judged']:.1f} s")
    reported("judge: share of the answers sent to it", 100 * share, "%",
             "it depends on how well the model follows the letter format (here a random tiny model)")
    per_judged = (timings["judged"] - timings["rules"]) / max(1, judged["asked"] + judged["agreement"]["sample"])
    per_answer = timings["rules"] / rules["rows"]
    ok = verdict("judge pass: seconds per answer judged over the model's per answer", per_judged / per_answer,
                 TARGET_PER_ANSWER, "x", detail=f"{per_judged * 1000:.1f} ms vs {per_answer * 1000:.1f} ms")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
