"""Bootstrap intervals: hand-checkable cases and coverage of a known mean."""

import numpy as np
import pytest

from specrepro.core.uncertainty import bootstrap_ci, bootstrap_pooled_ratio_ci, bootstrap_ratio_ci


def test_constant_values_give_a_zero_width_interval():
    iv = bootstrap_ci([2.5] * 10)
    assert (iv.estimate, iv.low, iv.high, iv.n) == (2.5, 2.5, 2.5, 10)


def test_degenerate_sizes():
    assert np.isnan(bootstrap_ci([]).estimate)
    iv = bootstrap_ci([3.0])
    assert (iv.low, iv.high) == (3.0, 3.0)


def test_same_inputs_same_interval_and_seed_matters():
    x = np.random.default_rng(0).normal(size=50)
    assert bootstrap_ci(x) == bootstrap_ci(x)
    assert bootstrap_ci(x, seed=1) != bootstrap_ci(x)


def test_mean_interval_matches_normal_theory():
    x = np.random.default_rng(1).normal(10, 2, size=400)
    iv = bootstrap_ci(x)
    se = x.std(ddof=1) / np.sqrt(len(x))
    assert iv.low == pytest.approx(x.mean() - 1.96 * se, abs=0.25 * se)
    assert iv.high == pytest.approx(x.mean() + 1.96 * se, abs=0.25 * se)


def test_coverage_of_the_true_mean_is_about_95_percent():
    rng = np.random.default_rng(2)
    trials = 300
    hits = 0
    for s in range(trials):
        iv = bootstrap_ci(rng.exponential(1.0, size=60), n_boot=500, seed=s)
        hits += iv.low <= 1.0 <= iv.high
    assert 0.88 <= hits / trials <= 0.98


def test_paired_ratio_is_tighter_than_unpaired_for_correlated_requests():
    rng = np.random.default_rng(3)
    base = rng.lognormal(0, 0.5, size=100)       # request difficulty shared by both methods
    sd = 1.5 * base * rng.lognormal(0, 0.05, size=100)
    paired, unpaired = bootstrap_ratio_ci(sd, base), bootstrap_ratio_ci(sd, base, paired=False)
    assert paired.estimate == pytest.approx(sd.mean() / base.mean())
    assert paired.low <= paired.estimate <= paired.high
    assert paired.width < unpaired.width / 3


def test_pooled_ratio():
    iv = bootstrap_pooled_ratio_ci([1, 2, 3], [2, 4, 6])
    assert (iv.estimate, iv.low, iv.high) == (0.5, 0.5, 0.5)
    with pytest.raises(ValueError):
        bootstrap_pooled_ratio_ci([1], [1, 2])


# --- extensions: functions of several means, quantiles, pooled quantiles, metrics keys ------------------

from specrepro.core.uncertainty import (  # noqa: E402
    Interval, bootstrap_function_ci, bootstrap_pooled_quantiles_ci, bootstrap_quantiles_ci, envelope, interval_metrics,
    interval_of, requests_for_half_width, _indices,
)


def test_function_of_means_equals_the_paired_ratio():
    rng = np.random.default_rng(4)
    a, b = rng.lognormal(size=80), rng.lognormal(size=80)
    f = bootstrap_function_ci([a, b], lambda x, y: x / y)
    r = bootstrap_ratio_ci(a, b)
    assert (f.estimate, f.low, f.high, f.n) == pytest.approx((r.estimate, r.low, r.high, r.n))
    s = bootstrap_function_ci([a, b], lambda x, y: x / y, reduce="sum")
    p = bootstrap_pooled_ratio_ci(a, b)
    assert (s.low, s.high) == pytest.approx((p.low, p.high))
    with pytest.raises(ValueError):
        bootstrap_function_ci([a, b[:3]], lambda x, y: x / y)


