"""The vote noise (rho0, rho1) by prediction-powered inference (PPI++; Angelopoulos, Duchi and Zrnic,
arXiv 2311.01453), with the label-free EM's posterior as the predictor (Sec. 4.2, Eq. 5's rates).

rho1 and rho0 are ratios of population means over a window's first plans:

    rho1 = E[y (1 - S/M)] / E[y],        rho0 = E[(1 - y) S/M] / E[1 - y],

which a labeled sample estimates without bias but with few plans. The label-free binomial-mixture EM gives every
plan a posterior r(S) = P(valid | S) (App. A, "Calibration Estimators"), so the window's unlabeled plans predict the
four means through r; PPI++ corrects the prediction with the labeled probe:

    theta_j = lam_j mean_unlabeled(Yhat_j) + mean_labeled(Y_j - lam_j Yhat_j),
    lam_j = clip( Cov_n(Y_j, Yhat_j) / ((1 + n/N) Var(Yhat_j over labeled and unlabeled)), 0, 1 ),

the power tuning per coordinate that ``ppi_py.ppi_mean_pointestimate(lam=None, lam_optim_mode="element")`` computes
(Angelopoulos et al., PPI++, mean estimation; ``tests/test_algorithm1_deployed.py`` checks the two agree): lam = 0 is
the labeled estimate alone, lam = 1 plain PPI. It is written out here on histograms because importing ``ppi_py``
(numba, pandas, scikit-learn) costs seconds in every notebook kernel. The probe's plans carry ``probe_M`` votes and the
window's M: the probe's prediction is r averaged over the hypergeometric thinning of its votes to M (the count of M
votes drawn without replacement from its ``probe_M``), so predictor and window speak of the same M-vote count,
while its label terms use all ``probe_M`` votes.

Each mean is evaluated on accept-count histograms (the probe's per class, the window's), so the cost does not grow
with the number of plans.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from .mixture import _responsibilities


@dataclass(frozen=True)
class PPIFit:
    """The PPI++ rates with what is behind them."""

    rho0: float
    rho1: float
    lam: tuple[float, float, float, float]   # per mean: valid share, valid rejects, invalid share, invalid accepts
    n_labeled: int
    n_unlabeled: int
    method: str = "ppi"


def em_posterior(M: int, rho0: float, rho1: float, weight_valid: float) -> np.ndarray:
    """r(s) = P(valid | s accepts of M) under the binomial mixture w Bin(M, 1 - rho1) + (1 - w) Bin(M, rho0)
    (Eq. 5 with prior w), for s = 0..M: the label-free EM's responsibilities (``vrr.calibration.mixture``)."""
    return _responsibilities(M, weight_valid, 1.0 - rho1, rho0)


@lru_cache(maxsize=16)
def _thinning(M: int, probe_M: int) -> np.ndarray:
    """P(m of M votes drawn without replacement from probe_M accept | s accepts), [probe_M + 1, M + 1]
    (hypergeometric); read-only, shared by every call with the same vote counts."""
    total = math.comb(probe_M, M)   # exact integer counts: the same float on every CPU
    thin = np.array([[math.comb(s, m) * math.comb(probe_M - s, M - m) / total for m in range(M + 1)]
                     for s in range(probe_M + 1)])
    thin.setflags(write=False)
    return thin


def _predictions(r: np.ndarray, M: int) -> np.ndarray:
    """The four predicted quantities of an M-vote count s: [r, r (1 - s/M), 1 - r, (1 - r) s/M], [M+1, 4]."""
    s = np.arange(M + 1) / M
    return np.stack([r, r * (1 - s), 1 - r, (1 - r) * s], axis=1)


def _weighted_moments(values: np.ndarray, weights: np.ndarray) -> tuple[float, float]:
    """(sum of weights, weighted sum) by math.fsum: exact-rounded, the same on every CPU."""
    return math.fsum(weights), math.fsum(weights * values)


