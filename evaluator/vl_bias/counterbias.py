"""CounterBias (Zhang, Wang, Sang, ACM MM 2022, §3, Eq. 1-13) as pure functions on arrays.

Probabilities come from a model at a [MASK] (evaluator.vl_bias.probe): P(T | V, L) for the target word in
a caption (Eq. 1, 5, 8, 10), P(B | V) for the bias word (a gender word in VL-Bias) in the bias prompt
(Eq. 2). The bias concept of text
is binary, P(B | L_f) = 1 and P(B | L_cf) = 0, and that of an image-text pair is the mean
P(B | V, L) = (P(B | V) + P(B | L)) / 2. An instance bias divides the change of the target
probability by the change of the bias concept; where the concept does not change (|denominator| below
`min_change`) the instance bias is undefined: NaN in the arrays, counted and reported by `summarise`,
never averaged in.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

P_B_FACTUAL_TEXT = 1.0  # P(B | L_f)
P_B_COUNTERFACTUAL_TEXT = 0.0  # P(B | L_cf)
MEASURES = {  # name -> (Table 2/3 label, equation)
    "vl": ("B@V-L", "Eq. 6"),
    "v": ("B@V", "Eq. 9"),
    "l": ("B@L", "Eq. 11"),
    "l_log": ("B@L (log, no image)", "Eq. 13"),
}


def mask_probability(log_probs: np.ndarray, index: np.ndarray, among: np.ndarray | None = None) -> np.ndarray:
    """P([MASK] = T) per query from full-vocabulary log-probabilities gathered at candidate tokens
    (`log_probs[i, j]`, T = candidate `index[i]`). With `among` (a boolean mask over candidates per
    query) the softmax is restricted to those candidates, as the authors' code does over its target
    list: renormalising full-vocabulary probabilities equals a softmax over the selected logits."""
    log_probs = np.asarray(log_probs, dtype=np.float64)
    rows = np.arange(len(log_probs))
    if among is None:
        return np.exp(log_probs[rows, index])
    if not np.asarray(among)[rows, index].all():
        raise ValueError("the target of a query is not among its restricted candidates")
    masked = np.where(among, log_probs, -np.inf)
    top = masked.max(axis=1, keepdims=True)
    return np.exp(log_probs[rows, index] - top[:, 0]) / np.exp(masked - top).sum(axis=1)


def concept_vl(p_b_v, p_b_l) -> np.ndarray:
    """P(B | V, L): the mean of the image's and the text's bias concept (§3)."""
    return (np.asarray(p_b_v, dtype=np.float64) + p_b_l) / 2.0


def guarded_ratio(numerator, denominator, min_change: float) -> np.ndarray:
    """numerator / denominator, NaN where |denominator| < min_change (the bias concept did not change)."""
    num, den = np.asarray(numerator, dtype=np.float64), np.asarray(denominator, dtype=np.float64)
    defined = np.abs(den) >= min_change
    return np.divide(num, den, out=np.full(np.broadcast(num, den).shape, np.nan), where=defined)


def bias_vl(p_t_f, p_t_cf, p_b_vf, p_b_vcf, min_change: float = 1e-6) -> np.ndarray:
    """Eq. 6: [P(T | V_cf, L_cf) - P(T | V_f, L_f)] / [P(B | V_cf, L_cf) - P(B | V_f, L_f)]."""
    den = concept_vl(p_b_vcf, P_B_COUNTERFACTUAL_TEXT) - concept_vl(p_b_vf, P_B_FACTUAL_TEXT)
    return guarded_ratio(np.subtract(p_t_cf, p_t_f), den, min_change)


def bias_v(p_t_f, p_t_vcf_lf, p_b_vf, p_b_vcf, min_change: float = 1e-6) -> np.ndarray:
    """Eq. 9: [P(T | V_cf, L_f) - P(T | V_f, L_f)] / [P(B | V_cf) - P(B | V_f)]."""
    return guarded_ratio(np.subtract(p_t_vcf_lf, p_t_f), np.subtract(p_b_vcf, p_b_vf), min_change)


def bias_l(p_t_f, p_t_vf_lcf) -> np.ndarray:
    """Eq. 11: [P(T | V_f, L_cf) - P(T | V_f, L_f)] / [P(B | L_cf) - P(B | L_f)]; the denominator is
    0 - 1 (the paper prints "L(B | V_f)", a typo for P(B | L_f))."""
    return np.subtract(p_t_vf_lcf, p_t_f) / (P_B_COUNTERFACTUAL_TEXT - P_B_FACTUAL_TEXT)


def bias_l_log(p_t_lf, p_t_lcf) -> np.ndarray:
    """Eq. 13, language only (no image, Eq. 12): [log P(T | L_cf) - log P(T | L_f)] / [P(B | L_cf) - P(B | L_f)]."""
    return (np.log(p_t_lcf) - np.log(p_t_lf)) / (P_B_COUNTERFACTUAL_TEXT - P_B_FACTUAL_TEXT)


@dataclass(frozen=True)
class TargetBias:
    """Eq. 7 for one target: the mean over its instances of the sign-aligned instance bias."""

    bias: float | None  # None when no instance of the target has a defined bias
    instances: int
    undefined: int


def dataset_bias(targets, values, is_b0) -> dict[str, TargetBias]:
    """Eq. 7: bias(T) = E_{S_T}[1_{B=B0} bias(T, B) - 1_{B=B1} bias(T, B)]. Positive = towards B0
    (male by default). Undefined instance biases (NaN) are left out of the mean and counted."""
    targets = np.asarray(targets)
    aligned = np.where(np.asarray(is_b0, dtype=bool), 1.0, -1.0) * np.asarray(values, dtype=np.float64)
    out = {}
    for target in sorted(set(targets.tolist())):
        v = aligned[targets == target]
        ok = ~np.isnan(v)
        out[target] = TargetBias(float(v[ok].mean()) if ok.any() else None, int(v.size), int((~ok).sum()))
    return out


def mean_absolute(per_target: dict[str, TargetBias]) -> float | None:
    """A Table 2 / Table 3 cell: the mean over targets of |bias(T)| (targets with an undefined bias left out)."""
    values = [abs(t.bias) for t in per_target.values() if t.bias is not None]
    return float(np.mean(values)) if values else None


def template_average(cells: list[float | None]) -> float | None:
    """Table 2's "Avg." row: the mean of the per-template cells."""
    values = [c for c in cells if c is not None]
    return float(np.mean(values)) if values else None


