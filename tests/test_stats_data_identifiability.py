"""Statistics against scipy/statsmodels, the data contract, and the identifiability tools."""
import json

import numpy as np
import pytest
from scipy import stats as sps
from statsmodels.stats.contingency_tables import mcnemar

from vrr.calibration import calibrate
from vrr.data import DataContractError, Setting, load_setting, save_setting
from vrr.calibration.identifiability import (error_radius, flip_risk_grid, labeled_j_diagnostic, parameter_intervals,
                                 sign_identifiable)
from vrr.core.model import NoiseParams
from vrr.data.simulate import simulate_setting
from vrr.stats.inference import bootstrap_ci, bootstrap_means, mcnemar_exact, paired_bootstrap, percentile_interval, policy_table

A = (np.random.default_rng(5).random(400) < 0.72).astype(int)
B = np.where(np.random.default_rng(6).random(400) < 0.2, 1 - A, A)


def test_mcnemar_matches_statsmodels_and_hand_table():
    table = [[int(np.sum((A == 1) & (B == 1))), int(np.sum((A == 1) & (B == 0)))],
             [int(np.sum((A == 0) & (B == 1))), int(np.sum((A == 0) & (B == 0)))]]
    assert mcnemar_exact(A, B) == pytest.approx(mcnemar(table, exact=True).pvalue)
    # exact McNemar is the two-sided binomial test on discordant pairs
    b, c = table[0][1], table[1][0]
    assert mcnemar_exact(A, B) == pytest.approx(sps.binomtest(b, b + c, 0.5).pvalue)


def test_vectorized_bootstrap_agrees_with_scipy():
    ref = sps.bootstrap((A,), np.mean, n_resamples=10_000, method="percentile",
                        rng=np.random.default_rng(0)).confidence_interval
    lo, hi = percentile_interval(bootstrap_means(A, 10_000, seed=1))
    assert lo[0] == pytest.approx(ref.low, abs=0.01) and hi[0] == pytest.approx(ref.high, abs=0.01)
    ci = bootstrap_ci(A, seed=0)
    assert (ci.low, ci.high) == (pytest.approx(ref.low), pytest.approx(ref.high))


def test_paired_bootstrap_agrees_between_implementations():
    ref = paired_bootstrap(A, B, seed=0)
    rows = policy_table({"a": A, "b": B}, {"a": np.zeros(400), "b": np.ones(400)}, reference="b", seed=3)
    assert rows[0]["dV"] == pytest.approx(ref.estimate)
    assert rows[0]["dV_low"] == pytest.approx(ref.low, abs=0.01)
    assert rows[0]["dV_high"] == pytest.approx(ref.high, abs=0.01)
    assert rows[0]["mcnemar_p"] == pytest.approx(mcnemar_exact(A, B))
    assert rows[1]["mean_K"] == 1.0


def test_bootstrap_is_seeded():
    assert np.array_equal(bootstrap_means(A, 100, seed=4), bootstrap_means(A, 100, seed=4))
    assert not np.array_equal(bootstrap_means(A, 100, seed=4), bootstrap_means(A, 100, seed=5))


def make_setting(**overrides):
    base = dict(S=np.array([[1, 8], [0, 3]]), y=np.array([[0, 1], [1, 1]]), M=8,
                probe_S=np.array([3, 16]), probe_M=16, probe_y=np.array([0, 1]), meta={"setting": "t"})
    base.update(overrides)
    return Setting(**base)


def test_data_round_trip(tmp_path):
    path = save_setting(tmp_path / "a" / "arrays.npz", make_setting())
    back = load_setting(path)
    assert np.array_equal(back.S, [[1, 8], [0, 3]]) and back.M == 8 and back.probe_M == 16
    assert back.meta == {"setting": "t"} and back.k_max == 1
    assert not list(path.parent.glob("*.tmp"))


@pytest.mark.parametrize("overrides,field,message", [
    (dict(S=np.array([[1, 9], [0, 3]])), "S", "0..8"),
    (dict(S=np.array([[1.0, np.nan], [0, 3]])), "S", "NaN"),
    (dict(y=np.array([[0, 1]])), "y", "shape"),
    (dict(y=None), "y", "missing labels"),
    (dict(y=np.array([[0, 2], [1, 1]])), "y", "0..1"),
    (dict(probe_M=None), "probe_M", "required"),
    (dict(M=0), "M", "positive"),
    (dict(probe_S=np.array([3, 17])), "probe_S", "0..16"),
])
def test_data_contract_rejects_bad_input(overrides, field, message):
    with pytest.raises(DataContractError, match=message) as err:
        make_setting(**overrides)
    assert err.value.field == field


def test_load_rejects_unknown_and_missing_keys_naming_the_file(tmp_path):
    bad = tmp_path / "bad.npz"
    np.savez(bad, S=np.ones((2, 2), int), y=np.ones((2, 2), int), M=np.array(8), meta=np.array("{}"), extra=np.ones(1))
    with pytest.raises(DataContractError, match=r"bad\.npz.*'extra'.*unknown key"):
        load_setting(bad)
    missing = tmp_path / "missing.npz"
    np.savez(missing, S=np.ones((2, 2), int), M=np.array(8), meta=np.array("{}"))
    with pytest.raises(DataContractError, match=r"missing\.npz.*'y'.*missing"):
        load_setting(missing)
    notjson = tmp_path / "nj.npz"
    np.savez(notjson, S=np.ones((2, 2), int), y=np.ones((2, 2), int), M=np.array(8), meta=np.array("{oops"))
    with pytest.raises(DataContractError, match="'meta'"):
        load_setting(notjson)
    with pytest.raises(FileNotFoundError, match="nope.npz"):
        load_setting(tmp_path / "nope.npz")


