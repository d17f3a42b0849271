"""Semi-supervised binomial-mixture EM for the vote noise (rho0, rho1) (Sec. 4.2, App. A "Calibration Estimators").

The paper's estimator fits S ~ pi Bin(M, 1 - rho1) + (1 - pi) Bin(M, rho0) to unlabeled accept counts. Every
window also has a labeled probe (plans with their validity known, ``probe_M`` votes each). Here both enter one
likelihood: an unlabeled plan contributes the mixture term, a labeled plan the binomial term of its own class,

    l(w, p1, p0) = sum_unlabeled log[w Bin(S; M, p1) + (1 - w) Bin(S; M, p0)]
                 + sum_labeled-valid log Bin(S; M_l, p1) + sum_labeled-invalid log Bin(S; M_l, p0),

with p1 = 1 - rho1, p0 = rho0, and the mixture weight w the valid share of the unlabeled population only (the probe
has its own class mix). EM's E-step gives each unlabeled count value its responsibility of the valid class; the
M-step pools responsibility-weighted accepts with the labeled accepts of each class. The labeled terms pin the
component labels (no "higher acceptance = valid" convention is needed) and keep the two rates where the labels put
them when the unlabeled counts alone would let one component absorb the spread of over-dispersed votes.

Everything runs on sufficient statistics: the unlabeled counts' histogram, and per labeled class its accepts and
votes. The chains of many samples (a bootstrap) iterate together, each exactly as it would alone.
"""
from __future__ import annotations

import numpy as np
from scipy import special

from ..common import fpmath
from ._memo import memoized

EPS = 1e-12


def labeled_vote_stats(S, y, M: int) -> np.ndarray:
    """(accepts on valid plans, votes on valid plans, accepts on invalid plans, votes on invalid plans) of a
    labeled sample: the labeled part's sufficient statistics."""
    S = np.asarray(S, dtype=float).ravel()
    y = np.asarray(y).ravel().astype(bool)
    if S.shape != y.shape:
        raise ValueError(f"labeled_vote_stats: {S.size} vote counts but {y.size} labels")
    return np.array([S[y].sum(), float(M * y.sum()), S[~y].sum(), float(M * (~y).sum())])


def _log_comb(M: int) -> np.ndarray:
    s = np.arange(M + 1, dtype=float)
    return special.gammaln(M + 1) - special.gammaln(s + 1) - special.gammaln(M - s + 1)


def _loglik(h, M: int, lab, w, p1, p0) -> np.ndarray:
    """The semi-supervised log-likelihood (module docstring) of each chain; h [C, M+1], lab [C, 4], w/p1/p0 [C]."""
    s = np.arange(M + 1, dtype=float)
    lc = _log_comb(M)
    lv = fpmath.log(w)[:, None] + lc + s * fpmath.log(p1)[:, None] + (M - s) * fpmath.log1p(-p1)[:, None]
    li = fpmath.log1p(-w)[:, None] + lc + s * fpmath.log(p0)[:, None] + (M - s) * fpmath.log1p(-p0)[:, None]
    mix = np.where(h > 0, h * np.logaddexp(lv, li), 0.0).sum(axis=-1)
    a1, v1, a0, v0 = lab[:, 0], lab[:, 1], lab[:, 2], lab[:, 3]
    labeled = (special.xlogy(a1, p1) + special.xlogy(v1 - a1, 1 - p1)
               + special.xlogy(a0, p0) + special.xlogy(v0 - a0, 1 - p0))
    return mix + labeled


