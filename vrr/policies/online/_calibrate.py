"""Calibration where the loop runs: the online controller's parameters from a small labeled set
(Sec. 4.2-4.3; App. A "Calibration Estimators"; Algorithm 1 line 1).

* :func:`calibrate_labeled` (``OnlineController.from_labeled``): rho0, rho1 by labeled MLE on the first
  plans' votes, pi the plans' validity rate, alpha, beta the frequencies of labeled repair pairs
  (``transition_rates``; ``defined_rate`` where a frequency sits on the boundary), the labeled J test
  (``labeled_j_diagnostic``) and the calibration check (``vrr.calibration.check``, the labeled plans serving as
  both its samples), which pick Stop or Guard (``vrr.policies.mode.algorithm1_mode``), and the bootstrap draws
  behind Algorithm 1's error radius (``gain_radius.labeled_parameter_draws``, :func:`report_draws`).
* :func:`calibrate_unlabeled` (``OnlineController.from_unlabeled``): rho0, rho1, pi from the
  binomial-mixture EM on unlabeled accept counts; alpha, beta from labeled repair pairs.
* Repair pairs given with their round, ``(before, after, t)``, also give alpha_t, beta_t (VRR-Stop-t,
  ``vrr.calibration.round_dynamics``: each round's counts shrunk toward alpha-hat, beta-hat by empirical
  Bayes); alpha-hat, beta-hat then come from the round-0 pairs, as in the paper.

Both reduce the data to what a calibration file stores (accept-count histograms and repair counts) and fit
from that with :func:`fit_report`, the one path for new data and for a saved file (``_calibration_file``).
"""
from __future__ import annotations

import dataclasses
import json
import math
import warnings
from dataclasses import asdict, dataclass, field

import numpy as np

from ...calibration import inputs
from ...calibration.estimators import (MIN_VOTES, binomial_mixture_em, defined_rate, labeled_mle,
                                       transition_rates)
from ...calibration.check import calibration_check, check_summary_line
from ...calibration.gain_radius import labeled_parameter_draws
from ...calibration.identifiability import PARAM_NAMES, labeled_j_diagnostic
from ...calibration.round_dynamics import shrinkage_strength, shrunk_rate
from ...core.model import NoiseParams
from ._modes import planned_mode
from ._options import MAX_ROUNDS



class CalibrationWarning(UserWarning):
    """A calibration that runs, with a caveat the report also states: a rate with no data behind it (a
    prior, not an estimate), or a policy that overrides the mode the labeled J test would choose."""


@dataclass(frozen=True)
class CalibrationReport:
    """A calibration made where the loop runs: the estimates, the J diagnostic and the mode it implies.

    ``mode`` is ``"stop"`` or ``"guard"``, the mode the controller built from this report starts each
    problem in, and ``reason`` says why: both come from ``vrr.policies.online.planned_mode`` (for
    Algorithm 1, ``vrr.policies.mode.algorithm1_mode``: labeled rates run Stop, label-free ones the J test, the
    definition replay uses), the function the controller itself uses. ``j_hat``, ``j_ci``,
    ``j_p_value``: the labeled J test (None for a label-free calibration). ``check``: the calibration check
    (``CalibrationCheck.as_dict``; None without labels, or with M below the label-free EM's minimum).
    ``round_rates``: alpha_t, beta_t when the repair pairs carried their rounds. ``data``: what the file stores
    and the estimates are fit from (B_k's draws too, :func:`report_draws`).
    """

    rho0: float
    rho1: float
    alpha: float
    beta: float
    pi: float
    j_hat: float | None
    j_ci: tuple | None
    j_p_value: float | None
    mode: str
    reason: str
    n_plans: int
    n_repairs: int
    M: int
    k_max: int
    method: str
    policy: str
    j_min: float
    eta: float
    seed: int
    check: dict | None = None
    rules: dict = field(default_factory=dict)
    round_rates: dict | None = None
    data: dict = field(default_factory=dict)

    def __getitem__(self, name: str):
        """``report["rho0"]`` as well as ``report.rho0``."""
        return getattr(self, name)

    def to_dict(self) -> dict:
        out = asdict(self)
        out["j_ci"] = None if self.j_ci is None else list(self.j_ci)
        return json.loads(json.dumps(out))

    @classmethod
    def from_dict(cls, data: dict, source: str = "calibration") -> "CalibrationReport":
        if not isinstance(data, dict):
            raise ValueError(f"{source}: expected an object")
        names = [f.name for f in cls.__dataclass_fields__.values()]
        missing = [n for n in names if n not in data]
        if missing:
            raise ValueError(f"{source}.{missing[0]}: missing")
        unknown = sorted(set(data) - set(names))
        if unknown:
            raise ValueError(f"{source}.{unknown[0]}: unknown")
        out = dict(data)
        out["j_ci"] = None if data["j_ci"] is None else tuple(data["j_ci"])
        return cls(**out)

    @property
    def parameters(self) -> dict:
        return {name: getattr(self, name) for name in PARAM_NAMES}

    def summary(self) -> str:
        """The report in a few lines: the estimates, the mode with its reason and the calibration check."""
        est = ", ".join(f"{name} {getattr(self, name):.3f}" for name in PARAM_NAMES)
        lines = [f"{self.method} on {self.n_plans} plans and {self.n_repairs} repair pairs (M = {self.M}): {est}",
                 f"mode: {self.mode} ({self.reason})"]
        if self.check is not None:
            lines.append(check_summary_line(self.check))
        return "\n".join(lines)


