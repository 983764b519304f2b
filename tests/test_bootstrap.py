"""Confidence intervals and paired comparisons (evaluator/stats/bootstrap.py): the vectorised cluster
bootstrap equals a plain per-resample loop on the same draws, its interval matches the analytic
binomial one where that is exact, it covers a known mean about 95% of the time (slow), the paired
test finds a planted difference and none between identical submissions, and `evaluate` reports
intervals for each benchmark that declares its resampling."""

from __future__ import annotations

import json

import numpy as np
import pytest

from evaluator.stats.bootstrap import Ratio, Resampling, cluster_codes, compare, intervals, value_at


def _loop_bootstrap(clusters, num, den, resamples, seed):
    """The textbook cluster bootstrap, one resample and one cluster at a time (the golden for the
    vectorised version): the same generator draws the same cluster indices."""
    rng = np.random.default_rng(seed)
    n = clusters.max() + 1
    members = [np.flatnonzero(clusters == c) for c in range(n)]
    out = []
    for _ in range(resamples):
        drawn = rng.integers(0, n, size=n)
        rows = np.concatenate([members[c] for c in drawn])
        out.append(100 * num[rows].sum() / den[rows].sum())
    return np.percentile(out, [2.5, 97.5])


def test_vectorised_bootstrap_equals_the_per_resample_loop():
    rng = np.random.default_rng(3)
    clusters = rng.integers(0, 60, size=500)
    clusters = cluster_codes(clusters.tolist())
    correct = (rng.random(500) < 0.4).astype(float)
    inside = (rng.random(500) < 0.3).astype(float)
    r = Resampling(clusters, "image", {"acc": Ratio(correct, np.ones(500)), "tail": Ratio(correct * inside, inside)})
    got = intervals(r, resamples=300, seed=11)
    assert got["metrics"]["acc"] == pytest.approx(_loop_bootstrap(clusters, correct, np.ones(500), 300, 11), abs=1e-4)
    assert got["metrics"]["tail"] == pytest.approx(_loop_bootstrap(clusters, correct * inside, inside, 300, 11),
                                                   abs=1e-4)
    assert intervals(r, resamples=300, seed=11) == got  # a fixed seed gives fixed intervals
    assert intervals(r, resamples=300, seed=12) != got
    assert got["clusters"] == 60 and got["unit"] == "image"


def test_unclustered_interval_matches_the_binomial_normal_interval():
    """One row per cluster and a proportion: the bootstrap standard error is sqrt(p(1-p)/n), so the
    percentile interval is close to p +- 1.96 sqrt(p(1-p)/n) (n = 2,000, p = 0.3: +- 2.01 points)."""
    n = 2000
    correct = np.zeros(n)
    correct[:600] = 1
    # weights of 2 per row: the same proportion, but not 0/1 outcomes, so the bootstrap is used
    r = Resampling(np.arange(n), "question", {"acc": Ratio(2 * correct, np.full(n, 2.0))})
    got = intervals(r, resamples=4000, seed=0)
    lo, hi = got["metrics"]["acc"]
    half = 100 * 1.96 * np.sqrt(0.3 * 0.7 / n)
    assert lo == pytest.approx(30 - half, abs=0.25) and hi == pytest.approx(30 + half, abs=0.25)
    assert "exact" not in got


def test_independent_binary_outcomes_get_the_exact_binomial_interval():
    """Clopper-Pearson goldens from the published tables: 3 of 10 -> [6.67, 65.25] %, 0 of 10 ->
    [0, 30.85] % (1 - 0.025^(1/10)). Rows in scope must be one per cluster (APQ: one row per pair; the
    pair's sub-question rows are out of its scope); a clustered proportion keeps the bootstrap."""
    three = np.array([1, 1, 1, 0, 0, 0, 0, 0, 0, 0.0])
    got = intervals(Resampling(np.arange(10), "pair", {"apq": Ratio(three, np.ones(10))}), resamples=50)
    assert got["metrics"]["apq"] == pytest.approx([6.6739, 65.2453], abs=1e-3) and got["exact"] == ["apq"]
    none = intervals(Resampling(np.arange(10), "pair", {"apq": Ratio(np.zeros(10), np.ones(10))}), resamples=50)
    assert none["metrics"]["apq"] == pytest.approx([0.0, 30.8497], abs=1e-3)
    # sub-question rows of the same pairs, out of APQ's scope, do not change it
    ones, zeros = np.ones(10), np.zeros(10)
    clusters = np.r_[np.arange(10), np.repeat(np.arange(5), 2)]  # two sub-questions per pair
    scoped = Resampling(clusters, "pair", {"apq": Ratio(np.r_[three, zeros], np.r_[ones, zeros]),
                                           "accuracy": Ratio(np.r_[zeros, three], np.r_[zeros, ones])})
    assert intervals(scoped, resamples=50)["exact"] == ["apq"]  # sub-questions share their pair
    clustered = Resampling(np.repeat(np.arange(5), 2), "image", {"acc": Ratio(three, np.ones(10))})
    assert "exact" not in intervals(clustered, resamples=50)


