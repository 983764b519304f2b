"""The report card's diagnostics: readings across a model's benchmark metrics, each with a 95% interval
and one sentence. Each is computed from the metrics `vlbench evaluate` wrote for the same predictions.

- GQA-OOD's OOD signal (Kervadec et al., CVPR 2021, §4): acc-tail against acc-head and the paper's
  relative gap Δ = (acc-head − acc-tail) / acc-tail, with the cluster-bootstrap interval evaluate
  computes (the same rows: a paired interval).
- VQA v2 against VQA-CP (Agrawal et al., CVPR 2018): the drop in VQA accuracy from the i.i.d. split to
  the changing-priors one, overall and per answer type.
- Single against paired questions (the VCR-Visor paper, §3.4): VCR's Q->A accuracy against VCR-Visor's
  APQ.
- The perceptual score (Gat et al., NeurIPS 2021, Eq. 1-5) per modality, P_m / Z_D, where the model
  reads two or more of a benchmark's modalities (from `vlbench perceptual`'s metrics).
- Language shortcuts (the VCR-Visor paper, Appendix A): where a build carries `vlbench shortcuts`
  labels, the headline metric on Biased (text-solvable) against Non-Biased examples (`evaluate --by`),
  disjoint rows, so their difference is read as two independent estimates.
- CounterBias (Zhang, Wang, Sang, ACM MM 2022, §3-4): on a VL-Bias build, Table 2's "Avg." cells (mean
  over targets of |Eq. 7|) of each measure and target type, with their image-bootstrap intervals, and the
  targets that lean most to either side (from `vlbench counterbias`'s metrics).

Between two benchmarks the rows differ, so a difference's interval is the normal approximation from
the two percentile intervals, read as independent estimates (standard error = interval width / 3.92).
"""

from __future__ import annotations

from dataclasses import dataclass

Z = 1.959964  # the 97.5% normal quantile


@dataclass(frozen=True)
class Estimate:
    """A metric's value with its 95% interval (None where undefined)."""

    value: float | None
    interval: tuple[float, float] | None = None

    def as_dict(self) -> dict:
        return {"value": self.value, "interval": None if self.interval is None else list(self.interval)}


def estimate(metrics: dict, key: str) -> Estimate:
    """A metric of `vlbench evaluate`'s output by its path (`per_answer_type.yes/no.accuracy`), with its
    interval from `intervals.metrics`."""
    value = metrics
    for part in key.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return Estimate(value if isinstance(value, (int, float)) else None, _interval(metrics, key))


def difference(a: Estimate, b: Estimate) -> Estimate:
    """a − b of two independent estimates (different rows), with the normal-approximation interval."""
    if a.value is None or b.value is None:
        return Estimate(None)
    if a.interval is None or b.interval is None:
        return Estimate(round(a.value - b.value, 4))
    se = (((a.interval[1] - a.interval[0]) / (2 * Z)) ** 2 + ((b.interval[1] - b.interval[0]) / (2 * Z)) ** 2) ** 0.5
    diff = a.value - b.value
    return Estimate(round(diff, 4), (round(diff - Z * se, 4), round(diff + Z * se, 4)))


def _reading(gap: Estimate, larger: str, smaller: str, unit: str = " points") -> str:
    """One sentence on a gap: which is larger, by how much, and whether the interval excludes 0."""
    if gap.value is None:
        return "undefined on these rows"
    if gap.interval is not None and gap.interval[0] <= 0 <= gap.interval[1]:
        return f"{larger} and {smaller} do not differ beyond the noise of these rows (the interval contains 0)"
    direction = f"{larger} is higher than {smaller}" if gap.value > 0 else f"{smaller} is higher than {larger}"
    return f"{direction} by {abs(gap.value):.1f}{unit}"


def gqa_ood(metrics: dict) -> dict:
    """acc-tail against acc-head and Δ (the paper's OOD signal), from one GQA-OOD evaluation."""
    head, tail, delta = (estimate(metrics, k) for k in ("acc_head", "acc_tail", "delta_tail_head"))
    if delta.value is None:
        reading = "Δ is undefined (no tail question answered correctly, or no tail questions)"
    elif delta.interval is not None and delta.interval[0] <= 0 <= delta.interval[1]:
        reading = "acc-head and acc-tail do not differ beyond the noise of these rows (Δ's interval contains 0)"
    else:
        reading = (f"rare answers (tail) are answered {'worse' if delta.value > 0 else 'better'} than frequent ones "
                   f"(head): Δ = {delta.value:.1f}% of acc-tail")
    return {"name": "GQA-OOD: tail vs head", "benchmarks": ["gqa-ood"],
            "values": {"acc_head": head.as_dict(), "acc_tail": tail.as_dict(), "delta_tail_head": delta.as_dict()},
            "alpha_curve": metrics.get("acc_tail_by_alpha"), "reading": reading}


