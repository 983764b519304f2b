"""The `vlbench` command line. Heavy modules are imported inside each command."""

from __future__ import annotations

import gc
import sys
from pathlib import Path
from typing import Literal, Optional

import typer

from pipelines.model_flags import ModelMenuCommand, with_ask_flags, with_model_flags

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False, rich_markup_mode=None,
                  help="Regenerate bias-aware vision-and-language benchmarks, publish them, score models.")


_whole_process = False  # set by main(): this process ends when its command does


@app.callback()
def _every_command(
    allow_pickle_weights: bool = typer.Option(
        False, "--allow-pickle-weights",
        help="Load model folders that hold pickle weights only (*.bin, *.pt): unpickling can run code, so only "
             "for checkpoints you trust. Without it, vlbench reads safetensors weights only."),
):
    from builders.model_files import allow_pickle_weights as allow

    allow(allow_pickle_weights)


def _echo_err(message: str) -> None:
    """One line on stderr: what it holds from data (file names, records, a server's text) passes the sanitiser,
    so it cannot forge a second line, reorder the terminal's text or fail to print."""
    from core.sanitise import sanitise

    typer.echo(sanitise(message, (), None), err=True)


@app.command("list")
def list_benchmarks(
    sources_present: Optional[Path] = typer.Option(
        None, "--sources-present", help="Only benchmarks whose raw sources are under this folder."),
    names: bool = typer.Option(False, "--names", help="Print names only, one per line."),
):
    """Benchmarks, their sources and configs."""
    from builders.registry import builder_names, get_builder
    from core.errors import ParamsError
    from pipelines.build import source_folder

    if sources_present is not None and not sources_present.is_dir():
        raise ParamsError(f"--sources-present {sources_present}: no such folder")

    for name in builder_names():
        builder = get_builder(name)
        if sources_present is not None:
            try:
                params = builder.params_class()
                builder.locate_sources(source_folder(builder, sources_present, params), [], params)
            except Exception:
                continue
        if names:
            typer.echo(name)
        else:
            typer.echo(f"{name}: {builder.description}\n  source:  {builder.sources_help}"
                       f" (folder '{builder.source_dir}/' of sample-sources)\n"
                       f"  configs: {', '.join(builder.configs)}   splits: {', '.join(builder.splits)}")


@app.command("params")
def params_command(bench: str = typer.Argument(..., help="Benchmark name (see `vlbench list`).")):
    """A benchmark's `build --param` parameters and `evaluate --option` scoring options: type, default, meaning."""
    from builders.registry import get_builder
    from core.params import describe
    from evaluator.tasks import get_task, has_task

    sections = [(f"build parameters (vlbench build {bench} --param KEY=VALUE)", get_builder(bench).params_class)]
    if has_task(bench):
        options = get_task(bench).options_class
        sections.append((f"scoring options (vlbench evaluate/perceptual {bench} --option KEY=VALUE)", options))
    for title, params_class in sections:
        rows = describe(params_class) if params_class is not None else []
        typer.echo(f"{bench} {title}:" + ("" if rows else " none"))
        for row in rows:
            default = ",".join(map(str, row["default"])) if isinstance(row["default"], tuple) else row["default"]
            typer.echo(f"  {row['name']:20s} {row['type']:22s} default {default}")
            if row["help"]:
                typer.echo(f"  {'':20s} {row['help']}")


@app.command("sample-sources")
def sample_sources(out: Path = typer.Option(..., "--out", help="Folder to write the raw sample files into."),
                   scale: int = typer.Option(1, "--scale", min=1, help="Multiply the sample sizes.")):
    """Write small raw sources of every benchmark in their native formats (deterministic)."""
    import os
    from collections import Counter

    from pipelines.samples import write_samples

    paths = write_samples(out, scale)
    root = Path(os.path.abspath(out))  # the root write_samples wrote under (symlinks not resolved)
    per_source = Counter(path.relative_to(root).parts[0] for path in paths)
    for name, count in sorted(per_source.items()):
        typer.echo(f"{Path(out) / name}/: {count:,} file{'s' if count != 1 else ''}")
    typer.echo(f"wrote {len(paths):,} sample source files into {out}")


@app.command(help=(
    "Build one benchmark from its raw sources.\n\n"
    "OUT is written atomically: the build is staged beside it and replaces it only when complete. An existing "
    "OUT that `vlbench build` wrote is replaced; any other existing file, link or non-empty folder is left alone "
    "unless --overwrite is given. OUT may never be, contain or lie inside the source or images folder."))