def _step(h, M: int, lab, w, p1, p0):
    """One EM iteration for chains [C]: returns (w, p1, p0) after the E- and M-step."""
    s = np.arange(M + 1, dtype=float)
    lc = _log_comb(M)
    lv = fpmath.log(w)[:, None] + lc + s * fpmath.log(p1)[:, None] + (M - s) * fpmath.log1p(-p1)[:, None]
    li = fpmath.log1p(-w)[:, None] + lc + s * fpmath.log(p0)[:, None] + (M - s) * fpmath.log1p(-p0)[:, None]
    resp = fpmath.exp(lv - np.logaddexp(lv, li))            # P(valid | S = s), per count value
    n_u = h.sum(axis=-1)
    nv = (resp * h).sum(axis=-1)
    accepts_v = (resp * s * h).sum(axis=-1)
    accepts_u = (s * h).sum(axis=-1)
    a1, v1, a0, v0 = lab[:, 0], lab[:, 1], lab[:, 2], lab[:, 3]
    votes_v = M * nv + v1
    votes_i = M * (n_u - nv) + v0
    p1_new = np.where(votes_v > EPS, (accepts_v + a1) / np.maximum(votes_v, EPS), p1)
    p0_new = np.where(votes_i > EPS, (accepts_u - accepts_v + a0) / np.maximum(votes_i, EPS), p0)
    w_new = np.where(n_u > 0, nv / np.maximum(n_u, EPS), w)
    clip = lambda x: np.clip(x, EPS, 1 - EPS)  # noqa: E731
    return clip(w_new), clip(p1_new), clip(p0_new)


def _starts(hists, M: int, lab, n_restarts: int, seed):
    """[H, R, 3] starting (w, p1, p0): the labeled rates (the moment weight from the unlabeled mean), then
    ``n_restarts - 1`` seeded uniform starts (``seed``: one for every histogram, or one per histogram)."""
    hists = np.asarray(hists, dtype=float)
    a1, v1, a0, v0 = (lab[:, i] for i in range(4))
    p1 = np.clip(np.where(v1 > 0, (a1 + 0.5) / (v1 + 1.0), 0.75), 0.02, 0.98)
    p0 = np.clip(np.where(v0 > 0, (a0 + 0.5) / (v0 + 1.0), 0.25), 0.02, 0.98)
    n_u = hists.sum(axis=1)
    mean = np.where(n_u > 0, (hists * np.arange(M + 1)).sum(axis=1) / (M * np.maximum(n_u, 1)), 0.5)
    gap = np.where(np.abs(p1 - p0) > 1e-3, p1 - p0, 1e-3)
    w = np.clip((mean - p0) / gap, 0.05, 0.95)
    first = np.stack([w, p1, p0], axis=1)[:, None, :]
    if n_restarts <= 1:
        return first
    draw = lambda x: np.random.default_rng(x).uniform([0.1, 0.05, 0.05], [0.9, 0.95, 0.95],  # noqa: E731
                                                      size=(n_restarts - 1, 3))
    if np.ndim(seed) == 0:
        rest = np.broadcast_to(draw(seed), (hists.shape[0], n_restarts - 1, 3))
    else:
        per_seed = {int(x): draw(int(x)) for x in dict.fromkeys(seed)}
        rest = np.stack([per_seed[int(x)] for x in seed])
    return np.concatenate([first, rest], axis=1)


