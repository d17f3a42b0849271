"""Exchangeable-vote (beta-binomial) estimators of the vote noise for Eq. 5 (Sec. 4.2; App. E/I).

Votes on one plan are exchangeable, not independent: given the plan's validity c, the plan draws its own
acceptance rate from a Beta with mean mu_c (mu_1 = 1 - rho1, mu_0 = rho0) and intra-plan vote correlation
phi_c = 1 / (a + b + 1), and its M votes are S ~ BetaBinomial(M, a, b). (mu, phi) do not depend on M, so rates
fit on the probe's M_l = 16 votes per plan apply to the window's M = 8.

  * ``labeled_bb_mle``     per class, the beta-binomial maximum likelihood (mu_c, phi_c) of labeled plans;
  * ``semisupervised_bb``  the two-class beta-binomial mixture of the window's unlabeled counts (M votes) with the
                           labeled plans entering with their class fixed (M_l votes),

        l = sum_unlabeled log[w BB(S; M, mu1, phi1) + (1 - w) BB(S; M, mu0, phi0)]
            + sum_labeled-valid log BB(S; M_l, mu1, phi1) + sum_labeled-invalid log BB(S; M_l, mu0, phi0);

  * ``label_free_bb``      the label-free capped mixture of ``estimators.beta_binomial_em`` (App. I "BB-EM"), the
                           same fit on the batched optimizer below;

and ``refit_many`` refits each of them on bootstrap resamples (the draws behind Algorithm 1's B_k).

The likelihoods have no closed-form maximizer; they are maximized by Nelder-Mead over logit-scaled parameters,
which only compares likelihood values, so the fit is the same on every CPU (docs/integrity.md). Here many fits
(restarts, folds, the bootstrap behind B_k) run as one batch of independent simplices (:func:`nelder_mead_many`):
every simplex goes through the element-wise operations it would go through alone. Everything runs on count
histograms; the log-pmf table is Eq. 5's exchangeable-vote likelihood in its product form,
``vrr.core.belief.exchangeable_vote_log_pmf``, read at every count.
"""
from __future__ import annotations

import numpy as np
from scipy import special

from ..common import fpmath
from ..core.belief import exchangeable_vote_log_pmf
from ..settings import CALIBRATION_LIKELIHOODS as LIKELIHOODS
from ._memo import memoized
from .mixture import VoteNoiseFit
from .semisupervised import _log_comb

PHI_MAX = 0.99        # phi -> 1: every vote on a plan agrees; the labels pin the classes, so no tighter cap is needed
Z_BOUND = 12.0        # logit bounds of every parameter (rates within 6e-6 of 0 and 1)
POINT_TOL = dict(xatol=1e-8, fatol=1e-11)
# a bootstrap refit starts at the point fit and needs far less precision than the draws' spread (about 1e-2)
DRAW_TOL = dict(xatol=1e-4, fatol=1e-7, max_iter=2000)


def check_likelihood(likelihood: str) -> None:
    if likelihood not in LIKELIHOODS:
        raise ValueError(f"unknown vote likelihood {likelihood!r}; choose one of {LIKELIHOODS}")


