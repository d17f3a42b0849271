"""Calibration estimators (App. A, App. I) and cross-fitting (App. B) on data with known parameters."""
import numpy as np
import pytest
from scipy import stats

from vrr.calibration import (beta_binomial_em, binomial_mixture_em, binomial_mixture_em_many, calibrate, crossfit, crossfit_folds, defined_rate,
                             fit_vote_noise, labeled_mle, method_of_moments, mixture_loglik, transition_rates)
from vrr.policies import vrr_stop
from vrr.core.model import NoiseParams
from vrr.data.simulate import simulate_setting


def draw_votes(n, M, pi, rho0, rho1, seed):
    rng = np.random.default_rng(seed)
    y = rng.random(n) < pi
    return np.where(y, rng.binomial(M, 1 - rho1, n), rng.binomial(M, rho0, n)), y


@pytest.mark.parametrize("rho0,rho1", [(0.364, 0.177), (0.30, 0.30), (0.109, 0.118)])  # J = 0.46, 0.40, 0.77
def test_em_recovers_noise_rates_when_j_at_least_0_3(rho0, rho1):
    """Stated tolerance: N = 300, M = 8, pi = 0.7, over 20 seeds the median absolute error of
    rho0 and rho1 is below 0.05 and 90% of seeds are within 0.12."""
    errors = []
    for seed in range(20):
        S, _ = draw_votes(300, 8, 0.7, rho0, rho1, seed)
        fit = binomial_mixture_em(S, 8, seed=seed)
        errors.append(max(abs(fit.rho0 - rho0), abs(fit.rho1 - rho1)))
    errors = np.array(errors)
    assert np.median(errors) < 0.05
    assert np.mean(errors < 0.12) >= 0.9


def test_em_keeps_best_loglik_and_label_convention():
    S, _ = draw_votes(500, 8, 0.3, 0.2, 0.1, 7)
    fit = binomial_mixture_em(S, 8, n_restarts=12, seed=1)
    assert 1 - fit.rho1 > fit.rho0                       # valid component accepts more
    assert fit.loglik == pytest.approx(mixture_loglik(S, 8, fit.weight_valid, fit.rho0, fit.rho1), rel=1e-9)
    # No single restart beats the kept solution.
    one = binomial_mixture_em(S, 8, n_restarts=1, seed=99)
    assert fit.loglik >= one.loglik - 1e-9
    assert fit.weight_valid == pytest.approx(0.3, abs=0.08)


def test_em_degenerates_as_j_goes_to_zero():
    """App. E mechanism: as J -> 0 the mixture likelihood flattens. The likelihood-ratio gain of
    two components over one binomial vanishes, and the rho estimates scatter across samples."""
    def lr_and_fit(rho0, rho1, seed):
        S, _ = draw_votes(300, 8, 0.8, rho0, rho1, seed)
        fit = binomial_mixture_em(S, 8, seed=seed)
        p = S.mean() / 8
        one = np.sum(stats.binom.logpmf(S, 8, p))
        return 2 * (fit.loglik - one), fit
    lr_informative = [lr_and_fit(0.364, 0.177, s)[0] for s in range(10)]
    lr_flat = [lr_and_fit(0.358, 0.609, s)[0] for s in range(10)]
    assert min(lr_informative) > 20
    assert np.median(lr_flat) < 6                          # no evidence for two components
    weights = [lr_and_fit(0.358, 0.609, s)[1].weight_valid for s in range(10)]
    assert np.ptp(weights) > 0.3                          # the mixture weight is not pinned down


@pytest.mark.parametrize("judge_concentration", [1.0, None])
def test_em_underestimates_rho1_only_under_heterogeneous_low_j_judge(judge_concentration):
    """The paper's Llama failure (rho1-hat << 0.609) appears when judge leniency varies by instance
    (App. E); with homogeneous binomial votes at the same J = 0.03 the median estimate is not biased low."""
    truth = NoiseParams(0.358, 0.609, 0.051, 0.938, 0.803)
    kw = {} if judge_concentration is None else {"judge_concentration": judge_concentration}
    rho1_hats = []
    for seed in range(10):
        s = simulate_setting(truth, n=300, k_max=1, seed=seed, **kw)
        rho1_hats.append(binomial_mixture_em(s.S[:, 0], 8, seed=seed).rho1)
    if judge_concentration is None:
        assert abs(np.median(rho1_hats) - truth.rho1) < 0.05
    else:
        assert np.median(rho1_hats) < 0.35


