"""`hf:` text-only causal LMs (AutoModelForCausalLM checkpoints: Llama, Qwen2, Mistral, Vicuna...), run by
transformers in-process the way `hf:` VLMs are (evaluator/models/transformers_vlm.py), for the prompts of a
blind run (`--no-image`): a VLM's base LLM, whose score on the text-only prompts measures the multimodal
leakage of Chen et al., *Are We on the Right Way for Evaluating Large Vision-Language Models?*, NeurIPS 2024,
§4 (ML = max(0, S(LVLM without images) - S(its base LLM)); `vlbench suite --base-llm`).

What differs from a VLM: the weights load with AutoModelForCausalLM; the processor is the tokenizer; a
message's content is its text (a text LM's chat template reads a string, not image and text parts). The
prompt text, the answer lead, the continuations and the response cache are the templated base's."""

from __future__ import annotations

from core.errors import ModelError
from core.model_files import load_part
from evaluator.models.options import ModelOptions
from evaluator.models.transformers_vlm import TransformersVLM


class TransformersLM(TransformersVLM):
    """`hf:` a text-only causal LM and its tokenizer, asked the turns of a blind run."""

    auto_model = "AutoModelForCausalLM"

    def __init__(self, path: str, config, options: ModelOptions, chat_template: str | None = None):
        super().__init__(path, config, options, chat_template)
        tokens, rows = len(self.processor), self.model.get_input_embeddings().num_embeddings
        if tokens > rows:  # a token past the embeddings' rows would be an IndexError mid-run
            raise ModelError(f"{self.spec}: its tokenizer has {tokens:,} tokens, more than the {rows:,} rows of the "
                             "model's input embeddings (a tokenizer of another checkpoint, or tokens added without "
                             "resizing the embeddings)")

    def _load_processor(self, path: str, config, options: ModelOptions) -> tuple[object, str | None]:
        from transformers import AutoTokenizer

        return load_part(AutoTokenizer, path, self.spec, "tokenizer",
                         **({"revision": options.revision} if options.revision else {})), None

    def _tokenizer_of(self, processor):
        return processor  # a text LM's processor is its tokenizer

    def content(self, text: str, images: int = 0):
        if images:
            raise ModelError(f"{self.spec}: a text-only LM is shown no image (it answers blind runs: --no-image)")
        return text
