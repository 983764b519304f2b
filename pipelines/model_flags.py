"""The command-line flags of a model (`evaluator.models.options.ModelOptions`), declared once: every
command that runs a model (`predict`, `perceptual`) takes them through `@with_model_flags`, and its
`--help` ends with each benchmark's model menu (read from the tasks when help is asked for)."""

from __future__ import annotations

import functools
import inspect
from pathlib import Path
from typing import Literal, Optional

import typer
from typer.core import TyperCommand

Dtype = Literal["auto", "float32", "bfloat16", "float16"]
ChoiceMode = Literal["auto", "loglik", "letter"]
Loglik = Literal["sum", "mean"]

# ModelOptions field -> (annotation, typer option). `--seed` is the command's own (it seeds more than
# the model) and reaches ModelOptions.seed from there.
MODEL_FLAGS: dict[str, tuple[object, object]] = {
    "train_file": (Optional[Path], typer.Option(
        None, "--train-file", help="Training source of fitted baselines and the majority vote (gqa-ood: GQA's "
                                   "train_balanced_questions.json).")),
    "device": (str, typer.Option("auto", "--device", help="torch device for hf: models (auto: this rank's GPU under "
                                                          "a distributed launch, else CUDA when present, else CPU).")),
    "batch_size": (int, typer.Option(32, "--batch-size", min=1, help="Batch size for hf: models.")),
    "images": (Optional[Path], typer.Option(None, "--images", help="Image folder for models that read images.")),
    "bf16": (bool, typer.Option(False, "--bf16", help="Run hf: models in bfloat16 autocast.")),
    "workers": (int, typer.Option(0, "--workers", min=0, help="DataLoader workers decoding images.")),
    "dtype": (Dtype, typer.Option("auto", "--dtype",
                                  help="Weights of generative hf: models (auto: bfloat16 on CUDA, float32 on CPU).")),
    "max_new_tokens": (Optional[int], typer.Option(
        None, "--max-new-tokens", min=1, help="Answer length in tokens, thinking included (generative; default: 16, "
                                              "4096 when the model thinks).")),
    "prompt": (Optional[str], typer.Option(None, "--prompt", help="User prompt template with {field}s (generative; "
                                                                  "default: the benchmark's, see the README).")),
    "min_pixels": (Optional[int], typer.Option(None, "--min-pixels", min=1,
                                               help="Image-size lower bound where the processor has one (Qwen2-VL).")),
    "max_pixels": (Optional[int], typer.Option(None, "--max-pixels", min=1,
                                               help="Image-size upper bound where the processor has one (Qwen2-VL).")),
    "loglik": (Loglik, typer.Option("sum", "--loglik",
                                    help="A scored answer's log-likelihood: sum or per-token mean (generative).")),
    "videos": (Optional[Path], typer.Option(None, "--videos", help="Video folder (<video_id>.mp4 ...): generative "
                                            "models see frames of each row's video (socialiq; needs vlbench[video]).")),
    "frames": (int, typer.Option(8, "--frames", min=1, help="Frames per video with --videos, spread evenly.")),
    "system_prompt": (Optional[str], typer.Option(None, "--system-prompt",
                                                  help="A system turn before every user turn (generative).")),
    "chat_template": (Optional[Path], typer.Option(
        None, "--chat-template", metavar="FILE", help="A Jinja chat template replacing the processor's (generative).")),
    "gen_kwargs": (Optional[str], typer.Option(
        None, "--gen-kwargs", metavar="K=V,...",
        help="Decoding arguments, e.g. temperature=0.2,top_p=0.9,num_beams=3 (generative; default: greedy).")),
    "stop": (list[str], typer.Option([], "--stop", metavar="TEXT",
                                     help="A string that ends a generated answer (repeat; generative; \\n, \\t: "
                                          "a newline, a tab).")),
    "reasoning_tags": (list[str], typer.Option(
        [], "--reasoning-tags", metavar="OPEN,CLOSE",
        help="Markers of a model's thinking, removed before its answer is read (repeat; default: <think>,</think> "
             "and the other families' own).")),
    "chat_template_kwargs": (list[str], typer.Option(
        [], "--chat-template-kwarg", metavar="KEY=VALUE",
        help="A variable the chat template reads, e.g. enable_thinking=false (repeat; generative; openai: sends it "
             "as chat_template_kwargs).")),
    "revision": (Optional[str], typer.Option(None, "--revision",
                                             help="Branch, tag or commit of a hub checkpoint (generative hf:).")),
    "attn_implementation": (Optional[str], typer.Option(
        None, "--attn-implementation", help="eager, sdpa, flash_attention_2, ... (generative; default: transformers')."
    )),
    "device_map": (Optional[str], typer.Option(
        None, "--device-map", help="auto: spread a model larger than one device over all of them (needs accelerate).")),
    "choice_mode": (ChoiceMode, typer.Option(
        "auto", "--choice-mode", help="Multiple choice: by log-likelihood or by letter (auto: loglik for hf: and "
                                      "vllm:; letter for openai: unless a benchmark cannot be asked by letter).")),
    "circular": (bool, typer.Option(
        False, "--circular", help="Ask each multiple-choice prompt by letter once per rotation of its options; it "
                                  "counts only when every rotation chose the same option (VLMEvalKit's CircularEval; "
                                  "generative).")),
    "judge": (Optional[str], typer.Option(
        None, "--judge", metavar="SPEC", help="A model (openai:, hf: or vllm:) asked which option a letter answer "
                                              "chooses when the rules cannot read it; greedy, a fixed prompt, cached "
                                              "(generative; off by default).")),
    "judge_base_url": (Optional[str], typer.Option(
        None, "--judge-base-url", metavar="URL", help="The endpoint of an openai: judge (default: --base-url).")),
    # Served models (openai:MODEL)
    "base_url": (Optional[str], typer.Option(
        None, "--base-url", metavar="URL", help="The OpenAI-compatible endpoint of openai: models, e.g. "
                                                "http://localhost:8000/v1.")),
    "api_key_env": (str, typer.Option("OPENAI_API_KEY", "--api-key-env", metavar="NAME",
                                      help="The environment variable holding the endpoint's key (never printed).")),
    "concurrency": (int, typer.Option(8, "--concurrency", min=1, help="Requests in flight (openai:).")),
    "request_timeout": (float, typer.Option(120.0, "--request-timeout", min=0.001,
                                            help="Seconds to wait for one whole answer (openai:).")),
    "retries": (int, typer.Option(5, "--retries", min=0, help="Retries of a request after a 429, a 5xx, a timeout "
                                                              "or a dropped connection (openai:).")),
    "no_cache": (bool, typer.Option(False, "--no-cache", help="Ask every request again: no response cache (openai:; "
                                                              "the cache makes a killed run resumable).")),
    "resume": (bool, typer.Option(False, "--resume", help="Keep a generative hf: or vllm: model's answers in the "
                                                          "response cache as they come and reuse them (a killed run "
                                                          "resumes).")),
    # vLLM's offline engine (vllm:MODEL)
    "tensor_parallel_size": (int, typer.Option(1, "--tensor-parallel-size", min=1,
                                               help="GPUs one copy of the model is split over (vllm:).")),
    "data_parallel_size": (int, typer.Option(1, "--data-parallel-size", min=1,
                                             help="Copies of the model, each on its own GPUs (vllm:).")),
    "gpu_memory_utilization": (Optional[float], typer.Option(
        None, "--gpu-memory-utilization", min=0.0, max=1.0, help="Share of each GPU's memory vLLM takes (vllm:; "
                                                                 "default: vLLM's).")),
    "max_model_len": (Optional[int], typer.Option(None, "--max-model-len", min=1, help="Longest prompt + answer in "
                                                  "tokens (vllm:; default: the model's).")),
    "enforce_eager": (bool, typer.Option(False, "--enforce-eager", help="No CUDA graphs or torch.compile: a faster "
                                                                        "start, slower steps (vllm:).")),
    "engine_args": (list[str], typer.Option([], "--engine-arg", metavar="KEY=VALUE",
                                            help="Any other vLLM engine argument, e.g. kv_cache_dtype=fp8 (repeat; "
                                                 "vllm:; checked against vLLM's own).")),
}