def test_method_of_moments_recovers_parameters_on_large_sample():
    S, _ = draw_votes(200_000, 8, 0.6, 0.25, 0.15, 0)
    mom = method_of_moments(S, 8)
    assert mom.rho0 == pytest.approx(0.25, abs=0.02)
    assert mom.rho1 == pytest.approx(0.15, abs=0.02)
    assert mom.weight_valid == pytest.approx(0.6, abs=0.03)
    with pytest.raises(ValueError, match="M >= 3"):
        method_of_moments(S % 3, 2)


def test_labeled_mle_is_class_frequency():
    S = np.array([8, 6, 2, 0, 4])
    y = np.array([1, 1, 0, 0, 1])
    fit = labeled_mle(S, y, 8)
    assert fit.rho1 == pytest.approx(1 - 18 / 24)
    assert fit.rho0 == pytest.approx(2 / 16)


def test_beta_binomial_em_recovers_class_means():
    rng = np.random.default_rng(0)
    n = 3000
    y = rng.random(n) < 0.6
    mean = np.where(y, 0.85, 0.3)
    phi = 0.1
    scale = 1 / phi - 1
    S = rng.binomial(8, rng.beta(mean * scale, (1 - mean) * scale))
    fit = beta_binomial_em(S, 8, seed=0)
    assert fit.rho1 == pytest.approx(0.15, abs=0.08)
    assert fit.rho0 == pytest.approx(0.30, abs=0.08)


def test_transition_rates_counts_and_cap():
    yb = np.array([0, 0, 0, 1, 1, 1, 1, 0])
    ya = np.array([1, 0, 1, 0, 1, 1, 0, 0])
    t = transition_rates(yb, ya, max_pairs=None)
    assert (t.alpha, t.beta) == (pytest.approx(2 / 4), pytest.approx(2 / 4))
    assert (t.n_fixed, t.n_invalid_before, t.n_broken, t.n_valid_before) == (2, 4, 2, 4)
    big = transition_rates(np.ones(1000), np.zeros(1000), max_pairs=300)
    assert big.n_valid_before == 300


def test_calibrate_recovers_all_five_parameters():
    truth = NoiseParams(0.3, 0.15, 0.35, 0.6, 0.7)
    s = simulate_setting(truth, n=3000, k_max=1, seed=4)
    cal = calibrate(s.S, s.y, 8, max_pairs=None)
    for name in ("rho0", "rho1", "alpha", "beta", "pi"):
        assert getattr(cal.params, name) == pytest.approx(getattr(truth, name), abs=0.04), name


def test_crossfit_never_uses_own_fold():
    truth = NoiseParams(0.3, 0.2, 0.3, 0.5, 0.7)
    s = simulate_setting(truth, n=200, k_max=2, seed=0)
    folds = crossfit_folds(200, 5, seed=3)
    assert sorted(np.bincount(folds).tolist()) == [40] * 5
    cf = crossfit(s.S, s.y, 8, seed=3)
    assert np.array_equal(cf.folds, folds)
    # Changing every label in fold 0 must not change fold 0's parameters, only the others'.
    y2 = s.y.copy()
    y2[folds == 0] = 1 - y2[folds == 0]
    cf2 = crossfit(s.S, y2, 8, seed=3)
    in0 = folds == 0
    for name in ("alpha", "beta", "pi"):
        assert np.array_equal(getattr(cf.fits[0].params, name), getattr(cf2.fits[0].params, name))
        assert np.allclose(getattr(cf, name)[in0], getattr(cf2, name)[in0])
        assert not np.allclose(getattr(cf, name)[~in0], getattr(cf2, name)[~in0])


def test_crossfit_labeled_estimators_do_not_leak_own_fold_labels():
    s = simulate_setting(NoiseParams(0.3, 0.2, 0.3, 0.5, 0.7), n=200, k_max=2, seed=1)
    folds = crossfit_folds(200, 5, seed=3)
    y2 = s.y.copy()
    y2[folds == 2] = 1 - y2[folds == 2]
    for vote_rounds in ("first", "all"):
        a = crossfit(s.S, s.y, 8, method="labeled_mle", seed=3, vote_rounds=vote_rounds)
        b = crossfit(s.S, y2, 8, method="labeled_mle", seed=3, vote_rounds=vote_rounds)
        assert a.fits[2].params == b.fits[2].params                    # fold 2 never sees its own labels
        assert a.fits[0].params.rho0 != b.fits[0].params.rho0          # the other folds do


