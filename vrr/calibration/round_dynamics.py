"""Round-dependent repair dynamics alpha_t, beta_t (App. "Extended discussion": the future work on
round-dependent alpha_t and beta_t; Sec. 3, Q_{t+1} = Q_t (1 - beta_t) + (1 - Q_t) alpha_t).

The paper estimates alpha, beta once, from the labeled first-round pairs (y_0, y_1). The frozen protocol
repairs every round, so the same labeled calibration trajectories also give the pairs (y_t, y_{t+1}) of
every later round t. Each round's counts are few, so the estimate of round t is shrunk toward the pooled
first-round estimate (alpha-hat, beta-hat of :func:`vrr.calibration.calibrate`):

    alpha_t = (k_t + kappa * alpha_hat) / (n_t + kappa),

the posterior mean of alpha_t under the prior Beta(kappa alpha_hat, kappa (1 - alpha_hat)) with k_t fixes
among n_t invalid plans of round t (beta_t likewise from the breaks among valid plans). The prior strength
kappa is chosen by empirical Bayes: it maximizes the beta-binomial marginal likelihood of the per-round
counts, sum_t log BetaBinom(k_t | n_t, kappa alpha_hat, kappa (1 - alpha_hat)), over a log grid
(:data:`KAPPA_GRID`). Rounds that look alike drive kappa to the top of the grid (full pooling: VRR-Stop's
stationary rates); a round whose repair behaves differently (the non-stationary diagnostic's perturbation
from round 3) drives kappa down, and that round gets its own rate. Everything is fit on the calibration
folds only (:func:`crossfit_round_rates`), on the same <= 300 labeled trajectories as alpha-hat, beta-hat.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from scipy import special

from ..common import fpmath
from .estimators import CrossFit, labeled_subset

# 1 .. 10^4 in 32 log steps, and "full pooling"; Python's power (the C library's pow), not numpy's per-CPU loops
KAPPA_GRID = np.array([10.0 ** (k / 8) for k in range(33)] + [1e6])


@dataclass(frozen=True)
class RoundRates:
    """Per-round repair rates of one calibration sample; element t is the repair after round t."""

    alpha: np.ndarray           # [K]
    beta: np.ndarray            # [K]
    kappa_alpha: float
    kappa_beta: float
    center_alpha: float         # the pooled first-round estimates they are shrunk toward
    center_beta: float
    n_fixed: np.ndarray         # [K] labeled counts per round
    n_invalid_before: np.ndarray
    n_broken: np.ndarray
    n_valid_before: np.ndarray

    def as_dict(self) -> dict:
        return {k: (v.tolist() if isinstance(v, np.ndarray) else float(v)) for k, v in self.__dict__.items()}


def round_transition_counts(y) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Labeled transitions of every round t -> t+1 of trajectories ``y`` [n, K+1] (every round repaired):
    (fixes, invalid before, breaks, valid before), each [K]."""
    y = np.asarray(y).astype(bool)
    before, after = y[:, :-1], y[:, 1:]
    return ((~before & after).sum(0), (~before).sum(0), (before & ~after).sum(0), before.sum(0))


def betabinom_logpmf(k, n, a, b) -> np.ndarray:
    """log BetaBinom(k | n, a, b) = log C(n, k) + log B(k + a, n - k + b) - log B(a, b), scipy.stats.betabinom's
    formula with its one numpy logarithm taken through :mod:`vrr.common.fpmath` (the same on every CPU)."""
    k, n = np.asarray(k, dtype=float), np.asarray(n, dtype=float)
    log_comb = -fpmath.log(n + 1) - special.betaln(n - k + 1, k + 1)
    return log_comb + special.betaln(k + a, n - k + b) - special.betaln(a, b)


def shrinkage_strength(k, n, center: float, grid=KAPPA_GRID) -> float:
    """Empirical-Bayes prior strength kappa: the grid value maximizing the beta-binomial marginal
    likelihood sum_t log BetaBinom(k_t | n_t, kappa c, kappa (1 - c)) of the per-round counts (ties to the
    larger kappa, i.e. toward pooling). The centre is clipped to [1e-6, 1 - 1e-6] for the likelihood."""
    k, n = np.asarray(k), np.asarray(n)
    c = float(np.clip(center, 1e-6, 1.0 - 1e-6))
    grid = np.asarray(grid, dtype=float)
    ll = np.array([np.sum(betabinom_logpmf(k, n, kappa * c, kappa * (1.0 - c))) for kappa in grid])
    best = np.flatnonzero(ll >= ll.max() - 1e-9)
    return float(grid[best.max()])


def shrunk_rate(k, n, center: float, kappa: float) -> np.ndarray:
    """Posterior mean (k_t + kappa c) / (n_t + kappa) of each round's rate under Beta(kappa c, kappa (1 - c))."""
    return (np.asarray(k, dtype=float) + kappa * center) / (np.asarray(n, dtype=float) + kappa)


def round_rates(y, center_alpha: float, center_beta: float, max_pairs: int | None = 300, seed: int = 0,
                kappa: float | None = None) -> RoundRates:
    """alpha_t, beta_t of one calibration sample ``y`` [n, K+1], shrunk toward (``center_alpha``,
    ``center_beta``), the pooled first-round estimates. Uses the labeled trajectories
    :func:`labeled_subset` picks (the same <= ``max_pairs`` as alpha-hat, beta-hat with the same
    ``seed``). ``kappa``: a fixed prior strength for both rates; ``None`` chooses each by empirical Bayes."""
    y = np.asarray(y)
    y = y[labeled_subset(y.shape[0], max_pairs, seed)]
    fixed, invalid, broken, valid = round_transition_counts(y)
    ka = shrinkage_strength(fixed, invalid, center_alpha) if kappa is None else float(kappa)
    kb = shrinkage_strength(broken, valid, center_beta) if kappa is None else float(kappa)
    return RoundRates(shrunk_rate(fixed, invalid, center_alpha, ka), shrunk_rate(broken, valid, center_beta, kb),
                      ka, kb, float(center_alpha), float(center_beta), fixed, invalid, broken, valid)


def crossfit_round_rates(y, cf: CrossFit, max_pairs: int | None = 300, seed: int = 0,
                         kappa: float | None = None) -> tuple[np.ndarray, np.ndarray, list[RoundRates]]:
    """Cross-fitted alpha_t, beta_t (App. B protocol): instance i gets the rates fit on the other folds,
    shrunk toward its fold's pooled alpha-hat, beta-hat (``cf``). Returns (alpha, beta) as [N, K+1] arrays
    for :func:`vrr.policies.rules.vrr_stop` (column t: the repair after round t; the last column repeats
    the last rate and is never used) and the per-fold fits. ``seed`` is the cross-fit seed (fold f's
    labeled subset uses seed + f, as :func:`vrr.calibration.crossfit` does)."""
    y = np.asarray(y)
    n, rounds = y.shape
    fits = []
    alpha = np.empty((n, rounds))
    beta = np.empty((n, rounds))
    for f, cal in enumerate(cf.fits):
        train = cf.folds != f
        fit = round_rates(y[train], cal.params.alpha, cal.params.beta, max_pairs=max_pairs, seed=seed + f,
                          kappa=kappa)
        fits.append(fit)
        rows = cf.folds == f
        alpha[rows] = np.append(fit.alpha, fit.alpha[-1])
        beta[rows] = np.append(fit.beta, fit.beta[-1])
    return alpha, beta, fits
