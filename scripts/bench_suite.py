"""Benchmark: `vlbench suite` of a tiny generative VLM over every benchmark of the embedded samples.

Target, measured in this run: the time outside the model's forward passes (loading datasets and the
model, building prompts, decoding images, scoring, intervals, diagnostics, the card) is at most 10% of
the suite's wall time, at a size where the forward passes take at least a minute (a tiny LLaVA with
hidden size 256 and 224 px images; --hidden / --image-size change it). The builds are made before the
clock starts and the sample sources' pictures are the images (--images-root); the perceptual scores
are left out (--no-perceptual: they are more forward passes, not overhead).

    python scripts/bench_suite.py [--hidden 256] [--image-size 224]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from benchlib import ForwardTimer, verdict

ROOT = Path(__file__).resolve().parents[1]
TARGET_OUTSIDE_SHARE, MIN_FORWARD_SECONDS = 0.10, 60.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=256, help="the tiny LLaVA's hidden size")
    parser.add_argument("--image-size", type=int, default=224, help="its vision tower's image size")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    import evaluator.models.transformers_vlm as transformers_vlm
    from builders.registry import benchmarks
    from evaluator.models.options import ModelOptions
    from evaluator.suite.run import run_suite
    from evaluator.tasks import has_task
    from pipelines.build import run_build
    from pipelines.samples import write_samples
    from pipelines.tiny_models import write_tiny_llava

    forward = ForwardTimer()

    class TimedVLM(transformers_vlm.TransformersVLM):
        """The suite's model, its forward passes timed."""

        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            forward.attach(self.model)

    transformers_vlm.TransformersVLM = TimedVLM
    with tempfile.TemporaryDirectory(prefix="bench-suite-") as tmp:
        tmp = Path(tmp)
        write_samples(tmp / "sources")
        builds = {}
        for entry in benchmarks():
            if has_task(entry.name):
                run_build(entry.name, tmp / "sources", tmp / "data" / entry.name, assignments=entry.demo_params)
                builds[entry.name] = tmp / "data" / entry.name
        model = write_tiny_llava(tmp / "llava", hidden=args.hidden, layers=2, image_size=args.image_size)
        lines = []
        start = time.perf_counter()
        card = run_suite(f"hf:{model}", tmp / "data", tmp / "card", model_options=ModelOptions(max_new_tokens=4),
                         images_root=tmp / "sources", perceptual=False, echo=lines.append)
        wall = time.perf_counter() - start
    scored = [b for b, r in card["benchmarks"].items() if r["status"] == "scored"]
    print(f"{len(scored)} benchmarks scored ({', '.join(scored)}); {len(card['diagnostics'])} diagnostics")
    print(f"wall {wall:.1f} s, forward passes {forward.seconds:.1f} s")
    outside = 100 * (wall - forward.seconds) / wall
    ok = verdict("suite of a tiny VLM, share of wall outside forward passes", outside, 100 * TARGET_OUTSIDE_SHARE, "%",
                 holds=forward.seconds >= MIN_FORWARD_SECONDS,
                 detail=f"{len(scored)} benchmarks, forward passes {forward.seconds:.0f} s (>= 60 s needed)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
