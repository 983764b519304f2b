"""`vlbench shortcuts`: language-shortcut labels (evaluator/shortcuts.py) of a built split, written as a
new version of the built folder: OUT holds every file of DATA, plus a `shortcuts` config (the split's
ids, a label column per level and question kind, and how many runs were right), the card's YAML and a
card section in Table 6's layout, and the manifest's `shortcuts` record (models, seeds,
hyper-parameters, each run's accuracy and timings). `evaluate --by` and `perceptual --by` read the
label columns from there."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from builders.errors import ParamsError
from builders.registry import get_task
from evaluator.data import load_table, pick_split, resolve_data
from evaluator.shortcuts import LABELS, LEVELS, ShortcutOptions, label_shares, shortcut_labels

CONFIG = "shortcuts"


def _questions(task, table, what: str):
    questions = task.choice_questions(table)
    if questions is None:
        raise ParamsError(f"{task.name}: {what} has no answer candidates to score text-only "
                          "(shortcut labels need a multiple-choice benchmark)")
    return questions


def _training(task, folder: Path, train: str | None, split: str):
    """The training questions: the `train` split of DATA, or every question kind of the built folder
    `--train` (another benchmark's, e.g. vcr for vcr-visor), offered to each kind of DATA."""
    if train is None:
        if split == "train":
            raise ParamsError("--split train: the models are fitted on the train split; label another split, or "
                              "pass --train DIR")
        if not any((folder / task.config).glob("train-*.parquet")):
            raise ParamsError(f"{folder}: no train split to fit the text-only models on; pass --train DIR, a "
                              "built folder with one (e.g. vcr for vcr-visor)")
        return _questions(task, load_table(folder, task.config, "train"), f"{folder}'s train split"), None
    from builders.registry import builder_names
    from pipelines.manifest import read_manifest

    source = resolve_data(train)
    bench = read_manifest(source).get("benchmark")
    if bench not in builder_names():
        raise ParamsError(f"--train {train}: not a built vlbench folder (its manifest names no benchmark)")
    source_task = get_task(bench)
    table = load_table(source, source_task.config, pick_split(source, source_task.config, "train", "train"))
    return _questions(source_task, table, f"--train {train}"), bench


def _pooled(train: dict, kinds: dict) -> dict:
    """Every kind of DATA trains on all the training questions, pooled (a source benchmark's kinds
    differ from DATA's: vcr's Q->A and QA->R for vcr-visor's sub-questions)."""
    from evaluator.shortcuts import ChoiceQuestions

    return {kind: ChoiceQuestions([c for q in train.values() for c in q.contexts],
                                  [c for q in train.values() for c in q.candidates],
                                  [label for q in train.values() for label in q.labels], kinds[kind].title)
            for kind in kinds}


def table_6(metrics: dict) -> str:
    """Table 6's layout: a row per level and question kind, the share of each label."""
    from evaluator.report import markdown_table

    rows = [[f"{level.capitalize()}-level ({metrics['titles'][kind]})", *(s[name] for name in LABELS), 100]
            for (level, kind), s in ((tuple(k.split(":")), v) for k, v in metrics["shares"].items())]
    return markdown_table(["", *(f"{name} (%)" for name in LABELS), "Total (%)"], rows)


def _card_section(metrics: dict) -> str:
    runs = "\n".join(["| Level | Kind | Model | Seed | Accuracy (%) |", "|---|---|---|---|---|"]
                     + [f"| {r['level']} | {r['question']} | {r['model']} | {r['seed']} | {r['accuracy']} |"
                        for r in metrics["runs"]])
    o = metrics["options"]
    return "\n".join([
        "", "## Language-shortcut labels", "",
        "Per example, how text-solvable it is (the VCR-Visor paper, Appendix A, Table 6): text-only "
        f"multiple-choice models ({', '.join(o['models'])}; seeds {', '.join(map(str, o['seeds']))}; "
        f"{o['epochs']} epochs, learning rate {o['learning_rate']}, batch {o['batch_size']}, at most "
        f"{o['max_length']} tokens), fitted on {metrics['trained_on']}, score the candidates of split "
        f"{metrics['split']}. Biased: every run picks the correct candidate; Non-Biased: none does; "
        f"Neutral: otherwise. Word level shuffles the words of the context and of each candidate first "
        f"(seed {o['shuffle_seed']}). The labels are the `{CONFIG}` config; "
        "`vlbench evaluate --by COLUMN` decomposes any submission by them.", "",
        table_6(metrics), "", runs, ""])


def _update_card(folder: Path, split: str, columns: pa.Table, metrics: dict) -> None:
    """Add the shortcuts config to the card's YAML (configs, dataset_info) and the Table 6 section."""
    from datasets import DatasetInfo, Features, SplitDict, SplitInfo, Value
    from datasets.info import DatasetInfosDict
    from datasets.utils.metadata import MetadataConfigs
    from huggingface_hub import DatasetCard

    card = DatasetCard((folder / "README.md").read_text())
    infos = DatasetInfosDict.from_dataset_card_data(card.data)
    features = Features({name: Value("int64" if pa.types.is_integer(t) else "string")
                         for name, t in zip(columns.column_names, columns.schema.types)})
    size = (folder / CONFIG / f"{split}-00000-of-00001.parquet").stat().st_size
    splits = SplitDict()
    splits.add(SplitInfo(name=split, num_bytes=size, num_examples=columns.num_rows))
    infos[CONFIG] = DatasetInfo(features=features, splits=splits, config_name=CONFIG, dataset_size=size)
    DatasetInfosDict(infos).to_dataset_card_data(card.data)
    configs = MetadataConfigs.from_dataset_card_data(card.data)
    configs[CONFIG] = {"data_files": [{"split": split, "path": f"{CONFIG}/{split}-*"}]}
    configs.to_dataset_card_data(card.data)
    text = f"---\n{card.data.to_yaml()}\n---\n{card.text}".rstrip("\n") + "\n" + _card_section(metrics)
    (folder / "README.md").write_text(text)


def run_shortcuts(bench: str, data: str, out: Path, *, split: str | None = None, train: str | None = None,
                  options: ShortcutOptions = ShortcutOptions(), overwrite: bool = False) -> dict | None:
    """Label every example of a built split; write OUT (a new version of DATA). Returns the metrics;
    under torchrun the runs are spread over the processes and rank 0 writes (the others return None)."""
    from evaluator.distributed import local_device, world_from_env
    from pipelines.manifest import describe_outputs, read_manifest, write_manifest
    from pipelines.outdir import atomic_folder, check_out

    task = get_task(bench)
    folder = resolve_data(data)
    check_out(out, {"--data": [folder]}, overwrite)
    split = pick_split(folder, task.config, split, task.default_split)
    table = load_table(folder, task.config, split)
    test = _questions(task, table, f"{folder}")
    train_questions, trained_from = _training(task, folder, train, split)
    if trained_from is not None:
        train_questions = _pooled(train_questions, test)
    elif set(train_questions) != set(test):
        raise ParamsError(f"{bench}: the train split's question kinds differ from the evaluated split's")
    world = world_from_env()
    options = dataclasses.replace(options, device=local_device(options.device))
    labels, votes, records = shortcut_labels(train_questions, test, options, world=world)
    world.close()
    if not world.is_main:
        return None
    ids = task.ids(table)
    id_columns = task.id_field if isinstance(task.id_field, tuple) else (task.id_field,)
    columns = {name: [i[k] if isinstance(i, tuple) else i for i in ids] for k, name in enumerate(id_columns)}
    columns.update({name: labels[name] for name in labels})
    columns.update({name: votes[name] for name in votes})
    result = pa.table(columns)
    metrics = {"benchmark": bench, "split": split, "examples": len(ids),
               "trained_on": f"{trained_from} (`--train {train}`)" if trained_from else f"{bench}'s train split",
               "options": dataclasses.asdict(options), "processes": world.size,
               "shares": {f"{level}:{kind}": label_shares(labels[f"shortcut_{level}_{kind}"])
                          for level in LEVELS for kind in test},
               "titles": {kind: q.title or kind for kind, q in test.items()},
               "runs": [dataclasses.asdict(r) for r in records]}
    manifest = read_manifest(folder)
    with atomic_folder(out) as staging:
        for path in sorted(folder.rglob("*")):
            rel = path.relative_to(folder)
            if rel.parts[0] == CONFIG or rel.name == "manifest.json":
                continue  # an earlier version's labels are replaced
            if path.is_dir():
                (staging / rel).mkdir(parents=True, exist_ok=True)
            else:
                (staging / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, staging / rel)
        (staging / CONFIG).mkdir()
        pq.write_table(result, staging / CONFIG / f"{split}-00000-of-00001.parquet")
        _update_card(staging, split, result, metrics)
        rows = {o["path"]: o["rows"] for o in manifest.get("outputs", []) if "rows" in o}
        rows[f"{CONFIG}/{split}-00000-of-00001.parquet"] = result.num_rows
        manifest["shortcuts"] = {k: v for k, v in metrics.items() if k != "benchmark"}
        manifest["outputs"] = describe_outputs(staging, rows)
        write_manifest(staging, manifest)
    return metrics
