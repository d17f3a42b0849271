"""Round-dependent alpha_t, beta_t (vrr.calibration.round_dynamics) and VRR-Stop-t."""
import json

import numpy as np
import pytest
from conftest import CHAIN_SETTINGS
from scipy import stats

from vrr.calibration.round_dynamics import (KAPPA_GRID, crossfit_round_rates, round_rates, round_transition_counts,
                                            shrinkage_strength, shrunk_rate)
from vrr.common.paths import REPO_ROOT
from vrr.core.model import NoiseParams
from vrr.data.contract import load_setting
from vrr.data.simulate import perturbation_schedule, simulate_setting
from vrr.policies import rules as P
from vrr.policies.replay import TPM, load_calibration, replay


def test_transition_counts_and_shrinkage_closed_form():
    y = np.array([[0, 1, 1], [1, 0, 0], [0, 0, 1], [1, 1, 0]])
    fixed, invalid, broken, valid = round_transition_counts(y)
    assert fixed.tolist() == [1, 1] and invalid.tolist() == [2, 2]
    assert broken.tolist() == [1, 1] and valid.tolist() == [2, 2]
    # posterior mean of Beta(kappa c, kappa (1 - c)) after k of n
    assert shrunk_rate(3, 10, 0.5, 4.0) == pytest.approx((3 + 2) / 14)
    assert shrunk_rate(3, 10, 0.5, 1e12) == pytest.approx(0.5)
    assert float(shrunk_rate(0, 0, 0.2, 5.0)) == pytest.approx(0.2)   # no pairs: the pooled rate


def test_empirical_bayes_pools_alike_rounds_and_separates_a_switch():
    rng = np.random.default_rng(3)
    n = np.full(6, 80)
    alike = rng.binomial(n, 0.3)
    assert shrinkage_strength(alike, n, alike[0] / 80) >= 100
    switched = rng.binomial(n, [0.6, 0.6, 0.02, 0.02, 0.02, 0.02])
    kappa = shrinkage_strength(switched, n, switched[0] / 80)
    assert kappa <= 10
    # it is the maximizer of the beta-binomial marginal likelihood over the grid
    c = switched[0] / 80
    ll = [stats.betabinom.logpmf(switched, n, k * c, k * (1 - c)).sum() for k in KAPPA_GRID]
    assert kappa == KAPPA_GRID[int(np.argmax(ll))]


def test_round_rates_recover_a_simulated_schedule():
    truth = NoiseParams(rho0=0.3, rho1=0.2, alpha=0.6, beta=0.03, pi=0.45)
    a_t, b_t = perturbation_schedule(6, (0.6, 0.03), (0.02, 0.45), 3)
    st = simulate_setting(truth, n=300, k_max=6, seed=11, alpha_t=a_t, beta_t=b_t)
    fit = round_rates(st.y, 0.6, 0.03, max_pairs=None)
    # within 3 binomial standard errors of the true schedule, round by round (kappa is small here)
    se_a = np.sqrt(a_t * (1 - a_t) / np.maximum(fit.n_invalid_before, 1))
    se_b = np.sqrt(b_t * (1 - b_t) / np.maximum(fit.n_valid_before, 1))
    assert np.all(np.abs(fit.alpha - a_t) <= 3 * se_a + 0.02)
    assert np.all(np.abs(fit.beta - b_t) <= 3 * se_b + 0.02)
    assert fit.alpha[1] > 0.4 and fit.alpha[2:].max() < 0.15      # the switch is found, not pooled away
    stationary = simulate_setting(truth, n=300, k_max=6, seed=12)
    fit = round_rates(stationary.y, 0.6, 0.03, max_pairs=None)
    assert fit.kappa_alpha >= 100


def test_crossfit_rates_never_see_their_own_fold(calibration):
    path = calibration("sim_nonstationary")
    cf, config = load_calibration(path)
    st = load_setting(REPO_ROOT / json.loads(path.read_text())["arrays_path"])
    alpha, beta, _ = crossfit_round_rates(st.y, cf, max_pairs=config.max_pairs, seed=config.seed)
    y2 = st.y.copy()
    y2[cf.folds == 0] = 1 - y2[cf.folds == 0]          # scramble fold 0's labels
    alpha2, beta2, _ = crossfit_round_rates(y2, cf, max_pairs=config.max_pairs, seed=config.seed)
    rows = cf.folds == 0
    np.testing.assert_array_equal(alpha2[rows], alpha[rows])
    np.testing.assert_array_equal(beta2[rows], beta[rows])
    assert not np.array_equal(alpha2[~rows], alpha[~rows])


def test_constant_schedule_is_vrr_stop():
    rng = np.random.default_rng(0)
    S = rng.integers(0, 9, (50, 6))
    p = dict(rho0=0.3, rho1=0.2, pi=0.6)
    a, b = np.full((50, 6), 0.35), np.full((50, 6), 0.4)
    assert P.vrr_stop_t(S, 8, alpha_t=a, beta_t=b, **p).committed.tolist() == \
        P.vrr_stop(S, 8, alpha=0.35, beta=0.4, **p).committed.tolist()
    with pytest.raises(ValueError, match="alpha_t"):
        P.vrr_stop_t(S, 8, alpha_t=0.3, beta_t=b, **p)


def _validity(path):
    cf, config = load_calibration(path)
    st = load_setting(REPO_ROOT / json.loads(path.read_text())["arrays_path"])
    res = replay(st, config, policies=("VRR-Stop", "VRR-Stop-t", TPM, "Hindsight best"), calibration=cf)
    return {k: float(v.mean()) for k, v in res.validity.items()}


def test_nonstationary_diagnostic_closes_half_the_gap_and_no_setting_loses(calibration):
    """On the non-stationary diagnostic VRR-Stop-t closes at least half of the gap between
    VRR-Stop and hindsight, and it loses no more than 1 pp against VRR-Stop on any committed setting."""
    v = _validity(calibration("sim_nonstationary"))
    assert v["VRR-Stop-t"] - v["VRR-Stop"] >= 0.5 * (v["Hindsight best"] - v["VRR-Stop"]) - 1e-12
    for name in CHAIN_SETTINGS:
        v = _validity(calibration(name))
        assert v["VRR-Stop-t"] >= v["VRR-Stop"] - 0.01, name
