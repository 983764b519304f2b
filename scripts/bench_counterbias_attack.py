"""Benchmark: throughput of the CounterBias PGD attack (Zhang, Wang, Sang, ACM MM 2022, Eq. 3) over a batch-size sweep.

Target, measured in the same run on CPU for each model with the VL-Bias sample images: the batched
attack is at least 5x faster per image than one image at a time, with the same results (the
counterfactual images agree up to float noise: sign flips of near-zero gradient components). Models:
the tiny random ViLT masked LM, and the tiny random generative VLMs (LLaVA, Qwen2-VL: the attack through
their vision towers, the loss the next-token probability of B' after "The person in the picture is a").
Qwen2-VL's ratio is reported without a target: transformers runs its vision attention image by image.
With `--models vilt-b32` the model is a random ViltForMaskedLM at the real ViLT-B/32 configuration
(hidden 768, 12 layers, 384 px images in 32 px patches): the numbers to take on a GPU.

    python scripts/bench_counterbias_attack.py [--images 64] [--steps 10] [--batch-sizes 1,4,16,64]
        [--models tiny-vilt,tiny-llava,tiny-qwen2-vl]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from benchlib import reported, verdict

ROOT = Path(__file__).resolve().parents[1]
TARGET = 5.0
# transformers' Qwen2-VL vision tower splits its attention at each image's boundary (cu_seqlens) and, off
# flash-attention, runs it image by image: a batch cannot share those calls, whatever the caller does
UNBATCHED_VISION = {"tiny-qwen2-vl": "its vision attention runs image by image in transformers (cu_seqlens split, "
                                     "no flash-attention on CPU)"}


def _model_folder(tmp: Path, config: str) -> Path:
    from pipelines.tiny_models import write_tiny_llava, write_tiny_qwen2_vl, write_tiny_vilt_mlm

    writers = {"tiny-vilt": write_tiny_vilt_mlm, "tiny-llava": write_tiny_llava, "tiny-qwen2-vl": write_tiny_qwen2_vl}
    if config in writers:
        return writers[config](tmp / config)
    if config != "vilt-b32":
        raise SystemExit(f"--models {config}: expected {', '.join(writers)} or vilt-b32")
    import torch
    from transformers import ViltConfig, ViltForMaskedLM, ViltImageProcessorPil

    from pipelines.tiny_models import tokenizer, vocabulary

    torch.manual_seed(0)
    ViltForMaskedLM(ViltConfig(vocab_size=len(vocabulary()), max_image_length=-1,
                               architectures=["ViltForMaskedLM"])).save_pretrained(tmp / "vilt-b32")
    tokenizer().save_pretrained(tmp / "vilt-b32")
    ViltImageProcessorPil().save_pretrained(tmp / "vilt-b32")
    return tmp / "vilt-b32"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=64)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--batch-sizes", default="1,4,16,64")
    parser.add_argument("--models", default="tiny-vilt,tiny-llava,tiny-qwen2-vl",
                        help="comma-separated: tiny-vilt, tiny-llava, tiny-qwen2-vl, vilt-b32")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    import torch
    from PIL import Image

    from builders.vl_bias.samples import write_vl_bias
    from evaluator.models.options import ModelOptions
    from evaluator.vl_bias.attack import PGD, pgd_attack
    from evaluator.vl_bias.families import load_probe
    from evaluator.vl_bias.probe import pad_images

    ok = True
    words = ("boy", "girl", "man", "woman")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        write_vl_bias(tmp / "src", per_gender=max(1, -(-args.images // 40)))
        paths = sorted((tmp / "src").rglob("*.jpg"))[: args.images]
        for config in args.models.split(","):
            model = load_probe(f"hf:{_model_folder(tmp, config)}", ModelOptions(device=args.device))
            prompt = model.bias_prompt("A [MASK] is in the picture")
            xs = [model.image_tensor(Image.open(p).convert("RGB")) for p in paths]
            targets = [(k % 4) for k in range(len(xs))]
            attack = PGD(steps=args.steps)
            device = model.device

            def run(batch_size: int) -> tuple[float, list]:
                out = []
                if device.type == "cuda":
                    torch.cuda.synchronize()
                start = time.perf_counter()
                for s in range(0, len(xs), batch_size):
                    pixels, mask = pad_images(xs[s:s + batch_size])
                    pixels, mask = pixels.to(device), mask.to(device)
                    objective = model.attack_objective(pixels, mask, prompt, words)
                    adv = pgd_attack(objective, pixels, mask, targets[s:s + batch_size], attack)
                    out += [a[:, : x.shape[1], : x.shape[2]].cpu() for a, x in zip(adv, xs[s:s + batch_size])]
                if device.type == "cuda":
                    torch.cuda.synchronize()
                return time.perf_counter() - start, out

            run(min(4, len(xs)))  # warm-up
            sizes = [int(b) for b in args.batch_sizes.split(",")]
            results = {b: run(b) for b in sizes}
            base_seconds, base = results[sizes[0]]
            print(f"PGD ({args.steps} steps, eps {attack.eps:.4f}) on {len(xs)} images, {config}, "
                  f"{device}, {torch.get_num_threads()} threads")
            print(f"{'batch':>6} {'seconds':>9} {'images/s':>9} {'speed-up':>9} {'max |diff|':>11} "
                  f"{'pixels equal':>13}")
            for b, (seconds, out) in results.items():
                diff = max((o - r).abs().max().item() for o, r in zip(out, base))
                equal = sum(int((o == r).sum()) for o, r in zip(out, base)) / sum(o.numel() for o in out)
                print(f"{b:>6} {seconds:>9.2f} {len(xs) / seconds:>9.1f} {base_seconds / seconds:>8.1f}x "
                      f"{diff:>11.2e} {100 * equal:>12.3f}%")
            best = max(sizes, key=lambda b: base_seconds / results[b][0])
            ratio = base_seconds / results[best][0]
            if config in UNBATCHED_VISION:
                reported(f"PGD attack, {config}, batch {best} vs one image at a time (per image)", ratio, "x",
                         UNBATCHED_VISION[config])
                continue
            ok &= verdict(f"PGD attack, {config}, batch {best} vs one image at a time (per image)", ratio, TARGET, "x",
                          at_least=True, detail=f"{len(xs) / results[best][0]:.1f} images/s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
