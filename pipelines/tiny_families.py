"""Tiny random checkpoints of the image-text-to-text families transformers ships, each with its processor and
a chat template in the shape of the family's published one (its turn markers, where the image goes, whether
it writes BOS itself), saved offline for `hf:` specs: the tests run every family's prompt ids, answers and
scores against the family's own processor (tests/test_families.py), and the docs' families table marks
them as tested. Hidden sizes of 32 (heads of 8), 2 layers, images of 28-64 px; seeded."""

from __future__ import annotations

import json
from pathlib import Path

from evaluator.models.vlm_checkpoint import without_video
from pipelines.tiny_models import (
    _char_tokenizer,
    write_tiny_llava,
    write_tiny_llava_next,
    write_tiny_qwen2_vl,
)


def _tokenizer(special: list[str], named: dict[str, str], bos: str | None = None,
               newlines: tuple[str, ...] = ("\n\n\n\n", "\n\n\n", "\n\n", "\n")):
    """A character tokenizer whose SPECIAL tokens are never split (added tokens, as a real tokenizer's markers
    are), with NEWLINES as tokens; with BOS, it adds BOS before every text."""
    tokenizer = _char_tokenizer(special, {**named, **({"bos_token": bos} if bos else {})})
    tokenizer.add_tokens(special, special_tokens=True)
    tokenizer.add_tokens(list(newlines))  # newline runs as tokens, as BPE vocabularies have (vLLM reads them)
    return tokenizer if bos is None else _adding_bos(tokenizer, bos)


def _adding_bos(tokenizer, bos: str):
    """TOKENIZER adding BOS before every text, as Gemma's, Llama's and Cohere's tokenizers do."""
    from tokenizers import processors

    tokenizer.backend_tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A", pair=f"{bos} $A $B", special_tokens=[(bos, tokenizer.convert_tokens_to_ids(bos))])
    tokenizer.add_bos_token = True
    return tokenizer


def _text(tokenizer, head_dim: int = 8, **extra) -> dict:
    """A decoder config of 4 heads of HEAD_DIM (hidden size 32 by default; vLLM's CPU attention takes heads of 32
    and more), 2 of them key/value heads, 2 layers."""
    hidden = 4 * head_dim
    return {"vocab_size": len(tokenizer), "hidden_size": hidden, "intermediate_size": hidden + 5,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": head_dim,
            "max_position_embeddings": 1024, **extra}


def _mrope(head_dim: int, rotary: float = 1.0) -> list[int]:
    """M-RoPE's split of the rotary frequency pairs between time, height and width (half, a quarter, the rest)."""
    pairs = int(head_dim * rotary) // 2
    time, height = pairs // 2, (pairs - pairs // 2 + 1) // 2
    return [time, height, pairs - time - height]


def _save(model_class, config, path: Path, processor, seed: int, video: dict | None = None) -> Path:
    """The seeded random model and its processor saved in PATH; with VIDEO (the video processor's type and
    settings), a video_preprocessor_config.json beside them, as the hub's checkpoints have."""
    import torch

    torch.manual_seed(seed)
    model_class(config).eval().save_pretrained(path)
    processor.save_pretrained(path)
    if video is not None:
        settings = {**processor.image_processor.to_dict(), **video}
        settings.pop("image_processor_type", None)
        (Path(path) / "video_preprocessor_config.json").write_text(json.dumps(settings, indent=2, sort_keys=True))
    return Path(path)


def _image_only(processor_class, **parts):
    """PROCESSOR_CLASS built from its image and text parts, saved under its own class name: its video part
    needs torchvision, which building a checkpoint here does without."""
    attributes = [a for a in processor_class.get_attributes() if a != "video_processor"]
    image_only = type(processor_class.__name__, (processor_class,),
                      {"get_attributes": classmethod(lambda cls: attributes)})
    return image_only(**parts, **without_video(processor_class))


GEMMA3_CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<start_of_turn>{{ 'model' if m['role'] == 'assistant' else m['role'] }}\n"
    "{% for c in m['content'] %}{% if c['type'] == 'image' %}<start_of_image>{% else %}{{ c['text'] }}{% endif %}"
    "{% endfor %}<end_of_turn>\n{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}")