def test_simulation_is_seeded_and_matches_parameters():
    truth = NoiseParams(0.3, 0.2, 0.25, 0.5, 0.6)
    a = simulate_setting(truth, n=20000, k_max=2, seed=9, probe_n=50)
    b = simulate_setting(truth, n=20000, k_max=2, seed=9, probe_n=50)
    assert np.array_equal(a.S, b.S) and np.array_equal(a.probe_S, b.probe_S)
    assert a.y[:, 0].mean() == pytest.approx(0.6, abs=0.015)
    valid = a.y.astype(bool)
    assert a.S[valid].mean() / 8 == pytest.approx(0.8, abs=0.01)
    assert a.S[~valid].mean() / 8 == pytest.approx(0.3, abs=0.01)
    fixed = (a.y[:, 0] == 0)
    assert a.y[fixed, 1].mean() == pytest.approx(0.25, abs=0.02)
    assert json.loads(json.dumps(a.meta))["true_params"]["beta"] == 0.5
    assert a.probe_M == 16 and a.probe_S.max() <= 16


def test_error_radius_zero_for_degenerate_intervals_and_grows_with_width():
    truth = NoiseParams(0.3, 0.2, 0.3, 0.6, 0.7)
    s = simulate_setting(truth, n=100, seed=0)
    point = truth.as_dict()
    g0, r0 = error_radius(s.S, 8, point, {k: (v, v) for k, v in point.items()})
    assert np.allclose(r0, 0)
    narrow = {k: (max(v - 0.01, 0), min(v + 0.01, 1)) for k, v in point.items()}
    wide = {k: (max(v - 0.1, 0), min(v + 0.1, 1)) for k, v in point.items()}
    _, rn = error_radius(s.S, 8, point, narrow)
    _, rw = error_radius(s.S, 8, point, wide)
    assert np.all(rw >= rn - 1e-12) and rw.mean() > rn.mean() > 0
    ident = sign_identifiable(g0, rw)
    assert ident.dtype == bool and 0 < ident.mean() < 1


def test_error_radius_covers_true_gain_from_calibration():
    """Prop. 1 premise: with the true gain inside the interval box, |G-hat - G| <= B_k."""
    truth = NoiseParams(0.3, 0.2, 0.3, 0.6, 0.7)
    cal_set = simulate_setting(truth, n=300, k_max=1, seed=1)
    cal = calibrate(cal_set.S, cal_set.y, 8, seed=1)
    iv = parameter_intervals(cal, eta=0.05)
    assert all(lo <= getattr(truth, k) <= hi for k, (lo, hi) in iv.items())
    s = simulate_setting(truth, n=200, seed=2)
    g_hat, radius = error_radius(s.S, 8, cal.params.as_dict(), iv)
    g_true, _ = error_radius(s.S, 8, truth.as_dict(), {k: (v, v) for k, v in truth.as_dict().items()})
    assert np.mean(np.abs(g_hat - g_true) <= radius + 1e-12) > 0.95


def test_labeled_j_diagnostic_separates_good_and_useless_judges():
    good = simulate_setting(NoiseParams(0.3, 0.2, 0.3, 0.6, 0.6), n=10, seed=0, probe_n=300)
    diag = labeled_j_diagnostic(good.probe_S, good.probe_y, 16)
    assert diag.j_hat == pytest.approx(0.5, abs=0.06) and diag.p_value < 1e-10
    assert diag.ci_low < diag.j_hat < diag.ci_high
    useless = simulate_setting(NoiseParams(0.5, 0.5, 0.3, 0.6, 0.6), n=10, seed=0, probe_n=300)
    d0 = labeled_j_diagnostic(useless.probe_S, useless.probe_y, 16)
    assert abs(d0.j_hat) < 0.06 and d0.ci_low < 0 < d0.ci_high
    with pytest.raises(ValueError, match="per class"):
        labeled_j_diagnostic([1, 2, 3], [1, 1, 1], 16)


def test_flip_risk_concentrates_at_low_j_and_low_margin():
    """RQ3 shape: flips in the (J <= 0.15, Delta <= 0.1) corner far exceed those where J >= 0.4 or
    Delta >= 0.3 (the paper reports 0.183 vs 0.014)."""
    grid = flip_risk_grid([0.05, 0.15, 0.6], [0.0, 0.1, 0.3, 1.0], n_reps=8, n_eval=300, seed=0)
    low_j = grid.j_values <= 0.15
    corner = np.ix_(low_j, [True, False, False])
    safe = np.zeros_like(grid.flips, dtype=bool)
    safe[~low_j, :] = True
    safe[:, 2] = True
    corner_rate = grid.flips[corner].sum() / grid.decisions[corner].sum()
    safe_rate = grid.flips[safe].sum() / grid.decisions[safe].sum()
    assert corner_rate > 0.15
    assert corner_rate > 4 * safe_rate
    assert grid.decisions.sum() > 1000
