"""The binomial mixture of Eq. 5's vote model, label-free and labeled (Sec. 4.2; App. A "Calibration Estimators").

A plan's M votes are S ~ pi Bin(M, 1 - rho1) + (1 - pi) Bin(M, rho0). ``binomial_mixture_em`` fits it without
labels (EM with random restarts, highest log-likelihood kept, "higher-acceptance component = valid"); the chains
of many samples run at once on count histograms (``binomial_em_chains``, ``best_rates``). ``labeled_mle`` is the
per-class acceptance frequency on labeled plans. ``VoteNoiseFit`` is the fit with the effective vote counts behind
it. The estimators, the calibration check and the semi-supervised EM all build on these.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
from scipy import special

from ..common import fpmath
from ..core.model import youden_j
from . import _memo

# A mixture of two binomials (weight, two rates) is identifiable from Bin(M) counts only when M >= 3
# (Teicher 1963: 2 components need 2k - 1 = 3 trials); the capped beta-binomial mixture has five
# parameters, so it needs at least five vote cells.
MIN_VOTES = {"binomial_em": 3, "mom": 3, "beta_binomial_em": 5, "labeled_mle": 1, "semisupervised_em": 1,
             "semisupervised_checked": 3, "ppi": 3}


def _require_votes(method: str, M: int) -> None:
    need = MIN_VOTES[method]
    if M < need:
        raise ValueError(f"{method}: needs M >= {need} votes per plan to be identifiable, got M={M}; "
                         "use labeled_mle (labels) or more votes")


@dataclass(frozen=True)
class VoteNoiseFit:
    """Estimated judge noise plus the effective vote counts behind it (for error radii)."""

    rho0: float
    rho1: float
    weight_valid: float
    loglik: float = float("nan")
    votes_valid: float = 0.0      # effective number of votes cast on valid plans
    votes_invalid: float = 0.0    # effective number of votes cast on invalid plans
    method: str = ""
    converged: bool = True
    n_iter: int = 0
    # intra-plan vote correlation per class (exchangeable-vote fits, ``vrr.calibration.correlated``); None: binomial
    phi0: float | None = None
    phi1: float | None = None

    @property
    def youden_j(self) -> float:
        """J = 1 - rho0 - rho1 of the fit (Sec. 3)."""
        return float(youden_j(self.rho0, self.rho1))


def _histogram(S, M: int, weights=None) -> np.ndarray:
    S = np.asarray(S, dtype=np.int64).ravel()
    return np.bincount(S, weights=weights, minlength=M + 1).astype(float)


def _binom_logpmf_table(M: int, p: float) -> np.ndarray:
    """log Bin(s; M, p) for s = 0..M (inlined: EM calls this thousands of times)."""
    s = np.arange(M + 1)
    log_comb = special.gammaln(M + 1) - special.gammaln(s + 1) - special.gammaln(M - s + 1)
    with np.errstate(divide="ignore"):
        return log_comb + special.xlogy(s, p) + special.xlogy(M - s, 1.0 - p)


def mixture_loglik(S, M: int, weight_valid: float, rho0: float, rho1: float) -> float:
    """Log-likelihood of S under pi Bin(M, 1-rho1) + (1-pi) Bin(M, rho0) (App. A)."""
    return _hist_loglik(_histogram(S, M), M, weight_valid, rho1, rho0)


def _hist_loglik(hist: np.ndarray, M: int, weight_valid: float, rho1: float, rho0: float) -> float:
    with np.errstate(divide="ignore"):
        lv = fpmath.log(weight_valid) + _binom_logpmf_table(M, 1.0 - rho1)
        li = fpmath.log1p(-weight_valid) + _binom_logpmf_table(M, rho0)
    ll = np.logaddexp(lv, li)
    mask = hist > 0
    return float(np.sum(hist[mask] * ll[mask]))


@functools.lru_cache(maxsize=64)
def _count_terms(M: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(s, log C(M, s), M - s) for s = 0..M, read-only: the constants of every EM step on M votes."""
    s = np.arange(M + 1, dtype=float)
    log_comb = special.gammaln(M + 1) - special.gammaln(s + 1) - special.gammaln(M - s + 1)
    out = (s, log_comb, M - s)
    for a in out:
        a.setflags(write=False)
    return out