def test_method_of_moments_falls_back_when_counts_are_underdispersed():
    """Counts less spread than one binomial admit no two-point mixture: MoM must not invent
    an impossible fit (e.g. rho1 = 0), it reports J = 0."""
    rng = np.random.default_rng(0)
    for _ in range(50):
        S = rng.choice([3, 4, 5], size=200, p=[0.25, 0.5, 0.25])      # variance 0.5 << binomial's 2
        fit = method_of_moments(S, 8)
        assert fit.rho0 == pytest.approx(1 - fit.rho1)
        assert 0 < fit.rho0 < 1


def test_em_loglik_is_that_of_the_returned_parameters_even_without_convergence():
    S, _ = draw_votes(300, 8, 0.6, 0.3, 0.2, 3)
    fit = binomial_mixture_em(S, 8, max_iter=3, seed=0)
    assert not fit.converged
    assert fit.loglik == pytest.approx(mixture_loglik(S, 8, fit.weight_valid, fit.rho0, fit.rho1), rel=1e-12)


def test_prior_and_transitions_share_the_300_label_cap():
    s = simulate_setting(NoiseParams(0.3, 0.2, 0.3, 0.5, 0.7), n=1000, k_max=1, seed=5)
    cal = calibrate(s.S, s.y, 8)
    assert cal.n_pi == 300 and cal.transitions.n_valid_before + cal.transitions.n_invalid_before == 300


def test_crossfit_is_deterministic_for_a_seed():
    s = simulate_setting(NoiseParams(0.3, 0.2, 0.3, 0.5, 0.7), n=150, seed=2)
    a, b = crossfit(s.S, s.y, 8, seed=5), crossfit(s.S, s.y, 8, seed=5)
    assert all(np.array_equal(getattr(a, k), getattr(b, k)) for k in ("rho0", "rho1", "alpha", "beta", "pi"))
    c = crossfit(s.S, s.y, 8, seed=6)
    assert not np.array_equal(a.folds, c.folds)


def test_crossfit_says_what_it_needs():
    with pytest.raises(ValueError, match="5 folds needs at least 5 instances.*N=3"):
        crossfit_folds(3, 5)
    with pytest.raises(ValueError, match="at least 2 folds"):
        crossfit_folds(10, 1)


@pytest.mark.parametrize("method, M", [("binomial_em", 2), ("mom", 2), ("beta_binomial_em", 4)])
def test_vote_noise_fits_refuse_too_few_votes(method, M):
    S = np.random.default_rng(0).integers(0, M + 1, 100)
    with pytest.raises(ValueError, match=rf"{method}: needs M >= \d+ votes"):
        fit_vote_noise(method, S, M)


def test_rates_on_an_unsafe_boundary_use_the_stated_jeffreys_estimate():
    assert defined_rate(3, 10) == (0.3, "frequency")
    assert defined_rate(0, 82) == (0.5 / 83, "jeffreys")            # pi = 0 or beta = 0: unsafe
    assert defined_rate(18, 18) == (18.5 / 19, "jeffreys")
    assert defined_rate(0, 0) == (0.5, "jeffreys")                  # undefined
    assert defined_rate(0, 82, unsafe=()) == (0.0, "frequency")    # alpha = 0 only makes the rule stop
    assert defined_rate(0, 0, unsafe=()) == (0.5, "jeffreys")
    assert defined_rate(18, 18, unsafe=(0.0,)) == (1.0, "frequency")


def test_all_valid_window_does_not_make_vrr_stop_repair_to_k_max():
    """Every initial plan valid and no repair breaks one: the frequency beta-hat = 0 (with alpha
    undefined) made G_k > 0 for every belief; the Jeffreys estimates stop on strong votes."""
    n = 60
    y = np.ones((n, 3), dtype=int)
    S = np.full((n, 3), 8)
    cal = calibrate(S, y, 8)
    assert cal.rules["alpha"] == cal.rules["beta"] == cal.rules["pi"] == "jeffreys"   # undefined, 0/60, 60/60
    assert cal.params.alpha == 0.5 and cal.params.beta == pytest.approx(0.5 / (n + 1))
    assert np.isnan(cal.transitions.alpha) and cal.transitions.beta == 0.0   # the raw frequencies, recorded
    out = vrr_stop(S, 8, **cal.params.as_dict())
    assert (out.committed == 0).all()


