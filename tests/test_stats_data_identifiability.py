"""Statistics against hand-computed values and properties, the data contract, and the identifiability tools."""
import json

import numpy as np
import pytest

from vrr.calibration import calibrate
from vrr.data import DataContractError, Setting, load_setting, save_setting
from vrr.calibration.identifiability import (bootstrap_intervals, error_radius, flip_risk_grid, labeled_j_diagnostic, parameter_intervals,
                                 sign_identifiable)
from vrr.core.model import NoiseParams
from vrr.data.simulate import simulate_setting
from vrr.stats.analysis import initial_vote_counts, trajectory_shape
from vrr.stats.inference import bootstrap_ci, bootstrap_means, mcnemar_exact, paired_bootstrap, policy_table

A = (np.random.default_rng(5).random(400) < 0.72).astype(int)
B = np.where(np.random.default_rng(6).random(400) < 0.2, 1 - A, A)


def _paired(n_both, n_a_only, n_b_only, n_neither):
    a = np.array([1] * n_both + [1] * n_a_only + [0] * n_b_only + [0] * n_neither)
    b = np.array([1] * n_both + [0] * n_a_only + [1] * n_b_only + [0] * n_neither)
    return a, b


@pytest.mark.parametrize("b_only, c_only, expected", [
    (1, 9, 2 * (1 + 10) / 2 ** 10),                  # 2 * P(X <= 1), X ~ Bin(10, 1/2)
    (3, 12, 2 * (1 + 15 + 105 + 455) / 2 ** 15),     # 2 * P(X <= 3), X ~ Bin(15, 1/2)
    (5, 5, 1.0), (0, 0, 1.0), (0, 4, 2 / 2 ** 4),
])
def test_mcnemar_against_the_binomial_formula(b_only, c_only, expected):
    a, b = _paired(20, b_only, c_only, 7)             # concordant pairs must not matter
    assert mcnemar_exact(a, b) == pytest.approx(expected, rel=1e-12)
    assert mcnemar_exact(b, a) == pytest.approx(expected, rel=1e-12)


def test_mcnemar_rejects_unpaired_samples():
    with pytest.raises(ValueError, match="paired"):
        mcnemar_exact(np.ones(3), np.ones(4))


def test_bootstrap_means_equal_a_brute_force_loop_over_the_same_resampled_instances():
    """Each draw is the mean of the N instances the multinomial draw picks: rebuilt here instance by instance
    from the same seeded draw over the distinct outcome patterns (vrr.stats.inference's module docstring)."""
    values = np.stack([A, B]).astype(float)
    patterns, counts = np.unique(values.T, axis=0, return_counts=True)
    weights = np.random.default_rng(11).multinomial(A.size, counts / A.size, size=50)
    brute = np.empty((2, 50))
    for r in range(50):
        resampled = np.concatenate([np.repeat(patterns[u][None, :], weights[r, u], axis=0)
                                    for u in range(len(counts))])
        assert resampled.shape == (A.size, 2)
        brute[:, r] = resampled.mean(axis=0)
    np.testing.assert_allclose(bootstrap_means(values, 50, seed=11), brute, rtol=0, atol=1e-12)


def test_bootstrap_ci_covers_the_true_mean_at_about_the_nominal_rate():
    """Percentile CIs of a Bernoulli(0.3) mean from n=200: coverage near 95 % over 300 samples."""
    rng = np.random.default_rng(2)
    hits = 0
    for r in range(300):
        ci = bootstrap_ci((rng.random(200) < 0.3).astype(float), n_resamples=400, seed=r)
        hits += ci.low <= 0.3 <= ci.high
        assert ci.low <= ci.estimate <= ci.high
    assert 0.90 <= hits / 300 <= 0.985


def test_bootstrap_needs_at_least_two_instances():
    with pytest.raises(ValueError, match="at least 2"):
        bootstrap_ci([1.0])
    with pytest.raises(ValueError, match="at least 2"):
        paired_bootstrap([1.0], [0.0])
    with pytest.raises(ValueError, match="at least 2"):
        bootstrap_means(np.ones((3, 1)), 10)