def write_tiny_gemma3(path: Path, seed: int = 0, head_dim: int = 8) -> Path:
    """A Gemma3ForConditionalGeneration (a SigLIP tower of 8 px patches on 32 px images, pooled to 4 image
    tokens; a Gemma 3 decoder) whose template writes BOS, over a tokenizer that adds it too."""
    from transformers import Gemma3Config, Gemma3ForConditionalGeneration, Gemma3ImageProcessorPil, Gemma3Processor

    special = ["<unk>", "<pad>", "<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>", "<start_of_image>",
               "<end_of_image>", "<image_soft_token>"]
    tokenizer = _tokenizer(special, {"pad_token": "<pad>", "eos_token": "<eos>", "boi_token": "<start_of_image>",
                                     "eoi_token": "<end_of_image>", "image_token": "<image_soft_token>"}, "<bos>")
    config = Gemma3Config(
        text_config=_text(tokenizer, head_dim, sliding_window=64, pad_token_id=1, bos_token_id=2, eos_token_id=3),
        vision_config={"model_type": "siglip_vision_model", "hidden_size": 32, "intermediate_size": 37,
                       "num_hidden_layers": 2, "num_attention_heads": 4, "image_size": 32, "patch_size": 8},
        mm_tokens_per_image=4, boi_token_index=6, eoi_token_index=7, image_token_index=8,
        architectures=["Gemma3ForConditionalGeneration"])
    processor = Gemma3Processor(image_processor=Gemma3ImageProcessorPil(size={"height": 32, "width": 32}),
                                tokenizer=tokenizer, chat_template=GEMMA3_CHAT_TEMPLATE, image_seq_length=4)
    return _save(Gemma3ForConditionalGeneration, config, path, processor, seed)


def _idefics3_tokenizer(bos: str | None):
    """A character tokenizer with Idefics3's image tokens, its <row_i_col_j> crop tags and <global-img>."""
    crops = [f"<row_{i}_col_{j}>" for i in range(1, 7) for j in range(1, 7)]
    special = ["<unk>", "<pad>", "<|begin_of_text|>", "<|im_start|>", "<end_of_utterance>", "<image>",
               "<fake_token_around_image>", "<global-img>", *crops]
    named = {"pad_token": "<pad>", "eos_token": "<end_of_utterance>", "image_token": "<image>"}
    return _tokenizer(special, named, bos)


def _idefics3_template(start: str) -> str:
    """Idefics3's / SmolVLM's template: START, then `User:<image>text<end_of_utterance>` turns."""
    return (start + "{% for m in messages %}{{ m['role'] | capitalize }}{% if m['content'][0]['type'] == 'image' %}"
            "{{ ':' }}{% else %}{{ ': ' }}{% endif %}{% for c in m['content'] %}{% if c['type'] == 'text' %}"
            "{{ c['text'] }}{% elif c['type'] == 'image' %}<image>{% endif %}{% endfor %}<end_of_utterance>\n"
            "{% endfor %}{% if add_generation_prompt %}Assistant:{% endif %}")


def _idefics3_config(config_class, tokenizer, architecture: str, head_dim: int):
    return config_class(
        vision_config={"hidden_size": 32, "intermediate_size": 37, "num_hidden_layers": 2, "num_attention_heads": 4,
                       "image_size": 32, "patch_size": 8},
        text_config={"model_type": "llama", **_text(tokenizer, head_dim, pad_token_id=1)}, scale_factor=2,
        image_token_id=tokenizer.convert_tokens_to_ids("<image>"), pad_token_id=1, architectures=[architecture])


def write_tiny_idefics3(path: Path, seed: int = 0, head_dim: int = 8) -> Path:
    """An Idefics3ForConditionalGeneration (a 32 px SigLIP-like tower, pixel shuffle to 4 tokens per crop, images
    split into 32 px crops plus a global one; a Llama decoder) whose template writes <|begin_of_text|>, over a
    tokenizer that adds it too (Idefics3-8B-Llama3's shape)."""
    from transformers import (
        Idefics3Config,
        Idefics3ForConditionalGeneration,
        Idefics3ImageProcessorPil,
        Idefics3Processor,
    )

    tokenizer = _idefics3_tokenizer("<|begin_of_text|>")
    config = _idefics3_config(Idefics3Config, tokenizer, "Idefics3ForConditionalGeneration", head_dim)
    image_processor = Idefics3ImageProcessorPil(size={"longest_edge": 64}, max_image_size={"longest_edge": 32})
    processor = Idefics3Processor(image_processor=image_processor, tokenizer=tokenizer, image_seq_len=4,
                                  chat_template=_idefics3_template("<|begin_of_text|>"))
    return _save(Idefics3ForConditionalGeneration, config, path, processor, seed)


