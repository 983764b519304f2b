"""Dataset cards: a benchmark's template in data_cards/ + hub YAML (configs, dataset_info) + statistics."""

from __future__ import annotations

import string

import yaml


def _split_front_matter(text: str, fields: dict[str, str]) -> tuple[dict, str]:
    """The template's YAML header (its ${placeholders} filled, for templates shared by several
    benchmarks) and its body."""
    _, header, body = text.split("---\n", 2)
    return yaml.safe_load(string.Template(header).substitute(fields)), body


def reproducibility(floats: str) -> str:
    """The card's paragraph on rebuilding the folder byte for byte, with the builder's `floats`."""
    return ("`manifest.json` lists the input files with their SHA-256, the parameters (models included), the "
            "versions of the libraries that shape these bytes and the SHA-256 of every file here. Built again from "
            "the same inputs with the same parameters and library versions (vlbench's `requirements.lock`), every "
            "file is byte-identical on any CPU and thread count; `vlbench verify OUT --against <this folder>` names "
            "the versions, parameters and inputs that differ when a file is not.\n\n"
            f"**Floating-point values.** {floats}")


def render_card(template: str, fields: dict[str, str], features_of, splits: dict[str, dict[str, dict]],
                default_config: str) -> str:
    """Fill the template text's ${placeholders} and prepend the YAML header that `load_dataset` reads.

    `features_of(config)` gives a config's Features; `splits` is {config: {split: {"num_examples",
    "num_bytes", "pattern"}}}.
    """
    from datasets import DatasetInfo, SplitDict, SplitInfo
    from datasets.info import DatasetInfosDict
    from datasets.utils.metadata import MetadataConfigs
    from huggingface_hub import DatasetCardData

    static, body = _split_front_matter(template, fields)
    card = DatasetCardData(**static)
    infos, configs = {}, {}
    for config, by_split in splits.items():
        split_dict = SplitDict()
        for split, info in by_split.items():
            split_dict.add(SplitInfo(name=split, num_bytes=info["num_bytes"], num_examples=info["num_examples"]))
        infos[config] = DatasetInfo(features=features_of(config), splits=split_dict, config_name=config,
                                    dataset_size=sum(i["num_bytes"] for i in by_split.values()))
        configs[config] = {"data_files": [{"split": s, "path": i["pattern"]} for s, i in by_split.items()],
                           **({"default": True} if config == default_config else {})}
    DatasetInfosDict(infos).to_dataset_card_data(card)
    MetadataConfigs(configs).to_dataset_card_data(card)
    return f"---\n{card.to_yaml()}\n---\n" + string.Template(body).substitute(fields)