def build(
    bench: str = typer.Argument(..., help="Benchmark name (see `vlbench list`)."),
    source: Path = typer.Option(..., "--source", help="Raw source folder (or file)."),
    out: Path = typer.Option(..., "--out", help="Output folder (hub layout)."),
    split: list[str] = typer.Option([], "--split", metavar="SPLIT",
                                    help="Split to build (repeat); default: every split present."),
    param: list[str] = typer.Option([], "--param", metavar="KEY=VALUE",
                                    help="Override a builder parameter (repeat; see `vlbench params BENCH`)."),
    legacy_json: bool = typer.Option(False, "--legacy-json", help="Also write the benchmark's original files."),
    images: Optional[Path] = typer.Option(None, "--images", help="Embed the benchmark's images from this folder."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Recompute every stage."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing OUT that vlbench did not write."),
):
    import time

    from pipelines.build import run_build

    started = time.perf_counter()
    if _whole_process:
        # A build's objects are acyclic (pipelines.build.gc_paused) and the process ends with it: no
        # collection is worth its scan of everything the build imported and kept.
        gc.disable()
    manifest = run_build(bench, source, out, splits=split, assignments=param,
                         legacy_json=legacy_json, use_cache=not no_cache, images=images, overwrite=overwrite)
    for item in manifest["outputs"]:
        if "rows" in item:
            typer.echo(f"{item['path']}: {item['rows']:,} rows")
    cached = [k for k, v in manifest["run"]["stage_cached"].items() if v]
    typer.echo(f"built {bench} into {out} in {time.perf_counter() - started:.1f} s (tables, card, figures, export)"
               + (f" (reused cached stages: {', '.join(cached)})" if cached else ""))


@app.command("verify")
def verify_command(
    folder: Path = typer.Argument(..., help="A folder written by `vlbench build`."),
    expect_published: bool = typer.Option(
        False, "--expect-published", help="Fail when a legacy file differs from the published one."),
    against: Optional[Path] = typer.Option(
        None, "--against", metavar="PUBLISHED",
        help="A published build (its folder or manifest.json): fail unless every file is byte-identical to it, "
             "and name the library versions, params and inputs that differ when one is not."),
):
    """Check a built folder: manifest hashes, invariants, and published checksums where known."""
    from core.errors import VlbenchError
    from core.sanitise import sanitise
    from pipelines.verify import compare_with_published, published_manifest, verify

    published = published_manifest(against) if against is not None else None
    report = verify(folder)
    if published is not None:
        compare_with_published(folder, report, published)
    for line in report.checked:
        typer.echo(f"checked: {line}")
    for rel, same in report.published.items():
        typer.echo(sanitise(f"{rel}: {'byte-identical to' if same else 'differs from'} the published file", (), None))
    problems = report.problems + [f"{rel}: differs from the published file"
                                  for rel, same in report.published.items() if expect_published and not same]
    for problem in problems:
        _echo_err(f"problem: {sanitise(problem)}")
    for note in report.notes:  # read from the published manifest: untrusted text
        _echo_err(f"differs: {sanitise(note)}")
    if problems:
        raise VlbenchError(f"{folder}: verification failed ({len(problems)} problem(s))")
    typer.echo(f"{folder}: ok")


@app.command()
def push(
    folder: Path = typer.Argument(..., help="A folder written by `vlbench build`."),
    repo_id: str = typer.Option(..., "--repo-id", help="Hub dataset repo, ORG/NAME."),
    private: bool = typer.Option(False, "--private", help="Create the repo as private."),
    revision: Optional[str] = typer.Option(None, "--revision", help="Branch to commit to."),
    inspect_task: Optional[Path] = typer.Option(
        None, "--inspect-task", metavar="DIR",
        help="An Inspect task `vlbench export-task --harness inspect` wrote from this build: the repo becomes a Hub "
             "benchmark for the inspect-ai framework (its prompts as the `inspect` config, eval.yaml's tasks)."),
):
    """Upload a built folder to a Hugging Face dataset repo (token: HF_TOKEN or `hf auth login`)."""
    from pipelines.push import push as push_folder

    result = push_folder(folder, repo_id, private, revision, inspect_task=inspect_task)
    typer.echo(f"uploaded {len(result['files'])} files to datasets/{repo_id}"
               + (f" ({len(result['deleted'])} stale files removed)" if result["deleted"] else "")
               + (f": {result['url']}" if result["url"] else ""))


# Options of the commands that read a built split, declared once.
DATA_OPTION = typer.Option(..., "--data", help="Built folder or hub dataset repo id.")
SCORED_SPLIT_OPTION = typer.Option(None, "--split", metavar="SPLIT",
                                   help="Split to score (default: the benchmark's evaluation split).")
BOOTSTRAP_SEED_OPTION = typer.Option(0, "--seed", min=0, help="Seed of the bootstrap resamples.")

# The submission formats `evaluate` and `compare` read (evaluator/interop.py), declared once.
Format = Literal["auto", "vlbench", "lmms-eval", "vlmevalkit", "inspect"]
FORMAT_OPTION = typer.Option("auto", "--format", help="Submission format (auto: detected from the file; lmms-eval "
                                                      "--log_samples files, VLMEvalKit prediction tables, Inspect "
                                                      ".eval logs of exported tasks).")
HARNESS_DATA_OPTION = typer.Option(
    None, "--harness-data", metavar="DIR|ORG/NAME",
    help="The lmms-eval task's dataset in lmms-lab's layout (a local parquet folder or a Hub dataset id): maps the "
         "doc_id of a log without `doc` (lmms-eval 0.7) to the benchmark's id, each row checked against the log.")
