"""A tiny reasoning VLM trained in the test: the tiny LLaVA of pipelines/tiny_models.py (hidden size 128, heads
of 32, so vLLM's CPU attention runs it too; `<think>` and `</think>` single tokens, as in Qwen3's tokenizer), with
a chat template in the shape of Qwen3's thinking
templates (the generation prompt opens a `<think>` block unless `enable_thinking` is false), trained on CPU
for a few hundred steps on the rows it is then asked (question and picture) until greedy decoding writes:

- after the thinking prompt (`ASSISTANT: <think>` + newline): THINKING, then `</think>`, a space and ANSWER,
  then `</s>`;
- after the plain prompt (`ASSISTANT:`, with `enable_thinking=false`): a space and ANSWER, then `</s>`.
"""

from __future__ import annotations

from pathlib import Path

THINKING_TEMPLATE = (
    "{% for m in messages %}{{ m['role'].upper() }}: {% for c in m['content'] %}{% if c['type'] == 'image' %}"
    "<image>\n{% else %}{{ c['text'] }}{% endif %}{% endfor %}\n{% endfor %}"
    "{% if add_generation_prompt %}ASSISTANT:{% if enable_thinking is not defined or enable_thinking %} <think>\n"
    "{% endif %}{% endif %}")
THINKING, ANSWER = "hm", "yes"


def write_tiny_thinking_llava(path: Path, rows: list[tuple[str, object]], steps: int = 300) -> Path:
    """Train and save the model (see the module docstring) on `rows`, (question, PIL image) each."""
    import torch
    from transformers import AutoProcessor, LlavaForConditionalGeneration

    from pipelines.tiny_models import vision_tower_weights_for_vllm, write_tiny_llava_for_vllm

    write_tiny_llava_for_vllm(path)
    processor = AutoProcessor.from_pretrained(path)
    processor.chat_template = THINKING_TEMPLATE
    # the markers as single (not special) tokens, as Qwen3's tokenizer has them: vLLM's reasoning parsers need that
    processor.tokenizer.add_tokens(["<think>", "</think>"])
    model = LlavaForConditionalGeneration.from_pretrained(path)
    model.resize_token_embeddings(len(processor.tokenizer))
    eos = processor.tokenizer.eos_token
    texts, images, starts = [], [], []  # every (row, thinking on / off) once, with where its target starts
    for question, image in rows:
        turn = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": question}]}]
        for thinking, target in ((True, f"{THINKING}</think> {ANSWER}{eos}"), (False, f" {ANSWER}{eos}")):
            prompt = processor.apply_chat_template(turn, add_generation_prompt=True, tokenize=False,
                                                   enable_thinking=thinking)
            starts.append(len(processor(text=[prompt], images=[[image]])["input_ids"][0]))
            texts.append(prompt + target)
            images.append([image])
    enc = processor(text=texts, images=images, return_tensors="pt", padding=True, padding_side="right")
    labels = torch.full_like(enc["input_ids"], -100)
    for row, start in enumerate(starts):
        end = int(enc["attention_mask"][row].sum())
        labels[row, start:end] = enc["input_ids"][row, start:end]
    torch.manual_seed(0)
    optimiser = torch.optim.AdamW(model.parameters(), lr=1e-2)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimiser, lambda step: 1 - step / steps)
    model.train()
    for _ in range(steps):  # the whole set is one batch
        model(**enc, labels=labels).loss.backward()
        optimiser.step()
        schedule.step()
        optimiser.zero_grad()
    model.eval().save_pretrained(path)
    processor.save_pretrained(path)
    return vision_tower_weights_for_vllm(path)