# ---------------------------------------------------------------- batched Nelder-Mead
def nelder_mead_many(fun, x0, xatol: float = 1e-8, fatol: float = 1e-11, max_iter: int = 5000,
                     bound: float = Z_BOUND):
    """Minimize ``fun`` from each row of ``x0`` [C, d] by its own Nelder-Mead simplex (scipy's standard
    coefficients, initial simplex and stopping rule; points clipped to [-bound, bound]).

    ``fun(x, rows)`` takes points [n, d] of the chains ``rows`` [n] and returns their values [n]. Returns
    (x [C, d], f [C], n_iter [C], converged [C])."""
    x0 = np.atleast_2d(np.asarray(x0, dtype=float))
    n_chains, d = x0.shape
    sim = np.empty((n_chains, d + 1, d))
    sim[:, 0] = x0
    for k in range(d):
        y = x0.copy()
        y[:, k] = np.where(y[:, k] != 0, 1.05 * y[:, k], 0.00025)
        sim[:, k + 1] = y
    sim = np.clip(sim, -bound, bound)
    all_rows = np.arange(n_chains)
    fsim = np.stack([fun(sim[:, j], all_rows) for j in range(d + 1)], axis=1)
    n_iter = np.zeros(n_chains, dtype=np.int64)
    converged = np.zeros(n_chains, dtype=bool)
    idx = all_rows
    clip = lambda x: np.clip(x, -bound, bound)  # noqa: E731
    for _ in range(max_iter):
        order = np.argsort(fsim[idx], axis=1, kind="stable")
        s = np.take_along_axis(sim[idx], order[:, :, None], axis=1)
        f = np.take_along_axis(fsim[idx], order, axis=1)
        sim[idx], fsim[idx] = s, f
        done = ((np.abs(s[:, 1:] - s[:, :1]).max(axis=(1, 2)) <= xatol)
                & (np.abs(f[:, 1:] - f[:, :1]).max(axis=1) <= fatol))
        converged[idx[done]] = True
        idx, s, f = idx[~done], s[~done], f[~done]
        if idx.size == 0:
            break
        n_iter[idx] += 1
        xbar = s[:, 0].copy()
        for j in range(1, d):
            xbar = xbar + s[:, j]
        xbar = xbar / d
        worst = s[:, -1]
        xr = clip(2.0 * xbar - worst)
        fr = fun(xr, idx)
        new_x, new_f = xr.copy(), fr.copy()
        shrink = np.zeros(idx.size, dtype=bool)
        expand = fr < f[:, 0]
        if expand.any():
            xe = clip(3.0 * xbar[expand] - 2.0 * worst[expand])
            fe = fun(xe, idx[expand])
            better = fe < fr[expand]
            rows = np.flatnonzero(expand)[better]
            new_x[rows], new_f[rows] = xe[better], fe[better]
        outside = ~expand & (fr >= f[:, -2]) & (fr < f[:, -1])
        if outside.any():
            xc = clip(1.5 * xbar[outside] - 0.5 * worst[outside])
            fc = fun(xc, idx[outside])
            ok = fc <= fr[outside]
            rows = np.flatnonzero(outside)
            new_x[rows[ok]], new_f[rows[ok]] = xc[ok], fc[ok]
            shrink[rows[~ok]] = True
        inside = ~expand & (fr >= f[:, -1])
        if inside.any():
            xcc = clip(0.5 * xbar[inside] + 0.5 * worst[inside])
            fcc = fun(xcc, idx[inside])
            ok = fcc < f[inside, -1]
            rows = np.flatnonzero(inside)
            new_x[rows[ok]], new_f[rows[ok]] = xcc[ok], fcc[ok]
            shrink[rows[~ok]] = True
        replace = ~shrink
        s[replace, -1], f[replace, -1] = new_x[replace], new_f[replace]
        if shrink.any():
            rows = np.flatnonzero(shrink)
            for j in range(1, d + 1):
                s[rows, j] = s[rows, 0] + 0.5 * (s[rows, j] - s[rows, 0])
                f[rows, j] = fun(s[rows, j], idx[rows])
        sim[idx], fsim[idx] = s, f
    best = np.argmin(fsim, axis=1)
    return sim[all_rows, best], fsim[all_rows, best], n_iter, converged


# ---------------------------------------------------------------- likelihood tables
def _dot(h, table) -> np.ndarray:
    """sum_s h(s) table(s) per row, where an empty cell contributes 0 (also where the table is -inf)."""
    return np.where(h > 0, h * table, 0.0).sum(axis=1)


def histograms(samples, M: int) -> np.ndarray:
    """[C, M+1] count histograms of the samples (each an array of accept counts in 0..M)."""
    out = np.zeros((len(samples), M + 1))
    for r, S in enumerate(samples):
        S = np.asarray(S, dtype=np.int64).ravel()
        if S.size and (S.min() < 0 or S.max() > M):
            raise ValueError(f"vote counts must lie in 0..{M}")
        out[r] = np.bincount(S, minlength=M + 1)
    return out


def _moment_start(hist, M: int) -> tuple[np.ndarray, np.ndarray]:
    """(mean, phi) moment estimates per histogram row, kept inside the logit box (a start, not an estimate)."""
    s = np.arange(M + 1, dtype=float)
    n = np.maximum(hist.sum(axis=1), 1.0)
    mean = (hist * s).sum(axis=1) / (M * n)
    var = (hist * (s / M - mean[:, None]) ** 2).sum(axis=1) / n
    m = np.clip(mean, 0.02, 0.98)
    phi = (var / (m * (1 - m)) - 1.0 / M) / (1.0 - 1.0 / M) if M > 1 else np.full_like(m, 0.1)
    return m, np.clip(phi, 0.02, 0.9)


def _logit(p) -> np.ndarray:
    return special.logit(np.clip(np.asarray(p, dtype=float), 1e-5, 1 - 1e-5))