def write_tiny_smolvlm(path: Path, seed: int = 0, head_dim: int = 8) -> Path:
    """A SmolVLMForConditionalGeneration (Idefics3's shape; a tokenizer adding no BOS and a template opening with
    <|im_start|>, as SmolVLM's), saved with its video processor's settings as the hub's checkpoints are."""
    from transformers import SmolVLMConfig, SmolVLMForConditionalGeneration, SmolVLMImageProcessorPil, SmolVLMProcessor

    tokenizer = _idefics3_tokenizer(None)
    config = _idefics3_config(SmolVLMConfig, tokenizer, "SmolVLMForConditionalGeneration", head_dim)
    image_processor = SmolVLMImageProcessorPil(size={"longest_edge": 64}, max_image_size={"longest_edge": 32})
    video = {"video_processor_type": "SmolVLMVideoProcessor", "num_frames": 64, "fps": 1}  # as the hub's
    processor = _image_only(SmolVLMProcessor,
                            image_processor=image_processor, tokenizer=tokenizer, image_seq_len=4,
                            chat_template=_idefics3_template("<|im_start|>"))
    return _save(SmolVLMForConditionalGeneration, config, path, processor, seed, video)


AYA_VISION_CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|START_OF_TURN_TOKEN|>"
    "{{ '<|CHATBOT_TOKEN|>' if m['role'] == 'assistant' else '<|' + m['role'].upper() + '_TOKEN|>' }}"
    "{% for c in m['content'] %}{% if c['type'] == 'image' %}<image>{% else %}{{ c['text'] }}{% endif %}{% endfor %}"
    "<|END_OF_TURN_TOKEN|>{% endfor %}{% if add_generation_prompt %}<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>"
    "{% endif %}")


def write_tiny_aya_vision(path: Path, seed: int = 0) -> Path:
    """An AyaVisionForConditionalGeneration (a SigLIP tower of 8 px patches on 32 px tiles, pixel shuffle by 2
    to 4 tokens per tile, a global tile after at most 2 crops; a Cohere 2 decoder) whose template writes
    <BOS_TOKEN>, over a tokenizer that adds it too (Cohere's)."""
    from transformers import (
        AyaVisionConfig,
        AyaVisionForConditionalGeneration,
        AyaVisionProcessor,
        GotOcr2ImageProcessorPil,
    )

    special = ["<UNK>", "<PAD>", "<BOS_TOKEN>", "<|END_OF_TURN_TOKEN|>", "<|START_OF_TURN_TOKEN|>", "<|USER_TOKEN|>",
               "<|SYSTEM_TOKEN|>", "<|CHATBOT_TOKEN|>", "<image>", "<|START_OF_IMG|>", "<|END_OF_IMG|>",
               "<|IMG_PATCH|>", "<|IMG_LINE_BREAK|>", "TILE", "TILE_GLOBAL"]
    tokenizer = _tokenizer(special, {"pad_token": "<PAD>", "eos_token": "<|END_OF_TURN_TOKEN|>",
                                     "image_token": "<image>"}, "<BOS_TOKEN>")
    config = AyaVisionConfig(
        vision_config={"model_type": "siglip_vision_model", "hidden_size": 32, "intermediate_size": 37,
                       "num_hidden_layers": 2, "num_attention_heads": 4, "image_size": 32, "patch_size": 8},
        text_config={"model_type": "cohere2", **_text(tokenizer, sliding_window=64, pad_token_id=1, bos_token_id=2,
                                                      eos_token_id=3)},
        downsample_factor=2, image_token_index=tokenizer.convert_tokens_to_ids("<|IMG_PATCH|>"),
        architectures=["AyaVisionForConditionalGeneration"])
    image_processor = GotOcr2ImageProcessorPil(size={"height": 32, "width": 32}, crop_to_patches=True, min_patches=1,
                                               max_patches=2)
    processor = AyaVisionProcessor(image_processor=image_processor, tokenizer=tokenizer, patch_size=8, img_size=32,
                                   downsample_factor=2, chat_template=AYA_VISION_CHAT_TEMPLATE)
    return _save(AyaVisionForConditionalGeneration, config, path, processor, seed)


QWEN_SPECIAL = ["<unk>", "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
                "<|image_pad|>", "<|video_pad|>"]


def _qwen_template(generation_prompt: str) -> str:
    """The Qwen-VL ChatML template: <|im_start|>role turns, each image as <|vision_start|><|image_pad|>
    <|vision_end|>; GENERATION_PROMPT opens the answer."""
    return ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{% for c in m['content'] %}"
            "{% if c['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>{% else %}{{ c['text'] }}"
            "{% endif %}{% endfor %}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}" + generation_prompt
            + "{% endif %}")


