"""The calibration ablation: VRR-Stop and Algorithm 1 under each vote-noise calibration and each vote likelihood
(Sec. 4.2 calibration; Eq. 5 belief, Eq. 6 gain, Eq. 8 and Algorithm 1; App. B cross-fitting; App. G paired
bootstrap).

Rows: calibration x likelihood.

* calibration: the label-free EM (``binomial_em`` on the window's round-0 votes, the paper's; under the
  beta-binomial likelihood the capped beta-binomial mixture), the labeled probe (``labeled_mle`` on the probe,
  ``vote_rounds="probe"``), the semi-supervised fit (``semisupervised_checked``: the probe pooled with the
  window's votes where the decision check passes, the probe alone where it rejects; and the same chosen by the
  Wald check), and PPI++ (``ppi``, the probe correcting the label-free EM's prediction), the real windows' default;
* likelihood: Eq. 5's ``binomial`` (votes independent given validity) or ``beta_binomial`` (exchangeable votes,
  phi0, phi1 fit with the rates; ``vrr.calibration.correlated``).

Each row is one cross-fitted replay (``vrr.policies.replay.replay``) of No repair, VRR-Stop, Algorithm 1 and the
TPM reference under the setting's replay config with the row's method, vote rounds and likelihood. It reports:

* V of VRR-Stop and of Algorithm 1, each with the paired 95 % percentile-bootstrap CI
  (``vrr.stats.inference.paired_bootstrap``, instances resampled) of its difference to No repair and to the TPM
  reference of the same replay (the same rule with the true parameters on a simulated setting, with the cross-fit
  labeled estimates on a real one; under the beta-binomial likelihood it filters with that likelihood too);
* the calibration check's verdict over the folds (``vrr.calibration.check.folds_verdict``), the check Algorithm 1's
  mode reads;
* how well calibrated the row's posterior is: the filtered belief b_k (Eq. 5, with the row's likelihood and
  cross-fit parameters) at every round of every instance against the true validity y_k, as its Brier score and
  its expected calibration error (``ECE_BINS`` equal-width bins; sum over bins of the bin's share of states times
  |mean b_k - mean y_k|).

A calibration that does not apply to the setting gives a row "n/a" with the reason (no labeled probe; a
deterministic verifier, whose M votes repeat one answer, so a mixture of vote counts is not identifiable; M below
the estimator's minimum); no other calibration stands in for it.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..calibration.check import folds_verdict
from ..calibration.estimators import CrossFit
from ..calibration.mixture import MIN_VOTES
from ..core.belief import filter_beliefs
from ..data.contract import Setting
from ..policies.replay import TPM, ReplayConfig, fit_calibration, fold_check, replay
from ..settings import CALIBRATION_LIKELIHOODS as LIKELIHOODS, calibration_problem
from .inference import N_RESAMPLES, paired_bootstrap

ABLATION_FILE = "calibration_ablation.json"   # results/<setting>/, written by 05_stats
# (row name, method, vote rounds); "ppi" is the PPI++ rates (vrr.calibration.ppi), the default where a window has a
# labeled probe, and the Wald-checked row is the semi-supervised fit chosen by the Wald check instead of the decision
# check
CALIBRATIONS = (("label-free EM", "binomial_em", "first"),
                ("labeled probe", "labeled_mle", "probe"),
                ("semi-supervised (checked)", "semisupervised_checked", "first"),
                ("semi-supervised (Wald-checked)", "semisupervised_checked", "first"),
                ("PPI++ (probe + EM posterior)", "ppi", "first"))
WALD_CHECKED = "semi-supervised (Wald-checked)"
# the paper's Algorithm 1 ("Algorithm 1 (paper)") is a row of every stopping table; here it would refit B_k's
# bootstrap draws under every calibration row, most of 05's time, for a design the stopping tables already compare
POLICIES = ("No repair", "VRR-Stop", "Algorithm 1", TPM)
COMPARED = ("VRR-Stop", "Algorithm 1")
ECE_BINS = 10
# the estimator each label-free row runs under each likelihood (for its minimum number of votes)
_LABEL_FREE_ESTIMATOR = {"binomial": "binomial_em", "beta_binomial": "beta_binomial_em"}


def not_applicable(setting: Setting, verifier_kind: str, method: str, likelihood: str, vote_rounds: str) -> str | None:
    """Why a calibration row does not apply to ``setting`` (None: it applies): the settings' rule
    (``vrr.settings.calibration_problem``), then the estimator's minimum number of votes per plan."""
    problem = calibration_problem(method, likelihood, vote_rounds, verifier_kind, has_probe=setting.probe_S is not None,
                                  probe_labeled=setting.probe_y is not None)
    if problem is not None:
        return problem.reason
    if method == "ppi" and setting.probe_M < setting.M:
        return f"the probe's {setting.probe_M} votes per plan cannot be thinned to the window's {setting.M}"
    if method in ("binomial_em", "semisupervised_checked", "ppi"):   # the label-free mixture, or the check's
        estimator = _LABEL_FREE_ESTIMATOR[likelihood] if method == "binomial_em" else method
        need = MIN_VOTES[estimator]
        if setting.M < need:
            return f"M = {setting.M} votes per plan, below the {need} that {estimator} needs"
    return None


