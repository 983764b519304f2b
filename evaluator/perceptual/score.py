"""The perceptual score (Gat et al., NeurIPS 2021, §3, Eq. 1-5) of any model on any built benchmark.

For a modality m, Acc(M \\ {m}) gives every sample i the value of m from a sample j drawn uniformly
from the evaluation set (Eq. 3; `sampling="permutation"` draws a true permutation instead), while
every other column of i, its label and answer candidates included, stays. `permutations` draws per
sample are averaged, and the whole computation is repeated `repeats` times with seeds derived from
`seed`; the report gives mean and standard deviation (over repeats, ddof 0) of Acc(M \\ {m}), P_m
(Eq. 1-2) and the normalised scores P_m / Z_D (Eq. 4) and P_m / Z_{D,f} (Eq. 5).

The engine knows nothing about a benchmark: the task declares its modalities (`Modality`, evaluator/base.py:
columns that move together), its per-sample metrics and its training-set majority predictor; the model declares
the columns it reads and, for late-fusion models, per-modality encoders whose outputs are cached and
re-indexed instead of re-encoded.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import pyarrow as pa

from core.errors import ModelError, ParamsError
from evaluator.models.distributed import World, single_process
from evaluator.models.model import input_columns, is_late_fusion


@dataclass(frozen=True)
class PerceptualOptions:
    modalities: tuple[str, ...] = ()  # empty: every modality the benchmark declares
    permutations: int = 5  # draws per sample (the paper: 5)
    repeats: int = 5  # whole computations with different seeds (the paper: 5)
    seed: int = 0
    sampling: Literal["uniform", "permutation"] = "uniform"
    by: str | None = None  # decompose by this column (`question_type`, `answer_type`, `quality`, ...)
    encoder_cache: bool = True  # late-fusion models re-use per-modality encodings


@dataclass
class PerceptualResult:
    """Per-sample values, rows in the evaluated table's order. NaN marks rows a metric does not score
    (e.g. VisDial rounds without dense relevance for NDCG); they are left out of every mean."""

    metrics: tuple[str, ...]
    modalities: dict[str, tuple[str, ...]]
    full: dict[str, np.ndarray]  # metric -> (N,): Acc_{f,x,y}(M)
    without: dict[str, dict[str, np.ndarray]]  # modality -> metric -> (repeats, N), mean over draws
    majority: dict[str, np.ndarray] | None = None  # metric -> (N,): the training majority's values
    majority_by: dict[str, np.ndarray] | None = None  # the same, fitted per value of `by`
    predictions: list | None = None  # the unpermuted predictions, row order
    notes: list[str] = field(default_factory=list)


def normalised_scores(acc: float, acc_without: float, acc_majority: float | None) -> dict[str, float | None]:
    """Eq. 1, 4 and 5 on accuracies in %: P = Acc(M) - Acc(M \\ {m}); P / Z_D with Z_D = 1 - the
    majority vote's accuracy; P / Z_{D,f} with Z_{D,f} = Acc(M). Undefined (Z = 0) gives None."""
    p = acc - acc_without
    z_d = None if acc_majority is None else 100.0 - acc_majority
    return {"p": p, "p_zd": 100.0 * p / z_d if z_d else None, "p_zdf": 100.0 * p / acc if acc else None}


def draw_indices(n: int, rng: np.random.Generator, sampling: str) -> np.ndarray:
    """Eq. 3: for every sample i the index j of the sample whose modality value it receives,
    j ~ U(1, |D|) independently (j = i is possible), or a uniformly random permutation."""
    return rng.integers(0, n, size=n) if sampling == "uniform" else rng.permutation(n)


def draw_rng(seed: int, repeat: int, modality: str) -> np.random.Generator:
    """The draws of one repeat of one modality; independent of which other modalities are scored."""
    return np.random.default_rng([seed, repeat, zlib.crc32(modality.encode())])