@pytest.mark.slow
def test_intervals_cover_a_known_mean_about_95_percent_of_the_time():
    """Simulated clustered data with a known mean accuracy of 60%: 300 data sets of 150 images with
    4 questions each (an image effect correlates its questions); the 95% interval holds 0.6 in
    91-99% of them (a binomial band around 95% for 300 trials)."""
    rng = np.random.default_rng(2024)
    clusters = np.repeat(np.arange(150), 4)
    hits = 0
    for _ in range(300):
        image_p = np.clip(0.6 + rng.normal(0, 0.15, 150), 0, 1)
        correct = (rng.random(600) < image_p[clusters]).astype(float)
        # the image effect is symmetric around 0.6 before clipping; clipping is rare at sd 0.15
        r = Resampling(clusters, "image", {"acc": Ratio(correct, np.ones(600))})
        lo, hi = intervals(r, resamples=500, seed=int(rng.integers(1 << 30)))["metrics"]["acc"]
        hits += lo <= 60 <= hi
    assert 0.91 <= hits / 300 <= 0.99


def test_derived_metric_and_undefined_resamples():
    """GQA-OOD's delta is a function of two ratios; a subset that resamples can empty is undefined."""
    correct = np.array([1, 0, 1, 1, 0, 1.0])
    tail = np.array([0, 0, 0, 0, 1, 1.0])  # both tail questions on one image: no exact interval
    r = Resampling(np.array([0, 1, 2, 3, 4, 4]), "image", {"head": Ratio(correct * (1 - tail), 1 - tail),
                                                           "tail": Ratio(correct * tail, tail)},
                   {"delta": lambda v: 100 * (v["head"] - v["tail"]) / v["tail"]})
    got = intervals(r, resamples=200, seed=0)["metrics"]
    assert got["head"] is not None and got["tail"] is None and got["delta"] is None


def test_paired_comparison_finds_a_planted_difference_and_none_between_equals():
    rng = np.random.default_rng(5)
    clusters = np.repeat(np.arange(300), 3)
    a = (rng.random(900) < 0.5).astype(float)
    b = a.copy()
    flip = rng.choice(np.flatnonzero(a == 0), 120, replace=False)  # B is right on 120 more questions
    b[flip] = 1
    ones = np.ones(900)
    ra = Resampling(clusters, "image", {"acc": Ratio(a, ones)})
    rb = Resampling(clusters, "image", {"acc": Ratio(b, ones)})
    result = compare(ra, rb, resamples=2000, seed=0)["metrics"]["acc"]
    assert result["difference"] == pytest.approx(100 * 120 / 900, abs=1e-4)
    assert result["interval"][0] > 0 and result["p_value"] < 0.001
    same = compare(ra, ra, resamples=500, seed=0)["metrics"]["acc"]
    assert same["difference"] == 0 and same["interval"] == [0.0, 0.0] and same["p_value"] == 1.0
    # a small difference is not significant: 3 questions out of 900
    c = a.copy()
    c[flip[:3]] = 1
    small = compare(ra, Resampling(clusters, "image", {"acc": Ratio(c, ones)}), resamples=2000, seed=0)
    assert small["metrics"]["acc"]["p_value"] > 0.05
    with pytest.raises(ValueError):
        compare(ra, Resampling(np.arange(900), "image", {"acc": Ratio(b, ones)}))


def test_permutation_p_value_equals_the_exact_sign_flip_distribution():
    """Four clusters: the paired permutation test's p-value estimates the exact share of the 16 sign
    flips whose |difference| reaches the observed one (here 2 of 16: all flips agree or all reverse)."""
    a = np.array([0, 0, 0, 0.0])
    b = np.array([1, 1, 1, 1.0])
    ones = np.ones(4)
    got = compare(Resampling(np.arange(4), "image", {"acc": Ratio(a, ones)}),
                  Resampling(np.arange(4), "image", {"acc": Ratio(b, ones)}), resamples=20000, seed=1)
    assert got["metrics"]["acc"]["p_value"] == pytest.approx(2 / 16, abs=0.01)