def expected_calibration_error(belief, truth, bins: int = ECE_BINS) -> float:
    """Sum over ``bins`` equal-width bins of b of (share of states in the bin) * |mean b - mean y| in the bin."""
    b = np.asarray(belief, dtype=float).ravel()
    y = np.asarray(truth, dtype=float).ravel()
    which = np.minimum((b * bins).astype(np.int64), bins - 1)
    total = 0.0
    for k in range(bins):
        mask = which == k
        n = int(mask.sum())
        if n:
            total += n / b.size * abs(float(np.sum(b[mask])) / n - float(np.sum(y[mask])) / n)
    return total


def _interval(a, b, n_resamples: int, seed: int) -> dict:
    iv = paired_bootstrap(a, b, n_resamples=n_resamples, seed=seed)
    return {"dV": iv.estimate, "dV_low": iv.low, "dV_high": iv.high}


def fit_with_checks(setting: Setting, config: ReplayConfig, checks: list | None) -> tuple[CrossFit, list]:
    """The cross-fit calibration under ``config`` with each fold's calibration check attached, and the checks.

    The check compares the label-free EM on a fold's round-0 votes with the probe's labels
    (``vrr.policies.replay.fold_check``); it does not depend on the row's method or likelihood, so it is computed
    once per setting (``checks`` None: here) and handed to replay through the fits, whose check replay reuses. A
    fit that ran its own check (``semisupervised_checked``) keeps it: it is the same computation."""
    cf = fit_calibration(setting, config)
    if checks is None:
        checks = [fit.check if fit.check is not None else fold_check(setting, cf, f, config)
                  for f, fit in enumerate(cf.fits)]
    fits = [fit if fit.check is not None else replace(fit, check=check) for fit, check in zip(cf.fits, checks)]
    return CrossFit(folds=cf.folds, fits=fits), checks


def in_sample_rates(setting: Setting) -> tuple[float, float]:
    """(rho0, rho1) of the window's own first plans with their labels (labeled MLE on all instances): what every
    calibration row estimates, the reference of the rows' rate errors."""
    from ..calibration.mixture import labeled_mle

    fit = labeled_mle(setting.S[:, 0], setting.y[:, 0], setting.M)
    return float(fit.rho0), float(fit.rho1)