def test_labeled_mle_with_a_missing_class_is_recorded_not_silent():
    y = np.ones((40, 2), dtype=int)
    cal = calibrate(np.full((40, 2), 7), y, 8, method="labeled_mle")
    assert cal.rules["rho0"] == "jeffreys" and cal.params.rho0 == 0.5 and cal.rules["rho1"] == "fit"


def test_batched_em_equals_one_fit_at_a_time():
    samples = [draw_votes(200, 8, 0.7, 0.25, 0.15, s)[0] for s in range(6)]
    hists = np.stack([np.bincount(S, minlength=9) for S in samples])
    rho0, rho1, w = binomial_mixture_em_many(hists, 8, seed=3)
    for i, S in enumerate(samples):
        one = binomial_mixture_em(S, 8, seed=3)
        assert (rho0[i], rho1[i], w[i]) == pytest.approx((one.rho0, one.rho1, one.weight_valid), abs=1e-12)


def test_a_zero_repair_benefit_is_kept_as_the_paper_estimates_it():
    """alpha-hat = 0 (the paper's Qwen-7B row) stays 0: it can only make VRR-Stop stop."""
    s = simulate_setting(NoiseParams(0.725, 0.048, 0.0, 0.909, 0.875), n=300, k_max=1, seed=0)
    cal = calibrate(s.S, s.y, 8)
    assert cal.params.alpha == 0.0 and cal.rules["alpha"] == "frequency"


# ---------------------------------------------------------------- semi-supervised EM, the check, B_k, the mode
from vrr.calibration.check import calibration_check, folds_verdict, wald_statistic  # noqa: E402
from vrr.calibration.gain_radius import bootstrap_radius, gain_paths, parameter_draws, radii_of_draws  # noqa: E402
from vrr.calibration.semisupervised import semisupervised_em  # noqa: E402
from vrr.policies.mode import algorithm1_mode  # noqa: E402
from vrr.policies.rules import algorithm1_step  # noqa: E402

CHECK_TRUTH = NoiseParams(rho0=0.1, rho1=0.3, alpha=0.3, beta=0.1, pi=0.5)


def test_semisupervised_em_without_unlabeled_votes_is_the_labeled_mle_and_without_labels_the_label_free_em():
    S, y = draw_votes(200, 16, 0.5, 0.2, 0.3, seed=3)
    only_labeled = semisupervised_em([], 8, S, y, 16)
    assert only_labeled.rho0 == pytest.approx(S[~y].sum() / (16 * (~y).sum()), abs=1e-9)
    assert only_labeled.rho1 == pytest.approx(1 - S[y].sum() / (16 * y.sum()), abs=1e-9)
    U, _ = draw_votes(300, 8, 0.6, 0.2, 0.25, seed=4)
    free = semisupervised_em(U, 8, [], [], 16)
    em = binomial_mixture_em(U, 8)
    assert (free.rho0, free.rho1, free.weight_valid) == pytest.approx((em.rho0, em.rho1, em.weight_valid), abs=1e-4)


@pytest.mark.parametrize("concentration", [None, 2.0])
def test_semisupervised_em_recovers_rho_on_independent_and_correlated_votes(concentration):
    """20 simulated windows (N = 200 unlabeled plans, M = 8, probe 100 x 16 labeled): with independent votes the
    semi-supervised rates are within 0.03 of the truth on average; with correlated votes (beta-binomial judge,
    concentration 2) the label-free EM's rho1 is biased low by about 0.09, the semi-supervised one by at most half
    of that, and the checked method (labels alone where the decision check rejects, the semi-supervised fit where
    the bias moves no decision) by no more than the semi-supervised one."""
    err_ss, err_em, err_checked = [], [], []
    for seed in range(20):
        w = simulate_setting(CHECK_TRUTH, n=200, k_max=1, M=8, seed=seed, judge_concentration=concentration,
                             probe_n=100, probe_M=16)
        ss = semisupervised_em(w.S[:, 0], 8, w.probe_S, w.probe_y, 16)
        em = binomial_mixture_em(w.S[:, 0], 8, seed=seed)
        checked = calibrate(w.S, w.y, 8, method="semisupervised_checked", seed=seed, probe_S=w.probe_S,
                            probe_y=w.probe_y, probe_M=16,
                            options=__import__("vrr").calibration.EstimatorOptions(check_replicates=60)).votes
        err_ss.append((ss.rho0 - CHECK_TRUTH.rho0, ss.rho1 - CHECK_TRUTH.rho1))
        err_em.append((em.rho0 - CHECK_TRUTH.rho0, em.rho1 - CHECK_TRUTH.rho1))
        err_checked.append((checked.rho0 - CHECK_TRUTH.rho0, checked.rho1 - CHECK_TRUTH.rho1))
    bias_ss, bias_em, bias_checked = (np.abs(np.mean(e, axis=0)) for e in (err_ss, err_em, err_checked))
    if concentration is None:
        assert bias_ss.max() < 0.03 and np.mean(np.abs(err_ss)) < 0.03
    else:
        assert bias_em[1] > 0.06                       # the label-free EM is pulled by the correlated votes
        assert bias_ss[1] <= bias_em[1] / 2
        assert bias_checked[1] <= bias_ss[1] + 1e-6      # the same fit up to the EM's restarts


