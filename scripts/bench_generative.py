"""Benchmark: generative VLM inference (evaluator/models/transformers_vlm.py) on CPU with random LLaVA models.

Targets, each a ratio measured in the same run:
1. batched greedy generation (left-padded batches) against one sample at a time (what VLMEvalKit does
   and lmms-eval recommends): at least 3x samples/s, identical answers;
2. VisDial's 100-option ranking with the image and dialogue run once and its key/value cache reused
   (score_cached) against 100 full sequences (score_full): at least 3x, identical ranks;
3. GQA-OOD-style prediction (short answers, one image each, mixed sizes): time outside the model's
   forward passes (image decoding, chat template, processor, padding, decoding) at most 15% of wall;
4. `vlbench predict`'s path (GenerativeAdapter.predict over the built VQA v2 sample, images read from
   the COCO folder, answers cleaned and normalised) against a plain transformers loop over the same
   rows at the same batch size (chat template, PIL open, processor, generate, decode): at least 1.0x,
   identical raw answers. The two alternate which goes first, median of 5 rounds.

Targets 1-2 use the tiny test model (hidden 32); target 3 a larger random configuration (hidden 256,
4 layers, 224 px images: 785 tokens of image per question), where, as with a real checkpoint, the
forward passes are most of the work.

    python scripts/bench_generative.py [--samples 64] [--rounds 8] [--gqa 96] [--plain-rounds 5]
"""

from __future__ import annotations

import argparse
import io
import sys
import tempfile
import time
from pathlib import Path

from benchlib import ForwardTimer, verdict

ROOT = Path(__file__).resolve().parents[1]
BATCH_TARGET, PREFIX_TARGET, OUTSIDE_TARGET, PLAIN_TARGET = 3.0, 3.0, 0.15, 1.0


def _images(n: int, seed: int = 0) -> list[bytes]:
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        image = Image.fromarray((rng.random((200 + 37 * (i % 7), 260 + 23 * (i % 5), 3)) * 255).astype("uint8"))
        buffer = io.BytesIO()
        image.save(buffer, format="JPEG")
        out.append(buffer.getvalue())
    return out


