"""The `vlbench` command line (DESIGN §3). Heavy modules are imported inside each command."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Regenerate bias-aware vision-and-language benchmarks, publish them, score models.")


def _echo_err(message: str) -> None:
    typer.echo(message, err=True)


@app.command("list")
def list_benchmarks(
    sources_present: Optional[Path] = typer.Option(
        None, "--sources-present", help="Only benchmarks whose raw sources are under this folder."),
    names: bool = typer.Option(False, "--names", help="Print names only, one per line."),
):
    """Benchmarks, their sources and configs."""
    from builders.registry import builder_names, get_builder

    for name in builder_names():
        builder = get_builder(name)
        if sources_present is not None:
            try:
                builder.locate_sources(sources_present / builder.source_dir, [])
            except Exception:
                continue
        if names:
            typer.echo(name)
        else:
            typer.echo(f"{name}: {builder.description}\n  source:  {builder.sources_help}"
                       f" (folder '{builder.source_dir}/' of sample-sources)\n"
                       f"  configs: {', '.join(builder.configs)}   splits: {', '.join(builder.splits)}")


@app.command("sample-sources")
def sample_sources(out: Path = typer.Option(..., "--out", help="Folder to write the raw sample files into."),
                   scale: int = typer.Option(1, "--scale", min=1, help="Multiply the sample sizes.")):
    """Write small raw sources of every benchmark in their native formats (deterministic)."""
    from pipelines.samples import write_samples

    for path in write_samples(out, scale):
        typer.echo(str(path))


@app.command()
def build(
    bench: str = typer.Argument(..., help="Benchmark name (see `vlbench list`)."),
    source: Path = typer.Option(..., "--source", help="Raw source folder (or file)."),
    out: Path = typer.Option(..., "--out", help="Output folder (hub layout)."),
    split: list[str] = typer.Option([], "--split", help="Split(s) to build; default: every split present."),
    set_: list[str] = typer.Option([], "--set", help="Override a builder parameter: KEY=VALUE."),
    legacy_json: bool = typer.Option(False, "--legacy-json", help="Also write the benchmark's original files."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Recompute every stage."),
):
    """Build one benchmark from its raw sources."""
    from pipelines.build import run_build

    manifest = run_build(bench, source, out, split, set_, legacy_json, use_cache=not no_cache)
    for item in manifest["outputs"]:
        if "rows" in item:
            typer.echo(f"{item['path']}: {item['rows']:,} rows")
    cached = [k for k, v in manifest["run"]["stage_cached"].items() if v]
    typer.echo(f"built {bench} into {out} in {manifest['run']['build_seconds']:.1f} s"
               + (f" (reused cached stages: {', '.join(cached)})" if cached else ""))


def main(argv: list[str] | None = None) -> None:
    from builders.errors import VlbenchError

    try:
        app(args=argv, prog_name="vlbench")
    except VlbenchError as exc:
        _echo_err(f"error: {exc}")
        sys.exit(2)


if __name__ == "__main__":
    main()
