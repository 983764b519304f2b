"""`vlbench stress-test`: the test-set stress test of a built split (Brown et al., *Benchmark Designers Should
"Train on the Test Set"*, arXiv 2511.04655, 2025), written as a new version of the built folder
(evaluator/versions.py): OUT holds every file of DATA, plus a `stress_test` config (the split's ids, each row's
bias score `stress_s`, its band and its fold, and with `--prune` the iteration that removed it,
`stress_removed_at`, 0 for a row kept, and `stress_kept`), with `--prune` a `debiased` config (the rows Iterative
Bias Pruning kept, as the benchmark's own config holds them), the card's YAML and section, and the manifest's
`stress_test` record. The blind forest's answers are scored with the benchmark's own metric and 95% intervals,
beside its blind baselines. `evaluate --by stress_band` (s(x) in quarters), `--by stress_kept` or any column of
the config reads the new columns."""

from __future__ import annotations

import dataclasses
import tempfile
from importlib import metadata
from pathlib import Path

import numpy as np
import pyarrow as pa

from core.errors import ParamsError, VlbenchError
from evaluator.stress import CONFIG, DEBIASED
from evaluator.stress.crossfit import CrossFit, StressOptions, cross_fit, feature_shape
from evaluator.stress.features import text_encoder
from evaluator.stress.items import blind_items
from evaluator.stress.prune import PruneOptions, iterative_bias_pruning
from evaluator.tasks import get_task

TITLE = "Test-set stress test"


BANDS = (0.25, 0.5, 0.75)  # the edges of `stress_band`, the groups `evaluate --by stress_band` scores


def bands(scores: np.ndarray) -> pa.Array:
    """Each s(x) as its quarter of [0, 1]: "0.00-0.25", ..., "0.75-1.00" (a band holds its lower edge)."""
    edges = (0.0, *BANDS, 1.0)
    names = [f"{lo:.2f}-{hi:.2f}" for lo, hi in zip(edges, edges[1:])]
    return pa.array([names[k] for k in np.searchsorted(BANDS, scores, side="right")], pa.string())


def _keys(task, table: pa.Table) -> list:
    """Each row's id as a sort key (the order folds are drawn and ties broken in)."""
    return [repr(i) for i in task.ids(table)]


def _fit(task, table: pa.Table, options: StressOptions, embed=None) -> tuple[object, CrossFit]:
    items = blind_items(task, table)
    clusters = task.clusters(table)
    return items, cross_fit(items, _keys(task, table), None if clusters is None else clusters[0], options,
                            table.num_rows, embed)


def _predictions(task, items, fit: CrossFit, rows: int) -> list:
    """Per row, the benchmark's prediction from the forest's outputs of its prompts (the Ask's own `combine`)."""
    outputs: list[list] = [[] for _ in range(rows)]
    for p in sorted(range(len(items)), key=lambda p: (items.rows[p], items.kinds[p])):
        outputs[items.rows[p]].append(fit.outputs[p])
    return [task.generative.combine(o) for o in outputs]


def _headline(task, metrics: dict) -> dict:
    """The headline metrics of an evaluation, each with its 95% interval."""
    from evaluator.stats.bootstrap import value_at

    bounds = metrics.get("intervals", {}).get("metrics", {})
    return {h.label: {"value": value_at(metrics, h.key), "interval": bounds.get(h.key)} for h in task.headline}


def _scored(task, folder: Path, split: str, path: Path, resamples: int, seed: int) -> dict:
    from evaluator.request import ScoringRequest
    from evaluator.run import evaluate

    metrics = evaluate(ScoringRequest(task.name, str(folder), split=split, resamples=resamples, seed=seed), path)
    return _headline(task, metrics)


