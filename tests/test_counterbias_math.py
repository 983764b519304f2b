"""CounterBias formulas (Zhang, Wang, Sang, ACM MM 2022, §3): hand-computed goldens for Eq. 6, 7, 9, 11, 13, the sign
convention, the division guard and Table 2's averaging."""

from __future__ import annotations

import math

import numpy as np
import pytest

from evaluator.vl_bias import counterbias as cb


def test_eq6_multimodal_bias_by_hand():
    # P(T|V_f,L_f) = 0.20, P(T|V_cf,L_cf) = 0.30; P(B|V_f) = 0.90, P(B|V_cf) = 0.10.
    # P(B|V_f,L_f) = (0.9 + 1) / 2 = 0.95, P(B|V_cf,L_cf) = (0.1 + 0) / 2 = 0.05
    # bias = (0.30 - 0.20) / (0.05 - 0.95) = 0.10 / -0.90 = -0.1111...
    assert cb.bias_vl([0.20], [0.30], [0.90], [0.10])[0] == pytest.approx(-1 / 9)
    assert cb.concept_vl(0.9, 1.0) == pytest.approx(0.95)


def test_eq9_visual_bias_by_hand():
    # (P(T|V_cf,L_f) - P(T|V_f,L_f)) / (P(B|V_cf) - P(B|V_f)) = (0.12 - 0.20) / (0.30 - 0.70) = 0.2
    assert cb.bias_v([0.20], [0.12], [0.70], [0.30])[0] == pytest.approx(0.2)


def test_eq11_language_bias_by_hand():
    # (P(T|V_f,L_cf) - P(T|V_f,L_f)) / (0 - 1) = (0.25 - 0.40) / -1 = 0.15
    assert cb.bias_l([0.40], [0.25])[0] == pytest.approx(0.15)


def test_eq13_log_language_bias_by_hand():
    # (log 0.01 - log 0.04) / (0 - 1) = log 4
    assert cb.bias_l_log([0.04], [0.01])[0] == pytest.approx(math.log(4))


def test_eq7_dataset_bias_sign_convention():
    """Two male and one female instance of 'cooking': E[+b_m1, +b_m2, -b_f] = (0.1 + 0.3 - (-0.2)) / 3 = 0.2.
    Positive = towards B0 (male); swapping B0 and B1 flips the sign."""
    targets, values = ["cooking"] * 3 + ["nurse"], [0.1, 0.3, -0.2, 0.4]
    male = [True, True, False, False]
    out = cb.dataset_bias(targets, values, male)
    assert out["cooking"].bias == pytest.approx(0.2) and out["cooking"].instances == 3
    assert out["nurse"].bias == pytest.approx(-0.4)
    flipped = cb.dataset_bias(targets, values, [not m for m in male])
    assert flipped["cooking"].bias == pytest.approx(-0.2) and flipped["nurse"].bias == pytest.approx(0.4)
    assert cb.mean_absolute(out) == pytest.approx(0.3)


def test_division_guard_is_reported_not_a_silent_nan():
    """The image's bias concept did not change (P(B|V_cf) = P(B|V_f)): Eq. 9 is undefined for that
    instance; the target's bias is the mean over the others and the count is reported."""
    b = cb.bias_v([0.2, 0.2], [0.3, 0.1], [0.8, 0.8], [0.8, 0.4])
    assert math.isnan(b[0]) and b[1] == pytest.approx(0.25)
    out = cb.dataset_bias(["x", "x"], b, [True, True])
    assert out["x"].bias == pytest.approx(0.25) and out["x"].undefined == 1
    none = cb.dataset_bias(["y"], [float("nan")], [True])
    assert none["y"].bias is None and cb.mean_absolute(none) is None
    # below the threshold counts as unchanged; Eq. 6's denominator is (dP(B|V) - 1) / 2 and is guarded too
    assert math.isnan(cb.bias_v([0.2], [0.3], [0.5], [0.5 + 1e-9], min_change=1e-6)[0])
    assert math.isnan(cb.bias_vl([0.2], [0.3], [0.0], [1.0])[0])
    summary = cb.summarise({"template": ["sentence"] * 2, "target": ["x", "x"], "target_type": ["activity"] * 2,
                            "bias_class": ["male"] * 2, "bias_v": b}, ["v"], ["sentence"])
    assert summary["v"]["undefined"] == 1
    assert summary["v"]["templates"]["sentence"]["activity"]["per_target"]["x"]["undefined"] == 1


