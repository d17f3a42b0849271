"""The bootstraps on counts (vrr.stats.inference): the same distribution as resampling instance indices."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from scipy import stats

from vrr.stats.inference import bootstrap_means, paired_bootstrap, percentile_interval


def test_paired_bootstrap_matches_scipy_within_monte_carlo_error():
    rng = np.random.default_rng(1)
    a = (rng.random(3000) < 0.6).astype(float)
    b = np.where(rng.random(3000) < 0.8, a, 1 - a)
    ours = paired_bootstrap(a, b, n_resamples=20000, seed=3)
    ref = stats.bootstrap((a, b), lambda x, z, axis=-1: x.mean(axis) - z.mean(axis), paired=True,
                          n_resamples=20000, method="percentile", vectorized=True, rng=np.random.default_rng(4))
    se = np.sqrt(np.var(a - b) / a.size)
    assert ours.estimate == pytest.approx(a.mean() - b.mean())
    assert ours.low == pytest.approx(ref.confidence_interval.low, abs=0.1 * se)
    assert ours.high == pytest.approx(ref.confidence_interval.high, abs=0.1 * se)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1), st.integers(0, 1), st.integers(0, 1)), min_size=2, max_size=60),
       st.integers(0, 99))
def test_bootstrap_means_are_means_of_resampled_instances(rows, seed):
    """Every draw is the mean of N instances drawn from the sample (its pattern counts sum to N), so a draw lies
    in [min, max] of each row and its differences are paired: a row equal to another gives equal draws."""
    m = np.array(rows, dtype=float).T            # [3, N]
    m = np.vstack([m, m[0]])                      # a copy of row 0
    d = bootstrap_means(m, n_resamples=200, seed=seed)
    assert d.shape == (4, 200)
    assert np.array_equal(d[0], d[3])
    n = m.shape[1]
    assert np.all(np.isclose(d * n, np.round(d * n)))   # integer counts of valid plans over N
    assert np.all(d >= m.min(axis=1, keepdims=True) - 1e-12) and np.all(d <= m.max(axis=1, keepdims=True) + 1e-12)


def test_bootstrap_means_are_seeded_and_cover_the_mean():
    rng = np.random.default_rng(0)
    m = (rng.random((5, 800)) < 0.4).astype(float)
    d1, d2 = bootstrap_means(m, 2000, seed=7), bootstrap_means(m, 2000, seed=7)
    assert np.array_equal(d1, d2)
    lo, hi = percentile_interval(d1)
    assert np.all(lo < m.mean(axis=1)) and np.all(m.mean(axis=1) < hi)