def _blind_scores(task, folder: Path, split: str, table: pa.Table, predictions: list, baselines: bool,
                  resamples: int, seed: int) -> tuple[dict, dict]:
    """(the forest's headline metrics, each blind baseline's, or why it could not run), on the same rows."""
    from core.jsonout import dumps
    from evaluator.models.options import ModelOptions
    from evaluator.run import predict

    with tempfile.TemporaryDirectory(prefix="vlbench-stress-") as tmp:
        path = Path(tmp) / "forest.json"
        path.write_text(dumps(task.predictions_file(table, predictions)))
        forest = _scored(task, folder, split, path, resamples, seed)
        found = {}
        for baseline in task.baselines if baselines else ():
            spec = f"baseline:{baseline.name}"
            out = Path(tmp) / f"{baseline.name}.json"
            try:
                predict(task.name, str(folder), spec, out, split=split, options=ModelOptions(seed=seed))
                found[spec] = _scored(task, folder, split, out, resamples, seed)
            except (VlbenchError, FileNotFoundError) as exc:
                found[spec] = {"not_measured": str(exc)}
    return forest, found


def _card_section(record: dict) -> str:
    from core.markdown import report_table

    o = record["options"]

    def cell(entry: dict) -> str:
        if entry["value"] is None:
            return "-"
        bounds = entry["interval"]
        return f"{entry['value']:.2f} [{bounds[0]:.2f}, {bounds[1]:.2f}]" if bounds else f"{entry['value']:.2f}"

    labels = list(record["forest"])
    model = record.get("text_model")
    reads = (f"the sentence embeddings, by the text model `{model['name']}`, of each prompt"
             + (" and option" if record["shape"] == "multiple choice" else "") if model else
             f"hand-made text features ({', '.join(record['features'])})")
    rows = [["text-only random forest (cross-fitted)", *(cell(record["forest"][k]) for k in labels)]]
    rows += [[spec, *(["not measured: " + found["not_measured"]] + ["-"] * (len(labels) - 1)
                      if "not_measured" in found else [cell(found[k]) for k in labels])]
             for spec, found in record["baselines"].items()]
    lines = [
        "", f"## {TITLE}", "",
        f"How far split {record['split']} can be answered without its images (Brown et al., arXiv 2511.04655, "
        f"2025): a random forest over {reads} is fitted "
        f"{o['folds']} times on this split itself, each time on {o['folds'] - 1} folds of its rows, and scores the "
        f"held-out fold ({o['trees']} trees, seed {o['seed']}; the folds are drawn over the benchmark's clusters, "
        "so that rows sharing an image or a pair are held out together). Each row's bias score "
        "`stress_s` is the held-out probability of its right answer (of every prompt it asks); the config "
        f"`{CONFIG}` holds it, and `vlbench evaluate --by` reads its columns. The forest's answers, scored with the "
        "benchmark's own metrics (95% intervals in brackets), beside the benchmark's blind baselines:", "",
        report_table(["Model", *labels], rows), ""]
    prune = record.get("prune")
    if prune:
        lines += [
            "### Iterative Bias Pruning", "",
            f"The stress test was rerun on the rows still kept and the {prune['options']['batch']} rows with the "
            f"highest s(x) removed, each time (Brown et al., §4, Algorithm 1), within a budget of "
            f"{prune['options']['budget']} rows, keeping at least {prune['options']['min_per_group']} rows per "
            f"{prune['options']['group'] or 'split'}"
            + (f", stopping once the highest s(x) is at most {prune['options']['threshold']}"
               if prune['options']['threshold'] is not None else "")
            + f". It removed {prune['removed']} of {record['rows']} rows in {len(prune['iterations'])} iterations "
            f"(stopped by: {prune['stopped_by']}); the {prune['kept']} rows kept are the config `{DEBIASED}`.", ""]
    return "\n".join(lines)


def _text_model_identity(name: str) -> dict:
    """The text model as the record names it: its name and what pins its weights (a local folder's content, the
    packaged MiniLM's included, or a hub copy's commit), so that a rebuild can tell another checkpoint."""
    from builders.nlp import resolve_model_path
    from evaluator.models.response_cache import weights_pin

    return {"name": name, **weights_pin(resolve_model_path(name))}


