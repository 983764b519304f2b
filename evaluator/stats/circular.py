"""CircularEval's report (VLMEvalKit's CircularEval, the strategy MMBench introduced: Liu et al., *MMBench: Is
Your Multi-modal Model an All-around Player?*, ECCV 2024): `predict --circular` asks each multiple-choice
prompt by letter once per rotation of its options (rotation r lists option r first) and writes, beside
the prediction file, the option chosen in each rotation (`preds.rotations.json`). The prediction file
itself holds the circular answers (a prompt counts only when every rotation chose the same option), so
the benchmark's own metrics are the circular ones. `vlbench evaluate` adds, from the rotations and the
split's right answers:

- the circular accuracy (every rotation right) and the plain accuracy (rotation 0 alone, the options in
  their listed order), per prompt;
- the position-bias profile: per letter, how often the model chose it (of all asks) against how often
  it was the right letter (1 / options under full rotation), and the accuracy when the right answer sat
  at that letter.

Each with a 95% interval by the cluster bootstrap over the benchmark's own clusters
(evaluator/stats/bootstrap.py), every ask of a row in the row's cluster.
"""

from __future__ import annotations

import string
from collections import Counter

import numpy as np
import pyarrow as pa

from core.errors import SubmissionError
from evaluator.stats.bootstrap import Ratio, Resampling, intervals, point_values

FORMAT = "vlbench rotations 1"


def rotations_file(ids: list, rotations: list) -> dict:
    """The rotations file's content: per row its id and, per prompt, the option chosen in each rotation."""
    return {"format": FORMAT, "rows": [{"id": list(i) if isinstance(i, tuple) else i, "prompts": r}
                                       for i, r in zip(ids, rotations)]}


def read_rotations(predictions) -> dict | None:
    """{id: per prompt, the options chosen in its rotations} from the file beside a prediction file; None when
    there is none. A damaged one is one error."""
    from evaluator.models.prediction_record import rotations_path
    from evaluator.submission import parse_json

    path = rotations_path(predictions)
    if not path.is_file():
        return None
    try:
        data = parse_json(path.read_bytes(), "")
    except (OSError, SubmissionError) as exc:
        raise SubmissionError(f"{path}: not a readable rotations file ({exc})") from None
    rows = data.get("rows") if isinstance(data, dict) and data.get("format") == FORMAT else None
    if not isinstance(rows, list):
        raise SubmissionError(f"{path}: not a rotations file (expected {{'format': '{FORMAT}', 'rows': [...]}})")
    out = {}
    for n, row in enumerate(rows):
        prompts = row.get("prompts") if isinstance(row, dict) else None
        if not isinstance(prompts, list) or not all(isinstance(p, list) and p and all(
                c is None or (type(c) is int and c >= 0) for c in p) for p in prompts):
            raise SubmissionError(f"{path}: row {n}: 'prompts' must be lists of chosen option indices (or null)")
        key = tuple(row["id"]) if isinstance(row.get("id"), list) else row.get("id")
        out[key] = prompts
    return out


