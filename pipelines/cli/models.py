"""The command-line flags of a model, made from the one declaration of the model options
(`evaluator.models.options.MODEL_OPTIONS`): every command that runs a model (`predict`, `perceptual`,
`suite`; `counterbias` and `export-task` the few it reads) takes them through `@with_model_flags`, and
its `--help` ends with each benchmark's model menu (read from the tasks when help is asked for)."""

from __future__ import annotations

import functools
import inspect
from pathlib import Path

import typer
from typer.core import TyperCommand


def _flag(option, readers: bool = True):
    """The typer option of a declared model option (evaluator.models.options.MODEL_OPTIONS); `readers`: its
    help ends with the kinds of model that read it (for a command whose --model may be any spec)."""
    from evaluator.models.options import EVERY, readers_text

    cli = option.cli or option.type
    default = [] if cli == list[str] else None if option.parse else option.default
    read_by = "" if option.readers == EVERY or not readers else f" [{readers_text(option)}]"
    bounds = {k: v for k, v in (("min", option.min), ("max", option.max)) if v is not None}
    return cli, typer.Option(default, option.flag, help=option.help + read_by, metavar=option.metavar, **bounds)


def model_flags() -> dict[str, tuple[object, object]]:
    """ModelOptions field -> (annotation, typer option) of every option with a flag, then `--no-cache` and
    `--resume`, which choose the response cache. `--seed` is the command's own (it seeds more than the model)
    and reaches ModelOptions.seed from there."""
    from evaluator.models.options import MODEL_OPTIONS

    flags = {o.field: _flag(o) for o in MODEL_OPTIONS if o.flag is not None}
    flags["no_cache"] = (bool, typer.Option(False, "--no-cache", help="Ask every request again: no response cache "
                                                                      "(openai:, --judge; the cache makes a killed "
                                                                      "run resumable)."))
    flags["resume"] = (bool, typer.Option(False, "--resume", help="Keep a generative hf: or vllm: model's answers "
                                                                  "in the response cache as they come and reuse "
                                                                  "them (a killed run resumes)."))
    return flags


MODEL_FLAGS = model_flags()


def with_model_flags(command=None, *, only: tuple[str, ...] | None = None):
    """Give `command` every model flag (or those of the ModelOptions fields `only`) and call it with
    `model_options=ModelOptions(...)` built from them (and from the command's own `--seed`)."""
    if command is None:
        return functools.partial(with_model_flags, only=only)
    from evaluator.models.options import BY_FIELD

    # A command that takes a few flags (export-task, counterbias) reads them whatever the model: no reader list
    declared = MODEL_FLAGS if only is None else {name: _flag(BY_FIELD[name], readers=False) for name in only}
    signature = inspect.signature(command)
    own = [p for p in signature.parameters.values() if p.name != "model_options"]
    flags = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=option, annotation=annotation)
             for name, (annotation, option) in declared.items()]

    @functools.wraps(command)
    def run(**kwargs):
        import importlib

        from core.errors import ParamsError
        from evaluator.models.options import BY_FIELD, ModelOptions

        values = {name: kwargs.pop(name) for name in declared}
        for name, value in list(values.items()):
            parse = BY_FIELD[name].parse if name in BY_FIELD else None
            if parse:
                module, _, function = parse.partition(":")
                values[name] = getattr(importlib.import_module(module), function)(value)
        if only is None:
            served = str(kwargs.get("model", "")).startswith("openai:")
            resume, no_cache = values.pop("resume"), values.pop("no_cache")
            if resume and no_cache:
                raise ParamsError("--resume reads the response cache that --no-cache turns off: pass one of them")
            values["response_cache"] = _response_cache() if (served or resume) and not no_cache else None
            values["judge_cache"] = _response_cache() if values["judge"] and not no_cache else None
        return command(**kwargs, model_options=ModelOptions(seed=kwargs.get("seed", 0), **values))

    run.__signature__ = signature.replace(parameters=[*own, *flags])
    return run


# The flags that say what a model is shown (the prompt, images, video frames, choice form, answer length): what
# `vlbench export-task` writes into another harness's task.
ASK_FLAGS = ("prompt", "images", "videos", "frames", "choice_mode", "max_new_tokens")


def with_ask_flags(command):
    """`with_model_flags` with the ASK_FLAGS only."""
    return with_model_flags(command, only=ASK_FLAGS)


def _response_cache() -> Path:
    """The response cache of served models: $VLBENCH_CACHE/responses.sqlite3."""
    from pipelines.stages import default_cache_dir

    return default_cache_dir() / "responses.sqlite3"


class ModelMenuCommand(TyperCommand):
    """A command whose help ends with the model specs each benchmark takes (its Task's menu)."""

    def format_epilog(self, ctx, formatter) -> None:
        super().format_epilog(ctx, formatter)
        from evaluator.tasks import get_task, task_names

        with formatter.section("Models per benchmark (--model)"):
            formatter.write_dl([(name, get_task(name).models_help()) for name in task_names()])
