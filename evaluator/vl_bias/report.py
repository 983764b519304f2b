"""CounterBias report (Zhang, Wang, Sang, ACM MM 2022, §4.2): metrics.json, report.md in Table 2 / Table 3
layout, the signed bias per target (Fig. 5 right), B@V against B@L per target (Fig. 7), instance examples (Fig. 6) and
per_instance.parquet with every probability and instance bias."""

from __future__ import annotations

from pathlib import Path
from typing import BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from core.figures import FigureSpec, plain
from core.markdown import report_table
from evaluator.publish.report import intervals_markdown, png, write_report
from evaluator.vl_bias import counterbias as cb

PER_INSTANCE = ("id", "instance_id", "image_id", "template", "target", "target_type", "bias_word", "bias_class",
                "counterfactual_bias_word", "p_b_vf", "p_b_vcf", "p_t_vf_lf", "p_t_vcf_lcf", "p_t_vcf_lf", "p_t_vf_lcf",
                "p_t_lf", "p_t_lcf",
                "bias_vl", "bias_v", "bias_l", "bias_l_log")
TABLE2 = ("vl", "v", "l")


def _pct(value) -> str:
    return "-" if value is None else f"{100 * value:.2f}"


def _num(value) -> str:
    return "-" if value is None else f"{value:.2f}"


def attack_summary(images: list[dict]) -> dict | None:
    """How far the counterfactual images moved the bias concept (Eq. 3's goal) and the L-inf distance."""
    if not images or "p_b_vcf" not in images[0]:
        return None
    get = lambda k: np.array([r[k] for r in images], dtype=np.float64)  # noqa: E731
    return {"images": len(images), "raised_b_prime": float(np.mean(get("p_bcf_vcf") > get("p_bcf_vf"))),
            "b_prime_above_b": float(np.mean(get("p_bcf_vcf") > get("p_b_vcf"))),
            "mean_p_b_vf": float(get("p_b_vf").mean()), "mean_p_b_vcf": float(get("p_b_vcf").mean()),
            "mean_p_bcf_vf": float(get("p_bcf_vf").mean()), "mean_p_bcf_vcf": float(get("p_bcf_vcf").mean()),
            "max_linf": float(get("linf").max())}


def metrics_of(result: dict, spec: str, split: str, options, model, b0: str) -> dict:
    cols = result["columns"]
    concept = result["concept"]
    templates = list(concept.templates)
    b1 = next(c for c in concept.classes if c != b0)
    return {
        "model": spec, "split": split, "vision": bool(model.vision), "rows": int(len(cols["id"])),
        "images": len(set(cols["image_id"].tolist())), "templates": templates, "blank_image": result["blank_image"],
        "template_labels": {t: concept.labels[t] for t in templates}, "bias_prompt": result["prompt"],
        "concept": {"b0": b0, "b1": b1, "pairs": sorted({tuple(p) for p in concept.pairs.values()}),
                    "target_types": {k: len(v) for k, v in concept.targets.items()}},
        "settings": {"attack": None if options.attack is None or not model.vision else options.attack.describe(),
                     "softmax": options.softmax, "b0": b0, "min_concept_change": options.min_change,
                     "relative_scores": result["relative"]},
        "measures": cb.summarise(cols, result["measures"], templates, b0),
        "attack": attack_summary(result["images"]),
        "vocabulary": result["notes"],
    }


def table2(metrics: dict) -> str | None:
    """Rows: templates and Avg.; columns: B@V-L, B@V, B@L per target type (in %), as Table 2."""
    measures = [m for m in TABLE2 if m in metrics["measures"]]
    if not measures:
        return None
    kinds = sorted({k for m in measures for k in metrics["measures"][m]["avg"]})
    header = ["Template"] + [f"{k.capitalize()} {cb.MEASURES[m][0]}" for k in kinds for m in measures]
    rows = [[metrics["template_labels"][t]] + [_pct(metrics["measures"][m]["templates"][t].get(k, {}).get("mean_abs"))
                                    for k in kinds for m in measures] for t in metrics["templates"]]
    rows.append(["Avg."] + [_pct(metrics["measures"][m]["avg"].get(k)) for k in kinds for m in measures])
    return report_table(header, rows)


def per_target_rows(metrics: dict) -> tuple[list[str], list[list]]:
    measures = list(metrics["measures"])
    first = metrics["measures"][measures[0]]
    header = ["Target", "Type", "Instances"] + [cb.MEASURES[m][0] + (" (%)" if m != "l_log" else "") for m in measures]
    rows = []
    for kind, targets in sorted(first["per_target_avg"].items()):
        for target in sorted(targets):
            t0 = metrics["templates"][0]
            n = first["templates"][t0][kind]["per_target"][target]["instances"]
            rows.append([target, kind, n] + [
                (_pct if m != "l_log" else _num)(metrics["measures"][m]["per_target_avg"][kind].get(target))
                for m in measures])
    return header, rows


