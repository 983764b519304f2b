"""The commands over every benchmark: `vlbench suite`, `suite-compare` and `demo`."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from pipelines.cli.app import app
from pipelines.cli.models import ModelMenuCommand, with_model_flags
from pipelines.cli.options import (
    MODEL,
    bootstrap_option,
    hub_results_option,
    hub_source_option,
    overwrite_option,
    ray_option,
    ray_run,
    ray_shards_option,
    ray_task_option,
    seed_option,
    shard_option,
)


@app.command(cls=ModelMenuCommand)
@with_model_flags
def suite(
    model: str = MODEL,
    data: Path = typer.Option(..., "--data", help="Folder of built benchmarks (one sub-folder each, as `make demo` "
                                                  "writes), or a Hub organisation holding ORG/<benchmark> repos."),
    out: Path = typer.Option(..., "--out", help="The suite folder: predictions, reports, card.json, report.md."),
    only: Optional[str] = typer.Option(None, "--benchmarks", metavar="A,B,...", help="Only these benchmarks."),
    images_root: Optional[Path] = typer.Option(
        None, "--images-root", help="Images of every benchmark in one folder: coco/, gqa/, vcr1images/, cosim/, pmr/, "
                                    "visdial/ (the README's layout)."),
    seed: int = seed_option("Seed of random baselines and of the bootstrap."),
    bootstrap: int = bootstrap_option("Resamples of the 95% confidence intervals."),
    no_perceptual: bool = typer.Option(False, "--no-perceptual", help="Skip the perceptual scores (several passes "
                                                                       "of the model per benchmark)."),
    no_counterbias: bool = typer.Option(False, "--no-counterbias", help="Skip CounterBias on a VL-Bias build (an "
                                                                         "attack per image)."),
    hub_results: Optional[Path] = hub_results_option("of every scored benchmark"),
    hub_org: Optional[str] = typer.Option(
        None, "--hub-org", metavar="ORG", help="The Hub organisation of the benchmarks' repos (ORG/<benchmark>)."),
    hub_source: Optional[str] = hub_source_option("the card can be read (an https URL)"),
    overwrite: bool = overwrite_option("Use an OUT that is not a suite folder."),
    submissions: Optional[Path] = typer.Option(
        None, "--predictions", metavar="DIR",
        help="Score the model's runs instead of running it: DIR/<benchmark>.<ext> per benchmark (a prediction file, "
             "an lmms-eval or Inspect log of an exported task, a VLMEvalKit table); --model names the model."),
    shard: Optional[str] = shard_option(
        "Only predict shard I of N of every benchmark into OUT/predictions/ (no card); a later run without --shard "
        "merges each benchmark's shards and scores (`slurm`: the array task's index and count)."),
    ray: Optional[str] = ray_option(),
    ray_shards: Optional[int] = ray_shards_option(),
    ray_task: Optional[str] = ray_task_option(),
    blind: bool = typer.Option(False, "--blind", help="Also run each benchmark without its images (as --no-image) "
                               "and put the model's multimodal gain, with paired intervals, on the card."),
    base_llm: Optional[str] = typer.Option(
        None, "--base-llm", metavar="SPEC", help="The model's base LLM (hf: a text-only causal LM checkpoint, or "
        "openai:MODEL): asked the blind prompts, for the multimodal leakage on the card (implies --blind)."),
    base_llm_url: list[str] = typer.Option([], "--base-llm-base-url", metavar="URL",
                                           help="The endpoint of an openai: --base-llm (repeat: several)."),
    model_options=None,
):
    """One model over every built benchmark: predictions, reports, and one report card of headline metrics
    with intervals and the diagnostics (OOD tail vs head, changing priors, single vs paired questions,
    modality reliance, language shortcuts, CounterBias).
    Resumable: a rerun reuses what is done and still valid."""
    from evaluator.suite.run import run_suite
    from pipelines.stages import default_cache_dir

    benchmarks = None if only is None else [b.strip() for b in only.split(",") if b.strip()]
    if benchmarks == []:
        from core.errors import ParamsError

        raise ParamsError(f"--benchmarks {only!r}: names no benchmark; give A,B,... (`vlbench list` shows them)")
    from evaluator.shards import parse_shard

    part = None if shard is None else parse_shard(shard)
    card = run_suite(model, data, out, model_options=model_options, only=benchmarks, images_root=images_root,
                     resamples=bootstrap, seed=seed, perceptual=not no_perceptual, counterbias=not no_counterbias,
                     counterbias_cache=default_cache_dir() / "counterbias", hub_results=hub_results,
                     hub_org=hub_org, hub_source=hub_source, overwrite=overwrite, submissions=submissions,
                     shard=part, ray=ray_run(ray, ray_shards, ray_task), blind=blind, base_llm=base_llm,
                     base_llm_url=tuple(base_llm_url), echo=typer.echo)
    if card is None:
        typer.echo(f"shard {part.index} of {part.count} predicted into {out / 'predictions'}; once every shard is, "
                   f"run `vlbench suite` into {out} without --shard to merge them and write the card")
        return
    scored = sum(r["status"] == "scored" for r in card["benchmarks"].values())
    typer.echo(f"{scored} of {len(card['benchmarks'])} benchmarks scored, {len(card['diagnostics'])} diagnostics; "
               f"report card: {out / 'report.md'}")


@app.command("suite-compare")
def suite_compare(
    cards: list[Path] = typer.Argument(..., help="Report cards: `vlbench suite` OUT folders (the first is the base)."),
    out: Path = typer.Option(..., "--out", help="Site folder to write (index.html, cards.json)."),
    bootstrap: int = bootstrap_option("Resamples of the paired comparisons.", min=1),
    seed: int = seed_option("Seed of the resamples."),
    overwrite: bool = overwrite_option(),
):
    """Several models' report cards on one page, with paired comparisons where two cards scored the same build."""
    from evaluator.suite.compare import compare_cards

    record = compare_cards(cards, out, resamples=bootstrap, seed=seed, overwrite=overwrite)
    typer.echo(f"{len(record['cards'])} report cards, {len(record['comparisons'])} paired comparisons; "
               f"page: {out / 'index.html'}")


@app.command()
def demo(out: Path = typer.Option(Path("demo_out"), "--out", help="Folder for sources, dataset and reports.")):
    """Sample sources -> build -> verify -> baseline predictions -> evaluation reports."""
    from pipelines.demo import run_demo

    run_demo(out, echo=typer.echo)