# ---------------------------------------------------------------- labeled: per class
def labeled_bb_many(hists, M: int, start=None, tol: dict = POINT_TOL) -> dict[str, np.ndarray]:
    """Beta-binomial maximum likelihood (mean, phi) of each labeled class histogram [C, M+1]: {"mean", "phi",
    "loglik", "converged"}, each [C]; NaN for an empty histogram. ``start``: (mean, phi) [C] each, else moments."""
    hists = np.atleast_2d(np.asarray(hists, dtype=float))
    mean0, phi0 = _moment_start(hists, M) if start is None else (np.asarray(start[0]), np.asarray(start[1]))

    def nll(z, rows):
        mean, phi = special.expit(z[:, 0]), PHI_MAX * special.expit(z[:, 1])
        return -_dot(hists[rows], exchangeable_vote_log_pmf(M, mean, phi))

    z0 = np.stack([_logit(mean0), _logit(np.asarray(phi0) / PHI_MAX)], axis=1)
    z, f, _, conv = nelder_mead_many(nll, z0, **tol)
    empty = hists.sum(axis=1) == 0
    nan = np.where(empty, np.nan, 1.0)
    return {"mean": special.expit(z[:, 0]) * nan, "phi": PHI_MAX * special.expit(z[:, 1]) * nan,
            "loglik": (-f + (hists * _log_comb(M)).sum(axis=1)) * nan, "converged": conv}


def labeled_bb_mle(S, y, M: int):
    """Labeled exchangeable-vote MLE (Eq. 5's beta-binomial likelihood): per class the (mean, phi) of labeled
    plans' accept counts S of M votes; rho1 = 1 - mean_valid, rho0 = mean_invalid. A class without plans gets NaN."""
    S = np.asarray(S).ravel()
    y = np.asarray(y).ravel().astype(bool)
    if S.shape != y.shape:
        raise ValueError(f"labeled_bb_mle: {S.size} vote counts but {y.size} labels")
    fit = labeled_bb_many(histograms([S[y], S[~y]], M), M)
    nv, ni = int(y.sum()), int((~y).sum())
    return VoteNoiseFit(rho0=float(fit["mean"][1]), rho1=float(1 - fit["mean"][0]),
                        weight_valid=nv / max(nv + ni, 1), loglik=float(np.nansum(fit["loglik"])),
                        votes_valid=float(M * nv), votes_invalid=float(M * ni), method="labeled_bb_mle",
                        converged=bool(fit["converged"].all()), phi0=float(fit["phi"][1]), phi1=float(fit["phi"][0]))


# ---------------------------------------------------------------- mixtures
def _unpack(z, cap: float):
    w = special.expit(z[:, 0])
    return w, special.expit(z[:, 1]), cap * special.expit(z[:, 2]), special.expit(z[:, 3]), cap * special.expit(z[:, 4])


def _pack(w, mu1, phi1, mu0, phi0, cap: float) -> np.ndarray:
    return np.stack([_logit(w), _logit(mu1), _logit(np.asarray(phi1) / cap), _logit(mu0),
                     _logit(np.asarray(phi0) / cap)], axis=-1)


def mixture_nll(z, h_u, M: int, h_v=None, h_i=None, M_l: int | None = None, cap: float = PHI_MAX) -> np.ndarray:
    """Minus the semi-supervised beta-binomial log-likelihood (module docstring) without binomial coefficients,
    per row of z [C, 5] = logits of (w, mu1, phi1 / cap, mu0, phi0 / cap); ``h_v``/``h_i`` None: label-free."""
    # _unpack's expit of every column in one call, both classes' tables in one call (element-wise: the same bits)
    e = special.expit(z)
    w, mean, phi = e[:, 0], e[:, [1, 3]].T, cap * e[:, [2, 4]].T
    t1, t0 = exchangeable_vote_log_pmf(M, mean, phi)
    mix = np.logaddexp(fpmath.log(w)[:, None] + t1, fpmath.log1p(-w)[:, None] + t0)
    ll = _dot(h_u, mix)
    if h_v is not None:
        l1, l0 = exchangeable_vote_log_pmf(M_l, mean, phi)
        ll = ll + _dot(h_v, l1) + _dot(h_i, l0)
    return -ll