def _group_values(table: pa.Table, column: str | None) -> list:
    if column is None:
        return [""] * table.num_rows
    if column not in table.column_names:
        raise ParamsError(f"--group {column}: no such column (columns: {', '.join(table.column_names)})")
    return [str(v) for v in table.column(column).to_pylist()]


def _config_features(folder: Path, config: str):
    """The features the card declares for a config of the build (None: it declares none)."""
    from datasets.info import DatasetInfosDict
    from huggingface_hub import DatasetCard

    infos = DatasetInfosDict.from_dataset_card_data(DatasetCard((folder / "README.md").read_text()).data)
    return infos[config].features if config in infos else None


def run_stress_test(bench: str, data: str, out: Path, *, split: str | None = None,
                    options: StressOptions = StressOptions(), prune: PruneOptions | None = None,
                    baselines: bool = True, resamples: int = 1000, overwrite: bool = False, progress=None) -> dict:
    """Stress-test a built split and write OUT (a new version of DATA). Returns the manifest's record."""
    from core.outdir import check_out
    from evaluator.splits import open_split
    from evaluator.versions import Config, write_version

    task = get_task(bench)
    folder, split, table = open_split(task, data, split)
    check_out(out, {"--data": [folder]}, overwrite)
    embed = None if options.text_model is None else text_encoder(options.text_model)
    items, fit = _fit(task, table, options, embed)
    groups = _group_values(table, None if prune is None else prune.group)
    forest, found = _blind_scores(task, folder, split, table, _predictions(task, items, fit, table.num_rows),
                                  baselines, resamples, options.seed)
    ids = task.ids(table)
    id_columns = task.id_field if isinstance(task.id_field, tuple) else (task.id_field,)
    columns = {name: [i[k] if isinstance(i, tuple) else i for i in ids] for k, name in enumerate(id_columns)}
    columns["stress_s"] = pa.array(fit.scores, pa.float64())
    columns["stress_band"] = bands(fit.scores)
    columns["stress_fold"] = pa.array(fit.folds, pa.int64())
    record = {"split": split, "rows": table.num_rows, "prompts": len(items),
              "shape": "multiple choice" if items.choice else "open-ended", "options": dataclasses.asdict(options),
              "features": list(feature_shape(items, options, embed).names), "forest": forest,
              "baselines": found,
              "mean_s": round(float(np.mean(fit.scores)), 6),
              # what shapes the scores beside the build's own libraries (its manifest's `library_versions`)
              "library_versions": {name: metadata.version(name) for name in ("scikit-learn", "numpy", "scipy")}}
    record["options"].pop("threads")  # how fast, not what: the scores do not depend on it
    if options.text_model is not None:
        record["text_model"] = _text_model_identity(options.text_model)
    configs = []
    if prune is not None:
        keys = _keys(task, table)

        def scores_of(rows: np.ndarray) -> np.ndarray:
            part = table.take(pa.array(rows))
            return _fit(task, part, options, embed)[1].scores

        removed_at, iterations, stopped = iterative_bias_pruning(scores_of, keys, groups, prune, progress)
        columns["stress_kept"] = pa.array((removed_at == 0).astype(np.int64), pa.int64())
        columns["stress_removed_at"] = pa.array(removed_at, pa.int64())
        kept = removed_at == 0
        configs.append(Config(DEBIASED, split, table.filter(pa.array(kept)), _config_features(folder, task.config)))
        record["prune"] = {"options": dataclasses.asdict(prune), "removed": int((~kept).sum()),
                           "kept": int(kept.sum()), "stopped_by": stopped, "iterations": iterations}
    configs.insert(0, Config(CONFIG, split, pa.table(columns)))
    write_version(folder, out, configs, replaces=(CONFIG, DEBIASED), record_key="stress_test", record=record,
                  title=TITLE, section=_card_section(record))
    return record

