"""Families prompted by a documented prefix format instead of a chat template.

PaliGemma (and PaliGemma 2) ship no chat template: they were trained on task prefixes, `answer en {question}`
for question answering (Beyer et al., *PaliGemma: A versatile 3B VLM for transfer*, arXiv 2024, the task
prefixes of its transfer tasks; the big_vision PaliGemma README lists them). Its processor writes the image
tokens, BOS, the prefix and a newline; an answer follows as a *suffix*, the only part its attention reads causally (the
prefix, image included, is attended bidirectionally: token type 0; the suffix: token type 1). So:

- the family's default prompt replaces the benchmark's (`answer en {question}` where the benchmark asks a
  question; `answer en ` before the benchmark's own prompt elsewhere); `--prompt` still replaces it;
- a scored continuation is a suffix (token type 1), as `PaliGemmaProcessor(suffix=...)` marks it: with type
  0 each answer token would see the tokens after it and its log-likelihood would be wrong;
- no system turn (the format has none) and no `--chat-template-kwarg`;
- every prompt shows an image (`needs_image`: its processor refuses a prompt without one): a benchmark whose
  prompts show none in this run (Social-IQ without `--videos`) is refused in one line before any weight is read.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PrefixFormat:
    """How a family without a chat template is prompted."""

    model_type: str
    question_template: str  # the default prompt where the benchmark asks a {question}
    prefix: str  # put before the benchmark's own default prompt elsewhere
    after_prompt: str  # what the processor writes between the prompt and an answer
    suffix_token_type: int  # the token type of an answer's tokens
    source: str
    needs_image: bool = True  # the processor refuses a prompt without an image

    def default_prompt(self, ask) -> str:
        """The family's default prompt for a benchmark's Ask."""
        return self.question_template if "question" in ask.fields else self.prefix + ask.default_prompt


PREFIX_FORMATS = {
    "paligemma": PrefixFormat("paligemma", "answer en {question}", "answer en ", "\n", 1,
                              "Beyer et al., PaliGemma (arXiv 2024): task prefixes; the processor writes the image "
                              "tokens, <bos>, the prefix and a newline, and the answer is the suffix"),
}


def prefix_format(config, chat_template: str | None = None) -> PrefixFormat | None:
    """The prefix format of a checkpoint's family, unless `--chat-template` gives it a template."""
    return None if chat_template is not None else PREFIX_FORMATS.get(getattr(config, "model_type", None))


def refusal(config) -> str | None:
    """Why a checkpoint of an image-text-to-text family is not asked by vlbench's hf: and vllm: backends, or None.
    An encoder-decoder (Florence-2, Pix2Struct, UDOP, T5Gemma 2...) decodes its answer from an encoded image
    and prompt, and its task prompts (Florence-2's `<CAPTION>`, `<OCR>`, `<OD>`...) include no question
    answering; vlbench's backends write the prompt and the answer as one decoder sequence, so they would
    score it wrongly."""
    if getattr(config, "is_encoder_decoder", False):
        return (f"a {config.model_type} model is an encoder-decoder (its answer is decoded from the encoded image "
                "and prompt); vlbench asks decoder-only VLMs, whose prompt and answer are one sequence")
    return None


def causal_multimodal(config) -> bool:
    """A multimodal causal LM transformers does not list as image-text-to-text (Phi-4-multimodal: its
    processor has an image part, its class is AutoModelForCausalLM's)."""
    import transformers
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    from transformers.models.auto.processing_auto import PROCESSOR_MAPPING_NAMES

    model_type = getattr(config, "model_type", None)
    processor = getattr(transformers, PROCESSOR_MAPPING_NAMES.get(model_type) or "", None)
    if model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES or processor is None:
        return False
    try:
        return "image_processor" in processor.get_attributes()
    except (ImportError, AttributeError):
        return False


def families_rows(tested: set[str], tested_vllm: set[str] = frozenset()) -> list[dict]:
    """Every image-text-to-text family of the installed transformers: its processor, whether the processor's
    video part needs torchvision, how vlbench prompts it, whether `vllm:` builds its prompts, and whether a
    tiny checkpoint of it runs in the tests (`tested`: model types; `tested_vllm`: also through vllm:)."""
    import transformers
    from transformers import AutoConfig
    from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES
    from transformers.models.auto.processing_auto import PROCESSOR_MAPPING_NAMES

    rows = []
    for model_type in sorted(MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES):
        name = PROCESSOR_MAPPING_NAMES.get(model_type)
        try:
            processor = getattr(transformers, name) if name else None
            attributes = processor.get_attributes() if processor is not None else []
        except (ImportError, AttributeError):
            attributes = []
        prefix = PREFIX_FORMATS.get(model_type)
        try:
            refused = refusal(AutoConfig.for_model(model_type)) is not None
        except (ValueError, TypeError, KeyError):
            refused = False
        prompted = "not asked (encoder-decoder)" if refused else \
            f"prefix format `{prefix.question_template}`" if prefix else "its chat template"
        rows.append({"family": model_type, "processor": name or "-",
                     "video": any("video" in a for a in attributes), "prompted_by": prompted,
                     "vllm": "no (encoder-decoder)" if refused else "no (prefix format)" if prefix else
                     "yes (tested)" if model_type in tested_vllm else "where vLLM runs the family",
                     "tested": model_type in tested})
    return rows
