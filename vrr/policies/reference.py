"""Plain per-instance Python versions of the policies (App. A), written as literally as the
paper states them. They are the oracle the vectorized ``vrr.policies`` are tested against and
the baseline of ``scripts/bench_replay.py``; do not use them for analysis.
"""
from __future__ import annotations

import math


def _update(prior, s, M, rho0, rho1):
    """Eq. 5 by direct Bayes with binomial likelihoods."""
    num = prior * math.comb(M, s) * (1 - rho1) ** s * rho1 ** (M - s)
    den = num + (1 - prior) * math.comb(M, s) * rho0 ** s * (1 - rho0) ** (M - s)
    return prior if den == 0 else num / den


def vrr_stop_one(S_row, M, rho0, rho1, alpha, beta, pi, tau=0.0):
    """Returns (committed round, repair rounds used) for one trajectory."""
    prior = pi
    k_max = len(S_row) - 1
    for k, s in enumerate(S_row):
        b = _update(prior, s, M, rho0, rho1)
        g = (1 - b) * alpha - b * beta
        if alpha <= tau or g <= tau or k == k_max:
            return k, k
        prior = (1 - beta) * b + alpha * (1 - b)
    raise AssertionError("unreachable")


def first_accepted_one(S_row, M, threshold_fraction=None):
    k_max = len(S_row) - 1
    for k, s in enumerate(S_row):
        ok = (s / M >= threshold_fraction) if threshold_fraction is not None else (s > M / 2)
        if ok:
            return k, k
    return k_max, k_max


def last_accepted_one(S_row, M):
    last = 0
    for k, s in enumerate(S_row):
        if s > M / 2:
            last = k
    return last, len(S_row) - 1


def verifier_best_one(S_row):
    best = 0
    for k, s in enumerate(S_row):
        if s > S_row[best]:
            best = k
    return best, len(S_row) - 1


def guard_one(S_row, delta):
    c, s_c = 0, S_row[0]
    for k in range(1, len(S_row)):
        if S_row[k] >= s_c + delta:
            c, s_c = k, S_row[k]
    return c, len(S_row) - 1


def hindsight_one(y_row):
    for k, v in enumerate(y_row):
        if v:
            return k, len(y_row) - 1
    return 0, len(y_row) - 1