def em_step(h, total, M: int, w, p1, p0):
    """One EM iteration of the binomial mixture (Sec. 4.2; App. A): E-step responsibilities of the valid
    component per count value, M-step responsibility-weighted frequencies. ``h`` holds the histograms
    [..., M+1] (broadcast against the chains), ``total`` their sizes, ``w, p1, p0`` the chains' current
    values. Returns (log-likelihood at the current values, w, p1, p0 after the step).

    Each quantity is the same sequence of floating-point operations as its formula, with every [..., M+1]
    intermediate written into one of two buffers instead of a fresh array (the step runs millions of times in a
    bootstrap; the bits do not depend on where a value is stored)."""
    s, log_comb, m_s = _count_terms(M)
    eps = 1e-12
    col = lambda a: np.asarray(a)[..., None]  # noqa: E731
    # lv = log w + log C + s log p1 + (M - s) log(1 - p1), summed left to right as the formula reads
    lv = col(fpmath.log(w)) + log_comb
    tmp = np.multiply(s, col(fpmath.log(p1)))
    lv += tmp
    np.multiply(m_s, col(fpmath.log1p(-p1)), out=tmp)
    lv += tmp
    li = col(fpmath.log1p(-w)) + log_comb
    np.multiply(s, col(fpmath.log(p0)), out=tmp)
    li += tmp
    np.multiply(m_s, col(fpmath.log1p(-p0)), out=tmp)
    li += tmp
    norm = np.logaddexp(lv, li)
    lv -= norm
    resp = fpmath.exp(lv, out=lv)
    np.multiply(norm, h, out=norm)
    ll = norm.sum(axis=-1)
    np.multiply(resp, h, out=tmp)
    nv = tmp.sum(axis=-1)
    np.multiply(resp, s, out=tmp)
    tmp *= h
    accepts_valid = tmp.sum(axis=-1)
    np.subtract(1, resp, out=resp)
    resp *= s
    resp *= h
    accepts_invalid = resp.sum(axis=-1)
    ni = total - nv
    w_new = np.clip(nv / total, eps, 1 - eps)
    p1_new = np.clip(np.where(nv > eps, accepts_valid / (M * np.maximum(nv, eps)), p1), eps, 1 - eps)
    p0_new = np.clip(np.where(ni > eps, accepts_invalid / (M * np.maximum(ni, eps)), p0), eps, 1 - eps)
    return ll, w_new, p1_new, p0_new