def test_value_at_reads_metric_paths():
    metrics = {"apq": 1.5, "by_type": {"causal": {"apq": 2.0}}}
    assert value_at(metrics, "apq") == 1.5 and value_at(metrics, "by_type.causal.apq") == 2.0
    assert value_at(metrics, "by_type.x.apq") is None


SLOW = pytest.mark.slow


@pytest.mark.parametrize("bench,model,unit", [("gqa-ood", "baseline:random", "image"),
                                              pytest.param("vqa-v2", "baseline:prior", "image", marks=SLOW),
                                              pytest.param("vcr", "baseline:overlap", "image", marks=SLOW),
                                              pytest.param("socialiq", "baseline:answer-sentiment", "video",
                                                           marks=SLOW),
                                              pytest.param("visdial", "baseline:random", "dialog", marks=SLOW),
                                              pytest.param("disco", "baseline:mean", "image", marks=SLOW)])
def test_evaluate_reports_intervals_around_each_headline_metric(bench, model, unit, built, cli, tmp_path):
    data = built(bench)
    code, _, err = cli("predict", bench, "--data", data, "--model", model, "--out", tmp_path / "p.json")
    assert code == 0, err
    code, _, err = cli("evaluate", bench, "--data", data, "--predictions", tmp_path / "p.json", "--report",
                       tmp_path / "r", "--bootstrap", "200", "--seed", "7")
    assert code == 0, err
    metrics = json.loads((tmp_path / "r" / "metrics.json").read_text())
    iv = metrics["intervals"]
    assert iv["unit"] == unit and iv["resamples"] == 200 and iv["seed"] == 7
    for path, bounds in iv["metrics"].items():
        value = value_at(metrics, path)
        assert bounds is not None and bounds[0] <= value <= bounds[1], (path, value, bounds)
    assert "## 95% confidence intervals" in (tmp_path / "r" / "report.md").read_text()
    assert (tmp_path / "r" / "intervals.png").stat().st_size > 0
    code, _, err = cli("evaluate", bench, "--data", data, "--predictions", tmp_path / "p.json", "--report",
                       tmp_path / "r0", "--bootstrap", "0")
    assert code == 0 and "intervals" not in json.loads((tmp_path / "r0" / "metrics.json").read_text())


def test_paired_benchmarks_resample_whole_pairs(built, cli, tmp_path):
    """APQ / HPQ and per-type values of the resampling equal `score`'s; clusters are pairs."""
    data = built("vcr-visor")
    code, _, err = cli("predict", "vcr-visor", "--data", data, "--model", "baseline:random", "--out",
                       tmp_path / "p.json")
    assert code == 0, err
    code, _, err = cli("evaluate", "vcr-visor", "--data", data, "--predictions", tmp_path / "p.json", "--report",
                       tmp_path / "r", "--bootstrap", "300")
    assert code == 0, err
    metrics = json.loads((tmp_path / "r" / "metrics.json").read_text())
    iv = metrics["intervals"]
    assert iv["unit"] == "pair" and iv["clusters"] == metrics["pairs"]
    assert {"apq", "hpq", "accuracy", "mean_over_types.apq", "by_type.causal.hpq"} <= set(iv["metrics"])
    for path, bounds in iv["metrics"].items():
        if bounds is not None:
            assert bounds[0] <= value_at(metrics, path) <= bounds[1], path


