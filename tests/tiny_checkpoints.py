"""Tiny random checkpoints that only the tests load, built from configs as pipelines/tiny_models.py builds
the ones the demo and the benches share (whose vocabulary and towers these reuse)."""

from __future__ import annotations

from pathlib import Path

from pipelines.tiny_models import dual_encoder_towers, minilm_tokenizer, tokenizer, vocabulary


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


def write_tiny_siglip(path: Path) -> Path:
    """A SiglipModel (hidden size 32, 32 px images in 8 px patches) with the MiniLM tokenizer."""
    import torch
    from transformers import SiglipConfig, SiglipImageProcessorPil, SiglipModel

    torch.manual_seed(0)
    config = SiglipConfig(**dual_encoder_towers(16))
    SiglipModel(config).eval().save_pretrained(path)
    minilm_tokenizer().save_pretrained(path)
    SiglipImageProcessorPil(size={"height": 32, "width": 32}).save_pretrained(path)
    return Path(path)
