"""The perceptual-score report: tables in the layout of Tables 1 and 5 of Gat et al., NeurIPS 2021 (rows are subsets,
modalities are column groups) or Tables 3 and 4 (rows are modalities, metrics are column blocks), a
per-modality bar plot, per-sample scores, and for VQA the yes/no token analysis of Table 2."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from core.figures import FigureSpec
from core.markdown import report_table
from evaluator.perceptual.score import PerceptualResult, sample_scores

PAPER_TOKENS = ("has", "can", "is a", "do")  # Table 2's question start tokens


def _pm(value: dict | float | None) -> str:
    if isinstance(value, dict):
        return "-" if value["mean"] is None else f"{value['mean']:.2f} ± {value['std']:.2f}"
    return "-" if value is None else f"{value:.2f}"


def _cells(summary: dict, modality: str) -> list[str]:
    s = summary["modalities"].get(modality)
    if s is None:
        return ["-"] * 4
    return [_pm(s["acc_without"]), _pm(s["p"]), _pm(s["p_zd"]), _pm(s["p_zdf"])]


def subset_table(label: str, metric: str, modalities: list[str], rows: dict[str, dict]) -> str:
    """Tables 1 and 5: one row per subset; per modality Acc(M \\ {m}), P_m, P_m / Z_D, P_m / Z_{D,f}."""
    header = ["Subset", f"{label}_M"]
    for m in modalities:
        header += [f"{label}_M\\{{{m}}}", f"P_{m}", f"P_{m}/Z_D", f"P_{m}/Z_D,f"]
    header.append(f"{label}_D (majority)")
    body = [[name, _pm(s[metric]["acc"]), *[c for m in modalities for c in _cells(s[metric], m)],
             _pm(s[metric]["acc_majority"])] for name, s in rows.items()]
    return report_table(header, body)


def modality_table(labels: dict[str, str], modalities: list[str], rows: dict[str, dict]) -> str:
    """Tables 3 and 4: one row per modality (and subset); a column block per metric."""
    header = ["Modality", "Subset"]
    for label in labels.values():
        header += [f"{label}_M", f"{label}_M\\{{M}}", "P_M", "P_M/Z_D", "P_M/Z_D,f", f"{label}_D (majority)"]
    body = []
    for m in modalities:
        for name, s in rows.items():
            row = [m, name]
            for metric in labels:
                cells = _cells(s[metric], m)
                row += [_pm(s[metric]["acc"]), *cells, _pm(s[metric]["acc_majority"])]
            body.append(row)
    return report_table(header, body)


def bar_plot(title: str, summary: dict, metric: str, label: str) -> FigureSpec:
    """Per modality: P / Z_D (when defined) and P / Z_{D,f}, with their std over repeats."""
    modalities = list(summary[metric]["modalities"])
    series, errors = {}, {}
    for key, name in (("p_zd", f"P/Z_D ({label})"), ("p_zdf", f"P/Z_D,f ({label})")):
        values = [summary[metric]["modalities"][m][key] for m in modalities]
        if all(v["mean"] is not None for v in values):
            series[name] = [v["mean"] for v in values]
            errors[name] = [v["std"] for v in values]
    return FigureSpec(filename="perceptual_scores.png", title=title, categories=modalities, series=series,
                      errors=errors, ylabel="%", xlabel="modality")


def sample_scores_parquet(ids: list[str], table: pa.Table, by: str | None, result: PerceptualResult) -> bytes:
    """per_sample.parquet's bytes: the submission id, the `by` column, Acc_{f,x,y}(M) and Eq. 2's P_{f,x,y}(m)
    per metric and modality."""
    columns = {"id": pa.array(ids, pa.string()), **({by: table.column(by)} if by else {})}
    for k, v in result.full.items():
        columns[k] = pa.array(v)
    for m, per_metric in sample_scores(result).items():
        for k, v in per_metric.items():
            columns[f"{k}_P_{m}"] = pa.array(v)
    sink = pa.BufferOutputStream()
    pq.write_table(pa.table(columns), sink)
    return sink.getvalue().to_pybytes()


def _yes_no(answers: list[str]) -> tuple[float | None, float | None]:
    yes, no = answers.count("yes"), answers.count("no")
    return (None, None) if yes + no == 0 else (round(yes / (yes + no), 2), round(no / (yes + no), 2))


def _starts(question: str, token: str) -> bool:
    words, prefix = question.lower().split(), token.split()
    return words[:len(prefix)] == prefix


def token_analysis(test: pa.Table, train: pa.Table, predictions: list[str], p_image: np.ndarray | None,
                   extra_tokens: int = 6) -> list[dict]:
    """Table 2: for yes/no questions starting with a token (the paper's four, then the most frequent
    first words of the evaluated set), the yes/no proportions of the predictions, of the evaluated
    and of the training answers, the counts, and the mean sample perceptual score of the image."""
    def yes_no_rows(t: pa.Table) -> list[int]:
        return [i for i, a in enumerate(t.column("answer_type").to_pylist()) if a == "yes/no"]

    test_rows, train_rows = yes_no_rows(test), yes_no_rows(train)
    q_test, q_train = test.column("question").to_pylist(), train.column("question").to_pylist()
    a_test = test.column("multiple_choice_answer").to_pylist()
    a_train = train.column("multiple_choice_answer").to_pylist()
    first = {}
    for i in test_rows:
        word = (q_test[i].lower().split() or [""])[0]
        first[word] = first.get(word, 0) + 1
    tokens = list(PAPER_TOKENS) + [w for w, _ in sorted(first.items(), key=lambda kv: (-kv[1], kv[0]))
                                   if w and w not in PAPER_TOKENS][:extra_tokens]
    out = []
    for token in tokens:
        te = [i for i in test_rows if _starts(q_test[i], token)]
        tr = [i for i in train_rows if _starts(q_train[i], token)]
        if not te and not tr:
            continue
        pred_yes, pred_no = _yes_no([predictions[i] for i in te])
        test_yes, test_no = _yes_no([a_test[i] for i in te])
        train_yes, train_no = _yes_no([a_train[i] for i in tr])
        mean_p = None if p_image is None or not te else round(100 * float(np.nanmean(p_image[te])), 2)
        out.append({"token": token, "predicted_yes": pred_yes, "predicted_no": pred_no, "test_yes": test_yes,
                    "test_no": test_no, "train_yes": train_yes, "train_no": train_no, "test": len(te),
                    "train": len(tr), "mean_sample_p_image": mean_p})
    return out


def token_table(rows: list[dict]) -> str:
    header = ["Token", "Predicted Yes", "Predicted No", "Test Yes", "Test No", "Train Yes", "Train No", "# Test",
              "# Train", "mean sample P_image"]
    keys = ["predicted_yes", "predicted_no", "test_yes", "test_no", "train_yes", "train_no", "test", "train",
            "mean_sample_p_image"]
    return report_table(header, [[f"'{r['token']}'", *(r[k] for k in keys)] for r in rows])


def render(metrics: dict, labels: dict[str, str], layout: str) -> str:
    o = metrics["options"]
    modalities = list(metrics["modalities"])
    rows = {"All": metrics["all"], **(metrics["by"]["groups"] if metrics.get("by") else {})}
    declared = ", ".join(f"{m} ({', '.join(c)})" for m, c in metrics["modalities"].items())
    md = [f"# Perceptual score: {metrics['model']} on {metrics['benchmark']} ({metrics['split']})", "",
          f"{metrics['rows']:,} rows; modalities {declared}; "
          f"{o['permutations']} draws per sample ({o['sampling']}), {o['repeats']} repeats from seed {o['seed']}. "
          "Values in %, mean ± std over repeats (Gat et al., NeurIPS 2021, Eq. 1-5: "
          "P_m = Acc_M - Acc_M\\{m}, Z_D = 100 - "
          "majority-vote accuracy, Z_D,f = Acc_M).", ""]
    if layout == "by-subset":
        for metric, label in labels.items():
            md += [f"## {label}" + (f" by {metrics['by']['column']}" if metrics.get("by") else ""), "",
                   subset_table(label, metric, modalities, rows), ""]
    else:
        md += ["## Per modality" + (f" and {metrics['by']['column']}" if metrics.get("by") else ""), "",
               modality_table(labels, modalities, rows), ""]
    if metrics.get("token_analysis"):
        md += ["## Yes/no answers by question start token (Table 2)", "", token_table(metrics["token_analysis"]), ""]
    md += [f"- {note}" for note in metrics["notes"]] + ([""] if metrics["notes"] else [])
    md += ["![Perceptual score per modality](perceptual_scores.png)", "",
           "Per-sample scores (Eq. 2) are in per_sample.parquet.", ""]
    return "\n".join(md)
