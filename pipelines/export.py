"""Write a BuildResult in the hub layout, atomically (core.outdir): stage beside OUT, then rename."""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable

import pyarrow.parquet as pq

from builders.result import BuildResult
from core.figures import FigureSpec
from core.manifest import describe_outputs, write_manifest
from core.outdir import atomic_folder, interrupts_held
from core.progress import progress
from evaluator.publish.hub_results import EVAL_YAML, card_section, eval_yaml
from pipelines.cards import render_card, reproducibility
from pipelines.figure_process import draw_pngs

MAX_SHARD_BYTES = 500 << 20  # as datasets' push_to_hub
WRITERS = "vlbench-writer"  # the names of the threads that write the shards


def _write_shard(table, path: Path) -> int:
    """Write one parquet shard; returns its uncompressed size as the file records it (in-memory
    sizes depend on buffer layout, the file's do not)."""
    with open(path, "wb") as handle:  # a Python file: Arrow cannot open a path whose bytes are not UTF-8
        pq.write_table(table, handle)
    with open(path, "rb") as handle:
        meta = pq.read_metadata(handle)
    return sum(meta.row_group(g).total_byte_size for g in range(meta.num_row_groups))


def write_tables(result: BuildResult, folder: Path, pool: ThreadPoolExecutor,
                 written: Callable[[], object] = lambda: None) -> Callable[[], tuple[dict, dict]]:
    """Start writing parquet shards `<config>/<split>-0000i-of-0000N.parquet` on the pool (Arrow
    releases the GIL); the returned function waits (calling `written` per shard) and gives (card
    split info, rows per file)."""
    jobs = []
    with interrupts_held():  # the pool starts its threads here: it must know every one, to join it
        for config, by_split in result.tables.items():
            (folder / config).mkdir()
            for split, table in sorted(by_split.items()):
                shards = max(1, math.ceil(table.nbytes / MAX_SHARD_BYTES))
                step = math.ceil(table.num_rows / shards) if table.num_rows else 0
                for i in range(shards):
                    rel = f"{config}/{split}-{i:05d}-of-{shards:05d}.parquet"
                    part = table.slice(i * step, step) if step else table
                    jobs.append((config, split, rel, part.num_rows, pool.submit(_write_shard, part, folder / rel)))

    def finish() -> tuple[dict, dict]:
        splits, rows = {}, {}
        for config, split, rel, n, job in jobs:
            info = splits.setdefault(config, {}).setdefault(
                split, {"num_examples": 0, "num_bytes": 0, "pattern": f"{config}/{split}-*"})
            info["num_examples"] += n
            info["num_bytes"] += job.result()
            rows[rel] = n
            written()
        return splits, rows

    return finish


def export(result: BuildResult, builder, out: Path, manifest: dict, legacy_json: bool,
           figure_pngs: Callable[[list[FigureSpec]], list[bytes]] = draw_pngs,
           check: Callable[[], None] | None = None, recheck=None) -> dict:
    """Tables, legacy files, figures, card and manifest, all or nothing. Returns the manifest.
    `figure_pngs` draws the figures (pipelines.figure_process); `check` runs while the tables are
    written (what it raises discards the staging folder: nothing is published); `recheck` runs under
    the publish lock, just before OUT is replaced."""
    with (atomic_folder(out, recheck) as folder, ThreadPoolExecutor(max_workers=2, thread_name_prefix=WRITERS) as pool,
          progress(desc=f"writing {out.name}", unit="file") as bar):
        tables_written = write_tables(result, folder, pool, bar.update)
        if check is not None:
            check()
        # eval.yaml names built configs and splits only: it is made while the shards are written
        built_splits = {config: list(tables) for config, tables in result.tables.items()}
        hub = eval_yaml(builder.name, built_splits)
        if legacy_json:
            for rel, produce in sorted(result.legacy_files.items()):
                (folder / rel).parent.mkdir(parents=True, exist_ok=True)
                (folder / rel).write_bytes(produce())
                bar.update()
        if result.figures:
            (folder / "figures").mkdir()
            for spec, png in zip(result.figures, figure_pngs(result.figures)):
                (folder / "figures" / spec.filename).write_bytes(png)
        figure_links = [f"![{spec.title}](figures/{spec.filename})" for spec in result.figures]
        splits, rows = tables_written()
        fields = {**result.card_fields, "figures": "\n\n".join(figure_links),
                  "build_command": manifest["command"], "reproducibility": reproducibility(builder.floats)}
        card = render_card(builder.card_template_text(), fields, result.features_of, splits, builder.default_config)
        (folder / "README.md").write_text(card + card_section(builder.name, built_splits))
        if hub is not None:
            (folder / EVAL_YAML).write_text(hub)
        manifest["outputs"] = describe_outputs(folder, rows)
        write_manifest(folder, manifest)
    return manifest