def test_compare_command_reports_differences_with_intervals_and_p_values(built, cli, tmp_path):
    """Two random baselines (different seeds) on GQA-OOD: the difference is B - A of score's values,
    its interval contains it, p is in (0, 1]; the report has the table and a forest plot. Bad usage
    is one line, exit 2."""
    data = built("gqa-ood")
    for name, seed in (("a.json", "0"), ("b.json", "1")):
        code, _, err = cli("predict", "gqa-ood", "--data", data, "--model", "baseline:random", "--seed", seed,
                           "--out", tmp_path / name)
        assert code == 0, err
    code, stdout, err = cli("compare", "gqa-ood", "--data", data, "--predictions", tmp_path / "a.json",
                            "--predictions", tmp_path / "b.json", "--report", tmp_path / "r", "--bootstrap", "300")
    assert code == 0, err
    assert "b.json - a.json" in stdout and "acc_tail:" in stdout
    metrics = json.loads((tmp_path / "r" / "metrics.json").read_text())
    c = metrics["comparisons"][0]
    assert c["unit"] == "image" and c["resamples"] == 300
    for path, r in c["metrics"].items():
        assert r["difference"] == pytest.approx(r["b"] - r["a"], abs=1e-3), path
        assert r["interval"][0] <= r["difference"] <= r["interval"][1] and 0 < r["p_value"] <= 1
    assert "## b.json - a.json" in (tmp_path / "r" / "report.md").read_text()
    assert (tmp_path / "r" / "forest_1.png").stat().st_size > 0
    code, _, err = cli("compare", "gqa-ood", "--data", data, "--predictions", tmp_path / "a.json")
    assert code == 2 and "at least two" in err and len(err.strip().splitlines()) == 1
    code, _, err = cli("compare", "gqa-ood", "--data", data, "--predictions", tmp_path / "a.json",
                       "--predictions", tmp_path / "a.json")
    assert code == 2 and "twice" in err
    (tmp_path / "bad.json").write_text("[{\"questionId\": 1}]")
    code, _, err = cli("compare", "gqa-ood", "--data", data, "--predictions", tmp_path / "a.json",
                       "--predictions", tmp_path / "bad.json")
    assert code == 2 and "bad.json" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "r2").exists()


def test_perceptual_intervals_are_around_the_reported_means(built, cli, tmp_path):
    """The perceptual score's resampling reproduces, on the full sample, the means `summarise`
    reports (P_m, P_m / Z_D, P_m / Z_{D,f}: Eq. 1, 4, 5 averaged over repeats), and its intervals
    contain them; clusters are Social-IQ's videos."""
    data = built("socialiq")
    code, _, err = cli("perceptual", "socialiq", "--data", data, "--model", "baseline:answer-sentiment", "--repeats",
                       "2", "--permutations", "2", "--bootstrap", "300", "--report", tmp_path / "r")
    assert code == 0, err
    metrics = json.loads((tmp_path / "r" / "metrics.json").read_text())
    iv = metrics["intervals"]
    assert iv["unit"] == "video" and iv["resamples"] == 300
    answer = "all.accuracy.modalities.answer"
    assert {f"{answer}.p.mean", f"{answer}.p_zd.mean", f"{answer}.p_zdf.mean", "all.accuracy.acc"} <= set(iv["metrics"])
    for path, (low, high) in iv["metrics"].items():
        assert low - 1e-9 <= value_at(metrics, path) <= high + 1e-9, path
    assert value_at(metrics, f"{answer}.p.mean") > 0  # the answer's sentiment is what the baseline reads
    assert "## 95% confidence intervals" in (tmp_path / "r" / "report.md").read_text()


def test_perceptual_resampling_reproduces_summarise_on_the_full_sample():
    """Hand-made per-sample values (1 metric, 6 rows, 2 repeats, a majority vote): with every cluster
    weighted once, the ratios give exactly summarise's Acc(M) and its means over repeats of P_m,
    P_m / Z_D and P_m / Z_{D,f}. A NaN row (a metric the row does not score) is left out of both."""
    from evaluator.perceptual.score import PerceptualResult, resampling, summarise
    from evaluator.stats.bootstrap import _values, cluster_sums

    full = np.array([1, 0, 1, 1, np.nan, 0.0])
    without = {"image": {"acc": np.array([[0, 0, 1, 0, np.nan, 0], [1, 0, 0, 0, np.nan, 1.0]])}}
    result = PerceptualResult(("acc",), {"image": ("image",)}, {"acc": full}, without,
                              majority={"acc": np.array([1, 0, 0, 1, 1, 0.0])})
    summary = summarise(result)["acc"]
    r = resampling(result, np.array([0, 0, 1, 2, 3, 3]), "image")
    n, sums = cluster_sums(r)
    got = {k: float(v[0]) for k, v in _values(sums, np.ones((1, n)), r).items()}
    assert got["all.acc.acc"] == pytest.approx(summary["acc"])
    for key in ("p", "p_zd", "p_zdf"):
        assert got[f"all.acc.modalities.image.{key}.mean"] == pytest.approx(summary["modalities"]["image"][key]["mean"])
