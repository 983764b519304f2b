"""Tiny random masked LMs built from configs, with a small local vocabulary (every word of the VL-Bias
templates, bias prompt, gender pairs and target lists), so that `vlbench demo` and the tests run
CounterBias offline. Seeded: the same folder every time."""

from __future__ import annotations

import re
from pathlib import Path

from builders.vl_bias.words import BIAS_PROMPT, GENDER_PAIRS, TARGETS, TEMPLATES

SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
EXTRA_GENDERS = ("gentleman", "lady")


def vocabulary() -> dict[str, int]:
    text = " ".join([BIAS_PROMPT.replace("[MASK]", ""), *(t.text.replace("[MASK]", "") for t in TEMPLATES.values())])
    words = set(re.findall(r"[a-z]+", text.lower().replace("{gender}", "")))
    words |= {w for pair in GENDER_PAIRS for w in pair.split(":")} | set(EXTRA_GENDERS)
    words |= {w for ws in TARGETS.values() for w in ws}
    return {w: i for i, w in enumerate(SPECIAL + sorted(words))}


def tokenizer():
    from transformers import BertTokenizer

    return BertTokenizer(vocab=vocabulary())


def write_tiny_vilt_mlm(path: Path, seed: int = 0, initializer_range: float = 0.2) -> Path:
    """A ViltForMaskedLM (hidden size 32, 2 layers, 32 px images in 8 px patches)."""
    import torch
    from transformers import ViltConfig, ViltForMaskedLM, ViltImageProcessorPil

    torch.manual_seed(seed)
    config = ViltConfig(vocab_size=len(vocabulary()), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=37, image_size=32, patch_size=8, max_position_embeddings=40,
                        max_image_length=-1, initializer_range=initializer_range, pad_token_id=0,
                        architectures=["ViltForMaskedLM"])
    ViltForMaskedLM(config).eval().save_pretrained(path)
    tokenizer().save_pretrained(path)
    ViltImageProcessorPil(size={"shortest_edge": 32}, size_divisor=8).save_pretrained(path)
    return Path(path)


def write_tiny_bert_mlm(path: Path, seed: int = 0) -> Path:
    """A text-only BertForMaskedLM of the same vocabulary (Table 3's BERT comparison)."""
    import torch
    from transformers import BertConfig, BertForMaskedLM

    torch.manual_seed(seed)
    config = BertConfig(vocab_size=len(vocabulary()), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=37, max_position_embeddings=64, initializer_range=0.2)
    BertForMaskedLM(config).eval().save_pretrained(path)
    tokenizer().save_pretrained(path)
    return Path(path)