def with_model_flags(command):
    """Give `command` every model flag and call it with `model_options=ModelOptions(...)` built from
    them (and from the command's own `--seed`)."""
    signature = inspect.signature(command)
    own = [p for p in signature.parameters.values() if p.name != "model_options"]
    flags = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=option, annotation=annotation)
             for name, (annotation, option) in MODEL_FLAGS.items()]

    @functools.wraps(command)
    def run(**kwargs):
        from core.errors import ParamsError
        from evaluator.models.generation import parse_gen_kwargs, parse_stop
        from evaluator.models.options import ModelOptions
        from evaluator.models.reasoning import parse_reasoning_tags
        from evaluator.models.template_kwargs import parse_template_kwargs
        from evaluator.models.vllm_engine import parse_engine_args

        values = {name: kwargs.pop(name) for name in MODEL_FLAGS}
        values.update(gen_kwargs=parse_gen_kwargs(values["gen_kwargs"]), stop=parse_stop(values["stop"]),
                      engine_args=parse_engine_args(values["engine_args"]),
                      reasoning_tags=parse_reasoning_tags(values["reasoning_tags"]),
                      chat_template_kwargs=parse_template_kwargs(values["chat_template_kwargs"]))
        served = str(kwargs.get("model", "")).startswith("openai:")
        resume, no_cache = values.pop("resume"), values.pop("no_cache")
        if resume and no_cache:
            raise ParamsError("--resume reads the response cache that --no-cache turns off: pass one of them")
        values["response_cache"] = _response_cache() if (served or resume) and not no_cache else None
        values["judge_cache"] = _response_cache() if values["judge"] and not no_cache else None
        return command(**kwargs, model_options=ModelOptions(seed=kwargs.get("seed", 0), **values))

    run.__signature__ = signature.replace(parameters=[*own, *flags])
    return run


def _response_cache() -> Path:
    """The response cache of served models: $VLBENCH_CACHE/responses.sqlite3."""
    from pipelines.stages import default_cache_dir

    return default_cache_dir() / "responses.sqlite3"


class ModelMenuCommand(TyperCommand):
    """A command whose help ends with the model specs each benchmark takes (its Task's menu)."""

    def format_epilog(self, ctx, formatter) -> None:
        super().format_epilog(ctx, formatter)
        from builders.registry import benchmarks, get_task

        with formatter.section("Models per benchmark (--model)"):
            formatter.write_dl([(b.name, get_task(b.name).models_help()) for b in benchmarks() if b.task is not None])
