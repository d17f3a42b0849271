"""The decision check: do the label-free vote rates change VRR-Stop's decisions? (Sec. 4.1-4.2; Algorithm 1)

The label-free EM's (rho0, rho1) matter only through the decisions they make. The check runs VRR-Stop's rule
(Eqs. 5-7: filter the votes, commit at the first round with G_k <= tau) on the calibration sample's own vote
trajectories twice, once with the label-free rates and once with the labeled probe's rates, both with the same
alpha, beta, pi, and scores both sets of decisions under the labeled model:

    L = mean_i [ b^lab_{i, k_lab(i)} - b^lab_{i, k_free(i)} ],

where b^lab is the belief filtered with the labeled rates (Eq. 5) and k_lab, k_free the rounds each rate set
commits. VRR-Stop's commit time depends only on the votes seen so far, so b^lab at that round is the labeled
model's expected validity of the committed plan (optional stopping): L is the validity the label-free decisions
give up, as the labeled model sees it. The check rejects when L exceeds ``LOSS_THRESHOLD`` (2 pp).

It asks a different question from the Wald check (``vrr.calibration.check``), which asks whether the two rate
estimates differ at all: over-dispersed votes move the EM's rates without moving a decision, and then the Wald
check rejects while L stays near 0. The Wald statistic is kept beside it as a diagnostic.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core.belief import filter_beliefs, gain
from .check import Verdict

LOSS_THRESHOLD = 0.02


def stop_rounds(S, M: int, rho0, rho1, alpha, beta, pi, tau: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """(committed round per trajectory, beliefs [N, K+1]) of VRR-Stop's rule (Eqs. 5-7): the first round with
    G_k = (1 - b_k) alpha - b_k beta <= tau, every round when alpha <= tau, else K_max."""
    S = np.asarray(S)
    b, _ = filter_beliefs(S, M, rho0, rho1, alpha, beta, pi)
    commit = (gain(b, alpha, beta) <= tau) | (alpha <= tau)
    k_max = S.shape[1] - 1
    return np.where(commit.any(axis=1), commit.argmax(axis=1), k_max), b


@dataclass(frozen=True)
class DecisionCheck(Verdict):
    """The decision check's verdict and what is behind it (recorded in ``calibration.json``)."""

    loss: float               # L, validity the label-free decisions give up under the labeled model
    threshold: float
    decisions_changed: float  # share of trajectories whose committed round differs
    rho0_free: float
    rho1_free: float
    rho0_labeled: float
    rho1_labeled: float
    passed: bool
    reason: str


def decision_check(S, M: int, free: tuple[float, float], labeled: tuple[float, float], alpha: float, beta: float,
                   pi: float, tau: float = 0.0, threshold: float = LOSS_THRESHOLD) -> DecisionCheck:
    """The check of the module docstring on one calibration sample: ``S`` its [N, K+1] vote trajectories (M votes a
    round), ``free`` and ``labeled`` the (rho0, rho1) of the label-free fit and of the labeled probe, ``alpha``,
    ``beta``, ``pi`` the labeled repair rates and prior both runs share."""
    S = np.asarray(S)
    if S.ndim != 2 or S.shape[0] == 0:
        raise ValueError(f"decision_check: S must be a non-empty [N, K+1] array, got shape {S.shape}")
    if not 0.0 <= threshold < 1.0:
        raise ValueError(f"decision_check: threshold must be in [0, 1), got {threshold}")
    rates = np.array([*free, *labeled], dtype=float)
    if not np.all(np.isfinite(rates)):
        return DecisionCheck(float("nan"), threshold, float("nan"), *map(float, rates), False,
                             "a rate is undefined (a class absent): the decisions cannot be compared")
    k_lab, b_lab = stop_rounds(S, M, labeled[0], labeled[1], alpha, beta, pi, tau)
    k_free, _ = stop_rounds(S, M, free[0], free[1], alpha, beta, pi, tau)
    rows = np.arange(S.shape[0])
    loss = float(np.sum(b_lab[rows, k_lab] - b_lab[rows, k_free]) / S.shape[0])
    changed = float(np.count_nonzero(k_lab != k_free) / S.shape[0])
    passed = loss <= threshold
    reason = (f"label-free rates (rho0 {free[0]:.3f}, rho1 {free[1]:.3f}) vs labeled (rho0 {labeled[0]:.3f}, "
              f"rho1 {labeled[1]:.3f}) change {changed:.0%} of VRR-Stop's commit rounds and give up "
              f"L = {loss * 100:.1f} pp of validity under the labeled model "
              f"({'<=' if passed else '>'} {threshold * 100:g} pp)")
    reason += ": the label-free decisions stand" if passed else ": decide with the labeled rates"
    return DecisionCheck(loss, threshold, changed, *map(float, rates), bool(passed), reason)


def checked_record(wald: dict, S, M: int, alpha: float, beta: float, pi: float,
                   threshold: float = LOSS_THRESHOLD) -> dict:
    """The record of both checks on one calibration sample, as ``calibration.json`` keeps it: the Wald check's
    fields (``vrr.calibration.check``: the label-free EM's and the probe's rates, T, p) with ``wald_passed``, and
    the decision check (:func:`decision_check` of the trajectories ``S`` at tau = 0, the paper's threshold) under
    ``decision``, whose verdict is the record's ``passed`` and ``reason``: the verdict that chooses the rates."""
    out = dict(wald)
    out["wald_passed"] = bool(wald["passed"])
    out["check"] = "decision"
    if not (np.isfinite(wald.get("rho0_em", np.nan)) and np.isfinite(wald.get("rho1_em", np.nan))):
        out["decision"] = None
        return out          # nothing to compare: the Wald check's refusal stands, with its reason
    d = decision_check(S, M, (wald["rho0_em"], wald["rho1_em"]), (wald["rho0_labeled"], wald["rho1_labeled"]),
                       alpha, beta, pi, 0.0, threshold)
    out["decision"] = d.as_dict()
    out["passed"] = d.passed
    out["verdict"] = d.verdict
    wald_p = wald.get("p_value", float("nan"))
    out["reason"] = d.reason + (f"; Wald diagnostic p = {wald_p:.3g}" if np.isfinite(wald_p) else "")
    return out