# Qwen3.5's generation prompt opens a thinking block unless enable_thinking is false
QWEN3_5_GENERATION_PROMPT = ("<|im_start|>assistant\n{% if enable_thinking is defined and enable_thinking is false %}"
                             "<think>\n\n</think>\n\n{% else %}<think>\n{% endif %}")


def _write_qwen_family(path: Path, seed: int, head_dim: int, model_type: str, vision: dict, text: dict, patch: int,
                       generation_prompt: str = "<|im_start|>assistant\n") -> Path:
    """A Qwen-VL family checkpoint (Qwen2.5-VL, Qwen3-VL, Qwen3.5): M-RoPE over 4 rotary pairs, a vision tower of
    PATCH px patches merged 2x2, images resized to 4-16 merged patches; its processor saved as the hub's, the
    video part's settings beside it."""
    import transformers
    from transformers import AutoConfig, AutoModelForImageTextToText, Qwen2VLImageProcessorPil
    from transformers.models.auto.processing_auto import PROCESSOR_MAPPING_NAMES

    tokenizer = _tokenizer(QWEN_SPECIAL, {"pad_token": "<|endoftext|>", "eos_token": "<|im_end|>",
                                          "image_token": "<|image_pad|>", "video_token": "<|video_pad|>",
                                          "vision_start_token": "<|vision_start|>",
                                          "vision_end_token": "<|vision_end|>"})
    if model_type != "qwen2_5_vl":
        tokenizer.add_tokens(["<think>", "</think>"])  # Qwen3's thinking markers: added tokens, not special ones
    ids = {f"{k}_token_id": tokenizer.convert_tokens_to_ids(t) for k, t in (
        ("image", "<|image_pad|>"), ("video", "<|video_pad|>"), ("vision_start", "<|vision_start|>"),
        ("vision_end", "<|vision_end|>"))}
    config = AutoConfig.for_model(model_type, text_config=_text(tokenizer, head_dim, pad_token_id=1, bos_token_id=None,
                                                                eos_token_id=3, **text),
                                  vision_config={"depth": 2, "hidden_size": 32, "intermediate_size": 37,
                                                 "num_heads": 4, "out_hidden_size": 4 * head_dim, "patch_size": patch,
                                                 "spatial_merge_size": 2, "temporal_patch_size": 2, **vision},
                                  **ids)
    config.architectures = [AutoModelForImageTextToText._model_mapping[type(config)].__name__]
    pixels = (patch * 2) ** 2
    image_processor = Qwen2VLImageProcessorPil(min_pixels=4 * pixels, max_pixels=16 * pixels, patch_size=patch,
                                               merge_size=2, temporal_patch_size=2)
    processor_class = getattr(transformers, PROCESSOR_MAPPING_NAMES[model_type])
    processor = _image_only(processor_class,
                            image_processor=image_processor, tokenizer=tokenizer,
                            chat_template=_qwen_template(generation_prompt))
    return _save(AutoModelForImageTextToText._model_mapping[type(config)], config, path, processor, seed,
                 {"video_processor_type": "Qwen2VLVideoProcessor"})


def write_tiny_qwen2_5_vl(path: Path, seed: int = 0, head_dim: int = 8) -> Path:
    """A Qwen2_5_VLForConditionalGeneration: window attention in its vision tower (the second block full)."""
    return _write_qwen_family(path, seed, head_dim, "qwen2_5_vl", {"window_size": 56, "fullatt_block_indexes": [1]},
                              {"rope_parameters": {"rope_type": "default", "mrope_section": _mrope(head_dim)}}, 14)


def write_tiny_qwen3_vl(path: Path, seed: int = 0, head_dim: int = 8) -> Path:
    """A Qwen3VLForConditionalGeneration: 16 px patches, learned position embeddings interpolated, DeepStack
    features of the first block fed to the decoder, interleaved M-RoPE."""
    return _write_qwen_family(path, seed, head_dim, "qwen3_vl",
                              {"num_position_embeddings": 16, "deepstack_visual_indexes": [0]},
                              {"rope_parameters": {"rope_type": "default", "mrope_section": _mrope(head_dim),
                                                   "mrope_interleaved": True}}, 16)


def write_tiny_qwen3_5(path: Path, seed: int = 0, head_dim: int = 8) -> Path:
    """A Qwen3_5ForConditionalGeneration: a hybrid decoder (a gated linear-attention layer with key and value heads
    of 4 x HEAD_DIM, 128 where vLLM runs it, whose CPU kernel takes 128; then a full-attention
    one) and a generation prompt that opens a thinking block unless `enable_thinking` is false."""
    return _write_qwen_family(path, seed, head_dim, "qwen3_5", {"num_position_embeddings": 16},
                              {"layer_types": ["linear_attention", "full_attention"],
                               "linear_key_head_dim": 4 * head_dim, "linear_value_head_dim": 4 * head_dim,
                               "linear_num_key_heads": 2, "linear_num_value_heads": 4,
                               "rope_parameters": {"rope_type": "default", "mrope_section": _mrope(head_dim),
                                                   "mrope_interleaved": True, "partial_rotary_factor": 1.0}},
                              16, QWEN3_5_GENERATION_PROMPT)


