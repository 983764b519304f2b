"""`vlbench shortcuts`: language-shortcut labels (evaluator/shortcuts/labels.py) of a built split, written as a
new version of the built folder: OUT holds every file of DATA, plus a `shortcuts` config (the split's
ids, a label column per level and question kind, and how many runs were right), the card's YAML and a
card section in Table 6's layout, and the manifest's `shortcuts` record (models, seeds,
hyper-parameters, each run's accuracy and timings). `evaluate --by` and `perceptual --by` read the
label columns from there."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pyarrow as pa

from core.data import load_table, pick_split, resolve_data
from core.errors import ParamsError
from evaluator.shortcuts.labels import CONFIG, LABELS, LEVELS, ShortcutOptions, label_shares, shortcut_labels
from evaluator.tasks import get_task


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
    from core.manifest import read_manifest

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
    from evaluator.shortcuts.labels import ChoiceQuestions

    return {kind: ChoiceQuestions([c for q in train.values() for c in q.contexts],
                                  [c for q in train.values() for c in q.candidates],
                                  [label for q in train.values() for label in q.labels], kinds[kind].title)
            for kind in kinds}


def table_6(metrics: dict) -> str:
    """Table 6's layout: a row per level and question kind, the share of each label."""
    from core.markdown import report_table

    rows = [[f"{level.capitalize()}-level ({metrics['titles'][kind]})", *(s[name] for name in LABELS), 100]
            for (level, kind), s in ((tuple(k.split(":")), v) for k, v in metrics["shares"].items())]
    return report_table(["", *(f"{name} (%)" for name in LABELS), "Total (%)"], rows)


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


def _labels_by_id(task, table: pa.Table, labels_from: str) -> tuple[dict, dict, dict]:
    """The labels a benchmark built from another one takes from that one's labelled folder, by id
    (`Task.source_label_keys`: VCR-Visor sub-questions take their VCR item's Q->A or QA->R labels)."""
    from core.manifest import read_manifest

    if task.label_source is None:
        raise ParamsError(f"--labels-from: {task.name} is not built from another benchmark's examples")
    source = resolve_data(labels_from)
    manifest = read_manifest(source)
    record = manifest.get("shortcuts")
    if manifest.get("benchmark") != task.label_source or not record:
        raise ParamsError(f"--labels-from {labels_from}: expected a {task.label_source} folder written by "
                          f"`vlbench shortcuts {task.label_source}` (found {manifest.get('benchmark')}"
                          f"{'' if record else ', no shortcut labels'})")
    source_task = get_task(task.label_source)
    labelled = load_table(source, CONFIG, record["split"])
    index = {i: k for k, i in enumerate(source_task.ids(labelled))}
    keys = task.source_label_keys(table)
    missing = [i for i, _ in keys if i not in index]
    if missing:
        raise ParamsError(f"--labels-from {labels_from}: {len(missing):,} examples have no label there (first: "
                          f"{missing[0]}); label the {task.label_source} split they come from")
    columns = {name: labelled.column(name).to_pylist() for name in labelled.column_names}
    labels, votes = {}, {}
    for level in LEVELS:
        labels[f"shortcut_{level}_choice"] = [columns[f"shortcut_{level}_{kind}"][index[i]] for i, kind in keys]
        votes[f"shortcut_{level}_choice_right"] = [columns[f"shortcut_{level}_{kind}_right"][index[i]]
                                                   for i, kind in keys]
    return labels, votes, record


def run_shortcuts(bench: str, data: str, out: Path, *, split: str | None = None, train: str | None = None,
                  labels_from: str | None = None, options: ShortcutOptions = ShortcutOptions(),
                  overwrite: bool = False) -> dict | None:
    """Label every example of a built split (or take the labels of its source benchmark's examples,
    `labels_from`); write OUT (a new version of DATA). Returns the metrics; under torchrun the runs
    are spread over the processes and rank 0 writes (the others return None)."""
    from evaluator.models.distributed import local_device, world_from_env

    task = get_task(bench)
    folder = resolve_data(data)
    from core.outdir import check_out

    check_out(out, {"--data": [folder]}, overwrite)
    split = pick_split(folder, task.config, split, task.default_split)
    table = load_table(folder, task.config, split)
    test = _questions(task, table, f"{folder}")
    base = {"benchmark": bench, "split": split, "examples": table.num_rows,
            "titles": {kind: q.title or kind for kind, q in test.items()}}
    if labels_from is not None:
        if train is not None:
            raise ParamsError("--labels-from and --train: the labels are either taken or fitted; pass one")
        labels, votes, record = _labels_by_id(task, table, labels_from)
        metrics = {**base, "trained_on": f"{record['trained_on']}; the labels of its examples taken by id from "
                                         f"{labels_from} (`--labels-from`)",
                   "options": record["options"], "processes": record.get("processes", 1), "runs": record["runs"]}
    else:
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
        metrics = {**base, "trained_on": f"{trained_from} (`--train {train}`)" if trained_from else
                   f"{bench}'s train split", "options": dataclasses.asdict(options), "processes": world.size,
                   "runs": [dataclasses.asdict(r) for r in records]}
    metrics["shares"] = {f"{level}:{kind}": label_shares(labels[f"shortcut_{level}_{kind}"])
                         for level in LEVELS for kind in test}
    _write_version(task, folder, out, split, table, labels, votes, metrics)
    return metrics


def _write_version(task, folder: Path, out: Path, split: str, table: pa.Table, labels: dict, votes: dict,
                   metrics: dict) -> None:
    """OUT = every file of DATA (an earlier version's labels left out) + the shortcuts config, card and
    manifest, written atomically (evaluator/versions.py)."""
    from evaluator.versions import Config, write_version

    ids = task.ids(table)
    id_columns = task.id_field if isinstance(task.id_field, tuple) else (task.id_field,)
    columns = {name: [i[k] if isinstance(i, tuple) else i for i in ids] for k, name in enumerate(id_columns)}
    columns.update(labels)
    columns.update(votes)
    write_version(folder, out, [Config(CONFIG, split, pa.table(columns))], replaces=(CONFIG,), record_key="shortcuts",
                  record={k: v for k, v in metrics.items() if k != "benchmark"}, title="Language-shortcut labels",
                  section=_card_section(metrics))
