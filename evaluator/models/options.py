"""The options every model factory receives, declared once (`MODEL_OPTIONS`): each one's field, type,
default, the kinds of model that read it, its command-line flag and help. From that declaration come
`ModelOptions` (the frozen dataclass `vlbench predict`, `perceptual` and `suite` build), the command-line
flags (pipelines/cli/models.py), the resolver's check that no option is given to a model that would
ignore it (`unread_option`, evaluator/models/resolve.py), the options the prediction record lists
(`recorded_options`) and the docs' table of model options (`options_table`, scripts/mkdocs_hooks.py).

The kinds of model (`reader_kind`): `baseline`, `py`, `features`, `hf` (a task head: ViLT, CLIP, a
cross-encoder), `hf-generative` (an image-text-to-text checkpoint run by transformers), `vllm`, `openai`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, make_dataclass
from pathlib import Path
from typing import Literal, Optional

from core.errors import ModelError

KINDS = ("baseline", "py", "features", "hf", "hf-generative", "vllm", "openai")
EVERY = frozenset(KINDS)
GENERATIVE = frozenset({"hf-generative", "vllm", "openai"})
LOCAL_GENERATIVE = frozenset({"hf-generative", "vllm"})


@dataclass(frozen=True)
class Option:
    """One model option. `cli` is its flag's annotation where the command line reads it as text that `parse`
    (a "module:function" string, imported when a command runs) turns into the field's value."""

    field: str
    type: object
    default: object
    readers: frozenset
    help: str
    flag: str | None = None  # None: set by vlbench, not on the command line
    metavar: str | None = None
    min: float | None = None
    max: float | None = None
    cli: object = None
    parse: str | None = None
    via: str | None = None  # the flag that sets an option that has none of its own (--resume sets response_cache)

    @property
    def shown(self) -> str:
        """The option as an error line names it."""
        return self.flag or self.via or self.field


def _opt(name, type_, default, readers, help_, flag=True, **kw) -> Option:
    return Option(name, type_, default, frozenset(readers), help_,
                  None if flag is None else "--" + name.replace("_", "-") if flag is True else flag, **kw)


Dtype = Literal["auto", "float32", "bfloat16", "float16"]
ChoiceMode = Literal["auto", "loglik", "letter"]
Loglik = Literal["sum", "mean"]