def test_wald_statistic_is_d_sigma_inverse_d():
    rng = np.random.default_rng(0)
    for _ in range(20):
        a = rng.normal(size=(2, 2))
        sigma = a @ a.T + 0.1 * np.eye(2)             # the oracle may use BLAS; the statistic does not
        d = rng.normal(size=2)
        assert wald_statistic(d[0], d[1], sigma[0, 0], sigma[0, 1], sigma[1, 1]) == pytest.approx(
            d @ np.linalg.solve(sigma, d), rel=1e-9)
    assert np.isnan(wald_statistic(1.0, 1.0, 1.0, 1.0, 1.0))   # singular covariance


def _check_rejections(concentration, reps, n=200):
    out = []
    for r in range(reps):
        w = simulate_setting(CHECK_TRUTH, n=n, k_max=1, M=8, seed=1000 + r, judge_concentration=concentration,
                             probe_n=100, probe_M=16)
        out.append(calibration_check(w.S[:, 0], 8, w.probe_S, w.probe_y, 16, n_boot=100, seed=r, em_restarts=5))
    return np.array([c.p_value for c in out]), out


def test_calibration_check_rejects_at_about_its_level_under_the_model_and_flags_correlated_votes():
    """60 windows with independent votes: the check's p-values are roughly uniform (rejections at 0.05 at most
    0.12, at 0.5 between 0.35 and 0.7); 30 windows with correlated votes (concentration 1): it rejects at 0.05 in
    at least 60 % of them."""
    p_null, checks = _check_rejections(None, 60)
    assert np.mean(p_null < 0.05) <= 0.12
    assert 0.35 <= np.mean(p_null < 0.5) <= 0.7
    assert all(c.passed == (c.p_value >= 0.05) for c in checks)
    p_corr, _ = _check_rejections(1.0, 30)
    assert np.mean(p_corr < 0.05) >= 0.6


def test_calibration_check_without_both_classes_cannot_pass():
    S, y = draw_votes(100, 8, 0.5, 0.1, 0.2, seed=0)
    c = calibration_check(S, 8, np.array([10, 12, 14]), np.array([1, 1, 1]), 16)
    assert not c.passed and "class" in c.reason and np.isnan(c.p_value)
    assert folds_verdict([c.as_dict(), None])["verdict"] == "reject"
    assert folds_verdict([None, None])["verdict"] == "n/a"


def test_bootstrap_radius_covers_the_true_gain_and_is_tight():
    """20 simulated calibrations (J = 0.46, N = 300, M = 8) and 200 evaluation trajectories each: each one-sided
    bound of G_k holds on at least 90 % of the states (its level is 95 %; scripts/coverage_study.py measures it
    with more calibrations), and the median half-width is at most 3x the median actual error |G-hat - G|
    (the box radius it replaces was about 5x)."""
    truth = NoiseParams(rho0=0.364, rho1=0.177, alpha=0.3, beta=0.3, pi=0.6)
    lower, upper, widths, errors = [], [], [], []
    for rep in range(20):
        calib = simulate_setting(truth, n=300, k_max=1, M=8, seed=500 + rep)
        fit = calibrate(calib.S, calib.y, 8, seed=rep)
        draws = parameter_draws(calib.S, calib.y, 8, n_boot=100, seed=rep, point=fit)
        ev = simulate_setting(truth, n=200, k_max=5, M=8, seed=900 + rep)
        g_hat, low, high = bootstrap_radius(ev.S, 8, fit.params.as_dict(), draws, 0.05)
        g = gain_paths(ev.S, 8, truth.as_dict())
        lower.append(np.mean(g >= g_hat - low - 1e-12))
        upper.append(np.mean(g <= g_hat + high + 1e-12))
        widths.append(np.median((low + high) / 2))
        errors.append(np.median(np.abs(g_hat - g)))
    assert np.mean(lower) >= 0.9 and np.mean(upper) >= 0.9
    assert np.median(widths) <= 3 * np.median(errors)