def mixture_many(h_u, M: int, starts, h_v=None, h_i=None, M_l: int | None = None, cap: float = PHI_MAX,
                 tol: dict = POINT_TOL, polish: dict | None = None) -> dict[str, np.ndarray]:
    """Fit the beta-binomial mixture (semi-supervised when ``h_v``, ``h_i`` are given) to each histogram row
    [H, M+1] from each of its starts [H, R, 5] (``_pack`` logits); the restart with the highest likelihood per
    row, refined from there with the tolerances ``polish`` when given (kept where it is no worse):
    {"rho0", "rho1", "phi0", "phi1", "weight_valid", "loglik", "converged", "n_iter"}, each [H]. Without
    labels the component that accepts more is the valid one."""
    h_u = np.atleast_2d(np.asarray(h_u, dtype=float))
    starts = np.asarray(starts, dtype=float)
    n_h, R = starts.shape[:2]
    rep = np.repeat(np.arange(n_h), R)
    labeled = h_v is not None
    hv = np.atleast_2d(np.asarray(h_v, dtype=float))[rep] if labeled else None
    hi = np.atleast_2d(np.asarray(h_i, dtype=float))[rep] if labeled else None
    hu = h_u[rep]

    def nll(z, rows):
        return mixture_nll(z, hu[rows], M, None if hv is None else hv[rows], None if hi is None else hi[rows],
                           M_l, cap)

    z, f, n_iter, conv = nelder_mead_many(nll, starts.reshape(n_h * R, 5), **tol)
    best = np.argmin(f.reshape(n_h, R), axis=1)
    pick = np.arange(n_h) * R + best
    z, f, n_iter, conv = z[pick], f[pick], n_iter[pick], conv[pick]
    if polish is not None:
        zp, fp, it_p, conv_p = nelder_mead_many(lambda x, rows: nll(x, pick[rows]), z, **polish)
        better = fp <= f
        z, f = np.where(better[:, None], zp, z), np.where(better, fp, f)
        n_iter, conv = np.where(better, n_iter + it_p, n_iter), np.where(better, conv_p, conv)
    w, mu1, phi1, mu0, phi0 = _unpack(z, cap)
    if not labeled:
        swap = mu0 > mu1
        w, mu1, phi1, mu0, phi0 = (np.where(swap, 1 - w, w), np.where(swap, mu0, mu1), np.where(swap, phi0, phi1),
                                   np.where(swap, mu1, mu0), np.where(swap, phi1, phi0))
    const = (h_u * _log_comb(M)).sum(axis=1)
    if labeled:
        const = const + ((np.atleast_2d(h_v) + np.atleast_2d(h_i)) * _log_comb(M_l)).sum(axis=1)
    return {"rho0": mu0, "rho1": 1 - mu1, "phi0": phi0, "phi1": phi1, "weight_valid": w,
            "loglik": -f + const, "converged": conv, "n_iter": n_iter}


def label_free_bb(S, M: int, phi_cap: float = 0.3, n_restarts: int = 8, seed: int = 0) -> VoteNoiseFit:
    """The capped label-free beta-binomial mixture of ``estimators.beta_binomial_em`` (App. E, App. I "BB-EM";
    the same model, cap, seeded starts, loose restarts and tight polish), maximized by :func:`nelder_mead_many`,
    whose simplex order breaks ties the same way on every CPU. Returns phi0, phi1 with rho0, rho1."""
    return label_free_bb_many([S], M, phi_cap=phi_cap, n_restarts=n_restarts, seeds=[seed])[0]


def label_free_bb_many(samples, M: int, phi_cap: float = 0.3, n_restarts: int = 8, seeds=(0,)) -> list[VoteNoiseFit]:
    """:func:`label_free_bb` of each vote sample with its own seed, the simplices of all of them run as one batch
    (each fit as alone: the cross-fit folds' fits)."""
    if M < 5:
        raise ValueError(f"beta_binomial_em: needs M >= 5 votes per plan to be identifiable, got M={M}; "
                         "use labeled_mle (labels) or more votes")
    h_u = histograms(samples, M)
    if (h_u.sum(axis=1) == 0).any():
        raise ValueError("beta_binomial_em: empty sample")
    starts = []
    for seed in seeds:
        rng = np.random.default_rng(seed)
        starts.append([[special.logit(rng.uniform(0.2, 0.8)), special.logit(rng.uniform(0.55, 0.95)),
                        rng.uniform(-3, 1), special.logit(rng.uniform(0.05, 0.45)), rng.uniform(-3, 1)]
                       for _ in range(n_restarts)])
    fit = mixture_many(h_u, M, np.array(starts), cap=phi_cap, tol=dict(xatol=1e-4, fatol=1e-7, max_iter=20000),
                       polish=dict(xatol=1e-9, fatol=1e-11, max_iter=20000))
    out = []
    for r in range(h_u.shape[0]):
        w, n = float(fit["weight_valid"][r]), float(h_u[r].sum())
        out.append(VoteNoiseFit(rho0=float(fit["rho0"][r]), rho1=float(fit["rho1"][r]), weight_valid=w,
                                loglik=float(fit["loglik"][r]), votes_valid=M * n * w, votes_invalid=M * n * (1 - w),
                                method="beta_binomial_em", converged=bool(fit["converged"][r]),
                                n_iter=int(fit["n_iter"][r]), phi0=float(fit["phi0"][r]), phi1=float(fit["phi1"][r])))
    return out