def test_policy_table_k_is_the_mean_committed_round_and_repairs_run_its_own_column():
    v = {"stop": A, "guard": B}
    committed = {"stop": np.array([0, 2] * 200), "guard": np.array([1, 0, 0, 3] * 100)}
    used = {"stop": committed["stop"], "guard": np.full(400, 5)}
    rows = {r["policy"]: r for r in policy_table(v, committed, used, reference="stop", n_resamples=200)}
    assert rows["stop"]["mean_K"] == rows["stop"]["repairs_run"] == 1.0
    assert rows["guard"]["mean_K"] == 1.0 and rows["guard"]["repairs_run"] == 5.0
    assert rows["stop"]["dV"] == 0 and rows["stop"]["dV_low"] == rows["stop"]["dV_high"] == 0
    assert rows["guard"]["dV"] == pytest.approx(B.mean() - A.mean())


def test_paired_bootstrap_ci_contains_the_difference_and_shrinks_with_n():
    wide = paired_bootstrap(A[:100], B[:100], seed=0)
    narrow = paired_bootstrap(A, B, seed=0)
    assert wide.low <= wide.estimate <= wide.high and narrow.low <= narrow.estimate <= narrow.high
    assert (narrow.high - narrow.low) < 0.75 * (wide.high - wide.low)   # ~ 1/sqrt(4)


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


def test_initial_vote_counts_in_closed_form():
    """Three valid plans with 0, 0, 4 of 4 accepts (rho1 = 2/3) and one invalid plan with 1 (rho0 = 1/4)."""
    from math import comb
    s = Setting(S=np.array([[0, 1], [0, 2], [4, 3], [1, 0]]), y=np.array([[1, 1], [1, 0], [1, 1], [0, 0]]), M=4)
    votes = initial_vote_counts(s)
    assert votes["valid"]["observed"] == [2, 0, 0, 0, 1] and votes["invalid"]["observed"] == [0, 1, 0, 0, 0]
    assert votes["valid"]["binomial"] == pytest.approx([3 * comb(4, k) * (1 / 3) ** k * (2 / 3) ** (4 - k)
                                                        for k in range(5)])
    assert votes["invalid"]["binomial"] == pytest.approx([comb(4, k) * 0.25 ** k * 0.75 ** (4 - k) for k in range(5)])


def test_initial_vote_counts_match_independent_votes_and_not_correlated_ones():
    """Eq. 3's votes fill the binomial's counts; votes that copy one draw per plan pile up at 0 and M."""
    sim = simulate_setting(NoiseParams(0.3, 0.2, 0.25, 0.5, 0.6), n=20000, k_max=1, seed=3)
    votes = initial_vote_counts(sim)
    for name in ("valid", "invalid"):
        assert np.array(votes[name]["observed"]) / votes[name]["n"] == pytest.approx(
            np.array(votes[name]["binomial"]) / votes[name]["n"], abs=0.01)
    one_draw = np.random.default_rng(3).random(sim.y.shape) < np.where(sim.y == 1, 0.8, 0.3)
    copied = Setting(S=sim.M * one_draw, y=sim.y, M=sim.M)   # every vote on a plan is the plan's one draw
    valid = initial_vote_counts(copied)["valid"]
    assert valid["observed"][0] > 10 * valid["binomial"][0] and valid["observed"][-1] > 2 * valid["binomial"][-1]


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


def test_bootstrap_box_covers_the_truth_at_moderate_j():
    """Prop. 1 presupposes a box that holds the true parameters with probability >= 1 - eta."""
    truth = NoiseParams(0.36, 0.18, 0.3, 0.3, 0.6)   # J = 0.46
    hits = 0
    for rep in range(20):
        s = simulate_setting(truth, n=300, k_max=1, seed=500 + rep)
        box = bootstrap_intervals(s.S, s.y, 8, eta=0.05, n_boot=150, seed=rep)
        hits += all(box[k][0] <= getattr(truth, k) <= box[k][1] for k in truth.as_dict())
    assert hits >= 17


