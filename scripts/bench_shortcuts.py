"""Benchmark: language-shortcut labelling (evaluator/shortcuts/labels.py) on a VCR-val-size input with a tiny
random BERT, CPU: the share of wall time outside the training and scoring steps -- tokenization,
batch building, reading results, model loading -- target at most 10%.

One run (a model, a seed, one epoch, sentence level, Q->A) fitted on a synthetic VCR train split and
scored on a synthetic VCR val split of 26,534 items, all in the native format, built by vlbench.

    python scripts/bench_shortcuts.py [--items 26534] [--train-items 2000]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from benchlib import verdict

ROOT = Path(__file__).resolve().parents[1]
TARGET_OUTSIDE_SHARE = 0.10


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=26_534)
    parser.add_argument("--train-items", type=int, default=2_000)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    import msgspec

    from builders.sources.vcr_samples import generate_vcr
    from core.data import load_table
    from evaluator.shortcuts.labels import ShortcutOptions, TokenCache, train_and_score
    from evaluator.vcr.task import VCRTask
    from pipelines.build import run_build
    from pipelines.tiny_models import write_tiny_text_encoder

    with tempfile.TemporaryDirectory(prefix="vlbench-bench-shortcuts-") as tmp:
        source = Path(tmp) / "vcr"
        source.mkdir()
        for name, records in (("val.jsonl", generate_vcr(args.items, 11, query_variation=0.97)),
                              ("train.jsonl", generate_vcr(args.train_items, 5, split="train"))):
            (source / name).write_bytes(b"".join(msgspec.json.encode(r) + b"\n" for r in records))
        run_build("vcr", source, Path(tmp) / "built", use_cache=False)
        task = VCRTask()
        train = task.choice_questions(load_table(Path(tmp) / "built", "default", "train"))["q_a"]
        test = task.choice_questions(load_table(Path(tmp) / "built", "default", "val"))["q_a"]
        model = str(write_tiny_text_encoder(Path(tmp) / "bert", "bert"))
        options = ShortcutOptions(models=(model,), seeds=(0,), epochs=1, batch_size=16)
        start = time.perf_counter()
        correct, seconds = train_and_score(model, 0, train, test, options, TokenCache())
        wall = time.perf_counter() - start
    steps = seconds["train"] + seconds["score"]
    outside = (wall - steps) / wall
    print(f"input: {len(train):,} training and {len(test):,} evaluation Q->A questions (synthetic VCR, 4 candidates); "
          "tiny random BERT, one seed, one epoch, CPU")
    print(f"wall {wall:.1f} s: training steps {seconds['train']:.1f} s, scoring steps {seconds['score']:.1f} s, "
          f"tokenization {seconds['tokenize']:.1f} s, batches and results {seconds['data']:.1f} s, "
          f"loading and the rest {wall - steps - seconds['tokenize'] - seconds['data']:.1f} s")
    print(f"accuracy of the run: {100 * correct.mean():.1f}%")
    ok = verdict("shortcut labels, share of wall outside training and scoring steps", 100 * outside,
                 100 * TARGET_OUTSIDE_SHARE, "%")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
