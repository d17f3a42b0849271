"""Eq. 5 with exchangeable (beta-binomial) votes: the likelihood, its labeled, semi-supervised and label-free
estimators, the filter's calibration on correlated votes, and the binomial default left as it was."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from scipy import special, stats

from vrr.calibration.correlated import labeled_bb_mle, semisupervised_bb
from vrr.calibration.estimators import CrossFit, calibrate, crossfit
from vrr.calibration.semisupervised import semisupervised_em
from vrr.core.belief import (belief_update, exchangeable_vote_log_likelihood, exchangeable_vote_log_pmf,
                             filter_beliefs, predict, vote_log_likelihoods)
from vrr.data.contract import Setting, load_setting
from vrr.policies.replay import ALGORITHM1_PAPER, LABEL_FREE, TPM, ReplayConfig, replay
from vrr.settings import SettingConfigError, load_config

REPO = Path(__file__).resolve().parents[1]


def bb_counts(rng, mean, phi, M: int, size=None):
    """Beta-binomial accept counts: each plan draws its rate from Beta(mean, phi), then M votes."""
    c = 1.0 / np.asarray(phi) - 1.0
    return rng.binomial(M, rng.beta(np.asarray(mean) * c, (1 - np.asarray(mean)) * c, size=size))


def labeled_sample(rng, n: int, M: int, rho0, rho1, phi0, phi1, pi=0.6):
    y = rng.random(n) < pi
    S = np.where(y, bb_counts(rng, 1 - rho1, phi1, M, n), bb_counts(rng, rho0, phi0, M, n))
    return S, y


def correlated_trajectories(rng, n: int, k_max: int, M: int, rho0, rho1, phi0, phi1, alpha, beta, pi):
    """Frozen trajectories of the noise model whose every plan's votes are beta-binomial given its validity."""
    y = np.empty((n, k_max + 1), dtype=bool)
    y[:, 0] = rng.random(n) < pi
    for t in range(k_max):
        u = rng.random(n)
        y[:, t + 1] = np.where(y[:, t], u >= beta, u < alpha)
    S = bb_counts(rng, np.where(y, 1 - rho1, rho0), np.where(y, phi1, phi0), M)
    return S, y


# ---------------------------------------------------------------- the likelihood
@pytest.mark.parametrize("M", [1, 8, 16])
@pytest.mark.parametrize("mean,phi", [(0.3, 0.2), (0.9, 0.55), (0.04, 0.01), (0.5, 0.95)])
def test_exchangeable_likelihood_is_scipys_beta_binomial(M, mean, phi):
    S = np.arange(M + 1)
    c = 1 / phi - 1
    expected = stats.betabinom.logpmf(S, M, mean * c, (1 - mean) * c) - np.log(special.comb(M, S))
    np.testing.assert_allclose(exchangeable_vote_log_likelihood(S, M, mean, phi), expected, rtol=0, atol=1e-10)
    valid, invalid = vote_log_likelihoods(S, M, rho0=mean, rho1=1 - mean, phi0=phi, phi1=phi)
    np.testing.assert_allclose(valid, expected, atol=1e-10)
    np.testing.assert_allclose(invalid, expected, atol=1e-10)


def test_exchangeable_likelihood_tends_to_the_binomial():
    S, M = np.arange(9), 8
    binomial = vote_log_likelihoods(S, M, 0.2, 0.3)
    near = vote_log_likelihoods(S, M, 0.2, 0.3, phi0=1e-10, phi1=1e-10)
    far = vote_log_likelihoods(S, M, 0.2, 0.3, phi0=0.3, phi1=0.3)
    for b, n, f in zip(binomial, near, far):
        np.testing.assert_allclose(n, b, atol=1e-7)
        assert np.max(np.abs(f - b)) > 1.0          # correlation changes the evidence of extreme counts
    # rates on the boundary stay exact: an invalid plan with rho0 = 0 never gets an accept
    assert np.isneginf(exchangeable_vote_log_likelihood(3, M, 0.0, 0.3))
    assert exchangeable_vote_log_likelihood(0, M, 0.0, 0.3) == 0.0
    with pytest.raises(ValueError, match="phi"):
        vote_log_likelihoods(S, M, 0.2, 0.3, phi0=0.2)
    with pytest.raises(ValueError, match="phi"):
        exchangeable_vote_log_likelihood(S, M, 0.2, 1.0)