def vqa_shift(v2: dict, cp: dict) -> dict:
    """The drop in VQA accuracy from VQA v2 to VQA-CP, overall and per answer type."""
    out = {"overall": difference(estimate(v2, "accuracy"), estimate(cp, "accuracy")).as_dict()}
    for answer_type in sorted(set(v2.get("per_answer_type", {})) & set(cp.get("per_answer_type", {}))):
        key = f"per_answer_type.{answer_type}.accuracy"
        out[answer_type] = difference(estimate(v2, key), estimate(cp, key)).as_dict()
    drop = Estimate(out["overall"]["value"], None if out["overall"]["interval"] is None
                    else tuple(out["overall"]["interval"]))
    return {"name": "VQA v2 vs VQA-CP: changing priors", "benchmarks": ["vqa-v2", "vqa-cp"],
            "values": {"vqa_v2": estimate(v2, "accuracy").as_dict(), "vqa_cp": estimate(cp, "accuracy").as_dict(),
                       "drop": out},
            "reading": _reading(drop, "accuracy on VQA v2", "accuracy on VQA-CP")}


def single_vs_paired(vcr: dict, visor: dict) -> dict:
    """VCR's Q->A accuracy (single questions) against VCR-Visor's APQ (both sub-questions of a pair right)."""
    single, apq = estimate(vcr, "q_a"), estimate(visor, "apq")
    gap = difference(single, apq)
    return {"name": "VCR vs VCR-Visor: single vs paired questions", "benchmarks": ["vcr", "vcr-visor"],
            "values": {"vcr_q_a": single.as_dict(), "vcr_visor_apq": apq.as_dict(), "gap": gap.as_dict()},
            "reading": _reading(gap, "VCR's Q->A accuracy", "VCR-Visor's APQ")}


def perceptual(bench: str, metrics: dict) -> dict:
    """Gat et al. (NeurIPS 2021, Eq. 1-5): per modality the perceptual score normalised by the task
    (P_m / Z_D), mean over repeats, with its cluster-bootstrap interval; per metric of the benchmark."""
    values, strongest = {}, None
    for metric, summary in metrics["all"].items():
        for modality, scores in summary["modalities"].items():
            key = f"all.{metric}.modalities.{modality}.p_zd.mean"
            entry = Estimate(scores["p_zd"]["mean"], _interval(metrics, key))
            values[f"{metric}: {modality}"] = entry.as_dict()
            if entry.value is not None and (strongest is None or entry.value > strongest[1]):
                strongest = (modality, entry.value)
    reading = ("undefined (no normalisation: the benchmark has no training split for Z_D)" if strongest is None else
               "removing any one modality costs the model nothing (every P/Z_D is 0 or below)" if strongest[1] <= 0
               else f"the model relies most on the {strongest[0]} (P/Z_D = {strongest[1]:.1f})")
    return {"name": f"{bench}: perceptual score (P/Z_D)", "benchmarks": [bench], "values": values, "reading": reading}


def shortcuts(bench: str, headline: list[str], groups_by_column: dict[str, dict]) -> list[dict]:
    """The VCR-Visor paper's Appendix A labels (`vlbench shortcuts`): per label column, the headline
    metric of its question kind (else the first) on Biased against Non-Biased examples, and the gap."""
    out = []
    for column, groups in groups_by_column.items():
        kind = column.split("_", 2)[2]
        key = kind if kind in headline else headline[0]

        def of(label: str) -> Estimate:
            group = groups.get(label, {})
            value, interval = group.get(key), (group.get("intervals") or {}).get(key)
            return Estimate(value if isinstance(value, (int, float)) else None,
                            None if interval is None or None in interval else tuple(interval))

        biased, non_biased = of("Biased"), of("Non-Biased")
        gap = difference(biased, non_biased)
        out.append({"name": f"{bench}: language shortcuts ({column}, {key})", "benchmarks": [bench],
                    "values": {"biased": biased.as_dict(), "non_biased": non_biased.as_dict(), "gap": gap.as_dict()},
                    "rows": {label: groups[label].get("rows") for label in groups},
                    "reading": _reading(gap, "the score on Biased (text-solvable) examples",
                                        "the score on Non-Biased ones")})
    return out