REASONING_TAGS_OPTION = typer.Option(
    [], "--reasoning-tags", metavar="OPEN,CLOSE",
    help="Markers of a reasoning model's thinking in a harness log's answers (repeat; default: <think>,</think> and "
         "the other families' own).")

@app.command(cls=ModelMenuCommand)
@with_model_flags
def predict(
    bench: str = typer.Argument(..., help="Benchmark name."),
    data: str = DATA_OPTION,
    model: str = typer.Option(..., "--model", help="A model spec (the menus below)."),
    out: Path = typer.Option(..., "--out", help="Prediction file to write (JSON)."),
    split: Optional[str] = typer.Option(None, "--split", metavar="SPLIT",
                                       help="Split to predict (default: the benchmark's evaluation split)."),
    seed: int = typer.Option(0, "--seed", min=0, help="Seed of random baselines."),
    log_samples: bool = typer.Option(False, "--log-samples",
                                     help="Also write OUT's .samples.jsonl: prompt, raw output, prediction per row."),
    limit: Optional[int] = typer.Option(None, "--limit", min=1, help="Predict only this many rows (a smoke run)."),
    offset: int = typer.Option(0, "--offset", min=0, help="Start at this row of the split (with --limit)."),
    model_options=None,
):
    """Write a model's predictions for a built split in the benchmark's submission format, and beside
    them OUT's .meta.json (model, revision, dtype, prompt, generation settings, versions)."""
    from evaluator.models.prediction_record import metadata_path
    from evaluator.run import predict as run_predict

    done = run_predict(bench, data, model, out, split=split, options=model_options, log_samples=log_samples,
                       limit=limit, offset=offset)
    if done is None:  # a non-zero rank of a distributed launch
        return
    split, n = done
    typer.echo(f"wrote {n:,} predictions for {bench}/{split} to {out} (metadata: {metadata_path(out)})")


@app.command()
def evaluate(
    bench: str = typer.Argument(..., help="Benchmark name."),
    data: str = DATA_OPTION,
    predictions: Path = typer.Option(..., "--predictions",
                                     help="Submission file (vlbench JSON, or an lmms-eval / VLMEvalKit output)."),
    split: Optional[str] = SCORED_SPLIT_OPTION,
    report: Optional[Path] = typer.Option(None, "--report", help="Write metrics.json, report.md and plots here."),
    allow_partial: bool = typer.Option(False, "--allow-partial", help="Score the questions that have a prediction."),
    allow_extra: bool = typer.Option(False, "--allow-extra", help="Ignore predictions for ids outside the split."),
    assignments: list[str] = typer.Option([], "--option", metavar="KEY=VALUE",
                                         help="Scoring option (repeat; e.g. rule=pre-2021 for VQA)."),
    by: Optional[str] = typer.Option(None, "--by", help="Also score each value of this column (a table column, or "
                                                        "a shortcut label of `vlbench shortcuts`)."),
    bootstrap: int = typer.Option(1000, "--bootstrap", min=0,
                                  help="Resamples of the 95% confidence intervals (cluster bootstrap; 0: none)."),
    seed: int = BOOTSTRAP_SEED_OPTION,
    hub_results: Optional[Path] = typer.Option(
        None, "--hub-results", help="Also write DIR/.eval_results/<benchmark>.yaml (Hub evaluation results)."),
    hub_dataset: Optional[str] = typer.Option(
        None, "--hub-dataset", metavar="ORG/NAME",
        help="The benchmark's Hub dataset repo for --hub-results (default: --data when it is a repo id)."),
    hub_source: Optional[str] = typer.Option(
        None, "--hub-source", metavar="URL",
        help="Where the evaluation can be read (an https URL: the pushed report or samples); each --hub-results "
             "entry names it as its `source`."),
    fmt: Format = FORMAT_OPTION,
    harness_data: Optional[str] = HARNESS_DATA_OPTION,
    reasoning_tags: list[str] = REASONING_TAGS_OPTION,
):
    """Score a prediction file against a built split with the benchmark's metrics."""
    from core.jsonout import dumps
    from evaluator.models.reasoning import parse_reasoning_tags
    from evaluator.request import ScoringRequest
    from evaluator.run import evaluate as run_evaluate

    request = ScoringRequest(bench, data, split, allow_partial=allow_partial, allow_extra=allow_extra,
                             options=tuple(assignments), fmt=fmt, harness_data=harness_data, resamples=bootstrap,
                             seed=seed, reasoning_tags=parse_reasoning_tags(reasoning_tags))
    metrics = run_evaluate(request, predictions, report=report, by=by, hub_results=hub_results,
                           hub_dataset=hub_dataset, hub_source=hub_source)
    headline = {k: v for k, v in metrics.items() if not isinstance(v, (list, dict))}
    typer.echo(dumps({**headline, "coverage": metrics["coverage"]}, note_key="undefined", indent=2))
    if report is not None:
        typer.echo(f"report: {report / 'report.md'}")
    if hub_results is not None:
        typer.echo(f"Hub evaluation results: {metrics['hub_results']}")


