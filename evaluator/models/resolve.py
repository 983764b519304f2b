"""Model specs resolved in one place: `Task.make_model(spec, options)` comes here, and each spec kind
has one factory below. `baseline:` and `hf:` families come from the task's menu
(evaluator/models/menu.py); generative VLMs (`hf:` image-text-to-text checkpoints, `vllm:`, `openai:`)
become a `GenerativeAdapter` over a backend (evaluator/models/backend.py) asked the way the task's
`Ask` says; `features:` heads where the task fits them; `py:` everywhere.

Options that only some kinds of model read (evaluator/models/options.py declares who reads each) are
refused, with their flag, for the others: an option that would be silently ignored is a wrong result
waiting to happen."""

from __future__ import annotations

from core.errors import ModelError
from evaluator.models.ask import CHOICE_MODES
from evaluator.models.families import causal_multimodal, prefix_format, refusal
from evaluator.models.model import as_model
from evaluator.models.options import ModelOptions, check_no_credentials, reader_kind, readers_text, unread_option
from evaluator.models.spec import hf_config, load_py_model, parse_spec
from evaluator.models.vlm_checkpoint import is_generative, is_text_lm


def make_model(task, spec: str, options: ModelOptions):
    """The Model of `spec` for `task` (an evaluator.base.Task)."""
    check_no_credentials(spec, options)
    kind, name = parse_spec(spec)
    if options.videos is not None and (task.generative is None or task.generative.video_column is None):
        raise ModelError(f"--videos: {task.name} rows have no videos to show a model")
    if options.choice_mode not in CHOICE_MODES:
        raise ModelError(f"--choice-mode {options.choice_mode}: expected one of {', '.join(CHOICE_MODES)}")
    config = hf_config(name, options.revision) if kind == "hf" else None
    _check_readers(spec, kind, config, options)
    if kind == "openai":
        return _served(task, name, options)
    if kind == "vllm":
        return _vllm(task, name, options)
    if config is not None and is_generative(config):
        return _hf_generative(task, name, config, options)
    if config is not None and is_text_lm(config):
        return _hf_text_lm(task, name, config, options)
    if kind == "py":
        model = as_model(load_py_model(name))
        if not options.no_image:
            return model
        from evaluator.models.model import WithoutImages

        return WithoutImages(model, tuple(c for m in task.modalities if m.name in ("image", "video")
                                          for c in m.columns))
    if kind == "features" and task.feature_heads:
        from evaluator.models.features import feature_head

        return feature_head(name, task, options, spec)
    if kind == "baseline":
        for baseline in task.baselines:
            if baseline.name == name:
                return baseline.build(task, options, spec)
    if config is not None:
        for family in task.hf_families:
            if family.accepts(config):
                return family.build(task, name, options)
        if causal_multimodal(config):
            raise ModelError(f"hf:{name}: a {config.model_type} model is a multimodal causal LM that transformers does "
                             "not run as image-text-to-text (vlbench's hf: VLMs are AutoModelForImageTextToText "
                             f"checkpoints); serve it (vllm serve) and pass openai:MODEL")
        raise ModelError(f"hf:{name}: a {config.model_type} model is none of {task.name}'s; {task.name} "
                         f"predictions come from {task.models_help()}")
    raise ModelError(f"--model {spec}: {task.name} predictions come from {task.models_help()}")


def _check_readers(spec: str, kind: str, config, options: ModelOptions) -> None:
    """No option is given to a model that would ignore it (the declaration's readers): the model's kind, and a
    judge's, must read every option set away from its default."""
    generative = kind in ("vllm", "openai") or (kind == "hf" and config is not None and
                                                (is_generative(config) or is_text_lm(config)))
    judge_kind = None if options.judge is None else reader_kind(parse_spec(options.judge)[0], True)
    unread = unread_option(options, reader_kind(kind, generative), judge_kind)
    if unread is not None:
        raise ModelError(f"{unread.shown}: {spec} does not read it (it applies to {readers_text(unread)})")


def _adapter(task, spec: str, load_vlm, options: ModelOptions, choice_mode: str, family=None):
    """A GenerativeAdapter asking `task`'s Ask of the backend `load_vlm()` returns (loaded on the first
    predict, once every image and video file is found). Checked before any weight is loaded: that the
    task can ask a generative model, the prompt template and the video folder."""
    from evaluator.models.ask import GenerativeAdapter, prompt_template
    from evaluator.models.videos import VideoFolder

    if task.generative is None:
        raise ModelError(f"{spec}: a generative model cannot answer {task.name}: {task.generative_reason}")
    template = prompt_template(options, task.generative, task.name, family)
    videos = None if options.videos is None else VideoFolder(options.videos)
    judge = None if options.judge is None else _judge(options)
    return GenerativeAdapter(load_vlm, task.generative, template, options, videos, choice_mode, judge)


