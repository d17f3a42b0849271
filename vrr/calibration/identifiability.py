"""Sign identifiability (Sec. 4.2, Eq. 8, Proposition 1; App. A "Error Radius"; RQ3).

* ``bootstrap_intervals``  simultaneous intervals of (rho0, rho1, alpha, beta, pi) from a bootstrap of
                           the whole calibration (instances resampled, every estimator refit)
* ``parameter_intervals``  the earlier Clopper-Pearson intervals on effective counts (kept for
                           comparison: they treat the EM's class split as known and under-cover)
* ``error_radius``         B_k: worst-case excursion of G-hat_k over the interval box (corners and a
                           grid through the interior, where G is not monotone)
* ``sign_identifiable``    Eq. 8: G-hat - B > tau or G-hat + B <= tau
* ``labeled_j_diagnostic`` the held-out separation test of Sec. 4.3 (no EM involved)
* ``flip_risk_grid``       simulated stopping-sign flip probability over (J, Delta) (Fig. RQ3)
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from ..core.belief import filter_beliefs, gain, posterior_from_log_likelihoods, predict, vote_log_likelihoods
from .estimators import (Calibration, CrossFit, EstimatorOptions, VoteNoiseFit, binomial_mixture_em_each,
                         calibrate)
from .mixture import em_rates, resample_rows

PARAM_NAMES = ("rho0", "rho1", "alpha", "beta", "pi")


def _clopper_pearson(successes: float, trials: float, confidence: float) -> tuple[float, float]:
    """Exact (Clopper-Pearson) interval, the one scipy.stats.binomtest(...).proportion_ci
    returns, written with Beta quantiles so it costs microseconds."""
    from scipy import stats  # imported on use: importing scipy.stats costs ~1 s of CPU in every notebook kernel

    n = int(round(trials))
    if n <= 0:
        return 0.0, 1.0
    k = int(np.clip(round(successes), 0, n))
    tail = (1.0 - confidence) / 2.0
    low = 0.0 if k == 0 else float(stats.beta.ppf(tail, k, n - k + 1))
    high = 1.0 if k == n else float(stats.beta.ppf(1.0 - tail, k + 1, n - k))
    return low, high


def parameter_intervals(cal: Calibration, eta: float = 0.05) -> dict[str, tuple[float, float]]:
    """Simultaneous (Bonferroni over the five parameters) Clopper-Pearson intervals at level 1-eta.

    rho0 / rho1 use the effective vote counts of the fitted mixture components (votes cast on
    plans the fit assigns to each class); alpha, beta, pi use their labeled counts. This treats
    the vote-noise fit as if class membership were known, so it understates uncertainty when
    J is small: the J diagnostic, not B_k, is the guard against that regime (Sec. 4.3).
    """
    conf = 1.0 - eta / len(PARAM_NAMES)
    p, v, t = cal.params, cal.votes, cal.transitions
    return {
        "rho0": _clopper_pearson(p.rho0 * v.votes_invalid, v.votes_invalid, conf),
        "rho1": _clopper_pearson(p.rho1 * v.votes_valid, v.votes_valid, conf),
        "alpha": _clopper_pearson(t.n_fixed, t.n_invalid_before, conf),
        "beta": _clopper_pearson(t.n_broken, t.n_valid_before, conf),
        "pi": _clopper_pearson(cal.n_pi_valid, cal.n_pi, conf),
    }


BOOTSTRAP_REPLICATES = 200


def bootstrap_intervals(S, y, M: int, eta: float = 0.05, n_boot: int = BOOTSTRAP_REPLICATES, seed: int = 0,
                        **calibrate_kwargs) -> dict[str, tuple[float, float]]:
    """Simultaneous intervals at level 1 - eta for the calibrated parameters (Prop. 1's premise).

    The whole calibration (:func:`vrr.calibration.calibrate` with ``calibrate_kwargs``: the EM or
    other vote-noise fit, alpha and beta from labeled pairs, pi) is refit on ``n_boot`` samples of
    the calibration instances drawn with replacement, so the intervals carry the estimation
    uncertainty of the EM itself, which the effective-count intervals ignore. Each parameter gets
    the percentile interval at level 1 - eta/5 (Bonferroni over the five), widened to contain the
    point estimate.

    Near J = 0 the EM is not consistent: its bootstrap distribution sits around the same wrong
    answer as the estimate, and no resampling of it covers the truth. The calibration instances are
    labeled, though (they give alpha, beta and pi), so each interval is joined with the percentile
    interval of the labeled estimate of the same parameter over the same resamples (for rho0, rho1 the
    per-class accept rates of the round-0 votes; resampling plans keeps the votes of one plan
    together), and with the Clopper-Pearson interval of the labeled counts (exact for binomial counts,
    where the percentile bootstrap of a proportion from a few dozen pairs falls short). The box then
    contains the truth whenever any of the constructions does. B_k measures the
    distance from the deployed estimate (EM) to every parameter in the box, so the joined box still
    bounds |G-hat - G|.
    """
    return bootstrap_intervals_each([(S, y, seed)], M, eta=eta, n_boot=n_boot, **calibrate_kwargs)[0]


def bootstrap_intervals_each(samples, M: int, eta: float = 0.05, n_boot: int = BOOTSTRAP_REPLICATES,
                             **calibrate_kwargs) -> list[dict[str, tuple[float, float]]]:
    """:func:`bootstrap_intervals` (Prop. 1's box) of each calibration sample ``(S, y, seed)`` in
    ``samples``, e.g. the training folds of a cross-fit. With the binomial EM on round-0 votes, the EM
    chains of every sample's point fit and every replicate run as one batch; each fit is the same as
    computed alone."""
    samples = [(np.asarray(S), np.asarray(y), int(seed)) for S, y, seed in samples]
    options = calibrate_kwargs.get("options", EstimatorOptions())
    if calibrate_kwargs.get("method") == "semisupervised_checked":
        # the replicates refit the estimator the point fit's check chose (rerunning the check per replicate
        # would cost 200 bootstraps each): one sample at a time, each with its own branch
        out = []
        for S, y, seed in samples:
            point = calibrate(S, y, M, seed=seed, **calibrate_kwargs)
            branch = (dict(method="semisupervised_em") if (point.check or {}).get("passed")
                      else dict(method="labeled_mle", vote_rounds="probe"))
            out += bootstrap_intervals_each([(S, y, seed)], M, eta=eta, n_boot=n_boot, **{**calibrate_kwargs, **branch})
        return out
    replicates = []
    for S, _, seed in samples:
        replicates.append(resample_rows(S.shape[0], n_boot, seed)[0])
    point_votes = [None] * len(samples)
    boot_votes = [[None] * n_boot for _ in samples]
    method = calibrate_kwargs.get("method", "binomial_em")
    if method in ("binomial_em", "ppi") and calibrate_kwargs.get("vote_rounds", "first") == "first":
        # every EM at once (point fits and replicates of all samples): the fits are the same as one by one
        boot_hists = [np.stack([np.bincount(S[idx, 0], minlength=M + 1) for idx in reps]).astype(float)
                      for (S, _, _), reps in zip(samples, replicates)]
        em = dict(n_restarts=options.em_restarts, tol=options.em_tol, max_iter=options.em_max_iter)
        k = len(samples)
        if k:
            point_votes = binomial_mixture_em_each([S[:, 0] for S, _, _ in samples], M,
                                                   [seed for _, _, seed in samples], **em)
        rho0, rho1, w = em_rates(np.concatenate(boot_hists) if samples else np.empty((0, M + 1)), M,
                                 [seed for _, _, seed in samples for _ in range(n_boot)], **em)
        for i in range(k):
            rows = slice(i * n_boot, (i + 1) * n_boot)
            boot_votes[i] = [VoteNoiseFit(float(a), float(b), float(c), method="binomial_em")
                             for a, b, c in zip(rho0[rows], rho1[rows], w[rows])]
        if method == "ppi":   # the EM fits are PPI++'s predictors; the probe's labels correct each
            from .ppi import ppi_vote_fit

            probe = (np.asarray(calibrate_kwargs["probe_S"]), np.asarray(calibrate_kwargs["probe_y"]),
                     int(calibrate_kwargs["probe_M"]))
            point_votes = [ppi_vote_fit(S[:, 0], M, *probe, em) for (S, _, _), em in zip(samples, point_votes)]
            boot_votes = [[ppi_vote_fit(S[idx, 0], M, *probe, em) for idx, em in zip(reps, votes)]
                          for (S, _, _), reps, votes in zip(samples, replicates, boot_votes)]
    return [_bootstrap_box(S, y, M, seed, eta, reps, point, votes, **calibrate_kwargs)
            for (S, y, seed), reps, point, votes in zip(samples, replicates, point_votes, boot_votes)]


def _bootstrap_box(S, y, M: int, seed: int, eta: float, replicates, point_votes, votes,
                   **calibrate_kwargs) -> dict[str, tuple[float, float]]:
    """The box of :func:`bootstrap_intervals` from its replicates (instance indices) and, where already
    fit, the vote-noise fits of the point estimate and of each replicate."""
    point_fit = calibrate(S, y, M, seed=seed, votes=point_votes, **calibrate_kwargs)
    point = point_fit.params.as_dict()
    n_boot = len(replicates)
    draws = {name: np.empty(n_boot) for name in PARAM_NAMES}
    labeled = {name: np.full(n_boot, np.nan) for name in ("rho0", "rho1")}
    for b, idx in enumerate(replicates):
        fit = calibrate(S[idx], y[idx], M, seed=seed + b, votes=votes[b], **calibrate_kwargs).params
        for name in PARAM_NAMES:
            draws[name][b] = getattr(fit, name)
        s0, y0 = S[idx, 0], y[idx, 0].astype(bool)
        if (~y0).any():
            labeled["rho0"][b] = s0[~y0].sum() / (M * (~y0).sum())
        if y0.any():
            labeled["rho1"][b] = 1.0 - s0[y0].sum() / (M * y0.sum())
    tail = 100.0 * eta / len(PARAM_NAMES) / 2.0
    # only its labeled counts are used: the point fit's votes spare a second vote-noise fit
    exact = _exact_labeled_intervals(S, y, M, 1.0 - eta / len(PARAM_NAMES), votes=point_fit.votes, **calibrate_kwargs)
    out = {}
    for name in PARAM_NAMES:
        lo, hi = np.percentile(draws[name], [tail, 100.0 - tail])
        lo, hi = min(lo, point[name], exact[name][0]), max(hi, point[name], exact[name][1])
        if name in labeled and np.isfinite(labeled[name]).any():
            llo, lhi = np.nanpercentile(labeled[name], [tail, 100.0 - tail])
            lo, hi = min(lo, llo), max(hi, lhi)
        out[name] = (float(lo), float(hi))
    return out


def _exact_labeled_intervals(S, y, M: int, confidence: float, **calibrate_kwargs) -> dict[str, tuple[float, float]]:
    """Clopper-Pearson intervals from the labeled counts of the calibration sample: alpha, beta and pi on
    the labeled pairs it uses, rho0 and rho1 on the round-0 votes of each class. Exact for binomial counts
    (the percentile bootstrap of a proportion from a few dozen pairs falls short of its level)."""
    cal = calibrate(S, y, M, **calibrate_kwargs)
    t = cal.transitions
    s0, y0 = np.asarray(S)[:, 0], np.asarray(y)[:, 0].astype(bool)
    return {
        "alpha": _clopper_pearson(t.n_fixed, t.n_invalid_before, confidence),
        "beta": _clopper_pearson(t.n_broken, t.n_valid_before, confidence),
        "pi": _clopper_pearson(cal.n_pi_valid, cal.n_pi, confidence),
        "rho0": _clopper_pearson(float(s0[~y0].sum()), float(M * (~y0).sum()), confidence),
        "rho1": _clopper_pearson(float(M * y0.sum() - s0[y0].sum()), float(M * y0.sum()), confidence),
    }


def crossfit_intervals(cf: CrossFit, eta: float = 0.05, S=None, y=None, M: int | None = None,
                       n_boot: int = BOOTSTRAP_REPLICATES, seed: int = 0,
                       **calibrate_kwargs) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per-instance interval endpoints under cross-fitting (each instance gets its fold's intervals).

    With the calibration data (``S``, ``y``, ``M``) the intervals come from :func:`bootstrap_intervals`
    on each fold's training instances; without it, from :func:`parameter_intervals` of each fold's fit.
    """
    if S is None:
        per_fold = [parameter_intervals(f, eta) for f in cf.fits]
    else:
        S, y = np.asarray(S), np.asarray(y)
        per_fold = bootstrap_intervals_each([(S[cf.folds != f], y[cf.folds != f], seed + f) for f in range(len(cf.fits))],
                                            M, eta=eta, n_boot=n_boot, **calibrate_kwargs)
    return {name: (np.array([iv[name][0] for iv in per_fold])[cf.folds],
                   np.array([iv[name][1] for iv in per_fold])[cf.folds]) for name in PARAM_NAMES}


def _gain_path(S, M: int, params: dict) -> np.ndarray:
    b, _ = filter_beliefs(S, M, params["rho0"], params["rho1"], params["alpha"], params["beta"], params["pi"])
    n = b.shape[0]
    a = np.broadcast_to(np.asarray(params["alpha"], float), (n,))[:, None]
    be = np.broadcast_to(np.asarray(params["beta"], float), (n,))[:, None]
    return gain(b, a, be)


def error_radius(S, M: int, point: dict, intervals: dict, grid: int = 5) -> tuple[np.ndarray, np.ndarray]:
    """Error radius B_k (App. A "Error Radius and Sample Complexity"), for Eq. 8 and Prop. 1.

    Propagates the parameter box through the belief recursion (Eq. 5 and the predict step) and
    G_k (Eq. 6): B_k is the largest |G_k(theta) - G-hat_k| over theta in the box. The paper searches
    the 2^5 corners. G is not monotone in the parameters (the sign of d b / d rho0 depends on
    whether S > M rho0, and alpha, beta enter both the prediction and the gain), so the worst case
    can lie inside the box: the search runs the full grid of ``grid`` evenly spaced values per
    parameter (corners included; 5 levels = 3,125 filters). On bootstrap boxes a 9-level grid found
    at most 0.005 more than the 5-level one, against up to 0.05 more than the corners alone.
    ``point`` and ``intervals`` map parameter names to scalars / per-instance arrays (lo, hi).
    Returns (G-hat, B), both [N, K+1].

    The points of :func:`radius_grid` are filtered together: the vote log-likelihoods of Eq. 5 depend
    on (rho0, rho1) only, so they are computed once per pair, and the grid's (alpha, beta, pi) points run
    the recursion as one [points, N] array. Every element goes through the same operations as in a
    one-point filter, so B_k is the same to the last bit (tests check it against the point-by-point search).
    """
    S = np.asarray(S)
    g_hat = _gain_path(S, M, point)
    n, rounds = S.shape
    values = _grid_values(intervals, grid, n)                 # name -> [levels, N]
    levels = values["rho0"].shape[0]
    # (alpha, beta, pi) of every grid point sharing one (rho0, rho1): [levels^3, N] each
    a_idx, b_idx, p_idx = (i.ravel() for i in np.meshgrid(*[np.arange(levels)] * 3, indexing="ij"))
    alpha, beta, pi = values["alpha"][a_idx], values["beta"][b_idx], values["pi"][p_idx]
    radius = np.zeros_like(g_hat)
    for rho0 in values["rho0"]:
        for rho1 in values["rho1"]:
            prior = pi
            for k in range(rounds):
                b = posterior_from_log_likelihoods(prior, *vote_log_likelihoods(S[:, k], M, rho0, rho1))
                g = gain(b, alpha, beta)
                radius[:, k] = np.maximum(radius[:, k], np.abs(g - g_hat[:, k]).max(axis=0))
                prior = predict(b, alpha, beta)
    return g_hat, radius


def _grid_levels(grid: int) -> np.ndarray:
    return np.linspace(0.0, 1.0, max(2, grid))


def _grid_values(intervals: dict, grid: int, n: int) -> dict[str, np.ndarray]:
    """The values of each parameter on the grid of :func:`radius_grid`, per instance: [levels, n]."""
    out = {}
    for name in PARAM_NAMES:
        lo, hi = (np.asarray(v, dtype=float) for v in intervals[name])
        out[name] = np.stack([np.broadcast_to(lo + f * (hi - lo), (n,)) for f in _grid_levels(grid)])
    return out


def radius_grid(intervals: dict, grid: int = 5):
    """The points of the parameter box that the error radius B_k searches (App. A "Error Radius"):
    ``grid`` evenly spaced values per parameter, corners included, one dict of parameter values per
    point (values are scalars or per-instance arrays like the interval endpoints). :func:`error_radius`
    and the online controller (which carries one belief per point, ``vrr.policies.online``) both use it."""
    levels = _grid_levels(grid)
    for fractions in itertools.product(levels, repeat=len(PARAM_NAMES)):
        params = {}
        for name, f in zip(PARAM_NAMES, fractions):
            lo, hi = (np.asarray(v, dtype=float) for v in intervals[name])
            params[name] = lo + f * (hi - lo)
        yield params


def sign_identifiable(g_hat, radius, tau: float = 0.0):
    """Eq. 8 (sign identifiability): G-hat_k - B_k > tau or G-hat_k + B_k <= tau."""
    g_hat, radius = np.asarray(g_hat), np.asarray(radius)
    return (g_hat - radius > tau) | (g_hat + radius <= tau)


@dataclass(frozen=True)
class JDiagnostic:
    """Held-out labeled separation test (Sec. 4.3): J-hat with CI and a one-sided p-value."""

    j_hat: float
    ci_low: float
    ci_high: float
    p_value: float
    accept_valid: float
    accept_invalid: float
    n_valid: int
    n_invalid: int


def labeled_j_diagnostic(S, y, M: int, n_resamples: int = 2000, seed: int = 0,
                         confidence: float = 0.95) -> JDiagnostic:
    """Separation test on labeled plans that does not use EM (Sec. 4.3, Algorithm 1 line 1).

    J-hat = mean acceptance rate of valid plans - that of invalid plans; the CI is a
    two-sample percentile bootstrap (scipy.stats.bootstrap) and the p-value a one-sided
    Mann-Whitney U test that valid plans are accepted more often.
    """
    from scipy import stats  # imported on use: importing scipy.stats costs ~1 s of CPU in every notebook kernel

    rates = np.asarray(S, dtype=float).ravel() / M
    y = np.asarray(y).ravel().astype(bool)
    valid, invalid = rates[y], rates[~y]
    if valid.size < 2 or invalid.size < 2:
        raise ValueError(f"labeled_j_diagnostic: need >= 2 plans per class, got {valid.size} valid, {invalid.size} invalid")
    j_hat = float(valid.mean() - invalid.mean())
    boot = stats.bootstrap((valid, invalid), lambda a, b, axis=-1: a.mean(axis) - b.mean(axis),
                           n_resamples=n_resamples, confidence_level=confidence,
                           method="percentile", vectorized=True, rng=np.random.default_rng(seed))
    p = stats.mannwhitneyu(valid, invalid, alternative="greater").pvalue
    return JDiagnostic(j_hat, float(boot.confidence_interval.low), float(boot.confidence_interval.high),
                       float(p), float(valid.mean()), float(invalid.mean()), int(valid.size), int(invalid.size))


@dataclass(frozen=True)
class FlipGrid:
    """Flip counts over a (J, Delta) grid: ``flips[i, j] / decisions[i, j]`` is the flip rate."""

    j_values: np.ndarray
    delta_edges: np.ndarray
    flips: np.ndarray
    decisions: np.ndarray

    @property
    def rate(self) -> np.ndarray:
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.decisions > 0, self.flips / np.maximum(self.decisions, 1), np.nan)


def flip_risk_grid(j_values, delta_edges, n_calib: int = 300, M: int = 8, k_max: int = 5,
                   n_reps: int = 40, n_eval: int = 500, tau: float = 0.0, seed: int = 0,
                   method: str = "binomial_em") -> FlipGrid:
    """Stopping-sign flip probability under the deployed rule over (J, Delta) (RQ3 figure).

    For each J (symmetric judge, rho0 = rho1 = (1-J)/2) and each replication, repair
    parameters are drawn at random (alpha ~ U(0.05, 0.5), beta ~ U(0.05, 0.9),
    pi ~ U(0.4, 0.9)), a calibration sample of ``n_calib`` trajectories is simulated and fit,
    and fresh evaluation trajectories are filtered with the true and the estimated parameters.
    At every state the true rule (TPM) visits, a flip is a disagreement between sign(G - tau)
    and sign(G-hat - tau); the state is binned by its true margin Delta = |G - tau|.
    """
    from ..data.simulate import simulate_setting  # local import: simulate depends on the model only
    from ..core.model import NoiseParams

    j_values = np.asarray(j_values, dtype=float)
    delta_edges = np.asarray(delta_edges, dtype=float)
    flips = np.zeros((j_values.size, delta_edges.size - 1), dtype=np.int64)
    decisions = np.zeros_like(flips)
    rng = np.random.default_rng(seed)
    # Draw every replication first (the draws do not depend on the fits), so that the EM fits of all
    # calibration samples run as one batch; each fit is the same as on its own.
    reps = []
    for i, j in enumerate(j_values):
        rho = (1.0 - j) / 2.0
        for _ in range(n_reps):
            truth = NoiseParams(rho0=rho, rho1=rho, alpha=rng.uniform(0.05, 0.5),
                                beta=rng.uniform(0.05, 0.9), pi=rng.uniform(0.4, 0.9))
            sub_seed = int(rng.integers(2**31))
            reps.append((i, truth, sub_seed, simulate_setting(truth, n=n_calib, k_max=1, M=M, seed=sub_seed)))
    votes = [None] * len(reps)
    if method == "binomial_em" and reps:
        options = EstimatorOptions()
        votes = binomial_mixture_em_each([r[3].S[:, 0] for r in reps], M, [r[2] for r in reps],
                                         n_restarts=options.em_restarts, tol=options.em_tol,
                                         max_iter=options.em_max_iter)
    for (i, truth, sub_seed, calib_set), fit in zip(reps, votes):
        est = calibrate(calib_set.S, calib_set.y, M, method=method, seed=sub_seed, votes=fit).params
        eval_set = simulate_setting(truth, n=n_eval, k_max=k_max, M=M, seed=sub_seed + 1)
        b_true, _ = filter_beliefs(eval_set.S, M, truth.rho0, truth.rho1, truth.alpha, truth.beta, truth.pi)
        b_est, _ = filter_beliefs(eval_set.S, M, est.rho0, est.rho1, est.alpha, est.beta, est.pi)
        g_true = gain(b_true, truth.alpha, truth.beta)
        g_est = gain(b_est, est.alpha, est.beta)
        # States visited by the true rule: every round up to and including its commit round.
        stop_true = g_true <= tau
        commit = np.where(stop_true.any(1), stop_true.argmax(1), k_max)
        visited = np.arange(k_max + 1)[None, :] <= commit[:, None]
        flip = (g_true > tau) != (g_est > tau)
        margin = np.abs(g_true - tau)[visited]
        bins = np.digitize(margin, delta_edges) - 1
        ok = (bins >= 0) & (bins < delta_edges.size - 1)
        np.add.at(decisions[i], bins[ok], 1)
        np.add.at(flips[i], bins[ok], flip[visited][ok].astype(np.int64))
    return FlipGrid(j_values, delta_edges, flips, decisions)