# ---------------------------------------------------------------- input checks
def _label(value, source: str, name: str) -> int:
    if isinstance(value, (bool, np.bool_)):
        return int(value)
    if isinstance(value, (int, np.integer)) and value in (0, 1):
        return int(value)
    raise ValueError(f"{source}: field '{name}': expected a label 0 or 1, got {value!r}")


def _first_plans(votes, labels, M, source: str, labeled: bool = True):
    """Accept counts of the first plans (from counts or from 0/1 vote lists) and M, checked by
    :mod:`vrr.calibration.inputs` (integers in 0..M, labels 0/1, no NaN, M <= MAX_VOTES; the field named)."""
    if isinstance(votes, (str, bytes, dict)) or not hasattr(votes, "__len__") or len(votes) == 0:
        raise ValueError(f"{source}: field 'votes': expected a non-empty list of accept counts or vote lists")
    if M is not None:
        M = inputs.votes_per_plan(M, "M", source)
    lists = [isinstance(v, (list, tuple, np.ndarray)) for v in votes]
    if any(lists) and not all(lists):
        raise ValueError(f"{source}: field 'votes': mixes vote lists and counts")
    if all(lists):
        lengths = {len(v) for v in votes}
        if len(lengths) != 1:
            raise ValueError(f"{source}: field 'votes': vote lists of different lengths {sorted(lengths)}")
        inferred = lengths.pop()
        if M is not None and M != inferred:
            raise ValueError(f"{source}: field 'M': {M!r}, the vote lists have {inferred} votes")
        if inferred < 1:
            raise ValueError(f"{source}: field 'votes': vote lists are empty (M = 0)")
        M = inputs.votes_per_plan(inferred, "M", source)
        counts = inputs.labels(votes, "votes", source).sum(axis=1, dtype=np.int64)
    else:
        if M is None:
            raise ValueError(f"{source}: field 'M': accept counts need M (votes per plan); or give vote lists")
        counts = inputs.accept_counts(votes, M, "votes", source)
    if counts.ndim != 1:
        raise ValueError(f"{source}: field 'votes': expected one accept count or vote list per plan")
    if not labeled:
        return counts, None, int(M)
    if isinstance(labels, (str, bytes, dict)) or not hasattr(labels, "__len__") or len(labels) != len(counts):
        raise ValueError(f"{source}: field 'labels': expected one 0/1 label per plan ({len(counts)})")
    y = inputs.labels(labels, "labels", source).astype(np.int64)
    if y.ndim != 1:
        raise ValueError(f"{source}: field 'labels': expected one 0/1 label per plan ({len(counts)})")
    return counts, y, int(M)


def _repair_counts(repairs, k_max: int, source: str) -> dict:
    """Fixes, invalid-before, breaks, valid-before: pooled ([1]) or per round t ([K_max]) when every pair
    carries its round."""
    if isinstance(repairs, (str, bytes, dict)) or not hasattr(repairs, "__len__") or len(repairs) == 0:
        raise ValueError(f"{source}: field 'repairs': expected a non-empty list of (label_before, label_after) "
                         "pairs")
    sizes = set()
    rows = []
    for i, r in enumerate(repairs):
        if isinstance(r, (str, bytes, dict)) or not hasattr(r, "__len__") or len(r) not in (2, 3):
            raise ValueError(f"{source}: field 'repairs[{i}]': expected (before, after) or (before, after, round), "
                             f"got {r!r}")
        sizes.add(len(r))
        before, after = _label(r[0], source, f"repairs[{i}][0]"), _label(r[1], source, f"repairs[{i}][1]")
        t = 0
        if len(r) == 3:
            t = r[2]
            if isinstance(t, (bool, np.bool_)) or not isinstance(t, (int, np.integer)) or not 0 <= t < max(k_max, 1):
                raise ValueError(f"{source}: field 'repairs[{i}][2]': expected a round in 0..{k_max - 1}, got {t!r}")
        rows.append((before, after, int(t)))
    if len(sizes) != 1:
        raise ValueError(f"{source}: field 'repairs': mixes pairs and (before, after, round) triples")
    per_round = sizes.pop() == 3
    n = max(k_max, 1) if per_round else 1
    out = {k: [0] * n for k in ("fixed", "invalid_before", "broken", "valid_before")}
    for before, after, t in rows:
        if before:
            out["valid_before"][t] += 1
            out["broken"][t] += 1 - after
        else:
            out["invalid_before"][t] += 1
            out["fixed"][t] += after
    out["per_round"] = per_round
    return out


