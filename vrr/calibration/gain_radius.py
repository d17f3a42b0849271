"""The error radius B_k as a bootstrap of the gain itself (Sec. 4.2, Eq. 8, Prop. 1; App. A "Error Radius").

Prop. 1 needs B_k with P(|G-hat_k - G_k| <= B_k) >= 1 - eta. The paper propagates a box of marginal parameter
intervals through the filter and takes the worst case over the box, which bounds the error by the corner where
every parameter is off at once in the worst direction: valid, but several times the actual error, so the sign is
rarely identifiable. Here the calibration is refit on ``n_boot`` resamples of its data (the calibration instances
and, where the method reads it, the probe's plans within each class; every estimator refit), each draw's
parameters theta_b filter the same votes, and G_k's percentiles over the draws give one-sided bounds at level
1 - eta each, the radii below and above G-hat_k:

    B_k^- = G-hat_k - q_{eta}(G_k(theta_b)),   B_k^+ = q_{1-eta}(G_k(theta_b)) - G-hat_k   (each >= 0),

and Eq. 8 reads G-hat_k - B_k^- > tau (repair identifiable) or G-hat_k + B_k^+ <= tau (commit identifiable).
Prop. 1 holds with one-sided bounds: Eq. 8 tests only the side of tau that G-hat_k is on, so a flip under
"repair identifiable" needs G_k < G-hat_k - B_k^-, and under "commit identifiable" G_k > G-hat_k + B_k^+, each an
event of probability at most eta when its bound covers at its level.
The interval follows the joint distribution of the estimates (their correlations included), the filter's own
sensitivity at that state's votes, and the skew of a rate near 0: where the votes make a plan surely invalid,
G_k is about alpha, which stays positive in every draw; a symmetric radius there would reach below zero and call
the sign unidentifiable. ``scripts/coverage_study.py``
measures its coverage on simulated windows with known parameters (docs/integrity.md, "Coverage of B_k").
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..core.belief import filter_beliefs, gain
from ..settings import reads_probe
from ._memo import memoized
from .estimators import EstimatorOptions, VoteNoiseFit, calibrate, labeled_mle, vote_histograms, vote_parameters
from .mixture import em_rates, resample_rows

PARAM_NAMES = ("rho0", "rho1", "alpha", "beta", "pi")
CORRELATION_NAMES = ("phi0", "phi1")   # drawn too under the exchangeable-vote likelihood
RADIUS_REPLICATES = 200


def _resample_probe(rng, probe_S, probe_y):
    """Indices of a probe resample that keeps each class's size (the labeled plans' classes are fixed)."""
    y = np.asarray(probe_y).astype(bool)
    parts = [np.flatnonzero(y), np.flatnonzero(~y)]
    return np.concatenate([p[rng.integers(0, p.size, p.size)] for p in parts if p.size])


def parameter_draws(S, y, M: int, n_boot: int = RADIUS_REPLICATES, seed: int = 0, method: str = "binomial_em",
                    vote_rounds: str = "first", max_pairs: int | None = 300,
                    options: EstimatorOptions = EstimatorOptions(), probe_S=None, probe_y=None, probe_M=None,
                    point: "Calibration | None" = None,  # noqa: F821
                    likelihood: str = "binomial") -> dict[str, np.ndarray]:
    """The calibrated parameters of ``n_boot`` bootstrap resamples of one calibration sample: {name: [n_boot]}.

    Calibration instances are resampled whole (their votes and labels together); with a method that reads the
    probe, the probe's plans are resampled within each class. alpha, beta and pi are then drawn from their
    Jeffreys posteriors instead (:func:`jeffreys_draws`). ``ppi`` refits its predictor (the label-free EM) and
    its correction on every resample, PPI++'s intervals as a bootstrap. ``semisupervised_checked`` keeps the branch its
    point fit's check chose (``point``: that fit; refit when not given): the draws measure the estimation error
    of the estimator that was deployed, not the check's. ``likelihood="beta_binomial"``: the exchangeable-vote
    estimators (``vrr.calibration.correlated``), refit from the point fit, and phi0, phi1 are drawn too."""
    arr = lambda a: None if a is None else np.asarray(a)  # noqa: E731
    return _parameter_draws(np.asarray(S), np.asarray(y), M, n_boot, seed, method, vote_rounds, max_pairs, options,
                            arr(probe_S), arr(probe_y), probe_M, _point_read(point, method), likelihood)


def _point_read(point, method: str):
    """The point fit as the draws read it: its check only under ``semisupervised_checked`` (whose branch it
    chose), so that a fit with the check attached (05's ablation) and without (calibration.json) share draws."""
    if point is None or method == "semisupervised_checked" or point.check is None:
        return point
    return replace(point, check=None)


@memoized
def _parameter_draws(S, y, M, n_boot, seed, method, vote_rounds, max_pairs, options, probe_S, probe_y, probe_M,
                     point, likelihood) -> dict[str, np.ndarray]:
    """:func:`parameter_draws`, computed once per distinct input (``vrr.calibration._memo``)."""
    plan = _draw_plan(S, y, M, n_boot, seed, method, vote_rounds, max_pairs, options, probe_S, probe_y, probe_M,
                      point, likelihood)
    _run_fits([plan])
    return _finish_draws(plan)


def parameter_draws_folds(S, y, M: int, folds, n_boot: int = RADIUS_REPLICATES, seed: int = 0,
                          method: str = "binomial_em", vote_rounds: str = "first", max_pairs: int | None = 300,
                          options: EstimatorOptions = EstimatorOptions(), probe_S=None, probe_y=None, probe_M=None,
                          points=None, likelihood: str = "binomial") -> list[dict[str, np.ndarray]]:
    """:func:`parameter_draws` of every cross-fit fold's calibration sample (the instances outside fold f, seed
    ``seed + f``, point ``points[f]``), the refits of all folds run as one batch: fold f's draws are
    ``parameter_draws`` of its sample, to the last bit (every fit in the batch goes through the operations it would
    go through alone)."""
    arr = lambda a: None if a is None else np.asarray(a)  # noqa: E731
    folds = np.asarray(folds)
    n_folds = int(folds.max()) + 1 if folds.size else 0
    points = [_point_read(p, method) for p in points] if points is not None else [None] * n_folds
    return _parameter_draws_folds(np.asarray(S), np.asarray(y), M, folds, n_boot, seed, method, vote_rounds, max_pairs,
                                  options, arr(probe_S), arr(probe_y), probe_M, points, likelihood)


@memoized
def _parameter_draws_folds(S, y, M, folds, n_boot, seed, method, vote_rounds, max_pairs, options, probe_S, probe_y,
                           probe_M, points, likelihood) -> list[dict[str, np.ndarray]]:
    plans = [_draw_plan(S[folds != f], y[folds != f], M, n_boot, seed + f, method, vote_rounds, max_pairs, options,
                        probe_S, probe_y, probe_M, point, likelihood) for f, point in enumerate(points)]
    _run_fits(plans)
    return [_finish_draws(plan) for plan in plans]


def _draw_plan(S, y, M, n_boot, seed, method, vote_rounds, max_pairs, options, probe_S, probe_y, probe_M, point,
               likelihood) -> dict:
    """The resamples of one calibration sample and the vote-noise fits they need: ``votes`` holds the fits
    computed here, ``job`` the batched fit still to run (:func:`_run_fits`), if any."""
    uses_probe = reads_probe(method, vote_rounds)
    if uses_probe and (probe_S is None or probe_M is None):
        raise ValueError(f"parameter_draws: method {method!r} / vote_rounds {vote_rounds!r} needs the probe")
    kwargs = dict(method=method, vote_rounds=vote_rounds, max_pairs=max_pairs, options=options, likelihood=likelihood)
    reps, rng = resample_rows(S.shape[0], n_boot, seed)
    probe_reps = [None] * n_boot
    if uses_probe:
        probe_reps = [(_resample_probe(rng, probe_S, probe_y) if probe_y is not None
                       else rng.integers(0, len(probe_S), len(probe_S))) for _ in range(n_boot)]
    plan = dict(S=S, y=y, M=M, n_boot=n_boot, seed=seed, kwargs=kwargs, probe=(probe_S, probe_y, probe_M),
                uses_probe=uses_probe, reps=reps, probe_reps=probe_reps, votes=[None] * n_boot, job=None,
                likelihood=likelihood)
    fit_as = method
    if method == "semisupervised_checked":
        if point is None:
            point = calibrate(S, y, M, seed=seed, probe_S=probe_S, probe_y=probe_y, probe_M=probe_M, **kwargs)
        fit_as = "semisupervised_em" if (point.check or {}).get("passed") else "labeled_probe"
    if likelihood != "binomial":
        if point is None:
            point = calibrate(S, y, M, seed=seed, probe_S=probe_S, probe_y=probe_y, probe_M=probe_M, **kwargs)
        plan["job"] = _correlated_job(fit_as, point.votes, S, y, M, reps, probe_reps, vote_rounds, probe_S, probe_y,
                                      probe_M, options)
    elif fit_as == "binomial_em" and vote_rounds == "first":
        plan["job"] = ("em", (M, options.em_restarts, options.em_tol, options.em_max_iter),
                       vote_histograms([S[idx, 0] for idx in reps], M), [seed] * n_boot)
    elif fit_as == "ppi":
        # PPI++'s own bootstrap: each resample refits the label-free EM (the predictor) on its window plans and
        # corrects it with its probe resample (vrr.calibration.ppi); no check runs per resample
        plan["job"] = ("em", (M, options.em_restarts, options.em_tol, options.em_max_iter),
                       vote_histograms([_vote_sample(S, idx, vote_rounds) for idx in reps], M), [seed] * n_boot)
        plan["ppi"] = vote_rounds
    elif fit_as == "semisupervised_em" and vote_rounds == "first":
        from .semisupervised import labeled_vote_stats

        lab = np.stack([labeled_vote_stats(np.asarray(probe_S)[p], np.asarray(probe_y)[p], probe_M)
                        for p in probe_reps])
        plan["job"] = ("semisupervised_em", (M, min(options.em_restarts, 4), options.em_tol, options.em_max_iter),
                       vote_histograms([S[idx, 0] for idx in reps], M), [seed] * n_boot, lab)
    elif fit_as == "labeled_probe" or (fit_as == "labeled_mle" and vote_rounds == "probe" and probe_y is not None):
        plan["votes"] = [labeled_mle(np.asarray(probe_S)[p], np.asarray(probe_y)[p], int(probe_M)) for p in probe_reps]
    plan["point"] = point
    return plan


def _run_fits(plans: list) -> None:
    """Run the batched fits the plans need, jobs of one kind (and the same vote count and options) together, and
    hand each plan its fits (``plan["votes"]``)."""
    from .correlated import refit_many

    groups: dict = {}
    for i, plan in enumerate(plans):
        if plan["job"] is not None:
            groups.setdefault(plan["job"][:2], []).append(i)
    for (kind, key), members in groups.items():
        jobs = [plans[i]["job"] for i in members]
        sizes = [len(job[3]) for job in jobs]
        if kind == "semisupervised_em":
            from .semisupervised import semisupervised_em_many

            M, restarts, tol, max_iter = key
            fit = semisupervised_em_many(np.concatenate([job[2] for job in jobs]), M,
                                         np.concatenate([job[4] for job in jobs]), n_restarts=restarts,
                                         seed=[x for job in jobs for x in job[3]], tol=tol, max_iter=max_iter)
            fits = [VoteNoiseFit(float(a), float(b), float(c), method="semisupervised_em")
                    for a, b, c in zip(fit["rho0"], fit["rho1"], fit["weight_valid"])]
        elif kind == "em":
            M, restarts, tol, max_iter = key
            hists = np.concatenate([job[2] for job in jobs])
            rho0, rho1, w = em_rates(hists, M, [x for job in jobs for x in job[3]], n_restarts=restarts, tol=tol,
                                     max_iter=max_iter)
            fits = [VoteNoiseFit(float(a), float(b), float(c), method="binomial_em") for a, b, c in zip(rho0, rho1, w)]
        else:
            vM, M_l, phi_cap = key[1:]
            points = [job[2] for job in jobs for _ in range(len(job[3]))]
            samples = [x for job in jobs for x in job[3]]
            labeled = [x for job in jobs for x in job[4]] if jobs[0][4] is not None else None
            fits = refit_many(key[0], points, samples, vM, labeled_samples=labeled, M_l=M_l, phi_cap=phi_cap)
        for i, lo, hi in zip(members, np.cumsum([0] + sizes[:-1]), np.cumsum(sizes)):
            plans[i]["votes"] = fits[lo:hi]
    for plan in plans:
        if plan.get("ppi"):
            from .ppi import ppi_vote_fit

            probe_S, probe_y, probe_M = plan["probe"]
            plan["votes"] = [ppi_vote_fit(_vote_sample(plan["S"], idx, plan["ppi"]), plan["M"], probe_S[p],
                                          probe_y[p], probe_M, em)
                             for idx, p, em in zip(plan["reps"], plan["probe_reps"], plan["votes"])]


def _vote_sample(S, idx, vote_rounds: str) -> np.ndarray:
    """The vote counts a resample's vote-noise fit reads: its first plans' (``first``) or all its plans'."""
    return S[idx, 0] if vote_rounds == "first" else S[idx].ravel()


def _finish_draws(plan: dict) -> dict[str, np.ndarray]:
    """The draws {name: [n_boot]} of a plan whose fits have run: rho0, rho1 (phi0, phi1) from each resample's
    vote-noise fit as calibrate takes them, alpha, beta, pi from their Jeffreys posteriors."""
    S, y, M, seed, likelihood, kwargs = (plan[k] for k in ("S", "y", "M", "seed", "likelihood", "kwargs"))
    probe_S, probe_y, probe_M = plan["probe"]
    names = PARAM_NAMES + (CORRELATION_NAMES if likelihood != "binomial" else ())
    draws = {name: np.empty(plan["n_boot"]) for name in names}
    for b, idx in enumerate(plan["reps"]):
        votes = plan["votes"][b]
        if votes is not None:     # the vote-noise fit is all a draw takes from calibrate (alpha, beta, pi: below)
            for name, value in _vote_parameters(votes, likelihood).items():
                draws[name][b] = value
            continue
        p = plan["probe_reps"][b]
        probe = {}
        if plan["uses_probe"]:
            probe = dict(probe_S=np.asarray(probe_S)[p], probe_M=probe_M,
                         probe_y=None if probe_y is None else np.asarray(probe_y)[p])
        fit = calibrate(S[idx], y[idx], M, seed=seed + b, **probe, **kwargs).as_kwargs()
        for name in names:
            draws[name][b] = fit[name]
    point = plan["point"]
    if point is None:
        point = calibrate(S, y, M, seed=seed, probe_S=probe_S, probe_y=probe_y, probe_M=probe_M, **kwargs)
    draws.update(jeffreys_draws(point, plan["n_boot"], seed))
    return draws


def _vote_parameters(votes: VoteNoiseFit, likelihood: str) -> dict[str, float]:
    """rho0, rho1 (and phi0, phi1) of a resample's vote-noise fit, as :func:`calibrate` takes them
    (:func:`vrr.calibration.estimators.vote_parameters`)."""
    return vote_parameters(votes, likelihood)[0]


def _correlated_job(fit_as: str, point_votes, S, y, M: int, reps, probe_reps, vote_rounds: str, probe_S, probe_y,
                     probe_M, options) -> tuple:
    """The exchangeable-vote refit of every resample, started from the point fit's votes, as a job for
    :func:`_run_fits`: ("refit", (kind, M, M_l, phi_cap), point votes, samples, labeled samples or None)."""
    def sample(idx, p):  # the vote-noise sample of one resample, as calibrate reads it
        if vote_rounds == "probe":
            return np.asarray(probe_S)[p], None if probe_y is None else np.asarray(probe_y)[p], probe_M
        rows = S[idx, 0] if vote_rounds == "first" else S[idx].ravel()
        labels = y[idx, 0] if vote_rounds == "first" else y[idx].ravel()
        return rows, labels, M

    samples = [sample(idx, p) for idx, p in zip(reps, probe_reps)]
    vM = samples[0][2] if samples else M
    if fit_as in ("binomial_em", "beta_binomial_em"):
        return ("refit", ("label_free", vM, None, options.bb_phi_cap), point_votes, [s[0] for s in samples], None)
    if fit_as == "labeled_mle":
        return ("refit", ("labeled", vM, None, 0.3), point_votes, [(s[0], s[1]) for s in samples], None)
    labeled = [(np.asarray(probe_S)[p], np.asarray(probe_y)[p]) for p in probe_reps]
    if fit_as == "labeled_probe":
        return ("refit", ("labeled", probe_M, None, 0.3), point_votes, labeled, None)
    if fit_as == "semisupervised_em":
        return ("refit", ("semisupervised", vM, probe_M, 0.3), point_votes, [s[0] for s in samples], labeled)
    raise ValueError(f"parameter_draws: calibration method {fit_as!r} has no exchangeable-vote estimator")


def jeffreys_draws(cal, n_boot: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Draws of alpha, beta and pi from their Jeffreys posteriors Beta(k + 1/2, n - k + 1/2) on the calibration's
    labeled counts (the repair pairs' fixes and breaks, the initial plans' valid count).

    These three are plain proportions of a few dozen to a few hundred labeled pairs. The percentile bootstrap of a
    proportion that size falls short of its level (it never leaves the sample's support: 0 of 40 stays 0), while
    the Jeffreys interval holds it (Brown, Cai and DasGupta 2001), so B_k takes their uncertainty from these."""
    rng = np.random.default_rng(seed + 15485863)
    t = cal.transitions
    out = {}
    for name, k, n in (("alpha", t.n_fixed, t.n_invalid_before), ("beta", t.n_broken, t.n_valid_before),
                       ("pi", cal.n_pi_valid, cal.n_pi)):
        out[name] = rng.beta(k + 0.5, n - k + 0.5, size=n_boot)
    return out


def instance_draws(folds, per_fold: list) -> dict[str, np.ndarray]:
    """Each cross-fit fold's draws {name: [n_boot]} (``per_fold[f]``, :func:`parameter_draws` of the fold's
    training instances) mapped to the instances: {name: [n_boot, N]} (instance i's draws come from the fit that
    scores it, fold ``folds[i]``); phi0, phi1 too where the draws hold them."""
    return {name: np.stack([d[name] for d in per_fold], axis=1)[:, np.asarray(folds)] for name in per_fold[0]}


def gain_paths(S, M: int, params: dict) -> np.ndarray:
    """G_k (Eq. 6) along each frozen trajectory [N, K+1] under stationary ``params`` (scalars or [N] arrays); with
    phi0, phi1 in ``params``, beliefs from Eq. 5's exchangeable-vote likelihood."""
    S = np.asarray(S)
    n = S.shape[0]
    b, _ = filter_beliefs(S, M, params["rho0"], params["rho1"], params["alpha"], params["beta"], params["pi"],
                          params.get("phi0"), params.get("phi1"))
    a = np.broadcast_to(np.asarray(params["alpha"], float), (n,))[:, None]
    be = np.broadcast_to(np.asarray(params["beta"], float), (n,))[:, None]
    return gain(b, a, be)


def gain_draws(S, M: int, draws: dict) -> np.ndarray:
    """G_k of every trajectory under every draw: [B, N, K+1]. ``draws`` maps names to [B] or [B, N]; all draws
    are filtered as one [B * N] batch, each element through the same operations as alone."""
    S = np.asarray(S)
    n, rounds = S.shape
    n_boot = np.shape(draws["rho0"])[0]
    flat = {name: np.broadcast_to(np.asarray(draws[name], float).reshape(n_boot, -1), (n_boot, n)).ravel()
            for name in PARAM_NAMES + tuple(k for k in CORRELATION_NAMES if k in draws)}
    return gain_paths(np.tile(S, (n_boot, 1)), M, flat).reshape(n_boot, n, rounds)


def radii_of_draws(g_draws, g_hat, eta: float = 0.05, axis: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(B^-, B^+) of the module docstring from the gains of the draws (along ``axis``) and G-hat: the distances
    from G-hat down to the draws' eta quantile and up to their 1 - eta quantile (outer order statistics),
    each at least 0. One state online (the controller carries one belief per draw) or [N, K+1] in replay."""
    if not 0.0 < eta < 1.0:
        raise ValueError(f"radii_of_draws: eta must be in (0, 1), got {eta}")
    g_draws = np.asarray(g_draws, float)
    low = np.quantile(g_draws, eta, axis=axis, method="lower")
    high = np.quantile(g_draws, 1.0 - eta, axis=axis, method="higher")
    g_hat = np.asarray(g_hat, float)
    return np.maximum(g_hat - low, 0.0), np.maximum(high - g_hat, 0.0)


def bootstrap_radius(S, M: int, point: dict, draws: dict, eta: float = 0.05):
    """(G-hat, B^-, B^+), each [N, K+1]: G-hat under the point estimates ``point`` and the radii below and above
    it from the draws' one-sided percentile bounds of G_k at level 1 - eta (module docstring)."""
    g_hat = gain_paths(S, M, point)
    low, high = radii_of_draws(gain_draws(S, M, draws), g_hat, eta)
    return g_hat, low, high


def labeled_parameter_draws(votes, labels, M: int, pairs_before, pairs_after, n_boot: int = RADIUS_REPLICATES,
                            seed: int = 0, max_pairs: int | None = 300) -> dict[str, np.ndarray]:
    """Bootstrap draws {name: [n_boot]} of a calibration from labeled data alone (the online controller's
    ``from_labeled``): rho0, rho1 the labeled MLE of the plans' accept counts ``votes`` with ``labels``, pi their
    valid share, alpha, beta the frequencies of the labeled repair pairs (``pairs_before`` -> ``pairs_after``),
    each with the substitution rules of :func:`vrr.calibration.estimators.defined_rate`. Plans and pairs are
    resampled separately (they need not be the same plans)."""
    from .estimators import defined_rate, labeled_subset

    S = np.asarray(votes, dtype=float).ravel()
    y = np.asarray(labels).ravel().astype(bool)
    yb = np.asarray(pairs_before).ravel().astype(bool)
    ya = np.asarray(pairs_after).ravel().astype(bool)
    if S.shape != y.shape or yb.shape != ya.shape:
        raise ValueError("labeled_parameter_draws: votes/labels and pairs_before/pairs_after must pair up")
    keep = labeled_subset(yb.size, max_pairs, seed)
    yb, ya = yb[keep], ya[keep]
    rng = np.random.default_rng(seed + 7919)
    draws = {name: np.empty(n_boot) for name in PARAM_NAMES}
    for b in range(n_boot):
        i = rng.integers(0, S.size, S.size)
        j = rng.integers(0, yb.size, yb.size)
        fit = labeled_mle(S[i], y[i], M)
        draws["rho0"][b] = fit.rho0 if np.isfinite(fit.rho0) else 0.5
        draws["rho1"][b] = fit.rho1 if np.isfinite(fit.rho1) else 0.5
        b0, a0 = yb[j], ya[j]
        draws["alpha"][b] = defined_rate(int((~b0 & a0).sum()), int((~b0).sum()), unsafe=())[0]
        draws["beta"][b] = defined_rate(int((b0 & ~a0).sum()), int(b0.sum()), unsafe=(0.0,))[0]
        draws["pi"][b] = defined_rate(int(y[i].sum()), int(S.size), unsafe=(0.0, 1.0))[0]
    return draws