GLM4V_CHAT_TEMPLATE = (
    "[gMASK]<sop>{% for m in messages %}<|{{ m['role'] }}|>\n{% for c in m['content'] %}{% if c['type'] == 'image' %}"
    "<|begin_of_image|><|image|><|end_of_image|>{% else %}{{ c['text'] }}{% endif %}{% endfor %}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% if enable_thinking is defined and enable_thinking is false %}"
    "<think></think>\n{% endif %}{% endif %}")


def write_tiny_glm4v(path: Path, seed: int = 0, head_dim: int = 8) -> Path:
    """A Glm4vForConditionalGeneration (GLM-4.1V's shape: a vision tower of 14 px patches merged 2x2, M-RoPE;
    its template's [gMASK]<sop> prefix, <|user|> / <|assistant|> turns and `enable_thinking` switch)."""
    from transformers import Glm4vConfig, Glm4vForConditionalGeneration, Glm4vImageProcessorPil, Glm4vProcessor

    special = ["<unk>", "<|endoftext|>", "[gMASK]", "<sop>", "<|user|>", "<|assistant|>", "<|system|>",
               "<|begin_of_image|>", "<|end_of_image|>", "<|image|>", "<|begin_of_video|>", "<|end_of_video|>",
               "<|video|>"]
    tokenizer = _tokenizer(special, {"pad_token": "<|endoftext|>", "eos_token": "<|user|>", "image_token": "<|image|>",
                                     "video_token": "<|video|>"})
    token = tokenizer.convert_tokens_to_ids
    config = Glm4vConfig(
        text_config={**_text(tokenizer, head_dim, pad_token_id=1), "rope_parameters": {
            "rope_type": "default", "mrope_section": _mrope(head_dim, 0.5), "partial_rotary_factor": 0.5}},
        vision_config={"depth": 2, "hidden_size": 32, "intermediate_size": 37, "num_heads": 4,
                       "out_hidden_size": 4 * head_dim,
                       "image_size": 28, "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2},
        image_token_id=token("<|image|>"), video_token_id=token("<|video|>"),
        image_start_token_id=token("<|begin_of_image|>"), image_end_token_id=token("<|end_of_image|>"),
        video_start_token_id=token("<|begin_of_video|>"), video_end_token_id=token("<|end_of_video|>"),
        architectures=["Glm4vForConditionalGeneration"])
    image_processor = Glm4vImageProcessorPil(size={"shortest_edge": 4 * 28 * 28, "longest_edge": 16 * 28 * 28},
                                             patch_size=14, merge_size=2, temporal_patch_size=2)
    processor = _image_only(Glm4vProcessor,
                            image_processor=image_processor, tokenizer=tokenizer, chat_template=GLM4V_CHAT_TEMPLATE)
    return _save(Glm4vForConditionalGeneration, config, path, processor, seed,
                 {"video_processor_type": "Glm4vVideoProcessor"})


def write_tiny_ovis2(path: Path, seed: int = 0) -> Path:
    """An Ovis2ForConditionalGeneration (a vision tower of 14 px patches on 56 px images, 2x2 strides to 4 visual
    tokens, each a probability over a visual vocabulary of 64 embeddings, and its 5 indicator tokens; a Qwen2
    decoder) with a ChatML template writing `<image>` then a newline, as Ovis2's."""
    from transformers import Ovis2Config, Ovis2ForConditionalGeneration, Ovis2ImageProcessorPil, Ovis2Processor

    indicators = ["<IMG_START>", "<IMG_GRID>", "<IMG_COL>", "<IMG_ROW>", "<IMG_END>"]
    special = ["<unk>", "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<image>", "<IMG_ATOM>", *indicators]
    tokenizer = _tokenizer(special, {"pad_token": "<|endoftext|>", "eos_token": "<|im_end|>", "image_token": "<image>"})
    config = Ovis2Config(
        vision_config={"hidden_size": 32, "intermediate_size": 37, "num_hidden_layers": 2, "num_attention_heads": 4,
                       "image_size": 56, "patch_size": 14, "hidden_stride": 2, "vocab_size": 64},
        text_config={"model_type": "qwen2", **_text(tokenizer, pad_token_id=1, eos_token_id=3)},
        image_token_id=tokenizer.convert_tokens_to_ids("<IMG_ATOM>"),
        visual_indicator_token_ids=tokenizer.convert_tokens_to_ids(indicators), vocab_size=len(tokenizer),
        hidden_size=32, architectures=["Ovis2ForConditionalGeneration"])
    template = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{% for c in m['content'] %}"
                "{% if c['type'] == 'image' %}<image>\n{% else %}{{ c['text'] }}{% endif %}{% endfor %}<|im_end|>\n"
                "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    processor = Ovis2Processor(image_processor=Ovis2ImageProcessorPil(size={"height": 56, "width": 56}),
                               tokenizer=tokenizer, chat_template=template, image_seq_length=4)
    return _save(Ovis2ForConditionalGeneration, config, path, processor, seed)