def _timed(fn):
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=64, help="questions for the batching comparison")
    parser.add_argument("--rounds", type=int, default=8, help="VisDial rounds (100 options each)")
    parser.add_argument("--gqa", type=int, default=96, help="questions for the overhead measurement")
    parser.add_argument("--plain-rounds", type=int, default=5, help="rounds of predict against the plain loop")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    import numpy as np

    from evaluator.models.backend import Turn
    from evaluator.models.options import ModelOptions
    from evaluator.models.spec import hf_config
    from evaluator.models.transformers_vlm import TransformersVLM
    from evaluator.visdial.metrics import scores_to_ranks
    from pipelines.tiny_models import write_tiny_llava

    ok = True
    with tempfile.TemporaryDirectory(prefix="vlbench-bench-") as tmp:
        tiny = str(write_tiny_llava(Path(tmp) / "tiny"))
        words = "what color is the object on the left side of the table near the window".split()
        questions = [" ".join(words[: 3 + i % 11]) + "?" for i in range(args.samples)]
        images = _images(args.samples)
        turns = [Turn(q, (im,)) for q, im in zip(questions, images)]

        batched_vlm = TransformersVLM(tiny, hf_config(tiny), ModelOptions(batch_size=16))
        single_vlm = TransformersVLM(tiny, hf_config(tiny), ModelOptions(batch_size=1))
        batched_vlm.generate(turns[:2], 8)  # first calls (allocations) out of the timing
        t_batched, batched = _timed(lambda: batched_vlm.generate(turns, 8))
        t_single, single = _timed(lambda: single_vlm.generate(turns, 8))
        ratio = t_single / t_batched
        same = batched == single
        print(f"1. generation, {args.samples} questions, 8 new tokens: one at a time {args.samples / t_single:.1f} "
              f"samples/s, batches of 16 {args.samples / t_batched:.1f} samples/s, identical answers: {same}")
        ok &= verdict("batched generation vs one at a time", ratio, BATCH_TARGET, "x", at_least=True, holds=same,
                      detail=f"{args.samples / t_batched:.1f} samples/s")

        vlm = TransformersVLM(tiny, hf_config(tiny), ModelOptions(batch_size=50))
        # 100 distinct options, as a VisDial round's are (equal options tie by construction in `score`)
        options = [" ".join(words[i % 5: i % 5 + 1 + i % 4]) + f" {i // 20}" * (i >= 20) for i in range(100)]
        assert len(set(options)) == len(options)
        history = "\n".join(f"{' '.join(words[:4 + r])}? {' '.join(words[r:r + 3])}" for r in range(9))
        rounds = [Turn(f"Caption: a table by a window\nDialogue so far:\n{history}\nQuestion: {q}", (im,))
                  for q, im in zip(questions[:args.rounds], images)]
        t_cached, cached = _timed(lambda: [vlm.score_cached(t, options) for t in rounds])
        t_full, full = _timed(lambda: [vlm.score_full([t] * len(options), options) for t in rounds])
        ratio = t_full / t_cached
        same = (scores_to_ranks(np.array(cached)) == scores_to_ranks(np.array(full))).all()
        gap = float(np.abs(np.array(cached) - np.array(full)).max())
        print(f"2. VisDial ranking, {args.rounds} rounds x 100 options: full sequences {t_full:.2f} s, cached "
              f"prefix {t_cached:.2f} s, identical ranks: {bool(same)} (largest score difference {gap:.1e})")
        ok &= verdict("VisDial ranking, cached prefix vs full sequences", ratio, PREFIX_TARGET, "x", at_least=True,
                      holds=bool(same))

        larger = str(write_tiny_llava(Path(tmp) / "larger", hidden=256, layers=4, image_size=224))
        vlm = TransformersVLM(larger, hf_config(larger), ModelOptions(batch_size=16))
        forward = ForwardTimer()
        forward.attach(vlm.model)
        gqa = [Turn(f"{q}\nAnswer the question using a single word or phrase.", (im,))
               for q, im in zip(questions * (1 + args.gqa // len(questions)), _images(args.gqa, seed=1))][:args.gqa]
        vlm.generate(gqa[:2], 4)
        forward.seconds = 0.0
        wall, _ = _timed(lambda: vlm.generate(gqa, 4))
        outside = 1 - forward.seconds / wall
        print(f"3. GQA-style prediction, {args.gqa} questions (hidden 256, 224 px): wall {wall:.2f} s, forward "
              f"passes {forward.seconds:.2f} s")
        ok &= verdict("GQA-style generation, share of wall outside forward passes", 100 * outside,
                      100 * OUTSIDE_TARGET, "%")
        ok &= against_a_plain_loop(Path(tmp), tiny, args.plain_rounds)
    return 0 if ok else 1


def against_a_plain_loop(tmp: Path, model: str, rounds: int, batch: int = 16) -> bool:
    """Target 4: predict's adapter path against the loop a user would write with transformers alone."""
    import statistics

    import torch
    from PIL import Image

    from core.data import load_table
    from evaluator.models.options import ModelOptions
    from evaluator.tasks import get_task
    from pipelines.build import run_build
    from pipelines.samples import write_samples

    write_samples(tmp / "sources")
    run_build("vqa-v2", tmp / "sources", tmp / "vqa-v2")
    task = get_task("vqa-v2")
    table = load_table(tmp / "vqa-v2", task.config, "validation")
    adapter = task.make_model(f"hf:{model}", ModelOptions(batch_size=batch, images=tmp / "sources" / "coco",
                                                          max_new_tokens=8))
    adapter.predict(table.slice(0, 2))  # loads the model (and first-call allocations) out of the timing
    vlm = adapter.vlm
    processor, net, template = vlm.processor, vlm.model, adapter.template
    rows = list(zip(table.column("question").to_pylist(), table.column("image_id").to_pylist()))
    paths = [adapter.images.path(image_id) for _, image_id in rows]

    def plain() -> list[str]:
        out = []
        with torch.inference_mode():
            for b in range(0, len(rows), batch):
                texts = [processor.apply_chat_template(
                    [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": template.format(
                        question=q)}]}], add_generation_prompt=True, tokenize=False) for q, _ in rows[b:b + batch]]
                images = [Image.open(p).convert("RGB") for p in paths[b:b + batch]]
                enc = processor(text=texts, images=images, return_tensors="pt", padding=True, padding_side="left")
                generated = net.generate(**enc, max_new_tokens=8, do_sample=False, num_beams=1,
                                         pad_token_id=processor.tokenizer.pad_token_id)
                out += processor.tokenizer.batch_decode(generated[:, enc["input_ids"].shape[1]:],
                                                        skip_special_tokens=True)
        return out

    def ours() -> list[str]:
        adapter.predict(table)
        return [s["output"] for s in adapter.samples]

    times: dict[str, list[float]] = {"plain": [], "predict": []}
    answers = {}
    pair = [("plain", plain), ("predict", ours)]
    for k in range(rounds):
        for name, fn in (pair if k % 2 == 0 else pair[::-1]):
            seconds, answers[name] = _timed(fn)
            times[name].append(seconds)
    t_plain, t_ours = statistics.median(times["plain"]), statistics.median(times["predict"])
    ratio, same = t_plain / t_ours, answers["plain"] == answers["predict"]
    print(f"4. predict against a plain transformers loop, {len(rows)} VQA v2 questions, batch {batch}: plain "
          f"{len(rows) / t_plain:.1f} samples/s, predict {len(rows) / t_ours:.1f} samples/s, identical answers: {same}")
    return verdict("predict vs a plain transformers loop", ratio, PLAIN_TARGET, "x", at_least=True, holds=same,
                   detail=f"{len(rows) / t_ours:.1f} samples/s")


if __name__ == "__main__":
    sys.exit(main())
