"""The calibration check: does the label-free vote model agree with the labels? (Sec. 4.2-4.3; Algorithm 1 line 1)

The paper calibrates (rho0, rho1) label-free with the binomial-mixture EM. That estimate is consistent only when
the model holds: M votes independent given the plan's validity. Votes correlated within a plan (one judge effect
per plan) leave the mixture mis-specified, and the EM then settles on rates far from the classes' true accept
rates, while the labeled estimate on the probe stays consistent for them. The check compares the two:

    d = (rho0_EM - rho0_lab, rho1_EM - rho1_lab),   T = d' Sigma^-1 d,

with Sigma the covariance of d over a bootstrap that resamples plans (the unlabeled plans, and the probe's plans
within each class), so the votes of one plan stay together and the covariance holds under correlated votes too.
Under the null that both estimators converge to the same rates, T is asymptotically chi-square with 2 degrees of
freedom; the check fails ("reject") when its p-value P(chi2_2 >= T) is below the stated ``level``. Its power is
against the discrepancy that moves decisions (a biased EM), not against over-dispersion as such: where the EM
still lands on the labeled rates, correlated votes pass.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from ._memo import memoized
from .mixture import em_rates, labeled_mle, resample_rows, vote_histograms

CHECK_LEVEL = 0.05
CHECK_REPLICATES = 200


class Verdict:
    """The words of a check's verdict (``passed``), shared by the Wald check and the decision check."""

    passed: bool

    @property
    def verdict(self) -> str:
        return "pass" if self.passed else "reject"

    def as_dict(self) -> dict:
        return {**asdict(self), "verdict": self.verdict}


@dataclass(frozen=True)
class CalibrationCheck(Verdict):
    """The check's verdict with everything behind it (recorded in ``calibration.json``)."""

    rho0_em: float
    rho1_em: float
    rho0_labeled: float
    rho1_labeled: float
    statistic: float          # Wald T = d' Sigma^-1 d (NaN when undefined)
    p_value: float            # P(chi2_2 >= T)
    level: float
    n_boot: int
    passed: bool
    reason: str

    @classmethod
    def from_dict(cls, data: dict) -> "CalibrationCheck":
        return cls(**{k: data[k] for k in cls.__dataclass_fields__})


def wald_statistic(d0, d1, c00, c01, c11):
    """T = d' Sigma^-1 d for the 2-vector d = (d0, d1) and the symmetric Sigma = [[c00, c01], [c01, c11]],
    written out (the closed-form inverse; no BLAS). NaN where Sigma is singular."""
    d0, d1, c00, c01, c11 = (np.asarray(v, dtype=float) for v in (d0, d1, c00, c01, c11))
    det = c00 * c11 - c01 * c01
    with np.errstate(invalid="ignore", divide="ignore"):
        t = (c11 * d0 * d0 - 2.0 * c01 * d0 * d1 + c00 * d1 * d1) / det
    return np.where(det > 1e-300, t, np.nan)


def _covariance(a, b):
    """Sample covariance of two equally long samples, element-wise (np.cov would call BLAS)."""
    a = np.asarray(a, float)
    b = np.asarray(b, float)
    return float(np.sum((a - a.mean()) * (b - b.mean())) / (a.size - 1))


def _chi2_2_sf(t: float) -> float:
    """P(chi2 with 2 degrees of freedom >= t) = exp(-t / 2)."""
    from ..common import fpmath

    return float(fpmath.exp(-0.5 * t)) if t >= 0 else 1.0


def check_summary_line(check: dict) -> str:
    """One line for ``vrr status`` and the reports: the verdict, the two estimates, and what decided it (the
    decision check's L where the record has it, ``vrr.calibration.decision_check``), with the Wald T and p."""
    if not math.isfinite(check.get("p_value", float("nan"))):
        return f"calibration check: {check['verdict']} ({check['reason']})"
    decision = check.get("decision")
    how = (f"decision check L = {decision['loss'] * 100:.1f} pp vs {decision['threshold'] * 100:g} pp; Wald "
           if decision else f"at level {check['level']:g} (")
    return (f"calibration check: {check['verdict']} {'(' if decision else ''}{how}p = {check['p_value']:.2g}, "
            f"Wald T = {check['statistic']:.2f}): label-free EM rho0 {check['rho0_em']:.3f}, rho1 "
            f"{check['rho1_em']:.3f}; labeled probe rho0 {check['rho0_labeled']:.3f}, rho1 {check['rho1_labeled']:.3f}")


def folds_verdict(checks: list) -> dict:
    """The cross-fit folds' checks in one record: verdict "pass" (every fold passes), "reject" (every fold
    rejects), "split" (some of each) or "n/a" (nothing to check against), the folds rejecting, the median p."""
    done = [c for c in checks if c is not None]
    if not done:
        return {"verdict": "n/a", "rejecting": 0, "folds": len(checks), "median_p": float("nan"), "level": float("nan")}
    rejecting = sum(not c["passed"] for c in done)
    verdict = "reject" if rejecting == len(done) else ("pass" if rejecting == 0 else "split")
    ps = [c["p_value"] for c in done if math.isfinite(c["p_value"])]
    out = {"verdict": verdict, "rejecting": rejecting, "folds": len(done),
           "median_p": float(np.median(ps)) if ps else float("nan"), "level": float(done[0]["level"])}
    losses = [c["decision"]["loss"] for c in done if c.get("decision")]
    if losses:   # the decision check decided (vrr.calibration.decision_check); the Wald p is its diagnostic
        out.update(check="decision", median_loss=float(np.median(losses)),
                   threshold=float(done[0]["decision"]["threshold"]),
                   wald_rejecting=sum(not c.get("wald_passed", c["passed"]) for c in done))
    return out