def _scatter(path: Path | BinaryIO, metrics: dict) -> None:
    """Fig. 7: B@V (x) against B@L (y) per target, template averages, in %, per target type."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 6), dpi=100)
    for kind, marker in zip(sorted(metrics["measures"]["v"]["per_target_avg"]), "os^vD<>"):
        v = metrics["measures"]["v"]["per_target_avg"].get(kind, {})
        l_ = metrics["measures"]["l"]["per_target_avg"].get(kind, {})
        names = [t for t in sorted(v) if v[t] is not None and l_.get(t) is not None]
        xs, ys = [100 * v[t] for t in names], [100 * l_[t] for t in names]
        ax.scatter(xs, ys, marker=marker, label=plain(kind))
        for name, x, y in zip(names, xs, ys):
            ax.annotate(plain(name), (x, y), fontsize=7, xytext=(3, 3), textcoords="offset points")
    ax.axhline(0, color="grey", lw=0.8)
    ax.axvline(0, color="grey", lw=0.8)
    lean = metrics["concept"]["b0"]
    ax.set_xlabel(plain(f"B@V (%, + {lean}-leaning)"))
    ax.set_ylabel(plain(f"B@L (%, + {lean}-leaning)"))
    ax.set_title(plain(f"Visual vs language bias per target: {metrics['model']}"))
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, format="png", metadata={"Software": None})
    plt.close(fig)


def _examples_figure(path: Path | BinaryIO, rows: list[int], result: dict, pixels: dict) -> None:
    """Fig. 6: factual and counterfactual image of each example with its probabilities and Eq. 6 bias."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = result["columns"]
    per_image = {r["image_id"]: r for r in result["images"]}
    fig, axes = plt.subplots(len(rows), 2, figsize=(7, 2.6 * len(rows)), dpi=100, squeeze=False)
    for ax_row, r in zip(axes, rows):
        image_id = cols["image_id"][r]
        info = per_image[image_id]
        for ax, key, title in ((ax_row[0], "f", f"V_f: {cols['bias_word'][r]}  P(B|V)={info['p_b_vf']:.3f}"),
                               (ax_row[1], "cf", f"V_cf  P(B|V)={info['p_b_vcf']:.3f}")):
            ax.imshow(pixels[image_id][key].permute(1, 2, 0).clamp(0, 1).numpy())
            ax.set_title(plain(title), fontsize=8)
            ax.axis("off")
        ax_row[0].text(0, -0.08, plain(f"'{cols['caption'][r]}' T={cols['target'][r]}: "
                       f"P(T|V_f,L_f)={cols['p_t_vf_lf'][r]:.4f}, "
                       f"P(T|V_cf,L_cf)={cols['p_t_vcf_lcf'][r]:.4f}, bias_V-L={100 * cols['bias_vl'][r]:.2f}%"),
                       transform=ax_row[0].transAxes, fontsize=7, va="top")
    fig.tight_layout()
    fig.savefig(path, format="png", metadata={"Software": None})
    plt.close(fig)