# ---------------------------------------------------------------- the fit (one path for new data and for a file)
def _pairs(fixed: int, invalid: int, broken: int, valid: int) -> tuple[np.ndarray, np.ndarray]:
    before = np.r_[np.zeros(invalid, int), np.ones(valid, int)]
    after = np.r_[np.ones(fixed, int), np.zeros(invalid - fixed, int), np.zeros(broken, int), np.ones(valid - broken, int)]
    return before, after


def fit_report(data: dict, *, M: int, k_max: int, policy: str, j_min: float, eta: float, seed: int,
               source: str) -> CalibrationReport:
    """Every estimate from the stored data (histograms and repair counts), in one canonical order."""
    rep = data["repairs"]
    t0 = slice(0, 1)   # alpha-hat, beta-hat: the round-0 pairs (all pairs when no rounds were given)
    fixed, invalid, broken, valid = (int(sum(rep[k][t0])) for k in ("fixed", "invalid_before", "broken", "valid_before"))
    if invalid + valid == 0:
        raise ValueError(f"{source}: field 'repairs': no round-0 pair; alpha-hat, beta-hat come from the first "
                         "repair's pairs")
    trans = transition_rates(*_pairs(fixed, invalid, broken, valid), max_pairs=None)
    alpha, alpha_rule = defined_rate(trans.n_fixed, trans.n_invalid_before, unsafe=())
    beta, beta_rule = defined_rate(trans.n_broken, trans.n_valid_before, unsafe=(0.0,))
    # a rate no pair measures is the Jeffreys prior mean 0.5: stated in the rules and warned, never silent
    for name, n, before, rate in (("alpha", invalid, "an invalid", "fix"), ("beta", valid, "a valid", "damage")):
        if n == 0:
            if name == "alpha":
                alpha_rule = "prior: no invalid-before pair (Jeffreys mean 0.5)"
            else:
                beta_rule = "prior: no valid-before pair (Jeffreys mean 0.5)"
            warnings.warn(f"{source}: field 'repairs': no round-0 pair starts from {before} plan, so nothing "
                          f"measures {name} (the repair's {rate} rate); {name} = 0.5 is the Jeffreys prior mean, "
                          f"not an estimate. Label repairs of {before.split()[1]} plans, or set {name} with "
                          "OnlineController.from_parameters", CalibrationWarning, stacklevel=2)
    n_repairs = int(sum(rep["invalid_before"]) + sum(rep["valid_before"]))
    levels = np.arange(M + 1)
    if "accept_histogram" in data:                      # label-free: the binomial-mixture EM
        S = np.repeat(levels, data["accept_histogram"])
        fit = binomial_mixture_em(S, M, seed=seed)
        rho0, rho1, pi, rules = fit.rho0, fit.rho1, fit.weight_valid, {"rho0": "fit", "rho1": "fit", "pi": "fit"}
        diag, method = None, "binomial_em"
    else:
        hv, hi = data["accept_histogram_valid"], data["accept_histogram_invalid"]
        S = np.r_[np.repeat(levels, hi), np.repeat(levels, hv)]
        y = np.r_[np.zeros(int(sum(hi)), int), np.ones(int(sum(hv)), int)]
        if sum(hv) < 2 or sum(hi) < 2:
            raise ValueError(f"{source}: field 'labels': labeled calibration needs >= 2 valid and >= 2 invalid "
                             f"first plans (rho0, rho1 and the J test), got {int(sum(hv))} valid, {int(sum(hi))} invalid")
        fit = labeled_mle(S, y, M)
        rho0, rho1 = fit.rho0, fit.rho1
        pi, pi_rule = defined_rate(int(sum(hv)), int(S.size), unsafe=(0.0, 1.0))
        rules = {"rho0": "labeled_mle", "rho1": "labeled_mle", "pi": pi_rule}
        diag, method = labeled_j_diagnostic(S, y, M, seed=seed), "labeled_mle"
    rules.update(alpha=alpha_rule, beta=beta_rule)
    params = NoiseParams(rho0=float(rho0), rho1=float(rho1), alpha=float(alpha), beta=float(beta), pi=float(pi))
    check = None
    if diag is not None and M >= MIN_VOTES["binomial_em"]:
        # the labeled plans serve as both samples: the EM reads their votes unlabeled, the labeled fit their labels
        check = calibration_check(S, M, S, y, M, level=0.05, seed=seed).as_dict()
    if diag is None:
        if policy == "algorithm1":
            raise ValueError(f"{source}: field 'policy': a label-free calibration has no labeled J test, so "
                             "Algorithm 1 cannot choose its mode; pass policy='vrr_stop' or 'vrr_guard', or "
                             "calibrate with from_labeled")
        j_hat = j_ci = j_p = None
    else:
        j_hat, j_ci, j_p = diag.j_hat, (diag.ci_low, diag.ci_high), diag.p_value
    # labeled rates keep the belief calibrated at any J (vrr.policies.mode): Algorithm 1 runs Stop on them
    mode, reason = planned_mode(policy, j_hat, j_min, j_ci=j_ci, check=check,
                                evidence={"labeled_rates": method == "labeled_mle", "replay": None})
    rounds = None
    if rep["per_round"] and k_max > 0:
        kappa_a = shrinkage_strength(rep["fixed"], rep["invalid_before"], alpha)
        kappa_b = shrinkage_strength(rep["broken"], rep["valid_before"], beta)
        rounds = {"alpha": [float(v) for v in shrunk_rate(rep["fixed"], rep["invalid_before"], alpha, kappa_a)],
                  "beta": [float(v) for v in shrunk_rate(rep["broken"], rep["valid_before"], beta, kappa_b)],
                  "kappa_alpha": kappa_a, "kappa_beta": kappa_b}
    return CalibrationReport(
        rho0=params.rho0, rho1=params.rho1, alpha=params.alpha, beta=params.beta, pi=params.pi, j_hat=j_hat,
        j_ci=j_ci, j_p_value=j_p, mode=mode, reason=reason, n_plans=int(S.size), n_repairs=n_repairs, M=M,
        k_max=k_max, method=method, policy=policy, j_min=float(j_min), eta=float(eta), seed=int(seed),
        check=None if check is None else json.loads(json.dumps(check)), rules=rules, round_rates=rounds,
        data=json.loads(json.dumps(data)))