def ppi_means(labels: np.ndarray, pred_labeled: np.ndarray, pred_unlabeled: np.ndarray, w_labeled: np.ndarray,
              w_unlabeled: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """PPI++ means with lam tuned per coordinate (module docstring) from weighted rows: ``labels`` and
    ``pred_labeled`` [L, d] with counts ``w_labeled`` [L], ``pred_unlabeled`` [U, d] with counts ``w_unlabeled``
    [U] (a histogram's cells). Returns (theta [d], lam [d])."""
    n, _ = _weighted_moments(np.zeros(len(w_labeled)), w_labeled)
    N, _ = _weighted_moments(np.zeros(len(w_unlabeled)), w_unlabeled)
    d = labels.shape[1]
    theta, lam = np.empty(d), np.empty(d)
    for j in range(d):
        y, f, fu = labels[:, j], pred_labeled[:, j], pred_unlabeled[:, j]
        my = math.fsum(w_labeled * y) / n
        mf = math.fsum(w_labeled * f) / n
        mfu = math.fsum(w_unlabeled * fu) / N
        cov = math.fsum(w_labeled * (y - my) * (f - mf)) / n
        pooled = (math.fsum(w_labeled * f) + math.fsum(w_unlabeled * fu)) / (n + N)
        var = (math.fsum(w_labeled * (f - pooled) ** 2) + math.fsum(w_unlabeled * (fu - pooled) ** 2)) / (n + N - 1)
        lam[j] = min(max(cov / ((1.0 + n / N) * var), 0.0), 1.0) if var > 0 else 0.0
        theta[j] = lam[j] * mfu + my - lam[j] * mf
    return theta, lam


def ppi_rates(S_unlabeled, M: int, probe_S, probe_y, probe_M: int, em: tuple[float, float, float]) -> PPIFit:
    """(rho0, rho1) of the module docstring: ``S_unlabeled`` the window's first-plan accept counts (M votes),
    ``probe_S``/``probe_y`` the labeled probe (``probe_M`` votes), ``em`` the label-free EM's (rho0, rho1, w) on
    the window."""
    S_u = np.asarray(S_unlabeled, dtype=np.int64).ravel()
    S_p = np.asarray(probe_S, dtype=np.int64).ravel()
    y_p = np.asarray(probe_y).ravel()
    if S_p.shape != y_p.shape or not np.isin(y_p, (0, 1)).all():
        raise ValueError("ppi_rates: probe_S and probe_y must pair up, with labels 0 or 1")
    if probe_M < M:
        raise ValueError(f"ppi_rates: the probe's {probe_M} votes cannot be thinned to the window's {M}")
    if S_p.size and (S_p.min() < 0 or S_p.max() > probe_M):
        raise ValueError(f"ppi_rates: a probe count lies outside 0..{probe_M} (the probe's votes per plan)")
    if min(int(y_p.sum()), int((1 - y_p).sum())) < 2:
        raise ValueError("ppi_rates: the probe needs >= 2 labeled plans of each class")
    r = em_posterior(M, *em)
    pred = _predictions(r, M)                                     # [M+1, 4] for an M-vote count
    thin = _thinning(M, int(probe_M))
    pred_probe = np.stack([np.sum(thin * pred[:, j][None, :], axis=1) for j in range(4)], axis=1)  # no BLAS
    # the labeled cells: (class, probe count) with their numbers of plans, in (class, count) order; the unlabeled
    # cells: the window's counts
    per_cell = np.bincount(y_p.astype(np.int64) * (probe_M + 1) + S_p, minlength=2 * (probe_M + 1))
    keys = np.flatnonzero(per_cell)
    w_lab = per_cell[keys]
    cls, cnt = (keys // (probe_M + 1)).astype(float), keys % (probe_M + 1)
    frac = cnt / probe_M
    labels = np.stack([cls, cls * (1 - frac), 1 - cls, (1 - cls) * frac], axis=1)
    w_unl = np.bincount(S_u, minlength=M + 1).astype(float)
    theta, lam = ppi_means(labels, pred_probe[cnt], pred, w_lab.astype(float), w_unl)
    rho1 = float(np.clip(theta[1] / theta[0], 0.0, 1.0)) if theta[0] > 0 else float("nan")
    rho0 = float(np.clip(theta[3] / theta[2], 0.0, 1.0)) if theta[2] > 0 else float("nan")
    return PPIFit(rho0, rho1, tuple(float(v) for v in lam), int(S_p.size), int(S_u.size))


def ppi_vote_fit(S_unlabeled, M: int, probe_S, probe_y, probe_M: int, em) -> "VoteNoiseFit":  # noqa: F821
    """The vote-noise fit of calibration method ``ppi`` (the default where a window has a labeled probe): the PPI++
    (rho0, rho1) of :func:`ppi_rates`, with ``em`` (a label-free ``binomial_em`` fit to ``S_unlabeled``) as the
    predictor and its weight of valid plans kept."""
    from .mixture import VoteNoiseFit

    rates = ppi_rates(S_unlabeled, M, probe_S, probe_y, probe_M, (em.rho0, em.rho1, em.weight_valid))
    return VoteNoiseFit(rates.rho0, rates.rho1, em.weight_valid, method="ppi")