MODEL_OPTIONS: tuple[Option, ...] = (
    _opt("train_file", Optional[Path], None, EVERY, "Training source of fitted baselines, the majority vote and the "
         "prior of the prior-following rate (gqa-ood: GQA's train_balanced_questions.json)."),
    _opt("seed", int, 0, EVERY, "Seed of random baselines and sampled decoding.", flag=None),
    _opt("device", str, "auto", EVERY, "torch device for hf: models (auto: this rank's GPU under a distributed "
         "launch, else CUDA when present, else CPU)."),
    _opt("batch_size", int, 32, EVERY, "Batch size for hf: and vllm: models.", min=1),
    _opt("images", Optional[Path], None, EVERY, "Image folder for models that read images."),
    _opt("no_image", bool, False, EVERY - {"features"}, "A blind run: the model is not shown the rows' images "
         "(generative VLMs: the prompt without its pictures; hf: task heads: a neutral grey image instead)."),
    _opt("data", Optional[Path], None, EVERY, "The built folder being predicted (fitted baselines read its train "
         "split).", flag=None),
    _opt("bf16", bool, False, EVERY - {"vllm", "openai"}, "Run hf: models in bfloat16 autocast."),
    _opt("workers", int, 0, EVERY - {"vllm"}, "DataLoader workers decoding images.", min=0),
    _opt("dtype", Dtype, "auto", LOCAL_GENERATIVE, "Weights of generative hf: and vllm: models (auto: bfloat16 on a "
         "GPU, float32 on CPU)."),
    _opt("max_new_tokens", Optional[int], None, GENERATIVE, "Answer length in tokens, thinking included (default: "
         "16, 4096 when the model thinks).", min=1),
    _opt("prompt", Optional[str], None, GENERATIVE, "User prompt template with {field}s (default: the "
         "benchmark's)."),
    _opt("min_pixels", Optional[int], None, LOCAL_GENERATIVE, "Image-size lower bound where the processor has one "
         "(Qwen2-VL).", min=1),
    _opt("max_pixels", Optional[int], None, LOCAL_GENERATIVE, "Image-size upper bound where the processor has one "
         "(Qwen2-VL).", min=1),
    _opt("loglik", Loglik, "sum", GENERATIVE, "A scored answer's log-likelihood: sum or per-token mean."),
    _opt("videos", Optional[Path], None, GENERATIVE, "Video folder (<video_id>.mp4 ...): the model sees frames of "
         "each row's video (socialiq; needs vlbench[video])."),
    _opt("frames", int, 8, GENERATIVE, "Frames per video with --videos, spread evenly.", min=1),
    _opt("system_prompt", Optional[str], None, GENERATIVE, "A system turn before every user turn."),
    _opt("chat_template", Optional[Path], None, LOCAL_GENERATIVE, "A Jinja chat template replacing the "
         "processor's.", metavar="FILE"),
    _opt("gen_kwargs", tuple, (), GENERATIVE, "Decoding arguments, e.g. temperature=0.2,top_p=0.9,num_beams=3 "
         "(default: greedy).", metavar="K=V,...", cli=Optional[str],
         parse="evaluator.models.generation:parse_gen_kwargs"),
    _opt("stop", tuple, (), GENERATIVE, "A string that ends a generated answer (repeat; \\n, \\t: a newline, a tab).",
         metavar="TEXT", cli=list[str], parse="evaluator.models.generation:parse_stop"),
    _opt("reasoning_tags", Optional[tuple], None, GENERATIVE, "Markers of a model's thinking, removed before its "
         "answer is read (repeat; default: <think>,</think> and the other families' own).", metavar="OPEN,CLOSE",
         cli=list[str], parse="evaluator.models.reasoning:parse_reasoning_tags"),
    _opt("chat_template_kwargs", tuple, (), GENERATIVE, "A variable the chat template reads, e.g. "
         "enable_thinking=false (repeat; openai: sends it as chat_template_kwargs).", flag="--chat-template-kwarg",
         metavar="KEY=VALUE", cli=list[str], parse="evaluator.models.template_kwargs:parse_template_kwargs"),
    _opt("revision", Optional[str], None, LOCAL_GENERATIVE, "Branch, tag or commit of a hub checkpoint."),
    _opt("attn_implementation", Optional[str], None, {"hf-generative"}, "eager, sdpa, flash_attention_2, ... "
         "(default: transformers')."),
    _opt("device_map", Optional[str], None, {"hf-generative"}, "auto: spread a model larger than one device over "
         "all of them (needs accelerate)."),
    _opt("choice_mode", ChoiceMode, "auto", GENERATIVE, "Multiple choice: by log-likelihood or by letter (auto: "
         "loglik for hf: and vllm:; letter for openai: unless a benchmark cannot be asked by letter)."),
    _opt("circular", bool, False, GENERATIVE, "Ask each multiple-choice prompt by letter once per rotation of its "
         "options; it counts only when every rotation chose the same option (VLMEvalKit's CircularEval)."),
    _opt("judge", Optional[str], None, GENERATIVE, "A model (openai:, hf: or vllm:) asked which option a letter "
         "answer chooses when the rules cannot read it; greedy, a fixed prompt, cached (off by default).",
         metavar="SPEC"),
    _opt("judge_base_url", Optional[str], None, GENERATIVE, "The endpoint of an openai: judge (default: --base-url).",
         metavar="URL"),
    _opt("judge_cache", Optional[Path], None, GENERATIVE, "The response cache of the judge's verdicts.", flag=None,
         via="--judge"),
    _opt("base_url", Optional[object], None, {"openai"}, "The OpenAI-compatible endpoint of openai: models, e.g. "
         "http://localhost:8000/v1 (repeat: the endpoints of one model, e.g. one per data-parallel vLLM server, share "
         "the requests).", metavar="URL", cli=list[str], parse="evaluator.models.served:parse_base_urls"),
    _opt("api_key_env", str, "OPENAI_API_KEY", {"openai"}, "The environment variable holding the endpoint's key "
         "(never printed).", metavar="NAME"),
    _opt("concurrency", int, 8, {"openai"}, "Requests in flight (to each endpoint).", min=1),
    _opt("request_timeout", float, 120.0, {"openai"}, "Seconds to wait for one whole answer.", min=0.001),
    _opt("retries", int, 5, {"openai"}, "Retries of a request after a 429, a 5xx, a timeout or a dropped "
         "connection.", min=0),
    _opt("response_cache", Optional[Path], None, GENERATIVE, "SQLite file of deterministic responses (--resume; "
         "openai: by default, --no-cache: none).", flag=None, via="--resume"),
    _opt("tensor_parallel_size", int, 1, {"vllm"}, "GPUs one copy of the model is split over.", min=1),
    _opt("data_parallel_size", int, 1, {"vllm"}, "Copies of the model, each on its own GPUs.", min=1),
    _opt("gpu_memory_utilization", Optional[float], None, {"vllm"}, "Share of each GPU's memory vLLM takes "
         "(default: vLLM's).", min=0.0, max=1.0),
    _opt("max_model_len", Optional[int], None, {"vllm"}, "Longest prompt + answer in tokens (default: the "
         "model's).", min=1),
    _opt("enforce_eager", bool, False, {"vllm"}, "No CUDA graphs or torch.compile: a faster start, slower steps."),
    _opt("engine_args", tuple, (), {"vllm"}, "Any other vLLM engine argument, e.g. kv_cache_dtype=fp8 (repeat; "
         "checked against vLLM's own).", flag="--engine-arg", metavar="KEY=VALUE", cli=list[str],
         parse="evaluator.models.vllm_engine:parse_engine_args"),
)
BY_FIELD = {o.field: o for o in MODEL_OPTIONS}