def test_quantile_intervals_match_a_loop_over_the_same_resamples():
    x = np.random.default_rng(5).gamma(2.0, size=60)
    ivs = bootstrap_quantiles_ci(x, [5, 50, 95], n_boot=300)
    idx = _indices(60, 300, 42)
    for iv, q in zip(ivs, (5, 50, 95)):
        boots = [np.percentile(x[i], q) for i in idx]
        assert iv.estimate == pytest.approx(np.percentile(x, q))
        assert (iv.low, iv.high) == pytest.approx(tuple(np.nanquantile(boots, [0.025, 0.975])))


def test_pooled_quantiles_match_a_brute_force_cluster_bootstrap():
    rng = np.random.default_rng(6)
    reqs = [rng.integers(1, 8, size=rng.integers(1, 30)) for _ in range(25)]
    med, p90 = bootstrap_pooled_quantiles_ci(reqs, [0.5, 0.9], n_boot=200)
    pooled = np.concatenate(reqs)
    assert med.estimate == np.quantile(pooled, 0.5) and p90.estimate == pytest.approx(np.quantile(pooled, 0.9))
    idx = _indices(25, 200, 42)
    for iv, q in ((med, 0.5), (p90, 0.9)):
        boots = [np.quantile(np.concatenate([reqs[j] for j in i]), q) for i in idx]
        assert (iv.low, iv.high) == pytest.approx(tuple(np.nanquantile(boots, [0.025, 0.975])))


def test_envelope_of_a_maximum():
    ivs = [Interval(1.0, 0.5, 1.5, 10), Interval(1.2, 1.1, 1.3, 8), Interval(float("nan"), 0, 0, 0)]
    e = envelope(ivs, "max")
    assert (e.estimate, e.low, e.high, e.n) == (1.2, 1.1, 1.5, 8)
    m = envelope(ivs, "min")
    assert (m.estimate, m.low, m.high) == (1.0, 0.5, 1.3)


def test_interval_metrics_round_trip():
    m = interval_metrics("k.b1", Interval(2.0, 1.5, 2.5, 40), same_sample=True)
    assert m == {"k.b1": 2.0, "k.b1.ci_low": 1.5, "k.b1.ci_high": 2.5, "k.b1.n": 40, "k.b1.same_sample": 1}
    assert interval_of(m, "k.b1") == Interval(2.0, 1.5, 2.5, 40)
    # one request: no interval keys, the point decides
    assert interval_metrics("k", Interval(2.0, 2.0, 2.0, 1)) == {"k": 2.0, "k.n": 1}
    assert interval_of({"k": 3.0}, "k") == Interval(3.0, 3.0, 3.0, 0)
    assert interval_metrics("k", Interval(float("nan"), 0, 0, 0)) == {}


def test_requests_for_half_width_scales_with_the_square():
    iv = Interval(1.0, 0.9, 1.1, 100)  # half-width 0.1
    assert requests_for_half_width(iv, 0.05) == pytest.approx(400)
    assert np.isnan(requests_for_half_width(Interval(1.0, 1.0, 1.0, 1), 0.05))


def test_half_width_shrinks_as_one_over_sqrt_n():
    rng = np.random.default_rng(7)
    x = rng.normal(1.0, 0.3, size=1600)
    w_small, w_large = bootstrap_ci(x[:100]).width, bootstrap_ci(x).width
    assert w_small / w_large == pytest.approx(4.0, rel=0.2)


def test_too_few_text_names_the_counts_and_the_rows_under_the_minimum():
    from specrepro.core.uncertainty import request_range, too_few_text

    assert request_range([2, 2]) == "2" and request_range([5, 2, 3]) == "2-5"
    assert too_few_text([8, 20]) == ""
    assert too_few_text([2, 2]) == "2 requests per point: too few for a 95 % interval (at least 8)"
    assert too_few_text([2, 5, 8, float("nan")], "dataset", "rows") == (
        "2-5 requests per dataset (2 of 4 rows): too few for a 95 % interval (at least 8)")