def _em_restarts(hists: np.ndarray, M: int, w, p1, p0, tol: float, max_iter: int):
    """EM iterations for many histograms and restarts at once.

    ``hists`` is [H, M+1] (vote-count histograms); ``w, p1, p0`` are [H, R] starting values. Every
    (histogram, restart) chain runs until its log-likelihood gains less than ``tol``. Returns
    per-chain (w, p1, p0, loglik, n_iter, converged), each [H, R].

    The chains are independent: each iteration updates only the chains still running (a converged
    chain leaves the arrays), and every chain goes through the same element-wise operations as when it
    runs alone, so a fit does not depend on what it is batched with.
    """
    shape = np.shape(w)
    n_chains = int(np.prod(shape))
    hists = np.asarray(hists, dtype=float)
    h = np.repeat(hists, shape[1], axis=0)                    # [H * R, M+1], the histogram of each running chain
    total = h.sum(axis=-1)                                    # [C]
    w, p1, p0 = (np.asarray(a, dtype=float).ravel().copy() for a in (w, p1, p0))
    out = {"w": w.copy(), "p1": p1.copy(), "p0": p0.copy(), "ll": np.full(n_chains, -np.inf),
           "n_iter": np.zeros(n_chains, dtype=np.int64), "converged": np.zeros(n_chains, dtype=bool)}
    running = np.arange(n_chains)                             # chain id of each row of the working arrays
    prev = np.full(n_chains, -np.inf)
    for it in range(1, max_iter + 1):
        ll_new, w_new, p1_new, p0_new = em_step(h, total, M, w, p1, p0)
        out["ll"][running] = ll_new
        out["n_iter"][running] = it
        done = ll_new - prev < tol
        if done.any():                                        # a converged chain keeps the values it was scored at
            ids = running[done]
            out["w"][ids], out["p1"][ids], out["p0"][ids] = w[done], p1[done], p0[done]
            out["converged"][ids] = True
            keep = ~done
            running, h, total, prev = running[keep], h[keep], total[keep], ll_new[keep]
            w, p1, p0 = w_new[keep], p1_new[keep], p0_new[keep]
        else:
            w, p1, p0, prev = w_new, p1_new, p0_new, ll_new
        if running.size == 0:
            break
    out["w"][running], out["p1"][running], out["p0"][running] = w, p1, p0
    return tuple(out[k].reshape(shape) for k in ("w", "p1", "p0", "ll", "n_iter", "converged"))


def _em_starts(rng, n_restarts: int) -> np.ndarray:
    return rng.uniform([0.1, 0.05, 0.05], [0.9, 0.95, 0.95], size=(n_restarts, 3))


def _hists_loglik(hists: np.ndarray, M: int, w, p1, p0) -> np.ndarray:
    """Log-likelihood of each histogram [H, M+1] under the mixtures (w, p1, p0), each [H, R]."""
    s = np.arange(M + 1, dtype=float)
    log_comb = special.gammaln(M + 1) - special.gammaln(s + 1) - special.gammaln(M - s + 1)
    with np.errstate(divide="ignore"):
        lv = fpmath.log(w)[..., None] + log_comb + special.xlogy(s, p1[..., None]) + special.xlogy(M - s, 1 - p1[..., None])
        li = fpmath.log1p(-w)[..., None] + log_comb + special.xlogy(s, p0[..., None]) + special.xlogy(M - s, 1 - p0[..., None])
    ll = np.logaddexp(lv, li)
    h = np.asarray(hists, dtype=float)[:, None, :]
    return np.where(h > 0, h * ll, 0.0).sum(axis=-1)


def binomial_em_chains(hists: np.ndarray, M: int, seeds, n_restarts: int = 10, tol: float = 1e-10,
                       max_iter: int = 2000):
    """The EM chains of :func:`binomial_mixture_em` (Sec. 4.2) for many vote histograms [H, M+1] at once,
    histogram h starting from the ``n_restarts`` seeded starts of ``seeds[h]``: (w, p1, p0, loglik,
    n_iter, converged), each [H, R]. :func:`best_restart` and :func:`best_rates` pick the fit."""
    _require_votes("binomial_em", M)
    hists = np.atleast_2d(np.asarray(hists, dtype=float))
    seeds = [int(x) for x in seeds]
    per_seed = {x: _em_starts(np.random.default_rng(x), n_restarts) for x in dict.fromkeys(seeds)}
    starts = np.stack([per_seed[x] for x in seeds]) if seeds else np.empty((0, n_restarts, 3))   # [H, R, 3]
    return _em_restarts(hists, M, starts[:, :, 0], starts[:, :, 1], starts[:, :, 2], tol, max_iter)


# Bootstrap resamples of a calibration sample: the Wald check, the draws behind B_k and the identifiability bootstrap
# resample its rows with the same stream, so their EM refits of the same resample are one fit (:func:`em_rates`).
RESAMPLE_SEED_OFFSET = 7919


