"""The options several commands share, each declared once: its flag, type, default and bounds live here, and
a command that gives it a meaning of its own passes only its words (`split_option("predict")`). The flags of
a `ScoringRequest` come with `@with_scoring_flags`, which builds the request from them, as the model flags
come with `@with_model_flags` (pipelines/cli/models.py)."""

from __future__ import annotations

import functools
import inspect
from pathlib import Path
from typing import Literal, Optional

import typer

from evaluator.request import DEFAULT_RESAMPLES
from pipelines.cli.models import MODEL_FLAGS

BENCH = typer.Argument(..., help="Benchmark name (see `vlbench list`).")
BUILT = typer.Argument(..., help="A folder written by `vlbench build`.")
DATA = typer.Option(..., "--data", help="Built folder or hub dataset repo id.")
MODEL = typer.Option(..., "--model", help="A model spec (the menus below).")


def split_option(verb: str, default: str = "the benchmark's evaluation split") -> typer.models.OptionInfo:
    """--split of a command that reads one split of a build (to score, predict, export, label, measure)."""
    return typer.Option(None, "--split", metavar="SPLIT", help=f"Split to {verb} (default: {default}).")


MAX_SEED = 2 ** 32 - 1  # numpy's and scikit-learn's seeds are 32-bit (a larger one was a traceback in the forests)


def seed_option(help: str = "Seed of the bootstrap resamples.", default: int = 0) -> typer.models.OptionInfo:
    return typer.Option(default, "--seed", min=0, max=MAX_SEED, help=help)


def bootstrap_option(help: str = "Resamples of the 95% confidence intervals (cluster bootstrap; 0: none).",
                     min: int = 0) -> typer.models.OptionInfo:
    """--bootstrap, the resamples of a command's intervals (min 1 where a paired test needs them)."""
    return typer.Option(DEFAULT_RESAMPLES, "--bootstrap", min=min, help=help)


def report_option(what: str = "metrics.json, report.md and plots") -> typer.models.OptionInfo:
    return typer.Option(None, "--report", help=f"Write {what} here.")


def by_option(help: str) -> typer.models.OptionInfo:
    return typer.Option(None, "--by", help=help)


def overwrite_option(help: str = "Replace an OUT this command did not write.") -> typer.models.OptionInfo:
    return typer.Option(False, "--overwrite", help=help)


def hub_results_option(of: str) -> typer.models.OptionInfo:
    return typer.Option(None, "--hub-results", help=f"Also write DIR/.eval_results/<benchmark>.yaml {of}.")


def hub_source_option(where: str) -> typer.models.OptionInfo:
    return typer.Option(None, "--hub-source", metavar="URL",
                        help=f"Where {where}; each --hub-results entry names it as its `source`.")


def shard_option(help: str = "Run shard I of N (0 <= I < N) of the split, content-defined, into OUT.shard-I-of-N.json "
                             "(`vlbench merge` joins the shards into OUT); `slurm`: the array task's index and count."
                 ) -> typer.models.OptionInfo:
    """--shard I/N | slurm: one deterministic part of the split (evaluator/shards.py); `vlbench merge` joins them."""
    return typer.Option(None, "--shard", metavar="I/N|slurm", help=help)


def ray_option() -> typer.models.OptionInfo:
    """--ray ADDRESS|auto: the shards as Ray tasks on a Ray cluster, then merged (evaluator/ray_shards.py)."""
    return typer.Option(None, "--ray", metavar="ADDRESS|auto",
                        help="Run the shards as Ray tasks on the Ray cluster at ADDRESS (auto: the one this machine "
                             "runs), one task per shard, then merge them: one process's bytes (pip install "
                             "'vlbench[ray]'; every node reads the build at the same path).")


def ray_shards_option() -> typer.models.OptionInfo:
    return typer.Option(None, "--ray-shards", min=1, max=100_000, metavar="N",
                        help="With --ray: split into N shards (default: as many tasks as the cluster runs at once).")


def ray_task_option() -> typer.models.OptionInfo:
    return typer.Option(None, "--ray-task", metavar="cpus=C,gpus=G,memory=M",
                        help="With --ray: the resources each shard's task declares (default cpus=1; memory as 16GiB).")


def ray_run(address: str | None, shards: int | None, task: str | None):
    """`--ray ADDRESS [--ray-shards N] [--ray-task ...]` as an evaluator.ray_shards.RayRun, or None without --ray
    (where --ray-shards and --ray-task are refused: they only say how a run is spread over a Ray cluster)."""
    if address is None:
        from core.errors import ParamsError

        for flag, given in (("--ray-shards", shards), ("--ray-task", task)):
            if given is not None:
                raise ParamsError(f"{flag} without --ray: it sets how a run is spread over a Ray cluster")
        return None
    from evaluator.ray_shards import RayRun, parse_ray_task

    return RayRun(address, shards, parse_ray_task(task))