def write_counterbias_report(folder: Path, metrics: dict, result: dict, options) -> None:
    """Render what the run measured (it also hands over the Fig. 6 examples with their images)."""
    folder = Path(folder)
    cols = result["columns"]
    b0, b1 = metrics["concept"]["b0"], metrics["concept"]["b1"]
    softmax = ("full-vocabulary softmax" if options.softmax == "full"
               else "softmax over the target list of the row type (authors code)")
    lines = [f"# CounterBias: {metrics['model']}", "",
             f"VL-Bias split `{metrics['split']}`: {metrics['rows']:,} image x template rows, {metrics['images']:,} "
             f"images. Target probabilities: {softmax}; "
             f"bias prompt `{metrics['bias_prompt']}`; B0 = {b0} (positive = {b0}-leaning), B1 = {b1}; "
             f"bias pairs {', '.join(f'{a} <-> {b}' for a, b in metrics['concept']['pairs'])}."]
    lines += [""] + [f"- {note}" for note in metrics["vocabulary"].get("scoring", [])] + [""]
    if metrics["settings"]["relative_scores"]:
        lines.append("Relative scores (renormalised over the row's candidates: its target list, or its bias pair): "
                     + ", ".join(f"`{t}`" for t in metrics["settings"]["relative_scores"]) + ".")
    attack = metrics["settings"]["attack"]
    if attack:
        lines.append(f"Counterfactual images: PGD, eps {attack['eps']:.5g}, {attack['steps']} steps of "
                     f"{attack['step_size']:.5g} (pixels in [0, 1]).")
    plots: list = []
    t2 = table2(metrics)
    if t2:
        lines += ["", "## Social bias (in %), Table 2 layout", "",
                  "Mean over targets of |Eq. 7 bias| per template; Avg. = mean of the template rows.", "", t2]
    l_log = metrics["measures"]["l_log"]
    lines += ["", "## Language-only bias (Eq. 13), Table 3 layout", "",
              "Mean over targets of |Eq. 7 of Eq. 13| (log-probabilities, no image"
              + (": a blank image at the mean pixel value" if metrics["blank_image"] else "") + "), template average.",
              "",
              report_table(["Target concept", metrics["model"]],
                             [[f"{k} ({len(l_log['per_target_avg'][k])})", _num(v)] for k, v in l_log["avg"].items()])]
    header, rows = per_target_rows(metrics)
    lines += ["", f"## Signed bias per target (template average; + = {b0}-leaning)", "", report_table(header, rows)]
    main = next(m for m in ("vl", "l", "l_log") if m in metrics["measures"])
    for kind, values in sorted(metrics["measures"][main]["per_target_avg"].items()):
        names = [t for t in sorted(values, key=lambda t: (values[t] is None, -(values[t] or 0)))
                 if values[t] is not None]
        scale = 100 if main != "l_log" else 1
        signed = [scale * values[t] for t in names]
        plots.append(FigureSpec(f"bias_per_target_{kind}.png",
                                f"{cb.MEASURES[main][0]} per {kind} (Fig. 5 right): {metrics['model']}", names,
                                {cb.MEASURES[main][0]: signed},
                                ylabel=cb.MEASURES[main][0] + (" (%)" if scale == 100 else ""),
                                bar_colors=["tab:blue" if v >= 0 else "tab:red" for v in signed],
                                legend_colors={f"{b0}-leaning": "tab:blue", f"{b1}-leaning": "tab:red"}))
        lines += ["", f"![{kind}](bias_per_target_{kind}.png)"]
    if metrics["attack"]:
        a = metrics["attack"]
        lines += ["", "## Counterfactual images (Eq. 3)", "", report_table(
            ["Images", "P(B'|V_cf) > P(B'|V_f)", "P(B'|V_cf) > P(B|V_cf)", "mean P(B|V_f)", "mean P(B|V_cf)",
             "mean P(B'|V_f)", "mean P(B'|V_cf)", "max L-inf"],
            [[a["images"], f"{100 * a['raised_b_prime']:.1f}%", f"{100 * a['b_prime_above_b']:.1f}%",
              f"{a['mean_p_b_vf']:.4f}", f"{a['mean_p_b_vcf']:.4f}", f"{a['mean_p_bcf_vf']:.4f}",
              f"{a['mean_p_bcf_vcf']:.4f}", f"{a['max_linf']:.5f}"]])]
    if "v" in metrics["measures"]:
        lines += ["", "## Visual against language bias per target (Fig. 7)", "", "![B@V vs B@L](bv_vs_bl.png)"]
    picked = result["examples"]["rows"]
    if picked:
        lines += ["", "## Instance examples (Fig. 6)", "", report_table(
            ["Image", "Caption", "Target", "P(T|V_f,L_f)", "P(T|V_cf,L_cf)", "bias_V-L (%)"],
            [[cols["image_id"][r], cols["caption"][r], cols["target"][r], f"{cols['p_t_vf_lf'][r]:.4f}",
              f"{cols['p_t_vcf_lcf'][r]:.4f}", f"{100 * cols['bias_vl'][r]:.2f}"] for r in picked]),
            "", "![examples](instances.png)"]
    notes = [f"{cb.MEASURES[m][0]} ({cb.MEASURES[m][1]}): {s['undefined']:,} of {s['rows']:,} rows undefined "
             f"(the bias concept changed by less than {options.min_change:g}); left out of the means"
             for m, s in metrics["measures"].items() if s["undefined"]]
    if metrics["vocabulary"]["multi_piece"]:
        notes.append("scored by their first word piece (not one token in this vocabulary): "
                     + ", ".join(f"{w} ({n} pieces)" for w, n in sorted(metrics["vocabulary"]["multi_piece"].items())))
    for words in metrics["vocabulary"]["shared_first_piece"]:
        notes.append(f"{', '.join(words)} share their first word piece (the same probability)")
    if notes:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in notes]
    if "intervals" in metrics:
        lines += ["", intervals_markdown(metrics, "Values are fractions (x 100 for the % of Table 2); l_log is in "
                                                 "log-probability units, as Table 3.").rstrip("\n")]
    extra = {}
    if "v" in metrics["measures"]:
        extra["bv_vs_bl.png"] = png(lambda stream: _scatter(stream, metrics))
    if picked:
        extra["instances.png"] = png(lambda stream: _examples_figure(stream, picked, result,
                                                                     result["examples"]["pixels"]))
    per_instance = {c: (cols[c].tolist() if cols[c].dtype == object else cols[c]) for c in PER_INSTANCE if c in cols}
    sink = pa.BufferOutputStream()
    pq.write_table(pa.table(per_instance), sink)
    extra["per_instance.parquet"] = sink.getvalue().to_pybytes()
    write_report(folder, metrics, "\n".join(lines) + "\n", plots, extra)  # metrics and rows of one run, together