def report_draws(report: CalibrationReport, source: str) -> dict:
    """The bootstrap draws behind Algorithm 1's error radius B_k from the report's labeled data
    (``gain_radius.labeled_parameter_draws``: the labeled plans and the round-0 repair pairs resampled, seeded
    by the report's seed), {name: [B]}."""
    data = report.data
    if "accept_histogram_valid" not in data:
        raise ValueError(f"{source}: field 'draws': Algorithm 1's error radius resamples labeled plans; a "
                         "label-free calibration has none: pass draws=..., or policy='vrr_stop'")
    levels = np.arange(report.M + 1)
    hv, hi = data["accept_histogram_valid"], data["accept_histogram_invalid"]
    S = np.r_[np.repeat(levels, hi), np.repeat(levels, hv)]
    y = np.r_[np.zeros(int(sum(hi)), int), np.ones(int(sum(hv)), int)]
    rep = data["repairs"]
    before, after = _pairs(*(int(rep[k][0]) for k in ("fixed", "invalid_before", "broken", "valid_before")))
    # every pair, as the point estimates alpha-hat, beta-hat use
    draws = labeled_parameter_draws(S, y, report.M, before, after, seed=report.seed, max_pairs=None)
    return {name: [float(v) for v in draws[name]] for name in PARAM_NAMES}