def answers_option(then: str) -> typer.models.OptionInfo:
    """--answers, the sealed answer file of the public half of a sealed build given as --data or FOLDER."""
    return typer.Option(None, "--answers", metavar="FILE",
                        help="For the public half of a sealed build (`vlbench seal`): its sealed answer file, checked "
                             f"against the commitment its card holds; {then}.")


# The submission formats `evaluate` and `compare` read (evaluator/interop.py).
Format = Literal["auto", "vlbench", "lmms-eval", "vlmevalkit", "inspect"]

# ScoringRequest field -> (annotation, option): the flags of what every scoring command is asked.
SCORING_FLAGS: dict[str, tuple[object, object]] = {
    "data": (str, DATA),
    "split": (Optional[str], split_option("score")),
    "allow_partial": (bool, typer.Option(False, "--allow-partial", help="Score the rows that have a prediction.")),
    "allow_extra": (bool, typer.Option(False, "--allow-extra", help="Ignore predictions for ids outside the split.")),
    "options": (list[str], typer.Option([], "--option", metavar="KEY=VALUE", help="Scoring option (repeat; e.g. "
                                        "rule=pre-2021 for VQA; `vlbench params BENCH` lists them).")),
    "fmt": (Format, typer.Option("auto", "--format", help="Submission format (auto: detected from the file; "
                                 "lmms-eval --log_samples files, VLMEvalKit prediction tables, Inspect .eval logs "
                                 "of exported tasks).")),
    "harness_data": (Optional[str], typer.Option(
        None, "--harness-data", metavar="DIR|ORG/NAME",
        help="The lmms-eval task's dataset in lmms-lab's layout (a local parquet folder or a Hub dataset id): maps "
             "the doc_id of a log without `doc` (lmms-eval 0.7) to the benchmark's id, each row checked against the "
             "log.")),
    "reasoning_tags": (list[str], typer.Option(
        [], "--reasoning-tags", metavar="OPEN,CLOSE",
        help="Markers of a reasoning model's thinking in a harness log's answers (repeat; default: <think>,</think> "
             "and the other families' own).")),
    "resamples": (int, bootstrap_option()),
    "seed": (int, seed_option()),
    "answers": (Optional[Path], answers_option("its answers are joined back in by row")),
    "train_file": MODEL_FLAGS["train_file"],  # the model option's flag: the same training source
}
OPT_IN = ("train_file",)  # fields a command takes only when it names them (`also=`)


def with_scoring_flags(command=None, *, only: tuple[str, ...] | None = None, also: tuple[str, ...] = (),
                       **own_words):
    """Give `command` the flags of a ScoringRequest (those of the fields `only`; `own_words`: a field's option
    declared here with the command's meaning, e.g. resamples=bootstrap_option(..., min=1); `also`: the OPT_IN fields
    it takes), --data right after
    its benchmark argument and the others after its own parameters, and call it with
    `request=ScoringRequest(bench, ...)` built from them. The fields the command reads itself besides the
    request (the seed of the perceptual draws) it reads from the request."""
    if command is None:
        return functools.partial(with_scoring_flags, only=only, also=also, **own_words)
    fields = tuple(f for f in SCORING_FLAGS if f not in OPT_IN or f in also) if only is None else ("data", *only)
    if set(own_words) - set(fields):
        raise TypeError(f"with_scoring_flags: {sorted(set(own_words) - set(fields))} are not among its fields")
    declared = {name: (SCORING_FLAGS[name][0], own_words.get(name, SCORING_FLAGS[name][1])) for name in fields}
    signature = inspect.signature(command)
    own = [p for p in signature.parameters.values() if p.name != "request"]
    flags = {name: inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=option,
                                     annotation=annotation) for name, (annotation, option) in declared.items()}

    @functools.wraps(command)
    def run(**kwargs):
        from evaluator.models.reasoning import parse_reasoning_tags
        from evaluator.request import ScoringRequest

        values = {name: kwargs.pop(name) for name in declared}
        values["options"] = tuple(values.get("options", ()))
        if "reasoning_tags" in values:
            values["reasoning_tags"] = parse_reasoning_tags(values["reasoning_tags"])
        data, split = values.pop("data"), values.pop("split", None)
        return command(**kwargs, request=ScoringRequest(kwargs["bench"], data, split, **values))

    run.__signature__ = signature.replace(parameters=[own[0], flags.pop("data"), *own[1:], *flags.values()])
    return run