def semisupervised_em_many(hists, M: int, lab, n_restarts: int = 4, seed=0, tol: float = 1e-10,
                           max_iter: int = 2000) -> dict[str, np.ndarray]:
    """:func:`semisupervised_em` for many samples at once: ``hists`` [H, M+1] unlabeled count histograms,
    ``lab`` [H, 4] labeled statistics (:func:`labeled_vote_stats`), ``seed`` the starts' seed of every sample or a
    list of one per sample. Returns {"rho0", "rho1", "weight_valid", "loglik", "n_iter", "converged"}, each [H], from
    the restart with the highest log-likelihood."""
    hists = np.atleast_2d(np.asarray(hists, dtype=float))
    lab = np.atleast_2d(np.asarray(lab, dtype=float))
    if hists.shape[0] != lab.shape[0]:
        raise ValueError(f"semisupervised_em: {hists.shape[0]} histograms but {lab.shape[0]} labeled samples")
    n_h = hists.shape[0]
    starts = _starts(hists, M, lab, n_restarts, seed)                   # [H, R, 3]
    R = starts.shape[1]
    h = np.repeat(hists, R, axis=0)
    lb = np.repeat(lab, R, axis=0)
    w, p1, p0 = (starts[:, :, i].ravel().copy() for i in range(3))
    n_chains = w.size
    ll = np.full(n_chains, -np.inf)
    n_iter = np.zeros(n_chains, dtype=np.int64)
    done = np.zeros(n_chains, dtype=bool)
    for it in range(1, max_iter + 1):
        run = ~done
        cur = _loglik(h[run], M, lb[run], w[run], p1[run], p0[run])
        stop = cur - ll[run] < tol
        ids = np.flatnonzero(run)
        ll[ids] = cur
        n_iter[ids] = it
        done[ids[stop]] = True                                          # keeps the values it was scored at
        go = ids[~stop]
        if go.size == 0:
            break
        w[go], p1[go], p0[go] = _step(h[go], M, lb[go], w[go], p1[go], p0[go])
    ll = _loglik(h, M, lb, w, p1, p0)
    shape = (n_h, R)
    ll2, w2, p12, p02 = (a.reshape(shape) for a in (ll, w, p1, p0))
    best = np.argmax(ll2, axis=1)
    rows = np.arange(n_h)
    w_b, p1_b, p0_b = w2[rows, best], p12[rows, best], p02[rows, best]
    no_labels = (lab[:, 1] == 0) & (lab[:, 3] == 0)
    swap = no_labels & (p0_b > p1_b)                                    # label-free: valid accepts more
    w_b, p1_b, p0_b = np.where(swap, 1 - w_b, w_b), np.where(swap, p0_b, p1_b), np.where(swap, p1_b, p0_b)
    return {"rho0": p0_b, "rho1": 1 - p1_b, "weight_valid": w_b, "loglik": ll2[rows, best],
            "n_iter": n_iter.reshape(shape)[rows, best], "converged": done.reshape(shape)[rows, best]}


@memoized   # the decision- and Wald-checked calibrations of 05's ablation fit the same folds
def semisupervised_em(S_unlabeled, M: int, S_labeled, y_labeled, M_labeled: int, n_restarts: int = 4,
                      seed: int = 0, tol: float = 1e-10, max_iter: int = 2000):
    """Semi-supervised binomial-mixture EM (module docstring; Sec. 4.2's mixture with the probe's labeled plans
    entering with their class fixed). ``S_unlabeled``: accept counts of M votes whose plans' labels are not used;
    ``S_labeled``, ``y_labeled``: the labeled plans' counts of ``M_labeled`` votes and their labels. Returns a
    ``VoteNoiseFit`` with method "semisupervised_em"; its effective votes pool both parts. Computed once per
    distinct input (``vrr.calibration._memo``)."""
    from .mixture import VoteNoiseFit, vote_histograms

    S_u = np.asarray(S_unlabeled).ravel()
    if S_u.size and (S_u.min() < 0 or S_u.max() > M):
        raise ValueError(f"semisupervised_em: unlabeled counts must lie in 0..{M}")
    S_l = np.asarray(S_labeled).ravel()
    if S_l.size and (S_l.min() < 0 or S_l.max() > M_labeled):
        raise ValueError(f"semisupervised_em: labeled counts must lie in 0..{M_labeled}")
    if S_u.size == 0 and S_l.size == 0:
        raise ValueError("semisupervised_em: no votes at all")
    hist = vote_histograms([S_u], M) if S_u.size else np.zeros((1, M + 1))
    lab = labeled_vote_stats(S_l, y_labeled, M_labeled)[None, :]
    fit = semisupervised_em_many(hist, M, lab, n_restarts=n_restarts, seed=seed, tol=tol, max_iter=max_iter)
    w = float(fit["weight_valid"][0])
    n_u = float(S_u.size)
    return VoteNoiseFit(rho0=float(fit["rho0"][0]), rho1=float(fit["rho1"][0]), weight_valid=w,
                        loglik=float(fit["loglik"][0]), votes_valid=M * n_u * w + float(lab[0, 1]),
                        votes_invalid=M * n_u * (1 - w) + float(lab[0, 3]), method="semisupervised_em",
                        converged=bool(fit["converged"][0]), n_iter=int(fit["n_iter"][0]))