def scipy_log_likelihood(S, M: int, mu: float, phi: float) -> np.ndarray:
    """log P(S) - log C(M, S) from scipy: the beta-binomial; at phi = 0 the binomial; at mu in {0, 1} the point
    mass at S = M mu (every plan of the class has that acceptance rate)."""
    S = np.asarray(S)
    if mu in (0.0, 1.0):
        return np.where(S == M * mu, 0.0, -np.inf)
    log_comb = np.log(special.comb(M, S))
    if phi == 0.0:
        return stats.binom.logpmf(S, M, mu) - log_comb
    c = 1 / phi - 1
    return stats.betabinom.logpmf(S, M, mu * c, (1 - mu) * c) - log_comb


def likelihood_cases(rng, n_random: int = 12):
    """(mu, phi) pairs: the boundary rates 0 and 1, independent votes phi = 0, and random interior points."""
    edges = [(0.0, 0.0), (1.0, 0.0), (0.0, 0.4), (1.0, 0.7), (0.3, 0.0), (0.999, 0.0), (1e-6, 0.2), (0.5, 0.98)]
    return np.array(edges + list(zip(rng.uniform(0, 1, n_random), rng.uniform(0, 0.95, n_random))))


@pytest.mark.parametrize("M", [0, 1, 2, 8, 16, 33])
def test_both_entries_of_the_exchangeable_likelihood_are_scipys(M):
    """The batched table the beta-binomial fits read ([C, M+1], vrr.calibration.correlated) and the filter's
    likelihood at given counts (broadcast over S and the parameters) both equal scipy's pmf, edges included."""
    cases = likelihood_cases(np.random.default_rng(M))
    mu, phi = cases[:, 0], cases[:, 1]
    S = np.arange(M + 1)
    expected = np.stack([scipy_log_likelihood(S, M, m, p) for m, p in cases])
    table = exchangeable_vote_log_pmf(M, mu, phi)
    assert table.shape == (len(cases), M + 1)
    np.testing.assert_allclose(table, expected, rtol=1e-11, atol=1e-11)
    assert exchangeable_vote_log_pmf(M, 0.3, 0.2).shape == (M + 1,)
    counts = np.random.default_rng(M + 100).integers(0, M + 1, size=(7, 1))
    at_counts = exchangeable_vote_log_likelihood(counts, M, mu[None, :], phi[None, :])
    assert at_counts.shape == (7, len(cases))
    np.testing.assert_allclose(at_counts, expected[np.arange(len(cases))[None, :], counts], rtol=1e-11, atol=1e-11)


def test_the_exchangeable_likelihood_refuses_counts_outside_0_to_M():
    for bad in (9, -1, 2.5, np.nan):
        with pytest.raises(ValueError, match="accept counts"):
            exchangeable_vote_log_likelihood(np.array([3, bad]), 8, 0.4, 0.2)
    assert exchangeable_vote_log_likelihood(np.array([3.0, 8.0]), 8, 0.4, 0.2).shape == (2,)
    S = np.array([[3, 9], [0, 8]])
    for phi in ({}, dict(phi0=0.2, phi1=0.3)):   # either likelihood: an out-of-range count is not read as evidence
        with pytest.raises(ValueError, match="accept counts"):
            filter_beliefs(S, 8, 0.2, 0.3, 0.3, 0.2, 0.6, **phi)


def test_the_filter_updates_every_round_by_eq5_with_exchangeable_votes():
    """filter_beliefs (its likelihood tables built once) is the round-by-round recursion of belief_update and
    predict, with per-instance rates and correlations and per-round repair rates."""
    rng = np.random.default_rng(5)
    n, rounds, M = 50, 4, 8
    S = rng.integers(0, M + 1, (n, rounds))
    rho0, rho1, phi0, phi1 = (rng.uniform(0, 0.5, n) for _ in range(4))
    alpha, beta = rng.uniform(0.1, 0.5, (n, rounds)), 0.2
    b, b_minus = filter_beliefs(S, M, rho0, rho1, alpha, beta, 0.6, phi0, phi1)
    prior = np.full(n, 0.6)
    for k in range(rounds):
        np.testing.assert_array_equal(b_minus[:, k], prior)
        np.testing.assert_array_equal(b[:, k], belief_update(prior, S[:, k], M, rho0, rho1, phi0, phi1))
        prior = predict(b[:, k], alpha[:, k], beta)


# ---------------------------------------------------------------- the estimators
TRUTH = dict(rho0=0.1, rho1=0.3, phi0=0.15, phi1=0.4)