def _judge(options: ModelOptions):
    """`--judge SPEC`: the judge (evaluator/models/judge.py) over a backend of its own, greedy, its verdicts in
    the response cache; checked here, loaded on its first question."""
    from evaluator.models.judge import JUDGE_MAX_NEW_TOKENS, Judge

    kind, name = parse_spec(options.judge)
    spec = f"{kind}:{name}"
    judged = ModelOptions(seed=options.seed, device=options.device, batch_size=options.batch_size,
                          max_new_tokens=JUDGE_MAX_NEW_TOKENS, response_cache=options.judge_cache,
                          base_url=options.judge_base_url or options.base_url, api_key_env=options.api_key_env,
                          concurrency=options.concurrency, request_timeout=options.request_timeout,
                          retries=options.retries)
    if kind == "openai":
        from evaluator.models.served import ServedVLM, check_endpoints

        check_endpoints(judged.base_url, f"{spec} (--judge; --judge-base-url gives its endpoint)")
        return Judge(spec, lambda: ServedVLM(name, judged), options.seed)
    if kind in ("hf", "vllm"):
        config = hf_config(name)
        if not is_generative(config):
            raise ModelError(f"--judge {spec}: a {config.model_type} model is not an image-text-to-text checkpoint "
                             "(serve a text-only judge and pass it as openai:MODEL)")
        from evaluator.models.response_cache import weights_pin

        pinned = weights_pin(name)  # computed now: the same whether or not a rerun loads the judge
        if kind == "hf":
            from evaluator.models.transformers_vlm import TransformersVLM

            return Judge(spec, lambda: TransformersVLM(name, config, judged), options.seed, pinned)
        from evaluator.models.vllm_engine import VllmVLM

        return Judge(spec, lambda: VllmVLM(name, config, judged), options.seed, pinned)
    raise ModelError(f"--judge {options.judge}: a judge is an openai:, hf: or vllm: model")


def _choice_mode(options: ModelOptions, default: str) -> str:
    """`--choice-mode`, where auto is the backend's `default`, or letter with `--circular` (which rotates the
    options of a letter choice)."""
    if options.choice_mode != "auto":
        return options.choice_mode
    return "letter" if options.circular else default


def _hf_generative(task, name: str, config, options: ModelOptions):
    """`hf:` an image-text-to-text checkpoint run by transformers in-process."""
    from evaluator.models.transformers_vlm import TransformersVLM
    from evaluator.models.vlm_checkpoint import read_chat_template

    refused = refusal(config)
    if refused is not None:
        raise ModelError(f"hf:{name}: {refused}")
    chat_template = read_chat_template(options.chat_template)
    prefixed = prefix_format(config, chat_template)
    ask = task.generative
    shows_images = ask is not None and (ask.image_column is not None or
                                         (ask.video_column is not None and options.videos is not None))
    if prefixed is not None and prefixed.needs_image and ask is not None and not shows_images:
        raise ModelError(f"hf:{name}: a {config.model_type} model is asked with an image in every prompt, and "
                         f"{task.name}'s prompts show none" + (" without --videos DIR (its videos' frames)"
                                                                if ask.video_column is not None else ""))
    mode = _choice_mode(options, "loglik")
    return _adapter(task, f"hf:{name}", lambda: TransformersVLM(name, config, options, chat_template), options, mode,
                    prefixed)


def _hf_text_lm(task, name: str, config, options: ModelOptions):
    """`hf:` a text-only causal LM run by transformers in-process: it answers the prompts of a blind run only
    (`--no-image`; `suite --base-llm`), the same text a VLM is asked without its pictures."""
    from evaluator.models.transformers_lm import TransformersLM
    from evaluator.models.vlm_checkpoint import read_chat_template

    if not options.no_image:
        raise ModelError(f"hf:{name}: a {config.model_type} model is a text-only causal LM: it answers blind runs "
                         "(--no-image; `vlbench suite --base-llm`), never a prompt with pictures")
    chat_template = read_chat_template(options.chat_template)
    return _adapter(task, f"hf:{name}", lambda: TransformersLM(name, config, options, chat_template), options,
                    _choice_mode(options, "loglik"))


def _vllm(task, name: str, options: ModelOptions):
    """`vllm:` an image-text-to-text checkpoint run by vLLM's offline engine in-process."""
    from evaluator.models.vllm_engine import VllmVLM, check_vllm_options
    from evaluator.models.vlm_checkpoint import read_chat_template

    spec = f"vllm:{name}"
    check_vllm_options(options, spec)
    config = hf_config(name, options.revision)
    if not is_generative(config):
        raise ModelError(f"{spec}: a {config.model_type} model is not an image-text-to-text VLM (vllm: runs those; a "
                         f"text-only LM runs blind as hf:{name}, or served by `vllm serve` as openai:MODEL)")
    refused = refusal(config)
    if refused is not None:
        raise ModelError(f"{spec}: {refused}")
    chat_template = read_chat_template(options.chat_template)
    if prefix_format(config, chat_template) is not None:
        raise ModelError(f"{spec}: a {config.model_type} model is prompted by its prefix format, which vllm: does not "
                         f"build; run it as hf:{name}")
    mode = _choice_mode(options, "loglik")
    return _adapter(task, spec, lambda: VllmVLM(name, config, options, chat_template), options, mode)


def _served(task, name: str, options: ModelOptions):
    """`openai:` a model behind an OpenAI-compatible endpoint. Multiple choice goes by letter unless
    the benchmark cannot be asked by letter (VisDial, Social-IQ) or `--choice-mode loglik` asks for
    log-likelihoods, which the server must return (evaluator/models/served.py)."""
    from evaluator.models.served import ServedVLM, check_endpoints, check_served_options

    spec = f"openai:{name}"
    check_endpoints(options.base_url, spec)
    check_served_options(options, spec)
    ask = task.generative
    mode = options.choice_mode
    if mode == "auto":
        mode = "loglik" if ask is not None and ask.mode == "score" and ask.letter_reason else "letter"
    return _adapter(task, spec, lambda: ServedVLM(name, options), options, mode)