ModelOptions = make_dataclass(
    "ModelOptions", [(o.field, o.type, field(default=o.default)) for o in MODEL_OPTIONS], frozen=True,
    namespace={"__doc__": "What `vlbench predict` passes to a task's model factory (fields: MODEL_OPTIONS).",
               "__module__": __name__})


def reader_kind(kind: str, generative: bool = False) -> str:
    """The reader kind of a spec kind (`hf` splits into task heads and generative checkpoints)."""
    return "hf-generative" if kind == "hf" and generative else kind


# what a judge (evaluator/models/judge.py) reads of the run's options: how to reach and run it
JUDGE_READS = frozenset({"seed", "device", "batch_size", "base_url", "api_key_env", "concurrency", "request_timeout",
                         "retries"})


def unread_option(options, kind: str, judge_kind: str | None = None) -> Option | None:
    """The first option given a value other than its default that neither the model's kind nor its judge's
    (for what a judge reads) reads."""
    def read(o: Option) -> bool:
        return kind in o.readers or (judge_kind in o.readers and o.field in JUDGE_READS)

    return next((o for o in MODEL_OPTIONS if getattr(options, o.field) != o.default and not read(o)), None)


def readers_text(option: Option) -> str:
    """Who reads an option, for error lines and the docs table."""
    if option.readers == EVERY:
        return "every model"
    names = {"hf-generative": "generative hf:", "hf": "hf: task heads", "vllm": "vllm:", "openai": "openai:",
             "baseline": "baseline:", "py": "py:", "features": "features:"}
    if option.readers == GENERATIVE:
        return "generative hf:, vllm: and openai: models"
    return ", ".join(names[k] for k in KINDS if k in option.readers)


def _texts(value):
    """Every string inside an option's value (text, paths, lists and dicts of them), dict keys included."""
    if isinstance(value, (str, Path)):
        yield str(value)
    elif isinstance(value, dict):
        for key, item in value.items():
            yield str(key)
            yield from _texts(item)
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from _texts(item)


KEY_VALUE_OPTIONS = ("gen_kwargs", "chat_template_kwargs", "engine_args")  # ((name, value), ...)


def check_no_credentials(spec: str, options) -> None:
    """Refuse a model spec or option that holds a key (core.sanitise: a key variable's value, a value shaped like
    a published kind of key) or a KEY=VALUE argument whose name says it is a secret (`hf_token`): the spec and
    the options are written into the prediction record, the response cache's keys and the suite's logs. The line
    names the option, never the value; keys go in the environment (--api-key-env, HF_TOKEN)."""
    from core.sanitise import environment_secrets, looks_like_credential, names_a_secret

    secrets = environment_secrets((options.api_key_env,))
    advice = "vlbench writes it into the prediction record; keys go in the environment (--api-key-env, HF_TOKEN)"
    if looks_like_credential(spec, secrets):
        raise ModelError(f"--model: holds what looks like a key; {advice}")
    for option in MODEL_OPTIONS:
        value = getattr(options, option.field)
        for key, _ in value if option.field in KEY_VALUE_OPTIONS else ():
            if names_a_secret(key):
                raise ModelError(f"{option.shown} {key}: names a secret; {advice}")
        if any(looks_like_credential(text, secrets) for text in _texts(value)):
            raise ModelError(f"{option.shown}: holds what looks like a key; {advice}")


def recorded_options(options, kind: str) -> dict:
    """The options the prediction record lists: those the model's kind reads (paths as text)."""
    return {o.field: str(v) if isinstance(v := getattr(options, o.field), Path) else v
            for o in MODEL_OPTIONS if kind in o.readers and o.field != "data"}


def options_table() -> str:
    """The docs' table of model options: flag, default, who reads it, meaning."""
    rows = ["| option | default | read by | meaning |", "|---|---|---|---|"]
    for o in MODEL_OPTIONS:
        if o.flag is None:
            continue
        default = "—" if o.default in (None, (), False) else f"`{o.default}`"
        rows.append(f"| `{o.flag}` | {default} | {readers_text(o)} | {o.help.replace('|', chr(92) + '|')} |")
    return "\n".join(rows)