def _semisupervised_starts(h_u, M: int, h_v, h_i, M_l: int, n_restarts: int, seed: int, lab=None) -> np.ndarray:
    """[1, R, 5]: the labeled classes' beta-binomial fits (``lab``, :func:`labeled_bb_many` of h_v, h_i; fit here
    when not given) with the moment weight of the unlabeled mean, then ``n_restarts - 1`` seeded random starts."""
    if lab is None:
        lab = labeled_bb_many(np.concatenate([h_v, h_i]), M_l)
    mu1 = np.nan_to_num(lab["mean"][0], nan=0.75)
    mu0 = np.nan_to_num(lab["mean"][1], nan=0.25)
    phi1 = np.nan_to_num(lab["phi"][0], nan=0.1)
    phi0 = np.nan_to_num(lab["phi"][1], nan=0.1)
    n_u = h_u.sum()
    mean = (h_u[0] * np.arange(M + 1)).sum() / (M * n_u) if n_u else 0.5
    w = np.clip((mean - mu0) / (mu1 - mu0) if abs(mu1 - mu0) > 1e-3 else 0.5, 0.05, 0.95)
    first = _pack(w, mu1, phi1, mu0, phi0, PHI_MAX)[None, :]
    rng = np.random.default_rng(seed)
    rest = [_pack(rng.uniform(0.2, 0.8), rng.uniform(0.55, 0.95), rng.uniform(0.02, 0.6), rng.uniform(0.05, 0.45),
                  rng.uniform(0.02, 0.6), PHI_MAX) for _ in range(n_restarts - 1)]
    return np.concatenate([first] + [r[None, :] for r in rest])[None, :, :]


def semisupervised_bb(S_unlabeled, M: int, S_labeled, y_labeled, M_labeled: int, n_restarts: int = 4,
                      seed: int = 0):
    """Semi-supervised exchangeable-vote mixture (module docstring; Eq. 5's beta-binomial likelihood with the
    probe's labeled plans entering with their class fixed). Returns a ``VoteNoiseFit`` with phi0, phi1 and method
    "semisupervised_bb"."""
    return semisupervised_bb_many([S_unlabeled], M, S_labeled, y_labeled, M_labeled, n_restarts=n_restarts,
                                  seeds=[seed])[0]


@memoized   # the decision- and Wald-checked calibrations of 05's ablation fit the same folds
def semisupervised_bb_many(samples, M: int, S_labeled, y_labeled, M_labeled: int, n_restarts: int = 4,
                           seeds=(0,)) -> list:
    """:func:`semisupervised_bb` of each unlabeled vote sample with the same labeled plans and its own seed, the
    simplices of all of them run as one batch (each fit as alone: the cross-fit folds' fits); computed once per
    distinct input (``vrr.calibration._memo``)."""
    S_l = np.asarray(S_labeled).ravel()
    y_l = np.asarray(y_labeled).ravel().astype(bool)
    if S_l.shape != y_l.shape:
        raise ValueError(f"semisupervised_bb: {S_l.size} labeled vote counts but {y_l.size} labels")
    S_us = [np.asarray(S).ravel() for S in samples]
    if any(S_u.size == 0 for S_u in S_us) and S_l.size == 0:
        raise ValueError("semisupervised_bb: no votes at all")
    h_u = histograms(S_us, M)
    h_v, h_i = histograms([S_l[y_l]], M_labeled), histograms([S_l[~y_l]], M_labeled)
    lab = labeled_bb_many(np.concatenate([h_v, h_i]), M_labeled)      # the same labeled plans for every sample
    starts = np.concatenate([_semisupervised_starts(h_u[r:r + 1], M, h_v, h_i, M_labeled, n_restarts, seed, lab)
                             for r, seed in enumerate(seeds)])
    rows = len(S_us)
    fit = mixture_many(h_u, M, starts, np.repeat(h_v, rows, axis=0), np.repeat(h_i, rows, axis=0), M_labeled)
    out = []
    for r, S_u in enumerate(S_us):
        w, n_u = float(fit["weight_valid"][r]), float(S_u.size)
        out.append(VoteNoiseFit(rho0=float(fit["rho0"][r]), rho1=float(fit["rho1"][r]), weight_valid=w,
                                loglik=float(fit["loglik"][r]), votes_valid=M * n_u * w + M_labeled * float(y_l.sum()),
                                votes_invalid=M * n_u * (1 - w) + M_labeled * float((~y_l).sum()),
                                method="semisupervised_bb", converged=bool(fit["converged"][r]),
                                n_iter=int(fit["n_iter"][r]), phi0=float(fit["phi0"][r]), phi1=float(fit["phi1"][r])))
    return out