def test_interior_search_finds_what_the_corners_miss():
    """G is not monotone in the parameters: on a bootstrap box the grid radius exceeds the corners-only one."""
    truth = NoiseParams(0.62, 0.18, 0.3, 0.3, 0.6)   # J = 0.2
    calib = simulate_setting(truth, n=100, k_max=1, seed=1)
    box = bootstrap_intervals(calib.S, calib.y, 8, n_boot=100, seed=1)
    s = simulate_setting(truth, n=200, k_max=5, seed=51)
    point = {k: (lo + hi) / 2 for k, (lo, hi) in box.items()}
    _, corners = error_radius(s.S, 8, point, box, grid=2)
    _, full = error_radius(s.S, 8, point, box, grid=5)
    assert (full >= corners - 1e-12).all()
    assert (full - corners).max() > 0.005


def _two_rounds(n_fixed, n_broken, n_other=40):
    """[n, 2] validity with the given discordant pairs between round 0 and round 1."""
    before, after = _paired(n_other // 2, n_broken, n_fixed, n_other // 2)
    return np.column_stack([before, after])


@pytest.mark.parametrize("n_fixed, n_broken, shape", [
    (9, 1, "monotone up"),       # exact McNemar p = 2 * 11 / 2**10 = 0.021
    (1, 9, "monotone down"),
    (3, 0, "flat"),              # p = 2 / 2**3 = 0.25: three fixes do not resolve a change
    (0, 0, "flat"),
])
def test_trajectory_shape_tests_the_net_change(n_fixed, n_broken, shape):
    assert trajectory_shape(_two_rounds(n_fixed, n_broken)) == (shape, None)


def _peak(n_up, n_down, rounds=4):
    """[n, rounds]: round 1 gains n_up plans and loses n_down against round 0, and every later round
    returns to round 0, so round 1 is the argmax with the same discordant pairs against both ends."""
    y0, y1 = _paired(20, n_down, n_up, 20)
    return np.column_stack([y0, y1] + [y0] * (rounds - 2))


def test_trajectory_shape_interior_peak_is_bonferroni_tested_over_interior_rounds():
    # 9 up, 1 down: p = 2 * 11 / 2**10 = 0.021 against each end
    assert trajectory_shape(_peak(9, 1, rounds=3)) == ("interior peak (K*=1)", 1)   # level 0.05 / 1
    assert trajectory_shape(_peak(9, 1, rounds=4)) == ("interior peak (K*=1)", 1)   # level 0.05 / 2 = 0.025
    # 10 up, 2 down: p = 2 * (1 + 12 + 66) / 2**12 = 0.039, resolved at 0.05 but not at 0.05 / 2
    assert trajectory_shape(_peak(10, 2, rounds=3))[1] == 1
    assert trajectory_shape(_peak(10, 2, rounds=4)) == ("flat", None)


def test_trajectory_shape_rejects_bad_input():
    with pytest.raises(ValueError, match="rounds"):
        trajectory_shape(np.ones(5))
    with pytest.raises(ValueError, match="level"):
        trajectory_shape(np.ones((5, 3)), level=1.5)


def test_trajectory_shape_is_flat_for_a_stationary_chain_at_its_fixed_point():
    """alpha = beta and pi = alpha / (alpha + beta): the expected validity is the same in every round, so a
    label other than flat is a false positive of level-0.05 tests (at most ~0.05 + 0.05 per window)."""
    labels = [trajectory_shape(simulate_setting(NoiseParams(0.3, 0.2, 0.1, 0.1, 0.5), n=200, seed=s).y)[0]
              for s in range(40)]
    assert labels.count("flat") >= 32        # P(more than 8 of 40 false positives | rate 0.1) < 0.05


@pytest.mark.parametrize("setting, shape", [
    ("sim_bfcl_multi", "flat"),                     # pi near b* (its YAML): the paper's flat row
    ("sim_qwen3b_favorable", "monotone up"),
    ("sim_qwen3b_pmstress", "monotone down"),
    ("sim_nonstationary", "interior peak (K*=2)"),  # the paper's loop-dynamics figure: K* = 2
])
def test_trajectory_shape_of_the_paper_settings(setting, shape):
    from vrr.data.simulate import simulate_from_config
    from vrr.settings import load_config
    assert trajectory_shape(simulate_from_config(load_config(setting)).y)[0] == shape
