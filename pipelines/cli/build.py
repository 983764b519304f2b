"""The build commands: `vlbench list`, `params`, `sample-sources`, `build`, `verify` and `seal`."""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Optional

import typer

from pipelines.cli.app import app, echo_err, whole_process
from pipelines.cli.options import BENCH, BUILT, answers_option, overwrite_option


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
def params_command(bench: str = BENCH):
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
    bench: str = BENCH,
    source: Path = typer.Option(..., "--source", help="Raw source folder (or file)."),
    out: Path = typer.Option(..., "--out", help="Output folder (hub layout)."),
    split: list[str] = typer.Option([], "--split", metavar="SPLIT",
                                    help="Split to build (repeat); default: every split present."),
    param: list[str] = typer.Option([], "--param", metavar="KEY=VALUE",
                                    help="Override a builder parameter (repeat; see `vlbench params BENCH`)."),
    legacy_json: bool = typer.Option(False, "--legacy-json", help="Also write the benchmark's original files."),
    images: Optional[Path] = typer.Option(None, "--images", help="Embed the benchmark's images from this folder."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Recompute every stage."),
    overwrite: bool = overwrite_option(),
):
    import time

    from pipelines.build import run_build

    started = time.perf_counter()
    if whole_process():
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


@app.command("seal")
def seal_command(
    folder: str = typer.Argument(..., metavar="BUILD", help="A built folder (or a Hub dataset repo id)."),
    public: Path = typer.Option(..., "--public", metavar="OUT", help="The public half: the folder to publish."),
    answers: Path = typer.Option(..., "--answers", metavar="FILE",
                                 help="The sealed answer file: keep it private until the reveal."),
    split: list[str] = typer.Option([], "--split", help="A split to seal (repeat; default: the benchmark's "
                                                        "evaluation split)."),
    open_split: list[str] = typer.Option([], "--open", metavar="SPLIT",
                                         help="A split copied whole, answers included (a train split; repeat)."),
    reveal_on: Optional[str] = typer.Option(None, "--reveal-on", metavar="YYYY-MM-DD",
                                            help="When the answers will be published (the card says so)."),
    overwrite: bool = overwrite_option("Replace an OUT or FILE this command did not write."),
):
    """Seal a build for a hidden challenge: a public folder with no answer in it, a sealed answer file, and a
    salted SHA-256 commitment to that file in the public card."""
    import datetime

    from core.errors import ParamsError
    from pipelines.seal import seal

    try:
        day = datetime.date.fromisoformat(reveal_on) if reveal_on is not None else None
    except ValueError:
        raise ParamsError("--reveal-on: a date as YYYY-MM-DD") from None
    record = seal(folder, public, answers, split or None, day, overwrite, open_split)
    for name, info in record["splits"].items():
        typer.echo(f"{record['config']}/{name}: {info['rows']:,} rows; sealed columns: "
                   f"{', '.join(info['sealed_columns'])}")
    for name in record["open_splits"]:
        typer.echo(f"{record['config']}/{name}: open (copied whole)")
    typer.echo(f"public half: {public} (publish it)")
    typer.echo(f"sealed answers: {answers} (keep it private until the reveal)")
    typer.echo(f"commitment: {record['commitment']}")


@app.command("verify")
def verify_command(
    folder: Path = BUILT,
    expect_published: bool = typer.Option(
        False, "--expect-published", help="Fail when a legacy file differs from the published one."),
    against: Optional[Path] = typer.Option(
        None, "--against", metavar="PUBLISHED",
        help="A published build (its folder or manifest.json): fail unless every file is byte-identical to it, "
             "and name the library versions, params and inputs that differ when one is not. For the public half "
             "of a sealed build (with --answers): the build it was sealed from, compared row for row."),
    answers: Optional[Path] = answers_option("the two halves joined are checked as a build is"),
):
    """Check a built folder: manifest hashes, invariants, and published checksums where known. The public half of
    a sealed build: that it holds no answer (and, with --answers, the commitment and the whole tables)."""
    from core.errors import VlbenchError
    from core.sanitise import sanitise
    from pipelines.verify import compare_sealed, compare_with_published, published_manifest, verify

    report = verify(folder, answers)
    if against is not None and answers is not None:
        compare_sealed(folder, report, answers, against)
    elif against is not None:
        compare_with_published(folder, report, published_manifest(against))
    for line in report.checked:
        typer.echo(f"checked: {line}")
    for rel, same in report.published.items():
        typer.echo(sanitise(f"{rel}: {'byte-identical to' if same else 'differs from'} the published file", (), None))
    problems = report.problems + [f"{rel}: differs from the published file"
                                  for rel, same in report.published.items() if expect_published and not same]
    for problem in problems:
        echo_err(f"problem: {sanitise(problem)}")
    for note in report.notes:  # read from the published manifest: untrusted text
        echo_err(f"differs: {sanitise(note)}")
    if problems:
        raise VlbenchError(f"{folder}: verification failed ({len(problems)} problem(s))")
    typer.echo(f"{folder}: ok")
