"""Belief filtering and the stopping boundary (Sec. 4.1, Eqs. 5-7; App. A "Belief Recursion").

All functions are vectorized over instances (NumPy broadcasting) and work in log space so that
rho0, rho1 equal to 0 or 1 are handled exactly. Eq. 5's likelihood is the paper's binomial (votes independent
given the plan's validity) unless the intra-plan vote correlations phi0, phi1 are given: then the votes on one
plan are exchangeable and S is beta-binomial (:func:`exchangeable_vote_log_likelihood`).
"""
from __future__ import annotations

import numpy as np
from scipy.special import expit, xlogy

from ..common import fpmath


def vote_log_likelihoods(S, M: int, rho0, rho1, phi0=None, phi1=None):
    """Log-likelihood of S accepts out of M under y=1 and under y=0, without the binomial coefficient (it
    cancels in Eq. 5).

    Returns ``(loglik_valid, loglik_invalid)``. With ``phi0`` and ``phi1`` None, the paper's independent votes:
    S log(1-rho1) + (M-S) log(rho1) and S log(rho0) + (M-S) log(1-rho0); ``xlogy`` makes 0 * log(0) = 0.
    With ``phi0`` and ``phi1`` given, exchangeable votes (:func:`exchangeable_vote_log_likelihood`): a plan of
    class c has its own acceptance rate, Beta with mean 1-rho1 (valid) or rho0 (invalid) and intra-plan vote
    correlation phi1 or phi0, so S is beta-binomial. phi = 0 is the binomial.
    """
    if (phi0 is None) != (phi1 is None):
        raise ValueError("vote_log_likelihoods: give both phi0 and phi1 (exchangeable votes) or neither (binomial)")
    if phi0 is not None:
        return (exchangeable_vote_log_likelihood(S, M, 1.0 - np.asarray(rho1, dtype=float), phi1),
                exchangeable_vote_log_likelihood(S, M, rho0, phi0))
    S = np.asarray(S, dtype=float)
    rho0 = np.asarray(rho0, dtype=float)
    rho1 = np.asarray(rho1, dtype=float)
    with np.errstate(divide="ignore"):
        ll_valid = xlogy(S, 1.0 - rho1) + xlogy(M - S, rho1)
        ll_invalid = xlogy(S, rho0) + xlogy(M - S, 1.0 - rho0)
    return ll_valid, ll_invalid


def exchangeable_vote_log_pmf(M: int, accept_mean, phi) -> np.ndarray:
    """log BetaBinomial(s; M, a, b) - log C(M, s) for every s = 0..M: the exchangeable-vote likelihood of Eq. 5
    (belief update, exchangeable-vote likelihood) for one class, as a table [..., M+1] over the broadcast shape of
    ``accept_mean`` and ``phi``.

    The plan's acceptance rate is Beta(a, b) with mean mu = a / (a + b) (``accept_mean``) and intra-plan vote
    correlation phi = 1 / (a + b + 1). With theta = phi / (1 - phi) = 1 / (a + b),

        B(s + a, M - s + b) / B(a, b) = prod_{i<s} (mu + i theta) prod_{j<M-s} (1 - mu + j theta)
                                        / prod_{t<M} (1 + t theta),

    a form that is exact at phi = 0 (the binomial mu^s (1-mu)^(M-s)) and at mu in {0, 1}, where the gamma
    functions of a and b overflow or cancel. The three products are running sums of logs from
    ``vrr.common.fpmath``, added in the order of i by ``np.cumsum`` (the same bits on every CPU). phi must lie in
    [0, 1) (not checked here: the batched fits of ``vrr.calibration.correlated`` call this inside their optimizer).
    """
    mu = np.asarray(accept_mean, dtype=float)[..., None]
    phi = np.asarray(phi, dtype=float)[..., None]
    theta = phi / (1.0 - phi)
    i_theta = np.arange(M, dtype=float) * theta
    shape = i_theta.shape[:-1]
    # running[0]: the accept products, running[1]: the reject products, each led by the empty product 0 (s = 0)
    running = np.empty((2,) + shape + (M + 1,))
    running[..., 0] = 0.0
    np.add(mu, i_theta, out=running[0, ..., 1:])
    np.add(1.0 - mu, i_theta, out=running[1, ..., 1:])
    with np.errstate(divide="ignore"):
        fpmath.log(running[..., 1:], out=running[..., 1:])
    np.cumsum(running, axis=-1, out=running)              # 0 + x is x: the same sums as without the lead
    if M:
        norm = np.cumsum(fpmath.log1p(i_theta), axis=-1)[..., -1:]
    else:
        norm = np.zeros(shape + (1,))
    out = running[0]
    out += running[1, ..., ::-1]
    out -= norm
    return out


