"""Write a BuildResult in the hub layout (DESIGN §4), atomically: stage beside OUT, then rename."""

from __future__ import annotations

import math
import os
import shutil
from contextlib import contextmanager
from pathlib import Path

import pyarrow.parquet as pq

from builders.result import BuildResult
from pipelines.cards import render_card
from pipelines.figures import render
from pipelines.manifest import describe_outputs, write_manifest

MAX_SHARD_BYTES = 500 << 20  # as datasets' push_to_hub


@contextmanager
def atomic_folder(out: Path):
    """Yield a staging folder that replaces `out` only when the block finishes without error."""
    out = out.resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    for stale in out.parent.glob(f".{out.name}.partial-*"):
        shutil.rmtree(stale, ignore_errors=True)
    staging = out.parent / f".{out.name}.partial-{os.getpid()}"
    staging.mkdir()
    try:
        yield staging
        backup = out.parent / f".{out.name}.old-{os.getpid()}"
        if out.exists():
            out.rename(backup)
        staging.rename(out)
        shutil.rmtree(backup, ignore_errors=True)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def write_tables(result: BuildResult, folder: Path) -> tuple[dict, dict]:
    """Parquet shards `<config>/<split>-0000i-of-0000N.parquet`; returns (card split info, rows per file)."""
    splits, rows = {}, {}
    for config, by_split in result.tables.items():
        splits[config] = {}
        (folder / config).mkdir()
        for split, table in sorted(by_split.items()):
            shards = max(1, math.ceil(table.nbytes / MAX_SHARD_BYTES))
            step = math.ceil(table.num_rows / shards) if table.num_rows else 0
            num_bytes = 0
            for i in range(shards):
                rel = f"{config}/{split}-{i:05d}-of-{shards:05d}.parquet"
                part = table.slice(i * step, step) if step else table
                pq.write_table(part, folder / rel)
                rows[rel] = part.num_rows
                # Uncompressed size from the file itself: in-memory sizes depend on buffer layout.
                meta = pq.read_metadata(folder / rel)
                num_bytes += sum(meta.row_group(g).total_byte_size for g in range(meta.num_row_groups))
            splits[config][split] = {"num_examples": table.num_rows, "num_bytes": num_bytes,
                                     "pattern": f"{config}/{split}-*"}
    return splits, rows


def export(result: BuildResult, builder, out: Path, manifest: dict, legacy_json: bool) -> dict:
    """Tables, legacy files, figures, card and manifest, all or nothing. Returns the manifest."""
    with atomic_folder(out) as folder:
        splits, rows = write_tables(result, folder)
        if legacy_json:
            for rel, produce in sorted(result.legacy_files.items()):
                (folder / rel).parent.mkdir(parents=True, exist_ok=True)
                (folder / rel).write_bytes(produce())
        figure_links = []
        if result.figures:
            (folder / "figures").mkdir()
            for spec in result.figures:
                render(spec, folder / "figures" / spec.filename)
                figure_links.append(f"![{spec.title}](figures/{spec.filename})")
        fields = {**result.card_fields, "figures": "\n\n".join(figure_links),
                  "build_command": manifest["command"]}
        (folder / "README.md").write_text(render_card(builder.card_template, fields, result.features, splits,
                                                      builder.default_config))
        manifest["outputs"] = describe_outputs(folder, rows)
        write_manifest(folder, manifest)
    return manifest