def write_tiny_llava_onevision(path: Path, seed: int = 0, head_dim: int = 8) -> Path:
    """A LlavaOnevisionForConditionalGeneration (a SigLIP tower of 8 px patches on 32 px crops, "anyres" tiling
    up to 64 px, a Qwen2 decoder, ChatML) saved with its video processor's settings, as the hub's."""
    from transformers import (
        LlavaOnevisionConfig,
        LlavaOnevisionForConditionalGeneration,
        LlavaOnevisionImageProcessorPil,
        LlavaOnevisionProcessor,
    )

    tokenizer = _tokenizer(["<unk>", "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<image>", "<video>"],
                           {"pad_token": "<|endoftext|>", "eos_token": "<|im_end|>", "image_token": "<image>",
                            "video_token": "<video>"})
    pinpoints = [[32, 32], [32, 64], [64, 32], [64, 64]]
    config = LlavaOnevisionConfig(
        vision_config={"model_type": "siglip_vision_model", "hidden_size": 32, "intermediate_size": 37,
                       "num_hidden_layers": 2, "num_attention_heads": 4, "image_size": 32, "patch_size": 8},
        text_config={"model_type": "qwen2", **_text(tokenizer, head_dim, pad_token_id=1, eos_token_id=3)},
        image_token_index=4, video_token_index=5, image_grid_pinpoints=pinpoints,
        architectures=["LlavaOnevisionForConditionalGeneration"])
    template = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{% for c in m['content'] %}"
                "{% if c['type'] == 'image' %}<image>\n{% else %}{{ c['text'] }}{% endif %}{% endfor %}<|im_end|>\n"
                "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    image_processor = LlavaOnevisionImageProcessorPil(size={"height": 32, "width": 32}, image_grid_pinpoints=pinpoints)
    processor = _image_only(LlavaOnevisionProcessor,
                            image_processor=image_processor, tokenizer=tokenizer, num_image_tokens=16,
                            vision_feature_select_strategy="full", vision_aspect_ratio="anyres_max_9",
                            chat_template=template)
    return _save(LlavaOnevisionForConditionalGeneration, config, path, processor, seed,
                 {"video_processor_type": "LlavaOnevisionVideoProcessor"})


def write_tiny_internvl(path: Path, seed: int = 0, head_dim: int = 8) -> Path:
    """An InternVLForConditionalGeneration (InternViT's shape: 14 px patches on 56 px tiles, pixel shuffle by 0.5
    to 4 tokens per tile between <img> and </img>; a Qwen2 decoder, ChatML)."""
    from transformers import (
        GotOcr2ImageProcessorPil,
        InternVLConfig,
        InternVLForConditionalGeneration,
        InternVLProcessor,
    )

    tokenizer = _tokenizer(["<unk>", "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<img>", "</img>", "<IMG_CONTEXT>",
                            "<video>"],
                           {"pad_token": "<|endoftext|>", "eos_token": "<|im_end|>", "start_image_token": "<img>",
                            "end_image_token": "</img>", "context_image_token": "<IMG_CONTEXT>",
                            "video_token": "<video>"})
    config = InternVLConfig(
        vision_config={"hidden_size": 32, "intermediate_size": 37, "num_hidden_layers": 2, "num_attention_heads": 4,
                       "image_size": [56, 56], "patch_size": [14, 14]},
        text_config={"model_type": "qwen2", **_text(tokenizer, head_dim, pad_token_id=1, eos_token_id=3)},
        image_token_id=tokenizer.convert_tokens_to_ids("<IMG_CONTEXT>"), image_seq_length=4,
        architectures=["InternVLForConditionalGeneration"])
    template = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{% for c in m['content'] %}"
                "{% if c['type'] == 'image' %}<IMG_CONTEXT>\n{% else %}{{ c['text'] }}{% endif %}{% endfor %}"
                "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    image_processor = GotOcr2ImageProcessorPil(size={"height": 56, "width": 56}, crop_to_patches=True, min_patches=1,
                                               max_patches=2)
    processor = _image_only(InternVLProcessor,
                            image_processor=image_processor, tokenizer=tokenizer, image_seq_length=4,
                            chat_template=template)
    return _save(InternVLForConditionalGeneration, config, path, processor, seed,
                 {"video_processor_type": "InternVLVideoProcessor"})