def exchangeable_vote_log_likelihood(S, M: int, accept_mean, phi):
    """log BetaBinomial(S; M, a, b) - log C(M, S), the exchangeable-vote likelihood of Eq. 5 (belief update,
    exchangeable-vote likelihood) for one class: :func:`exchangeable_vote_log_pmf` read at the accept counts S.

    phi must lie in [0, 1) and S in 0..M; broadcasts over S, mean and phi.
    """
    phi = np.asarray(phi, dtype=float)
    if np.any(phi < 0) or np.any(phi >= 1) or np.any(np.isnan(phi)):
        raise ValueError("exchangeable_vote_log_likelihood: the vote correlation phi must lie in [0, 1)")
    counts = _vote_counts(S, M, "exchangeable_vote_log_likelihood")
    table = exchangeable_vote_log_pmf(M, accept_mean, phi)
    shape = np.broadcast_shapes(counts.shape, table.shape[:-1])
    return np.take_along_axis(np.broadcast_to(table, shape + (M + 1,)), np.broadcast_to(counts, shape)[..., None],
                              axis=-1)[..., 0]


def _vote_counts(S, M: int, caller: str) -> np.ndarray:
    """S as an index array, after checking that its accept counts are whole numbers in 0..M."""
    S = np.asarray(S)
    whole = np.issubdtype(S.dtype, np.integer) or bool(np.all(np.isfinite(S) & (S == np.round(S))))
    if not whole or np.any(S < 0) or np.any(S > M):
        raise ValueError(f"{caller}: accept counts S must be whole numbers in 0..{M}")
    return S.astype(np.intp)


def belief_update(prior, S, M: int, rho0, rho1, phi0=None, phi1=None):
    """Observation update, Eq. 5 (belief update).

    b_k = b^- (1-rho1)^S rho1^(M-S) / [b^- (1-rho1)^S rho1^(M-S) + (1-b^-) rho0^S (1-rho0)^(M-S)].

    With ``phi0``, ``phi1`` the exchangeable-vote likelihood replaces the binomial one (Eq. 5, belief update,
    exchangeable-vote likelihood; :func:`vote_log_likelihoods`). Computed as a logistic of the log-odds. If the
    votes are impossible under both classes (e.g. rho0 = 0 and rho1 = 1 with 0 < S < M) the observation carries
    no usable evidence and the prior is returned unchanged.
    """
    return posterior_from_log_likelihoods(prior, *vote_log_likelihoods(S, M, rho0, rho1, phi0, phi1))


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


def filter_beliefs(S, M: int, rho0, rho1, alpha, beta, pi, phi0=None, phi1=None):
    """Run the update-predict recursion over a whole frozen trajectory: Eq. 5 and the predict step of Sec. 4.1
    (the b_{k+1}^- of Eq. 6).

    ``phi0``, ``phi1``: Eq. 5 with the exchangeable-vote likelihood (:func:`vote_log_likelihoods`); None, the
    paper's binomial.

    ``S`` has shape [N, K+1]; parameters broadcast against [N] (per-instance parameters, as
    under cross-fitting, are arrays of length N). ``alpha`` and ``beta`` may also be [N, K+1]
    (round-dependent alpha_t, beta_t, see :func:`per_round`). Returns ``(b, b_minus)``, both [N, K+1]:
    the posterior b_k after round k's votes and the predictive belief b_k^- before them,
    assuming repair happened before every round k >= 1 (the frozen protocol).
    """
    S = _vote_counts(S, M, "filter_beliefs")
    n, rounds = S.shape
    if phi0 is None and phi1 is None:
        def log_likelihoods(k):
            return vote_log_likelihoods(S[:, k], M, rho0, rho1)
    else:
        # the exchangeable-vote tables depend on the parameters, not the round: built once ([M+1, N] per class),
        # read at each round's counts
        tables = [np.broadcast_to(t, (M + 1, n))
                  for t in vote_log_likelihoods(np.arange(M + 1)[:, None], M, rho0, rho1, phi0, phi1)]

        def log_likelihoods(k):
            return [np.take_along_axis(t, S[None, :, k], axis=0)[0] for t in tables]
    b = np.empty((n, rounds))
    b_minus = np.empty((n, rounds))
    prior = np.broadcast_to(np.asarray(pi, dtype=float), (n,)).astype(float)
    for k in range(rounds):
        b_minus[:, k] = prior
        b[:, k] = posterior_from_log_likelihoods(prior, *log_likelihoods(k))
        prior = predict(b[:, k], per_round(alpha, n, rounds, k), per_round(beta, n, rounds, k))
    return b, b_minus
