"""A new version of a built folder: every file of DATA, left as it is, plus configs a command computed from it
(`vlbench shortcuts`: the shortcut labels; `vlbench stress-test`: the stress test's scores and its debiased
subset), their entries in the card's YAML (configs, dataset_info), the command's card section and its manifest
record. An earlier version's configs of the same command are left out and replaced, other commands' configs and
sections are kept; OUT is written atomically and DATA is never touched."""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq


@dataclass(frozen=True)
class Config:
    """One config a version adds: its rows for one split, and its features (None: from the Arrow schema)."""

    name: str
    split: str
    table: pa.Table
    features: object = None  # datasets.Features

    @property
    def path(self) -> str:
        return f"{self.name}/{self.split}-00000-of-00001.parquet"


def replace_section(text: str, title: str, section: str) -> str:
    """The card's text with the section headed `## TITLE` (an earlier version's, up to the next `## ` heading)
    taken out and SECTION added at the end."""
    kept = re.sub(rf"\n## {re.escape(title)}\n.*?(?=\n## |\Z)", "", text, flags=re.S)
    return kept.rstrip("\n") + "\n" + section


def _update_card(folder: Path, configs: list[Config], replaces: tuple[str, ...], title: str, section: str) -> None:
    from datasets import DatasetInfo, Features, SplitDict, SplitInfo
    from datasets.info import DatasetInfosDict
    from datasets.utils.metadata import MetadataConfigs
    from huggingface_hub import DatasetCard

    card = DatasetCard((folder / "README.md").read_text())
    infos = DatasetInfosDict.from_dataset_card_data(card.data)
    metadata = MetadataConfigs.from_dataset_card_data(card.data)
    for name in replaces:
        infos.pop(name, None)
        metadata.pop(name, None)
    for config in configs:
        size = (folder / config.path).stat().st_size
        splits = SplitDict()
        splits.add(SplitInfo(name=config.split, num_bytes=size, num_examples=config.table.num_rows))
        features = config.features or Features.from_arrow_schema(config.table.schema)
        infos[config.name] = DatasetInfo(features=features, splits=splits, config_name=config.name, dataset_size=size)
        metadata[config.name] = {"data_files": [{"split": config.split, "path": f"{config.name}/{config.split}-*"}]}
    card.data.pop("dataset_info", None)
    card.data.pop("configs", None)
    DatasetInfosDict(infos).to_dataset_card_data(card.data)
    metadata.to_dataset_card_data(card.data)
    text = replace_section(card.text, title, section)
    (folder / "README.md").write_text(f"---\n{card.data.to_yaml()}\n---\n{text}")


def write_version(folder: Path, out: Path, configs: list[Config], *, replaces: tuple[str, ...], record_key: str,
                  record: dict, title: str, section: str) -> None:
    """OUT = every file of FOLDER but its manifest and the configs in REPLACES (an earlier version's), plus
    CONFIGS, the card's YAML and section (`## TITLE`), and the manifest with RECORD under RECORD_KEY."""
    from core.manifest import describe_outputs, read_manifest, write_manifest
    from core.outdir import atomic_folder

    manifest = read_manifest(folder)
    with atomic_folder(out) as staging:
        for path in sorted(folder.rglob("*")):
            rel = path.relative_to(folder)
            if rel.parts[0] in replaces or rel.name == "manifest.json":
                continue
            if path.is_dir():
                (staging / rel).mkdir(parents=True, exist_ok=True)
            else:
                (staging / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, staging / rel)
        for config in configs:
            (staging / config.name).mkdir(exist_ok=True)
            pq.write_table(config.table, staging / config.path)
        _update_card(staging, configs, replaces, title, section)
        rows = {o["path"]: o["rows"] for o in manifest.get("outputs", [])
                if "rows" in o and o["path"].split("/", 1)[0] not in replaces}
        rows.update({config.path: config.table.num_rows for config in configs})
        manifest[record_key] = record
        manifest["outputs"] = describe_outputs(staging, rows)
        write_manifest(staging, manifest)
