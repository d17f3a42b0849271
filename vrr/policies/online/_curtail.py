"""When the controller stops asking for votes: sequential curtailment of a round (``sequential`` option).

A round's votes arrive one at a time. With s accepts out of n < M, each completion S in s..s+M-n of the
remaining votes has its full-round step (``Round.step``, Algorithm 1 lines 4-19). The rules below end the
round early, tried in this order:

* :func:`exact`: every completion gives the same decision and the same state (``"exact"`` and above);
  the decision is the one the full M votes would give, always.
* :func:`future_aware`: VRR-Stop only; every completion repairs, and the beliefs they carry lie between the
  same two of :func:`critical_priors`' breakpoints, so every future vote path gets the same decisions; again
  exact.
* :func:`predictive` (``"predictive"``): the full-M decision is known with probability >= 1 - error_rate
  under the calibrated model's predictive distribution of the remaining votes (stochastic curtailment).
* :func:`sprt` (``"sprt"``): Wald's SPRT on the votes' likelihood ratio (the likelihood of Eq. 5); an early
  commit of an invalid plan, or an early repair of a valid one, has probability <= error_rate.
"""
from __future__ import annotations

import math

import numpy as np
from scipy.special import expit, logit

from ...core.belief import belief_update, predict, vote_log_likelihoods
from ..rules import algorithm1_step, stop_commits
from ._decision import Step
from ._options import repair_rates
from ._round import Round

# Future-aware curtailment compares log-odds of beliefs with analytic breakpoints. It runs only where the
# floating-point beliefs stay far from the breakpoints' resolution: parameters inside [LIM, 1 - LIM],
# boundaries |logit b*| <= LOGIT_MAX, and a margin EPS (log-odds) around every breakpoint.
_LIM, _LOGIT_MAX, _EPS = 1e-4, 15.0, 1e-5


def exact(steps: dict) -> Step | None:
    """Exact curtailment: the step every completion gives when they all share one decision and one state
    (``Step.key``), else None. Guarantee: the decision, and the state carried forward, are those of the full
    M votes."""
    keys = {step.key(S) for S, step in steps.items()}
    return next(iter(steps.values())) if len(keys) == 1 else None


def critical_priors(cfg: dict) -> list | None:
    """Per round j, the sorted log-odds of the prior b^-_j at which VRR-Stop's decisions on some future
    vote path change (Eqs. 5-7 composed with the predict step); None where the analysis does not apply.

    Round j commits iff the posterior log-odds l + L(S) reach logit b*_tau (Eq. 7), L(S) the votes'
    log-likelihood ratio; so its breakpoints are logit b*_tau - L(S) for every count S, plus, where it
    repairs, the preimages under l -> logit predict(expit(l + L(S))) (strictly monotone) of round j+1's
    breakpoints. Round K_max always commits and has none. Decisions from round j on are constant between
    consecutive breakpoints, so a set of priors with no breakpoint between them shares every future."""
    c = cfg
    M, K, tau = c["M"], c["k_max"], c["tau"]
    inside = lambda v: _LIM <= v <= 1.0 - _LIM  # noqa: E731
    if c["policy"] != "vrr_stop" or not (inside(c["rho0"]) and inside(c["rho1"])):
        return None
    S = np.arange(M + 1, dtype=float)
    L = S * (math.log1p(-c["rho1"]) - math.log(c["rho0"])) + (M - S) * (math.log(c["rho1"]) - math.log1p(-c["rho0"]))
    crit: list = [None] * (K + 1)
    crit[K] = np.empty(0)
    for j in range(K - 1, 0, -1):
        a, be = repair_rates(c, j)
        if a <= tau:                        # always commits: no breakpoint, no future
            crit[j] = np.empty(0)
            continue
        if not (inside(a) and inside(be)) or abs(1.0 - a - be) < 1e-9:
            return None
        b_star = (a - tau) / (a + be)
        parts = []
        upper = math.inf                    # b* >= 1: never commits (b = 1.0 gives G = -beta > tau)
        if b_star < 1.0:
            upper = float(logit(b_star))
            if abs(upper) > _LOGIT_MAX:
                return None
            parts.append(upper - L)
        if crit[j + 1].size:
            q = expit(crit[j + 1])
            b = (q - a) / (1.0 - a - be)
            b = b[(b > 0.0) & (b < 1.0)]
            lb = logit(b)
            lb = lb[lb < upper + _EPS]      # where round j commits, round j+1 is never reached
            parts.append((lb[:, None] - L[None, :]).ravel())
        pts = np.concatenate(parts) if parts else np.empty(0)
        a_prev, be_prev = repair_rates(c, j - 1)  # round j's prior is predict(b_{j-1}) in [alpha, 1 - beta]
        lo, hi = sorted((a_prev, 1.0 - be_prev))
        lo, hi = (float(logit(v)) if 0.0 < v < 1.0 else (-math.inf if v <= 0 else math.inf) for v in (lo, hi))
        crit[j] = np.unique(pts[(pts >= lo - 1.0) & (pts <= hi + 1.0)])
    return crit