def resolve_modalities(task, table: pa.Table, wanted: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    """The task's modalities (or the named subset) with the columns present in this table."""
    declared = task.modalities
    if not declared:
        raise ParamsError(f"{task.name} declares no modalities, so it has no perceptual score")
    by_name = {m.name: m for m in declared}
    unknown = [m for m in wanted if m not in by_name]
    if unknown:
        raise ParamsError(f"--modalities {unknown[0]}: {task.name} has modalities {', '.join(by_name)}")
    out = {}
    for name in wanted or tuple(by_name):
        columns = tuple(c for c in by_name[name].columns if c in table.column_names)
        if not columns:
            raise ParamsError(f"{task.name}: the table has none of modality {name}'s columns "
                              f"({', '.join(by_name[name].columns)})")
        out[name] = columns
    return out


def check_options(options: PerceptualOptions) -> None:
    if options.permutations < 1 or options.repeats < 1:
        raise ParamsError("--permutations and --repeats must be at least 1")
    if options.sampling not in ("uniform", "permutation"):
        raise ParamsError(f"--sampling {options.sampling}: expected uniform or permutation")


class _Passes:
    """Runs the model over this rank's rows of the (possibly permuted) table and returns the task's
    per-sample metric values for those rows. Late-fusion encodings of every row are computed once."""

    def __init__(self, task, model, table: pa.Table, world: World, score_options, use_cache: bool):
        self.task, self.model, self.table, self.world = task, model, table, world
        self.shard = world.shard(table.num_rows)
        self.rows = table.take(pa.array(self.shard))
        self.score_options = score_options
        self.encodings = None
        if use_cache and is_late_fusion(model):
            self.encodings = {name: world.all_rows(model.encode(name, self.rows), self.shard, table.num_rows)
                              for name in model.encoders}

    def _metrics(self, predictions) -> dict[str, np.ndarray]:
        if len(predictions) != self.rows.num_rows:
            raise ModelError(f"the model returned {len(predictions)} predictions for {self.rows.num_rows} rows")
        return self.task.per_sample(self.rows, predictions, self.score_options)

    def unpermuted(self) -> tuple[list, dict[str, np.ndarray]]:
        if self.encodings is None:
            predictions = self.model.predict(self.rows)
        else:
            predictions = self.model.fuse({k: _take(v, self.shard) for k, v in self.encodings.items()}, self.rows)
        return predictions, self._metrics(predictions)

    def permuted(self, columns: tuple[str, ...], idx: np.ndarray) -> dict[str, np.ndarray]:
        """This rank's rows with `columns` taken from rows idx (Eq. 3's x_j^{M_m})."""
        source = pa.array(idx[self.shard])
        rows = self.rows
        for c in columns:
            rows = rows.set_column(rows.schema.get_field_index(c), c, self.table.column(c).take(source))
        if self.encodings is None:
            return self._metrics(self.model.predict(rows))
        moved = set(columns)
        encodings = {}
        for name, cols in self.model.encoders.items():
            if set(cols) <= moved:
                encodings[name] = _take(self.encodings[name], idx[self.shard])
            elif moved.isdisjoint(cols):
                encodings[name] = _take(self.encodings[name], self.shard)
            else:  # the encoder reads the moved modality and another one: encode the permuted rows
                encodings[name] = self.model.encode(name, rows)
        return self._metrics(self.model.fuse(encodings, rows))


def _take(values, idx: np.ndarray):
    if isinstance(values, np.ndarray):
        return values[idx]
    import torch

    return values[torch.as_tensor(idx, device=values.device)]


def check_model_columns(model, table: pa.Table) -> None:
    missing = [c for c in input_columns(model, table) if c not in table.column_names]
    if missing:
        raise ModelError(f"the model reads column '{missing[0]}', which this table does not have "
                         f"(columns: {', '.join(table.column_names)})")


def perceptual(task, model, table: pa.Table, options: PerceptualOptions = PerceptualOptions(),
               score_options=None, train: pa.Table | None = None, world: World | None = None,
               progress=None) -> PerceptualResult:
    """Acc(M) once, then for every modality `repeats` x `permutations` passes with that modality's
    columns drawn from other rows (Eq. 3); every rank returns the merged per-sample values."""
    check_options(options)
    if table.num_rows == 0:
        raise ParamsError("the evaluation table has no rows")
    modalities = resolve_modalities(task, table, options.modalities)
    if options.by is not None:
        check_by_column(table, options.by)
    check_model_columns(model, table)
    world = world or single_process()
    n = table.num_rows
    passes = _Passes(task, model, table, world, score_options, options.encoder_cache)
    merge = lambda values: {k: world.all_rows(v, passes.shard, n) for k, v in values.items()}  # noqa: E731
    predictions, values = passes.unpermuted()
    full = merge(values)
    without: dict[str, dict[str, np.ndarray]] = {}
    for name, columns in modalities.items():
        sums = {k: np.zeros((options.repeats, len(passes.shard))) for k in full}
        for r in range(options.repeats):
            rng = draw_rng(options.seed, r, name)
            for _ in range(options.permutations):
                for k, v in passes.permuted(columns, draw_indices(n, rng, options.sampling)).items():
                    sums[k][r] += v
                if progress is not None:
                    progress()
        without[name] = {k: np.stack([world.all_rows(s[r] / options.permutations, passes.shard, n)
                                      for r in range(options.repeats)]) for k, s in sums.items()}
    merged = world.all_rows(np.array(predictions, dtype=object), passes.shard, n)
    result = PerceptualResult(tuple(full), modalities, full, without, predictions=merged.tolist())
    if train is not None:
        _add_majority(result, task, table, train, options.by, score_options)
    else:
        result.notes.append("no training split: Z_D (task normalisation) is not reported")
    return result


def check_by_column(table: pa.Table, column: str) -> None:
    if column not in table.column_names:
        raise ParamsError(f"--by {column}: no such column (columns: {', '.join(table.column_names)})")
    kind = table.schema.field(column).type
    if not (pa.types.is_string(kind) or pa.types.is_integer(kind) or pa.types.is_boolean(kind)
            or pa.types.is_large_string(kind)):
        raise ParamsError(f"--by {column}: a {kind} column cannot group rows (use a string, integer or bool column)")


def _majority_values(task, train: pa.Table, rows: pa.Table, score_options) -> dict[str, np.ndarray]:
    predictions = task.majority(train).predict(rows)
    return task.per_sample(rows, predictions, score_options)


def _add_majority(result: PerceptualResult, task, table: pa.Table, train: pa.Table, by: str | None,
                  score_options) -> None:
    """Eq. 4's majority vote: the training set's majority answer, scored on the evaluated rows; for a
    decomposition, each group's majority is fitted on the training rows of the same group."""
    result.majority = _majority_values(task, train, table, score_options)
    if by is None:
        return
    if by not in train.column_names:
        result.notes.append(f"the training split has no '{by}' column: Z_D per {by} is not reported")
        return
    keys, train_keys = table.column(by).to_pylist(), train.column(by).to_pylist()
    out = {k: np.full(table.num_rows, np.nan) for k in result.metrics}
    missing = []
    for value in sorted(set(keys), key=str):
        rows = np.flatnonzero([k == value for k in keys])
        train_rows = np.flatnonzero([k == value for k in train_keys])
        if not len(train_rows):
            missing.append(str(value))
            continue
        values = _majority_values(task, train.take(pa.array(train_rows)), table.take(pa.array(rows)), score_options)
        for k, v in values.items():
            out[k][rows] = v
    if missing:
        result.notes.append(f"no training rows with {by} = {', '.join(missing)}: Z_D not reported for them")
    result.majority_by = out


def sample_scores(result: PerceptualResult) -> dict[str, dict[str, np.ndarray]]:
    """Eq. 2 per sample: Acc_{f,x,y}(M) - Acc_{f,x,y}(M \\ {m}), the latter averaged over every draw
    of every repeat; their mean over the scored rows equals the mean over repeats of P_m."""
    return {m: {k: result.full[k] - v.mean(axis=0) for k, v in per_metric.items()}
            for m, per_metric in result.without.items()}


def _mean_std(values: list[float | None]) -> dict[str, float | None]:
    if any(v is None for v in values):
        return {"mean": None, "std": None}
    return {"mean": float(np.mean(values)), "std": float(np.std(values))}


def summarise(result: PerceptualResult, rows: np.ndarray | None = None, grouped: bool = False) -> dict:
    """Eq. 1 over a set of rows (all by default): per metric Acc(M), the majority vote's accuracy, and
    per modality mean ± std over repeats of Acc(M \\ {m}), P_m, P_m / Z_D and P_m / Z_{D,f}, in %.
    `grouped` takes the majority fitted on the training rows of the same group (decompositions)."""
    majority = result.majority_by if grouped else result.majority
    out = {}
    for k in result.metrics:
        full = result.full[k] if rows is None else result.full[k][rows]
        valid = ~np.isnan(full)
        if not valid.any():
            out[k] = {"samples": 0, "acc": None, "acc_majority": None, "modalities": {}}
            continue
        acc = 100.0 * float(full[valid].mean())
        acc_majority = None
        if majority is not None:
            values = (majority[k] if rows is None else majority[k][rows])[valid]
            acc_majority = None if np.isnan(values).any() else 100.0 * float(values.mean())
        per_modality = {}
        for m, per_metric in result.without.items():
            reps = per_metric[k] if rows is None else per_metric[k][:, rows]
            accs = [100.0 * float(r[valid].mean()) for r in reps]
            scores = [normalised_scores(acc, a, acc_majority) for a in accs]
            per_modality[m] = {"acc_without": _mean_std(accs),
                               **{key: _mean_std([s[key] for s in scores]) for key in ("p", "p_zd", "p_zdf")}}
        out[k] = {"samples": int(valid.sum()), "acc": acc, "acc_majority": acc_majority,
                  "z_d": None if acc_majority is None else 100.0 - acc_majority, "z_df": acc,
                  "modalities": per_modality}
    return out


def resampling(result: PerceptualResult, clusters: np.ndarray, unit: str):
    """Acc(M) and, per modality, the means over repeats of P_m, P_m / Z_D and P_m / Z_{D,f} (the
    values `summarise` reports under `all`) as ratios over the rows' sample scores (Eq. 2), for the
    cluster bootstrap (evaluator.stats.bootstrap): the mean of the per-row sample scores is P_m's mean over
    repeats, and both normalisations are linear in it. The intervals cover the sampling of the
    examples, the draws held fixed (their spread over repeats is the reported std)."""
    from evaluator.stats.bootstrap import Ratio, Resampling

    scores = sample_scores(result)
    ratios, derived = {}, {}
    for k in result.metrics:
        valid = ~np.isnan(result.full[k])
        scope = valid.astype(np.float64)
        base = f"all.{k}"
        ratios[f"{base}.acc"] = Ratio(np.where(valid, result.full[k], 0.0), scope)
        majority = None if result.majority is None else result.majority[k]
        has_majority = majority is not None and not np.isnan(majority[valid]).any()
        if has_majority:
            ratios[f"_{base}.majority"] = Ratio(np.where(valid, majority, 0.0), scope)
        for m in result.without:
            p_key = f"{base}.modalities.{m}.p.mean"
            ratios[p_key] = Ratio(np.where(valid, scores[m][k], 0.0), scope)
            derived[f"{base}.modalities.{m}.p_zdf.mean"] = lambda v, p=p_key, b=base: 100.0 * v[p] / v[f"{b}.acc"]
            if has_majority:
                derived[f"{base}.modalities.{m}.p_zd.mean"] = (
                    lambda v, p=p_key, b=base: 100.0 * v[p] / (100.0 - v[f"_{b}.majority"]))
    return Resampling(clusters, unit, ratios, derived)


def decompose(result: PerceptualResult, keys: list) -> dict[str, dict]:
    """The summary of every group of rows sharing a value of the `--by` column, in sorted order."""
    groups: dict = {}
    for i, key in enumerate(keys):
        groups.setdefault(key, []).append(i)
    return {str(key): summarise(result, np.array(idx), grouped=True)
            for key, idx in sorted(groups.items(), key=lambda kv: str(kv[0]))}
