"""The options every model factory receives (`vlbench predict` and `perceptual` set them)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ModelOptions:
    """What `vlbench predict` passes to a task's model factory."""

    train_file: Path | None = None
    seed: int = 0
    device: str = "auto"
    batch_size: int = 32
    images: Path | None = None
    data: Path | None = None  # the built folder being predicted (fitted baselines read its train split)
    bf16: bool = False  # autocast to bfloat16 (CUDA, or CPU where supported)
    workers: int = 0  # DataLoader workers decoding images
    # Generative VLMs (evaluator/models/generative.py):
    dtype: str = "auto"  # weights' dtype: auto (bfloat16 on CUDA, float32 on CPU), float32, bfloat16, float16
    max_new_tokens: int | None = None  # generation length; None: 16, or 4096 when thinking is on (reasoning.py)
    prompt: str | None = None  # user prompt template with {field}s; None: the benchmark's default
    min_pixels: int | None = None  # image-size bounds, where the processor has them (Qwen2-VL family)
    max_pixels: int | None = None
    loglik: str = "sum"  # a scored continuation's log-likelihood: sum of token log-probs, or mean
    videos: Path | None = None  # video folder: the model sees `frames` frames of a row's video (Social-IQ)
    frames: int = 8  # frames per video, spread evenly from the first to the last (evaluator/models/videos.py)
    system_prompt: str | None = None  # a system turn before every user turn
    chat_template: Path | None = None  # a Jinja chat template replacing the processor's
    gen_kwargs: tuple = ()  # (name, value) decoding arguments (evaluator/models/generation.py)
    stop: tuple[str, ...] = ()  # strings that end a generated answer
    reasoning_tags: tuple | None = None  # ((open, close), ...) markers of thinking; None: the families' own
    chat_template_kwargs: tuple = ()  # (name, value) variables the chat template reads (enable_thinking=true)
    revision: str | None = None  # a hub checkpoint's branch, tag or commit
    attn_implementation: str | None = None  # eager, sdpa, flash_attention_2...: transformers' choice when None
    device_map: str | None = None  # auto, balanced, sequential: spread a model over the devices (accelerate)
    choice_mode: str = "auto"  # multiple choice: loglik, letter, or auto (hf: loglik; openai: letter)
    circular: bool = False  # letter choice asked once per rotation of the options (CircularEval)
    judge: str | None = None  # a model spec reading the letter answers the rules cannot (evaluator/models/judge.py)
    judge_base_url: str | None = None  # an openai: judge's endpoint (None: --base-url)
    judge_cache: Path | None = None  # the response cache of the judge's verdicts
    # Served models, `openai:MODEL` (evaluator/models/served.py):
    base_url: str | None = None  # the OpenAI-compatible endpoint, e.g. http://localhost:8000/v1
    api_key_env: str = "OPENAI_API_KEY"  # the environment variable holding the key (the key is never recorded)
    concurrency: int = 8  # requests in flight
    request_timeout: float = 120.0  # seconds per request
    retries: int = 5  # retries of a request after a 429, a 5xx, a timeout or a dropped connection
    response_cache: Path | None = None  # SQLite file of deterministic responses (evaluator/models/response_cache.py)
    # vLLM's offline engine, `vllm:MODEL` (evaluator/models/vllm_engine.py):
    tensor_parallel_size: int = 1  # GPUs one copy of the model is split over
    data_parallel_size: int = 1  # copies of the model, each on its own GPUs
    gpu_memory_utilization: float | None = None  # share of each GPU's memory vLLM takes (None: vLLM's default)
    max_model_len: int | None = None  # the longest prompt + answer, in tokens (None: the model's own)
    enforce_eager: bool = False  # no CUDA graphs / torch.compile: faster start, slower steps
    engine_args: tuple = ()  # (name, value) of any other vLLM engine argument, checked against vLLM's own


# ModelOptions fields only a vllm: model reads: field -> (command-line flag, default)
VLLM_ONLY = {"tensor_parallel_size": ("--tensor-parallel-size", 1), "data_parallel_size": ("--data-parallel-size", 1),
             "gpu_memory_utilization": ("--gpu-memory-utilization", None),
             "max_model_len": ("--max-model-len", None), "enforce_eager": ("--enforce-eager", False),
             "engine_args": ("--engine-arg", ())}
