"""The commands that compare and publish: `vlbench compare`, `leaderboard`, `counterbias-compare` and `push`."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from pipelines.cli.app import app, fmt
from pipelines.cli.options import (
    BENCH,
    BUILT,
    bootstrap_option,
    by_option,
    overwrite_option,
    report_option,
    seed_option,
    with_scoring_flags,
)


@app.command()
@with_scoring_flags(resamples=bootstrap_option("Resamples (bootstrap and permutation test).", min=1),
                    seed=seed_option("Seed of the resamples."))
def compare(
    bench: str = BENCH,
    predictions: list[Path] = typer.Option(..., "--predictions", metavar="FILE",
                                           help="Submission files (repeat; each is compared with the first)."),
    report: Optional[Path] = report_option("metrics.json, report.md, forest plots"),
    by: Optional[str] = by_option("Also compare on each value of this column (a table column, or a shortcut label "
                                  "of `vlbench shortcuts`)."),
    request=None,
):
    """Paired comparison of submissions on the same rows: differences, intervals and p-values."""
    from evaluator.compare import compare_predictions

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
@with_scoring_flags(only=("split", "options", "harness_data", "resamples", "seed"),
                    resamples=bootstrap_option("Resamples of the 95% confidence intervals."))
def leaderboard(
    bench: str = BENCH,
    submissions: Path = typer.Option(
        ..., "--submissions", help="Folder of submissions (*.json; harness outputs *.jsonl, *.xlsx, *.tsv, *.csv, "
                                   "*.eval)."),
    out: Path = typer.Option(..., "--out", help="Site folder to write (index.html, leaderboard.csv/json)."),
    overwrite: bool = overwrite_option(),
    request=None,
):
    """Score every submission in a folder (a bad one is listed, never stops the others) into a static site."""
    from evaluator.leaderboard import run_leaderboard

    record = run_leaderboard(request, submissions, out, overwrite=overwrite)
    rows = record["submissions"]
    scored = sum(r["status"] == "scored" for r in rows)
    typer.echo(f"{bench}: {scored} of {len(rows)} submissions scored ({sum(r['cached'] for r in rows)} from the "
               f"cache), {len(rows) - scored} invalid; site: {out / 'index.html'}")
    for r in rows:
        if r["status"] != "scored":
            typer.echo(f"  invalid: {r['error']}")


@app.command("counterbias-compare")
def counterbias_compare(
    a: Path = typer.Argument(..., help="Report folder of model A (vlbench counterbias --report), the reference."),
    b: Path = typer.Argument(..., help="Report folder of model B on the same VL-Bias split (e.g. after debiasing)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Write metrics.json and report.md here."),
    bootstrap: int = bootstrap_option("Paired resamples of the images (0: none)."),
    seed: int = seed_option(),
):
    """Two CounterBias reports on the same split, cell by cell: B - A with paired 95% intervals (FairVLP, §5)."""
    from evaluator.vl_bias.compare import compare_reports

    metrics = compare_reports(a, b, out=out, bootstrap=bootstrap, seed=seed)
    for m, kinds in metrics["measures"].items():
        scale = 1 if m == "l_log" else 100

        def shown_cell(cell: dict) -> str:
            iv = cell["diff_interval"]
            return fmt(None if cell["diff"] is None else scale * cell["diff"]) + \
                (f" [{scale * iv[0]:.2f}, {scale * iv[1]:.2f}]" if iv else "")

        shown = "  ".join(f"{kind} {shown_cell(c['avg'])}" for kind, c in kinds.items())
        typer.echo(f"{m}: B - A of the mean |bias|{' in %' if scale == 100 else ''}: {shown}")
    if out is not None:
        typer.echo(f"report: {out / 'report.md'}")


@app.command()
def push(
    folder: Path = BUILT,
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
