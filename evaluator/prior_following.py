"""The prior-following rate: of a model's errors, the share that are the answer the training prior gives.

A model that leans on the language prior does not err at random: where it is wrong, it tends to give the
answer most often seen with such a question in training (Agrawal et al., CVPR 2018, §1 and §3, the question
type's prior that VQA-CP changes between train and test; Kervadec et al., CVPR 2021, §3, the rare answers of a
GQA local group; Vo et al., *Vision Language Models are Biased*, arXiv 2505.23941, who count a model's wrong
answers that are the biased, expected one). The rate is that count over the model's errors:

    PF = |{x : wrong(x) and answer(x) = prior(x)}| / |{x : wrong(x)}|

An error is a row the benchmark's own per-row score gives no credit (GQA's exact match is 0; VQA accuracy
min(#humans/3, 1) is 0: no annotator gave the answer); answers are compared in the form the metric compares
them (`PriorRule.normalise`, evaluator/base.py). The prior is the answer of one of the benchmark's own blind baselines
(`PriorRule.baseline`), fitted on training data, so `baseline:<that one>` follows its prior on every error
(PF = 100%); a uniform guess among d answers follows it on 1/(d - 1) of its errors on the rows where the prior's
answer is among the d and is not the right one, and never where it is not among them. The interval is
the benchmark's cluster bootstrap (evaluator/stats/bootstrap.py) of the ratio; with `parts`, the rate is also
given on each value of a column (GQA-OOD's head and tail answers).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from core.errors import VlbenchError


def prior_answers(task, folder: Path, train_file: Path | None, table: pa.Table) -> list[str] | str:
    """The prior's answer for each row of TABLE (the split scored, from the build in FOLDER; TRAIN_FILE: the
    training source of a benchmark whose build holds none), or why it cannot be fitted (one line). A TRAIN_FILE the
    prior reads and cannot (missing, a folder or a FIFO, malformed) is an error: an option given explicitly that
    cannot be honoured never turns into "not measured"."""
    from core.errors import ParamsError, SourceError
    from evaluator.models.options import ModelOptions

    rule = task.prior_rule
    try:
        model = task.make_model(f"baseline:{rule.baseline}", ModelOptions(data=Path(folder), train_file=train_file))
        if hasattr(model, "fit_split"):
            model.fit_split(table)
        return [str(a) for a in model.predict(table)]
    except (VlbenchError, FileNotFoundError) as exc:
        if train_file is not None and isinstance(exc, SourceError) and Path(exc.path) == Path(train_file):
            raise ParamsError(f"--train-file {train_file}: the prior (baseline:{rule.baseline}) cannot be fitted "
                              f"from it: {str(exc).removeprefix(f'{exc.path}: ')}") from None
        return f"the prior (baseline:{rule.baseline}) cannot be fitted: {exc}"


def prior_following(task, table: pa.Table, predictions: dict, prior: list[str], options=None,
                    resamples: int = 0, seed: int = 0) -> dict:
    """The prior-following rate of PREDICTIONS ({id: answer}) on the rows of TABLE they answer, overall and on
    each part, with 95% intervals from `resamples` cluster-bootstrap resamples (0: none): {"prior", "errors",
    "following", "rate" (%, None without errors), "parts", "intervals"}."""
    from evaluator.stats.bootstrap import Ratio, Resampling, intervals

    rule = task.prior_rule
    ids = task.ids(table)
    answered = np.fromiter((i in predictions for i in ids), dtype=bool, count=len(ids))
    scored = table.filter(pa.array(answered))
    answers = [predictions[i] for i in task.ids(scored)]
    wrong = np.asarray(task.per_sample(scored, answers, options)[rule.metric], dtype=np.float64) == 0
    kept = [p for p, a in zip(prior, answered) if a]
    same = np.fromiter((rule.normalise(str(a)) == rule.normalise(p) for a, p in zip(answers, kept)), dtype=bool,
                       count=len(answers))
    errors, follows = wrong.astype(np.float64), (wrong & same).astype(np.float64)
    ratios = {"rate": Ratio(follows, errors)}
    parts = {}
    if rule.parts is not None:
        values = np.array([str(v) for v in scored.column(rule.parts).to_pylist()], dtype=object)
        for value in sorted(set(values.tolist())):
            inside = (values == value).astype(np.float64)
            ratios[f"parts.{value}.rate"] = Ratio(follows * inside, errors * inside)
            parts[value] = _counts(follows * inside, errors * inside)
    result = {"prior": rule.prior, "baseline": f"baseline:{rule.baseline}", **_counts(follows, errors),
              **({"parts_column": rule.parts, "parts": parts} if parts else {})}
    if resamples and errors.any():
        result["intervals"] = intervals(Resampling(*task.clusters(scored), ratios), resamples, seed)
    return result


def _counts(follows: np.ndarray, errors: np.ndarray) -> dict:
    n = int(errors.sum())
    return {"errors": n, "following": int(follows.sum()),
            "rate": round(100.0 * float(follows.sum()) / n, 4) if n else None}


def prior_markdown(result: dict) -> str:
    """The report's section on the rate."""
    from core.markdown import report_table

    bounds = result.get("intervals", {}).get("metrics", {})

    def row(name: str, counts: dict, key: str) -> list:
        lo_hi = bounds.get(key)
        return [name, counts["errors"], counts["following"], counts["rate"],
                "-" if lo_hi is None else f"[{lo_hi[0]:.2f}, {lo_hi[1]:.2f}]"]

    rows = [row("all", result, "rate"), *(row(f"{result['parts_column']} = {v}", c, f"parts.{v}.rate")
                                          for v, c in result.get("parts", {}).items())]
    return "\n".join([
        "## Prior-following rate", "",
        f"Of the model's errors (rows given no credit), the share whose answer is the training prior's: "
        f"{result['prior']} ({result['baseline']}, which follows it on every error). "
        "A model that guesses uniformly among d answers follows it on 1/(d - 1) of its errors where the prior's "
        "answer is among the d and is not the right one (and never where it is not among them).", "",
        report_table(["Rows", "Errors", "Prior's answer", "Rate (%)", "95% interval"], rows), ""])