def test_radii_of_draws_are_the_distances_to_the_outer_quantiles():
    draws = np.arange(1, 101, dtype=float) / 100          # 0.01 .. 1.00
    low, high = radii_of_draws(draws, 0.5, eta=0.1)
    assert (float(low), float(high)) == pytest.approx((0.5 - 0.10, 0.91 - 0.5))
    low, high = radii_of_draws(draws, 2.0, eta=0.1)       # G-hat above every draw: no radius above it
    assert float(high) == 0.0 and float(low) == pytest.approx(2.0 - 0.10)


def test_algorithm1_step_uses_the_radius_below_for_repair_and_above_for_commit():
    # G-hat 0.05 > 0: repair is identifiable iff the radius below is < 0.05, whatever the one above
    assert algorithm1_step(0.05, 0.5, 0.0, radius_low=0.01) == (False, False)
    assert algorithm1_step(0.05, 0.01, 0.0, radius_low=0.2) == (False, True)
    # G-hat -0.05: commit iff the radius above is <= 0.05
    assert algorithm1_step(-0.05, 0.04, 0.0, radius_low=0.9) == (True, False)
    assert algorithm1_step(-0.05, 0.06, 0.0, radius_low=0.0) == (False, True)
    assert algorithm1_step(-0.05, 0.04, 0.0) == (True, False)   # symmetric as before


def test_algorithm1_mode_needs_separation_for_label_free_rates_and_a_check_chooses_the_rates():
    passing = {"passed": True, "reason": "agrees"}
    rejecting = {"passed": False, "reason": "EM rho1 0.31 vs labeled 0.72"}
    assert algorithm1_mode(0.5, 0.1, passing)[0] == "stop"
    mode, reason = algorithm1_mode(0.5, 0.1, rejecting)      # a rejecting check sends the decisions to the labels
    assert mode == "stop" and "calibration check rejects" in reason and "0.72" in reason and "labeled rates" in reason
    assert algorithm1_mode(0.05, 0.1, passing)[0] == "guard"
    assert algorithm1_mode(float("nan"), 0.1, passing)[0] == "guard"
    mode, reason = algorithm1_mode(0.5, 0.1, None)
    assert mode == "stop" and ">= J_min" in reason


def test_replay_follows_the_decision_check_and_keeps_the_label_free_row():
    """A simulated window with strongly correlated votes and a labeled probe: the Wald check rejects every fold, but
    the label-free rates change no decision (L = 0), so the decision check passes and the semi-supervised fit
    stands; Algorithm 1 runs the mode its labeled replay prefers; the VRR-Stop (label-free EM) row is the label-free
    cross-fit, which the default semi-supervised calibration does not equal."""
    from vrr.policies import ReplayConfig, replay

    w = simulate_setting(CHECK_TRUTH, n=300, k_max=3, M=8, seed=7, judge_concentration=0.5, probe_n=100,
                         probe_M=16)
    res = replay(w, ReplayConfig(method="semisupervised_checked"),
                 policies=("VRR-Stop", "VRR-Stop (label-free EM)", "VRR-Guard", "Algorithm 1"))
    modes = [m["mode"] for m in res.extras["algorithm1_mode_per_fold"]]
    replays = res.extras["labeled_replay_per_fold"]
    assert modes == ["stop" if r["v_stop"] >= r["v_guard"] else "guard" for r in replays]
    checks = res.extras["calibration_check_per_fold"]
    assert all(c["passed"] and not c["wald_passed"] and c["decision"]["loss"] <= 0.02 for c in checks)
    stop_folds = np.isin(res.calibration.folds, [f for f, m in enumerate(modes) if m == "stop"])
    alg, stop, guard = (res.outcomes[k].committed for k in ("Algorithm 1", "VRR-Stop", "VRR-Guard"))
    assert (alg[stop_folds] == stop[stop_folds]).all() and (alg[~stop_folds] == guard[~stop_folds]).all()
    free = replay(w, ReplayConfig(method="binomial_em"), policies=("VRR-Stop",))
    assert (res.outcomes["VRR-Stop (label-free EM)"].committed == free.outcomes["VRR-Stop"].committed).all()
    assert [f.votes.method for f in res.calibration.fits] == ["semisupervised_em"] * 5