@app.command("export-task")
@with_ask_flags
def export_task(
    bench: str = typer.Argument(..., help="Benchmark name (one that declares how a generative VLM is asked)."),
    data: str = DATA_OPTION,
    harness: Literal["lmms-eval", "inspect"] = typer.Option(..., "--harness",
                                                          help="The harness whose native task to write."),
    out: Path = typer.Option(..., "--out", help="Task folder to write (documents, scored split, task files, "
                                                "README.md)."),
    split: Optional[str] = typer.Option(None, "--split", metavar="SPLIT",
                                       help="Split to export (default: the benchmark's evaluation split)."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an OUT this command did not write."),
    model_options=None,
):
    """Write a benchmark's built split as a native task of another harness: exactly vlbench's prompts, each
    sample carrying vlbench's id, scored by vlbench's own metric code; its log reads back with `evaluate`."""
    from evaluator.harness.export import export_task as run_export

    options = model_options
    folder = run_export(bench, data, harness, out, split=split, template=options.prompt,
                        choice_mode=options.choice_mode, images=options.images, videos=options.videos,
                        frames=options.frames, max_new_tokens=options.max_new_tokens, overwrite=overwrite)
    typer.echo(f"wrote the {harness} task of {bench} to {folder} (how to run it: {folder / 'README.md'})")


@app.command()
def compare(
    bench: str = typer.Argument(..., help="Benchmark name."),
    data: str = DATA_OPTION,
    predictions: list[Path] = typer.Option(..., "--predictions", metavar="FILE",
                                           help="Submission files (repeat; each is compared with the first)."),
    split: Optional[str] = SCORED_SPLIT_OPTION,
    report: Optional[Path] = typer.Option(None, "--report", help="Write metrics.json, report.md, forest plots."),
    allow_partial: bool = typer.Option(False, "--allow-partial", help="Compare on the rows every file predicts."),
    allow_extra: bool = typer.Option(False, "--allow-extra", help="Ignore predictions for ids outside the split."),
    assignments: list[str] = typer.Option([], "--option", metavar="KEY=VALUE", help="Scoring option (repeat)."),
    bootstrap: int = typer.Option(1000, "--bootstrap", min=1, help="Resamples (bootstrap and permutation test)."),
    seed: int = typer.Option(0, "--seed", min=0, help="Seed of the resamples."),
    fmt: Format = FORMAT_OPTION,
    harness_data: Optional[str] = HARNESS_DATA_OPTION,
    by: Optional[str] = typer.Option(None, "--by", help="Also compare on each value of this column (a table column, "
                                                        "or a shortcut label of `vlbench shortcuts`)."),
    reasoning_tags: list[str] = REASONING_TAGS_OPTION,
):
    """Paired comparison of submissions on the same rows: differences, intervals and p-values."""
    from evaluator.compare import compare_predictions
    from evaluator.models.reasoning import parse_reasoning_tags
    from evaluator.request import ScoringRequest

    request = ScoringRequest(bench, data, split, allow_partial=allow_partial, allow_extra=allow_extra,
                             options=tuple(assignments), fmt=fmt, harness_data=harness_data, resamples=bootstrap,
                             seed=seed, reasoning_tags=parse_reasoning_tags(reasoning_tags))
    metrics = compare_predictions(request, predictions, report=report, by=by)
    for c in metrics["comparisons"]:
        typer.echo(f"{c['b']} - {c['a']} ({metrics['rows']:,} rows, {c['clusters']:,} {c['unit']}s):")
        for path, r in c["metrics"].items():
            interval = "undefined" if r["interval"] is None else f"[{r['interval'][0]:+.2f}, {r['interval'][1]:+.2f}]"
            diff = "undefined" if r["difference"] is None else f"{r['difference']:+.2f}"
            typer.echo(f"  {path}: {diff} {interval} p={r['p_value']}")
    if report is not None:
        typer.echo(f"report: {report / 'report.md'}")


@app.command()
def leaderboard(
    bench: str = typer.Argument(..., help="Benchmark name."),
    data: str = DATA_OPTION,
    submissions: Path = typer.Option(
        ..., "--submissions", help="Folder of submissions (*.json; harness outputs *.jsonl, *.xlsx, *.tsv, *.csv, "
                                   "*.eval)."),
    out: Path = typer.Option(..., "--out", help="Site folder to write (index.html, leaderboard.csv/json)."),
    split: Optional[str] = SCORED_SPLIT_OPTION,
    assignments: list[str] = typer.Option([], "--option", metavar="KEY=VALUE", help="Scoring option (repeat)."),
    bootstrap: int = typer.Option(1000, "--bootstrap", min=0, help="Resamples of the 95% confidence intervals."),
    seed: int = BOOTSTRAP_SEED_OPTION,
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an OUT this command did not write."),
    harness_data: Optional[str] = HARNESS_DATA_OPTION,
):
    """Score every submission in a folder (a bad one is listed, never stops the others) into a static site."""
    from evaluator.leaderboard import run_leaderboard
    from evaluator.request import ScoringRequest

    request = ScoringRequest(bench, data, split, options=tuple(assignments), harness_data=harness_data,
                             resamples=bootstrap, seed=seed)
    record = run_leaderboard(request, submissions, out, overwrite=overwrite)
    rows = record["submissions"]
    scored = sum(r["status"] == "scored" for r in rows)
    typer.echo(f"{bench}: {scored} of {len(rows)} submissions scored ({sum(r['cached'] for r in rows)} from the "
               f"cache), {len(rows) - scored} invalid; site: {out / 'index.html'}")
    for r in rows:
        if r["status"] != "scored":
            typer.echo(f"  invalid: {r['error']}")


@app.command(cls=ModelMenuCommand)
@with_model_flags
def perceptual(
    bench: str = typer.Argument(..., help="Benchmark name."),
    data: str = DATA_OPTION,
    model: str = typer.Option(..., "--model", help="A model spec (the menus below)."),
    modalities: list[str] = typer.Option([], "--modalities", metavar="MODALITY",
                                         help="Modality to score (repeat; default: all)."),
    permutations: int = typer.Option(5, "--permutations", help="Draws per sample (Eq. 3)."),
    repeats: int = typer.Option(5, "--repeats", help="Repeats of the whole computation (mean ± std)."),
    seed: int = typer.Option(0, "--seed", min=0,
                              help="Seed the draws of every repeat (and the bootstrap) derive from."),
    bootstrap: int = typer.Option(1000, "--bootstrap", min=0,
                                  help="Resamples of the 95% confidence intervals (cluster bootstrap; 0: none)."),
    sampling: Literal["uniform", "permutation"] = typer.Option(
        "uniform", "--sampling", help="uniform (Eq. 3: j ~ U(1, |D|)) or permutation."),
    by: Optional[str] = typer.Option(None, "--by", help="Decompose by this column (e.g. answer_type, quality)."),
    where: Optional[str] = typer.Option(None, "--where", help="Evaluate the rows with COLUMN=VALUE only."),
    split: Optional[str] = SCORED_SPLIT_OPTION,
    report: Optional[Path] = typer.Option(None, "--report",
                                          help="Write metrics.json, report.md, plot, per-sample scores."),
    no_encoder_cache: bool = typer.Option(False, "--no-encoder-cache",
                                          help="Re-encode permuted inputs of late-fusion models."),
    assignments: list[str] = typer.Option([], "--option", metavar="KEY=VALUE",
                                         help="Scoring option (repeat; e.g. rule=pre-2021 for VQA)."),
    model_options=None,
):
    """Perceptual score of a model towards each modality (Gat et al., NeurIPS 2021, Eq. 1-5), with normalisations."""
    from core.progress import progress
    from evaluator.perceptual.run import perceptual_score
    from evaluator.perceptual.score import PerceptualOptions
    from evaluator.request import ScoringRequest

    options = PerceptualOptions(modalities=tuple(modalities), permutations=permutations, repeats=repeats, seed=seed,
                                sampling=sampling, by=by, encoder_cache=not no_encoder_cache)
    with progress(desc="perceptual passes", unit="pass", leave=True) as bar:
        request = ScoringRequest(bench, data, split, options=tuple(assignments), resamples=bootstrap, seed=seed)
        metrics = perceptual_score(request, model, options, model_options=model_options, report=report,
                                   where=where, progress=bar.update)
    if metrics is None:  # a non-zero rank of a distributed launch
        return
    for metric, s in metrics["all"].items():
        typer.echo(f"{bench}/{metrics['split']} {model}: {metric} {_fmt(s['acc'])} "
                   f"(majority {_fmt(s['acc_majority'])}, {s['samples']:,} samples)")
        for m, v in s["modalities"].items():
            typer.echo(f"  {m:10s} without {_fmt(v['acc_without']['mean'])}  P {_fmt(v['p']['mean'])}  "
                       f"P/Z_D {_fmt(v['p_zd']['mean'])}  P/Z_D,f {_fmt(v['p_zdf']['mean'])}")
    if report is not None:
        typer.echo(f"report: {report / 'report.md'}")


def _fmt(value) -> str:
    return "-" if value is None else f"{value:.2f}"


@app.command(cls=ModelMenuCommand)
@with_model_flags
def suite(
    model: str = typer.Option(..., "--model", help="A model spec (the menus below)."),
    data: Path = typer.Option(..., "--data", help="Folder of built benchmarks (one sub-folder each, as `make demo` "
                                                  "writes), or a Hub organisation holding ORG/<benchmark> repos."),
    out: Path = typer.Option(..., "--out", help="The suite folder: predictions, reports, card.json, report.md."),
    only: Optional[str] = typer.Option(None, "--benchmarks", metavar="A,B,...", help="Only these benchmarks."),
    images_root: Optional[Path] = typer.Option(
        None, "--images-root", help="Images of every benchmark in one folder: coco/, gqa/, vcr1images/, cosim/, pmr/, "
                                    "visdial/ (the README's layout)."),
    seed: int = typer.Option(0, "--seed", min=0, help="Seed of random baselines and of the bootstrap."),
    bootstrap: int = typer.Option(1000, "--bootstrap", min=0, help="Resamples of the 95% confidence intervals."),
    no_perceptual: bool = typer.Option(False, "--no-perceptual", help="Skip the perceptual scores (several passes "
                                                                       "of the model per benchmark)."),
    no_counterbias: bool = typer.Option(False, "--no-counterbias", help="Skip CounterBias on a VL-Bias build (an "
                                                                         "attack per image)."),
    hub_results: Optional[Path] = typer.Option(
        None, "--hub-results", help="Also write DIR/.eval_results/<benchmark>.yaml of every scored benchmark."),
    hub_org: Optional[str] = typer.Option(
        None, "--hub-org", metavar="ORG", help="The Hub organisation of the benchmarks' repos (ORG/<benchmark>)."),
    hub_source: Optional[str] = typer.Option(
        None, "--hub-source", metavar="URL",
        help="Where the card can be read (an https URL); each --hub-results entry names it as its `source`."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Use an OUT that is not a suite folder."),
    submissions: Optional[Path] = typer.Option(
        None, "--predictions", metavar="DIR",
        help="Score the model's runs instead of running it: DIR/<benchmark>.<ext> per benchmark (a prediction file, "
             "an lmms-eval or Inspect log of an exported task, a VLMEvalKit table); --model names the model."),
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
    card = run_suite(model, data, out, model_options=model_options, only=benchmarks, images_root=images_root,
                     resamples=bootstrap, seed=seed, perceptual=not no_perceptual, counterbias=not no_counterbias,
                     counterbias_cache=default_cache_dir() / "counterbias", hub_results=hub_results,
                     hub_org=hub_org, hub_source=hub_source, overwrite=overwrite, submissions=submissions,
                     echo=typer.echo)
    scored = sum(r["status"] == "scored" for r in card["benchmarks"].values())
    typer.echo(f"{scored} of {len(card['benchmarks'])} benchmarks scored, {len(card['diagnostics'])} diagnostics; "
               f"report card: {out / 'report.md'}")


@app.command("suite-compare")
def suite_compare(
    cards: list[Path] = typer.Argument(..., help="Report cards: `vlbench suite` OUT folders (the first is the base)."),
    out: Path = typer.Option(..., "--out", help="Site folder to write (index.html, cards.json)."),
    bootstrap: int = typer.Option(1000, "--bootstrap", min=1, help="Resamples of the paired comparisons."),
    seed: int = typer.Option(0, "--seed", min=0, help="Seed of the resamples."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an OUT this command did not write."),
):
    """Several models' report cards on one page, with paired comparisons where two cards scored the same build."""
    from evaluator.suite.compare import compare_cards

    record = compare_cards(cards, out, resamples=bootstrap, seed=seed, overwrite=overwrite)
    typer.echo(f"{len(record['cards'])} report cards, {len(record['comparisons'])} paired comparisons; "
               f"page: {out / 'index.html'}")


@app.command()
def shortcuts(
    bench: str = typer.Argument(..., help="Benchmark (multiple-choice: vcr, vcr-visor, pmr-p, cosim-q/c, socialiq)."),
    data: str = DATA_OPTION,
    out: Path = typer.Option(..., "--out", help="Where to write the new version of DATA (DATA + a shortcuts config)."),
    split: Optional[str] = typer.Option(None, "--split", metavar="SPLIT",
                                       help="Split to label (default: the benchmark's evaluation split)."),
    train: Optional[str] = typer.Option(None, "--train", help="Built folder whose train split fits the models "
                                                              "(default: DATA's own; e.g. vcr for vcr-visor)."),
    labels_from: Optional[str] = typer.Option(None, "--labels-from", help="Take the labels of the source examples "
                                              "by id from this labelled folder (vcr-visor: a labelled vcr)."),
    models: list[str] = typer.Option([], "--model", metavar="ID_OR_PATH",
                                     help="Text-only model (repeat; default: bert-base-uncased and roberta-base)."),
    seeds: list[int] = typer.Option([], "--seed", min=0, metavar="SEED",
                                    help="Training seed (repeat; default: 0, 1, 2)."),
    epochs: int = typer.Option(3, "--epochs", min=1, help="Training epochs per run."),
    learning_rate: float = typer.Option(2e-5, "--learning-rate", help="AdamW learning rate."),
    batch_size: int = typer.Option(16, "--batch-size", min=1, help="Examples per training batch."),
    max_length: int = typer.Option(128, "--max-length", min=8, help="Tokens per (context, candidate)."),
    shuffle_seed: int = typer.Option(0, "--shuffle-seed", min=0, help="Seed of the word-level shuffles."),
    device: str = typer.Option("auto", "--device", help="torch device (auto: CUDA when present)."),
    bf16: bool = typer.Option(False, "--bf16", help="Train and score in bfloat16 autocast (CUDA)."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing OUT that vlbench did not write."),
):
    """Language-shortcut labels per example (the VCR-Visor paper, App. A, Table 6): Biased / Neutral /
    Non-Biased by how many text-only models, trained with several seeds, pick the correct candidate."""
    from evaluator.shortcuts.labels import LABELS, ShortcutOptions
    from evaluator.shortcuts.run import run_shortcuts

    defaults = ShortcutOptions()
    options = ShortcutOptions(models=tuple(models) or defaults.models, seeds=tuple(seeds) or defaults.seeds,
                              epochs=epochs, learning_rate=learning_rate, batch_size=batch_size, max_length=max_length,
                              shuffle_seed=shuffle_seed, device=device, bf16=bf16)
    metrics = run_shortcuts(bench, data, out, split=split, train=train, labels_from=labels_from, options=options,
                            overwrite=overwrite)
    if metrics is None:  # a non-zero rank of a distributed launch
        return
    for key, shares in metrics["shares"].items():
        level, kind = key.split(":")
        typer.echo(f"{level:8s} {kind:8s} " + "  ".join(f"{name} {shares[name]:.1f}%" for name in LABELS))
    typer.echo(f"wrote {out} ({metrics['examples']:,} examples of {bench}/{metrics['split']} labelled; "
               "config 'shortcuts', card section 'Language-shortcut labels')")


@app.command()
def counterbias(
    data: str = typer.Option(..., "--data", help="Built VL-Bias folder or hub dataset repo id."),
    model: str = typer.Option(..., "--model", help="hf:<ViltForMaskedLM, text masked LM, generative VLM, CLIP or "
                                                    "SigLIP> or py:<module>:<factory>."),
    attack: Literal["pgd", "none"] = typer.Option("pgd", "--attack",
                               help="pgd (counterfactual images, Eq. 3) or none (language bias only)."),
    eps: float = typer.Option(8 / 255, "--eps", help="L-infinity budget on pixels in [0, 1]."),
    steps: int = typer.Option(10, "--steps", min=1, max=10_000, help="PGD steps (at most 10,000: each is a "
                                                                      "forward and backward pass per image)."),
    step_size: Optional[float] = typer.Option(None, "--step-size", help="PGD step (default 2.5 eps / steps)."),
    softmax: Literal["full", "targets"] = typer.Option(
        "full", "--softmax", help="full (vocabulary, Eq. 1) or targets (the authors' code)."),
    b0: Optional[str] = typer.Option(None, "--b0", help="Eq. 7's B0: positive biases lean towards it (default: "
                                                        "the build's B0 side, male for VL-Bias)."),
    bias_prompt: Optional[str] = typer.Option(None, "--bias-prompt", help="The text with one [MASK] that P(B | V) "
                                              "is read from (default: the split's; a generative VLM's adaptation)."),
    min_change: float = typer.Option(1e-6, "--min-concept-change",
                                     help="Smaller bias-concept changes leave a bias undefined."),
    split: Optional[str] = typer.Option(None, "--split", metavar="SPLIT", help="Split (default: test)."),
    report: Optional[Path] = typer.Option(None, "--report",
                                          help="Write metrics.json, report.md, plots, per-instance values."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Do not read or write cached counterfactual images."),
    device: str = typer.Option("auto", "--device", help="torch device (auto: CUDA when present)."),
    batch_size: int = typer.Option(32, "--batch-size", min=1, help="Batch size of forward passes and of the attack."),
    bf16: bool = typer.Option(False, "--bf16", help="Run the model in bfloat16 (autocast; a generative VLM's "
                                                    "weights in bfloat16)."),
    revision: Optional[str] = typer.Option(None, "--revision", help="A hub checkpoint's branch, tag or commit."),
    bootstrap: int = typer.Option(1000, "--bootstrap", min=0,
                                  help="Resamples of the images for 95% confidence intervals (0: none)."),
    seed: int = BOOTSTRAP_SEED_OPTION,
):
    """CounterBias (Zhang, Wang, Sang, ACM MM 2022): social bias of a vision-language model on VL-Bias."""
    from core.progress import progress
    from evaluator.models.options import ModelOptions
    from evaluator.vl_bias.attack import PGD
    from evaluator.vl_bias.counterbias import MEASURES
    from evaluator.vl_bias.run import CounterBiasOptions, run_counterbias
    from pipelines.stages import default_cache_dir

    options = CounterBiasOptions(attack=PGD(eps, steps, step_size) if attack == "pgd" else None, softmax=softmax,
                                 b0=b0, min_change=min_change, bias_prompt=bias_prompt,
                                 cache=None if no_cache else default_cache_dir() / "counterbias")
    model_options = ModelOptions(device=device, batch_size=batch_size, bf16=bf16,
                                 dtype="bfloat16" if bf16 else "auto", revision=revision)
    with progress(desc="images", unit="image", leave=True) as bar:
        metrics = run_counterbias(data, model, options, model_options, split=split, report=report,
                                  progress=bar.update, bootstrap=bootstrap, seed=seed)
    for m, s in metrics["measures"].items():
        shown = "  ".join(f"{k} {_fmt(v if v is None or m == 'l_log' else 100 * v)}" for k, v in s["avg"].items())
        typer.echo(f"{metrics['model']} {MEASURES[m][0]} ({MEASURES[m][1]}), mean |bias|"
                   f"{' in %' if m != 'l_log' else ''}: {shown}")
    if metrics["attack"]:
        raised = 100 * metrics["attack"]["raised_b_prime"]
        typer.echo(f"counterfactual images: P(B'|V_cf) > P(B'|V_f) for {raised:.1f}% "
                   f"of {metrics['attack']['images']:,} images")
    if report is not None:
        typer.echo(f"report: {report / 'report.md'}")


@app.command("counterbias-compare")
def counterbias_compare(
    a: Path = typer.Argument(..., help="Report folder of model A (vlbench counterbias --report), the reference."),
    b: Path = typer.Argument(..., help="Report folder of model B on the same VL-Bias split (e.g. after debiasing)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Write metrics.json and report.md here."),
    bootstrap: int = typer.Option(1000, "--bootstrap", min=0, help="Paired resamples of the images (0: none)."),
    seed: int = BOOTSTRAP_SEED_OPTION,
):
    """Two CounterBias reports on the same split, cell by cell: B - A with paired 95% intervals (FairVLP, §5)."""
    from evaluator.vl_bias.compare import compare_reports

    metrics = compare_reports(a, b, out=out, bootstrap=bootstrap, seed=seed)
    for m, kinds in metrics["measures"].items():
        scale = 1 if m == "l_log" else 100

        def shown_cell(cell: dict) -> str:
            iv = cell["diff_interval"]
            return _fmt(None if cell["diff"] is None else scale * cell["diff"]) + \
                (f" [{scale * iv[0]:.2f}, {scale * iv[1]:.2f}]" if iv else "")

        shown = "  ".join(f"{kind} {shown_cell(c['avg'])}" for kind, c in kinds.items())
        typer.echo(f"{m}: B - A of the mean |bias|{' in %' if scale == 100 else ''}: {shown}")
    if out is not None:
        typer.echo(f"report: {out / 'report.md'}")


@app.command()
def demo(out: Path = typer.Option(Path("demo_out"), "--out", help="Folder for sources, dataset and reports.")):
    """Sample sources -> build -> verify -> baseline predictions -> evaluation reports."""
    from pipelines.demo import run_demo

    run_demo(out, echo=typer.echo)


class Terminated(BaseException):
    """SIGTERM, raised in the main thread so that every `finally` (staging folders, partial files)
    runs as it does for Ctrl-C."""


INTERRUPTED = 130  # the exit status of a run stopped by Ctrl-C (128 + SIGINT)


def _terminate(signum, frame):
    raise Terminated()


def _click_exceptions():
    """The command-line parser's exceptions: typer vendors click as `typer._click` in recent releases,
    older ones use click itself."""
    try:
        from typer._click import exceptions
    except ImportError:
        from click import exceptions
    return exceptions


def _usage_line(exc) -> str:
    """A click usage error (bad option value, unknown option, missing option) as one line."""
    message = exc.format_message().replace("Value error, ", "")
    where = f" (see `{exc.ctx.command_path} --help`)" if getattr(exc, "ctx", None) is not None else ""
    return f"error: {message}{where}"


def main(argv: list[str] | None = None) -> None:
    """The console script (argv None: the process ends with the command) or a caller's command line."""
    import signal
    import threading

    global _whole_process
    _whole_process = argv is None

    from core.errors import STOP_NOTES, VlbenchError, stopped_line
    from core.progress import quiet_library_bars

    STOP_NOTES.clear()  # a command that ended before (a caller's in-process run) leaves nothing to say

    quiet_library_bars()
    click = _click_exceptions()
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        code = app(args=argv, prog_name="vlbench", standalone_mode=False)
        if code == INTERRUPTED:  # typer turns Ctrl-C into this exit code, returned (no vlbench command exits so)
            raise KeyboardInterrupt
        if isinstance(code, int) and code:
            sys.exit(code)
        distributed = sys.modules.get("evaluator.models.distributed")  # imported only by commands that shard
        if distributed is not None:
            distributed.exit_after_group(0)
    except click.NoArgsIsHelpError as exc:
        typer.echo(exc.ctx.get_help())
        sys.exit(2)
    except click.UsageError as exc:
        _echo_err(_usage_line(exc))
        sys.exit(2)
    except click.ClickException as exc:
        _echo_err(f"error: {exc.format_message()}")
        sys.exit(2)
    except typer.Abort:
        _echo_err("error: interrupted; nothing half-written was left behind")
        sys.exit(INTERRUPTED)
    except VlbenchError as exc:
        _echo_err(f"error: {exc}")
        sys.exit(2)
    except KeyboardInterrupt:
        _echo_err(stopped_line(signal.SIGINT))
        sys.exit(INTERRUPTED)
    except Terminated:
        _echo_err(stopped_line(signal.SIGTERM))
        sys.exit(143)
    except OSError as exc:  # the environment refused a read or write no command caught: one line, never a traceback
        where = f"{exc.filename}: " if exc.filename else ""
        _echo_err(f"error: {where}{exc.strerror or exc}; the command stopped")
        sys.exit(2)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        if _whole_process:
            # What is still alive is left to the OS: the interpreter's final collections would scan it
            # all again (about 0.25 s once datasets and pandas are loaded).
            gc.freeze()


if __name__ == "__main__":
    main()