def controller_arguments(report: CalibrationReport, policy: str | None, round_dynamics: bool, source: str,
                         **options) -> tuple[dict, CalibrationReport]:
    """The controller's keyword arguments for ``report`` (and ``options``), with the report."""
    policy = policy or report.policy
    alpha, beta = report.alpha, report.beta
    if round_dynamics:
        if report.round_rates is None:
            raise ValueError(f"{source}: field 'round_rates': none; VRR-Stop-t needs repair pairs given with their "
                             "round, (before, after, t)")
        if policy != "vrr_stop":
            raise ValueError(f"{source}: round_dynamics=True goes with policy='vrr_stop' (VRR-Stop-t), got {policy!r}")
        alpha, beta = report.round_rates["alpha"], report.round_rates["beta"]
    kwargs = dict(M=report.M, k_max=report.k_max, rho0=report.rho0, rho1=report.rho1, alpha=alpha, beta=beta,
                  pi=report.pi, policy=policy, j_min=report.j_min, source=source)
    if policy == "algorithm1" and "draws" not in options:
        kwargs["draws"] = report_draws(report, source)
    if policy == "algorithm1":
        kwargs["eta"] = report.eta
    kwargs["check"] = report.check
    kwargs["mode_evidence"] = {"labeled_rates": report.method == "labeled_mle", "replay": None}
    if report.j_hat is not None:   # Algorithm 1's mode; under VRR-Stop / VRR-Guard its reason names the J test
        kwargs["j_hat"] = report.j_hat
    kwargs.update(options)
    # the report states what will run: the mode of the policy and J inputs the controller gets
    mode, reason = planned_mode(policy, kwargs.get("j_hat"), kwargs["j_min"], kwargs.get("stop_mode"),
                                j_ci=report.j_ci, check=kwargs.get("check"), evidence=kwargs.get("mode_evidence"))
    if (policy, mode, reason, kwargs["j_min"]) != (report.policy, report.mode, report.reason, report.j_min):
        report = dataclasses.replace(report, policy=policy, mode=mode, reason=reason, j_min=float(kwargs["j_min"]))
    if report.j_hat is not None and not math.isnan(report.j_hat) and policy != "algorithm1" and (
            "although Algorithm 1 would run" in reason):
        warnings.warn(f"{source}: {reason}", CalibrationWarning, stacklevel=3)
    return kwargs, report


def _settings(options: dict, source: str) -> tuple[float, int]:
    eta, seed = options.pop("eta", 0.05), options.pop("seed", 0)
    if isinstance(eta, (bool, str)) or not isinstance(eta, (int, float)) or not 0.0 < eta < 1.0:
        raise ValueError(f"{source}: field 'eta': expected a number in (0, 1), got {eta!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise ValueError(f"{source}: field 'seed': expected an integer, got {seed!r}")
    return float(eta), int(seed)


def check_k_max(k_max, source: str) -> int:
    """K_max, an integer in 0..:data:`MAX_ROUNDS` (per-round tables have K_max entries)."""
    if isinstance(k_max, (bool, np.bool_)) or not isinstance(k_max, (int, np.integer)) or not 0 <= k_max <= MAX_ROUNDS:
        raise ValueError(f"{source}: field 'k_max': expected an integer in 0..{MAX_ROUNDS}, got {k_max!r}")
    return int(k_max)


def calibrate_labeled(*, votes, labels, repairs, M=None, k_max: int = 5, policy: str = "algorithm1",
                      j_min: float = 0.10, **options) -> tuple[dict, CalibrationReport]:
    """``OnlineController.from_labeled`` (see there): the controller's keyword arguments and the report."""
    source = "from_labeled"
    k_max = check_k_max(k_max, source)
    eta, seed = _settings(options, source)
    if isinstance(j_min, (bool, str)) or not isinstance(j_min, (int, float)) or not math.isfinite(j_min):
        raise ValueError(f"{source}: field 'j_min': expected a number in [-1, 1], got {j_min!r}")
    S, y, M = _first_plans(votes, labels, M, source)
    data = {"accept_histogram_valid": np.bincount(S[y == 1], minlength=M + 1).tolist(),
            "accept_histogram_invalid": np.bincount(S[y == 0], minlength=M + 1).tolist(),
            "repairs": _repair_counts(repairs, k_max, source)}
    report = fit_report(data, M=M, k_max=k_max, policy=policy or "algorithm1", j_min=float(j_min), eta=eta, seed=seed,
                  source=source)
    return controller_arguments(report, policy, False, options.pop("source", "from_labeled"), **options)


def calibrate_unlabeled(*, counts, repairs, M: int, k_max: int = 5, policy: str = "vrr_stop",
                        **options) -> tuple[dict, CalibrationReport]:
    """``OnlineController.from_unlabeled`` (see there): the controller's keyword arguments and the report."""
    source = "from_unlabeled"
    k_max = check_k_max(k_max, source)
    eta, seed = _settings(options, source)
    j_min = options.pop("j_min", 0.10)
    S, _, M = _first_plans(counts, None, M, source, labeled=False)
    data = {"accept_histogram": np.bincount(S, minlength=M + 1).tolist(),
            "repairs": _repair_counts(repairs, k_max, source)}
    report = fit_report(data, M=M, k_max=k_max, policy=policy, j_min=float(j_min), eta=eta, seed=seed, source=source)
    return controller_arguments(report, policy, False, options.pop("source", "from_unlabeled"), **options)