def test_labeled_estimator_recovers_rates_and_correlations():
    rng = np.random.default_rng(1)
    S, y = labeled_sample(rng, 800, 16, **TRUTH, pi=0.5)
    fit = labeled_bb_mle(S, y, 16)
    assert fit.method == "labeled_bb_mle"
    for name, tol in (("rho0", 0.02), ("rho1", 0.03), ("phi0", 0.05), ("phi1", 0.06)):
        assert abs(getattr(fit, name) - TRUTH[name]) < tol, (name, getattr(fit, name))
    # the labeled probe, as a calibration expresses it: vote_rounds="probe" with labeled_mle
    Sw, yw = correlated_trajectories(rng, 60, 2, 8, **TRUTH, alpha=0.3, beta=0.2, pi=0.6)
    cal = calibrate(Sw, yw, 8, method="labeled_mle", vote_rounds="probe", probe_S=S, probe_y=y, probe_M=16,
                    likelihood="beta_binomial")
    assert (cal.phi0, cal.phi1) == (fit.phi0, fit.phi1)
    assert cal.as_kwargs()["phi1"] == fit.phi1 and cal.rules["phi1"] == "fit"
    binomial = calibrate(Sw, yw, 8, method="labeled_mle", vote_rounds="probe", probe_S=S, probe_y=y, probe_M=16)
    assert "phi0" not in binomial.as_kwargs() and binomial.phi0 is None


def test_semisupervised_estimator_recovers_what_the_binomial_mixture_misses():
    errors_bb, errors_binomial, phi_errors = [], [], []
    for seed in range(3):
        rng = np.random.default_rng(10 + seed)
        S_l, y_l = labeled_sample(rng, 100, 16, **TRUTH)          # the probe: 100 plans x 16 votes
        S_u, _ = labeled_sample(rng, 600, 8, **TRUTH)             # the window's round 0, labels unused
        fit = semisupervised_bb(S_u, 8, S_l, y_l, 16)
        free = semisupervised_em(S_u, 8, S_l, y_l, 16)
        errors_bb.append([fit.rho0 - TRUTH["rho0"], fit.rho1 - TRUTH["rho1"]])
        errors_binomial.append([free.rho0 - TRUTH["rho0"], free.rho1 - TRUTH["rho1"]])
        phi_errors.append([fit.phi0 - TRUTH["phi0"], fit.phi1 - TRUTH["phi1"]])
    rmse = lambda e: np.sqrt(np.mean(np.square(e), axis=0))  # noqa: E731
    assert np.all(rmse(errors_bb) < [0.02, 0.035]), rmse(errors_bb)
    assert np.all(rmse(phi_errors) < [0.05, 0.07]), rmse(phi_errors)
    assert rmse(errors_binomial)[1] > 0.06           # the binomial mixture pulls rho1 off on correlated votes


def test_crossfit_composes_every_method_with_both_likelihoods():
    rng = np.random.default_rng(3)
    S, y = correlated_trajectories(rng, 300, 2, 8, **TRUTH, alpha=0.3, beta=0.2, pi=0.6)
    S_l, y_l = labeled_sample(rng, 100, 16, **TRUTH)
    probe = dict(probe_S=S_l, probe_y=y_l, probe_M=16)
    cases = [("binomial_em", "first"), ("labeled_mle", "probe"), ("semisupervised_em", "first"),
             ("semisupervised_checked", "first")]
    for method, rounds in cases:
        cf = crossfit(S, y, 8, method=method, vote_rounds=rounds, likelihood="beta_binomial", **probe)
        kw = cf.as_kwargs()
        assert cf.likelihood == "beta_binomial" and kw["phi0"].shape == kw["phi1"].shape == (300,)
        if method == "binomial_em":     # the label-free mixture keeps phi under its cap (App. I), nothing more
            assert np.all((kw["phi1"] >= 0) & (kw["phi1"] <= 0.3)) and np.all(kw["phi0"] <= 0.3)
        else:                           # the votes are correlated, and every fit that reads labels sees it
            assert np.all(kw["phi1"] > 0.15) and np.all(kw["phi0"] > 0.05), (method, kw["phi0"], kw["phi1"])
        again = CrossFit.from_dict(json.loads(json.dumps(cf.to_dict())))
        for name, value in kw.items():
            np.testing.assert_array_equal(again.as_kwargs()[name], value)
        plain = crossfit(S, y, 8, method=method, vote_rounds=rounds, **probe)
        assert plain.likelihood == "binomial" and set(plain.as_kwargs()) == {"rho0", "rho1", "alpha", "beta", "pi"}
        assert all("phi0" not in f["votes"] and "likelihood" not in f for f in plain.to_dict()["fits"])
    with pytest.raises(ValueError, match="no exchangeable-vote"):
        crossfit(S, y, 8, method="mom", likelihood="beta_binomial")
    with pytest.raises(ValueError, match="likelihood"):
        crossfit(S, y, 8, likelihood="poisson")


