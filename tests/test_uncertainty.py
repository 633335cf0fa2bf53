"""Bootstrap intervals: hand-checkable cases and coverage of a known mean."""

import numpy as np
import pytest

from specrepro.uncertainty import bootstrap_ci, bootstrap_pooled_ratio_ci, bootstrap_ratio_ci


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
