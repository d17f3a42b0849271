"""Closed forms of Sec. 3-4.1: population dynamics, Eq. 5 belief update, Eq. 6 gain, Eq. 7 boundary."""
import math

import numpy as np
import pytest

from vrr.core.belief import belief_update, boundary, filter_beliefs, gain, predict, should_repair
from vrr.core.model import NoiseParams, acceptance_rate, population_dynamics, population_fixed_point, youden_j

# Table "loop-dynamics": (rho0, rho1, J, alpha, beta, b*)
LOOP_DYNAMICS = {
    "favorable": (0.438, 0.169, 0.39, 0.423, 0.020, 0.954),
    "pm_qwen3b": (0.364, 0.177, 0.46, 0.320, 0.786, 0.289),
    "pm_qwen7b": (0.725, 0.048, 0.23, 0.000, 0.909, 0.000),
    "pm_mistral": (0.707, 0.111, 0.18, 0.014, 0.862, 0.015),
    "pm_llama": (0.358, 0.609, 0.03, 0.051, 0.938, 0.051),
    "math500": (0.109, 0.118, 0.77, 0.020, 0.617, 0.031),
    "bfcl_single": (0.875, 0.057, 0.07, 0.147, 0.615, 0.192),
    "bfcl_multi": (0.659, 0.223, 0.12, 0.048, 0.037, 0.564),
}


def brute_force_posterior(prior, s, M, rho0, rho1):
    like_valid = math.comb(M, s) * (1 - rho1) ** s * rho1 ** (M - s)
    like_invalid = math.comb(M, s) * rho0 ** s * (1 - rho0) ** (M - s)
    return prior * like_valid / (prior * like_valid + (1 - prior) * like_invalid)


@pytest.mark.parametrize("name", sorted(LOOP_DYNAMICS))
def test_paper_boundaries_and_j(name):
    rho0, rho1, j, alpha, beta, b_star = LOOP_DYNAMICS[name]
    # The paper prints b* truncated (not rounded) to three decimals, e.g. 0.01598 -> 0.015.
    assert math.floor(boundary(alpha, beta) * 1000 + 1e-9) / 1000 == pytest.approx(b_star)
    assert youden_j(rho0, rho1) == pytest.approx(j, abs=0.011)


def test_belief_update_equals_brute_force_bayes():
    rng = np.random.default_rng(0)
    for _ in range(300):
        M = int(rng.integers(1, 17))
        s = int(rng.integers(0, M + 1))
        prior, rho0, rho1 = rng.uniform(0.01, 0.99, 3)
        assert belief_update(prior, s, M, rho0, rho1) == pytest.approx(
            brute_force_posterior(prior, s, M, rho0, rho1), rel=1e-10)


def test_belief_update_vectorized_matches_scalar():
    rng = np.random.default_rng(1)
    S = rng.integers(0, 9, 50)
    priors = rng.uniform(0.01, 0.99, 50)
    vec = belief_update(priors, S, 8, 0.3, 0.2)
    assert vec.shape == (50,)
    for p, s, v in zip(priors, S, vec):
        assert v == pytest.approx(brute_force_posterior(p, int(s), 8, 0.3, 0.2), rel=1e-10)


def test_belief_update_safe_at_degenerate_rates():
    # Perfect judge: rho0 = rho1 = 0 gives certainty in both directions, no NaN.
    assert belief_update(0.5, 8, 8, 0.0, 0.0) == 1.0
    assert belief_update(0.5, 0, 8, 0.0, 0.0) == 0.0
    # rho1 = 1: a valid plan is never accepted, so any accept means invalid.
    assert belief_update(0.7, 3, 8, 0.2, 1.0) == 0.0
    # Votes impossible under both classes keep the prior.
    assert belief_update(0.3, 4, 8, 0.0, 1.0) == 0.3
    # Extreme evidence does not underflow into NaN.
    out = belief_update(np.array([1e-300, 0.5]), np.array([200, 0]), 200, 0.01, 0.01)
    assert np.all(np.isfinite(out)) and out[0] > 0.99 and out[1] < 1e-100


def test_uninformative_judge_leaves_prior():
    # J = 0 (rho0 = 1 - rho1): the likelihood ratio is 1 for every S.
    for s in range(9):
        assert belief_update(0.37, s, 8, 0.6, 0.4) == pytest.approx(0.37)