def resample_rows(n: int, n_boot: int, seed: int) -> tuple[list, np.random.Generator]:
    """``n_boot`` bootstrap resamples (row indices) of a sample of ``n`` rows, seed ``seed``, and the generator
    after them (a caller draws what else it resamples from it)."""
    rng = np.random.default_rng(seed + RESAMPLE_SEED_OFFSET)
    return [rng.integers(0, n, n) for _ in range(n_boot)], rng


_EM_RATES = _memo.row_store(max_entries=100_000)


def em_rates(hists: np.ndarray, M: int, seeds, n_restarts: int = 10, tol: float = 1e-10,
             max_iter: int = 2000) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`best_rates` of :func:`binomial_em_chains` (Sec. 4.2's label-free EM): (rho0, rho1, weight_valid),
    each [H], for histograms [H, M+1] with their seeds. A histogram's fit depends only on its counts, M, its seed
    and the EM's options (the chains do not depend on what they are batched with), so each is kept under that key
    and computed once per process: the check and B_k's draws refit the same resamples."""
    hists = np.atleast_2d(np.asarray(hists, dtype=float))
    keys = [(h.tobytes(), int(M), int(x), int(n_restarts), float(tol), int(max_iter)) for h, x in zip(hists, seeds)]
    todo = {}
    for i, key in enumerate(keys):
        if key not in _EM_RATES and key not in todo:
            todo[key] = i
    if todo:
        rows = list(todo.values())
        sub = hists[rows]
        chains = binomial_em_chains(sub, M, [keys[i][2] for i in rows], n_restarts=n_restarts, tol=tol,
                                    max_iter=max_iter)
        for key, a, b, c in zip(todo, *best_rates(sub, M, chains)):
            _EM_RATES[key] = (a, b, c)
    out = [_EM_RATES[key] for key in keys]
    return tuple(np.array([r[j] for r in out], dtype=float) for j in range(3))


def best_rates(hists: np.ndarray, M: int, chains) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rho0, rho1, weight_valid), each [H], of the restart with the highest log-likelihood per histogram,
    labeled so that the valid component accepts more (the bootstrap's fast path of the EM)."""
    hists = np.atleast_2d(np.asarray(hists, dtype=float))
    ws, p1s, p0s = chains[:3]
    best = np.argmax(_hists_loglik(hists, M, ws, p1s, p0s), axis=1)
    rows = np.arange(hists.shape[0])
    w, p1, p0 = ws[rows, best], p1s[rows, best], p0s[rows, best]
    swap = p0 > p1                                            # label convention: valid accepts more
    w, p1, p0 = np.where(swap, 1 - w, w), np.where(swap, p0, p1), np.where(swap, p1, p0)
    return p0, 1 - p1, w


def binomial_mixture_em_many(hists: np.ndarray, M: int, n_restarts: int = 10, seed: int = 0,
                             tol: float = 1e-10, max_iter: int = 2000) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`binomial_mixture_em` on many vote histograms [H, M+1] at once (the bootstrap of
    ``vrr.calibration.identifiability``): returns (rho0, rho1, weight_valid), each [H]. Every
    histogram gets the same seeded starts."""
    hists = np.atleast_2d(np.asarray(hists, dtype=float))
    return em_rates(hists, M, [seed] * hists.shape[0], n_restarts=n_restarts, tol=tol, max_iter=max_iter)


def binomial_mixture_em(S, M: int, n_restarts: int = 10, seed: int = 0,
                        tol: float = 1e-10, max_iter: int = 2000) -> VoteNoiseFit:
    """Two-component binomial-mixture EM (Sec. 4.2; App. A "Calibration Estimators").

    S ~ pi Bin(M, 1 - rho1) + (1 - pi) Bin(M, rho0). Runs ``n_restarts`` seeded random starts
    (iterated together, vectorized), keeps the highest log-likelihood, and labels the
    higher-acceptance component as valid. The mixture is identifiable iff J != 0; as J -> 0
    the likelihood surface flattens (App. E).
    """
    return binomial_mixture_em_each([S], M, [seed], n_restarts=n_restarts, tol=tol, max_iter=max_iter)[0]


def vote_histograms(samples, M: int) -> np.ndarray:
    """[H, M+1] histograms of the vote counts of each sample; an empty sample is an error."""
    hists = np.stack([_histogram(S, M) for S in samples])
    if (hists.sum(axis=1) == 0).any():
        raise ValueError("binomial_mixture_em: empty sample")
    return hists


def binomial_mixture_em_each(samples, M: int, seeds, n_restarts: int = 10, tol: float = 1e-10,
                             max_iter: int = 2000) -> list[VoteNoiseFit]:
    """:func:`binomial_mixture_em` of each vote sample in ``samples`` with its own seed in ``seeds``,
    the EM chains of all of them iterated together (Sec. 4.2 estimator; one fit per sample, each the
    same as fitting it alone)."""
    _require_votes("binomial_em", M)
    hists = vote_histograms(samples, M)
    chains = binomial_em_chains(hists, M, seeds, n_restarts=n_restarts, tol=tol, max_iter=max_iter)
    return [best_restart(hist, M, [a[i] for a in chains]) for i, hist in enumerate(hists)]


def best_restart(hist, M: int, chain) -> VoteNoiseFit:
    """The fit of :func:`binomial_mixture_em` from one histogram's EM chains (``binomial_em_chains`` row):
    the restart with the highest log-likelihood, labeled so that the valid component accepts more."""
    ws, p1s, p0s, _, iters, conv = chain
    # Rank restarts by the log-likelihood of their final parameters (a restart stopped at
    # max_iter has moved past the value it last evaluated).
    lls = np.array([_hist_loglik(hist, M, w_, 1 - p1_, p0_) for w_, p1_, p0_ in zip(ws, p1s, p0s)])
    b = int(np.argmax(lls))
    w, p1, p0, ll, n_iter, converged = float(ws[b]), float(p1s[b]), float(p0s[b]), float(lls[b]), int(iters[b]), bool(conv[b])
    if p0 > p1:                                       # label convention: valid accepts more
        w, p1, p0 = 1 - w, p0, p1
    resp = _responsibilities(M, w, p1, p0)
    return VoteNoiseFit(rho0=p0, rho1=1 - p1, weight_valid=w, loglik=ll,
                        votes_valid=M * float(np.sum(hist * resp)),
                        votes_invalid=M * float(np.sum(hist * (1 - resp))),
                        method="binomial_em", converged=converged, n_iter=n_iter)


def _responsibilities(M, w, p1, p0):
    """P(valid | s accepts of M), s = 0..M, under w Bin(M, p1) + (1 - w) Bin(M, p0) (Eq. 5 with prior w); exp and
    log through ``vrr.common.fpmath`` (the same bits on every CPU)."""
    with np.errstate(divide="ignore"):
        lv = fpmath.log(w) + _binom_logpmf_table(M, p1)
        li = fpmath.log1p(-w) + _binom_logpmf_table(M, p0)
    return fpmath.exp(lv - np.logaddexp(lv, li))


def labeled_mle(S, y, M: int) -> VoteNoiseFit:
    """Labeled maximum likelihood (App. I): rho1 = 1 - accepts/votes on valid plans,
    rho0 = accepts/votes on invalid plans. A class with no plans gets NaN."""
    S = np.asarray(S, dtype=float).ravel()
    y = np.asarray(y).ravel().astype(bool)
    nv, ni = int(y.sum()), int((~y).sum())
    rho1 = 1 - S[y].sum() / (M * nv) if nv else float("nan")
    rho0 = S[~y].sum() / (M * ni) if ni else float("nan")
    return VoteNoiseFit(rho0=float(rho0), rho1=float(rho1), weight_valid=nv / max(nv + ni, 1),
                        votes_valid=float(M * nv), votes_invalid=float(M * ni), method="labeled_mle")