# ---------------------------------------------------------------- the filter
def test_exchangeable_filter_is_calibrated_where_the_binomial_is_not():
    rng = np.random.default_rng(0)
    params = dict(rho0=0.2, rho1=0.25, alpha=0.3, beta=0.2, pi=0.5)
    S, y = correlated_trajectories(rng, 4000, 5, 8, 0.2, 0.25, 0.3, 0.4, 0.3, 0.2, 0.5)
    b_bb, _ = filter_beliefs(S, 8, phi0=0.3, phi1=0.4, **params)
    b_bin, _ = filter_beliefs(S, 8, **params)

    def calibration_error(b, bins=10):
        which = np.minimum((b * bins).astype(int), bins - 1)
        return sum((which == i).mean() * abs(b[which == i].mean() - y[which == i].mean())
                   for i in range(bins) if (which == i).any())

    brier = lambda b: float(np.mean((b - y) ** 2))  # noqa: E731
    assert calibration_error(b_bb) < 0.03 < 0.08 < calibration_error(b_bin)
    assert brier(b_bb) < brier(b_bin) - 0.02


# ---------------------------------------------------------------- replay
def small_correlated_setting(seed: int = 5, n: int = 120) -> Setting:
    rng = np.random.default_rng(seed)
    S, y = correlated_trajectories(rng, n, 3, 8, **TRUTH, alpha=0.35, beta=0.2, pi=0.5)
    S_l, y_l = labeled_sample(rng, 100, 16, **TRUTH)
    return Setting(S=S.astype(np.int16), y=y.astype(np.int8), M=8, probe_S=S_l.astype(np.int16), probe_M=16,
                   probe_y=y_l.astype(np.int8), meta={"setting": "correlated_test"})


@pytest.mark.parametrize("method,rounds", [("semisupervised_checked", "first"), ("labeled_mle", "probe")])
def test_replay_runs_the_filtering_policies_under_exchangeable_votes(method, rounds):
    setting = small_correlated_setting()
    config = ReplayConfig(method=method, vote_rounds=rounds, likelihood="beta_binomial")
    res = replay(setting, config, policies=("No repair", "VRR-Stop", "Algorithm 1", ALGORITHM1_PAPER, TPM))
    assert set(res.validity) == {"No repair", "VRR-Stop", "Algorithm 1", ALGORITHM1_PAPER, TPM}
    assert res.calibration.likelihood == "beta_binomial"
    assert np.isfinite(res.extras["error_radius_mean"]) and res.extras["error_radius_mean"] > 0
    binomial = replay(setting, replace(config, likelihood="binomial"), policies=("VRR-Stop",))
    # the same votes read as exchangeable change some belief enough to move a commit
    b_bb, _ = filter_beliefs(setting.S, 8, **res.calibration.as_kwargs())
    b_bin, _ = filter_beliefs(setting.S, 8, **binomial.calibration.as_kwargs())
    assert np.max(np.abs(b_bb - b_bin)) > 0.1
    with pytest.raises(ValueError, match="likelihood"):
        replay(setting, replace(config, likelihood="binomial"), policies=("VRR-Stop",), calibration=res.calibration)


@pytest.mark.parametrize("method,rounds", [("semisupervised_em", "first"), ("labeled_mle", "probe"),
                                           ("labeled_mle", "first"), ("binomial_em", "first")])
def test_gain_radius_draws_the_correlations(method, rounds):
    from vrr.calibration.gain_radius import parameter_draws

    setting = small_correlated_setting(n=300)
    kwargs = dict(method=method, vote_rounds=rounds, probe_S=setting.probe_S, probe_y=setting.probe_y, probe_M=16,
                  likelihood="beta_binomial")
    point = calibrate(setting.S, setting.y, 8, **kwargs)
    draws = parameter_draws(setting.S, setting.y, 8, n_boot=40, point=point, **kwargs)
    assert np.all((draws["phi0"] >= 0) & (draws["phi0"] < 1) & (draws["phi1"] >= 0) & (draws["phi1"] < 1))
    # the label-free mixture may sit at its cap on phi in every draw (App. I); the fits that read labels may not
    varying = ("rho0", "rho1") if method == "binomial_em" else ("phi0", "phi1", "rho0", "rho1")
    for name in varying:
        d = draws[name]
        assert d.std() > 0.003, name                               # the draws vary ...
        assert abs(np.median(d) - point.as_kwargs()[name]) < 2.5 * d.std(), name   # ... around the point fit