def test_gain_sign_flips_exactly_at_boundary():
    for alpha, beta in [(0.32, 0.786), (0.423, 0.02), (0.051, 0.938), (0.5, 0.5)]:
        b_star = boundary(alpha, beta)
        assert gain(b_star, alpha, beta) == pytest.approx(0.0, abs=1e-12)
        assert gain(b_star - 1e-6, alpha, beta) > 0
        assert gain(b_star + 1e-6, alpha, beta) < 0
        assert should_repair(b_star - 1e-9, alpha, beta) and not should_repair(b_star + 1e-9, alpha, beta)


def test_gain_is_predictive_minus_current_belief():
    b = np.linspace(0, 1, 11)
    assert np.allclose(gain(b, 0.3, 0.6), predict(b, 0.3, 0.6) - b)


def test_threshold_boundary_and_no_repair_rule():
    alpha, beta, tau = 0.3, 0.6, 0.05
    b_tau = boundary(alpha, beta, tau)
    assert b_tau == pytest.approx((alpha - tau) / (alpha + beta))
    assert gain(b_tau, alpha, beta) == pytest.approx(tau)
    assert should_repair(b_tau - 1e-6, alpha, beta, tau) and not should_repair(b_tau + 1e-6, alpha, beta, tau)
    # alpha <= tau: never repair, even from certainty of invalidity.
    assert not should_repair(0.0, 0.04, 0.6, tau=0.05)


def test_population_fixed_point_equals_boundary_and_is_reached():
    for alpha, beta in [(0.32, 0.786), (0.423, 0.02), (0.048, 0.037)]:
        q_star = population_fixed_point(alpha, beta)
        assert q_star == pytest.approx(boundary(alpha, beta))
        assert predict(q_star, alpha, beta) == pytest.approx(q_star)
        q = population_dynamics(0.7, alpha, beta, 400)
        assert q[-1] == pytest.approx(q_star, abs=1e-6)


def test_population_dynamics_closed_form():
    # Q_t - Q* = (1 - alpha - beta)^t (Q_0 - Q*)
    alpha, beta, q0 = 0.2, 0.5, 0.9
    q = population_dynamics(q0, alpha, beta, 10)
    q_star = alpha / (alpha + beta)
    expected = q_star + (1 - alpha - beta) ** np.arange(11) * (q0 - q_star)
    assert np.allclose(q, expected)


def test_round_dependent_dynamics_and_acceptance_decoupling():
    # Perturbation switched on at round 3: validity falls while acceptance can still rise if
    # the judge drifts more lenient (Sec. 3, "Verifier signals can improve...").
    q = population_dynamics(0.45, [0.6, 0.6, 0.05, 0.05, 0.05, 0.05], [0.05, 0.05, 0.6, 0.6, 0.6, 0.6], 6)
    assert np.argmax(q) == 2 and q[-1] < q[2]
    a_before = acceptance_rate(q[2], 0.2, 0.2)
    a_after = acceptance_rate(q[3], 0.6, 0.05)  # drifted, more lenient judge
    assert q[3] < q[2] and a_after > a_before


def test_noise_params_validation():
    with pytest.raises(ValueError, match="rho0"):
        NoiseParams(rho0=1.2, rho1=0.1, alpha=0.1, beta=0.1, pi=0.5)
    p = NoiseParams(0.364, 0.177, 0.32, 0.786, 0.7)
    assert p.youden_j == pytest.approx(0.459) and p.boundary == pytest.approx(0.2893, abs=1e-4)


def test_filter_beliefs_matches_manual_recursion():
    S = np.array([[3, 6, 8, 1], [8, 0, 4, 4]])
    b, b_minus = filter_beliefs(S, 8, 0.3, 0.2, 0.4, 0.3, 0.6)
    for i in range(2):
        prior = 0.6
        for k in range(4):
            assert b_minus[i, k] == pytest.approx(prior)
            post = brute_force_posterior(prior, int(S[i, k]), 8, 0.3, 0.2)
            assert b[i, k] == pytest.approx(post)
            prior = (1 - 0.3) * post + 0.4 * (1 - post)