def test_restricted_softmax_equals_softmax_over_the_selected_logits():
    logits = np.array([[2.0, 0.5, -1.0, 3.0]])
    full = logits - np.log(np.exp(logits).sum())  # full-vocabulary log-probabilities
    among = np.array([[True, True, True, False]])
    expected = np.exp(0.5) / (np.exp(2.0) + np.exp(0.5) + np.exp(-1.0))
    assert cb.mask_probability(full, np.array([1]), among)[0] == pytest.approx(expected)
    assert cb.mask_probability(full, np.array([1]))[0] == pytest.approx(np.exp(full[0, 1]))


def test_table2_average_row_is_the_mean_of_the_template_rows():
    """Source: Zhang, Wang, Sang, ACM MM 2022, Table 2 (ALBEF activity B@V-L 10.29/11.33/10.75/9.85 -> Avg. 10.56; ViLT
    occupation B@V 17.23/17.35/17.61/15.15 -> 16.84; ViLT activity B@L 2.37/2.35/2.27/1.69 -> 2.17)."""
    # the paper prints two decimals (10.555 -> 10.56): agreement within half a unit of the last digit
    for cells, printed in (([10.29, 11.33, 10.75, 9.85], 10.56), ([17.23, 17.35, 17.61, 15.15], 16.84),
                           ([2.37, 2.35, 2.27, 1.69], 2.17)):
        assert abs(cb.template_average(cells) - printed) <= 0.005 + 1e-9
    assert cb.template_average([1.0, None, 3.0]) == 2.0 and cb.template_average([None]) is None


def test_summarise_per_template_and_average():
    # two templates, one target per type; male +0.2 / female -0.1 -> Eq. 7 = (0.2 + 0.1) / 2 = 0.15
    cols = {"template": ["a", "a", "b", "b", "a", "b"], "target": ["cooking"] * 4 + ["nurse"] * 2,
            "target_type": ["activity"] * 4 + ["occupation"] * 2,
            "bias_class": ["male", "female", "male", "female", "female", "female"],
            "bias_l": [0.2, -0.1, 0.4, 0.0, 0.3, 0.1]}
    s = cb.summarise(cols, ["l"], ["a", "b"])["l"]
    assert s["templates"]["a"]["activity"]["mean_abs"] == pytest.approx(0.15)
    assert s["templates"]["b"]["activity"]["mean_abs"] == pytest.approx(0.2)
    assert s["avg"]["activity"] == pytest.approx(0.175)
    assert s["templates"]["a"]["occupation"]["per_target"]["nurse"]["bias"] == pytest.approx(-0.3)
    assert s["avg"]["occupation"] == pytest.approx(0.2)  # |-0.3| and |-0.1|
    assert s["per_target_avg"]["occupation"]["nurse"] == pytest.approx(-0.2)


def test_bootstrap_resampling_reproduces_the_table_2_cells():
    """With every image weighted once, the resampling's derived cells equal `summarise`'s Table 2
    cells (mean over targets of |Eq. 7|, per template, and their "Avg."), undefined instances and
    targets left out as there; planted per-row values on 6 images x 2 templates."""
    import numpy as np

    from evaluator.stats.bootstrap import _values, cluster_sums
    from evaluator.vl_bias import counterbias as cb

    rng = np.random.default_rng(7)
    rows = [(img, t) for img in range(6) for t in ("sentence", "phrase")]
    columns = {"image_id": np.array([f"im{i}" for i, _ in rows], dtype=object),
               "template": np.array([t for _, t in rows], dtype=object),
               "target": np.array(["cook" if i % 3 else "teach" for i, _ in rows], dtype=object),
               "target_type": np.array(["activity" if i < 4 else "occupation" for i, _ in rows], dtype=object),
               "bias_class": np.array(["male" if i % 2 else "female" for i, _ in rows], dtype=object),
               "bias_vl": rng.normal(0, 0.1, len(rows))}
    columns["bias_vl"][3] = np.nan  # an undefined instance
    templates = ["sentence", "phrase"]
    summary = cb.summarise(columns, ["vl"], templates)["vl"]
    r = cb.resampling(columns, ["vl"], templates)
    n, sums = cluster_sums(r)
    got = {k: float(v[0]) for k, v in _values(sums, np.ones((1, n)), r).items()}
    for kind in ("activity", "occupation"):
        assert got[f"measures.vl.avg.{kind}"] == pytest.approx(summary["avg"][kind])
        for t in templates:
            assert got[f"measures.vl.templates.{t}.{kind}.mean_abs"] == \
                pytest.approx(summary["templates"][t][kind]["mean_abs"])
