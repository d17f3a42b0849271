"""VRR-Guard: guarded keep-best fallback (Sec. 4.3, Eq. 9, Lemma 1; App. A "Proof of Lemma 1")."""
from __future__ import annotations

import math

import numpy as np


def keep_best_step(best_round, best_votes, k: int, S_k, delta: int):
    """One round of the retention rule, Eq. 9 (guarded keep-best): the incumbent after round k.

    c_k = p_k if S(p_k) >= S(c_{k-1}) + delta, else c_{k-1}. ``best_round``, ``best_votes`` are the
    incumbent's round and vote count before round k (scalars or per-instance arrays); returns the
    updated ``(best_round, best_votes)``. :func:`keep_best` and the online controller
    (``vrr.policies.online``) both step with it.
    """
    replace = np.asarray(S_k) >= np.asarray(best_votes) + delta
    best_round = np.where(replace, k, best_round)
    best_votes = np.where(replace, S_k, best_votes)
    if best_round.ndim == 0:
        return int(best_round), int(best_votes)
    return best_round, best_votes


def keep_best(S, delta: int) -> np.ndarray:
    """Incumbent round after each round under the retention rule, Eq. 9 (guarded keep-best).

    c_0 = p_0; c_k = p_k if S(p_k) >= S(c_{k-1}) + delta, else c_{k-1}.
    ``S`` is [N, K+1]; returns the incumbent's round index, shape [N, K+1]. Column K is the
    plan VRR-Guard commits after a full budget.
    """
    S = np.asarray(S)
    n, rounds = S.shape
    incumbent = np.zeros((n, rounds), dtype=np.int64)
    best_round = np.zeros(n, dtype=np.int64)
    best_votes = S[:, 0].astype(np.int64)
    for k in range(1, rounds):
        best_round, best_votes = keep_best_step(best_round, best_votes, k, S[:, k], delta)
        incumbent[:, k] = best_round
    return incumbent


def replacement_tail_exact(M: int, rho0: float, rho1: float, delta: int) -> float:
    """Exact erroneous-replacement probability P[S(p) - S(c) >= delta] (App. A, Lemma 1).

    S(p) ~ Bin(M, rho0) for an invalid new plan, S(c) ~ Bin(M, 1 - rho1) for a valid
    incumbent, independent: the finite sum over i - j >= delta of P[S(p)=i] P[S(c)=j].
    """
    k = np.arange(M + 1)
    from scipy import stats  # imported on use: importing scipy.stats costs ~1 s of CPU in every notebook kernel

    p_new = stats.binom.pmf(k, M, rho0)
    p_inc = stats.binom.pmf(k, M, 1.0 - rho1)
    diff = k[:, None] - k[None, :]
    return float(np.sum(np.outer(p_new, p_inc)[diff >= delta]))


def hoeffding_bound(M: int, j: float, delta: float) -> float:
    """Lemma 1 single-round bound exp(-(M J + delta)^2 / (2M)), valid for J >= 0."""
    if j < 0:
        raise ValueError("Lemma 1 assumes J >= 0")
    return math.exp(-((M * j + delta) ** 2) / (2.0 * M))


def union_bound(M: int, j: float, delta: float, k_max: int) -> float:
    """Lemma 1 over K_max rounds: at most K_max times the single-round bound (capped at 1)."""
    return min(1.0, k_max * hoeffding_bound(M, j, delta))


def union_bound_exact(M: int, rho0: float, rho1: float, delta: int, k_max: int) -> float:
    """K_max times the exact single-round tail (capped at 1): the paper's 'five-round union bound'."""
    return min(1.0, k_max * replacement_tail_exact(M, rho0, rho1, delta))