def summarise(columns: dict, measures: list[str], templates: list[str], b0: str = "male") -> dict:
    """Per measure (`columns[f"bias_{m}"]`, one value per image x template row): for every template and
    target type the per-target Eq. 7 bias and the Table 2 cell, the "Avg." over templates, the signed
    per-target bias averaged over templates (Fig. 5 right, Fig. 7) and the count of undefined rows."""
    template, target, target_type = (np.asarray(columns[c]) for c in ("template", "target", "target_type"))
    is_b0 = np.asarray(columns["bias_class"]) == b0
    out = {}
    for m in measures:
        values = np.asarray(columns[f"bias_{m}"], dtype=np.float64)
        by_template: dict[str, dict] = {t: {} for t in templates}
        avg, signed = {}, {}
        for kind in sorted(set(target_type.tolist())):
            across: dict[str, list] = {}  # target -> its Eq. 7 bias under each template
            for t in templates:
                sel = (template == t) & (target_type == kind)
                per_target = dataset_bias(target[sel], values[sel], is_b0[sel])
                by_template[t][kind] = {"mean_abs": mean_absolute(per_target),
                                        "per_target": {k: vars(v) for k, v in per_target.items()}}
                for name, bias in per_target.items():
                    across.setdefault(name, []).append(bias.bias)
            avg[kind] = template_average([by_template[t][kind]["mean_abs"] for t in templates])
            signed[kind] = {name: template_average(biases) for name, biases in sorted(across.items())}
        out[m] = {"templates": by_template, "avg": avg, "per_target_avg": signed,
                  "undefined": int(np.isnan(values).sum()), "rows": int(values.size)}
    return out


def resampling(columns: dict, measures: list[str], templates: list[str], b0: str = "male",
               per_target: bool = False):
    """The Table 2 cells of `summarise` -- per measure, template and target type the mean over targets
    of |bias(T)| (Eq. 7), and their "Avg." over templates -- as functions of per-target ratios over the
    rows (the sign-aligned instance biases of a target's rows, undefined ones left out), for the
    cluster bootstrap (evaluator.stats.bootstrap) over images: an image's rows (its templates, genders) are
    resampled together. A target whose bias is undefined in a resample is left out of that resample's
    mean, as `mean_absolute` does. With `per_target`, each target's signed bias averaged over the
    templates (`per_target_avg`, as `summarise`) too."""
    from evaluator.stats.bootstrap import Ratio, Resampling, cluster_codes

    template, target, target_type = (np.asarray(columns[c]) for c in ("template", "target", "target_type"))
    sign = np.where(np.asarray(columns["bias_class"]) == b0, 1.0, -1.0)
    ratios, derived = {}, {}
    for m in measures:
        values = sign * np.asarray(columns[f"bias_{m}"], dtype=np.float64)
        valid = ~np.isnan(values)
        for kind in sorted(set(target_type.tolist())):
            cells, per_template = [], {}
            for t in templates:
                names = []
                for k, name in enumerate(sorted(set(target[(template == t) & (target_type == kind)].tolist()))):
                    inside = ((template == t) & (target_type == kind) & (target == name) & valid).astype(np.float64)
                    key = f"_measures.{m}.templates.{t}.{kind}.target{k}"
                    ratios[key] = Ratio(np.where(valid, values, 0.0) * inside, inside, 1.0)
                    names.append(key)
                    per_template.setdefault(name, []).append(key)
                cell = f"measures.{m}.templates.{t}.{kind}.mean_abs"
                derived[cell] = lambda v, names=names: _nanmean_abs([v[n] for n in names])
                cells.append(cell)
            derived[f"measures.{m}.avg.{kind}"] = lambda v, cells=cells: _nanmean([v[c] for c in cells])
            if per_target:  # Fig. 5 (right): a target's signed bias, averaged over the templates
                for name, keys in sorted(per_template.items()):
                    derived[f"measures.{m}.per_target_avg.{kind}.{name}"] = \
                        lambda v, keys=keys: _nanmean([v[n] for n in keys])
    return Resampling(cluster_codes(columns["image_id"].tolist()), "image", ratios, derived)


def _nanmean(arrays: list) -> np.ndarray:
    stacked = np.vstack(arrays) if arrays else np.full((1, 1), np.nan)
    with np.errstate(invalid="ignore"):
        count = (~np.isnan(stacked)).sum(axis=0)
        return np.where(count > 0, np.nansum(stacked, axis=0) / np.maximum(count, 1), np.nan)


def _nanmean_abs(arrays: list) -> np.ndarray:
    return _nanmean([np.abs(a) for a in arrays])