def write_tiny_paligemma(path: Path, seed: int = 0) -> Path:
    """A PaliGemmaForConditionalGeneration (a SigLIP tower with 8 px patches on 32 px images, 16 image tokens; a
    Gemma 2 decoder of hidden size 32) with its PaliGemmaProcessor and, as the published checkpoints, no chat
    template: the family prompted by its prefix format (evaluator/models/families.py)."""
    import torch
    from transformers import (
        PaliGemmaConfig,
        PaliGemmaForConditionalGeneration,
        PaliGemmaProcessor,
        SiglipImageProcessorPil,
    )

    tokenizer = _char_tokenizer(["<unk>", "<pad>", "<bos>", "<eos>", "<image>"],
                                {"pad_token": "<pad>", "bos_token": "<bos>", "eos_token": "<eos>",
                                 "image_token": "<image>"})
    torch.manual_seed(seed)
    config = PaliGemmaConfig(
        text_config={"model_type": "gemma2", "vocab_size": len(tokenizer), "hidden_size": 32, "intermediate_size": 37,
                     "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8,
                     "max_position_embeddings": 512},
        vision_config={"hidden_size": 32, "intermediate_size": 37, "num_hidden_layers": 2, "num_attention_heads": 4,
                       "image_size": 32, "patch_size": 8, "projection_dim": 32},
        image_token_index=4, projection_dim=32, hidden_size=32, pad_token_id=1, bos_token_id=2, eos_token_id=3,
        architectures=["PaliGemmaForConditionalGeneration"])
    PaliGemmaForConditionalGeneration(config).eval().save_pretrained(path)
    image_processor = SiglipImageProcessorPil(size={"height": 32, "width": 32})
    image_processor.image_seq_length = 16
    PaliGemmaProcessor(image_processor=image_processor, tokenizer=tokenizer).save_pretrained(path)
    return Path(path)


def write_tiny_mllama(path: Path, seed: int = 0) -> Path:
    """A MllamaForConditionalGeneration (Llama 3.2 Vision's shape: a tiled vision tower of 28 px tiles, at most 2,
    a decoder of 3 layers whose second cross-attends to the image) with its MllamaProcessor and a chat template
    that, as Llama 3.2 Vision's, writes BOS itself."""
    import torch
    from transformers import MllamaConfig, MllamaForConditionalGeneration, MllamaImageProcessorPil, MllamaProcessor

    tokenizer = _char_tokenizer(["<unk>", "<pad>", "<|begin_of_text|>", "<|eot_id|>", "<|image|>"],
                                {"pad_token": "<pad>", "bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>",
                                 "image_token": "<|image|>"})
    torch.manual_seed(seed)
    config = MllamaConfig(
        vision_config={"hidden_size": 32, "num_hidden_layers": 2, "num_global_layers": 1, "attention_heads": 4,
                       "intermediate_size": 37, "vision_output_dim": 64, "image_size": 28, "patch_size": 14,
                       "max_num_tiles": 2, "intermediate_layers_indices": [0],
                       "supported_aspect_ratios": [[1, 1], [1, 2], [2, 1]]},
        text_config={"vocab_size": len(tokenizer), "hidden_size": 32, "intermediate_size": 37, "num_hidden_layers": 3,
                     "num_attention_heads": 4, "num_key_value_heads": 2, "cross_attention_layers": [1],
                     "max_position_embeddings": 512, "pad_token_id": 1, "bos_token_id": 2, "eos_token_id": 3},
        image_token_index=4, architectures=["MllamaForConditionalGeneration"])
    MllamaForConditionalGeneration(config).eval().save_pretrained(path)
    template = ("<|begin_of_text|>{% for m in messages %}{{ m['role'] }}: {% for c in m['content'] %}"
                "{% if c['type'] == 'image' %}<|image|>{% else %}{{ c['text'] }}{% endif %}{% endfor %}\n{% endfor %}"
                "{% if add_generation_prompt %}assistant:{% endif %}")
    MllamaProcessor(image_processor=MllamaImageProcessorPil(size={"height": 28, "width": 28}, max_image_tiles=2),
                    tokenizer=tokenizer, chat_template=template).save_pretrained(path)
    return Path(path)