@pytest.mark.parametrize("setting", ["gsm8k_cpu_program_pmstress", "mbpp_cpu_favorable"])
def test_default_replay_is_the_committed_one(setting):
    """The binomial default replays a committed real window to the validity and committed round of its committed
    stopping table (results/tables/stopping_<setting>.csv, which make reproduce wrote)."""
    import csv

    config = ReplayConfig.from_setting(load_config(setting))
    assert config.likelihood == "binomial"
    policies = ("VRR-Stop", LABEL_FREE, "Algorithm 1", TPM)
    res = replay(load_setting(REPO / "data" / "real" / setting / "arrays.npz"), config, policies=policies)
    table = {r["policy"]: r for r in csv.DictReader(open(REPO / "results" / "tables" / f"stopping_{setting}.csv"))}
    for name in policies:
        v = float(table[name]["V [95% CI]"].split()[0])
        assert f"{res.validity[name].mean():.3f}" == f"{v:.3f}", name
        assert f"{res.outcomes[name].committed.mean():.2f}" == table[name]["<K>"], name


# ---------------------------------------------------------------- settings and config
def test_the_likelihood_is_a_checked_setting_carried_by_the_config():
    cfg = load_config("sim_qwen3b_favorable")
    assert cfg["calibration"]["likelihood"] == "binomial"
    assert ReplayConfig.from_setting(cfg).likelihood == "binomial"
    cfg_bb = load_config("sim_qwen3b_favorable", overrides={"calibration.likelihood": "beta_binomial"})
    config = ReplayConfig.from_setting(cfg_bb)
    assert config.likelihood == "beta_binomial"
    assert ReplayConfig.from_dict(json.loads(json.dumps(config.as_dict()))) == config
    assert ReplayConfig.from_dict({k: v for k, v in config.as_dict().items() if k != "likelihood"}).likelihood \
        == "binomial"                                     # a record written before the field reads as the paper's
    with pytest.raises(SettingConfigError, match=r"field 'calibration.likelihood': must be one of"):
        load_config("sim_qwen3b_favorable", overrides={"calibration.likelihood": "betabinomial"})
    with pytest.raises(SettingConfigError,
                       match=r"'calibration.likelihood': 'mom' cannot run on this setting \(it fits the binomial"):
        load_config("sim_qwen3b_favorable", overrides={"calibration.likelihood": "beta_binomial",
                                                       "calibration.method": "mom"})
    with pytest.raises(ValueError, match="vote likelihood"):
        ReplayConfig(likelihood="correlated")
    with pytest.raises(ValueError, match="calibration field"):
        config.with_policy(likelihood="binomial")


# ---------------------------------------------------------------- the same bits on every CPU kind
FIT_ON_REAL_WINDOW = """
import sys
from vrr.calibration.correlated import label_free_bb, labeled_bb_mle, semisupervised_bb
from vrr.data.contract import load_setting
st = load_setting(sys.argv[1])
fits = [label_free_bb(st.S[:, 0], st.M), labeled_bb_mle(st.probe_S, st.probe_y, st.probe_M),
        semisupervised_bb(st.S[:, 0], st.M, st.probe_S, st.probe_y, st.probe_M)]
print(repr([(f.rho0, f.rho1, f.phi0, f.phi1) for f in fits]))
"""


def test_exchangeable_fits_are_the_same_without_numpys_simd_loops():
    """numpy's AVX2/AVX512 loops (its SIMD quicksort among them: it orders a simplex's tied values differently)
    must not reach an estimate; the fits with them and without them agree to the bit."""
    import os
    import subprocess
    import sys

    from numpy._core._multiarray_umath import __cpu_dispatch__, __cpu_features__

    simd = " ".join(t for t in __cpu_dispatch__ if t.startswith(("X86_V3", "X86_V4", "AVX512", "AVX2", "FMA3"))
                    and __cpu_features__.get(t))
    arrays = str(REPO / "data" / "real" / "mbpp_cpu_favorable" / "arrays.npz")
    outs = []
    for disabled in (None, simd):
        env = dict(os.environ, PYTHONPATH=str(REPO))
        env.pop("NPY_DISABLE_CPU_FEATURES", None)
        if disabled:
            env["NPY_DISABLE_CPU_FEATURES"] = disabled
        outs.append(subprocess.run([sys.executable, "-c", FIT_ON_REAL_WINDOW, arrays], env=env, capture_output=True,
                                   text=True, check=True).stdout)
    assert outs[0] == outs[1] and outs[0].count("(") == 3