def circular_report(task, table: pa.Table, predictions: dict, rotations: dict, resamples: int, seed: int,
                    options=None) -> dict:
    """The module docstring's measures over the split's rows that have rotations and a prediction."""
    ask = task.generative
    ids = task.ids(table)
    _, continuations, row_of = ask.prompts(table)
    gold = ask.answers(table)
    clusters = task.clusters(table)
    codes, unit = clusters if clusters is not None else (np.arange(table.num_rows), "row")
    asks = []  # (cluster, rotation, options, chosen, right option)
    seen: dict[int, int] = {}  # row -> its prompts met so far
    asked = Counter(row_of)  # row -> its prompts: those the rotations were recorded for, or another layout
    for row, n in sorted(asked.items()):
        key = ids[row]
        if key in rotations and key in predictions and len(rotations[key]) != n:
            raise SubmissionError(f"rotations of row {key}: {len(rotations[key])} prompts recorded, where the split "
                                  f"asks {n} (predictions made on another form of the split: a sealed split's "
                                  "public half asks VCR's rationales given each answer)")
    for k, row in enumerate(row_of):
        prompt_index = seen[row] = seen.get(row, -1) + 1
        key = ids[row]
        if key not in rotations or key not in predictions:
            continue
        chosen = rotations[key][prompt_index] if prompt_index < len(rotations[key]) else None
        n = len(continuations[k])
        if chosen is None or len(chosen) != n or any(c is not None and c >= n for c in chosen):
            raise SubmissionError(f"rotations of row {key}: prompt {prompt_index + 1} has {n} options, so {n} "
                                  "rotations of indices below it")
        asks += [(int(codes[row]), r, n, c, gold[k]) for r, c in enumerate(chosen)]
    if not asks:
        return {"prompts": 0}
    cluster, rotation, count, chosen, right = (np.array([a[i] if a[i] is not None else -1 for a in asks])
                                               for i in range(5))
    first = (rotation == 0).astype(float)
    is_right = (chosen == right).astype(float)
    # every rotation right: the prompt's asks are consecutive, rotation 0 first
    starts = np.flatnonzero(rotation == 0)
    all_right = np.minimum.reduceat(is_right, starts)
    circular = np.zeros(len(asks))
    circular[starts] = all_right
    letters = int(count.max())
    chosen_letter = np.where(chosen >= 0, (chosen - rotation) % count, -1)
    right_letter = (right - rotation) % count
    ratios = {"plain_accuracy": Ratio(is_right * first, first), "circular_accuracy": Ratio(circular, first)}
    for at in range(letters):
        has = (count > at).astype(float)
        letter = string.ascii_uppercase[at]
        ratios[f"chosen.{letter}"] = Ratio((chosen_letter == at) * has, has)
        ratios[f"right_letter.{letter}"] = Ratio((right_letter == at) * has, has)
        ratios[f"accuracy_when_right_is.{letter}"] = Ratio(is_right * (right_letter == at), (right_letter == at) * 1.)
    sampling = Resampling(clusters=_codes(cluster), unit=unit, ratios=ratios)
    values = point_values(sampling)
    bounds = intervals(sampling, resamples, seed)["metrics"] if resamples else {}
    entry = lambda name: {"value": round(values[name], 4), "interval": bounds.get(name)}  # noqa: E731
    return {"prompts": int(first.sum()), "asks": len(asks), "unit": unit, "resamples": resamples,
            "circular_accuracy": entry("circular_accuracy"), "plain_accuracy": entry("plain_accuracy"),
            "unanswered_asks": int((chosen < 0).sum()),
            "letters": {string.ascii_uppercase[at]: {
                "chosen": entry(f"chosen.{string.ascii_uppercase[at]}"),
                "right": entry(f"right_letter.{string.ascii_uppercase[at]}"),
                "accuracy_when_right": entry(f"accuracy_when_right_is.{string.ascii_uppercase[at]}")}
                for at in range(letters)}}


def _codes(values: np.ndarray) -> np.ndarray:
    """Dense cluster codes 0..k-1 of the asks' clusters."""
    return np.unique(values, return_inverse=True)[1].astype(np.int64)


def circular_markdown(report: dict) -> str:
    """The report's CircularEval section."""
    from core.markdown import report_table

    if not report.get("prompts"):
        return "## CircularEval\n\nNo prompt of the scored rows has rotations.\n"

    def cell(e: dict) -> str:
        interval = f" [{e['interval'][0]:.2f}, {e['interval'][1]:.2f}]" if e.get("interval") else ""
        return f"{e['value']:.2f}{interval}"

    rows = [[letter, cell(v["chosen"]), cell(v["right"]), cell(v["accuracy_when_right"])]
            for letter, v in report["letters"].items()]
    return "\n".join([
        "## CircularEval", "",
        f"Each of {report['prompts']:,} prompts asked once per rotation of its options ({report['asks']:,} asks; "
        "VLMEvalKit's CircularEval). The prediction file holds the circular answers, so the metrics above are "
        "circular. In brackets, 95% intervals (cluster bootstrap by " + report["unit"] + ").", "",
        f"- Circular accuracy (every rotation right): {cell(report['circular_accuracy'])}%",
        f"- Plain accuracy (the options as listed, rotation 0): {cell(report['plain_accuracy'])}%",
        f"- Asks that named no option: {report['unanswered_asks']:,}", "",
        "Position bias: how often each letter was chosen, against how often it was the right letter, and the "
        "accuracy when the right answer sat there (%).", "",
        report_table(["letter", "chosen", "right", "accuracy when right"], rows), ""])