MISTRAL3_CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}{% if m['role'] == 'system' %}[SYSTEM_PROMPT]"
    "{% for c in m['content'] %}{{ c['text'] }}{% endfor %}[/SYSTEM_PROMPT]{% elif m['role'] == 'user' %}[INST]"
    "{% for c in m['content'] %}{% if c['type'] == 'image' %}[IMG]{% else %}{{ c['text'] }}{% endif %}{% endfor %}"
    "[/INST]{% else %}{% for c in m['content'] %}{{ c['text'] }}{% endfor %}{{ eos_token }}{% endif %}{% endfor %}")


def write_tiny_mistral3(path: Path, seed: int = 0) -> Path:
    """A Mistral3ForConditionalGeneration (Mistral Small 3.1's shape: a Pixtral tower of 8 px patches, images
    resized to a longest edge of 32 px in whole 16 px squares, 2 x 2 patches merged per image token, rows closed by
    [IMG_BREAK] and the image by [IMG_END]; a Mistral decoder) whose [INST] template writes <s>, over a tokenizer
    that adds it too. Its processor_config.json names transformers' PixtralProcessor, as the published
    checkpoints' do; without torchvision vlbench builds evaluator/models/pixtral.py's in its place."""
    from transformers import Mistral3Config, Mistral3ForConditionalGeneration, PixtralImageProcessorPil

    from evaluator.models.pixtral import PixtralProcessorPil

    special = ["<unk>", "<pad>", "<s>", "</s>", "[INST]", "[/INST]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]", "[IMG]",
               "[IMG_BREAK]", "[IMG_END]"]
    tokenizer = _tokenizer(special, {"pad_token": "<pad>", "eos_token": "</s>", "image_token": "[IMG]"}, "<s>")
    config = Mistral3Config(
        text_config={"model_type": "mistral", **_text(tokenizer, pad_token_id=1, bos_token_id=2, eos_token_id=3)},
        vision_config={"model_type": "pixtral", "hidden_size": 32, "intermediate_size": 37, "num_hidden_layers": 2,
                       "num_attention_heads": 4, "head_dim": 8, "image_size": 32, "patch_size": 8},
        spatial_merge_size=2, image_token_index=tokenizer.convert_tokens_to_ids("[IMG]"),
        multimodal_projector_bias=False, architectures=["Mistral3ForConditionalGeneration"])
    processor = PixtralProcessorPil(image_processor=PixtralImageProcessorPil(size={"longest_edge": 32},
                                                                             patch_size={"height": 8, "width": 8}),
                                    tokenizer=tokenizer, patch_size=8, spatial_merge_size=2,
                                    chat_template=MISTRAL3_CHAT_TEMPLATE)
    _save(Mistral3ForConditionalGeneration, config, path, processor, seed)
    saved = json.loads((Path(path) / "processor_config.json").read_text())
    (Path(path) / "processor_config.json").write_text(json.dumps({**saved, "processor_class": "PixtralProcessor"},
                                                                 indent=2, sort_keys=True))
    return Path(path)


# The families whose tiny checkpoint the tests run (model type -> writer), for the docs' families table.
TINY_FAMILIES = {"llava": write_tiny_llava, "llava_next": write_tiny_llava_next, "qwen2_vl": write_tiny_qwen2_vl,
                 "qwen2_5_vl": write_tiny_qwen2_5_vl, "qwen3_vl": write_tiny_qwen3_vl, "qwen3_5": write_tiny_qwen3_5,
                 "paligemma": write_tiny_paligemma, "mllama": write_tiny_mllama, "gemma3": write_tiny_gemma3,
                 "idefics3": write_tiny_idefics3, "smolvlm": write_tiny_smolvlm, "aya_vision": write_tiny_aya_vision,
                 "glm4v": write_tiny_glm4v, "ovis2": write_tiny_ovis2, "llava_onevision": write_tiny_llava_onevision,
                 "internvl": write_tiny_internvl, "mistral3": write_tiny_mistral3}
# Those whose tiny checkpoint (heads of 32) the tests also run through vllm: (tests/test_families.py; LLaVA's in
# tests/test_vllm.py); Qwen3.5 there in bfloat16, which vLLM's CPU build requires of its linear-attention layers.
VLLM_TINY_FAMILIES = ("llava_next", "qwen2_vl", "gemma3", "idefics3", "smolvlm", "qwen2_5_vl", "qwen3_vl", "qwen3_5",
                      "glm4v", "llava_onevision", "internvl")