def counterbias(metrics: dict, benchmark: str) -> dict:
    """Table 2's "Avg." cells in % (Eq. 13's in log-probability units) with their intervals; the reading
    names the largest cell and, for the main measure, the most B0- and B1-leaning targets."""
    from evaluator.vl_bias.counterbias import MEASURES

    values, largest = {}, None
    for m, summary in metrics["measures"].items():
        scale = 1.0 if m == "l_log" else 100.0
        for kind, value in summary["avg"].items():
            iv = _interval(metrics, f"measures.{m}.avg.{kind}")
            entry = Estimate(None if value is None else round(scale * value, 4),
                             None if iv is None else (round(scale * iv[0], 4), round(scale * iv[1], 4)))
            values[f"{MEASURES[m][0]} ({MEASURES[m][1]}), {kind}"] = entry.as_dict()
            if m != "l_log" and entry.value is not None and (largest is None or entry.value > largest[2]):
                largest = (MEASURES[m][0], kind, entry.value)
    main = next(iter(metrics["measures"]))
    b0, b1 = metrics["concept"]["b0"], metrics["concept"]["b1"]
    leaning = {name: value for targets in metrics["measures"][main]["per_target_avg"].values()
               for name, value in targets.items() if value is not None}
    reading = ("undefined on these images" if largest is None and not leaning else
               (f"the largest mean |bias| is {largest[0]} on {largest[1]} targets, {largest[2]:.2f}%"
                if largest else "only the language-only measure (Eq. 13) applies to this model"))
    if leaning:
        most, least = max(leaning, key=leaning.get), min(leaning, key=leaning.get)
        scale = 1.0 if main == "l_log" else 100.0
        reading += (f"; by {MEASURES[main][0]}, the most {b0}-leaning target is {most} ({scale * leaning[most]:+.2f}) "
                    f"and the most {b1}-leaning {least} ({scale * leaning[least]:+.2f})")
    return {"name": f"VL-Bias: CounterBias ({b0} vs {b1})", "benchmarks": [benchmark], "values": values,
            "reading": reading}


def _interval(metrics: dict, key: str) -> tuple[float, float] | None:
    interval = (metrics.get("intervals") or {}).get("metrics", {}).get(key)
    return None if interval is None or None in interval else (float(interval[0]), float(interval[1]))


def diagnostics(metrics: dict[str, dict], perceptual_scores: dict[str, dict] | None = None,
                shortcut_groups: dict[str, dict] | None = None, bias: dict | None = None
                ) -> tuple[list[dict], list[str]]:
    """(the diagnostics the scored benchmarks allow, what is missing for the others and how to get it)."""
    found, missing = [], []
    if "gqa-ood" in metrics:
        found.append(gqa_ood(metrics["gqa-ood"]))
    else:
        missing.append("GQA-OOD tail vs head: build and score gqa-ood")
    if "vqa-v2" in metrics and "vqa-cp" in metrics:
        found.append(vqa_shift(metrics["vqa-v2"], metrics["vqa-cp"]))
    else:
        missing.append("VQA v2 vs VQA-CP: build and score both vqa-v2 and vqa-cp")
    if "vcr" in metrics and "vcr-visor" in metrics:
        found.append(single_vs_paired(metrics["vcr"], metrics["vcr-visor"]))
    else:
        missing.append("VCR vs VCR-Visor: build and score both vcr and vcr-visor")
    for bench, scores in (perceptual_scores or {}).items():
        found.append(perceptual(bench, scores))
    for bench, labelled in (shortcut_groups or {}).items():
        found += shortcuts(bench, labelled["headline"], labelled["groups"])
    if not shortcut_groups:
        missing.append("language shortcuts: no scored build carries shortcut labels (vlbench shortcuts BENCH --data "
                       "DIR --out DIR-labelled, then build the suite's DATA from the labelled folder)")
    if bias is not None and "metrics" in bias:
        found.append(counterbias(bias["metrics"], bias["benchmark"]))
    elif bias is not None:
        missing.append(f"CounterBias: {bias['skipped']}")
    return found, missing