# ---------------------------------------------------------------- bootstrap refits
def refit_many(kind: str, point, samples, M: int, labeled_samples=None, M_l: int | None = None,
               phi_cap: float = 0.3) -> list:
    """Exchangeable-vote fits of many resamples (the bootstrap behind B_k), each started from the point fit
    ``point`` (a ``VoteNoiseFit`` with phi0, phi1, or a list of them, one per resample: the resamples of several
    calibration samples in one batch) and run as one batch. ``kind``: "labeled" (``samples`` are (S, y) pairs),
    "label_free" (the capped mixture; ``samples`` are count arrays) or "semisupervised" (``samples`` count arrays,
    ``labeled_samples`` (S_l, y_l) pairs of M_l votes). ``phi_cap``: the label-free mixture's cap on phi (App. I)."""
    n = len(samples)
    points = list(point) if isinstance(point, (list, tuple)) else [point] * n
    if len(points) != n:
        raise ValueError(f"refit_many: {len(points)} starting fits for {n} resamples")
    field = lambda name: np.array([getattr(p, name) for p in points], dtype=float)  # noqa: E731
    if kind == "labeled":
        S_y = [(np.asarray(S).ravel(), np.asarray(y).ravel().astype(bool)) for S, y in samples]
        hists = histograms([S[y] for S, y in S_y] + [S[~y] for S, y in S_y], M)
        start = (np.r_[1 - field("rho1"), field("rho0")], np.r_[field("phi1"), field("phi0")])
        start = tuple(np.clip(np.nan_to_num(a, nan=0.5), 1e-4, 1 - 1e-4) for a in start)
        fit = labeled_bb_many(hists, M, start=start, tol=DRAW_TOL)
        return [VoteNoiseFit(rho0=float(fit["mean"][n + b]), rho1=float(1 - fit["mean"][b]),
                             weight_valid=float(y.mean()) if y.size else 0.0, method="labeled_bb_mle",
                             phi0=float(fit["phi"][n + b]), phi1=float(fit["phi"][b])) for b, (_, y) in enumerate(S_y)]
    cap = phi_cap if kind == "label_free" else PHI_MAX
    phi = [np.clip(field("phi1"), 1e-4, cap * (1 - 1e-4)), np.clip(field("phi0"), 1e-4, cap * (1 - 1e-4))]
    starts = _pack(field("weight_valid"), 1 - field("rho1"), phi[0], field("rho0"), phi[1], cap).reshape(n, 1, 5)
    h_u = histograms(samples, M)
    if kind == "label_free":
        fit, method = mixture_many(h_u, M, starts, cap=cap, tol=DRAW_TOL), "beta_binomial_em"
    elif kind == "semisupervised":
        lab = [(np.asarray(S).ravel(), np.asarray(y).ravel().astype(bool)) for S, y in labeled_samples]
        h_v, h_i = histograms([S[y] for S, y in lab], M_l), histograms([S[~y] for S, y in lab], M_l)
        fit, method = mixture_many(h_u, M, starts, h_v, h_i, M_l, tol=DRAW_TOL), "semisupervised_bb"
    else:
        raise ValueError(f"refit_many: unknown kind {kind!r}")
    return [VoteNoiseFit(rho0=float(fit["rho0"][b]), rho1=float(fit["rho1"][b]),
                         weight_valid=float(fit["weight_valid"][b]), method=method,
                         phi0=float(fit["phi0"][b]), phi1=float(fit["phi1"][b])) for b in range(n)]