def folds_verdict_text(record: dict) -> str:
    """The stopping table's words for :func:`folds_verdict`."""
    if record["verdict"] == "n/a":
        return "n/a (no labeled probe)"
    if record.get("check") == "decision":
        return (f"{record['verdict']}: {record['rejecting']} of {record['folds']} folds reject (decision check, "
                f"median L = {record['median_loss'] * 100:.1f} pp, threshold {record['threshold'] * 100:g} pp; "
                f"Wald diagnostic: {record['wald_rejecting']} reject at level {record['level']:g})")
    return (f"{record['verdict']}: {record['rejecting']} of {record['folds']} folds reject at level "
            f"{record['level']:g} (median p = {record['median_p']:.2g})")


def calibration_check(S_unlabeled, M: int, probe_S, probe_y, probe_M: int, level: float = CHECK_LEVEL,
                      n_boot: int = CHECK_REPLICATES, seed: int = 0, em_restarts: int = 10, em_tol: float = 1e-10,
                      em_max_iter: int = 2000) -> CalibrationCheck:
    """The calibration check of the module docstring on one calibration sample: ``S_unlabeled`` the round-0 accept
    counts (M votes) the label-free EM reads, ``probe_S``/``probe_y`` the labeled probe (``probe_M`` votes)."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"calibration_check: level must be in (0, 1), got {level}")
    if n_boot < 10:
        raise ValueError(f"calibration_check: needs at least 10 bootstrap replicates, got {n_boot}")
    from . import inputs

    src = "calibration_check"
    S_u = inputs.accept_counts(S_unlabeled, M, name="S_unlabeled", source=src).ravel()
    probe_M = inputs.votes_per_plan(probe_M, name="probe_M", source=src)
    S_p = inputs.accept_counts(probe_S, probe_M, name="probe_S", source=src).ravel()
    y_p = inputs.labels(probe_y, name="probe_y", source=src).ravel()
    inputs.same_shape({"probe_S": S_p, "probe_y": y_p}, source=src)
    return _check(S_u, int(M), S_p, y_p.astype(bool), int(probe_M), float(level), int(n_boot), int(seed),
                  int(em_restarts), float(em_tol), int(em_max_iter))


@memoized
def _check(S_u, M: int, S_p, y_p, probe_M: int, level: float, n_boot: int, seed: int, em_restarts: int,
           em_tol: float, em_max_iter: int) -> CalibrationCheck:
    """:func:`calibration_check` on normalized inputs, computed once per distinct input (``vrr.calibration._memo``)."""
    lab = labeled_mle(S_p, y_p, probe_M)
    if not (np.isfinite(lab.rho0) and np.isfinite(lab.rho1)) or min(y_p.sum(), (~y_p).sum()) < 2:
        return CalibrationCheck(float("nan"), float("nan"), float(lab.rho0), float(lab.rho1), float("nan"),
                                float("nan"), level, 0, False,
                                "the probe lacks labeled plans of a class: the vote model cannot be checked")
    # the window's resamples are B_k's (vrr.calibration.mixture.resample_rows): the EM refits of both are one
    idx, rng = resample_rows(S_u.size, n_boot, seed)
    hists = vote_histograms([S_u] + [S_u[i] for i in idx], M)
    rho0_em, rho1_em, _ = em_rates(hists, M, [seed] * hists.shape[0], n_restarts=em_restarts, tol=em_tol,
                                   max_iter=em_max_iter)
    valid, invalid = S_p[y_p], S_p[~y_p]
    lab0 = np.empty(n_boot)
    lab1 = np.empty(n_boot)
    for b in range(n_boot):                                   # the probe's classes resampled separately
        v = valid[rng.integers(0, valid.size, valid.size)]
        i = invalid[rng.integers(0, invalid.size, invalid.size)]
        lab1[b] = 1.0 - v.sum() / (probe_M * v.size)
        lab0[b] = i.sum() / (probe_M * i.size)
    d0_boot, d1_boot = rho0_em[1:] - lab0, rho1_em[1:] - lab1
    c00, c11, c01 = _covariance(d0_boot, d0_boot), _covariance(d1_boot, d1_boot), _covariance(d0_boot, d1_boot)
    d0, d1 = float(rho0_em[0] - lab.rho0), float(rho1_em[0] - lab.rho1)
    t = float(wald_statistic(d0, d1, c00, c01, c11))
    if not math.isfinite(t):
        return CalibrationCheck(float(rho0_em[0]), float(rho1_em[0]), float(lab.rho0), float(lab.rho1), t,
                                float("nan"), level, n_boot, False,
                                "the discrepancy's bootstrap covariance is singular: the vote model cannot be checked")
    p = _chi2_2_sf(t)
    passed = p >= level
    say = (f"label-free EM (rho0 {rho0_em[0]:.3f}, rho1 {rho1_em[0]:.3f}) vs labeled probe (rho0 {lab.rho0:.3f}, "
           f"rho1 {lab.rho1:.3f}): Wald T = {t:.2f}, p = {p:.3g} "
           f"{'>=' if passed else '<'} level {level:g}")
    reason = say + (": the vote model agrees with the labels" if passed else
                    ": the label-free vote model disagrees with the labels (votes not independent given validity?)")
    return CalibrationCheck(float(rho0_em[0]), float(rho1_em[0]), float(lab.rho0), float(lab.rho1), t, p, level,
                            n_boot, bool(passed), reason)
