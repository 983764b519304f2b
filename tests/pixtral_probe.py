"""Encode images of several shapes with a checkpoint's processor and print what it gives, as JSON: run in the
vLLM venv (torchvision installed) it is transformers' own PixtralProcessor, the reference for vlbench's build of it
without torchvision (evaluator/models/pixtral.py; tests/test_families.py).

    python pixtral_probe.py CHECKPOINT
"""

import json
import sys

import numpy as np
from PIL import Image
from transformers import AutoProcessor

SHAPES = [(32, 32), (40, 24), (24, 40), (100, 7), (9, 9), (64, 48)]  # width, height
TEXT = "<s>[INST]What is this?[IMG][/INST]"


def image(width: int, height: int) -> Image.Image:
    return Image.fromarray((np.arange(width * height * 3) % 251).astype("uint8").reshape(height, width, 3))


if __name__ == "__main__":
    processor = AutoProcessor.from_pretrained(sys.argv[1])
    encoded = [processor(images=[image(w, h)], text=[TEXT], return_tensors="np") for w, h in SHAPES]
    print(json.dumps({"class": type(processor).__name__,
                      "encoded": [{"input_ids": e["input_ids"][0].tolist(), "image_sizes": e["image_sizes"].tolist(),
                                   "pixel_values": np.asarray(e["pixel_values"]).tolist()} for e in encoded]}))
