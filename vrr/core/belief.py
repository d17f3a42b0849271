"""Belief filtering and the stopping boundary (Sec. 4.1, Eqs. 5-7; App. A "Belief Recursion").

All functions are vectorized over instances (NumPy broadcasting) and work in log space so that
rho0, rho1 equal to 0 or 1 are handled exactly.
"""
from __future__ import annotations

import numpy as np
from scipy.special import expit, xlogy

from ..common import fpmath


def vote_log_likelihoods(S, M: int, rho0, rho1):
    """Log-likelihood of S accepts out of M under y=1 and under y=0, without the binomial
    coefficient (it cancels in Eq. 5).

    Returns ``(loglik_valid, loglik_invalid)``: S log(1-rho1) + (M-S) log(rho1) and
    S log(rho0) + (M-S) log(1-rho0). ``xlogy`` makes 0 * log(0) = 0.
    """
    S = np.asarray(S, dtype=float)
    rho0 = np.asarray(rho0, dtype=float)
    rho1 = np.asarray(rho1, dtype=float)
    with np.errstate(divide="ignore"):
        ll_valid = xlogy(S, 1.0 - rho1) + xlogy(M - S, rho1)
        ll_invalid = xlogy(S, rho0) + xlogy(M - S, 1.0 - rho0)
    return ll_valid, ll_invalid


def belief_update(prior, S, M: int, rho0, rho1):
    """Observation update, Eq. 5 (belief update).

    b_k = b^- (1-rho1)^S rho1^(M-S) / [b^- (1-rho1)^S rho1^(M-S) + (1-b^-) rho0^S (1-rho0)^(M-S)].

    Computed as a logistic of the log-odds. If the votes are impossible under both classes
    (e.g. rho0 = 0 and rho1 = 1 with 0 < S < M) the observation carries no usable evidence and
    the prior is returned unchanged.
    """
    return posterior_from_log_likelihoods(prior, *vote_log_likelihoods(S, M, rho0, rho1))


def posterior_from_log_likelihoods(prior, ll_valid, ll_invalid):
    """Eq. 5 (belief update) given the vote log-likelihoods of :func:`vote_log_likelihoods`, so that a
    caller filtering many parameter points that share (rho0, rho1) computes them once."""
    prior = np.asarray(prior, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        log_num = fpmath.log(prior) + ll_valid
        log_alt = fpmath.log1p(-prior) + ll_invalid
        log_odds = log_num - log_alt
        post = expit(log_odds)
    both_impossible = np.isneginf(log_num) & np.isneginf(log_alt)
    post = np.where(both_impossible, prior, post)
    return post if post.ndim else float(post)


def predict(belief, alpha, beta):
    """Predict step after one repair: b^-_{k+1} = (1 - beta) b_k + alpha (1 - b_k) (Sec. 4.1)."""
    belief = np.asarray(belief, dtype=float)
    out = (1.0 - beta) * belief + alpha * (1.0 - belief)
    return out if np.ndim(out) else float(out)


def gain(belief, alpha, beta):
    """One-step marginal gain of repairing, Eq. 6 (gated gain): G_k = (1 - b_k) alpha - b_k beta."""
    belief = np.asarray(belief, dtype=float)
    out = (1.0 - belief) * alpha - belief * beta
    return out if np.ndim(out) else float(out)


def boundary(alpha, beta, tau: float = 0.0):
    """Stopping boundary, Eq. 7: b* = alpha/(alpha+beta); with threshold tau, b*_tau = (alpha-tau)/(alpha+beta).

    G_k > tau  <=>  b_k < b*_tau. NaN where alpha + beta = 0 (G is then identically 0).
    """
    alpha = np.asarray(alpha, dtype=float)
    beta = np.asarray(beta, dtype=float)
    total = alpha + beta
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where(total > 0, (alpha - tau) / np.where(total > 0, total, 1.0), np.nan)
    return out if out.ndim else float(out)


def should_repair(belief, alpha, beta, tau: float = 0.0):
    """Stopping rule of Sec. 4.1, Eq. 4 with the gain of Eq. 6 (boundary Eq. 7): repair iff G_k > tau; never
    repair when alpha <= tau.

    (When alpha <= tau, G_k <= alpha <= tau for every belief, so the explicit rule and the sign
    rule agree; both are stated for clarity.)
    """
    g = gain(belief, alpha, beta)
    out = (np.asarray(g) > tau) & (np.asarray(alpha) > tau)
    return out if np.ndim(out) else bool(out)


def per_round(param, n: int, rounds: int, k: int):
    """Column k of a parameter given per instance ([N] or scalar) or per round and instance ([N, K+1]).

    Round-dependent repair rates alpha_t, beta_t are [N, K+1] arrays whose column k holds the rates of
    the repair that follows round k (the last column is never used for a prediction).
    """
    param = np.asarray(param, dtype=float)
    if param.ndim == 2:
        if param.shape != (n, rounds):
            raise ValueError(f"a per-round parameter must have shape {(n, rounds)}, got {param.shape}")
        return param[:, k]
    return param


def filter_beliefs(S, M: int, rho0, rho1, alpha, beta, pi):
    """Run the update-predict recursion over a whole frozen trajectory: Eq. 5 and the predict step of Sec. 4.1
    (the b_{k+1}^- of Eq. 6).

    ``S`` has shape [N, K+1]; parameters broadcast against [N] (per-instance parameters, as
    under cross-fitting, are arrays of length N). ``alpha`` and ``beta`` may also be [N, K+1]
    (round-dependent alpha_t, beta_t, see :func:`per_round`). Returns ``(b, b_minus)``, both [N, K+1]:
    the posterior b_k after round k's votes and the predictive belief b_k^- before them,
    assuming repair happened before every round k >= 1 (the frozen protocol).
    """
    S = np.asarray(S)
    n, rounds = S.shape
    b = np.empty((n, rounds))
    b_minus = np.empty((n, rounds))
    prior = np.broadcast_to(np.asarray(pi, dtype=float), (n,)).astype(float)
    for k in range(rounds):
        b_minus[:, k] = prior
        b[:, k] = belief_update(prior, S[:, k], M, rho0, rho1)
        prior = predict(b[:, k], per_round(alpha, n, rounds, k), per_round(beta, n, rounds, k))
    return b, b_minus