def ablation_row(setting: Setting, config: ReplayConfig, n_resamples: int = N_RESAMPLES, seed: int = 0,
                 calibration: CrossFit | None = None, policies: tuple[str, ...] = POLICIES) -> dict:
    """One applicable row: the replay under ``config`` (with ``calibration``, the cross-fit of
    :func:`fit_with_checks`, when given) and what the module docstring lists; a policy of ``COMPARED`` outside
    ``policies`` is recorded as None (the paper's Algorithm 1 needs B_k's bootstrap draws of the row's estimator)."""
    result = replay(setting, config, policies=policies, calibration=calibration)
    v = result.validity
    row: dict = {"V": {name: float(v[name].mean()) for name in policies}, "tpm_source": result.tpm_source}
    for name in COMPARED:
        if name not in policies:
            row[name] = None
            continue
        row[name] = {"V": float(v[name].mean()),
                     "vs_no_repair": _interval(v[name], v["No repair"], n_resamples, seed),
                     "vs_tpm": _interval(v[name], v[TPM], n_resamples, seed)}
    checks = result.extras.get("calibration_check_per_fold", [])
    row["check"] = folds_verdict(checks)
    row["algorithm1_stop_folds"] = sum(m["mode"] == "stop" for m in result.extras.get("algorithm1_mode_per_fold", []))
    est = result.calibration.as_kwargs()
    row["estimates"] = {name: float(np.mean([getattr(f, name) if name.startswith("phi") else getattr(f.params, name)
                                             for f in result.calibration.fits]))
                        for name in est}
    rho_in = in_sample_rates(setting)
    row["rate_error"] = {name: float(np.mean([abs(getattr(f.params, name) - ref) for f in result.calibration.fits]))
                         for name, ref in zip(("rho0", "rho1"), rho_in)}
    belief, _ = filter_beliefs(setting.S, setting.M, **est)
    y = setting.y.astype(float)
    row["belief_brier"] = float(np.sum((belief - y) * (belief - y)) / belief.size)
    row["belief_ece"] = expected_calibration_error(belief, y)
    return row


def setting_calibration_ablation(setting: Setting, config: ReplayConfig, verifier_kind: str,
                                 n_resamples: int = N_RESAMPLES, seed: int = 0, calibrations=CALIBRATIONS,
                                 likelihoods=LIKELIHOODS) -> dict:
    """Every row of the module docstring's ablation for one setting. ``config``: the setting's replay config (04's
    policy parameters, folds, seed, estimator options), of which each row changes the method, the vote rounds and
    the likelihood; ``verifier_kind``: the setting's ``verifier.kind``; ``calibrations``, ``likelihoods``: a subset
    of the rows (``CALIBRATIONS`` entries, ``LIKELIHOODS`` names)."""
    rows = []
    checks = None
    for label, method, vote_rounds in calibrations:
        for likelihood in likelihoods:
            row = {"calibration": label, "method": method, "vote_rounds": vote_rounds, "likelihood": likelihood}
            reason = not_applicable(setting, verifier_kind, method, likelihood, vote_rounds)
            if reason is None:
                cfg = replace(config, method=method, vote_rounds=vote_rounds, likelihood=likelihood)
                if label == WALD_CHECKED:
                    cfg = replace(cfg, estimator=replace(cfg.estimator, check_rule="wald"))
                cf, checks = fit_with_checks(setting, cfg, checks)
                row.update(applies=True, reason="", **ablation_row(setting, cfg, n_resamples, seed, calibration=cf))
            else:
                row.update(applies=False, reason=reason)
            rows.append(row)
    return {"setting": setting.name, "N": setting.n_instances, "M": setting.M, "n_resamples": n_resamples,
            "seed": seed, "policies": list(POLICIES), "rows": rows}


def ablation_lines(ablation: dict) -> list[str]:
    """One line per row of :func:`setting_calibration_ablation`'s result (05_stats prints them)."""
    lines = []
    for r in ablation["rows"]:
        head = f"{r['calibration']:30s} {r['likelihood']:13s}"
        if not r["applies"]:
            lines.append(f"{head} n/a ({r['reason']})")
            continue
        parts = []
        for name in COMPARED:
            d = r[name]
            if d is None:
                continue
            parts.append(f"{name} V={d['V']:.3f} (vs no repair {d['vs_no_repair']['dV']:+.3f} "
                         f"[{d['vs_no_repair']['dV_low']:+.3f},{d['vs_no_repair']['dV_high']:+.3f}], vs TPM "
                         f"{d['vs_tpm']['dV']:+.3f} [{d['vs_tpm']['dV_low']:+.3f},{d['vs_tpm']['dV_high']:+.3f}])")
        lines.append(f"{head} {'; '.join(parts)}; check {r['check']['verdict']}; belief ECE {r['belief_ece']:.3f}")
    return lines
