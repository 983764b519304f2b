"""Benchmark: the perceptual score's cost against plain inference, and the late-fusion encoder cache.

Targets, measured in the same run on the VQA v2 sample (validation rows, COCO-layout
images) with tiny random models:

1. total wall time of `perceptual()` with P permutations, R repeats and M modalities is at most
   1.15 x (1 + P x R x M) plain inference passes (`model.predict` over the same rows) of the early-
   fusion tiny ViLT;
2. the late-fusion tiny CLIP scorer with its encoder cache is at least 3x faster than the same model
   re-encoding every permuted input, with identical scores.

    python scripts/bench_perceptual.py [--scale 3] [--permutations 2] [--repeats 2]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from benchlib import verdict

ROOT = Path(__file__).resolve().parents[1]
OVERHEAD_TARGET, CACHE_TARGET = 1.15, 3.0


def _timed(fn):
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=int, default=3, help="sample size multiplier (400 validation rows each)")
    parser.add_argument("--permutations", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    import torch

    from builders.vqa.samples import write_coco_images, write_vqa_v2
    from core.data import load_table
    from evaluator.models.options import ModelOptions
    from evaluator.perceptual.score import PerceptualOptions, perceptual, summarise
    from evaluator.vqa.task import vqa_v2_task
    from pipelines.build import run_build
    from pipelines.tiny_models import write_tiny_clip, write_tiny_vilt_vqa

    torch.set_num_threads(max(1, torch.get_num_threads()))
    tmp = Path(tempfile.mkdtemp(prefix="bench-perceptual-"))
    write_vqa_v2(tmp / "src" / "vqa_v2", 800 * args.scale, 400 * args.scale)
    write_coco_images(tmp / "coco", tmp / "src" / "vqa_v2")
    run_build("vqa-v2", tmp / "src", tmp / "vqa-v2")
    task = vqa_v2_task()
    table, train = load_table(tmp / "vqa-v2", "default", "validation"), load_table(tmp / "vqa-v2", "default", "train")
    options = ModelOptions(images=tmp / "coco", batch_size=64, data=tmp / "vqa-v2")
    p = PerceptualOptions(permutations=args.permutations, repeats=args.repeats)
    passes = 1 + args.permutations * args.repeats * len(task.modalities)
    print(f"{table.num_rows:,} rows, {args.permutations} permutations x {args.repeats} repeats x "
          f"{len(task.modalities)} modalities -> {passes} passes")

    vilt = task.make_model(f"hf:{write_tiny_vilt_vqa(tmp / 'vilt', ['yes', 'no', '2', 'white', 'dog'])}", options)
    vilt.predict(table.slice(0, 64))  # warm-up: first-call costs left out of both sides
    plain = min(_timed(lambda: vilt.predict(table))[0] for _ in range(2))
    total, _ = _timed(lambda: perceptual(task, vilt, table, p, train=train))
    ratio = total / (passes * plain)
    print(f"ViLT: plain pass {plain:.2f} s; perceptual {total:.2f} s")
    ok = verdict(f"perceptual score vs {passes} plain passes (early fusion)", ratio, OVERHEAD_TARGET, "x")

    clip = task.make_model(f"hf:{write_tiny_clip(tmp / 'clip')}", options)
    clip.predict(table.slice(0, 64))
    runs = {}
    for cache in (False, True):
        seconds, result = _timed(lambda: perceptual(task, clip, table, PerceptualOptions(
            permutations=args.permutations, repeats=args.repeats, encoder_cache=cache), train=train))
        runs[cache] = (seconds, summarise(result))
    speedup = runs[False][0] / runs[True][0]
    same = runs[False][1] == runs[True][1]
    print(f"CLIP: re-encoding {runs[False][0]:.2f} s, encoder cache {runs[True][0]:.2f} s; identical scores: {same}")
    ok &= verdict("late-fusion encoder cache vs re-encoding", speedup, CACHE_TARGET, "x", at_least=True, holds=same)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