def future_aware(rnd: Round, s: int, n: int, steps: dict, critical) -> Step | None:
    """VRR-Stop's repair round is decided once every completion repairs and the beliefs they carry (and
    the one the votes seen carry) lie between the same two breakpoints of round k+1 (:func:`critical_priors`,
    given as ``critical()``, computed once per controller): every future vote path then gets the same
    decisions. Guarantee: exact, as :func:`exact`, for the rest of the problem."""
    c = rnd.cfg
    first = next(iter(steps.values()))
    if c["policy"] != "vrr_stop" or rnd.mode != "stop" or any(
            st.action != "repair" or st.key(0)[:-1] != first.key(0)[:-1] for st in steps.values()):
        return None
    crit = critical()
    if crit is None:
        return None
    a, be = repair_rates(c, rnd.k)
    counts = np.array(list(steps), dtype=float)
    b = np.append(belief_update(rnd.prior, counts, c["M"], c["rho0"], c["rho1"]),
                  belief_update(rnd.prior, s, n, c["rho0"], c["rho1"]))
    q = predict(b, a, be)
    if not np.all((q > 0.0) & (q < 1.0)):
        return None
    lq = logit(q)
    nxt = crit[rnd.k + 1]
    lo, hi = float(lq.min()) - _EPS, float(lq.max()) + _EPS
    if np.searchsorted(nxt, lo, side="left") != np.searchsorted(nxt, hi, side="right"):
        return None
    return Step("repair", first.candidate, first.mode, first.reason + "; no remaining vote changes the "
                "decision on any future path", first.incumbent, first.incumbent_votes, False)


def predictive(rnd: Round, s: int, n: int, steps: dict) -> Step | None:
    """Stochastic curtailment on the model's own likelihood: stop asking once the decision that the
    full M votes would give is known with probability >= 1 - error_rate.

    Given s of n votes, the remaining r = M - n accepts are b_n Bin(r, 1-rho1) + (1-b_n) Bin(r, rho0),
    b_n the Eq. 5 posterior of the votes seen. Completions are grouped by action, candidate and the
    state they leave; a group that would need the exact count (a new Guard incumbent) never ends the
    round early. The belief carried forward is the posterior of the votes actually seen.
    """
    from scipy.stats import binom  # the predictive distribution of the remaining votes

    c = rnd.cfg
    r = c["M"] - n
    b = belief_update(rnd.prior, s, n, c["rho0"], c["rho1"])
    j = np.arange(r + 1)
    prob = b * binom.pmf(j, r, 1.0 - c["rho1"]) + (1.0 - b) * binom.pmf(j, r, c["rho0"])
    groups: dict = {}
    for jj, p in zip(j, prob):
        step = steps[s + int(jj)]
        exact_needed = step.needs_count and not (step.action == "repair" and step.mode == "stop"
                                                 and step.incumbent == rnd.incumbent
                                                 and step.incumbent_votes == rnd.incumbent_votes)
        gkey = (step.action, step.candidate, step.mode, step.incumbent, step.incumbent_votes,
                s + int(jj) if exact_needed else None)
        groups[gkey] = groups.get(gkey, 0.0) + float(p)
    best = max(groups, key=groups.get)
    if best[-1] is None and groups[best] >= 1.0 - c["error_rate"]:
        action, candidate, mode, incumbent, inc_votes, _ = best
        reason = next(st.reason for S, st in steps.items()
                      if (st.action, st.candidate, st.mode, st.incumbent, st.incumbent_votes)
                      == (action, candidate, mode, incumbent, inc_votes))
        return Step(action, candidate, mode, reason, incumbent, inc_votes, False)
    return None


def sprt(rnd: Round, s: int, n: int, steps: dict) -> Step | None:
    """Wald's SPRT on the votes' binomial likelihood ratio (the likelihood of Eq. 5), anytime-valid.

    LR_n = ((1-rho1)/rho0)^s (rho1/(1-rho0))^(n-s) is a nonnegative martingale with mean 1 under an
    invalid plan, and 1/LR_n under a valid one, so by Ville's inequality LR_n reaches 1/error_rate on an
    invalid plan, or error_rate on a valid one, with probability <= error_rate at any vote, whatever the
    order. The round ends early when LR_n >= 1/error_rate and the Stop-mode rule on the votes seen
    commits, or LR_n <= error_rate and it repairs: an early commit of an invalid plan, or an early repair
    of a valid one, has probability <= error_rate under the calibrated model. Guard decisions and new
    incumbents need the exact count and never end early here.
    """
    c = rnd.cfg
    if rnd.mode != "stop" or len({(st.incumbent, st.incumbent_votes) for st in steps.values()}) != 1:
        return None
    ll_valid, ll_invalid = vote_log_likelihoods(s, n, c["rho0"], c["rho1"])
    llr = float(ll_valid - ll_invalid)
    bound = math.log(1.0 / c["error_rate"])
    if -bound < llr < bound or math.isnan(llr):
        return None
    _, g, radius, radius_low, _ = rnd.evaluate(s, n)
    if c["policy"] == "vrr_stop":
        commit, unidentifiable = stop_commits(g, repair_rates(c, rnd.k)[0], c["tau"]), False
    else:
        commit, unidentifiable = algorithm1_step(g, radius, c["tau"], radius_low=radius_low)
    first = next(iter(steps.values()))
    k = rnd.k
    if llr >= bound and commit:
        return Step("commit", k, "stop", f"SPRT: likelihood ratio >= 1/{c['error_rate']:g} and the votes "
                    "seen commit", first.incumbent, first.incumbent_votes, False)
    if llr <= -bound and not commit and not unidentifiable and k < c["k_max"]:
        return Step("repair", k, "stop", f"SPRT: likelihood ratio <= {c['error_rate']:g} and the votes "
                    "seen repair", first.incumbent, first.incumbent_votes, False)
    return None
